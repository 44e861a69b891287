//! Watchers: one per configured resource and namespace scope, each an explicit state machine
//! ([`State`]) over `Api::list`/`Api::watch` — kube's `watcher()` cannot start from a stored
//! resourceVersion, and resuming is herald's core promise. Entry point: [`run`].
//!
//! Every batch of changes is appended to the journal atomically with the object index and the new
//! checkpoint, so the checkpoint never passes an event that is not in the journal.

mod decoded;
mod lines;
pub mod pattern;
pub mod problem;
pub mod resolve;
pub mod scan;
mod spanned;
mod spec;
mod sync;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{Api, DynamicObject, WatchEvent, WatchParams};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::backoff::{self, Backoff};
use crate::journal::Journal;

pub use decoded::{Decoded, Stripped, Whole};
pub use problem::ApiProblem;
pub use resolve::{Resolved, resolve};
pub use spanned::{Spanned, Spans};
pub use spec::WatchSpec;
pub use sync::{NamespaceCache, Recorder, Seen, SyncError, report_gone};

/// A watch that lasted this long ended normally and resets the backoff (nothing else does); a shorter
/// one counts as a failure for it, whether a re-watch or a relist follows.
const HEALTHY_WATCH: Duration = Duration::from_secs(5);

/// Discovery that has not answered within this long is given up and retried with backoff: a
/// request the server never took (an embedded cluster out of descriptors cannot accept it) would
/// otherwise hold the watcher, and a descriptor, forever. Discovery documents are small.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// Timings of the watch loop (defaults suit real clusters; tests shorten them).
#[derive(Debug, Clone)]
pub struct Tuning {
    /// LIST page size.
    pub page_size: u32,
    /// `timeoutSeconds` of each watch request.
    pub watch_timeout: Duration,
    /// A watch that delivers nothing (not even a bookmark) for this long is considered stalled and
    /// reconnected.
    pub stall_timeout: Duration,
    /// How often a missing CRD is looked for again.
    pub resolve_interval: Duration,
    /// Events gathered into one journal append at most. Every append has a fixed cost in sled
    /// (two sealed io buffers, each a job for its io threads; the checkpoint; the head): 2,048
    /// took a catch-up's CPU per event about a sixth below 256 (docs/operations.md, "The append
    /// thread (round 8)"), for a few MiB more held per batch under load.
    pub max_batch: usize,
    /// How long a batch waits for more events once one arrived, under load only (see
    /// [`LINGER_FROM`]). Each append has a fixed cost (a sled batch, the checkpoint, the head);
    /// gathering for 2 ms took a 20,000-change burst from 1.3 to about 200 events per append and
    /// doubled throughput; a lone change on a quiet watch does not wait for it.
    pub batch_linger: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            page_size: 500,
            watch_timeout: Duration::from_secs(290),
            stall_timeout: Duration::from_secs(330),
            resolve_interval: Duration::from_secs(5),
            max_batch: 2048,
            batch_linger: Duration::from_millis(2),
        }
    }
}

/// Decoded lines waiting for the recorder, at most. Each holds its object (twice on the tree path),
/// so this, not the batch size, bounds what a busy watch holds ahead of the recorder: four batches
/// of 2,048 real objects of a few KiB would be hundreds of MiB. A batch still grows past it: the
/// reader refills the channel while the recorder takes lines in.
pub const DECODED_LINES: usize = 1024;

/// The batch linger applies once the watch is under load: more changes were already decoded when
/// a batch started, or the previous batch held at least this many. Otherwise (a lone change on a
/// quiet watch) the batch is appended at once, as the journal's adaptive group commit commits it
/// at once; a burst's first batch already finds changes queued, so catch-up keeps its batches.
pub const LINGER_FROM: usize = 8;

/// How many objects a watcher remembers having logged a failed `when` evaluation for.
pub const FILTER_LOGGED_MAX: usize = 10_000;

/// What a watcher reports about itself (for readiness and `herald status`).
#[derive(Debug, Default)]
pub struct Health {
    /// The resource is served (its CRD exists).
    pub resolved: AtomicBool,
    /// The first list after start (or the last relist) completed and a watch is open.
    pub synced: AtomicBool,
    /// Watch restarts (stream ends, errors, stalls).
    pub restarts: AtomicU64,
    /// Relists (first start, after 410 and after a line that does not parse).
    pub relists: AtomicU64,
    /// Events synthesized by relists.
    pub resync_events: AtomicU64,
    /// Events journaled (observed changes that became events).
    pub emitted: AtomicU64,
    /// Changes observed but not emitted (event-type filter, status-only updates when skipped,
    /// updates of ignored fields only, `changed`, `when`).
    pub filtered: AtomicU64,
    /// Evaluations of the resource's `when` that failed (handled by its `onError`).
    pub filter_errors: AtomicU64,
    /// Objects whose failed `when` evaluation was logged: each is logged once, not per change.
    filter_logged: Mutex<std::collections::HashSet<String>>,
    /// The API server answered that it does not serve the resource (its CRD is missing): set by
    /// that answer only, so a watcher still waiting for its first answer is not reported as one.
    pub unserved: AtomicBool,
    /// What the last request to the API server ran into, until one succeeds (for `/readyz`).
    problem: Mutex<Option<ApiProblem>>,
}

