//! The events appended last, kept in memory as the shared bytes delivery holds them, so that a
//! reader at the head of the journal gets them without a sled range scan, a split of segments and
//! a copy per event (ADR 0027). Bounded by bytes; a reader asking for anything older than what
//! it holds reads the store, which stays the only record.
//!
//! It holds a contiguous run of sequence numbers ending at the head: every append adds its events
//! under the journal's append lock, before the head moves, so an event numbered at or below the
//! head is either here or was evicted (and is then read from sled). Durability is the reader's
//! business, as for the store: [`Tail::read`] is given the durable sequence number and hands out
//! nothing past it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use herald_sink_core::Layout;

/// The default bound of the tail's bytes: some 6,000 to 8,000 of the bench's ~1 KiB events (each
/// counted with its buffer's spare room), about what a sink's window (4,096 events) and its
/// reader's read-ahead (three pages of 1,024) hold, so a reader that keeps up with the recorder
/// seldom reads sled.
pub const TAIL_BYTES: usize = 8 * 1024 * 1024;

/// Per-event overhead counted against the bound beside the buffer: the deque's slot, layout
/// included (it takes its room whether or not the event was vouched for), so a flood of tiny
/// events is bounded too.
pub(super) const OVERHEAD: usize = std::mem::size_of::<(u64, Bytes, Option<Layout>, usize)>();

#[derive(Debug)]
pub(super) struct Tail {
    bound: usize,
    state: std::sync::Mutex<State>,
    /// Events handed out from memory and read from the store, for tests and the docs' figures.
    pub(super) from_memory: AtomicU64,
    pub(super) from_store: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    /// Every event after `after`, in order, up to the last appended, with its layout when the
    /// recorder vouched for it (so a reader need not read it again) and the bytes it takes (its
    /// buffer's capacity and [`OVERHEAD`]).
    events: VecDeque<(u64, Bytes, Option<Layout>, usize)>,
    /// The sequence number the first held event follows: nothing at or below it is held.
    after: u64,
    bytes: usize,
}

