//! The delivery window of one sink: which journaled events are pending, which may be sent now (at most
//! one in flight per partition key, in sequence order per key), how far the cursor may advance and
//! which events above it are done too. Pure bookkeeping, no I/O, so ordering rules are tested
//! directly.
//!
//! Which events may go next is kept as it changes (each key's pending events in order, and the
//! keys' first events not in flight), not found by scanning the window: the driver asks after
//! every read and every settled call, and a scan of a full window per question was most of its
//! CPU per event.
//!
//! Done above the cursor means read and no longer pending: every event of a key leaves the window
//! (delivered, dead-lettered) before the next one of that key is sent, so a done event never has
//! an earlier event of its key still pending, and skipping it after a restart keeps each key's
//! order. The one exception is `debounce` ([`Window::push_debounced`]): an event replaced by a
//! newer one of its object is done while an older one of its key may still be in flight; skipping
//! it after a restart is what debounce would do again, as the newer one is still pending and is
//! sent.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use herald_sink_core::event::ExtensionValue;
use herald_sink_core::sink::{Envelope, Reason};
use tokio::time::Instant;

/// One event waiting for its sink.
#[derive(Debug, Clone)]
pub struct Pending {
    /// The journaled event.
    pub envelope: Envelope,
    /// Its partition key (events with equal keys are delivered in order, one at a time).
    pub key: Arc<str>,
    /// Attempts that counted (probes of a paused sink do not).
    pub attempts: u32,
    /// When the first attempt failed (wall clock, for dead letters).
    pub first_failure: Option<SystemTime>,
    /// When the first attempt failed (monotonic, for budgets).
    pub failing_since: Option<Instant>,
    /// The last failure's reason.
    pub last_reason: Option<Reason>,
    /// Not to be sent before this instant (backoff or `Retry-After`).
    pub not_before: Instant,
    /// In a send call right now.
    pub in_flight: bool,
}

/// The pending events of one sink, in sequence order.
#[derive(Debug, Default)]
pub struct Window {
    pending: Ordered,
    /// Everything up to here was read from the journal.
    pub read_upto: u64,
    /// Everything up to here is done (delivered, skipped or dead-lettered) and acknowledged.
    pub acked_upto: u64,
    /// Ranges done in an earlier run (from the journal), not read again yet: they are skipped
    /// when read ([`Window::was_done`]) and kept in [`Window::done_above`] until then.
    inherited: Vec<(u64, u64)>,
    /// Bumped whenever the done set changes, so the driver writes it only then.
    changes: u64,
    /// With `debounce`: each object's newest pending event, the one a newer event of the same
    /// object replaces ([`identity`]).
    newest: HashMap<String, u64>,
    /// Each key's pending events, oldest first: only the first may be in flight or sent.
    /// foldhash rather than SipHash: one lookup per event pushed and per event done.
    keys: HashMap<Arc<str>, VecDeque<u64>, foldhash::fast::RandomState>,
    /// The keys' first pending events that are not in flight, in sequence order: what
    /// [`Window::take_ready`], [`Window::take_probe`] and [`Window::next_due`] look at.
    idle: BTreeSet<u64>,
}

impl Window {
    /// A window whose cursor stands at `cursor`.
    pub fn new(cursor: u64) -> Self {
        Self {
            pending: Ordered::default(),
            read_upto: cursor,
            acked_upto: cursor,
            inherited: Vec::new(),
            changes: 0,
            newest: HashMap::new(),
            keys: HashMap::default(),
            idle: BTreeSet::new(),
        }
    }

    /// A window whose cursor stands at `cursor`, with the events in `done` (ascending inclusive
    /// ranges above the cursor, as the journal recorded them) already done.
    pub fn resume(cursor: u64, done: Vec<(u64, u64)>) -> Self {
        Self {
            inherited: done,
            ..Self::new(cursor)
        }
    }

