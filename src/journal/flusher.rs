//! Group commit: one thread turns many appends into one `fsync`.
//!
//! A thread, not a tokio task, because `sled::Db::flush` blocks in `fsync` for as long as the disk
//! wants, and the journal opens before (and closes after) any runtime the caller may have.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// What waiters on [`super::Journal::durable`] observe.
#[derive(Debug, Clone, Default)]
pub(super) struct Flushed {
    /// Every event up to this sequence number is on disk.
    pub(super) seq: u64,
    /// The last flush failed (cleared by the next good one).
    pub(super) error: Option<sled::Error>,
    /// The flusher has stopped: nothing appended later will become durable.
    pub(super) stopped: bool,
}

#[derive(Debug, Default)]
struct Pending {
    /// Entries appended since the last flush started.
    entries: usize,
    /// When the oldest unflushed write happened; `None` when nothing is waiting.
    since: Option<Instant>,
    shutdown: bool,
}

/// State shared by the journal handles and the flusher thread.
#[derive(Debug)]
pub(super) struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
    /// The last assigned sequence number, stored after its batch is in sled (so a flush that starts
    /// after reading it covers it).
    pub(super) head: AtomicU64,
    /// Mirror of `flushed.seq` for cheap synchronous reads.
    pub(super) durable: AtomicU64,
    pub(super) flushed: watch::Sender<Flushed>,
    interval: Duration,
    entries: usize,
    /// The head record, advanced after each good flush (`head.rs`).
    record: Mutex<super::head::Record>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded data is plain counters, valid after any panic.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    pub(super) fn new(
        head: u64,
        interval: Duration,
        entries: usize,
        record: super::head::Record,
    ) -> Self {
        Self {
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            head: AtomicU64::new(head),
            durable: AtomicU64::new(head),
            flushed: watch::Sender::new(Flushed {
                seq: head,
                error: None,
                stopped: false,
            }),
            interval,
            entries: entries.max(1),
            record: Mutex::new(record),
        }
    }

    /// Records `entries` unflushed writes (0 for a cursor move, which must reach disk too but
    /// should not hurry the flush).
    pub(super) fn note_write(&self, entries: usize) {
        let mut p = lock(&self.pending);
        p.entries = p.entries.saturating_add(entries);
        let first = p.since.is_none();
        if first {
            p.since = Some(Instant::now());
        }
        // The flusher sleeps without a deadline while nothing is pending, and with one otherwise:
        // only the first write and reaching the entry bound change when it must wake.
        if first || p.entries >= self.entries {
            self.wake.notify_one();
        }
    }

    pub(super) fn shutdown(&self) {
        lock(&self.pending).shutdown = true;
        self.wake.notify_one();
    }

    /// Blocks until a flush is due; returns `true` when the flusher must stop after this flush.
    fn wait_due(&self) -> bool {
        let mut p = lock(&self.pending);
        loop {
            if p.shutdown {
                break;
            }
            match p.since {
                None => p = self.wake.wait(p).unwrap_or_else(PoisonError::into_inner),
                Some(since) => {
                    let waited = since.elapsed();
                    if p.entries >= self.entries || waited >= self.interval {
                        break;
                    }
                    p = self
                        .wake
                        .wait_timeout(p, self.interval - waited)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
        }
        p.entries = 0;
        p.since = None;
        p.shutdown
    }

    /// Puts back a failed flush so it is retried after `interval`.
    fn retry_later(&self) {
        let mut p = lock(&self.pending);
        p.since.get_or_insert_with(Instant::now);
    }
}

/// Flushes one group; `Ok(seq)` = everything up to `seq` is durable.
pub(super) fn flush_once(db: &sled::Db, shared: &Shared) -> Result<u64, sled::Error> {
    // Read the head before flushing: every batch counted in it is already in sled's log buffers,
    // and sled's flush makes every write that happened before the call durable.
    let target = shared.head.load(Ordering::Acquire);
    db.flush()?;
    lock(&shared.record).advance(target, false);
    shared.durable.fetch_max(target, Ordering::AcqRel);
    shared.flushed.send_modify(|f| {
        f.seq = f.seq.max(target);
        f.error = None;
    });
    Ok(target)
}

/// Syncs the head record whatever its last sync (at close).
pub(super) fn sync_record(shared: &Shared) {
    let mut record = lock(&shared.record);
    let durable = shared.durable.load(Ordering::Acquire);
    record.advance(durable, true);
}

/// The flusher thread's body.
pub(super) fn run(db: sled::Db, shared: Arc<Shared>) {
    loop {
        let stop = shared.wait_due();
        if let Err(error) = flush_once(&db, &shared) {
            tracing::warn!(message = "Journal flush failed; retrying.", %error);
            shared
                .flushed
                .send_modify(|f| f.error = Some(error.clone()));
            if !stop {
                shared.retry_later();
                // Without a pause a persistent disk error would spin here.
                std::thread::sleep(shared.interval);
            }
        }
        if stop {
            break;
        }
    }
    shared.flushed.send_modify(|f| f.stopped = true);
}