impl Tail {
    /// A tail that holds nothing yet and starts after `head`.
    pub(super) fn new(head: u64, bound: usize) -> Self {
        Self {
            bound,
            state: std::sync::Mutex::new(State {
                after: head,
                ..State::default()
            }),
            from_memory: AtomicU64::new(0),
            from_store: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every change below is done in steps that leave the state valid.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds the events numbered `first`, `first + 1`, …, appended after `head` (so `first` is
    /// `head + 1`), and forgets what nobody can ask for from memory any more: the events at or
    /// below `passed` (every registered sink's cursor has passed them; `None` keeps nothing, no
    /// sink reads) and, oldest first, what is over the bound. Each event comes with the layout
    /// its writer vouched for, if any.
    pub(super) fn push(
        &self,
        first: u64,
        events: impl ExactSizeIterator<Item = (Vec<u8>, Option<Layout>)>,
        passed: Option<u64>,
    ) {
        let mut state = self.lock();
        let last = first + events.len() as u64 - 1;
        if first != state.after + state.events.len() as u64 + 1 {
            // Not contiguous with what is held (cannot happen under the append lock): hold
            // only what follows.
            state.events.clear();
            state.bytes = 0;
            state.after = first - 1;
        }
        let Some(passed) = passed else {
            state.events.clear();
            state.bytes = 0;
            state.after = last;
            return;
        };
        for (seq, (mut event, layout)) in (first..).zip(events) {
            // The appended buffer itself, shared without a copy. The renderer sizes it from a
            // guess that a long patch outgrows (the buffer then doubles): that spare room would
            // stay held by every reader's copy of the event, so it is let go of first.
            if event.capacity() - event.len() > event.len() / 8 {
                event.shrink_to_fit();
            }
            let size = event.capacity() + OVERHEAD;
            state.bytes += size;
            state
                .events
                .push_back((seq, Bytes::from(event), layout, size));
        }
        state.forget(passed, self.bound);
    }

    /// Up to `max` events after `after` and at or below `durable`, when the tail holds every
    /// event after `after` (`None`: the reader is behind it and reads the store). First forgets
    /// the events every cursor has `passed`: readers poll while idle, so what was delivered last
    /// does not stay in memory until the next append.
    pub(super) fn read(
        &self,
        after: u64,
        durable: u64,
        max: usize,
        passed: u64,
    ) -> Option<Vec<(u64, Bytes, Option<Layout>)>> {
        let mut state = self.lock();
        state.forget(passed, self.bound);
        if after < state.after {
            return None;
        }
        let skip = usize::try_from(after - state.after).ok()?;
        let from = skip.min(state.events.len());
        // Sized up front: a page grown event by event was a few reallocations per read.
        let durable_held = usize::try_from(durable.saturating_sub(after)).unwrap_or(usize::MAX);
        let mut out = Vec::with_capacity((state.events.len() - from).min(max).min(durable_held));
        out.extend(
            state
                .events
                .range(from..)
                .take_while(|(seq, ..)| *seq <= durable)
                .take(max)
                .map(|(seq, bytes, layout, _)| (*seq, bytes.clone(), layout.clone())),
        );
        drop(state);
        self.from_memory
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        Some(out)
    }
}

impl State {
    /// Drops, oldest first, the events at or below `passed` and what is over `bound`.
    fn forget(&mut self, passed: u64, bound: usize) {
        while let Some(&(seq, _, _, size)) = self.events.front() {
            if seq > passed && self.bytes <= bound {
                break;
            }
            self.events.pop_front();
            self.bytes -= size;
            self.after = seq;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(n: usize, len: usize) -> impl ExactSizeIterator<Item = (Vec<u8>, Option<Layout>)> {
        (0..n).map(move |_| (vec![b'x'; len], None))
    }

    fn seqs(read: Option<Vec<(u64, Bytes, Option<Layout>)>>) -> Option<Vec<u64>> {
        read.map(|rows| rows.into_iter().map(|(seq, ..)| seq).collect())
    }

    #[test]
    fn hands_out_what_follows_up_to_durable_and_max() {
        let tail = Tail::new(10, 1 << 20);
        tail.push(11, events(5, 10), Some(10));
        assert_eq!(seqs(tail.read(10, 13, 100, 0)), Some(vec![11, 12, 13]));
        assert_eq!(seqs(tail.read(12, 15, 2, 0)), Some(vec![13, 14]));
        assert_eq!(seqs(tail.read(15, 15, 2, 0)), Some(vec![]));
        assert_eq!(
            seqs(tail.read(9, 15, 2, 0)),
            None,
            "before the tail: the store"
        );
    }

    #[test]
    fn an_event_is_counted_without_the_spare_room_its_buffer_grew_with() {
        let tail = Tail::new(0, 2 * (100 + OVERHEAD));
        let grown = |_| {
            let mut e = Vec::with_capacity(4096);
            e.extend_from_slice(&[b'x'; 100]);
            e
        };
        tail.push(1, (0..2).map(grown).map(|e| (e, None)), Some(0));
        assert_eq!(
            seqs(tail.read(0, 2, 10, 0)),
            Some(vec![1, 2]),
            "two events of 100 bytes fit a bound of two"
        );
    }

    #[test]
    fn evicts_over_the_bound_and_what_every_cursor_passed() {
        let tail = Tail::new(0, 3 * (100 + OVERHEAD));
        tail.push(1, events(2, 100), Some(0));
        tail.push(3, events(2, 100), Some(0));
        assert_eq!(
            seqs(tail.read(0, 4, 10, 0)),
            None,
            "the oldest went over the bound"
        );
        assert_eq!(seqs(tail.read(1, 4, 10, 0)), Some(vec![2, 3, 4]));
        tail.push(5, events(1, 10), Some(3));
        assert_eq!(seqs(tail.read(2, 5, 10, 0)), None, "every cursor passed 3");
        assert_eq!(seqs(tail.read(3, 5, 10, 0)), Some(vec![4, 5]));
    }

    #[test]
    fn a_read_forgets_what_every_cursor_passed() {
        let tail = Tail::new(0, 1 << 20);
        tail.push(1, events(5, 10), Some(0));
        assert_eq!(seqs(tail.read(3, 5, 10, 3)), Some(vec![4, 5]));
        assert_eq!(seqs(tail.read(2, 5, 10, 0)), None, "1 to 3 were dropped");
        assert_eq!(tail.lock().events.len(), 2);
    }

    #[test]
    fn keeps_nothing_without_a_reader_and_restarts_after_a_gap() {
        let tail = Tail::new(0, 1 << 20);
        tail.push(1, events(3, 10), None);
        assert_eq!(seqs(tail.read(0, 3, 10, 0)), None);
        assert_eq!(seqs(tail.read(3, 3, 10, 0)), Some(vec![]));
        tail.push(7, events(2, 10), Some(0));
        assert_eq!(seqs(tail.read(3, 8, 10, 0)), None, "4 to 6 were never held");
        assert_eq!(seqs(tail.read(6, 8, 10, 0)), Some(vec![7, 8]));
    }
}
