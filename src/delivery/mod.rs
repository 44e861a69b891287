//! Delivery: moves events from the journal into one sink through that sink's cursor — the only place
//! that knows about retries. Entry point: [`run`].
//!
//! - A bounded window of pending events; at most one event in flight per `partitionkey`, so each
//!   object's events arrive in order; up to `concurrency` send calls at once, each a batch of distinct
//!   keys.
//! - Retryable outcomes retry with exponential backoff and full jitter (or the sink's `Retry-After`),
//!   without limit unless `max_attempts`/`max_age` say otherwise.
//! - A sink that fails everything is paused: one probe at a time, with backoff, and those probes do not
//!   count as attempts. The first success resumes it; it then catches up from the journal.
//! - A sink whose target was unreachable at start ([`Settings::start_paused`]) starts paused; with no
//!   event to probe with, its health check is the probe, so it resumes (and says so) as soon as the
//!   target answers.
//! - `Reject`, or an exhausted explicit budget, dead-letters the event; later events of its key go on.
//!   A budget runs out only for an event that kept failing while the sink was taking other events: an
//!   outage delays events, it never dead-letters them.
//! - The cursor advances over the contiguous prefix of finished events only, so a crash redelivers
//!   (at least once) and never skips. The events finished above it (while one event is stuck in a
//!   retry, the others go on) are recorded beside it as ranges ([`Journal::acknowledge`]) and
//!   skipped after a restart, so a crash re-sends what was in flight, not everything after the
//!   stuck event.
//! - `rateLimit` ([`pace::TokenBucket`]) caps the requests per second of every send call (retries,
//!   probes and replays included); what waits stays in the journal. `debounce` holds each event
//!   for its window and lets a newer event of the same key replace it
//!   ([`Window::push_debounced`]); replaced events are acknowledged and counted
//!   ([`Stats::debounced`]), never sent. docs/adr/0012-replies.md says why that keeps the
//!   ordering and at-least-once rules.
//! - An entry that does not read back as a valid event ([`CloudEvent::validate`], the one
//!   definition the normalizer also checks) is dead-lettered with its sequence number, its decode
//!   error and its bytes ([`unreadable::unreadable_entry`]); nothing is skipped silently.

pub mod forward;
pub mod pace;
pub mod unreadable;
mod window;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use futures::stream::{FuturesUnordered, StreamExt};
use herald_sink_core::Journaled;
use herald_sink_core::config::{DeliveryOptions, RateLimit};
use herald_sink_core::event::CloudEvent;
use herald_sink_core::sink::{Envelope, ErrorContext, Outcome, Reason, Sink};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::backoff;
use crate::config::{OnOversize, ResourceConfig};
use crate::journal::Journal;
use crate::route::{ResourcePattern, Router};
pub use window::{Pending, Window};

/// How often an idle driver looks again on its own; the journal reader is also woken by each
/// group commit ([`Journal::durable_after`]).
const IDLE_POLL: Duration = Duration::from_millis(5);
/// How often the replay queue is looked at when it was empty.
const REPLAY_POLL: Duration = Duration::from_millis(200);

/// Longest wait a sink's hint (`Retry-After` and the like) gives an event: an hour. The event is
/// then tried again, and a receiver still limiting says so again; a hint of days or more is a
/// slip that would hold the key back for good.
const MAX_HINT: Duration = Duration::from_secs(3600);

/// Delivery settings of one sink.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Concurrent `send` calls.
    pub concurrency: usize,
    /// Events per `send` call at most (distinct keys).
    pub batch_max: usize,
    /// Pending events held in memory at most (the journal holds the rest).
    pub window: usize,
    /// Dead-letter an event after this many failed attempts (unlimited when `None`).
    pub max_attempts: Option<u32>,
    /// Dead-letter an event still failing this long after its first failure (unlimited when `None`).
    pub max_age: Option<Duration>,
    /// Consecutive send calls failing every event before the sink is paused.
    pub pause_after: u32,
    /// Backoff: the first delay, doubling up to `max_backoff`, each drawn with full jitter.
    pub min_backoff: Duration,
    /// Backoff cap.
    pub max_backoff: Duration,
    /// Dead letters kept at most; when the queue is full, events that would be dead-lettered are
    /// retried instead, holding back the cursor rather than being dropped.
    pub max_dead_letters: usize,
    /// How often the dead-letter queue is recounted against `max_dead_letters` (operators drain it
    /// from outside the driver).
    pub dead_letter_recount: Duration,
    /// What happens to an event too large for the sink, per resource (`onOversize`).
    pub oversize: OversizePolicy,
    /// Start paused: the sink's health check found its target unreachable. The driver probes
    /// with events, or with the health check while it has none, and resumes on the first success.
    pub start_paused: bool,
    /// Most requests per second (`rateLimit`); `None` sends as fast as the sink takes them.
    pub rate_limit: Option<RateLimit>,
    /// One send call is one request whatever its size (a `batched` webhook), so it takes one
    /// token of `rate_limit`; otherwise each event of a call takes one.
    pub one_request_per_call: bool,
    /// Per key, only the latest event within this window is sent (`debounce`).
    pub debounce: Option<Duration>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            concurrency: 1,
            batch_max: 256,
            window: 4096,
            max_attempts: None,
            max_age: None,
            pause_after: 3,
            min_backoff: backoff::DELIVERY.min,
            max_backoff: backoff::DELIVERY.max,
            max_dead_letters: 100_000,
            dead_letter_recount: Duration::from_secs(5),
            oversize: OversizePolicy::default(),
            start_paused: false,
            rate_limit: None,
            one_request_per_call: false,
            debounce: None,
        }
    }
}