    /// Whether `seq` was done in an earlier run (it is then not sent again).
    pub fn was_done(&self, seq: u64) -> bool {
        let i = self.inherited.partition_point(|&(_, last)| last < seq);
        self.inherited
            .get(i)
            .is_some_and(|&(first, _)| first <= seq)
    }

    /// A counter that moves whenever an event becomes done; compare it to decide whether the done
    /// set needs writing.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// The events done after the [`ack_point`](Window::ack_point), as ascending, disjoint,
    /// non-adjacent inclusive ranges, at most `max` of them (those nearest the cursor): everything
    /// read and no longer pending, plus what an earlier run had done beyond what was read.
    pub fn done_above(&self, max: usize) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        let push = |range: (u64, u64), out: &mut Vec<(u64, u64)>| match out.last_mut() {
            Some(prev) if prev.1.saturating_add(1) >= range.0 => prev.1 = prev.1.max(range.1),
            _ => out.push(range),
        };
        let mut next = self.ack_point().saturating_add(1);
        for seq in self.pending.keys() {
            if out.len() > max {
                break;
            }
            if seq > next {
                push((next, seq - 1), &mut out);
            }
            next = next.max(seq.saturating_add(1));
        }
        if next <= self.read_upto {
            push((next, self.read_upto), &mut out);
        }
        for &(first, last) in &self.inherited {
            if out.len() > max {
                break;
            }
            if last > self.read_upto {
                push((first.max(self.read_upto + 1), last), &mut out);
            }
        }
        out.truncate(max);
        out
    }

    /// Pending events (in flight or waiting).
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// No pending event.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Adds an event read from the journal.
    pub fn push(&mut self, envelope: Envelope, now: Instant) {
        let seq = envelope.seq;
        self.read_upto = self.read_upto.max(seq);
        let name = envelope
            .event
            .partition_key()
            .unwrap_or_else(|| envelope.event.id());
        // A key with events pending already lends its name: no allocation per event.
        let key = match self.keys.get_key_value(name) {
            Some((key, _)) => Arc::clone(key),
            None => Arc::from(name),
        };
        match self.keys.get_mut(&*key) {
            Some(queue) => {
                // Events arrive in sequence order, so a key's queue stays sorted.
                debug_assert!(queue.back().is_none_or(|&last| last < seq));
                queue.push_back(seq);
            }
            None => {
                self.keys.insert(key.clone(), VecDeque::from([seq]));
                self.idle.insert(seq);
            }
        }
        self.pending.insert(
            seq,
            Pending {
                envelope,
                key,
                attempts: 0,
                first_failure: None,
                failing_since: None,
                last_reason: None,
                not_before: now,
                in_flight: false,
            },
        );
    }

    /// Adds an event read from the journal under `debounce`: it waits `debounce` before it may
    /// be sent, and it replaces its object's newest pending event when that one is not in flight,
    /// taking over its due time (so an object's window starts with its first event, and a stream
    /// of changes still sends its latest state every `debounce`). Returns the replaced event,
    /// which is done: acknowledged without being sent.
    ///
    /// The object is the [`identity`], not the partition key: a Deployment and a Service named
    /// `shop/web` share a key, and so do an object deleted and the one re-created under its name,
    /// yet neither may stand in for the other. The key still orders them.
    pub fn push_debounced(
        &mut self,
        envelope: Envelope,
        now: Instant,
        debounce: Duration,
    ) -> Option<u64> {
        let seq = envelope.seq;
        let key = ordering_key(&envelope);
        let object = identity(&envelope, &key);
        let mut due = later(now, debounce);
        let replaced = self
            .newest
            .get(&object)
            .copied()
            .filter(|old| self.pending.get(*old).is_some_and(|p| !p.in_flight));
        if let Some(old) = replaced
            && let Some(p) = self.remove(old)
        {
            self.changes += 1;
            due = p.not_before;
        }
        self.newest.insert(object, seq);
        self.push(envelope, now);
        if let Some(p) = self.pending.get_mut(seq) {
            p.not_before = due;
        }
        replaced
    }

    /// Notes that everything up to `seq` was read even if nothing was pushed (skipped events).
    pub fn read_through(&mut self, seq: u64) {
        self.read_upto = self.read_upto.max(seq);
        self.changes += 1;
    }

    /// Up to `max` events that may be sent now: for each key only its oldest pending event, and only if
    /// no event of that key is in flight and its backoff has passed. Marks them in flight.
    pub fn take_ready(&mut self, now: Instant, max: usize) -> Vec<Envelope> {
        // The first pending event of a key decides for the whole key: later ones wait behind it.
        let chosen: Vec<u64> = self
            .idle
            .iter()
            .filter(|seq| self.pending.get(**seq).is_some_and(|p| p.not_before <= now))
            .take(max)
            .copied()
            .collect();
        chosen
            .into_iter()
            .filter_map(|seq| self.take(seq))
            .collect()
    }

    /// Marks the idle event `seq` in flight and hands it out.
    fn take(&mut self, seq: u64) -> Option<Envelope> {
        let p = self.pending.get_mut(seq)?;
        self.idle.remove(&seq);
        p.in_flight = true;
        Some(p.envelope.clone())
    }

    /// `seq` is no longer in flight: it is idle again if it is still its key's first event.
    fn land(&mut self, seq: u64) {
        let Some(p) = self.pending.get_mut(seq) else {
            return;
        };
        p.in_flight = false;
        if self
            .keys
            .get(&*p.key)
            .is_some_and(|queue| queue.front() == Some(&seq))
        {
            self.idle.insert(seq);
        }
    }

    /// Takes `seq` out of the window and out of its key's queue; the key's next event, if any,
    /// becomes the one that may go.
    fn remove(&mut self, seq: u64) -> Option<Pending> {
        let p = self.pending.remove(seq)?;
        self.idle.remove(&seq);
        if let Some(queue) = self.keys.get_mut(&*p.key) {
            if queue.front() == Some(&seq) {
                queue.pop_front();
                if let Some(&next) = queue.front()
                    && self.pending.get(next).is_some_and(|n| !n.in_flight)
                {
                    self.idle.insert(next);
                }
            } else {
                queue.retain(|&s| s != seq);
            }
            if queue.is_empty() {
                self.keys.remove(&*p.key);
            }
        }
        Some(p)
    }

    /// The next key's first pending event after the one probed last (`after`), for probing a paused
    /// sink: rotating over keys, so one event the sink keeps refusing cannot be the only thing ever
    /// tried. Marks it in flight.
    pub fn take_probe(&mut self, after: Option<u64>) -> Option<Envelope> {
        let next = match after {
            Some(after) => self.idle.range(after.saturating_add(1)..).next(),
            None => None,
        };
        let seq = *next.or_else(|| self.idle.first())?;
        self.take(seq)
    }

    /// The earliest instant at which something waiting may be sent.
    pub fn next_due(&self) -> Option<Instant> {
        // Only the first pending event of each key can become sendable; the others wait behind it, and
        // counting them would wake the driver for nothing.
        self.idle
            .iter()
            .filter_map(|seq| self.pending.get(*seq))
            .map(|p| p.not_before)
            .min()
    }

    /// The event `seq` was taken: it leaves the window.
    pub fn done(&mut self, seq: u64) -> Option<Pending> {
        let removed = self.remove(seq);
        if let Some(p) = &removed {
            self.changes += 1;
            if !self.newest.is_empty() {
                let object = identity(&p.envelope, &p.key);
                if self.newest.get(&object) == Some(&seq) {
                    self.newest.remove(&object);
                }
            }
        }
        removed
    }

    /// The event `seq` must be tried again after `delay`; `counts` is false for probes of a paused sink.
    /// Returns the pending entry after the update.
    pub fn retry(
        &mut self,
        seq: u64,
        delay: Duration,
        reason: Reason,
        counts: bool,
        now: Instant,
    ) -> Option<&Pending> {
        self.land(seq);
        let p = self.pending.get_mut(seq)?;
        if counts {
            p.attempts = p.attempts.saturating_add(1);
        }
        p.first_failure.get_or_insert_with(SystemTime::now);
        p.failing_since.get_or_insert(now);
        p.last_reason = Some(reason);
        p.not_before = later(now, delay);
        Some(p)
    }

    /// Replaces the event `seq` (its reference-only form) and makes it due now; attempts stay.
    pub fn replace(&mut self, seq: u64, envelope: Envelope, now: Instant) {
        if let Some(p) = self.pending.get_mut(seq) {
            p.envelope = envelope;
            p.not_before = now;
        }
        self.land(seq);
    }

    /// Puts an in-flight event back without counting an attempt (the send was abandoned).
    pub fn release(&mut self, seq: u64) {
        self.land(seq);
    }

    /// How far the cursor may move: to just before the oldest pending event, or to what was read.
    pub fn ack_point(&self) -> u64 {
        match self.pending.first() {
            Some(first) => first.saturating_sub(1).max(self.acked_upto),
            None => self.read_upto,
        }
    }
}

