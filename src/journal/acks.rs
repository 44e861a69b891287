//! Cursor moves not yet in the store. An acknowledgement changes the sink's cursor in memory and
//! leaves its keys (`s/`, `a/`) here; they go to sled with the next append's batch, or as plain
//! inserts just before the next group commit's flush when no append came first, so they are as
//! durable as before (with the next group commit) without a sled batch of their own.
//!
//! Why: every `apply_batch` seals sled's io buffer twice (`PageCache::pin_log`), and more than half
//! of a catch-up's batches were acknowledgements (docs/operations.md, "sled's write path, round
//! 5"); a plain insert seals nothing, and an append's batch seals twice anyway.
//!
//! Why the cursor and its ranges need no batch to be written together: each only ever claims
//! events that are done (a cursor never moves back, an event never stops being done), so any mix of
//! an old and a new value that a crash leaves still claims only done events.
//!
//! Whoever takes the moves ([`Unwritten::take`]) must hold the journal's append lock until they are
//! in sled: two writers of taken moves would otherwise race, and an older cursor written last would
//! stay on disk after a clean stop.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::keys;

/// One sink's keys to write.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Move {
    /// The cursor to store, when it moved.
    cursor: Option<u64>,
    /// The ranges above it to store (empty: remove the key), when they were given.
    ranges: Option<Vec<(u64, u64)>>,
}

/// The moves of every sink since they were last written.
#[derive(Debug, Default)]
pub(super) struct Unwritten {
    moves: Mutex<BTreeMap<String, Move>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each entry is replaced in one step: valid after a panic elsewhere.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Unwritten {
    /// Records the sink's new cursor and/or ranges, replacing what was recorded and not written.
    /// The caller holds the journal's cursors, so the values recorded for a sink only move forward.
    pub(super) fn record(&self, sink: &str, cursor: Option<u64>, ranges: Option<Vec<(u64, u64)>>) {
        let mut moves = lock(&self.moves);
        let entry = match moves.get_mut(sink) {
            Some(entry) => entry,
            None => moves.entry(sink.to_owned()).or_default(),
        };
        if cursor.is_some() {
            entry.cursor = cursor;
        }
        if ranges.is_some() {
            entry.ranges = ranges;
        }
    }

    /// Drops what was recorded for a sink that is being removed.
    pub(super) fn forget(&self, sink: &str) {
        lock(&self.moves).remove(sink);
    }

    /// The ranges recorded for the sink and not written yet, if any were.
    pub(super) fn ranges(&self, sink: &str) -> Option<Vec<(u64, u64)>> {
        lock(&self.moves).get(sink).and_then(|m| m.ranges.clone())
    }

    /// Whether nothing is waiting to be written.
    pub(super) fn is_empty(&self) -> bool {
        lock(&self.moves).is_empty()
    }

    /// Takes every recorded move (see the module doc for the lock the caller holds).
    pub(super) fn take(&self) -> BTreeMap<String, Move> {
        std::mem::take(&mut *lock(&self.moves))
    }
}

/// Adds the moves' keys to an append's batch.
pub(super) fn into_batch(moves: BTreeMap<String, Move>, b: &mut sled::Batch) {
    for (sink, m) in moves {
        if let Some(cursor) = m.cursor {
            b.insert(keys::cursor(&sink), &cursor.to_be_bytes()[..]);
        }
        match m.ranges {
            Some(ranges) if ranges.is_empty() => b.remove(keys::acked(&sink)),
            Some(ranges) => b.insert(keys::acked(&sink), keys::encode_ranges(&ranges)),
            None => {}
        }
    }
}

/// Writes the moves with plain inserts (no batch: nothing to make atomic, see the module doc).
pub(super) fn write(db: &sled::Db, moves: BTreeMap<String, Move>) -> Result<(), sled::Error> {
    for (sink, m) in moves {
        if let Some(cursor) = m.cursor {
            db.insert(keys::cursor(&sink), &cursor.to_be_bytes()[..])?;
        }
        match m.ranges {
            Some(ranges) if ranges.is_empty() => {
                db.remove(keys::acked(&sink))?;
            }
            Some(ranges) => {
                db.insert(keys::acked(&sink), keys::encode_ranges(&ranges))?;
            }
            None => {}
        }
    }
    Ok(())
}