impl Health {
    /// What the last failed request to the API server ran into; `None` once one succeeded.
    pub fn problem(&self) -> Option<ApiProblem> {
        self.lock_problem().clone()
    }

    fn lock_problem(&self) -> std::sync::MutexGuard<'_, Option<ApiProblem>> {
        self.problem
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a failed `when` evaluation on the object at `key` is the first one to log (and
    /// remembers it). The memory is bounded: past [`FILTER_LOGGED_MAX`] objects it starts over,
    /// so a stream of failing objects logs again rather than growing without end.
    pub(crate) fn first_filter_error(&self, key: &str) -> bool {
        let mut logged = self
            .filter_logged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if logged.contains(key) {
            return false;
        }
        if logged.len() >= FILTER_LOGGED_MAX {
            logged.clear();
        }
        logged.insert(key.to_owned());
        true
    }

    /// A request to the API server succeeded.
    pub(crate) fn clear_problem(&self) {
        *self.lock_problem() = None;
    }

    /// A request to the API server failed with `error`: remembered for `/readyz`, and a lack of
    /// file descriptors reported as such. True when that report is all the log needs: every
    /// watcher fails at once then, and [`fds::note`](crate::telemetry::fds::note) logs it once
    /// for all of them.
    pub(crate) fn note_problem(&self, error: &kube::Error) -> bool {
        let problem = ApiProblem::of(error);
        let reported = match crate::telemetry::fds::exhaustion_in(error) {
            Some(io) => {
                crate::telemetry::fds::note("connecting to the API server", io);
                true
            }
            None => false,
        };
        *self.lock_problem() = Some(problem);
        reported
    }
}

/// The watcher's state; each variant's doc says what the next step does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Discover plural, scope and version; while no CRD serves the resource, wait and look again.
    Resolving,
    /// List (paginated, one snapshot) and diff against the object index: the created, updated and
    /// deleted events that happened while herald was not watching, with `resync`; then watch from the
    /// list's revision. Also the first start without a checkpoint.
    Listing,
    /// Watch from this revision (a checkpoint, a list revision or the last event seen).
    Watching {
        /// The resume point.
        rv: String,
    },
    /// The journal's undelivered backlog is at its bound: read nothing until it drains, then resume
    /// from the checkpoint.
    Paused,
}

/// Runs one watcher until `stop` fires.
pub async fn run(
    client: kube::Client,
    journal: Journal,
    spec: WatchSpec,
    tuning: Tuning,
    stop: CancellationToken,
    health: Arc<Health>,
) {
    run_retiring(client, journal, spec, tuning, stop, health, None).await;
}

