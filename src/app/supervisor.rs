//! The running set: the supervisor owns every watcher, sink and delivery loop, and the router they
//! share. Entry point: [`Supervisor`].
//!
//! Start-up is a sequence of `add_*` calls on it, and so is any later change: a watcher started
//! for a CRD that appeared, a sink added or removed by a reloaded configuration, routes replaced.
//! Every task it starts runs under [`guarded`], so a loop that dies on its own turns `/healthz`
//! unhealthy, while a loop the supervisor stopped on purpose does not.
//!
//! Stop order matters for the journal's promise: watchers first (nothing new is journaled), then
//! deliveries drain what was journaled, then sinks close (the file sink syncs).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::sinks::{self, Built};
use crate::config::{SinkConfig, SinkStart};
use crate::delivery;
use crate::journal::{Journal, JournalError};
use crate::route::{Route, Router};
use crate::watch::{self, WatchSpec};

/// How long removing (or stopping) a watcher waits for it before abandoning it: a watcher stuck in
/// a request to an unreachable API server must not hold anything up, as what it had is journaled.
const WATCHER_STOP: Duration = Duration::from_secs(5);

/// Why the supervisor refused a change.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// A watcher with this label already runs.
    #[error("a watcher for {0} already runs")]
    WatcherExists(String),
    /// No watcher has this label.
    #[error("no watcher for {0} runs")]
    NoSuchWatcher(String),
    /// A sink with this name already runs.
    #[error("a sink named {0:?} already runs")]
    SinkExists(String),
    /// No sink has this name.
    #[error("no sink named {0:?} runs")]
    NoSuchSink(String),
    /// A sink could not be built or failed its health check.
    #[error("sink {sink:?} failed its health check: {reason}")]
    SinkFailed {
        /// The sink's name.
        sink: String,
        /// What went wrong.
        reason: String,
    },
    /// The journal refused to register or drop a sink's cursor.
    #[error("cannot update the journal's cursor of sink {sink:?}")]
    CursorFailed {
        /// The sink's name.
        sink: String,
        /// The journal's error.
        #[source]
        source: JournalError,
    },
}

/// What the admin endpoint and `herald status` read of the running set, in the order things were
/// added (configuration order at start-up). Shared, so it shows additions and removals as they
/// happen.
#[derive(Debug, Default)]
pub struct Registry {
    watchers: Listed<watch::Health>,
    sinks: Listed<delivery::Stats>,
}

impl Registry {
    /// A registry holding these entries (for an admin endpoint without a supervisor, in tests).
    pub fn new(
        watchers: Vec<(String, Arc<watch::Health>)>,
        sinks: Vec<(String, Arc<delivery::Stats>)>,
    ) -> Self {
        Self {
            watchers: Listed(RwLock::new(watchers)),
            sinks: Listed(RwLock::new(sinks)),
        }
    }

    /// Each running watcher's label and health.
    pub fn watchers(&self) -> Vec<(String, Arc<watch::Health>)> {
        self.watchers.snapshot()
    }

    /// Each running sink's name and delivery counters.
    pub fn sinks(&self) -> Vec<(String, Arc<delivery::Stats>)> {
        self.sinks.snapshot()
    }

    /// Whether a sink of this name runs.
    pub fn has_sink(&self, name: &str) -> bool {
        self.sinks.contains(name)
    }

    /// Lists a watcher a group pattern started, in place of any entry of that label a stopped
    /// pattern left behind (a pattern abandoned while stopping cannot unlist its watchers).
    pub(super) fn add_watcher(&self, label: String, health: Arc<watch::Health>) {
        self.watchers.remove(&label);
        self.watchers.push(label, health);
    }

    /// Unlists a watcher a group pattern stopped.
    pub(super) fn remove_watcher(&self, label: &str) {
        self.watchers.remove(label);
    }
}

/// Named entries in insertion order, read far more often than changed.
#[derive(Debug)]
struct Listed<T>(RwLock<Vec<(String, Arc<T>)>>);

impl<T> Default for Listed<T> {
    fn default() -> Self {
        Self(RwLock::default())
    }
}

impl<T> Listed<T> {
    fn snapshot(&self) -> Vec<(String, Arc<T>)> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn contains(&self, name: &str) -> bool {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|(n, _)| n == name)
    }

    fn push(&self, name: String, value: Arc<T>) {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push((name, value));
    }

    fn remove(&self, name: &str) {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(n, _)| n != name);
    }
}

/// A task the supervisor can stop on its own.
#[derive(Debug)]
struct Task {
    stop: CancellationToken,
    handle: JoinHandle<()>,
}