/// What happens to an event a sink reports as too large (`oversize`): by default it is sent again in
/// its reference-only form (marked `truncated`); resources that say `onOversize: deadLetter` have it
/// dead-lettered instead.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OversizePolicy {
    dead_letter: Vec<ResourcePattern>,
}

impl OversizePolicy {
    /// Dead-letters the oversized events of the resources these patterns name.
    pub fn dead_letter(resources: Vec<ResourcePattern>) -> Self {
        Self {
            dead_letter: resources,
        }
    }

    /// The policy the configured resources ask for with their `onOversize`.
    pub fn from_resources(resources: &[ResourceConfig]) -> Self {
        Self::dead_letter(
            resources
                .iter()
                .filter(|r| r.on_oversize == OnOversize::DeadLetter)
                .flat_map(ResourcePattern::of_resource)
                .collect(),
        )
    }

    /// Whether an oversized `event` is dead-lettered rather than sent as a reference.
    pub fn dead_letters(&self, event: &CloudEvent) -> bool {
        self.dead_letter.iter().any(|p| p.matches(event))
    }
}

impl Settings {
    /// A sink's settings from its delivery keys (`concurrency`, `maxAttempts`, `maxAge`) and
    /// `batch_max_events`, the sink's word on how many events one send call takes; what the
    /// sink's type does not take stays at the default.
    #[must_use]
    pub fn from_options(options: &DeliveryOptions, batch_max_events: Option<usize>) -> Self {
        let defaults = Self::default();
        Self {
            concurrency: options.concurrency.unwrap_or(defaults.concurrency),
            batch_max: batch_max_events.unwrap_or(defaults.batch_max),
            max_attempts: options.max_attempts,
            max_age: options.max_age,
            rate_limit: options.rate_limit,
            debounce: options.debounce,
            ..defaults
        }
    }
}

/// The pace of one driver's send calls: its `rateLimit` bucket, if any.
struct Pace {
    bucket: Option<pace::TokenBucket>,
    batch_max: usize,
    per_call: bool,
}

impl Pace {
    fn new(settings: &Settings, now: Instant) -> Self {
        Self {
            bucket: settings
                .rate_limit
                .map(|limit| pace::TokenBucket::new(limit, now)),
            batch_max: settings.batch_max.max(1),
            per_call: settings.one_request_per_call,
        }
    }

    /// Most events the next send call may carry now (0: wait for [`Pace::ready_at`]).
    fn budget(&mut self, now: Instant) -> usize {
        match &mut self.bucket {
            None => self.batch_max,
            Some(bucket) => match bucket.available(now) {
                0 => 0,
                _ if self.per_call => self.batch_max,
                n => n.min(self.batch_max),
            },
        }
    }

    /// A send call of `events` events went now.
    fn spend(&mut self, events: usize, now: Instant) {
        if let Some(bucket) = &mut self.bucket {
            bucket.take(if self.per_call { 1 } else { events }, now);
        }
    }

    /// When the next send call may go.
    fn ready_at(&self, now: Instant) -> Instant {
        self.bucket.as_ref().map_or(now, |b| b.ready_at(now))
    }
}

/// Counters of one sink's delivery.
#[derive(Debug, Default)]
pub struct Stats {
    /// Events the sink acknowledged.
    pub delivered: AtomicU64,
    /// Events not routed to this sink (acknowledged without sending).
    pub skipped: AtomicU64,
    /// Retries scheduled.
    pub retried: AtomicU64,
    /// Events dead-lettered.
    pub dead_lettered: AtomicU64,
    /// Dead letters in the queue (recounted every few seconds, counted up in between).
    pub dead_letter_queue: AtomicU64,
    /// The dead-letter queue is at its bound: failing events are held and retried.
    pub dead_letter_queue_full: AtomicBool,
    /// Oversized events sent again in their reference-only form.
    pub truncated: AtomicU64,
    /// Events replaced by a newer event of their key within `debounce`: acknowledged, not sent.
    pub debounced: AtomicU64,
    /// Dead letters forwarded to the `deadLetterSink`.
    pub forwarded: AtomicU64,
    /// Dead letters the `deadLetterSink` rejected (they stay in the queue).
    pub forward_failed: AtomicU64,
    /// The sink is paused (failing everything, or unreachable since start; probing).
    pub paused: AtomicBool,
    /// Why the sink is paused, while it is: the failure that paused it, then the last probe's.
    pub pause_reason: std::sync::Mutex<Option<String>>,
    /// Route `when` evaluations that failed for this sink (handled by the route's `onError`).
    pub route_filter_errors: AtomicU64,
    /// Change-to-delivery latency: from the event's `time` (herald's observation) to the sink's Ok.
    pub latency: Histogram,
}