/// Runs one watcher until `stop` fires, or, once `retire` is set, until its resource is no longer
/// served: a group pattern's watcher whose CRD is being deleted reads the deletions the watch shows
/// (the API server deletes every object before the CRD goes) and ends when the resource is gone,
/// so no deletion is lost and none is left for a later relist to report.
#[allow(clippy::too_many_arguments)]
pub async fn run_retiring(
    client: kube::Client,
    journal: Journal,
    spec: WatchSpec,
    tuning: Tuning,
    stop: CancellationToken,
    health: Arc<Health>,
    retire: Option<Arc<AtomicBool>>,
) {
    let mut state = State::Resolving;
    let mut resolved: Option<Resolved> = None;
    let mut backoff = Backoff::new(backoff::WATCH);
    let namespaces = NamespaceCache::default();
    loop {
        if stop.is_cancelled() {
            return;
        }
        let next = match (&state, &resolved) {
            (State::Resolving, _) | (_, None) => match or_stop(
                tokio::time::timeout(DISCOVERY_TIMEOUT, resolve::resolve(&client, &spec)),
                &stop,
            )
            .await
            {
                None => return,
                Some(Ok(Ok(Some(r)))) => {
                    health.clear_problem();
                    health.unserved.store(false, Ordering::SeqCst);
                    health.resolved.store(true, Ordering::SeqCst);
                    let checkpoint = journal.checkpoint(&r.stream).ok().flatten();
                    tracing::info!(
                        message = "Watching resource.",
                        resource = %r.display(),
                        checkpoint = checkpoint.as_deref().unwrap_or("none"),
                    );
                    let next = match checkpoint {
                        Some(rv) => State::Watching { rv },
                        None => State::Listing,
                    };
                    resolved = Some(r);
                    next
                }
                Some(Ok(Ok(None))) => {
                    if retire.as_ref().is_some_and(|r| r.load(Ordering::SeqCst)) {
                        tracing::info!(
                            message = "Resource no longer served and its CRD deleted; watcher stopped.",
                            resource = %spec.label(),
                        );
                        return;
                    }
                    health.clear_problem();
                    health.unserved.store(true, Ordering::SeqCst);
                    if health.resolved.swap(false, Ordering::SeqCst) || backoff.failures() == 0 {
                        tracing::warn!(
                            message = "Waiting for the resource to be served; not ready until it is.",
                            error = %resolve::unserved(&spec),
                        );
                    }
                    backoff.note_failure();
                    sleep_or_stop(tuning.resolve_interval, &stop).await;
                    State::Resolving
                }
                Some(Ok(Err(error))) => {
                    health.unserved.store(false, Ordering::SeqCst);
                    if health.note_problem(&error) {
                        tracing::debug!(message = "Discovery failed; retrying.", resource = %format!("resources[{}]", spec.index), error = %problem::chain(&error));
                    } else {
                        tracing::warn!(message = "Discovery failed; retrying.", resource = %format!("resources[{}]", spec.index), error = %problem::chain(&error));
                    }
                    sleep_or_stop(backoff.next_delay(), &stop).await;
                    State::Resolving
                }
                Some(Err(_)) => {
                    let problem = ApiProblem::Unreachable(format!(
                        "no answer to discovery within {}s",
                        DISCOVERY_TIMEOUT.as_secs()
                    ));
                    tracing::warn!(message = "Discovery failed; retrying.", resource = %format!("resources[{}]", spec.index), error = %problem);
                    health.unserved.store(false, Ordering::SeqCst);
                    *health.lock_problem() = Some(problem);
                    sleep_or_stop(backoff.next_delay(), &stop).await;
                    State::Resolving
                }
            },
            (State::Listing, Some(r)) => {
                health.relists.fetch_add(1, Ordering::Relaxed);
                let recorder = Recorder::new(&journal, &spec, r, &health, &namespaces);
                // A relist stopped half-way is safe: only its last chunk carries the checkpoint,
                // and it returns only once the chunk it was appending has landed.
                let Some(listed) =
                    sync::relist_until(&recorder, tuning.page_size, stop.cancelled()).await
                else {
                    return;
                };
                match listed {
                    // Not a reset: a server that lists fine and then breaks every watch would be
                    // relisted in a hot loop. Only a watch that lasted resets the backoff.
                    Ok(rv) => {
                        health.clear_problem();
                        State::Watching { rv }
                    }
                    Err(sync::SyncError::NotServed) => State::Resolving,
                    Err(error) => {
                        if error
                            .api_error()
                            .is_some_and(|api| health.note_problem(api))
                        {
                            tracing::debug!(message = "List failed; retrying.", resource = %r.display(), error = %problem::chain(&error));
                        } else {
                            tracing::warn!(message = "List failed; retrying.", resource = %r.display(), error = %problem::chain(&error));
                        }
                        sleep_or_stop(backoff.next_delay(), &stop).await;
                        State::Listing
                    }
                }
            }
            (State::Watching { rv }, Some(r)) => {
                let recorder = Recorder::new(&journal, &spec, r, &health, &namespaces);
                let began = std::time::Instant::now();
                let ended = watch(&recorder, rv, &tuning, &stop, &health).await;
                if let Ended::Again(State::Watching { .. }) = &ended {
                    health.restarts.fetch_add(1, Ordering::Relaxed);
                }
                if !stop.is_cancelled() {
                    // A watch that lasted is a healthy one ending (timeout, server restart, even a
                    // broken line after a while): go on at once, from the minimum again. One that
                    // ended quickly failed or was refused, whether it re-watches or relists: back off,
                    // so a broken server is not hammered. The first quick 410 is the protocol, not a
                    // fault (a checkpoint older than the server's history): relist at once, but count
                    // it, so a server that answers every watch with 410 is spaced out too.
                    match &ended {
                        Ended::Again(_) | Ended::Expired if began.elapsed() >= HEALTHY_WATCH => {
                            backoff.reset();
                        }
                        Ended::Expired if backoff.failures() == 0 => backoff.note_failure(),
                        Ended::Again(_) | Ended::Expired => {
                            sleep_or_stop(backoff.next_delay(), &stop).await;
                        }
                        Ended::Elsewhere(_) => {}
                    }
                }
                ended.into_state()
            }
            (State::Paused, Some(r)) => {
                health.synced.store(false, Ordering::SeqCst);
                while journal.over_backlog_bound() && !stop.is_cancelled() {
                    sleep_or_stop(Duration::from_millis(200), &stop).await;
                }
                tracing::info!(message = "Backlog drained; resuming from the checkpoint.", resource = %r.display());
                match journal.checkpoint(&r.stream).ok().flatten() {
                    Some(rv) => State::Watching { rv },
                    None => State::Listing,
                }
            }
        };
        state = next;
    }
}

/// How a watch ended, as the backoff sees it.
enum Ended {
    /// It failed or ended: watch again or relist (a broken line), backing off if it was short.
    Again(State),
    /// 410 Gone: relist.
    Expired,
    /// Stopped, paused for the backlog or the resource went away: no backoff applies.
    Elsewhere(State),
}