#[derive(Debug)]
struct WatcherSlot {
    label: String,
    task: Task,
}

struct SinkSlot {
    name: String,
    sink: Built,
    /// `deadLetterSink`: where this sink's dead letters are forwarded, when that sink runs.
    dead_letter_sink: Option<String>,
    stats: Arc<delivery::Stats>,
    delivery: Task,
    /// The forwarder of this sink's dead letters to `dead_letter_sink`, while both run.
    forward: Option<Task>,
}

/// What every sink's delivery shares, whatever the sink; its own keys are laid over the defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeliveryBase {
    /// Dead letters kept per sink at most (`journal.maxDeadLetters`).
    pub max_dead_letters: usize,
    /// What happens to events too large for a sink, per resource (`onOversize`).
    pub oversize: delivery::OversizePolicy,
}

impl DeliveryBase {
    /// The shared delivery settings `cfg` gives (`journal.maxDeadLetters`, each resource's
    /// `onOversize`).
    pub fn from_config(cfg: &crate::config::Config) -> Self {
        Self {
            max_dead_letters: cfg.journal.max_dead_letters,
            oversize: delivery::OversizePolicy::from_resources(&cfg.resources),
        }
    }
}

/// Owns the running watchers, sinks and deliveries, and the router they share.
pub struct Supervisor {
    client: kube::Client,
    journal: Journal,
    router: Arc<Router>,
    tuning: watch::Tuning,
    base: DeliveryBase,
    alive: Arc<AtomicBool>,
    registry: Arc<Registry>,
    /// Parent of every watcher's token: one cancel stops them all.
    stop_watch: CancellationToken,
    /// Parent of every delivery's and forwarder's token.
    stop_delivery: CancellationToken,
    watchers: Vec<WatcherSlot>,
    sinks: Vec<SinkSlot>,
    /// Leader election: deliveries and forwarders run only while it is open.
    gate: Option<crate::leader::Gate>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("watchers", &self.watchers.len())
            .field("sinks", &self.sinks.len())
            .finish_non_exhaustive()
    }
}

impl Supervisor {
    /// A supervisor with nothing running yet. `base` carries what every sink's delivery shares
    /// (dead-letter bound, oversize policy); each sink's own options are laid over it.
    pub fn new(
        client: kube::Client,
        journal: Journal,
        router: Router,
        base: DeliveryBase,
        tuning: watch::Tuning,
    ) -> Self {
        Self {
            client,
            journal,
            router: Arc::new(router),
            tuning,
            base,
            alive: Arc::new(AtomicBool::new(true)),
            registry: Arc::default(),
            stop_watch: CancellationToken::new(),
            stop_delivery: CancellationToken::new(),
            watchers: Vec::new(),
            sinks: Vec::new(),
            gate: None,
        }
    }

    /// Leader election: sinks started from now on deliver only while `gate` is open (ADR 0013).
    pub fn set_gate(&mut self, gate: crate::leader::Gate) {
        self.gate = Some(gate);
    }

    /// `task` as is, or behind the leader election's gate: `make` builds it again each time the
    /// gate opens.
    /// `abandon` runs each time the gate closes, after the task was dropped.
    fn behind_gate<F, A>(
        &self,
        stop: &CancellationToken,
        name: &str,
        make: F,
        abandon: A,
    ) -> BoxFuture<'static, ()>
    where
        F: Fn() -> BoxFuture<'static, ()> + Send + 'static,
        A: Fn() -> BoxFuture<'static, ()> + Send + 'static,
    {
        match &self.gate {
            None => make(),
            Some(gate) => Box::pin(crate::leader::gated(
                gate.clone(),
                stop.clone(),
                name.to_owned(),
                make,
                abandon,
            )),
        }
    }