/// The pending events by sequence number: a deque in sequence order, as the journal hands them
/// over (a push is a push at the back), an event that leaves in the middle leaving a hole that is
/// dropped once it reaches the front. A `BTreeMap` did the same with a node insert and a remove
/// per event, moving each entry within its node (docs/operations.md, "Delivery from memory,
/// round 6").
#[derive(Debug, Default)]
struct Ordered {
    slots: VecDeque<(u64, Option<Pending>)>,
    live: usize,
}

impl Ordered {
    fn len(&self) -> usize {
        self.live
    }

    fn is_empty(&self) -> bool {
        self.live == 0
    }

    fn index(&self, seq: u64) -> Option<usize> {
        let i = self.slots.partition_point(|(s, _)| *s < seq);
        self.slots
            .get(i)
            .is_some_and(|(s, p)| *s == seq && p.is_some())
            .then_some(i)
    }

    fn get(&self, seq: u64) -> Option<&Pending> {
        self.slots.get(self.index(seq)?)?.1.as_ref()
    }

    fn get_mut(&mut self, seq: u64) -> Option<&mut Pending> {
        let i = self.index(seq)?;
        self.slots.get_mut(i)?.1.as_mut()
    }

    fn insert(&mut self, seq: u64, pending: Pending) {
        if let Some(i) = self.index(seq) {
            // Read twice (it cannot be: the reader reads forward): the later read wins.
            if let Some((_, slot)) = self.slots.get_mut(i) {
                *slot = Some(pending);
            }
            return;
        }
        let i = self.slots.partition_point(|(s, _)| *s < seq);
        if i == self.slots.len() {
            self.slots.push_back((seq, Some(pending)));
        } else if self.slots.get(i).is_some_and(|(s, _)| *s == seq) {
            // A hole of the same number: filled again.
            if let Some((_, slot)) = self.slots.get_mut(i) {
                *slot = Some(pending);
            }
        } else {
            self.slots.insert(i, (seq, Some(pending)));
        }
        self.live += 1;
    }