impl Ended {
    fn into_state(self) -> State {
        match self {
            Self::Again(s) | Self::Elsewhere(s) => s,
            Self::Expired => State::Listing,
        }
    }
}

/// Reads one watch stream until it ends; says how it ended and what comes next.
async fn watch(
    rec: &Recorder<'_>,
    from: &str,
    tuning: &Tuning,
    stop: &CancellationToken,
    health: &Health,
) -> Ended {
    let r = rec.resolved;
    let api: Api<DynamicObject> = r.api(r.client.clone());
    let mut wp = WatchParams::default()
        .timeout(u32::try_from(tuning.watch_timeout.as_secs()).unwrap_or(290));
    if let Some(l) = &rec.spec.label_selector {
        wp = wp.labels(l);
    }
    if let Some(f) = &rec.spec.field_selector {
        wp = wp.fields(f);
    }
    let mut rv = from.to_string();
    // Decoding runs in its own task so it overlaps with recording: while one batch is normalized
    // and appended, the next lines are decoded, and under load batches grow by themselves (one
    // journal append per batch is the fixed cost that dominated when both took turns).
    let (tx, mut rx) = tokio::sync::mpsc::channel(DECODED_LINES.min(tuning.max_batch.max(1) * 4));
    // managedFields are skipped while each line is parsed, unless the resource keeps them; the
    // objects of a resource whose recording never reads their tree are decoded into bytes and
    // spans only (see `Spanned`).
    let reader = match (r.resource.keep_managed_fields, rec.spans_path()) {
        (true, false) => spawn_reader::<Whole>(r, &api, &wp, &rv, tx).await,
        (false, false) => spawn_reader::<Stripped>(r, &api, &wp, &rv, tx).await,
        (true, true) => spawn_reader::<Spans<false>>(r, &api, &wp, &rv, tx).await,
        (false, true) => spawn_reader::<Spans<true>>(r, &api, &wp, &rv, tx).await,
    };
    let _reader = match reader {
        Ok(reader) => reader,
        Err(error) => {
            if is_not_found(&error) {
                return Ended::Elsewhere(State::Resolving);
            }
            if health.note_problem(&error) {
                tracing::debug!(message = "Watch failed to start; retrying.", resource = %r.display(), error = %problem::chain(&error));
            } else {
                tracing::warn!(message = "Watch failed to start; retrying.", resource = %r.display(), error = %problem::chain(&error));
            }
            health.synced.store(false, Ordering::SeqCst);
            return Ended::Again(State::Watching { rv });
        }
    };
    health.clear_problem();
    health.synced.store(true, Ordering::SeqCst);
    let exit = read_batches(rec, &mut rx, &mut rv, tuning, stop, health).await;
    // However the watch ended, the batch still appending lands (or fails) before anything else
    // reads or writes the stream (a relist, the next watch), and `rv` is then where the journaled
    // events end.
    let exit = match (rec.settle_watch(&mut rv).await, exit) {
        (Ok(()), exit) => exit,
        (Err(error), Exit::Failed(first)) => {
            tracing::warn!(message = "Recording watch events failed.", resource = %r.display(), error = %problem::chain(&error));
            Exit::Failed(first)
        }
        (Err(error), exit @ (Exit::Stopped | Exit::Paused | Exit::Expired | Exit::Broken)) => {
            tracing::warn!(message = "Recording watch events failed.", resource = %r.display(), error = %problem::chain(&error));
            exit
        }
        (Err(error), Exit::Stalled | Exit::Ended) => Exit::Failed(error),
    };
    match exit {
        Exit::Stopped => Ended::Elsewhere(State::Watching { rv }),
        Exit::Paused => Ended::Elsewhere(State::Paused),
        Exit::Stalled | Exit::Ended => Ended::Again(State::Watching { rv }),
        Exit::Expired => {
            tracing::info!(message = "Resume point expired (410); relisting.", resource = %r.display(), rv = %rv);
            Ended::Expired
        }
        Exit::Broken => Ended::Again(State::Listing),
        Exit::Failed(error) => {
            tracing::warn!(message = "Recording watch events failed; re-watching from the checkpoint.", resource = %r.display(), error = %problem::chain(&error));
            sleep_or_stop(Duration::from_millis(500), stop).await;
            Ended::Again(match rec.journal.checkpoint(&r.stream).ok().flatten() {
                Some(cp) => State::Watching { rv: cp },
                None => State::Listing,
            })
        }
    }
}

/// Why [`read_batches`] stopped reading.
enum Exit {
    /// `stop` fired.
    Stopped,
    /// Nothing came within the stall timeout.
    Stalled,
    /// The stream ended.
    Ended,
    /// The journal's backlog is at its bound.
    Paused,
    /// 410 Gone (what came before it recorded).
    Expired,
    /// A line that does not parse (what came before it recorded).
    Broken,
    /// Recording a batch, or appending one, failed.
    Failed(SyncError),
}