impl Stats {
    /// Marks the sink paused for `reason` (what an operator reads in `/readyz` and `/status`).
    pub fn pause(&self, reason: String) {
        *self
            .pause_reason
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(reason);
        self.paused.store(true, Ordering::SeqCst);
    }

    /// Marks the sink delivering again.
    pub fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
        *self
            .pause_reason
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }

    /// Why the sink is paused, if it is.
    pub fn pause_reason(&self) -> Option<String> {
        if !self.paused.load(Ordering::SeqCst) {
            return None;
        }
        self.pause_reason
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Upper bounds (seconds) of the latency histogram's buckets.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// A fixed-bucket histogram of seconds, lock-free (Prometheus semantics: cumulative at render time).
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        if let Some(i) = LATENCY_BUCKETS.iter().position(|b| secs <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(
            u64::try_from(d.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Cumulative bucket counts, the total count and the sum in seconds.
    pub fn snapshot(&self) -> (Vec<(f64, u64)>, u64, f64) {
        let mut running = 0;
        let buckets = LATENCY_BUCKETS
            .iter()
            .zip(&self.buckets)
            .map(|(b, c)| {
                running += c.load(Ordering::Relaxed);
                (*b, running)
            })
            .collect();
        #[allow(clippy::cast_precision_loss)]
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        (buckets, self.count.load(Ordering::Relaxed), sum)
    }

    /// The smallest bucket bound under which at least `q` of the observations fall (an upper estimate).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let (buckets, count, _) = self.snapshot();
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let want = (count as f64 * q).ceil() as u64;
        buckets
            .into_iter()
            .find(|(_, c)| *c >= want.max(1))
            .map(|(b, _)| b)
    }
}

/// A dead letter: the event and why it could not be delivered (EVENT-FORMAT.md). The one record
/// type of the dead-letter queue, shared with the forwarder, `herald dlq` and the admin endpoint.
pub use herald_sink_core::dead_letter::DeadLetter;

/// Where dead letters go.
pub trait DeadLetters: Send + Sync + 'static {
    /// Stores one dead letter; an error is logged and the letter is kept in the log line.
    fn dead_letter(&self, letter: &DeadLetter) -> Result<(), String>;
    /// How many dead letters `sink` has.
    fn count(&self, sink: &str) -> usize;
}

fn rfc3339(t: SystemTime) -> String {
    herald_sink_core::event::format_time(t)
}

/// The delay before attempt `n + 1`: [`backoff::DELIVERY`]'s schedule between the sink's bounds.
fn retry_delay(settings: &Settings, n: u32) -> Duration {
    backoff::DELIVERY
        .between(settings.min_backoff, settings.max_backoff)
        .delay(n)
}

struct Breaker {
    /// The last time the sink took an event: a budget only runs out for an event that kept failing
    /// while the sink was taking others, so an outage never dead-letters what it delays.
    last_ok: Option<Instant>,
    failing_calls: u32,
    /// Keys that failed during the current streak: one key failing alone is that event's problem,
    /// not the sink's, and must not pause the sink.
    failing_keys: std::collections::HashSet<String>,
    /// The event probed last, so probes rotate over keys.
    last_probe: Option<u64>,
    paused: bool,
    /// Paused since start because the target was unreachable: with no event to probe with, the
    /// health check probes, so an idle sink still resumes once its target answers.
    health_probe: bool,
    probes: u32,
    probe_at: Instant,
}

/// What a send call was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    /// Regular delivery from the window.
    Normal,
    /// A probe of a paused sink (does not count as an attempt).
    Probe,
    /// Events an operator asked to send again (dead letters, `herald replay`).
    Replay,
    /// The sink's health check, probing a sink paused since start that has no event to send.
    Health,
}

type SendResult = (Vec<Envelope>, Vec<Outcome>, Call);

/// The journal keeps the dead letters: a JSON record per event ([`DeadLetter::to_bytes`]), by sink
/// and sequence.
impl DeadLetters for Journal {
    fn dead_letter(&self, letter: &DeadLetter) -> Result<(), String> {
        let bytes = letter.to_bytes().map_err(|e| e.to_string())?;
        self.dead_letter_put(&letter.error.sink, letter.seq, &bytes)
            .map_err(|e| e.to_string())
    }

    fn count(&self, sink: &str) -> usize {
        self.dead_letter_count(sink)
    }
}