    /// Starts a watcher; its label ([`WatchSpec::label`]) names it from now on.
    ///
    /// # Errors
    /// [`SupervisorError::WatcherExists`] when a watcher with the same label runs: two watchers of one
    /// stream would race for its checkpoint.
    pub fn add_watcher(&mut self, spec: WatchSpec) -> Result<(), SupervisorError> {
        let label = spec.label();
        if self.watchers.iter().any(|w| w.label == label) {
            return Err(SupervisorError::WatcherExists(label));
        }
        let health = Arc::new(watch::Health::default());
        let stop = self.stop_watch.child_token();
        let handle = if spec.kinds.is_some() {
            // A group pattern: a set of watchers, one per matching CRD, that changes as CRDs do.
            let ctx = super::group::Context {
                client: self.client.clone(),
                journal: self.journal.clone(),
                tuning: self.tuning.clone(),
                alive: self.alive.clone(),
                registry: self.registry.clone(),
            };
            tokio::spawn(guarded(
                self.alive.clone(),
                stop.clone(),
                super::group::run(ctx, spec, stop.clone(), health.clone()),
            ))
        } else {
            tokio::spawn(guarded(
                self.alive.clone(),
                stop.clone(),
                watch::run(
                    self.client.clone(),
                    self.journal.clone(),
                    spec,
                    self.tuning.clone(),
                    stop.clone(),
                    health.clone(),
                ),
            ))
        };
        self.registry.watchers.push(label.clone(), health);
        self.watchers.push(WatcherSlot {
            label,
            task: Task { stop, handle },
        });
        Ok(())
    }

    /// Stops the watcher with this label. Its checkpoint stays in the journal, so adding it again
    /// resumes where it stopped.
    ///
    /// # Errors
    /// [`SupervisorError::NoSuchWatcher`].
    pub async fn remove_watcher(&mut self, label: &str) -> Result<(), SupervisorError> {
        let i = self
            .watchers
            .iter()
            .position(|w| w.label == label)
            .ok_or_else(|| SupervisorError::NoSuchWatcher(label.to_owned()))?;
        let slot = self.watchers.remove(i);
        self.registry.watchers.remove(label);
        slot.task.stop.cancel();
        stop_watcher(slot.task.handle).await;
        Ok(())
    }

    /// Builds a sink, runs its health check, registers its cursor and starts its delivery, and the
    /// forwarding of dead letters from or to it when both ends run.
    ///
    /// # Errors
    /// As [`Supervisor::add_sinks`].
    pub async fn add_sink(&mut self, cfg: &SinkConfig) -> Result<(), SupervisorError> {
        self.add_sinks(std::slice::from_ref(cfg)).await
    }

    /// Adds several sinks at once: every one is built and health-checked before any starts, so one
    /// that fails leaves nothing delivering (a start fails as a whole). A sink whose target is only
    /// unreachable (refused, timed out, DNS: what waiting may fix) is no failure: it starts paused,
    /// probing until its target answers, with a warning naming it and the cause.
    ///
    /// # Errors
    /// [`SupervisorError::SinkExists`] or [`SupervisorError::SinkFailed`] (nothing is started), or
    /// [`SupervisorError::CursorFailed`] (the sinks before it were started).
    pub async fn add_sinks(&mut self, cfgs: &[SinkConfig]) -> Result<(), SupervisorError> {
        for (i, cfg) in cfgs.iter().enumerate() {
            if self.sinks.iter().any(|s| s.name == cfg.name)
                || cfgs[..i].iter().any(|c| c.name == cfg.name)
            {
                return Err(SupervisorError::SinkExists(cfg.name.clone()));
            }
        }
        let mut built = Vec::with_capacity(cfgs.len());
        for cfg in cfgs {
            match sinks::build(cfg).await {
                Ok((sink, unreachable)) => {
                    if let Some(reason) = &unreachable {
                        tracing::warn!(
                            message = "Sink target unreachable; starting the sink paused, probing until it answers.",
                            sink = %cfg.name,
                            error = %reason
                        );
                    }
                    built.push((sink, unreachable));
                }
                Err(reason) => {
                    // Built but never started: what they opened (a file, a connection) goes now.
                    for (sink, _) in built {
                        sink.close().await;
                    }
                    return Err(SupervisorError::SinkFailed {
                        sink: cfg.name.clone(),
                        reason,
                    });
                }
            }
        }
        let mut built = built.into_iter();
        for cfg in cfgs {
            let Some((sink, unreachable)) = built.next() else {
                break;
            };
            if let Err(e) = self.start_sink(cfg, sink, unreachable).await {
                for (sink, _) in built {
                    sink.close().await;
                }
                return Err(e);
            }
        }
        self.wire_forwards();
        Ok(())
    }