/// Reads the watch's lines in batches and records each, appending it while the next is read and
/// recorded ([`Recorder::record_watch_beside`]), until the watch ends; the caller settles the
/// batch left appending. `rv` is where the landed batches end.
async fn read_batches(
    rec: &Recorder<'_>,
    rx: &mut tokio::sync::mpsc::Receiver<Line>,
    rv: &mut String,
    tuning: &Tuning,
    stop: &CancellationToken,
    health: &Health,
) -> Exit {
    let r = rec.resolved;
    let mut last_batch = 0usize;
    loop {
        // The batch still appending may take the backlog over its bound (or have done so
        // already): it lands first, so the watch pauses right after the batch that crossed the
        // bound, as when each batch landed before the next was read. Away from the bound the
        // append stays beside the reading.
        if rec.journal.over_backlog_bound_with(rec.events_appending()) {
            if let Err(error) = rec.settle_watch(rv).await {
                return Exit::Failed(error);
            }
            if rec.journal.over_backlog_bound() {
                tracing::warn!(message = "Journal backlog at its bound; pausing watches.", resource = %r.display());
                return Exit::Paused;
            }
        }
        let first = tokio::select! {
            () = stop.cancelled() => return Exit::Stopped,
            next = tokio::time::timeout(tuning.stall_timeout, rx.recv()) => next,
        };
        let first = match first {
            Err(_) => {
                tracing::warn!(message = "Watch stalled; reconnecting.", resource = %r.display(), rv = %rv);
                health.synced.store(false, Ordering::SeqCst);
                return Exit::Stalled;
            }
            Ok(None) => return Exit::Ended,
            Ok(Some(line)) => line,
        };
        // What is decoded already goes into this append; under load, so does what arrives within
        // the linger (LINGER_FROM).
        let mut lines = vec![first];
        while lines.len() < tuning.max_batch {
            match rx.try_recv() {
                Ok(line) => lines.push(line),
                Err(_) => break,
            }
        }
        if lines.len() > 1 || last_batch >= LINGER_FROM {
            let deadline = tokio::time::Instant::now() + tuning.batch_linger;
            while lines.len() < tuning.max_batch {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(line)) => lines.push(line),
                    _ => break,
                }
            }
        }
        last_batch = lines.len();
        let mut changes = Vec::with_capacity(lines.len());
        for line in lines {
            match line {
                Line::Change(seen, value, json) => changes.push((seen, Object::Tree(value, json))),
                Line::Spans(seen, spanned) => changes.push((seen, Object::Spans(spanned))),
                Line::Expired => {
                    // Record what came before the gap, then relist.
                    if let Err(error) = rec.record_objects_beside(changes, rv).await {
                        tracing::warn!(message = "Recording watch events failed.", resource = %r.display(), error = %problem::chain(&error));
                    }
                    return Exit::Expired;
                }
                Line::Broken(error) => {
                    // A line that does not parse is a change we cannot see: record what came before it,
                    // then relist, so the diff recovers whatever the line carried instead of the next
                    // event's resourceVersion silently moving the checkpoint past it.
                    let _ = health.note_problem(&error);
                    tracing::warn!(message = "Watch stream error; relisting.", resource = %r.display(), error = %problem::chain(&error));
                    if let Err(error) = rec.record_objects_beside(changes, rv).await {
                        tracing::warn!(message = "Recording watch events failed.", resource = %r.display(), error = %problem::chain(&error));
                    }
                    health.synced.store(false, Ordering::SeqCst);
                    return Exit::Broken;
                }
            }
        }
        if let Err(error) = rec.record_objects_beside(changes, rv).await {
            return Exit::Failed(error);
        }
    }
}

/// Opens a watch whose objects are decoded straight into [`Value`]s and their serialized bytes
/// (through `K`: [`Whole`], or [`Stripped`] without managedFields), in the API server's key order,
/// or into [`Spanned`]s, and starts the task that
/// reads its lines into `tx`: the request `Api::watch` would send, its lines read as kube reads
/// them ([`lines`]), without the `DynamicObject` detour (a typed `ObjectMeta` decoded and serialised again per line
/// was a fifth of herald's CPU in a catch-up; ADR 0014).
async fn spawn_reader<K>(
    r: &Resolved,
    api: &Api<DynamicObject>,
    wp: &WatchParams,
    rv: &str,
    tx: tokio::sync::mpsc::Sender<Line>,
) -> kube::Result<AbortOnDropHandle<()>>
where
    K: WatchedObject + Clone + serde::de::DeserializeOwned + Send + 'static,
{
    let mut request = kube::core::Request::new(api.resource_url())
        .watch(wp, rv)
        .map_err(kube::Error::BuildRequest)?;
    request.extensions_mut().insert("watch");
    let body = lines::open(&r.client, request).await?;
    let resource = r.display();
    Ok(AbortOnDropHandle::new(tokio::spawn(async move {
        read_lines::<K>(lines::Lines::new(body), tx, resource).await;
    })))
}

