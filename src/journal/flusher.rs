//! Group commit: one thread turns many appends into one `fsync`.
//!
//! Adaptive ([`super::JournalConfig::adaptive_commit`], the default): while the journal is lightly
//! loaded, appended entries are flushed as soon as the flusher is free, so an idle journal commits
//! a lone change at once (one `fsync`, not one commit interval, of latency) and what was appended
//! while a flush ran goes to disk as the next group. Once a group is larger than [`BUSY_GROUP`]
//! the journal is busy: the next group waits for the interval as before, because there flushing
//! at every chance costs more CPU per event (more flushes, smaller delivery batches: about 10 %
//! of catch-up throughput measured) than the milliseconds it saves. A small group switches back.
//! Cursor moves alone always wait for the interval (they must reach disk, but nothing waits on
//! them).
//!
//! A thread, not a tokio task, because `sled::Db::flush` blocks in `fsync` for as long as the disk
//! wants, and the journal opens before (and closes after) any runtime the caller may have.
//!
//! A failed flush is final: sled keeps the error and fails every later write with it, even once
//! the disk has room again, and retrying an `fsync` that failed may report success for pages the
//! kernel already dropped. So the first failure is recorded ([`Shared::fail`], logged once) and the
//! flusher stops flushing; `herald run` sees it and exits 12 (ADR 0005).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::WriteFailure;

/// What waiters on [`super::Journal::durable`] observe.
#[derive(Debug, Clone, Default)]
pub(super) struct Flushed {
    /// Every event up to this sequence number is on disk.
    pub(super) seq: u64,
    /// A write failed: nothing appended after `seq` will become durable in this process.
    pub(super) failed: Option<Arc<WriteFailure>>,
    /// The flusher has stopped: nothing appended later will become durable.
    pub(super) stopped: bool,
}

/// A group of more appended entries than this means the journal is busy (see the module doc): at
/// 500 changes/s each change is a group of its own, in a catch-up a group is hundreds.
const BUSY_GROUP: usize = 32;

#[derive(Debug, Default)]
struct Pending {
    /// Entries appended since the last flush started.
    entries: usize,
    /// When the oldest unflushed write happened; `None` when nothing is waiting.
    since: Option<Instant>,
    /// The last group was larger than [`BUSY_GROUP`]: the next one waits for the interval.
    busy: bool,
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
    /// Flush appended entries as soon as the flusher is free (see the module doc); otherwise only
    /// after `interval` or at `entries`.
    adaptive: bool,
    /// The head record, advanced after each good flush (`head.rs`).
    record: Mutex<super::head::Record>,
    /// The journal directory, for the failure's message.
    path: PathBuf,
    /// The first failed write; set once, never cleared (see the module doc).
    failure: OnceLock<Arc<WriteFailure>>,
    /// Writes that failed, the first one and every refused one after it.
    write_errors: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded data is plain counters, valid after any panic.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    pub(super) fn new(
        path: &Path,
        head: u64,
        interval: Duration,
        entries: usize,
        adaptive: bool,
        record: super::head::Record,
    ) -> Self {
        Self {
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            head: AtomicU64::new(head),
            durable: AtomicU64::new(head),
            flushed: watch::Sender::new(Flushed {
                seq: head,
                failed: None,
                stopped: false,
            }),
            interval,
            entries: entries.max(1),
            adaptive,
            record: Mutex::new(record),
            path: path.to_owned(),
            failure: OnceLock::new(),
            write_errors: AtomicU64::new(0),
        }
    }

    /// Records a failed write (`op`). The first one becomes the journal's failure: logged once,
    /// with the path, the OS's words and what to do, and published to every waiter; later ones
    /// only count.
    pub(super) fn fail(&self, op: &'static str, error: &sled::Error) -> Arc<WriteFailure> {
        self.write_errors.fetch_add(1, Ordering::Relaxed);
        let mut first = false;
        let failure = self
            .failure
            .get_or_init(|| {
                first = true;
                Arc::new(WriteFailure::new(&self.path, op, error))
            })
            .clone();
        if first {
            tracing::error!(
                message = "The journal cannot take writes; nothing more is journaled until herald restarts.",
                path = %failure.path().display(),
                op,
                cause = failure.cause(),
                advice = failure.advice(),
            );
            self.flushed
                .send_modify(|f| f.failed = Some(Arc::clone(&failure)));
        }
        failure
    }

    /// A write that is refused because an earlier one failed: counted, not logged again.
    pub(super) fn refuse(&self) -> Option<Arc<WriteFailure>> {
        let failure = self.failure.get().cloned();
        if failure.is_some() {
            self.write_errors.fetch_add(1, Ordering::Relaxed);
        }
        failure
    }

    /// The first failed write, if any.
    pub(super) fn failure(&self) -> Option<Arc<WriteFailure>> {
        self.failure.get().cloned()
    }

    /// Failed and refused writes so far.
    pub(super) fn write_errors(&self) -> u64 {
        self.write_errors.load(Ordering::Relaxed)
    }

    /// Records `entries` unflushed writes (0 for a cursor move, which must reach disk too but
    /// should not hurry the flush).
    pub(super) fn note_write(&self, entries: usize) {
        let mut p = lock(&self.pending);
        let had_entries = p.entries > 0;
        p.entries = p.entries.saturating_add(entries);
        let first = p.since.is_none();
        if first {
            p.since = Some(Instant::now());
        }
        // The flusher sleeps without a deadline while nothing is pending, and with one otherwise:
        // only the first write, the first appended entry (adaptive: due at once) and reaching the
        // entry bound change when it must wake.
        let now_due = self.adaptive && !p.busy && !had_entries && p.entries > 0;
        if first || now_due || p.entries >= self.entries {
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
                    // Adaptive and not busy: appended entries are due as soon as the flusher is
                    // here, that is once the previous flush (they may have arrived during) is done.
                    if self.adaptive && !p.busy && p.entries > 0 {
                        break;
                    }
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
        p.busy = p.entries > BUSY_GROUP;
        p.entries = 0;
        p.since = None;
        p.shutdown
    }
}

/// Flushes one group; `Ok(seq)` = everything up to `seq` is durable.
///
/// Waiters are told before the head record is advanced: the record only has to lag the store,
/// and its once-a-second `fdatasync` (milliseconds, tens of them while other writers keep the
/// disk busy) held up every event of the group when it ran first.
pub(super) fn flush_once(db: &sled::Db, shared: &Shared) -> Result<u64, sled::Error> {
    // Read the head before flushing: every batch counted in it is already in sled's log buffers,
    // and sled's flush makes every write that happened before the call durable.
    let target = shared.head.load(Ordering::Acquire);
    db.flush()?;
    super::garbage::release();
    shared.durable.fetch_max(target, Ordering::AcqRel);
    shared.flushed.send_modify(|f| f.seq = f.seq.max(target));
    lock(&shared.record).advance(target, false);
    Ok(target)
}

/// Syncs the head record whatever its last sync (at close).
pub(super) fn sync_record(shared: &Shared) {
    let mut record = lock(&shared.record);
    let durable = shared.durable.load(Ordering::Acquire);
    record.advance(durable, true);
}

/// The flusher thread's body. After a failed flush it flushes no more (nothing could succeed, see
/// the module doc) and only waits for the shutdown.
pub(super) fn run(db: sled::Db, shared: Arc<Shared>) {
    loop {
        let stop = shared.wait_due();
        if shared.failure().is_none()
            && let Err(error) = flush_once(&db, &shared)
        {
            shared.fail("flush", &error);
        }
        if stop {
            break;
        }
    }
    shared.flushed.send_modify(|f| f.stopped = true);
}
