//! The running bridge: builds watchers, the journal, sinks and their delivery from a [`Config`] and stops
//! them in order. Entry point: [`start`]. `herald run` is this plus signals; benchmarks and tests embed it.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{self, ClusterSource, Config, Namespaces, ResourceConfig};
use crate::event::{self, Op};
use crate::journal::{Journal, JournalConfig, JournalError};
use crate::route::{Route, Router};
use crate::{delivery, watch};
use herald_sim::{LoadError, SimConfig, SimError, Simulator};

mod sinks;

pub use sinks::check_sink;

/// How long a stop waits for each watcher before abandoning it.
const WATCHER_STOP: Duration = Duration::from_secs(5);
/// Reads from the API server that take longer than this fail (a hung connection otherwise hangs a
/// watcher's list or get forever); longer than the watch timeout plus bookmarks need.
const API_READ_TIMEOUT: Duration = Duration::from_secs(360);

/// How often delivered events are removed from the journal.
const RETENTION_EVERY: Duration = Duration::from_secs(5);

/// Why the bridge could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The Kubernetes API cannot be configured or reached.
    #[error("cannot reach the cluster: {0}")]
    ClusterUnreachable(String),
    /// The embedded simulator could not start.
    #[error("cannot start the embedded cluster")]
    EmbeddedFailed(#[source] SimError),
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
}

/// A running bridge.
pub struct Running {
    admin: Option<(CancellationToken, JoinHandle<()>)>,
    /// Where the admin endpoint listens.
    pub admin_addr: std::net::SocketAddr,
    stop_watch: CancellationToken,
    stop_delivery: CancellationToken,
    watchers: Vec<JoinHandle<()>>,
    deliveries: Vec<JoinHandle<()>>,
    file_sinks: Vec<Arc<herald_sink_file::FileSink>>,
    journal: Journal,
    sim: Option<Simulator>,
    /// Health of each watcher, in configuration order, with its metric label (`widgets.example.com`,
    /// plus `/namespace` for a listed namespace).
    pub health: Vec<(String, Arc<watch::Health>)>,
    /// Delivery counters per sink name.
    pub stats: Vec<(String, Arc<delivery::Stats>)>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("watchers", &self.watchers.len())
            .field("sinks", &self.stats.len())
            .finish_non_exhaustive()
    }
}

fn op(e: config::EventType) -> Op {
    match e {
        config::EventType::Created => Op::Created,
        config::EventType::Updated => Op::Updated,
        config::EventType::Deleted => Op::Deleted,
    }
}

/// The router of a configuration's routes.
pub fn router(cfg: &Config) -> Router {
    Router::new(
        cfg.routes
            .iter()
            .map(|r| Route {
                resources: r.resources.clone(),
                ops: r.events.iter().copied().map(op).collect(),
                sinks: r.sinks.clone(),
            })
            .collect(),
    )
}

/// Runs one of herald's loops; if it ends (or panics) before its stop token fired, `/healthz` turns
/// unhealthy: a dead loop is what a liveness probe is for.
async fn guarded(
    alive: Arc<std::sync::atomic::AtomicBool>,
    stop: CancellationToken,
    task: impl std::future::Future<Output = ()>,
) {
    struct Guard(Arc<std::sync::atomic::AtomicBool>, CancellationToken);
    impl Drop for Guard {
        fn drop(&mut self) {
            if !self.1.is_cancelled() {
                self.0.store(false, std::sync::atomic::Ordering::SeqCst);
                tracing::error!(message = "A herald loop ended unexpectedly; /healthz now fails.");
            }
        }
    }
    let _guard = Guard(alive, stop);
    task.await;
}

/// A watcher's metric label: `plural.group` (or `Kind.group`), `/namespace` when limited to one.
fn watch_label(spec: &watch::WatchSpec) -> String {
    let name = spec
        .plural
        .as_deref()
        .or(spec.kind.as_deref())
        .unwrap_or("");
    let base = if spec.group.is_empty() {
        name.to_string()
    } else {
        format!("{name}.{}", spec.group)
    };
    match &spec.namespace {
        Some(ns) => format!("{base}/{ns}"),
        None => base,
    }
}