/// A watched object as a watch line's decoder yields it, turned into the [`Value`] the recorder
/// works on.
pub trait WatchedObject: Sized {
    /// The object as a JSON value, and `serde_json::to_vec` of it when the decoder wrote that
    /// already.
    ///
    /// # Errors
    ///
    /// A decoding error when the object is not shaped like a Kubernetes object (a JSON object
    /// with a `metadata` object), as the typed decoding would have refused it.
    fn into_parts(self) -> Result<(Value, Option<Vec<u8>>), kube::Error>;

    /// The object as a JSON value.
    ///
    /// # Errors
    ///
    /// As [`into_parts`](Self::into_parts).
    fn into_value(self) -> Result<Value, kube::Error> {
        self.into_parts().map(|(value, _)| value)
    }

    /// The object as the recorder takes it: its tree, or its bytes and spans where the decoder
    /// wrote only those (see [`Spanned`]).
    ///
    /// # Errors
    ///
    /// As [`into_parts`](Self::into_parts).
    fn into_object(self) -> Result<Object, kube::Error> {
        self.into_parts()
            .map(|(value, json)| Object::Tree(value, json))
    }

    /// The watch line read by the [`scan`]ner, when it reads it and this decoder has it read
    /// (none does but [`Spans`]); `None`: serde decodes it.
    fn scan(line: &str) -> Option<WatchEvent<Self>> {
        let _ = line;
        None
    }
}

/// A watched object as the recorder takes it.
#[derive(Debug)]
pub enum Object {
    /// Its tree, and its bytes when the decoder wrote them.
    Tree(Value, Option<Vec<u8>>),
    /// Its bytes and spans, for a [`plain`](Spanned::plain) object of a resource whose recording
    /// never reads the tree.
    Spans(Spanned),
}

/// Whether `value` is shaped like a Kubernetes object: a JSON object with a `metadata` object whose
/// identifying members are strings when present (what the typed decoding refused otherwise).
pub(crate) fn shaped(value: &Value) -> bool {
    use crate::event::members;
    members::get(value, "metadata")
        .and_then(Value::as_object)
        .is_some_and(|m| {
            ["name", "namespace", "uid", "resourceVersion"]
                .iter()
                .all(|k| members::member(m, k).is_none_or(|v| v.is_string() || v.is_null()))
        })
}

impl WatchedObject for Value {
    fn into_parts(self) -> Result<(Value, Option<Vec<u8>>), kube::Error> {
        if shaped(&self) {
            Ok((self, None))
        } else {
            Err(kube::Error::SerdeError(serde::de::Error::custom(
                "a watch event's object is not a Kubernetes object (no metadata object)",
            )))
        }
    }
}

impl<const STRIP: bool> WatchedObject for Decoded<STRIP> {
    fn into_parts(self) -> Result<(Value, Option<Vec<u8>>), kube::Error> {
        let (value, _) = self.value.into_parts()?;
        Ok((value, self.json))
    }
}

/// One decoded watch line, as the reader task hands it to the recorder.
#[derive(Debug)]
pub enum Line {
    /// A change or a bookmark (whose value is its resourceVersion), with the object serialized
    /// when the decoder wrote that (see [`Decoded`]).
    Change(sync::Seen, Value, Option<Vec<u8>>),
    /// A change whose object the decoder kept as bytes and spans (see [`Spanned`]).
    Spans(sync::Seen, Spanned),
    /// 410 Gone: the resume point expired.
    Expired,
    /// A line that did not decode.
    Broken(kube::Error),
}

impl Line {
    /// What one watch line, as kube decoded it, means to the watcher: the step from a line to a
    /// change. An error event other than 410 changes nothing and comes back as `Err` (the reader
    /// logs it and reads on).
    ///
    /// # Errors
    ///
    /// The error event's status (code, reason, message).
    pub fn of<K: WatchedObject>(
        line: kube::Result<WatchEvent<K>>,
    ) -> Result<Self, Box<kube::core::Status>> {
        let change = |seen, o: K| match o.into_object() {
            Ok(Object::Tree(v, json)) => Self::Change(seen, v, json),
            Ok(Object::Spans(s)) => Self::Spans(seen, s),
            Err(error) => Self::Broken(error),
        };
        Ok(match line {
            Ok(WatchEvent::Added(o)) => change(sync::Seen::Added, o),
            Ok(WatchEvent::Modified(o)) => change(sync::Seen::Modified, o),
            Ok(WatchEvent::Deleted(o)) => change(sync::Seen::Deleted, o),
            Ok(WatchEvent::Bookmark(b)) => Self::Change(
                sync::Seen::Bookmark,
                Value::String(b.metadata.resource_version),
                None,
            ),
            Ok(WatchEvent::Error(status)) if status.code == 410 => Self::Expired,
            Ok(WatchEvent::Error(status)) => return Err(status),
            Err(error) => Self::Broken(error),
        })
    }
}