/// Delivers to `sink` until `stop` fires and everything journaled has been delivered (the caller bounds
/// how long that may take).
#[allow(clippy::too_many_arguments)]
pub async fn run<S: Sink>(
    name: String,
    sink: Arc<S>,
    journal: Journal,
    router: Arc<Router>,
    settings: Settings,
    from_start: bool,
    stop: CancellationToken,
    stats: Arc<Stats>,
    dead: Option<Arc<dyn DeadLetters>>,
) {
    let cursor = match journal.register_sink(&name, from_start) {
        Ok(c) => c,
        Err(error) => {
            tracing::error!(message = "Cannot register the sink's cursor.", sink = %name, %error);
            return;
        }
    };
    let done = match journal.acked(&name) {
        Ok(done) => done,
        Err(error) => {
            // Without them the sink re-sends more after a restart; it never skips.
            tracing::warn!(message = "Cannot read the sink's acknowledgements above its cursor; they are sent again.", sink = %name, %error);
            Vec::new()
        }
    };
    let mut window = Window::resume(cursor, done);
    let mut written_changes = window.changes();
    // Reading and decoding the journal runs in its own task, ahead of the window, so it overlaps
    // with encoding and settling (it was over a third of this loop's CPU). It hands over a page
    // at a time: one wake-up of this loop per page, not per event.
    let (reads_tx, mut reads) = tokio::sync::mpsc::channel(1);
    let _reader = AbortOnDropHandle::new(tokio::spawn(read_ahead::<S>(
        name.clone(),
        journal.clone(),
        router.clone(),
        stats.clone(),
        cursor,
        settings.window.clamp(1, READ_PAGE),
        reads_tx,
    )));
    // The page in hand: taken into the window as it has room.
    let mut page: std::collections::VecDeque<Read> = std::collections::VecDeque::new();
    let mut inflight: FuturesUnordered<futures::future::BoxFuture<'static, SendResult>> =
        FuturesUnordered::new();
    let mut replaying = false;
    let mut replay_turn = true;
    let mut drain_to: Option<u64> = None;
    let mut replay_at = Instant::now();
    let mut breaker = Breaker {
        last_ok: None,
        failing_calls: 0,
        failing_keys: std::collections::HashSet::new(),
        last_probe: None,
        paused: settings.start_paused,
        health_probe: settings.start_paused,
        probes: 0,
        probe_at: Instant::now(),
    };
    if settings.start_paused {
        stats.paused.store(true, Ordering::SeqCst);
    }
    let mut recount_at = Instant::now();
    let mut pace = Pace::new(&settings, Instant::now());
    loop {
        while window.len() < settings.window {
            if let Some(read) = page.pop_front() {
                take_read(&name, &settings, &mut window, &stats, dead.as_deref(), read);
                continue;
            }
            match reads.try_recv() {
                Ok(next) => page.extend(next),
                Err(_) => break,
            }
        }
        let now = Instant::now();
        if now >= recount_at
            && let Some(dead) = &dead
        {
            // Operators drain the queue through the admin endpoint or a forwarder: recount rather
            // than track every removal.
            let n = u64::try_from(dead.count(&name)).unwrap_or(u64::MAX);
            stats.dead_letter_queue.store(n, Ordering::Relaxed);
            let full = n >= u64::try_from(settings.max_dead_letters).unwrap_or(u64::MAX);
            if stats.dead_letter_queue_full.swap(full, Ordering::Relaxed) != full {
                if full {
                    tracing::error!(message = "Dead-letter queue full; failing events are held and retried until it is drained.", sink = %name, size = n);
                } else {
                    tracing::info!(message = "Dead-letter queue has room again.", sink = %name, size = n);
                }
            }
            recount_at = now + settings.dead_letter_recount;
        }
        if breaker.paused {
            if inflight.is_empty() && now >= breaker.probe_at {
                if pace.budget(now) == 0 {
                    // A probe is a request too: it waits for the rate limit.
                } else if let Some(probe) = window.take_probe(breaker.last_probe) {
                    breaker.last_probe = Some(probe.seq);
                    pace.spend(1, now);
                    inflight.push(send(sink.clone(), vec![probe], Call::Probe));
                } else if breaker.health_probe {
                    inflight.push(health(sink.clone()));
                }
            }
        } else {
            // Under a rate limit the window's backlog could take every token for as long as it
            // lasts and starve a replay: a due replay and the window take turns.
            let replay = |replaying: &mut bool, replay_at: &mut Instant, pace: &mut Pace| {
                let budget = pace.budget(now);
                if *replaying || budget == 0 || Instant::now() < *replay_at {
                    return false;
                }
                let batch = replays(&name, &journal, budget);
                if batch.is_empty() {
                    *replay_at = Instant::now() + REPLAY_POLL;
                    return false;
                }
                *replaying = true;
                pace.spend(batch.len(), now);
                inflight.push(send(sink.clone(), batch, Call::Replay));
                true
            };
            if replay_turn && replay(&mut replaying, &mut replay_at, &mut pace) {
                replay_turn = false;
            }
            while inflight.len() < settings.concurrency.max(1) {
                let budget = pace.budget(now);
                if budget == 0 {
                    break;
                }
                let batch = window.take_ready(now, budget);
                if batch.is_empty() {
                    break;
                }
                pace.spend(batch.len(), now);
                inflight.push(send(sink.clone(), batch, Call::Normal));
                replay_turn = true;
            }
            if replay(&mut replaying, &mut replay_at, &mut pace) {
                replay_turn = false;
            }
        }
        if window.changes() != written_changes {
            let ack = window.ack_point();
            let above = window.done_above(crate::journal::MAX_ACKED_RANGES);
            match journal.acknowledge(&name, ack, &above) {
                Ok(()) => {
                    window.acked_upto = ack;
                    written_changes = window.changes();
                }
                Err(error) => {
                    tracing::error!(message = "Cannot advance the sink's cursor.", sink = %name, %error)
                }
            }
        }
        // A stop drains what was journaled when it came: at shutdown the watchers have stopped, so
        // that is everything; a sink removed while watchers run would otherwise chase a moving head.
        if stop.is_cancelled() {
            let drain_to = *drain_to.get_or_insert_with(|| journal.head());
            if window.is_empty() && inflight.is_empty() && window.read_upto >= drain_to {
                return;
            }
        }
        let wake = wake_at(
            breaker.paused.then_some(breaker.probe_at),
            inflight.len() >= settings.concurrency.max(1),
            window.next_due(),
            pace.ready_at(now),
        );
        let idle = wake.map_or(IDLE_POLL, |w| {
            w.saturating_duration_since(now).min(IDLE_POLL)
        });
        tokio::select! {
            Some((batch, outcomes, call)) = inflight.next(), if !inflight.is_empty() => {
                if call == Call::Replay {
                    replaying = false;
                    replay_at = settle_replays(&name, &settings, &journal, &stats, dead.as_deref(), &batch, &outcomes);
                } else if call == Call::Health {
                    settle_health(&name, &settings, &mut breaker, &stats, &outcomes);
                } else {
                    settle(&name, &settings, &mut window, &mut breaker, &stats, dead.as_deref(), batch, outcomes, call == Call::Probe);
                }
            }
            next = reads.recv(), if window.len() < settings.window && page.is_empty() => {
                let Some(next) = next else {
                    // Only a panic ends the reader; without it nothing more would ever be delivered.
                    tracing::error!(message = "The journal reader stopped; the sink's driver stops with it.", sink = %name);
                    return;
                };
                page.extend(next);
            }
            () = tokio::time::sleep(idle) => {}
        }
    }
}