/// The watchers one `resources[i]` entry needs: one per listed namespace, else one.
pub fn watch_specs(cfg: &Config) -> Vec<watch::WatchSpec> {
    let mut out = Vec::new();
    for (index, r) in cfg.resources.iter().enumerate() {
        let template = resource_template(cfg, r);
        let base = watch::WatchSpec {
            index,
            group: r.group.clone(),
            version: r.version.clone(),
            kind: r.kind.clone(),
            plural: r.plural.clone(),
            namespace: None,
            namespace_selector: None,
            label_selector: r.label_selector.clone().filter(|s| !s.is_empty()),
            field_selector: r.field_selector.clone().filter(|s| !s.is_empty()),
            ops: r.events.iter().copied().map(op).collect(),
            initial_emit: r.initial_state == config::InitialState::Emit,
            skip_status_only_updates: r.skip_status_only_updates,
            template,
        };
        match &r.namespaces {
            Namespaces::All => out.push(base),
            Namespaces::Selector { selector } => {
                out.push(watch::WatchSpec {
                    namespace_selector: Some(selector.clone()),
                    ..base
                });
            }
            Namespaces::List(list) => {
                for ns in list {
                    out.push(watch::WatchSpec {
                        namespace: Some(ns.clone()),
                        ..base.clone()
                    });
                }
            }
        }
    }
    out
}

fn resource_template(cfg: &Config, r: &ResourceConfig) -> event::Resource {
    let payload = match &r.payload {
        config::PayloadParts::Reference => event::Payload::REFERENCE,
        config::PayloadParts::Parts(parts) => event::Payload {
            object: parts.contains(&config::PayloadPart::Object),
            old_object: parts.contains(&config::PayloadPart::OldObject),
            patch: parts.contains(&config::PayloadPart::Patch),
        },
    };
    event::Resource {
        cluster: cfg.cluster.name.clone(),
        group: r.group.clone(),
        version: r.version.clone().unwrap_or_default(),
        kind: r.kind.clone().unwrap_or_default(),
        plural: r.plural.clone().unwrap_or_default(),
        namespaced: true,
        type_prefix: r.type_prefix.clone(),
        payload,
        redact: r.redact.clone(),
        keep_managed_fields: r.keep_managed_fields,
    }
}

/// A client for the configured cluster (and the embedded simulator when that is the cluster).
pub async fn client(cfg: &Config) -> Result<(kube::Client, Option<Simulator>), StartError> {
    let unreachable = StartError::ClusterUnreachable;
    match &cfg.cluster.source {
        ClusterSource::Embedded(embedded) => {
            // The embedded cluster keeps its state beside the journal: its resourceVersions must never go
            // backwards under a stored checkpoint.
            let data = cfg.journal.path.join("embedded-cluster");
            let sim = Simulator::start(SimConfig::default().data_dir(data))
                .await
                .map_err(StartError::EmbeddedFailed)?;
            if let Some(file) = &embedded.load {
                sim.load_file(file)
                    .map_err(StartError::EmbeddedLoadFailed)?;
            }
            let c = sim.client().map_err(StartError::EmbeddedFailed)?;
            Ok((c, Some(sim)))
        }
        ClusterSource::InCluster => {
            let mut kc = kube::Config::incluster()
                .map_err(|e| unreachable(format!("in-cluster configuration: {e}")))?;
            kc.read_timeout = Some(API_READ_TIMEOUT);
            Ok((
                kube::Client::try_from(kc).map_err(|e| unreachable(e.to_string()))?,
                None,
            ))
        }
        ClusterSource::Kubeconfig(source) => {
            let options = kube::config::KubeConfigOptions {
                context: source.context.clone(),
                ..Default::default()
            };
            let mut kc = match &source.path {
                Some(path) => {
                    let file = kube::config::Kubeconfig::read_from(path)
                        .map_err(|e| unreachable(format!("kubeconfig {}: {e}", path.display())))?;
                    kube::Config::from_custom_kubeconfig(file, &options).await
                }
                None => kube::Config::from_kubeconfig(&options).await,
            }
            .map_err(|e| unreachable(format!("kubeconfig: {e}")))?;
            kc.read_timeout = Some(API_READ_TIMEOUT);
            Ok((
                kube::Client::try_from(kc).map_err(|e| unreachable(e.to_string()))?,
                None,
            ))
        }
    }
}