/// What [`read_lines`] read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Read {
    /// Lines decoded.
    lines: u64,
    /// Of which the scanner read.
    scanned: u64,
}

/// Decodes watch lines until the stream ends, the recorder goes away, or a line ends the watch.
async fn read_lines<K: WatchedObject + serde::de::DeserializeOwned>(
    mut body: lines::Lines,
    tx: tokio::sync::mpsc::Sender<Line>,
    resource: String,
) -> Read {
    let mut read = Read::default();
    while let lines::Next::Event { event, scanned } = body.next::<K>().await {
        read.lines += 1;
        read.scanned += u64::from(scanned);
        let line = match Line::of(event) {
            Ok(line) => line,
            Err(status) => {
                tracing::warn!(message = "Watch error event.", %resource, code = status.code, reason = %status.reason, error = %status.message);
                continue;
            }
        };
        let last = !matches!(line, Line::Change(..) | Line::Spans(..));
        if tx.send(line).await.is_err() || last {
            break;
        }
    }
    // How many lines the scanner declined (a cluster whose objects it cannot copy as they are:
    // Go's `\u003c` escapes, floats) shows here.
    tracing::debug!(message = "Watch lines read.", %resource, lines = read.lines, scanned = read.scanned);
    read
}

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 404)
}

/// `f`'s output, or `None` once `stop` fires first: a request the server never answers (an
/// embedded cluster out of descriptors) must not hold up a stop.
async fn or_stop<T>(f: impl Future<Output = T>, stop: &CancellationToken) -> Option<T> {
    tokio::select! {
        out = f => Some(out),
        () = stop.cancelled() => None,
    }
}