    fn remove(&mut self, seq: u64) -> Option<Pending> {
        let i = self.index(seq)?;
        let taken = self.slots.get_mut(i)?.1.take();
        self.live -= 1;
        while self.slots.front().is_some_and(|(_, p)| p.is_none()) {
            self.slots.pop_front();
        }
        // Holes behind an event stuck at the front: bounded by the events still pending, so a
        // key in retries for hours does not keep a hole for every event delivered meanwhile.
        if self.slots.len() > 2 * self.live + 64 {
            self.slots.retain(|(_, p)| p.is_some());
        }
        taken
    }

    /// The lowest pending sequence number.
    fn first(&self) -> Option<u64> {
        // Holes never stay at the front.
        self.slots.front().map(|(seq, _)| *seq)
    }

    fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.slots
            .iter()
            .filter(|(_, p)| p.is_some())
            .map(|(seq, _)| *seq)
    }
}

/// The key an event is ordered by: its partition key, else its `id` (an event of its own).
/// Shared by the event's entry and its key's queue: one allocation, not a copy for each.
fn ordering_key(envelope: &Envelope) -> Arc<str> {
    let event = &envelope.event;
    Arc::from(event.partition_key().unwrap_or_else(|| event.id()))
}

/// The object an event is about, for `debounce`: its partition key, resource (`source`) and
/// `k8suid`. Events without them (not herald's) fall back to what they have, the key at least.
fn identity(envelope: &Envelope, key: &str) -> String {
    let event = envelope.event.attributes();
    let uid = event
        .extensions
        .get("k8suid")
        .and_then(ExtensionValue::as_str)
        .unwrap_or_default();
    // NUL separates: it is in none of a key, a source URI or a uid.
    format!("{key}\0{}\0{uid}", event.source)
}

