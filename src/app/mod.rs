//! The running bridge: from a [`Config`] to a journal, a cluster client and a [`Supervisor`] that runs
//! the watchers, sinks and deliveries, and back down in order. Entry point: [`start`]. `herald run` is
//! this plus signals; benchmarks and tests embed it.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use herald_sim::{LoadError, SimError, Simulator};

use crate::config::{ClusterSource, Config};
use crate::delivery;
use crate::journal::{self, Journal, JournalConfig, JournalError};
use crate::route::Router;
use crate::watch::{self, WatchSpec};

mod cluster;
mod deferred;
mod group;
mod reload;
mod sinks;
mod supervisor;

pub use cluster::{Cluster, client};
pub use reload::{
    ConfigStatus, POLL_EVERY, ReloadError, ReloadReply, ReloadRequests, Reloader, needs_restart,
};
pub use sinks::check_sink;
pub use supervisor::{DeliveryBase, Registry, Supervisor, SupervisorError};

/// Why the bridge could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The Kubernetes API cannot be configured or reached.
    #[error("cannot reach the cluster: {0}")]
    ClusterUnreachable(String),
    /// The embedded simulator could not start.
    #[error("cannot start the embedded cluster")]
    EmbeddedFailed(#[source] SimError),
    /// The embedded cluster's state belongs to a herald running on the same journal.
    #[error(
        "the embedded cluster's state in {path} is in use by a herald running on that journal; \
         stop it first, or ask the running one (`herald status`)"
    )]
    EmbeddedInUse {
        /// The journal directory.
        path: std::path::PathBuf,
    },
    /// The embedded cluster's `load` file could not be applied.
    #[error("cannot load the embedded cluster's objects")]
    EmbeddedLoadFailed(#[source] LoadError),
    /// The journal could not be opened.
    #[error("cannot open the journal")]
    JournalFailed(#[source] JournalError),
    /// The admin endpoint's address could not be bound.
    #[error("cannot listen on the admin address {addr}")]
    AdminBindFailed {
        /// The address.
        addr: std::net::SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The admin token's secret could not be read.
    #[error("cannot read admin.token: {0}")]
    AdminTokenFailed(String),
    /// A sink could not be set up.
    #[error("sink {sink:?} failed its health check: {reason}")]
    SinkFailed {
        /// The sink's name.
        sink: String,
        /// What went wrong.
        reason: String,
    },
    /// The configuration broke a rule validation should have caught (it was built in code).
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl From<SupervisorError> for StartError {
    fn from(e: SupervisorError) -> Self {
        match e {
            SupervisorError::SinkFailed { sink, reason } => Self::SinkFailed { sink, reason },
            SupervisorError::CursorFailed { source, .. } => Self::JournalFailed(source),
            other @ (SupervisorError::WatcherExists(_)
            | SupervisorError::NoSuchWatcher(_)
            | SupervisorError::SinkExists(_)
            | SupervisorError::NoSuchSink(_)) => Self::Invalid(other.to_string()),
        }
    }
}

/// Starts the bridge: cluster client, journal, sinks and their delivery, then one watcher per resource
/// scope. `tuning` is for tests and benchmarks; `None` uses the defaults.
pub async fn start(cfg: &Config, tuning: Option<watch::Tuning>) -> Result<Running, StartError> {
    let admin = crate::admin::bind(cfg.admin.listen)
        .await
        .and_then(|listener| Ok((axum::serve::Listener::local_addr(&listener)?, listener)))
        .map_err(|source| StartError::AdminBindFailed {
            addr: cfg.admin.listen,
            source,
        })?;
    let token = cfg
        .admin
        .token
        .as_ref()
        .map(|secret| secret.resolve())
        .transpose()
        .map_err(|e| StartError::AdminTokenFailed(e.to_string()))?;
    // The journal first: its lock keeps a second herald off the embedded cluster's state, which
    // lives in the journal directory, and a directory that cannot be written is the journal's
    // failure (exit 12), not the cluster's. Any other cluster's client is built while the journal
    // opens (building it asks nothing of the API server, but TLS set-up alone can take ~10 ms, a
    // fifth of a restart's time to its first event); its error still counts only once the journal
    // opened.
    let (opened, cluster) = match &cfg.cluster.source {
        ClusterSource::Embedded(_) => (open_journal(cfg).await, None),
        ClusterSource::InCluster | ClusterSource::Kubeconfig(_) => {
            let (opened, cluster) = tokio::join!(open_journal(cfg), client(cfg));
            (opened, Some(cluster))
        }
    };
    let journal = opened.map_err(|e| {
        // A full disk at start says what it says at run time: the path, the OS's words, what to do.
        StartError::JournalFailed(
            match journal::WriteFailure::out_of_space(&cfg.journal.path, &e) {
                Some(failure) => JournalError::Unwritable(Arc::new(failure)),
                None => e,
            },
        )
    })?;
    let Cluster { client, sim, .. } = match cluster {
        Some(cluster) => cluster?,
        None => client(cfg).await?,
    };
    drop_stale_cursors(&journal, cfg)?;
    let election = cfg
        .leader_election
        .enabled
        .then(|| crate::leader::Settings::from_config(&cfg.leader_election));
    let leadership = election
        .as_ref()
        .map(|settings| crate::leader::prepare(settings, &journal));
    let election_client = client.clone();

    let base = DeliveryBase::from_config(cfg);
    let router = Router::from_config(&cfg.routes).map_err(StartError::Invalid)?;
    let mut supervisor = Supervisor::new(
        client,
        journal.clone(),
        router,
        base,
        tuning.unwrap_or_default(),
    );
    if let Some(leadership) = &leadership {
        supervisor.set_gate(leadership.gate());
    }
    if let Err(e) = start_all(&mut supervisor, cfg).await {
        supervisor.stop(Duration::ZERO).await;
        return Err(e);
    }
    let election = election.zip(leadership).map(|(settings, leadership)| {
        crate::leader::start(
            settings,
            election_client,
            journal.clone(),
            supervisor.router().clone(),
            leadership,
        )
    });

    let stop_retention = CancellationToken::new();
    let retention = tokio::spawn(journal::retention::run(
        journal.clone(),
        journal::retention::EVERY,
        stop_retention.clone(),
    ));
    let (admin_addr, listener) = admin;
    let config_status = Arc::new(ConfigStatus::default());
    // A few requests may wait: each gets the outcome of the reload that serves it.
    let (reload_tx, reload_rx) = tokio::sync::mpsc::channel(8);
    let stop_admin = CancellationToken::new();
    let admin_task = tokio::spawn(crate::admin::serve(
        listener,
        crate::admin::AdminState {
            registry: supervisor.registry().clone(),
            journal: journal.clone(),
            alive: supervisor.alive().clone(),
            router: supervisor.router().clone(),
            token,
            config: config_status.clone(),
            reload: Some(reload_tx),
            leadership: election.as_ref().map(|e| e.leadership.clone()),
        },
        stop_admin.clone(),
    ));
    tracing::info!(message = "Admin endpoint listening.", addr = %admin_addr);
    tracing::info!(
        message = "herald running.",
        resources = cfg.resources.len(),
        sinks = cfg.sinks.len()
    );
    Ok(Running {
        supervisor,
        admin: (stop_admin, admin_task),
        admin_addr,
        retention: (stop_retention, retention),
        journal,
        sim,
        config_status,
        reload_requests: Some(reload_rx),
        election,
    })
}

/// Opens the journal. The open reads and checks every entry (seconds for a large journal): off the
/// runtime's worker threads. A panic in it stays a panic, as it would inline.
async fn open_journal(cfg: &Config) -> Result<Journal, JournalError> {
    let journal_cfg = JournalConfig::from_settings(&cfg.journal);
    match tokio::task::spawn_blocking(move || Journal::open(journal_cfg)).await {
        Ok(opened) => opened,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(JournalError::Closed),
    }
}

/// Sinks first, all built and health-checked before any delivers: their cursors must exist before
/// any watcher appends, or a new sink starting at the head would miss the first start's events.
async fn start_all(supervisor: &mut Supervisor, cfg: &Config) -> Result<(), StartError> {
    supervisor.add_sinks(&cfg.sinks).await?;
    for spec in WatchSpec::from_config(cfg) {
        supervisor.add_watcher(spec)?;
    }
    Ok(())
}

/// Drops the cursors of sinks no longer configured: they would hold back retention and the backlog
/// bound forever.
fn drop_stale_cursors(journal: &Journal, cfg: &Config) -> Result<(), StartError> {
    for stale in journal
        .sinks()
        .into_iter()
        .filter(|s| !cfg.sinks.iter().any(|c| c.name == *s))
    {
        tracing::warn!(message = "Dropping the cursor of a sink that is no longer configured.", sink = %stale);
        journal
            .remove_sink(&stale)
            .map_err(StartError::JournalFailed)?;
    }
    Ok(())
}

/// A running bridge.
pub struct Running {
    supervisor: Supervisor,
    admin: (CancellationToken, JoinHandle<()>),
    /// Where the admin endpoint listens.
    pub admin_addr: std::net::SocketAddr,
    retention: (CancellationToken, JoinHandle<()>),
    journal: Journal,
    sim: Option<Simulator>,
    config_status: Arc<ConfigStatus>,
    reload_requests: Option<ReloadRequests>,
    /// Leader election, when on: stopped after the deliveries (a leader releases the Lease).
    election: Option<crate::leader::Running>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("supervisor", &self.supervisor)
            .finish_non_exhaustive()
    }
}

impl Running {
    /// Whether every watcher has listed and is watching.
    pub fn synced(&self) -> bool {
        self.health()
            .iter()
            .all(|(_, h)| h.synced.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// Events delivered across all sinks.
    pub fn delivered(&self) -> u64 {
        self.stats()
            .iter()
            .map(|(_, s)| s.delivered.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    }

    /// Health of each watcher, in the order they were added, with its label (`widgets.example.com`,
    /// plus `/namespace` for a listed namespace).
    pub fn health(&self) -> Vec<(String, Arc<watch::Health>)> {
        self.supervisor.registry().watchers()
    }

    /// Delivery counters per sink name, in the order the sinks were added.
    pub fn stats(&self) -> Vec<(String, Arc<delivery::Stats>)> {
        self.supervisor.registry().sinks()
    }

    /// The running set, to add or remove watchers, sinks and routes while herald runs.
    pub fn supervisor(&mut self) -> &mut Supervisor {
        &mut self.supervisor
    }

    /// What `/status` and `/metrics` show of the configuration in force, for a [`Reloader`].
    pub fn config_status(&self) -> &Arc<ConfigStatus> {
        &self.config_status
    }

    /// The reloads asked for through the admin endpoint (`POST /reload`), for the loop that runs
    /// the [`Reloader`]; `None` once taken. Without a taker such a request gets no answer.
    pub fn take_reload_requests(&mut self) -> Option<ReloadRequests> {
        self.reload_requests.take()
    }

    /// Leader election's role and holder, when it is on.
    pub fn leadership(&self) -> Option<&Arc<crate::leader::Leadership>> {
        self.election.as_ref().map(|e| &e.leadership)
    }

    /// The journal (for status and benchmarks).
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// The embedded simulator, when the cluster is `embedded`.
    pub fn embedded(&self) -> Option<&Simulator> {
        self.sim.as_ref()
    }

    /// Stops in order: watchers first (nothing new is journaled), then delivery drains what was
    /// journaled (at most `drain_timeout`), sinks close, the journal flushes and closes.
    pub async fn stop(self, drain_timeout: Duration) -> Result<(), JournalError> {
        self.shutdown(drain_timeout, async {}).await
    }

    /// Resolves when a journal write fails (a full disk, an I/O error): from then on nothing more
    /// can be journaled or acknowledged in this process (see [`journal::WriteFailure`]).
    pub async fn journal_failed(&self) -> Arc<journal::WriteFailure> {
        self.journal.write_failed().await
    }

    /// Stops after the journal failed: watchers and deliveries at once (without a drain: no cursor
    /// can move any more, so whatever they did would be redone after the restart anyway), sinks
    /// close; the admin endpoint keeps answering (`/healthz` 503 with the cause) until `hold`
    /// resolves, so that a probe or a scrape in flight sees why herald goes away.
    pub async fn stop_after_journal_failure(self, hold: impl std::future::Future<Output = ()>) {
        if let Err(error) = self.shutdown(Duration::ZERO, hold).await {
            // Expected: the journal refuses the final flush it cannot make.
            tracing::debug!(message = "Journal not closed cleanly.", %error);
        }
    }

    async fn shutdown(
        self,
        drain_timeout: Duration,
        hold: impl std::future::Future<Output = ()>,
    ) -> Result<(), JournalError> {
        self.supervisor.stop(drain_timeout).await;
        if let Some(election) = self.election {
            election.stop().await;
        }
        let (stop, task) = self.retention;
        stop.cancel();
        let _ = task.await;
        hold.await;
        let closed = self.journal.close().await;
        let (stop, task) = self.admin;
        stop.cancel();
        let _ = task.await;
        if let Some(sim) = self.sim {
            sim.shutdown().await;
        }
        closed
    }
}