    /// Registers a built sink's cursor and starts its delivery, paused when its target was
    /// `unreachable` (why).
    async fn start_sink(
        &mut self,
        cfg: &SinkConfig,
        sink: Built,
        unreachable: Option<String>,
    ) -> Result<(), SupervisorError> {
        let from_start = cfg.delivery.start == SinkStart::Earliest;
        // Registered before the delivery starts (and, at start-up, before any watcher appends), so
        // a sink starting at the head still sees every event journaled after this call.
        if let Err(source) = self.journal.register_sink(&cfg.name, from_start) {
            sink.close().await;
            return Err(SupervisorError::CursorFailed {
                sink: cfg.name.clone(),
                source,
            });
        }
        let stats = Arc::new(delivery::Stats::default());
        let start_paused = unreachable.is_some();
        if let Some(reason) = unreachable {
            stats.pause(format!("unreachable since start: {reason}"));
        }
        let stop = self.stop_delivery.child_token();
        let settings = delivery::Settings {
            max_dead_letters: self.base.max_dead_letters,
            oversize: self.base.oversize.clone(),
            start_paused,
            ..sinks::settings(cfg)
        };
        let make = {
            let (sink, name, journal, router, stop, stats) = (
                sink.clone(),
                cfg.name.clone(),
                self.journal.clone(),
                self.router.clone(),
                stop.clone(),
                stats.clone(),
            );
            move || {
                sink.deliver(
                    name.clone(),
                    journal.clone(),
                    router.clone(),
                    settings.clone(),
                    from_start,
                    stop.clone(),
                    stats.clone(),
                )
            }
        };
        let handle = tokio::spawn(guarded(
            self.alive.clone(),
            stop.clone(),
            self.behind_gate(&stop, &cfg.name, make, {
                let sink = sink.clone();
                move || -> BoxFuture<'static, ()> {
                    let sink = sink.clone();
                    Box::pin(async move { sink.abandon().await })
                }
            }),
        ));
        self.registry.sinks.push(cfg.name.clone(), stats.clone());
        self.sinks.push(SinkSlot {
            name: cfg.name.clone(),
            sink,
            dead_letter_sink: cfg.delivery.dead_letter_sink.clone(),
            stats,
            delivery: Task { stop, handle },
            forward: None,
        });
        Ok(())
    }

    /// Stops a sink: its delivery drains what was journaled for it (at most `drain_timeout`), the
    /// forwarding from and to it stops, the sink closes, and its cursor leaves the journal so it no
    /// longer holds back retention. Its dead letters stay until purged.
    ///
    /// # Errors
    /// [`SupervisorError::NoSuchSink`], or [`SupervisorError::CursorFailed`] once it has stopped.
    pub async fn remove_sink(
        &mut self,
        name: &str,
        drain_timeout: Duration,
    ) -> Result<(), SupervisorError> {
        self.detach_sink(name, drain_timeout).await?;
        self.journal
            .remove_sink(name)
            .map_err(|source| SupervisorError::CursorFailed {
                sink: name.to_owned(),
                source,
            })
    }

    /// Stops a sink as [`Supervisor::remove_sink`] does but keeps its cursor in the journal: a sink
    /// added again under the same name resumes where this one stopped (a reload that changes a
    /// sink, or removes one that may come back within `journal.retain`).
    ///
    /// # Errors
    /// [`SupervisorError::NoSuchSink`].
    pub async fn detach_sink(
        &mut self,
        name: &str,
        drain_timeout: Duration,
    ) -> Result<(), SupervisorError> {
        let i = self
            .sinks
            .iter()
            .position(|s| s.name == name)
            .ok_or_else(|| SupervisorError::NoSuchSink(name.to_owned()))?;
        let mut slot = self.sinks.remove(i);
        self.registry.sinks.remove(name);
        let mut tasks: Vec<Task> = slot.forward.take().into_iter().collect();
        // Forwarders into this sink lose their target.
        for other in &mut self.sinks {
            if other.dead_letter_sink.as_deref() == Some(name) {
                tasks.extend(other.forward.take());
            }
        }
        tasks.push(slot.delivery);
        for task in &tasks {
            task.stop.cancel();
        }
        if !drain(tasks.into_iter().map(|t| t.handle), drain_timeout).await {
            tracing::warn!(message = "Drain timed out; the removed sink missed what it had not delivered.", sink = %name);
        }
        slot.sink.close().await;
        Ok(())
    }

    /// Replaces what every sink's delivery shares; sinks added from now on get it (a running
    /// delivery keeps the base it started with).
    pub fn set_base(&mut self, base: DeliveryBase) {
        self.base = base;
    }

    /// Replaces every route; deliveries apply them to the events they read from the journal from now
    /// on (a window of events already read goes as the old routes said).
    pub fn set_routes(&self, routes: Vec<Route>) {
        self.router.replace(routes);
    }

    /// Starts each missing forwarder whose two ends run.
    fn wire_forwards(&mut self) {
        for i in 0..self.sinks.len() {
            if self.sinks[i].forward.is_some() {
                continue;
            }
            let Some(target) = self.sinks[i].dead_letter_sink.clone() else {
                continue;
            };
            let Some(forward) = self
                .sinks
                .iter()
                .find(|s| s.name == target)
                .map(|s| s.sink.forward())
            else {
                continue;
            };
            let source = &self.sinks[i];
            let stop = self.stop_delivery.child_token();
            let make = {
                let (name, journal, stats, stop) = (
                    source.name.clone(),
                    self.journal.clone(),
                    source.stats.clone(),
                    stop.clone(),
                );
                move || -> BoxFuture<'static, ()> {
                    Box::pin(delivery::forward::run(
                        name.clone(),
                        target.clone(),
                        forward.clone(),
                        journal.clone(),
                        stats.clone(),
                        stop.clone(),
                    ))
                }
            };
            // The target's own delivery, gated too, purges what its client still holds.
            let task = self.behind_gate(&stop, &source.name, make, || -> BoxFuture<'static, ()> {
                Box::pin(async {})
            });
            let handle = tokio::spawn(guarded(self.alive.clone(), stop.clone(), task));
            self.sinks[i].forward = Some(Task { stop, handle });
        }
    }

    /// The router every delivery asks.
    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// What the admin endpoint reads of the running set.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Turns false when a loop ended on its own (or panicked): what `/healthz` reports.
    pub fn alive(&self) -> &Arc<AtomicBool> {
        &self.alive
    }

    /// The labels of the running watchers, in the order they were added.
    pub fn watcher_labels(&self) -> Vec<String> {
        self.watchers.iter().map(|w| w.label.clone()).collect()
    }

    /// The names of the running sinks, in the order they were added.
    pub fn sink_names(&self) -> Vec<String> {
        self.sinks.iter().map(|s| s.name.clone()).collect()
    }

    /// Stops everything in order: watchers (nothing new is journaled), then deliveries and
    /// forwarders drain what was journaled (at most `drain_timeout`), then every sink closes.
    pub async fn stop(self, drain_timeout: Duration) {
        self.stop_watch.cancel();
        for w in self.watchers {
            stop_watcher(w.task.handle).await;
        }
        self.stop_delivery.cancel();
        let mut handles = Vec::new();
        let mut built = Vec::new();
        for s in self.sinks {
            handles.push(s.delivery.handle);
            handles.extend(s.forward.map(|f| f.handle));
            built.push(s.sink);
        }
        if !drain(handles, drain_timeout).await {
            tracing::warn!(
                message = "Drain timed out; the rest stays journaled for the next start."
            );
        }
        for sink in built {
            sink.close().await;
        }
    }
}