/// Longest wait a pending event is given: a receiver's hint is capped well below this before it
/// gets here; this only keeps `Instant` arithmetic from overflowing (it panics).
const FAR: Duration = Duration::from_secs(30 * 24 * 3600);

/// `now + delay`, the delay at most [`FAR`].
fn later(now: Instant, delay: Duration) -> Instant {
    now.checked_add(delay.min(FAR)).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_sink_core::event::CloudEvent;

    fn env(seq: u64, key: &str) -> Envelope {
        let ev = CloudEvent::new(format!("id-{seq}"), "k8s://c/g/p", "t.created")
            .extension("partitionkey", ExtensionValue::String(key.into()));
        Envelope::new(seq, ev)
    }

    fn seqs(v: &[Envelope]) -> Vec<u64> {
        v.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn one_event_per_key_in_flight_and_keys_in_order() {
        let now = Instant::now();
        let mut w = Window::new(0);
        for (seq, key) in [(1, "a"), (2, "b"), (3, "a"), (4, "c"), (5, "b")] {
            w.push(env(seq, key), now);
        }
        assert_eq!(seqs(&w.take_ready(now, 10)), [1, 2, 4]);
        assert!(
            w.take_ready(now, 10).is_empty(),
            "a and b are in flight, c has nothing else"
        );
        w.done(1);
        assert_eq!(seqs(&w.take_ready(now, 10)), [3]);
    }

    #[test]
    fn a_retrying_event_holds_back_its_key_only() {
        let now = Instant::now();
        let mut w = Window::new(0);
        for (seq, key) in [(1, "a"), (2, "a"), (3, "b")] {
            w.push(env(seq, key), now);
        }
        assert_eq!(seqs(&w.take_ready(now, 10)), [1, 3]);
        w.retry(1, Duration::from_secs(5), Reason::new("x", "y"), true, now);
        w.done(3);
        assert!(
            w.take_ready(now, 10).is_empty(),
            "2 waits behind 1's backoff"
        );
        let later = now + Duration::from_secs(5);
        assert_eq!(seqs(&w.take_ready(later, 10)), [1]);
        assert_eq!(w.next_due(), None);
    }

    #[test]
    fn the_cursor_only_moves_over_a_contiguous_done_prefix() {
        let now = Instant::now();
        let mut w = Window::new(10);
        for (seq, key) in [(11, "a"), (12, "b"), (13, "c")] {
            w.push(env(seq, key), now);
        }
        w.take_ready(now, 10);
        w.done(12);
        assert_eq!(w.ack_point(), 10);
        w.done(11);
        assert_eq!(w.ack_point(), 12);
        w.done(13);
        w.read_through(20);
        assert_eq!(w.ack_point(), 20, "skipped events count as done");
    }

    /// The holes the events done behind a stuck one leave are dropped: a key retrying for hours
    /// while thousands of others are delivered keeps the window's memory bounded by what is
    /// pending, and the cursor, the ranges above it and lookups stay right.
    #[test]
    fn holes_behind_a_stuck_event_stay_bounded() {
        let now = Instant::now();
        let mut w = Window::new(0);
        w.push(env(1, "stuck"), now);
        w.take_ready(now, 1);
        for seq in 2..=5_000 {
            w.push(env(seq, &format!("k{seq}")), now);
            let taken = w.take_ready(now, 10);
            assert_eq!(seqs(&taken), [seq]);
            assert!(w.done(seq).is_some());
            assert!(w.pending.slots.len() <= 2 * w.len() + 64);
        }
        assert_eq!(w.len(), 1);
        assert_eq!(w.ack_point(), 0);
        assert_eq!(w.done_above(10), [(2, 5_000)]);
        assert!(
            w.retry(1, Duration::ZERO, Reason::new("x", "y"), true, now)
                .is_some()
        );
        assert_eq!(seqs(&w.take_ready(now, 10)), [1]);
        assert!(w.done(1).is_some());
        assert!(w.is_empty());
        assert_eq!(w.ack_point(), 5_000);
    }

    #[test]
    fn events_done_above_a_stuck_one_are_ranges_and_skipped_after_a_restart() {
        let now = Instant::now();
        let mut w = Window::new(10);
        for (seq, key) in [
            (11, "a"),
            (12, "b"),
            (13, "c"),
            (14, "a"),
            (15, "d"),
            (16, "e"),
        ] {
            w.push(env(seq, key), now);
        }
        w.take_ready(now, 10);
        for seq in [12, 13, 15] {
            w.done(seq);
        }
        w.read_through(18);
        assert_eq!(w.ack_point(), 10, "11 is stuck");
        assert_eq!(w.done_above(100), [(12, 13), (15, 15), (17, 18)]);
        assert_eq!(
            w.done_above(2),
            [(12, 13), (15, 15)],
            "nearest the cursor kept"
        );

        let mut again = Window::resume(10, vec![(12, 13), (15, 15), (17, 30)]);
        assert!(!again.was_done(11) && !again.was_done(14) && !again.was_done(16));
        assert!(again.was_done(12) && again.was_done(15) && again.was_done(30));
        assert!(!again.was_done(31));
        again.push(env(11, "a"), now);
        again.read_through(13);
        assert_eq!(
            again.done_above(100),
            [(12, 13), (15, 15), (17, 30)],
            "what was not read again yet is kept"
        );
    }

    #[test]
    fn debounce_sends_each_keys_latest_state_once_its_window_ends() {
        let t0 = Instant::now();
        let window = Duration::from_secs(2);
        let mut w = Window::new(0);
        assert_eq!(w.push_debounced(env(1, "a"), t0, window), None);
        assert_eq!(w.push_debounced(env(2, "b"), t0, window), None);
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(w.push_debounced(env(3, "a"), t1, window), Some(1));
        assert_eq!(w.push_debounced(env(4, "a"), t1, window), Some(3));
        assert!(
            w.take_ready(t1, 10).is_empty(),
            "nothing before the window ends"
        );
        assert_eq!(
            w.next_due(),
            Some(t0 + window),
            "a's window began with its first event"
        );
        assert_eq!(w.ack_point(), 1, "1 was replaced: done; 2 (b) is pending");
        assert_eq!(w.done_above(10), [(3, 3)], "replaced events are done");
        assert_eq!(seqs(&w.take_ready(t0 + window, 10)), [2, 4]);
        // In flight: a newer event waits behind it with a window of its own, and is not replaced
        // into the one in flight.
        let t2 = t0 + window;
        assert_eq!(w.push_debounced(env(5, "a"), t2, window), None);
        w.done(4);
        w.done(2);
        assert_eq!(w.ack_point(), 4);
        assert!(w.take_ready(t2, 10).is_empty());
        assert_eq!(w.push_debounced(env(6, "a"), t2, window), Some(5));
        assert_eq!(seqs(&w.take_ready(t2 + window, 10)), [6]);
        w.done(6);
        assert!(w.is_empty() && w.newest.is_empty());
        assert_eq!(w.ack_point(), 6);
    }

    /// An event of object `uid` of the resource `source`, under the partition key `key`.
    fn obj(seq: u64, key: &str, source: &str, uid: &str) -> Envelope {
        let ev = CloudEvent::new(format!("id-{seq}"), source, "t.updated")
            .extension("partitionkey", ExtensionValue::String(key.into()))
            .extension("k8suid", ExtensionValue::String(uid.into()));
        Envelope::new(seq, ev)
    }

    #[test]
    fn debounce_never_replaces_another_resources_object_of_the_same_name() {
        let t0 = Instant::now();
        let window = Duration::from_secs(2);
        let deployments = "k8s://c/apps/deployments";
        let services = "k8s://c/core/services";
        let mut w = Window::new(0);
        assert_eq!(
            w.push_debounced(obj(1, "shop/web", deployments, "u1"), t0, window),
            None
        );
        assert_eq!(
            w.push_debounced(obj(2, "shop/web", services, "u2"), t0, window),
            None,
            "the Service shop/web is another object than the Deployment shop/web"
        );
        assert_eq!(
            w.push_debounced(obj(3, "shop/web", deployments, "u1"), t0, window),
            Some(1),
            "the Deployment's newer state replaces its older one"
        );
        assert_eq!(
            w.push_debounced(obj(4, "shop/web", services, "u2"), t0, window),
            Some(2)
        );
        // The partition key still orders them: one at a time, in sequence order.
        assert_eq!(seqs(&w.take_ready(t0 + window, 10)), [3]);
        w.done(3);
        assert_eq!(seqs(&w.take_ready(t0 + window, 10)), [4]);
        w.done(4);
        assert!(w.is_empty() && w.newest.is_empty());
    }

    #[test]
    fn debounce_never_replaces_a_deletion_by_the_re_creation_under_the_same_name() {
        let t0 = Instant::now();
        let window = Duration::from_secs(2);
        let pods = "k8s://c/core/pods";
        let mut w = Window::new(0);
        // The synthesized pair of a replacement missed during a gap: deleted(u1), created(u2).
        assert_eq!(
            w.push_debounced(obj(1, "ns/p", pods, "u1"), t0, window),
            None
        );
        assert_eq!(
            w.push_debounced(obj(2, "ns/p", pods, "u2"), t0, window),
            None,
            "the new object does not replace the old one's deletion"
        );
        assert_eq!(
            w.push_debounced(obj(3, "ns/p", pods, "u2"), t0, window),
            Some(2),
            "the new object's own older state is replaced"
        );
        assert_eq!(seqs(&w.take_ready(t0 + window, 10)), [1]);
        w.done(1);
        assert_eq!(seqs(&w.take_ready(t0 + window, 10)), [3]);
    }

    #[test]
    fn a_retry_delay_beyond_any_instant_does_not_panic() {
        let now = Instant::now();
        let mut w = Window::new(0);
        w.push(env(1, "a"), now);
        w.take_ready(now, 1);
        let p = w
            .retry(1, Duration::MAX, Reason::new("x", "y"), true, now)
            .map(|p| p.not_before);
        assert!(p.is_some_and(|at| at > now));
    }

    #[test]
    fn batches_respect_the_limit_and_probes_take_the_oldest() {
        let now = Instant::now();
        let mut w = Window::new(0);
        for seq in 1..=5 {
            w.push(env(seq, &format!("k{seq}")), now);
        }
        assert_eq!(seqs(&w.take_ready(now, 2)), [1, 2]);
        assert_eq!(w.take_probe(None).map(|e| e.seq), Some(3));
        w.release(3);
        assert_eq!(
            w.take_probe(Some(3)).map(|e| e.seq),
            Some(4),
            "probes rotate over keys"
        );
        w.release(4);
        assert_eq!(
            w.take_probe(Some(5)).map(|e| e.seq),
            Some(3),
            "and wrap around"
        );
    }
}