/// When the driver's loop must look again without a call returning or an event arriving (`None`:
/// only then): a paused sink's next probe (`probe_at`), or the first due event; either no sooner
/// than the rate limit's next token (`token_at`). `saturated`: every call slot is taken.
fn wake_at(
    probe_at: Option<Instant>,
    saturated: bool,
    next_due: Option<Instant>,
    token_at: Instant,
) -> Option<Instant> {
    if let Some(probe_at) = probe_at {
        // A probe takes a token too: waking at a past probe_at with an empty bucket would loop
        // without sleeping until the token is there.
        Some(probe_at.max(token_at))
    } else if saturated {
        // Nothing can be sent before a call returns (which wakes the loop): a due event must not
        // turn this into a busy loop that rescans the window every millisecond.
        None
    } else {
        // A due event that the rate limit holds back wakes the loop when a token is there.
        next_due.map(|due| due.max(token_at))
    }
}

fn send<S: Sink>(
    sink: Arc<S>,
    batch: Vec<Envelope>,
    call: Call,
) -> futures::future::BoxFuture<'static, SendResult> {
    Box::pin(async move {
        let outcomes = sink.send(&batch).await;
        (batch, outcomes, call)
    })
}

/// The sink's health check as a probe: `Ok`, or a retry whose detail is the check's error.
fn health<S: Sink>(sink: Arc<S>) -> futures::future::BoxFuture<'static, SendResult> {
    Box::pin(async move {
        let outcome = match sink.healthcheck().await {
            Ok(()) => Outcome::Ok,
            Err(error) => Outcome::retry(Reason::new(
                "unreachable",
                herald_sink_core::error_chain(&error),
            )),
        };
        (Vec::new(), vec![outcome], Call::Health)
    })
}

/// A health-check probe's answer: the first success resumes the sink; a failure backs the next
/// probe off.
fn settle_health(
    name: &str,
    settings: &Settings,
    breaker: &mut Breaker,
    stats: &Stats,
    outcomes: &[Outcome],
) {
    if !breaker.paused {
        return;
    }
    match outcomes.first() {
        Some(Outcome::Ok) => {
            breaker.paused = false;
            breaker.health_probe = false;
            breaker.failing_calls = 0;
            breaker.failing_keys.clear();
            stats.resume();
            tracing::info!(message = "Sink reachable; resuming delivery.", sink = %name);
        }
        other => {
            if let Some(reason) = other.and_then(Outcome::reason) {
                stats.pause(reason.to_string());
            }
            breaker.probes = breaker.probes.saturating_add(1);
            breaker.probe_at = Instant::now() + retry_delay(settings, breaker.probes);
        }
    }
}

/// Journal events read per page when queuing replays.
const REPLAY_PAGE: usize = 1024;