async fn sleep_or_stop(d: Duration, stop: &CancellationToken) {
    tokio::select! {
        () = tokio::time::sleep(d) => {}
        () = stop.cancelled() => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn line(text: &str) -> Result<Line, Box<kube::core::Status>> {
        Line::of(serde_json::from_str::<WatchEvent<Value>>(text).map_err(kube::Error::SerdeError))
    }

    /// Reads `body`, cut into chunks of `size` bytes, through the watch's line reader.
    async fn read_body(body: &[u8], size: usize, end: Option<std::io::Error>) -> (Read, Vec<Line>) {
        let mut chunks: Vec<std::io::Result<Vec<u8>>> =
            body.chunks(size).map(|c| Ok(c.to_vec())).collect();
        chunks.extend(end.map(Err));
        let body: lines::Body = Box::pin(futures::TryStreamExt::into_async_read(
            futures::stream::iter(chunks),
        ));
        let (tx, mut rx) = tokio::sync::mpsc::channel(10_000);
        let read = read_lines::<Spans<true>>(lines::Lines::new(body), tx, "test".into()).await;
        let mut got = Vec::new();
        while let Ok(line) = rx.try_recv() {
            got.push(line);
        }
        (read, got)
    }

    fn plain(rv: usize) -> String {
        format!(
            r#"{{"type":"MODIFIED","object":{{"kind":"Widget","metadata":{{"name":"w{rv}","namespace":"ns","uid":"u{rv}","resourceVersion":"{rv}","managedFields":[{{"m":"\"x\""}}],"generation":{rv}}},"spec":{{"n":{rv},"s":"a\nb é"}}}}}}"#
        )
    }

    /// The reader frames lines as kube did (across chunks, `\r\n`, empty lines, a last line
    /// without its newline) and the scanner reads every plain one: this fails if the fast path
    /// is gone.
    #[tokio::test]
    async fn the_reader_scans_plain_lines_across_chunks() {
        let mut body = String::new();
        for rv in 1..=200 {
            body.push_str(&plain(rv));
            body.push_str(if rv % 50 == 0 { "\r\n\n" } else { "\n" });
        }
        body.push_str(
            r#"{"type":"BOOKMARK","object":{"kind":"Widget","apiVersion":"v1","metadata":{"resourceVersion":"201"}}}"#,
        );
        body.push('\n');
        body.push_str(&plain(202));
        for size in [1, 7, 300, 1 << 20] {
            let (read, lines) = read_body(body.as_bytes(), size, None).await;
            assert_eq!(
                read,
                Read {
                    lines: 202,
                    scanned: 201
                },
                "chunks of {size}"
            );
            let rvs: Vec<String> = lines
                .iter()
                .map(|line| match line {
                    Line::Spans(Seen::Modified, s) => s.ident().resource_version.to_owned(),
                    Line::Change(Seen::Bookmark, Value::String(rv), None) => rv.clone(),
                    _ => panic!("a change or a bookmark"),
                })
                .collect();
            let expected: Vec<String> = (1..=202).map(|rv| rv.to_string()).collect();
            assert_eq!(rvs, expected, "chunks of {size}");
        }
    }

    /// A line that is not UTF-8 and a read error end the reading with a broken line; a body that
    /// ends early ends it quietly; a line that is not JSON is a broken line, as with kube.
    #[tokio::test]
    async fn the_reader_ends_on_bad_lines_and_read_errors_as_kube_did() {
        let one = format!("{}\n", plain(1));
        let mut bad = one.clone().into_bytes();
        bad.extend_from_slice(b"{\"type\":\"ADDED\",\"object\":\"\xff\"}\n");
        bad.extend_from_slice(one.as_bytes());
        let (read, lines) = read_body(&bad, 64, None).await;
        assert_eq!(
            read,
            Read {
                lines: 2,
                scanned: 1
            }
        );
        assert!(matches!(
            &lines[..],
            [Line::Spans(..), Line::Broken(kube::Error::ReadEvents(_))]
        ));
        let early = std::io::Error::other(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
        let (read, lines) = read_body(one.as_bytes(), 64, Some(early)).await;
        assert_eq!((read.lines, lines.len()), (1, 1));
        let (read, lines) =
            read_body(one.as_bytes(), 64, Some(std::io::Error::other("reset"))).await;
        assert_eq!(read.lines, 2);
        assert!(matches!(
            &lines[1],
            Line::Broken(kube::Error::ReadEvents(_))
        ));
        let (read, lines) = read_body(format!("{one}not json\n{one}").as_bytes(), 64, None).await;
        assert_eq!(
            read,
            Read {
                lines: 2,
                scanned: 1
            }
        );
        assert!(matches!(
            &lines[1],
            Line::Broken(kube::Error::SerdeError(_))
        ));
        let status = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"m","reason":"r","code":500}"#;
        let (_, lines) = read_body(format!("{one}{status}\n").as_bytes(), 64, None).await;
        assert!(matches!(&lines[1], Line::Broken(kube::Error::Api(s)) if s.code == 500));
        // A truncated last line is skipped, as kube skipped serde's end-of-input errors.
        let (read, lines) = read_body(format!("{one}{{\"type\":\"ADD").as_bytes(), 64, None).await;
        assert_eq!((read.lines, lines.len()), (1, 1));
    }

    #[test]
    fn a_watch_line_is_decoded_into_the_object_in_the_servers_key_order() {
        let Ok(Line::Change(Seen::Modified, object, _)) = line(
            r#"{"type":"MODIFIED","object":{"kind":"Widget","apiVersion":"example.com/v1","metadata":{"uid":"u","name":"a","resourceVersion":"7","namespace":"ns","zz":1},"spec":{"b":1,"a":2}}}"#,
        ) else {
            panic!("a change");
        };
        assert_eq!(
            serde_json::to_string(&object).unwrap(),
            r#"{"kind":"Widget","apiVersion":"example.com/v1","metadata":{"uid":"u","name":"a","resourceVersion":"7","namespace":"ns","zz":1},"spec":{"b":1,"a":2}}"#
        );
    }

    /// Through the watch's own decoder (`Stripped`), a change carries the object's bytes, which
    /// are what serializing the object writes, managedFields left out of both.
    #[test]
    fn a_change_decoded_by_the_watchs_decoder_carries_the_objects_bytes() {
        let text = r#"{"type":"ADDED","object":{"kind":"Widget","metadata":{"name":"a\u003cb","managedFields":[{"m":1}],"resourceVersion":"7"},"spec":{"n":1.50}}}"#;
        let decoded =
            serde_json::from_str::<WatchEvent<Stripped>>(text).map_err(kube::Error::SerdeError);
        let Ok(Line::Change(Seen::Added, object, Some(json))) = Line::of(decoded) else {
            panic!("a change with its bytes");
        };
        assert_eq!(json, serde_json::to_vec(&object).unwrap());
        assert_eq!(
            String::from_utf8(json).unwrap(),
            r#"{"kind":"Widget","metadata":{"name":"a<b","resourceVersion":"7"},"spec":{"n":1.5}}"#
        );
    }

    #[test]
    fn objects_that_are_not_kubernetes_objects_are_broken_lines_bookmarks_and_410_as_before() {
        for text in [
            r#"{"type":"ADDED","object":"text"}"#,
            r#"{"type":"ADDED","object":{"spec":{}}}"#,
            r#"{"type":"DELETED","object":{"metadata":{"name":1}}}"#,
            r#"{"type":"ADDED","object":{"#,
        ] {
            assert!(matches!(line(text), Ok(Line::Broken(_))), "{text}");
        }
        assert!(matches!(
            line(r#"{"type":"BOOKMARK","object":{"kind":"Widget","apiVersion":"v1","metadata":{"resourceVersion":"9"}}}"#),
            Ok(Line::Change(Seen::Bookmark, Value::String(rv), None)) if rv == "9"
        ));
        assert!(matches!(
            line(
                r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","code":410,"reason":"Expired","message":"too old"}}"#
            ),
            Ok(Line::Expired)
        ));
        assert_eq!(
            line(r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","code":500,"reason":"InternalError","message":"x"}}"#)
                .err()
                .map(|s| s.code),
            Some(500)
        );
    }
}