/// Starts the bridge: cluster client, journal, sinks and their delivery, then one watcher per resource
/// scope. `tuning` is for tests and benchmarks; `None` uses the defaults.
pub async fn start(cfg: &Config, tuning: Option<watch::Tuning>) -> Result<Running, StartError> {
    let admin_listener = crate::telemetry::admin::bind(cfg.admin.listen)
        .await
        .map_err(|source| StartError::AdminBindFailed {
            addr: cfg.admin.listen,
            source,
        })?;
    let (client, sim) = client(cfg).await?;
    let journal = Journal::open(JournalConfig {
        flush_interval: cfg.journal.flush_interval,
        flush_entries: usize::try_from(cfg.journal.flush_entries).unwrap_or(usize::MAX),
        retain: cfg.journal.retain,
        max_backlog: cfg.journal.max_backlog,
        ..JournalConfig::new(cfg.journal.path.clone())
    })
    .map_err(StartError::JournalFailed)?;
    // Cursors of sinks no longer configured would hold back retention and the backlog bound forever;
    // cursors of configured sinks are registered before any watcher appends, so a new sink starting at
    // the head still sees the first start's events.
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
    for sink in &cfg.sinks {
        journal
            .register_sink(&sink.name, sink.kind.start() == config::SinkStart::Earliest)
            .map_err(StartError::JournalFailed)?;
    }

    let router = Arc::new(router(cfg));

    let stop_delivery = CancellationToken::new();
    let alive = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let mut deliveries = Vec::new();
    let mut file_sinks = Vec::new();
    let mut stats = Vec::new();
    let mut built = Vec::new();
    for sink in &cfg.sinks {
        let s = sinks::build(sink)
            .await
            .map_err(|reason| StartError::SinkFailed {
                sink: sink.name.clone(),
                reason,
            })?;
        if let sinks::Built::File(f) = &s {
            file_sinks.push(f.clone());
        }
        built.push(s);
    }
    let oversize_dead_letter: Arc<std::collections::HashSet<String>> = Arc::new(
        cfg.resources
            .iter()
            .filter(|r| r.on_oversize == config::OnOversize::DeadLetter)
            .flat_map(|r| {
                let by_plural = r
                    .plural
                    .as_deref()
                    .map(|plural| event::source(&cfg.cluster.name, &r.group, plural));
                let by_kind = r.kind.as_deref().map(|kind| format!("{}/{kind}", r.group));
                by_plural.into_iter().chain(by_kind)
            })
            .collect(),
    );
    for (sink, s) in cfg.sinks.iter().zip(&built) {
        let st = Arc::new(delivery::Stats::default());
        stats.push((sink.name.clone(), st.clone()));
        let settings = delivery::Settings {
            max_dead_letters: cfg.journal.max_dead_letters,
            oversize_dead_letter: oversize_dead_letter.clone(),
            ..sinks::settings(&sink.kind)
        };
        deliveries.push(tokio::spawn(guarded(
            alive.clone(),
            stop_delivery.clone(),
            s.deliver(
                sink.name.clone(),
                journal.clone(),
                router.clone(),
                settings,
                sink.kind.start() == config::SinkStart::Earliest,
                stop_delivery.clone(),
                st.clone(),
            ),
        )));
        if let Some(target) = sink.kind.dead_letter_sink()
            && let Some(forward) = cfg
                .sinks
                .iter()
                .position(|c| c.name == target)
                .map(|i| built[i].forward())
        {
            deliveries.push(tokio::spawn(guarded(
                alive.clone(),
                stop_delivery.clone(),
                delivery::forward::run(
                    sink.name.clone(),
                    target.to_owned(),
                    forward,
                    journal.clone(),
                    st,
                    stop_delivery.clone(),
                ),
            )));
        }
    }

    let stop_watch = CancellationToken::new();
    let mut watchers = Vec::new();
    let mut health = Vec::new();
    for spec in watch_specs(cfg) {
        let h = Arc::new(watch::Health::default());
        health.push((watch_label(&spec), h.clone()));
        watchers.push(tokio::spawn(guarded(
            alive.clone(),
            stop_watch.clone(),
            watch::run(
                client.clone(),
                journal.clone(),
                spec,
                tuning.clone().unwrap_or_default(),
                stop_watch.clone(),
                h,
            ),
        )));
    }
    let retention = {
        let (journal, stop) = (journal.clone(), stop_delivery.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(RETENTION_EVERY) => {}
                }
                match journal.apply_retention() {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!(
                        message = "Retention removed delivered events.",
                        removed = n
                    ),
                    Err(error) => tracing::warn!(message = "Journal retention failed.", %error),
                }
            }
        })
    };
    deliveries.push(retention);
    let stop_admin = CancellationToken::new();
    let admin_addr = admin_listener
        .local_addr()
        .map_err(|source| StartError::AdminBindFailed {
            addr: cfg.admin.listen,
            source,
        })?;
    let admin_state = crate::telemetry::admin::AdminState {
        watchers: health.clone(),
        sinks: stats.clone(),
        journal: journal.clone(),
        alive: alive.clone(),
        router: router.clone(),
        token: match &cfg.admin.token {
            Some(secret) => Some(
                secret
                    .resolve()
                    .map_err(|e| StartError::AdminTokenFailed(e.to_string()))?,
            ),
            None => None,
        },
    };
    let admin = tokio::spawn(crate::telemetry::admin::serve(
        admin_listener,
        admin_state,
        stop_admin.clone(),
    ));
    tracing::info!(message = "Admin endpoint listening.", addr = %admin_addr);
    tracing::info!(
        message = "herald running.",
        resources = cfg.resources.len(),
        sinks = cfg.sinks.len()
    );
    Ok(Running {
        admin: Some((stop_admin, admin)),
        admin_addr,
        stop_watch,
        stop_delivery,
        watchers,
        deliveries,
        file_sinks,
        journal,
        sim,
        health,
        stats,
    })
}