/// Queues journaled events (within retention) for redelivery to `sink`: from sequence `from` on, observed
/// at or after `since`, and only what the routes send this sink — a replay must not leak other
/// resources' events. Pages through the journal; returns the queued sequence numbers.
pub fn queue_replays(
    journal: &Journal,
    router: &Router,
    sink: &str,
    from: u64,
    since: Option<jiff::Timestamp>,
) -> Result<Vec<u64>, crate::journal::JournalError> {
    let mut queued = Vec::new();
    let mut next = from;
    loop {
        let rows = journal.events_from(next, REPLAY_PAGE)?;
        let Some(&(last, _)) = rows.last() else { break };
        for (seq, bytes) in rows {
            let event = match CloudEvent::from_structured_json(&bytes) {
                Ok(event) => event,
                Err(error) => {
                    // Delivery dead-lettered it when it first read it; a replay cannot send it.
                    tracing::warn!(
                        message = "Unreadable journal entry not replayed.",
                        sink = %sink,
                        seq,
                        error = %herald_sink_core::error_chain(&error),
                    );
                    continue;
                }
            };
            let recent = since.is_none_or(|since| {
                event
                    .time
                    .as_deref()
                    .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                    .is_some_and(|t| t >= since)
            });
            if recent && router.wants(sink, &event) {
                journal.replay_put(sink, seq, &bytes)?;
                queued.push(seq);
            }
        }
        next = last + 1;
    }
    Ok(queued)
}

/// Queued replays for this sink, one per key, oldest first.
fn replays(name: &str, journal: &Journal, max: usize) -> Vec<Envelope> {
    let rows = match journal.replays(name, max * 4) {
        Ok(rows) => rows,
        Err(error) => {
            tracing::error!(message = "Reading replays failed.", sink = %name, %error);
            return Vec::new();
        }
    };
    let mut keys = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (seq, bytes) in rows {
        match CloudEvent::from_structured_json(&bytes) {
            Ok(event) => {
                let key = event.partition_key().unwrap_or(&event.id).to_string();
                if keys.insert(key) && out.len() < max {
                    out.push(journaled(seq, Journaled::new(event), bytes.len()));
                }
            }
            Err(error) => {
                tracing::error!(message = "Unreadable replay dropped.", sink = %name, seq, error = %herald_sink_core::error_chain(&error));
                let _ = journal.replay_done(name, seq);
            }
        }
    }
    out
}

/// Replays that were taken (or rejected again) leave the queue; the rest are tried later.
fn settle_replays(
    name: &str,
    settings: &Settings,
    journal: &Journal,
    stats: &Stats,
    dead: Option<&dyn DeadLetters>,
    batch: &[Envelope],
    outcomes: &[Outcome],
) -> Instant {
    let mut retry = false;
    for (envelope, outcome) in batch.iter().zip(outcomes) {
        match outcome {
            Outcome::Ok => {
                stats.delivered.fetch_add(1, Ordering::Relaxed);
                let _ = journal.replay_done(name, envelope.seq);
            }
            Outcome::Reject { reason } => {
                let p = Pending {
                    envelope: envelope.clone(),
                    key: Arc::from(""),
                    attempts: 1,
                    first_failure: None,
                    failing_since: None,
                    last_reason: None,
                    not_before: Instant::now(),
                    in_flight: false,
                };
                bury(name, dead, stats, &p, ErrorContext::PERMANENT, reason);
                let _ = journal.replay_done(name, envelope.seq);
            }
            Outcome::Retry { .. } => retry = true,
        }
    }
    Instant::now()
        + if retry {
            retry_delay(settings, 3)
        } else {
            Duration::ZERO
        }
}

/// Journal events read per page by [`read_ahead`].
const READ_PAGE: usize = 1024;

/// One journal event, decoded for the window.
enum Read {
    /// For this sink.
    Event(Envelope),
    /// Not routed to this sink.
    Skipped(u64),
    /// Does not read back as a valid event (already logged): its dead letter.
    Unreadable(Envelope, Reason),
}

/// Waits until an event after `after` may be readable. Woken by the group commit that makes the
/// next event durable (a poll only would add up to [`IDLE_POLL`] to every event's latency); the
/// poll stays for what the commit does not announce: events after `after` that were durable yet
/// not read (retention removed them first, or the read failed), and a journal that can take no
/// more writes.
async fn wait_for_more(journal: &Journal, after: u64) {
    if journal.durable_seq() <= after {
        match tokio::time::timeout(IDLE_POLL, journal.durable_after(after)).await {
            // A commit made one durable, or a poll's length has passed already.
            Ok(true) | Err(_) => return,
            // Nothing more can become durable: look again at the idle pace.
            Ok(false) => {}
        }
    }
    tokio::time::sleep(IDLE_POLL).await;
}