/// Waits for a stopped watcher, at most [`WATCHER_STOP`], then aborts it and waits for that, so a
/// watcher added again never overlaps the one it replaces.
async fn stop_watcher(mut handle: JoinHandle<()>) {
    if tokio::time::timeout(WATCHER_STOP, &mut handle)
        .await
        .is_err()
    {
        handle.abort();
        let _ = handle.await;
    }
}

/// Waits for stopped deliveries to finish what was journaled when they were stopped, at most
/// `timeout`, then aborts the rest: what they did not deliver stays journaled behind the cursor.
/// Returns whether everything finished in time.
async fn drain(handles: impl IntoIterator<Item = JoinHandle<()>>, timeout: Duration) -> bool {
    let mut handles: Vec<JoinHandle<()>> = handles.into_iter().collect();
    let all = futures::future::join_all(handles.iter_mut());
    if tokio::time::timeout(timeout, all).await.is_ok() {
        return true;
    }
    // A handle whose result `join_all` already took must not be polled again (tokio panics), and
    // is finished; only the others are aborted and awaited.
    for handle in handles {
        if !handle.is_finished() {
            handle.abort();
            let _ = handle.await;
        }
    }
    false
}

/// Runs one of herald's loops; if it ends (or panics) before its stop token fired, `/healthz` turns
/// unhealthy: a dead loop is what a liveness probe is for.
pub(super) async fn guarded(
    alive: Arc<AtomicBool>,
    stop: CancellationToken,
    task: impl std::future::Future<Output = ()>,
) {
    struct Guard(Arc<AtomicBool>, CancellationToken);
    impl Drop for Guard {
        fn drop(&mut self) {
            if !self.1.is_cancelled() {
                self.0.store(false, Ordering::SeqCst);
                tracing::error!(message = "A herald loop ended unexpectedly; /healthz now fails.");
            }
        }
    }
    let _guard = Guard(alive, stop);
    task.await;
}