impl Running {
    /// Whether every watcher has listed and is watching.
    pub fn synced(&self) -> bool {
        self.health
            .iter()
            .all(|(_, h)| h.synced.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// Events delivered across all sinks.
    pub fn delivered(&self) -> u64 {
        self.stats
            .iter()
            .map(|(_, s)| s.delivered.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    }

    /// The journal (for status and benchmarks).
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// The embedded simulator, when the cluster is `embedded`.
    pub fn embedded(&self) -> Option<&Simulator> {
        self.sim.as_ref()
    }

    /// Stops in order: watches first (nothing new is journaled), then delivery drains what was journaled
    /// (at most `drain_timeout`), file sinks sync, the journal flushes and closes.
    pub async fn stop(self, drain_timeout: Duration) -> Result<(), JournalError> {
        self.stop_watch.cancel();
        for w in self.watchers {
            // A watcher stuck in a request to an unreachable API server must not hold the stop: what it
            // had was already journaled.
            let abort = w.abort_handle();
            if tokio::time::timeout(WATCHER_STOP, w).await.is_err() {
                abort.abort();
            }
        }
        self.stop_delivery.cancel();
        let drained =
            tokio::time::timeout(drain_timeout, futures::future::join_all(self.deliveries)).await;
        if drained.is_err() {
            tracing::warn!(
                message = "Drain timed out; the rest stays journaled for the next start."
            );
        }
        for s in &self.file_sinks {
            if let Err(error) = s.sync() {
                tracing::warn!(message = "Final sync of a file sink failed.", %error);
            }
        }
        self.journal.close().await?;
        if let Some((stop, task)) = self.admin {
            stop.cancel();
            let _ = task.await;
        }
        if let Some(sim) = self.sim {
            sim.shutdown().await;
        }
        Ok(())
    }
}

/// `error: cause: cause`.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