/// Reads durable events after `after` in order, `page` at a time, decodes them and hands each
/// page over, for as long as the driver listens. The channel's bound (one page), the page being
/// decoded and the driver's page in hand keep it at most about three pages ahead of the window.
async fn read_ahead<S: Sink>(
    name: String,
    journal: Journal,
    router: Arc<Router>,
    stats: Arc<Stats>,
    mut after: u64,
    page: usize,
    out: tokio::sync::mpsc::Sender<Vec<Read>>,
) {
    loop {
        let rows = match journal.read_vouched(&name, after, page) {
            Ok(rows) => rows,
            Err(error) => {
                tracing::error!(message = "Reading the journal failed.", sink = %name, %error);
                Vec::new()
            }
        };
        if rows.is_empty() {
            wait_for_more(&journal, after).await;
            continue;
        }
        let mut decoded = Vec::with_capacity(rows.len());
        for (seq, bytes, layout) in rows {
            after = seq;
            let len = bytes.len();
            // A sink that sends the stored bytes as they are needs no attribute decoded; and an
            // event the recorder vouched for (handed over from memory with its layout) is not
            // read at all for it. Anything else is read and judged: an entry journaled to be
            // dead-lettered never comes with a layout.
            let event = match layout {
                Some(layout) if !S::READS_ATTRIBUTES => Journaled::vouched(bytes.clone(), &layout),
                _ if S::READS_ATTRIBUTES => Journaled::from_structured_json(bytes.clone()),
                _ => Journaled::read_lazily(bytes.clone()),
            };
            let read = match event {
                // Only a route `when` for this sink reads `data`: routing parses it for that alone.
                Ok(event)
                    if router.wants_lazily(
                        &name,
                        &event,
                        || event.event(),
                        Some(&stats.route_filter_errors),
                    ) =>
                {
                    Read::Event(journaled(seq, event, len))
                }
                Ok(_) => Read::Skipped(seq),
                Err(error) => {
                    let (stand_in, reason) = unreadable::unreadable_entry(seq, &bytes, &error);
                    tracing::error!(
                        message = "Unreadable journal entry; dead-lettering it.",
                        sink = %name,
                        seq,
                        error = %reason.detail,
                    );
                    Read::Unreadable(stand_in, reason)
                }
            };
            decoded.push(read);
        }
        if out.send(decoded).await.is_err() {
            return;
        }
    }
}

/// The envelope of a journaled event: its length is that of the stored bytes, not re-encoded.
fn journaled(seq: u64, event: Journaled, encoded_len: usize) -> Envelope {
    Envelope {
        seq,
        event: Arc::new(event),
        encoded_len,
    }
}

fn take_read(
    name: &str,
    settings: &Settings,
    window: &mut Window,
    stats: &Stats,
    dead: Option<&dyn DeadLetters>,
    read: Read,
) {
    match read {
        // Delivered (or dead-lettered) in an earlier run, above where its cursor stood.
        Read::Event(Envelope { seq, .. }) | Read::Unreadable(Envelope { seq, .. }, _)
            if window.was_done(seq) =>
        {
            window.read_through(seq);
        }
        Read::Event(envelope) => match settings.debounce {
            Some(debounce) => {
                if window
                    .push_debounced(envelope, Instant::now(), debounce)
                    .is_some()
                {
                    stats.debounced.fetch_add(1, Ordering::Relaxed);
                }
            }
            None => window.push(envelope, Instant::now()),
        },
        Read::Skipped(seq) => {
            stats.skipped.fetch_add(1, Ordering::Relaxed);
            window.read_through(seq);
        }
        Read::Unreadable(stand_in, reason) => {
            // Stored whatever the queue's bound: holding it back would stop the sink for good, as
            // no retry can make the entry readable.
            let seq = stand_in.seq;
            let p = Pending {
                envelope: stand_in,
                key: Arc::from(""),
                attempts: 1,
                first_failure: None,
                failing_since: None,
                last_reason: None,
                not_before: Instant::now(),
                in_flight: false,
            };
            bury(name, dead, stats, &p, ErrorContext::PERMANENT, &reason);
            window.read_through(seq);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn settle(
    name: &str,
    settings: &Settings,
    window: &mut Window,
    breaker: &mut Breaker,
    stats: &Stats,
    dead: Option<&dyn DeadLetters>,
    batch: Vec<Envelope>,
    outcomes: Vec<Outcome>,
    probe: bool,
) {
    debug_assert_eq!(
        batch.len(),
        outcomes.len(),
        "a sink must return one outcome per event"
    );
    let now = Instant::now();
    if outcomes.iter().any(Outcome::is_ok) {
        breaker.last_ok = Some(now);
    }
    let mut any_ok = false;
    // One clock read for the whole call: its events were acknowledged together.
    let wall_now = jiff::Timestamp::now();
    let mut observed: Option<(&str, Option<jiff::Timestamp>)> = None;
    let missing = Outcome::Retry {
        after: None,
        reason: Reason::new(
            herald_sink_core::sink::codes::MISSING_OUTCOME,
            "the sink returned fewer outcomes than events",
        ),
    };
    for (envelope, outcome) in batch
        .iter()
        .zip(outcomes.iter().chain(std::iter::repeat(&missing)))
    {
        let seq = envelope.seq;
        match outcome {
            Outcome::Ok => {
                any_ok = true;
                stats.delivered.fetch_add(1, Ordering::Relaxed);
                if let Some(time) = envelope.event.time() {
                    // A watch batch's events share their observation time (milliseconds): parse
                    // each distinct one once.
                    if observed.is_none_or(|(last, _)| last != time) {
                        observed = Some((time, time.parse::<jiff::Timestamp>().ok()));
                    }
                    if let Some((_, Some(at))) = &observed {
                        let age = wall_now.duration_since(*at);
                        stats
                            .latency
                            .observe(Duration::try_from(age).unwrap_or_default());
                    }
                }
                window.done(seq);
            }
            Outcome::Reject { reason } => {
                if reason.code == herald_sink_core::sink::codes::OVERSIZE
                    && !settings.oversize.dead_letters(&envelope.event)
                    && !envelope.event.extensions.contains_key("truncated")
                {
                    // `onOversize: reference` (the default): the same event without its payload.
                    let reference = crate::event::to_reference(&envelope.event);
                    window.replace(seq, Envelope::new(seq, reference), now);
                    stats.truncated.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                if dlq_full(settings, stats, dead) {
                    let delay = retry_delay(settings, 6);
                    window.retry(seq, delay, reason.clone(), false, now);
                    stats.retried.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                if let Some(p) = window.done(seq) {
                    bury(name, dead, stats, &p, ErrorContext::PERMANENT, reason);
                }
            }
            Outcome::Retry { after, reason } => {
                let Some(p) = window.retry(seq, Duration::ZERO, reason.clone(), !probe, now) else {
                    continue;
                };
                let attempts = p.attempts;
                let too_many = settings.max_attempts.is_some_and(|m| attempts >= m);
                let too_old = settings.max_age.is_some_and(|age| {
                    p.first_failure
                        .and_then(|f| f.elapsed().ok())
                        .is_some_and(|e| e >= age)
                });
                let sink_took_others = breaker
                    .last_ok
                    .zip(p.failing_since)
                    .is_some_and(|(ok, since)| ok >= since);
                if !probe
                    && (too_many || too_old)
                    && sink_took_others
                    && !dlq_full(settings, stats, dead)
                {
                    if let Some(p) = window.done(seq) {
                        let exhausted = Reason::new(
                            herald_sink_core::sink::codes::RETRIES_EXHAUSTED,
                            format!("{} ({})", reason.detail, reason.code),
                        );
                        bury(name, dead, stats, &p, ErrorContext::RETRYABLE, &exhausted);
                    }
                    continue;
                }
                let delay = after
                    .unwrap_or_default()
                    .min(MAX_HINT)
                    .max(retry_delay(settings, attempts.saturating_sub(1)));
                window.retry(seq, delay, reason.clone(), false, now);
                stats.retried.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    if any_ok {
        breaker.failing_calls = 0;
        breaker.failing_keys.clear();
        if breaker.paused {
            breaker.paused = false;
            breaker.health_probe = false;
            stats.resume();
            tracing::info!(message = "Sink recovered; resuming delivery.", sink = %name);
        }
        return;
    }
    let all_retry = outcomes.iter().all(|o| matches!(o, Outcome::Retry { .. }));
    if !all_retry {
        return;
    }
    if breaker.paused {
        if let Some(reason) = outcomes.iter().find_map(Outcome::reason) {
            stats.pause(reason.to_string());
        }
        breaker.probes = breaker.probes.saturating_add(1);
        breaker.probe_at = now + retry_delay(settings, breaker.probes);
        return;
    }
    breaker.failing_calls = breaker.failing_calls.saturating_add(1);
    for e in &batch {
        let e = &e.event;
        breaker
            .failing_keys
            .insert(e.partition_key().unwrap_or_else(|| e.id()).to_owned());
    }
    if breaker.failing_calls >= settings.pause_after && breaker.failing_keys.len() >= 2 {
        breaker.paused = true;
        breaker.probes = 0;
        breaker.probe_at = now + retry_delay(settings, 0);
        let reason = outcomes
            .iter()
            .find_map(Outcome::reason)
            .map(ToString::to_string)
            .unwrap_or_default();
        stats.pause(reason.clone());
        tracing::warn!(message = "Sink failing every event; pausing and probing.", sink = %name, error = %reason);
    }
}

/// Whether the dead-letter queue is at its bound (only when there is one to fill).
fn dlq_full(settings: &Settings, stats: &Stats, dead: Option<&dyn DeadLetters>) -> bool {
    let full = dead.is_some()
        && stats.dead_letter_queue.load(Ordering::Relaxed)
            >= u64::try_from(settings.max_dead_letters).unwrap_or(u64::MAX);
    if full {
        stats.dead_letter_queue_full.store(true, Ordering::Relaxed);
    }
    full
}

fn bury(
    name: &str,
    dead: Option<&dyn DeadLetters>,
    stats: &Stats,
    p: &Pending,
    class: &'static str,
    reason: &Reason,
) {
    stats.dead_lettered.fetch_add(1, Ordering::Relaxed);
    let now = SystemTime::now();
    let letter = DeadLetter {
        seq: p.envelope.seq,
        error: ErrorContext {
            sink: name.to_string(),
            attempts: p.attempts.max(1),
            first_failure: rfc3339(p.first_failure.unwrap_or(now)),
            last_failure: rfc3339(now),
            class: class.to_string(),
            code: reason.code.to_string(),
            message: reason.detail.to_string(),
        },
        event: CloudEvent::clone(&p.envelope.event),
    };
    tracing::error!(
        message = "Event dead-lettered.",
        sink = %name,
        id = %p.envelope.event.id,
        class,
        code = reason.code,
        error = %reason.detail,
    );
    stats.dead_letter_queue.fetch_add(1, Ordering::Relaxed);
    if let Some(store) = dead
        && let Err(error) = store.dead_letter(&letter)
    {
        tracing::error!(message = "Cannot store a dead letter.", sink = %name, id = %p.envelope.event.id, %error);
    }
}

#[cfg(test)]
mod tests;
