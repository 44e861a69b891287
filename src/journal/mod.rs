//! The durable spine of herald: watchers append rendered events, sinks read them through cursors;
//! start at [`Journal`]. This is the only module that knows sled.
//!
//! # The invariant
//! A stream's checkpoint never passes an event that is not durable. [`Journal::append`] writes a
//! watch batch's events, the object-index updates they imply (as one `u/` key, or folded into the
//! `i/` keys) and the stream's new checkpoint in one `sled::Tree::apply_batch`, which sled recovers
//! all-or-nothing after a crash; so whatever a crash leaves on disk, the checkpoint and the index
//! (its `i/` keys with its `u/` keys folded over them, as the next open does) agree with the
//! events.
//!
//! # Layout (ADR 0002, `docs/adr/0002-journal-layout.md`)
//! One sled tree, keys by prefix (`meta/`, `e/` events, `i/` object index, `u/` index updates not
//! yet folded into it (ADR 0035, `updates.rs`), `c/` checkpoints, `f/` first-sync markers, `s/`
//! sink cursors, `a/` acknowledged ranges above them; see `keys.rs`), one `apply_batch` per append. DECISIONS.md asked to measure
//! it against one tree per concern written by a multi-tree `transaction`
//! (`benches/journal_layout.rs` of the scratch crate; 1 KB event + 2 KB index object per event,
//! 2-core VM on ext4/virtio, median of 3 alternating 4 s runs):
//!
//! | events/batch | flush | one tree + `apply_batch` | four trees + `transaction` |
//! |---|---|---|---|
//! | 1 | none | 11,559 batches/s | 12,005 batches/s |
//! | 100 | none | 400 batches/s (40.0k events/s) | 352 batches/s (35.2k events/s) |
//! | 1 | after each batch | 4,835 batches/s | 4,199 batches/s |
//! | 100 | after each batch | 256 batches/s (25.7k events/s) | 233 batches/s (23.3k events/s) |
//! | 1 | every 100 batches | 10,473 batches/s | 9,747 batches/s |
//!
//! A second run had the two within ±10 % of each other in both directions: the layouts cost the
//! same. The single tree wins on everything else: one primitive, recovered all-or-nothing (sled
//! has a crash test for batches), no closure that sled may re-run on conflict, range scans for
//! reads and retention, and cursors updated with a plain `insert`.
//!
//! One `flush()` (write + `fsync`) costs 0.17 ms with 1 pending batch, 0.5 ms with 10, 4.6 ms
//! with 100, 17 ms with 1,000. Through this API with the defaults (10 ms / 1,000 entries):
//! 11.9k 1-event batches/s and 69k events/s in 100-event batches when nobody waits; a caller that
//! awaits [`Journal::durable`] after every batch waits one group-commit window (p50 10.7 ms,
//! p99 13.7 ms), so the watch loop must not do that: the invariant needs no wait, and sinks only
//! see durable events anyway.
//!
//! # Group commit
//! `append` never waits for the disk. A flusher thread calls `sled::Db::flush` (write + `fsync`):
//! adaptively by default, as soon as it is free once an entry was appended while the journal is
//! lightly loaded, so a lone change on an idle journal is committed at once; after a large group
//! (`flusher.rs`), and always without [`JournalConfig::adaptive_commit`], at most `flush_interval`
//! after the first unflushed write, or as soon as `flush_entries` entries are waiting. Every [`Journal::durable`]
//! waiter of a group is released by the same flush.
//! Sinks only ever [`read`](Journal::read) durable events, so nothing is sent that a crash could
//! take back. sled's own periodic flusher is turned off so this is the only cadence.
//!
//! # Things the rest of herald must know about sled 0.34
//! - The store is beta and its on-disk format changes between versions: `sled` is pinned with
//!   `=0.34.7` and `meta/schema_version` guards our own layout.
//! - sled keeps a page cache (default 1 GiB!); [`JournalConfig::cache_capacity`] bounds it.
//! - sled never gives disk space back: retention frees space that later appends reuse, but the
//!   files stay at their high-water mark ([`Journal::size_on_disk`] does not drop after
//!   retention, not even across a reopen). 200k 1 KB events took 335 MiB (1.75× the events);
//!   after retention removed all of them, 200k more grew it by 14 MiB only. Size the volume for
//!   the largest backlog, not the usual one. Only a copy into a fresh store gives it back:
//!   `compact.rs` (`herald journal compact`, and [`Journal::open`] when
//!   [`JournalConfig::compact_at_open`] says so; ADR 0016).
//! - [`Journal::apply_retention`] and a large [`Journal::read`] do blocking disk work (200k
//!   removals: 1.8 s): call them from `spawn_blocking` or a dedicated thread.
//! - Every `apply_batch` rolls sled's io buffer before and after it reserves the batch's manifest
//!   (`PageCache::pin_log`): two sealed buffers, each a job for sled's io threads (a `pwrite`, a
//!   `sync_file_range`, a `notify_all` to its seven idle threads), whatever the batch holds. A
//!   single-key `insert` seals nothing. (Writing an in-order acknowledgement's cursor that way cut
//!   those jobs but not herald's CPU per event; docs/operations.md, "sled's write path, round 5".
//!   Nor did carrying every acknowledgement in the next append's batch: the appends' own sled
//!   work grew by what the io threads saved; ADR 0028.)
//! - Values over about 128 KiB (a quarter of sled's 512 KiB segment) are stored as separate files
//!   under `blobs/`.
//! - Locking: sled `flock`s its `db` file but reports contention only as an `io::Error` of kind
//!   `Other` with a formatted message, so the journal takes its own lock (`herald.lock`,
//!   `File::try_lock`) first and maps contention to [`JournalError::AlreadyOpen`]. An `flock`
//!   belongs to the open file, so a child process forked by another thread keeps a just-dropped
//!   journal locked until its `exec` (seen in the tests); `open` therefore retries both locks for
//!   up to a second: a reopen right after a close succeeds, a genuine second herald is reported
//!   after that second.
//! - sled creates its files with the umask, later ones (snapshots, blobs) too: the directory is
//!   0700 and the files are set to 0600 at open and at every retention pass.
//! - Cursor moves ([`Journal::ack`], [`Journal::acknowledge`]) reach disk with the next group
//!   commit; a crash may move a cursor back (redelivery with the same ids), never forward. Events
//!   acknowledged above the cursor (one event stuck in a retry holds the cursor back while later
//!   ones are delivered) are kept as ranges beside it (`a/` keys, [`MAX_ACKED_RANGES`]), so a
//!   restart re-sends what was in flight, not everything after the stuck event.
//! - A failed write (a full disk, an I/O error) is final for the open store: sled keeps the error
//!   and refuses every later write with it, even once there is room again; only a reopen clears
//!   it. The journal then refuses writes itself ([`JournalError::Unwritable`]),
//!   [`Journal::write_failed`] resolves, and `herald run` exits 12 so that a restart reopens the
//!   store and resumes from what was durable (ADR 0005, `docs/adr/0005-full-disk.md`).

mod appender;
mod compact;
mod compressed;
mod dlq;
mod error;
mod failure;
mod files;
mod flusher;
mod garbage;
mod head;
mod integrity;
mod keys;
mod lz4;
pub mod retention;
mod salvage;
mod tail;
#[cfg(test)]
mod tests;
mod updates;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use herald_sink_core::Layout;

pub use compact::{AUTO_FLOOR_BYTES, AUTO_RATIO, Compacted, compact, worth_compacting};
pub use error::{JournalError, Result};
pub use failure::WriteFailure;
pub use integrity::Report;
pub use salvage::{Salvaged, salvage, take_unconfirmed_mark};
pub use tail::TAIL_BYTES;

/// The journal layout this build writes (`meta/schema_version`). Version 2 added the head record
/// (`herald.head`), version 3 the acknowledged ranges above each sink's cursor (`a/` keys),
/// version 4 the first-sync markers (`f/` keys, [`FirstSync`]), version 5 the event segments (one
/// `e/` key for several events of an append, ADR 0020), version 6 values compressed against a
/// dictionary built into the binary (ADR 0029), version 7 the index updates not yet folded into the
/// index (`u/` keys, ADR 0035); a journal of an earlier version is upgraded when opened. See ADR
/// 0002.
pub const SCHEMA_VERSION: u32 = 7;

/// Acknowledged ranges kept above a sink's cursor at most (16 bytes each, rewritten with every
/// acknowledgement). Past the bound the ranges furthest from the cursor are forgotten: a crash then
/// re-sends those events (at least once, same ids), it never skips one.
pub const MAX_ACKED_RANGES: usize = 512;

/// How long sled may go without progress while the store is opened and checked (recovery, then
/// between two hand-offs of up to 64 entries of the scan) before herald calls the store damaged.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// The default bound of sled's page cache. sled counts each cached node at its size on disk rounded
/// up to a power of two and holds more than that beside it (its page table, each node's copies until
/// its epoch ends): 64 MiB cost 35–50 MiB more RSS than 16 MiB at 100,000 objects, and the catch-up,
/// whose index reads hit the same recent objects, did not get slower (docs/operations.md, "Memory at
/// 100,000 objects").
pub const CACHE_CAPACITY: u64 = 16 * 1024 * 1024;

/// Removals per sled batch during retention, so one pass never builds an unbounded batch.
const RETENTION_CHUNK: usize = 1_024;

/// How the journal is opened.
#[derive(Debug, Clone)]
pub struct JournalConfig {
    /// The journal directory (created 0700 when missing).
    pub path: PathBuf,
    /// Group commit: a write is flushed to disk at most this long after it was appended.
    pub flush_interval: Duration,
    /// Group commit: or as soon as this many entries wait to be flushed.
    pub flush_entries: usize,
    /// Group commit: flush appended entries as soon as the flusher is free (the previous flush
    /// done) instead of waiting for `flush_interval`, unless the last group was large (then the
    /// journal is busy and batching pays); cursor moves alone still wait for it.
    /// Default `true`; tests turn it off to hold entries unflushed.
    pub adaptive_commit: bool,
    /// How long delivered events stay for replay; zero deletes an event once every sink passed it.
    pub retain: Duration,
    /// Bound on undelivered events (head minus the slowest cursor), see
    /// [`Journal::over_backlog_bound`].
    pub max_backlog: u64,
    /// Bytes of sled's in-memory page cache.
    pub cache_capacity: u64,
    /// How long the integrity check at open may go without progress, see [`OPEN_TIMEOUT`].
    pub open_timeout: Duration,
    /// Compact the store at open when its files take at least this many bytes and
    /// [`AUTO_RATIO`] times what it holds ([`worth_compacting`]): `herald run` sets
    /// [`AUTO_FLOOR_BYTES`]; `None` (the other commands) leaves the store as it is.
    pub compact_at_open: Option<u64>,
    /// Bytes of the most recently appended events kept in memory for the sinks' readers at the
    /// head of the journal ([`TAIL_BYTES`]; `tail.rs`, ADR 0027). A reader behind them reads
    /// the store.
    pub tail_bytes: usize,
}

impl JournalConfig {
    /// The defaults for everything but the path: adaptive group commit (cursor moves every 10 ms,
    /// or at 1000 entries), keep nothing once delivered, one million events of backlog, a 16 MiB
    /// cache ([`CACHE_CAPACITY`]).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            flush_interval: Duration::from_millis(10),
            flush_entries: 1_000,
            adaptive_commit: true,
            retain: Duration::ZERO,
            max_backlog: 1_000_000,
            cache_capacity: CACHE_CAPACITY,
            open_timeout: OPEN_TIMEOUT,
            compact_at_open: None,
            tail_bytes: TAIL_BYTES,
        }
    }

    /// What the configuration's `journal` section asks for; the cache keeps its default.
    pub fn from_settings(settings: &crate::config::JournalSettings) -> Self {
        Self {
            flush_interval: settings.flush_interval,
            flush_entries: usize::try_from(settings.flush_entries).unwrap_or(usize::MAX),
            retain: settings.retain,
            max_backlog: settings.max_backlog,
            compact_at_open: Some(AUTO_FLOOR_BYTES),
            ..Self::new(settings.path.clone())
        }
    }
}

/// One atomic append: the events of one watch batch, the object-index updates they imply, and the
/// stream's new checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    /// The watch stream (one per watched resource); names the index and the checkpoint.
    pub stream: String,
    /// Rendered CloudEvents (JSON), in observation order; they get consecutive sequence numbers.
    pub events: Vec<Vec<u8>>,
    /// Changes to the stream's object index.
    pub index: Vec<IndexUpdate>,
    /// The stream's new resourceVersion checkpoint; `None` leaves it unchanged.
    pub checkpoint: Option<String>,
    /// The index updates come from a list (a relist's: each object at most once), not from a
    /// watch: those of objects with no update gathered since the last fold are written straight
    /// into their `i/` keys instead of being gathered, since no later change of the list replaces
    /// them (`updates.rs`).
    pub listed: bool,
}

/// What an append does with its stream's first-sync marker (`f/` + stream, schema 4): the mark of
/// a first sync that records the existing objects silently (`initialState: skip`) and has not
/// written its checkpoint yet. A start that finds it continues that first sync silently instead of
/// taking the half-filled index for a salvaged one (which it would report the differences of).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FirstSync {
    /// Leaves the marker as it is.
    #[default]
    Keep,
    /// Sets it: the batch belongs to a first sync that skips the initial state.
    Skipping,
    /// Removes it: the batch ends the first sync (it carries the stream's checkpoint).
    Done,
}

/// A change to a stream's object index (the last state of each object, for the relist diff).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexUpdate {
    /// Stores the last seen object.
    Put {
        /// `<namespace>/<name>`.
        key: String,
        /// The object as herald keeps it.
        object: Vec<u8>,
    },
    /// Forgets a deleted object.
    Remove {
        /// `<namespace>/<name>`.
        key: String,
    },
}

/// The durable journal: events, the per-stream object index and checkpoints, per-sink cursors.
///
/// Cheap to clone; all clones share one store. Exclusive per directory: a second
/// [`open`](Journal::open), in this or another process, fails with [`JournalError::AlreadyOpen`]
/// until every clone of the first is dropped.
#[derive(Clone)]
pub struct Journal {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    retain: Duration,
    max_backlog: u64,
    db: sled::Db,
    flush: Arc<flusher::Shared>,
    flusher: Mutex<Option<JoinHandle<()>>>,
    /// The append thread's queue ([`Journal::append_queued`], `appender.rs`).
    appends_queued: appender::Queue,
    /// Held while a batch gets its sequence numbers and is written, so seq order is key order
    /// and `head` only ever covers batches already in sled. Holds the last append time (ms),
    /// kept monotonic so that age order is sequence order even if the clock steps back.
    append: Mutex<u64>,
    /// Sink cursors, mirrored from the `s/` keys so `backlog` needs no disk read.
    cursors: Mutex<BTreeMap<String, u64>>,
    closed: AtomicBool,
    /// Appends that carried events, for `herald_journal_appends_total`.
    appends: AtomicU64,
    /// Every event up to this sequence number is gone (trimmed by retention, or never stored):
    /// the retained events are those after it, up to the head.
    trimmed: AtomicU64,
    /// Retention keeps the events after this sequence number ([`Journal::hold_retention_after`]).
    retention_floor: AtomicU64,
    /// A standby never delivers, so its backlog bound does not stop its watches
    /// ([`Journal::set_standby`]).
    standby: AtomicBool,
    /// The events appended last, for readers at the head (`tail.rs`).
    tail: tail::Tail,
    /// The index updates appended since the last fold (`updates.rs`). Changed only under
    /// `append`, and never held across a sled write, so readers of the index wait for no disk.
    pending: Mutex<updates::Pending>,
    /// Holds our directory lock for as long as the store is open.
    _lock: File,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each guarded value is written in one step after the fallible work, so it is valid after a
    // panic elsewhere.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The journal directory's lock, held without the journal open ([`Journal::lock_dir`]).
#[derive(Debug)]
pub struct DirLock {
    /// Locked; closing it releases the lock.
    _file: File,
}

impl Journal {
    /// Opens or creates the journal.
    ///
    /// Takes the lock of the journal at `path` without opening it (creating the directory 0700
    /// if needed), for what must not run beside a herald using this journal: `herald check
    /// --connect` starting the embedded cluster whose state lives in the journal directory.
    /// Held until the returned value is dropped; [`JournalError::AlreadyOpen`] when a herald
    /// holds it.
    pub fn lock_dir(path: &Path) -> Result<DirLock> {
        files::private_dir(path)?;
        files::lock(path).map(|file| DirLock { _file: file })
    }

    /// Exclusive: a second open of the same path, in this or another process, fails with
    /// [`JournalError::AlreadyOpen`] (after retrying for up to a second, so that a reopen right
    /// after a close succeeds). Creates the directory 0700 and restricts sled's files to
    /// 0600. Writes `meta/schema_version` on a new store and refuses any version but
    /// [`SCHEMA_VERSION`]. Sequence numbers and cursors continue where the last run left them.
    pub fn open(cfg: JournalConfig) -> Result<Journal> {
        let path = cfg.path;
        files::private_dir(&path)?;
        let dir_lock = files::lock(&path)?;
        compact::recover(&path)?;
        let (mut db, mut report) = open_checked(&path, cfg.cache_capacity, cfg.open_timeout)?;
        // Only `herald run` asks; the others open the journal as it is without measuring it.
        let oversized = cfg.compact_at_open.and_then(|floor| {
            compact::store_bytes(&path)
                .ok()
                .filter(|&disk| worth_compacting(disk, report.live_bytes, floor))
        });
        if let Some(disk) = oversized {
            drop(db);
            compact_at_open(&path, disk, report.live_bytes, cfg.open_timeout);
            compact::recover(&path)?;
            (db, report) = open_checked(&path, cfg.cache_capacity, cfg.open_timeout)?;
        }
        let meta_failed = |source| JournalError::MetaFailed {
            path: path.clone(),
            source,
        };
        let head = report.head;
        let trimmed = report
            .first_event
            .map_or(head, |first| first.saturating_sub(1));
        let cursors = report.cursors;
        prepare_schema(&db, &path, report.schema_version.as_deref(), head)?;
        let folded = updates::fold_stored(&db, &path)?;
        if folded > 0 {
            tracing::info!(message = "Index updates folded into the object index.", path = %path.display(), entries = folded);
        }
        // Whatever recovery found may still sit in the OS cache only; make it the durable base.
        db.flush().map_err(meta_failed)?;
        files::restrict_tree(&path)?;
        let record =
            head::Record::open(&path, head).map_err(|source| JournalError::HeadRecordFailed {
                path: head::path(&path),
                source,
            })?;

        let flush = Arc::new(flusher::Shared::new(
            &path,
            head,
            cfg.flush_interval,
            cfg.flush_entries,
            cfg.adaptive_commit,
            record,
        ));
        let thread = std::thread::Builder::new()
            .name("journal-flush".to_owned())
            .spawn({
                let db = db.clone();
                let flush = Arc::clone(&flush);
                move || flusher::run(db, flush)
            })
            .map_err(|source| JournalError::FlusherStartFailed { source })?;
        tracing::debug!(message = "Journal opened.", path = %path.display(), head, sinks = cursors.len());
        Ok(Journal {
            inner: Arc::new(Inner {
                path,
                retain: cfg.retain,
                max_backlog: cfg.max_backlog,
                db,
                flush,
                flusher: Mutex::new(Some(thread)),
                appends_queued: appender::Queue::default(),
                append: Mutex::new(0),
                cursors: Mutex::new(cursors),
                closed: AtomicBool::new(false),
                appends: AtomicU64::new(0),
                trimmed: AtomicU64::new(trimmed),
                retention_floor: AtomicU64::new(u64::MAX),
                standby: AtomicBool::new(false),
                tail: tail::Tail::new(head, cfg.tail_bytes),
                pending: Mutex::new(updates::Pending::default()),
                _lock: dir_lock,
            }),
        })
    }

    /// The journal directory.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Whether writes are taken: not after `close`, nor after a write failed (sled would refuse it
    /// with the same error; a refusal here is counted without touching the store).
    fn check_open(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(JournalError::Closed);
        }
        if let Some(failure) = self.inner.flush.refuse() {
            return Err(JournalError::Unwritable(failure));
        }
        Ok(())
    }

    /// Records that a write to the store failed (from now on the journal refuses writes) and
    /// returns the error every caller gets for it.
    fn note_write_error(&self, op: &'static str, error: &sled::Error) -> JournalError {
        JournalError::Unwritable(self.inner.flush.fail(op, error))
    }

    /// Why the journal stopped taking writes, once a write failed (a full disk, an I/O error); it
    /// never takes writes again in this process (see [`WriteFailure`]).
    pub fn write_failure(&self) -> Option<Arc<WriteFailure>> {
        self.inner.flush.failure()
    }

    /// Resolves when a write fails (at once if one already did): what `herald run` waits for to
    /// exit 12.
    pub async fn write_failed(&self) -> Arc<WriteFailure> {
        let mut rx = self.inner.flush.flushed.subscribe();
        let failed = rx
            .wait_for(|f| f.failed.is_some())
            .await
            .ok()
            .and_then(|state| state.failed.clone());
        match failed {
            Some(failure) => failure,
            // The sender lives as long as `self`: unreachable, but never a false alarm.
            None => std::future::pending().await,
        }
    }

    /// Writes that failed or were refused since the journal was opened
    /// (`herald_journal_write_errors_total`).
    pub fn write_errors(&self) -> u64 {
        self.inner.flush.write_errors()
    }

    /// Appends atomically: the events get consecutive sequence numbers (returned), and the index
    /// updates and the checkpoint are written in the same sled batch. Does not wait for disk:
    /// see [`durable`](Journal::durable). Concurrent appenders are serialised, so each batch's
    /// numbers are contiguous.
    pub fn append(&self, batch: Batch) -> Result<Vec<u64>> {
        self.append_with(batch, FirstSync::Keep)
    }

    /// [`append`](Journal::append), setting or removing the stream's first-sync marker in the
    /// same sled batch (see [`FirstSync`]).
    pub fn append_with(&self, batch: Batch, first_sync: FirstSync) -> Result<Vec<u64>> {
        self.append_vouched(batch, first_sync, Vec::new())
    }

    /// [`append_with`](Journal::append_with), with the [`Layout`] of each event its renderer
    /// vouches for (`layouts[i]` for `batch.events[i]`; missing ones, or `None`, vouch for
    /// nothing): kept beside the events in memory, so a reader at the head builds a vouched
    /// event from its bytes without reading them again. The store keeps the bytes only; whatever
    /// is read back from it is read and judged in full.
    pub fn append_vouched(
        &self,
        batch: Batch,
        first_sync: FirstSync,
        layouts: Vec<Option<Layout>>,
    ) -> Result<Vec<u64>> {
        self.check_open()?;
        keys::check_name("stream", &batch.stream)?;
        if batch.events.is_empty()
            && batch.index.is_empty()
            && batch.checkpoint.is_none()
            && first_sync == FirstSync::Keep
        {
            return Ok(Vec::new());
        }
        let Batch {
            stream,
            events,
            index,
            checkpoint,
            listed,
        } = batch;
        let count = events.len() as u64;
        let writes = events.len() + index.len();

        // Compressed before the append lock, so concurrent appenders compress side by side: the
        // values do not depend on the sequence numbers, and the append time, which must not go
        // back from one append to the next, is stored uncompressed and set under the lock.
        let mut b = sled::Batch::default();
        let mut scratch = Vec::new();
        let last = last_of_each_key(&index);
        let mut updated: Vec<updates::Update> = Vec::with_capacity(index.len());
        for (update, last) in index.into_iter().zip(last) {
            if !last {
                continue;
            }
            updated.push(match update {
                IndexUpdate::Put { key, object } => (
                    keys::index(&stream, &key),
                    Some(compressed::index_value(&object, &mut scratch)?),
                ),
                IndexUpdate::Remove { key } => (keys::index(&stream, &key), None),
            });
        }
        let early = now_ms();
        let mut segments = keys::segment_values(early, &events)?;

        let mut last_ms = lock(&self.inner.append);
        // The updates as `u/` keys, and the fold of the oldest ones past the bounds.
        let plan = lock(&self.inner.pending).plan(&mut b, updated, listed);
        let head = self.inner.flush.head.load(Ordering::Acquire);
        let at = early.max(*last_ms);
        if at != early {
            for (_, value) in &mut segments {
                keys::set_append_time(value, at);
            }
        }
        for (run, value) in segments {
            let (first, last) = (head + 1 + run.start as u64, head + run.end as u64);
            b.insert(keys::segment(first, last), value);
        }
        if let Some(rv) = checkpoint {
            b.insert(keys::checkpoint(&stream), rv.into_bytes());
        }
        match first_sync {
            FirstSync::Keep => {}
            FirstSync::Skipping => b.insert(keys::first_sync(&stream), keys::FIRST_SYNC_SKIPPING),
            FirstSync::Done => b.remove(keys::first_sync(&stream)),
        }
        let new_head = head + count;
        if count > 0 {
            // Kept beside the events so numbering survives retention deleting all of them.
            b.insert(keys::HEAD_KEY, &new_head.to_be_bytes()[..]);
        }
        if let Err(source) = self.inner.db.apply_batch(b) {
            return Err(self.note_write_error("append", &source));
        }
        lock(&self.inner.pending).applied(plan);
        if count > 0 {
            // Before the head moves, so a reader never finds an event numbered yet missing here.
            // A standby's cursors follow the leader; it never reads for delivery.
            let passed = if self.inner.standby.load(Ordering::Relaxed) {
                None
            } else {
                lock(&self.inner.cursors).values().copied().min()
            };
            // Missing layouts at the end vouch for nothing; more layouts than events cannot be
            // paired with them, so none of those is trusted and every event is read in full.
            let mut layouts = layouts;
            if layouts.len() > events.len() {
                debug_assert!(false, "{} layouts for {count} events", layouts.len());
                layouts.clear();
            }
            layouts.resize(events.len(), None);
            self.inner
                .tail
                .push(head + 1, events.into_iter().zip(layouts), passed);
        }
        self.inner.flush.head.store(new_head, Ordering::Release);
        *last_ms = at;
        drop(last_ms);
        garbage::release();

        if count > 0 {
            self.inner.appends.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.flush.note_write(writes.max(1));
        Ok((head + 1..=new_head).collect())
    }

    /// [`append_vouched`](Journal::append_vouched) on the journal's append thread, after the appends
    /// queued before it; `done` gets the outcome there (or
    /// [`JournalError::AppenderStartFailed`] at once if the thread could not be started). Every
    /// queued append runs on that one thread while appends keep coming, so sled's io buffers and
    /// node copies are made and freed in one allocator heap (`appender.rs`). `done` runs on that
    /// thread, before the next append: it must hand the outcome over and return, never block or
    /// wait for a later append. The queue is unbounded; what bounds it is that each caller (a
    /// watch's recorder, a relist) keeps at most one append in flight.
    pub fn append_queued(
        &self,
        batch: Batch,
        first_sync: FirstSync,
        layouts: Vec<Option<Layout>>,
        done: impl FnOnce(Result<Vec<u64>>) + Send + 'static,
    ) {
        self.inner.appends_queued.push(appender::Job {
            journal: self.clone(),
            batch,
            first_sync,
            layouts,
            done: Box::new(done),
        });
    }

    /// Waits until every event up to `seq` (clamped to the head: `u64::MAX` means "everything
    /// appended so far") is flushed to disk. Waiters share the next group commit.
    ///
    /// Fails with [`JournalError::Unwritable`] once a write failed (nothing more becomes durable),
    /// and with [`JournalError::Closed`] once the flusher stopped short of `seq`.
    pub async fn durable(&self, seq: u64) -> Result<()> {
        let target = seq.min(self.head());
        let mut rx = self.inner.flush.flushed.subscribe();
        let state = rx
            .wait_for(|f| f.seq >= target || f.failed.is_some() || f.stopped)
            .await
            .map_err(|_| JournalError::Closed)?;
        if state.seq >= target {
            Ok(())
        } else if let Some(failure) = &state.failed {
            Err(JournalError::Unwritable(Arc::clone(failure)))
        } else {
            Err(JournalError::Closed)
        }
    }

    /// Resolves once an event after `seq` is durable, at once if one already is, or once nothing
    /// more can become durable (a write failed, the flusher stopped): what a reader that found
    /// nothing after `seq` waits on, so it reads what the next group commit made durable as soon
    /// as that commit returns instead of on its next poll. Returns whether an event after `seq`
    /// is durable.
    pub async fn durable_after(&self, seq: u64) -> bool {
        let mut rx = self.inner.flush.flushed.subscribe();
        rx.wait_for(|f| f.seq > seq || f.failed.is_some() || f.stopped)
            .await
            .is_ok_and(|f| f.seq > seq)
    }

    /// The highest sequence number known to be on disk.
    pub fn durable_seq(&self) -> u64 {
        self.inner.flush.durable.load(Ordering::Acquire)
    }

    /// The last assigned sequence number (0 for a journal that never had an event).
    pub fn head(&self) -> u64 {
        self.inner.flush.head.load(Ordering::Acquire)
    }

    /// The stream's last stored resourceVersion checkpoint.
    pub fn checkpoint(&self, stream: &str) -> Result<Option<String>> {
        keys::check_name("stream", stream)?;
        let key = keys::checkpoint(stream);
        let value =
            self.inner
                .db
                .get(&key)
                .map_err(|source| JournalError::CheckpointReadFailed {
                    stream: stream.to_owned(),
                    source,
                })?;
        value
            .map(|v| {
                String::from_utf8(v.to_vec()).map_err(|_| JournalError::CorruptEntry {
                    key: keys::printable(&key),
                    reason: "checkpoint is not UTF-8",
                })
            })
            .transpose()
    }

    /// Whether the stream's first sync is under way and skips the initial state (its marker, set
    /// and removed by [`append_with`](Journal::append_with)). A marker that does not read as one
    /// counts as none: the start then reports the differences, at worst again, never none.
    pub fn first_sync_skipping(&self, stream: &str) -> Result<bool> {
        keys::check_name("stream", stream)?;
        let value = self
            .inner
            .db
            .get(keys::first_sync(stream))
            .map_err(|source| JournalError::FirstSyncReadFailed {
                stream: stream.to_owned(),
                source,
            })?;
        Ok(value.is_some_and(|v| v == keys::FIRST_SYNC_SKIPPING))
    }

    /// Every stream's checkpoint, in stream order (for the leader's published floors, ADR 0013).
    pub fn checkpoints(&self) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for entry in self.inner.db.scan_prefix(keys::CHECKPOINT_PREFIX) {
            let (k, v) = entry.map_err(|source| JournalError::CheckpointReadFailed {
                stream: "*".to_owned(),
                source,
            })?;
            let corrupt = |reason| JournalError::CorruptEntry {
                key: keys::printable(&k),
                reason,
            };
            let stream = k
                .get(keys::CHECKPOINT_PREFIX.len()..)
                .and_then(|rest| std::str::from_utf8(rest).ok())
                .ok_or_else(|| corrupt("checkpoint key is not UTF-8"))?;
            let rv = std::str::from_utf8(&v).map_err(|_| corrupt("checkpoint is not UTF-8"))?;
            out.push((stream.to_owned(), rv.to_owned()));
        }
        Ok(out)
    }

    /// This journal's key for the digests of redacted values (`meta/redaction_key`, 32 random
    /// bytes made on first use): the object index keeps a keyed digest of what it redacts, so a
    /// change to a redacted value is still a change, and the digest tells nothing without the key.
    pub fn redaction_key(&self) -> Result<Vec<u8>> {
        let failed = |source| JournalError::MetaFailed {
            path: self.inner.path.clone(),
            source,
        };
        let fresh: [u8; 32] = rand::random();
        // Atomic: two watchers asking at once agree on one key.
        let _ = self
            .inner
            .db
            .compare_and_swap(keys::REDACTION_KEY, None::<&[u8]>, Some(&fresh[..]))
            .map_err(failed)?;
        let stored = self.inner.db.get(keys::REDACTION_KEY).map_err(failed)?;
        Ok(stored.map_or_else(|| fresh.to_vec(), |v| v.to_vec()))
    }

    /// The last stored object under `key` (`<namespace>/<name>`) in the stream's index.
    pub fn index_get(&self, stream: &str, key: &str) -> Result<Option<Vec<u8>>> {
        keys::check_name("stream", stream)?;
        let k = keys::index(stream, key);
        // Gathered first: a fold between the two reads writes to the tree what it takes from here.
        let gathered = lock(&self.inner.pending).get(&k);
        let stored = match gathered {
            Some(latest) => latest,
            None => self
                .inner
                .db
                .get(&k)
                .map_err(|source| JournalError::IndexReadFailed {
                    stream: stream.to_owned(),
                    source,
                })?,
        };
        stored
            .map(|v| keys::index_object(&k, &v).map(Cow::into_owned))
            .transpose()
    }

    /// Folds the index updates gathered since the last fold into the `i/` keys (`updates.rs`), so
    /// that a scan of the tree finds every object. Refused once a write failed, when there is
    /// something to fold: the index then cannot be scanned whole.
    fn fold(&self) -> Result<()> {
        let _append = lock(&self.inner.append);
        if lock(&self.inner.pending).is_empty() {
            return Ok(());
        }
        if let Some(failure) = self.inner.flush.refuse() {
            return Err(JournalError::Unwritable(failure));
        }
        fold_gathered(&self.inner.db, &self.inner.pending)
            .map_err(|source| self.note_write_error("fold the object index", &source))
    }

    /// Every object in the stream's index, in key order (for the relist diff).
    pub fn index_scan(&self, stream: &str) -> Result<Vec<(String, Vec<u8>)>> {
        keys::check_name("stream", stream)?;
        self.fold()?;
        let prefix = keys::index_prefix(stream);
        let mut out = Vec::new();
        for entry in self.inner.db.scan_prefix(&prefix) {
            let (k, v) = entry.map_err(|source| JournalError::IndexReadFailed {
                stream: stream.to_owned(),
                source,
            })?;
            let key = k
                .get(prefix.len()..)
                .and_then(|rest| std::str::from_utf8(rest).ok())
                .ok_or_else(|| JournalError::CorruptEntry {
                    key: keys::printable(&k),
                    reason: "index key is not UTF-8",
                })?;
            out.push((key.to_owned(), keys::index_object(&k, &v)?.into_owned()));
        }
        Ok(out)
    }

    /// The keys of the stream's index in key order, read lazily: a relist walks an index of any
    /// size with one entry in memory at a time (values are read with [`Journal::index_get`] only
    /// for the keys it needs). Appends made while the walk goes on may or may not be seen by it.
    pub fn index_keys(&self, stream: &str) -> Result<IndexKeys> {
        keys::check_name("stream", stream)?;
        self.fold()?;
        let prefix = keys::index_prefix(stream);
        Ok(IndexKeys {
            iter: self.inner.db.scan_prefix(&prefix),
            skip: prefix.len(),
            stream: stream.to_owned(),
        })
    }

    /// The streams starting with `prefix` that have objects in their index, in order (a group
    /// pattern looks for the kinds of its group whose CRD went away while herald was down).
    pub fn indexed_streams(&self, prefix: &str) -> Result<Vec<String>> {
        self.fold()?;
        let mut out = Vec::new();
        let mut from = keys::index_prefix(prefix);
        // Without the separator: every stream that starts with `prefix`.
        from.pop();
        let end = {
            let mut e = from.clone();
            e.push(0xff);
            e
        };
        let mut next = from.clone();
        loop {
            let Some(entry) = self.inner.db.range(next.clone()..end.clone()).next() else {
                break;
            };
            let (k, _) = entry.map_err(|source| JournalError::IndexReadFailed {
                stream: prefix.to_owned(),
                source,
            })?;
            let Some(rest) = k.get(keys::INDEX_PREFIX.len()..) else {
                break;
            };
            let Some(stream) = rest
                .iter()
                .position(|b| *b == 0)
                .and_then(|at| rest.get(..at))
                .and_then(|b| std::str::from_utf8(b).ok())
            else {
                break;
            };
            if !stream.starts_with(prefix) {
                break;
            }
            out.push(stream.to_owned());
            // Skip the rest of this stream's keys: past `<stream>\0`, at `<stream>\x01`.
            next = keys::index_prefix(stream);
            if let Some(last) = next.last_mut() {
                *last = 1;
            }
        }
        Ok(out)
    }

    /// Registers a sink and returns its cursor (the last sequence number it has passed). A new
    /// sink starts at the head (it gets what is appended from now on), or with `from_start` just
    /// before the earliest event still kept. A known sink keeps its stored cursor.
    pub fn register_sink(&self, sink: &str, from_start: bool) -> Result<u64> {
        self.check_open()?;
        keys::check_name("sink", sink)?;
        let mut cursors = lock(&self.inner.cursors);
        if let Some(&cursor) = cursors.get(sink) {
            return Ok(cursor);
        }
        let failed = |source| JournalError::SinkRegisterFailed {
            sink: sink.to_owned(),
            source,
        };
        let head = self.head();
        let cursor = if from_start {
            match self.inner.db.scan_prefix(keys::EVENT_PREFIX).next() {
                Some(entry) => {
                    let (k, _) = entry.map_err(failed)?;
                    keys::event_span(&k)?.0.saturating_sub(1)
                }
                None => head,
            }
        } else {
            head
        };
        if let Err(source) = self
            .inner
            .db
            .insert(keys::cursor(sink), &cursor.to_be_bytes()[..])
        {
            return Err(self.note_write_error("register", &source));
        }
        cursors.insert(sink.to_owned(), cursor);
        drop(cursors);
        self.inner.flush.note_write(0);
        tracing::info!(
            message = "Sink registered with the journal.",
            sink,
            cursor,
            from_start
        );
        Ok(cursor)
    }

    /// Forgets a sink that left the configuration, so it no longer holds back retention or counts
    /// in the backlog. Unknown sinks are ignored.
    pub fn remove_sink(&self, sink: &str) -> Result<()> {
        self.check_open()?;
        keys::check_name("sink", sink)?;
        let mut cursors = lock(&self.inner.cursors);
        let mut forget = sled::Batch::default();
        forget.remove(keys::cursor(sink));
        forget.remove(keys::acked(sink));
        if let Err(source) = self.inner.db.apply_batch(forget) {
            return Err(self.note_write_error("register", &source));
        }
        cursors.remove(sink);
        drop(cursors);
        self.inner.flush.note_write(0);
        Ok(())
    }

    /// The names of the registered sinks.
    pub fn sinks(&self) -> Vec<String> {
        lock(&self.inner.cursors).keys().cloned().collect()
    }

    /// Up to `max` events after `after`, in sequence order, as `(seq, rendered CloudEvent)`. Only
    /// durable events are returned (seq ≤ [`durable_seq`](Journal::durable_seq)); events removed
    /// by retention are skipped.
    pub fn read(&self, sink: &str, after: u64, max: usize) -> Result<Vec<(u64, Vec<u8>)>> {
        self.read_as(sink, after, max, <[u8]>::to_vec)
    }

    /// [`read`](Journal::read), each event's bytes in the shared buffer delivery keeps them in:
    /// copied once into it from the store (a `Vec` copied again into one was a second
    /// allocation and copy per event).
    ///
    /// A reader at the head gets them from memory, the very bytes appended (`tail.rs`); one
    /// behind what memory holds reads the store.
    pub fn read_shared(&self, sink: &str, after: u64, max: usize) -> Result<Vec<(u64, Bytes)>> {
        Ok(self
            .read_vouched(sink, after, max)?
            .into_iter()
            .map(|(seq, bytes, _)| (seq, bytes))
            .collect())
    }

    /// [`read_shared`](Journal::read_shared), each event with the [`Layout`] its renderer vouched
    /// for when it comes from memory and was appended with one
    /// ([`append_vouched`](Journal::append_vouched)); `None` for every other, which the reader
    /// reads and judges in full.
    pub fn read_vouched(
        &self,
        sink: &str,
        after: u64,
        max: usize,
    ) -> Result<Vec<(u64, Bytes, Option<Layout>)>> {
        let passed = {
            let cursors = lock(&self.inner.cursors);
            if !cursors.contains_key(sink) {
                return Err(JournalError::UnknownSink {
                    sink: sink.to_owned(),
                });
            }
            cursors.values().copied().min().unwrap_or_default()
        };
        if let Some(rows) = self.inner.tail.read(after, self.durable_seq(), max, passed) {
            return Ok(rows);
        }
        let rows = self.read_as(sink, after, max, Bytes::copy_from_slice)?;
        self.inner
            .tail
            .from_store
            .fetch_add(rows.len() as u64, Ordering::Relaxed);
        Ok(rows
            .into_iter()
            .map(|(seq, bytes)| (seq, bytes, None))
            .collect())
    }

    /// Events [`read_shared`](Journal::read_shared) handed out from memory and from the store
    /// since the journal was opened.
    pub fn shared_reads(&self) -> (u64, u64) {
        (
            self.inner.tail.from_memory.load(Ordering::Relaxed),
            self.inner.tail.from_store.load(Ordering::Relaxed),
        )
    }

    fn read_as<T>(
        &self,
        sink: &str,
        after: u64,
        max: usize,
        own: impl Fn(&[u8]) -> T,
    ) -> Result<Vec<(u64, T)>> {
        if !lock(&self.inner.cursors).contains_key(sink) {
            return Err(JournalError::UnknownSink {
                sink: sink.to_owned(),
            });
        }
        let durable = self.durable_seq();
        if after >= durable || max == 0 {
            return Ok(Vec::new());
        }
        let failed = |source| JournalError::ReadFailed {
            sink: sink.to_owned(),
            source,
        };
        let mut out = Vec::with_capacity(max.min(1_024));
        let start = self.events_start(after).map_err(failed)?;
        let range = start..keys::event(durable.saturating_add(1));
        'scan: for entry in self.inner.db.range(range) {
            let (k, v) = entry.map_err(failed)?;
            let plain = keys::plain_events(&k, &v)?;
            let (_, events) = keys::split_events(&k, &plain)?;
            for (seq, payload) in events {
                if seq <= after {
                    continue;
                }
                if seq > durable {
                    break 'scan;
                }
                out.push((seq, own(payload)));
                if out.len() == max {
                    break 'scan;
                }
            }
        }
        garbage::release();
        Ok(out)
    }

    /// Where a scan of the events after `after` starts: at the segment that holds `after + 1` when
    /// one began before it (a cursor may stop inside a segment), else at `after + 1`.
    fn events_start(&self, after: u64) -> std::result::Result<Vec<u8>, sled::Error> {
        let from = keys::event(after.saturating_add(1));
        if let Some(entry) = self
            .inner
            .db
            .range(keys::event(0)..from.clone())
            .next_back()
        {
            let (k, _) = entry?;
            if keys::event_span(&k).is_ok_and(|(_, last)| last > after) {
                return Ok(k.to_vec());
            }
        }
        Ok(from)
    }

    /// Moves the sink's cursor to `upto`: every event up to it is delivered or dead-lettered (the
    /// caller guarantees contiguity). Acknowledging at or behind the cursor is a no-op, so acks are
    /// idempotent; acknowledging past [`durable_seq`](Journal::durable_seq) is a bug and fails.
    pub fn ack(&self, sink: &str, upto: u64) -> Result<()> {
        self.check_open()?;
        let mut cursors = lock(&self.inner.cursors);
        let Some(cursor) = cursors.get_mut(sink) else {
            return Err(JournalError::UnknownSink {
                sink: sink.to_owned(),
            });
        };
        if upto <= *cursor {
            return Ok(());
        }
        let durable = self.durable_seq();
        if upto > durable {
            return Err(JournalError::AckBeyondDurable {
                sink: sink.to_owned(),
                upto,
                durable,
            });
        }
        if let Err(source) = self
            .inner
            .db
            .insert(keys::cursor(sink), &upto.to_be_bytes()[..])
        {
            return Err(self.note_write_error("ack", &source));
        }
        *cursor = upto;
        drop(cursors);
        self.inner.flush.note_write(0);
        Ok(())
    }

    /// Moves the sink's cursor to `upto` (as [`ack`](Journal::ack)) and records `above`, the events
    /// after it that are done too (delivered, dead-lettered or not routed to the sink), as ascending,
    /// disjoint, non-adjacent inclusive ranges; both in one sled batch, durable with the next group
    /// commit. `above` replaces what was recorded before and is cut to [`MAX_ACKED_RANGES`] ranges,
    /// keeping those nearest the cursor. A cursor behind the stored one is kept where it is, and
    /// ranges at or behind the cursor are dropped; ranges past
    /// [`durable_seq`](Journal::durable_seq) are a bug and fail.
    pub fn acknowledge(&self, sink: &str, upto: u64, above: &[(u64, u64)]) -> Result<()> {
        self.check_open()?;
        let mut cursors = lock(&self.inner.cursors);
        let Some(cursor) = cursors.get_mut(sink) else {
            return Err(JournalError::UnknownSink {
                sink: sink.to_owned(),
            });
        };
        let upto = upto.max(*cursor);
        let durable = self.durable_seq();
        let last = above.last().map_or(upto, |&(_, last)| last.max(upto));
        if last > durable {
            return Err(JournalError::AckBeyondDurable {
                sink: sink.to_owned(),
                upto: last,
                durable,
            });
        }
        let kept: Vec<(u64, u64)> = above
            .iter()
            .filter(|&&(_, last)| last > upto)
            .map(|&(first, last)| (first.max(upto + 1), last))
            .take(MAX_ACKED_RANGES)
            .collect();
        let mut b = sled::Batch::default();
        if upto > *cursor {
            b.insert(keys::cursor(sink), &upto.to_be_bytes()[..]);
        }
        if kept.is_empty() {
            b.remove(keys::acked(sink));
        } else {
            b.insert(keys::acked(sink), keys::encode_ranges(&kept));
        }
        if let Err(source) = self.inner.db.apply_batch(b) {
            return Err(self.note_write_error("ack", &source));
        }
        *cursor = upto;
        drop(cursors);
        self.inner.flush.note_write(0);
        Ok(())
    }

    /// The ranges of events recorded as done above the sink's cursor (see
    /// [`acknowledge`](Journal::acknowledge)); empty for a sink that has none or is unknown.
    pub fn acked(&self, sink: &str) -> Result<Vec<(u64, u64)>> {
        keys::check_name("sink", sink)?;
        let key = keys::acked(sink);
        let value = self
            .inner
            .db
            .get(&key)
            .map_err(|source| JournalError::ReadFailed {
                sink: sink.to_owned(),
                source,
            })?;
        let cursor = self.cursor(sink).unwrap_or(0);
        match value {
            Some(v) => Ok(keys::decode_ranges(&key, &v)?
                .into_iter()
                .filter(|&(_, last)| last > cursor)
                .map(|(first, last)| (first.max(cursor + 1), last))
                .collect()),
            None => Ok(Vec::new()),
        }
    }

    /// The sink's cursor: the last sequence number it has passed.
    pub fn cursor(&self, sink: &str) -> Result<u64> {
        lock(&self.inner.cursors)
            .get(sink)
            .copied()
            .ok_or_else(|| JournalError::UnknownSink {
                sink: sink.to_owned(),
            })
    }

    /// Appends that carried events since the journal was opened; the head's growth over this is
    /// the events per append, i.e. how well watch batches fill.
    pub fn appends(&self) -> u64 {
        self.inner.appends.load(Ordering::Relaxed)
    }

    /// Undelivered events: the head minus the slowest cursor (0 without sinks).
    pub fn backlog(&self) -> u64 {
        let slowest = lock(&self.inner.cursors).values().copied().min();
        slowest.map_or(0, |c| self.head().saturating_sub(c))
    }

    /// Whether the backlog exceeds `max_backlog`. The journal still accepts appends then (an
    /// observed change is never dropped here); the watch side is expected to stop pulling and
    /// herald to report it.
    pub fn over_backlog_bound(&self) -> bool {
        self.over_backlog_bound_with(0)
    }

    /// [`over_backlog_bound`](Journal::over_backlog_bound) once `pending` more events are
    /// appended: a watch whose batch is still appending asks this, so it pauses where it would
    /// have had the batch landed before it asked.
    pub fn over_backlog_bound_with(&self, pending: u64) -> bool {
        !self.inner.standby.load(Ordering::SeqCst)
            && self.backlog().saturating_add(pending) > self.inner.max_backlog
    }

    /// Marks this journal as a standby's (leader election, ADR 0013): its cursors move only with
    /// the positions the leader publishes, so its backlog measures the leader's progress, not its
    /// own, and must not stop its watches; the backlog bound applies again once it leads.
    pub fn set_standby(&self, standby: bool) {
        self.inner.standby.store(standby, Ordering::SeqCst);
    }

    /// Keeps every event after `seq` from retention, whatever the cursors say: the leader's
    /// position publisher has not read them yet (ADR 0013). `u64::MAX` lifts the hold.
    pub fn hold_retention_after(&self, seq: u64) {
        self.inner.retention_floor.store(seq, Ordering::SeqCst);
    }

    /// Deletes the events every sink has passed and that are older than `retain`; returns how
    /// many were removed. With no sink registered, every durable event older than `retain` goes:
    /// register the configured sinks before the first pass. A segment goes whole, once every
    /// event of it may go: until then its events before the slowest cursor stay readable.
    ///
    /// sled reclaims the space later, in the background.
    pub fn apply_retention(&self) -> Result<u64> {
        let slowest = lock(&self.inner.cursors).values().copied().min();
        let bound = slowest
            .unwrap_or(u64::MAX)
            .min(self.durable_seq())
            .min(self.inner.retention_floor.load(Ordering::SeqCst));
        let retain_ms = u64::try_from(self.inner.retain.as_millis()).unwrap_or(u64::MAX);
        let cutoff = now_ms().saturating_sub(retain_ms);
        let failed = |source| JournalError::RetentionFailed { source };
        let write_failed = |source: sled::Error| self.note_write_error("retention", &source);

        let mut removed = 0u64;
        let mut in_chunk_events = 0u64;
        let mut last_removed = 0u64;
        let mut chunk = sled::Batch::default();
        let mut in_chunk = 0usize;
        // Append times grow with sequence numbers, so the deletable events are a prefix.
        let range = keys::event(0)..keys::event(bound.saturating_add(1));
        for entry in self.inner.db.range(range) {
            let (k, v) = entry.map_err(failed)?;
            let (first, last) = keys::event_span(&k)?;
            if last > bound || keys::append_time(&k, &v)? > cutoff {
                break;
            }
            last_removed = last;
            chunk.remove(k);
            in_chunk += 1;
            in_chunk_events += last - first + 1;
            if in_chunk == RETENTION_CHUNK {
                self.inner
                    .db
                    .apply_batch(std::mem::take(&mut chunk))
                    .map_err(write_failed)?;
                removed += in_chunk_events;
                (in_chunk, in_chunk_events) = (0, 0);
            }
        }
        if in_chunk > 0 {
            self.inner.db.apply_batch(chunk).map_err(write_failed)?;
            removed += in_chunk_events;
        }
        if removed > 0 {
            self.inner.trimmed.fetch_max(last_removed, Ordering::SeqCst);
        }
        garbage::drain();
        if removed > 0 {
            self.inner.flush.note_write(0);
            tracing::debug!(
                message = "Journal retention removed events.",
                removed,
                upto = bound
            );
        }
        // sled keeps creating snapshot and blob files with the umask.
        if let Err(error) = files::restrict_tree(&self.inner.path) {
            // With its OS error: "too many open files" here means herald ran out of descriptors,
            // not that the permissions are wrong.
            match crate::telemetry::fds::exhaustion_in(&error) {
                Some(io) => crate::telemetry::fds::note("restricting journal file permissions", io),
                None => {
                    tracing::warn!(message = "Could not restrict journal file permissions.", error = %herald_sink_core::error_chain(&error));
                }
            }
        }
        Ok(removed)
    }

    /// Events the journal holds: delivered ones kept by `retain` and undelivered ones, from the
    /// oldest stored to the head (`herald_journal_retained_events`).
    pub fn retained_events(&self) -> u64 {
        self.head()
            .saturating_sub(self.inner.trimmed.load(Ordering::SeqCst))
    }

    /// Bytes the journal directory takes on disk (allocated blocks of every file, snapshots and
    /// blobs included).
    pub fn size_on_disk(&self) -> Result<u64> {
        files::allocated_bytes(&self.inner.path)
            .map_err(|source| JournalError::SizeFailed { source })
    }

    /// Stops taking writes, performs the final flush and stops the flusher. Other clones can still
    /// read; the directory lock is released when the last clone is dropped.
    pub async fn close(self) -> Result<()> {
        self.inner.closed.store(true, Ordering::Release);
        // Into the final flush, so the next open has nothing to fold. Should it fail, that open
        // folds the `u/` keys instead: not a failed write of the journal's, which would cost the
        // final flush of what was appended.
        let journal = self.clone();
        let folded = tokio::task::spawn_blocking(move || {
            if journal.inner.flush.failure().is_some() {
                return Ok(());
            }
            let _append = lock(&journal.inner.append);
            fold_gathered(&journal.inner.db, &journal.inner.pending)
        })
        .await;
        if let Ok(Err(error)) = folded {
            tracing::warn!(message = "Index updates not folded at close; the next open folds them.", %error);
        }
        self.inner.flush.shutdown();
        let thread = lock(&self.inner.flusher).take();
        if let Some(thread) = thread {
            let joined = tokio::task::spawn_blocking(move || thread.join())
                .await
                .map_err(|_| JournalError::FlusherPanicked)?;
            joined.map_err(|_| JournalError::FlusherPanicked)?;
        }
        if let Some(failure) = self.write_failure() {
            return Err(JournalError::Unwritable(failure));
        }
        // The flusher's last flush may have failed; this one reports it.
        let db = self.inner.db.clone();
        let flush = Arc::clone(&self.inner.flush);
        tokio::task::spawn_blocking(move || {
            let flushed = flusher::flush_once(&db, &flush);
            flusher::sync_record(&flush);
            flushed
        })
        .await
        .map_err(|_| JournalError::FlusherPanicked)?
        .map_err(|source| JournalError::FlushFailed { source })?;
        tracing::debug!(message = "Journal closed.", path = %self.inner.path.display(), head = self.head());
        Ok(())
    }
}

#[cfg(test)]
impl Journal {
    /// Leaves the gathered index updates unfolded, in their `u/` keys only, as a crash would.
    fn forget_gathered(&self) {
        let _append = lock(&self.inner.append);
        lock(&self.inner.pending).forget();
    }

    /// How many keys the store holds under `prefix`.
    fn stored_under(&self, prefix: &[u8]) -> usize {
        self.inner.db.scan_prefix(prefix).count()
    }
}

impl fmt::Debug for Journal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Journal")
            .field("path", &self.inner.path)
            .field("head", &self.head())
            .field("durable", &self.durable_seq())
            .finish_non_exhaustive()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Without `close`: still fold and flush what was appended, and release sled's lock before
        // ours. A fold that fails leaves the `u/` keys for the next open to fold.
        if self.flush.failure().is_none() {
            let _append = lock(&self.append);
            if let Err(error) = fold_gathered(&self.db, &self.pending) {
                tracing::warn!(message = "Index updates not folded at drop; the next open folds them.", %error);
            }
        }
        self.flush.shutdown();
        let thread = self
            .flusher
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread
            && thread.join().is_err()
        {
            tracing::warn!(message = "Journal flusher panicked.");
        }
        flusher::sync_record(&self.flush);
    }
}

/// The keys of one stream's index, in key order ([`Journal::index_keys`]).
pub struct IndexKeys {
    iter: sled::Iter,
    /// Bytes of the stream's prefix in front of each key.
    skip: usize,
    stream: String,
}

impl fmt::Debug for IndexKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IndexKeys")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl Iterator for IndexKeys {
    type Item = Result<String>;

    fn next(&mut self) -> Option<Self::Item> {
        let entry = self.iter.next()?;
        Some(match entry {
            Err(source) => Err(JournalError::IndexReadFailed {
                stream: self.stream.clone(),
                source,
            }),
            Ok((k, _)) => k
                .get(self.skip..)
                .and_then(|rest| std::str::from_utf8(rest).ok())
                .map(str::to_owned)
                .ok_or_else(|| JournalError::CorruptEntry {
                    key: keys::printable(&k),
                    reason: "index key is not UTF-8",
                }),
        })
    }
}

/// Opens the sled store, waiting out a lock that a just-dropped store still holds.
///
/// We already hold our own lock here, so no other `Journal` has the store: a sled lock error that
/// outlasts `files::LOCK_WAIT` means something opened it bypassing `Journal`.
fn open_sled(path: &Path, cache_capacity: u64) -> Result<sled::Db> {
    let deadline = Instant::now() + files::LOCK_WAIT;
    loop {
        let opened = sled::Config::new()
            .path(path)
            .cache_capacity(cache_capacity)
            // Our flusher is the only flush cadence (group commit).
            .flush_every_ms(None)
            .open();
        match opened {
            Ok(db) => return Ok(db),
            Err(e) if files::is_sled_lock_error(&e) => {
                if Instant::now() >= deadline {
                    return Err(JournalError::AlreadyOpen {
                        path: path.to_owned(),
                    });
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(source) => {
                return Err(JournalError::OpenFailed {
                    path: path.to_owned(),
                    source,
                });
            }
        }
    }
}

/// Checks the journal in `dir` and reports what it holds and what is wrong, without upgrading or
/// repairing it (`herald journal verify`). Takes the journal's lock like [`Journal::open`], so it
/// fails with [`JournalError::AlreadyOpen`] while a herald runs on it. sled's own recovery may
/// still rewrite the tail of its log, as at any open.
pub fn verify(dir: &Path, timeout: Duration) -> Result<Report> {
    if !dir.is_dir() {
        return Err(JournalError::NotFound {
            path: dir.to_owned(),
        });
    }
    let _lock = files::lock(dir)?;
    compact::recover(dir)?;
    let (_db, mut report, foreign) = scan(dir, JournalConfig::new(dir).cache_capacity, timeout)?;
    report.disk_bytes = files::allocated_bytes(dir).ok();
    if foreign {
        return Err(JournalError::UnsupportedSchema {
            path: dir.to_owned(),
            found: None,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(report)
}

/// The start-time compaction, of a closed store whose lock the caller holds. A failure is logged
/// and leaves the journal as it was, or as the next [`compact::recover`] finishes it.
fn compact_at_open(path: &Path, disk: u64, live: u64, timeout: Duration) {
    tracing::info!(
        message = "Compacting the journal before start: its files take far more than what it holds.",
        path = %path.display(),
        disk_bytes = disk,
        live_bytes = live
    );
    let mut progress =
        |line: &str| tracing::debug!(message = "Compacting the journal.", progress = line);
    if let Err(error) = compact::compact_locked(path, timeout, &mut progress) {
        tracing::warn!(message = "Could not compact the journal; starting with the journal as it was, or as recovery finishes an interrupted swap.", error = %herald_sink_core::error_chain(&error));
    }
}

/// Test support: the closed store at `dir` as sled's recovery leaves it after a truncation that
/// lost every event from `from` on: those events removed (a segment that straddles `from` keeps
/// the events before it) and `meta/head` at `from - 1`. Other modules' tests cannot spell the
/// layout of `e/` keys.
#[cfg(test)]
pub(crate) fn roll_back_events(dir: &Path, from: u64) {
    // As herald opens it: sled lets go of its file lock when its last io job ends, a moment after
    // a close returns, and `open_sled` waits for that.
    let raw = open_sled(dir, CACHE_CAPACITY).unwrap();
    let stored: Vec<(sled::IVec, sled::IVec)> = raw
        .scan_prefix(keys::EVENT_PREFIX)
        .map(|entry| entry.unwrap())
        .collect();
    for (k, v) in stored {
        let (first, last) = keys::event_span(&k).unwrap();
        if last < from {
            continue;
        }
        raw.remove(&k).unwrap();
        if first < from {
            let plain = keys::plain_events(&k, &v).unwrap();
            let (at, events) = keys::split_events(&k, &plain).unwrap();
            let kept = events
                .iter()
                .filter(|(seq, _)| *seq < from)
                .map(|(_, e)| *e);
            raw.insert(
                keys::segment(first, from - 1),
                keys::segment_value(at, kept).unwrap(),
            )
            .unwrap();
        }
    }
    raw.insert(keys::HEAD_KEY, &(from - 1).to_be_bytes()[..])
        .unwrap();
    raw.flush().unwrap();
}

/// Which of `index` are the last update of their key. sled's batch is a map, so an earlier update
/// of a key the batch updates again is replaced unwritten; skipping it spares its compression and
/// copies. An object that changes several times while a batch gathers (a status that ticks, a
/// backlog of many changes to few objects) is compressed and copied once.
fn last_of_each_key(index: &[IndexUpdate]) -> Vec<bool> {
    let mut seen = std::collections::HashSet::with_capacity_and_hasher(
        index.len(),
        foldhash::fast::RandomState::default(),
    );
    let mut last: Vec<bool> = index
        .iter()
        .rev()
        .map(|update| match update {
            IndexUpdate::Put { key, .. } | IndexUpdate::Remove { key } => seen.insert(key.as_str()),
        })
        .collect();
    last.reverse();
    last
}

/// Writes the gathered index updates as `i/` keys and removes their `u/` keys, in one batch; the
/// caller holds the append lock, so nothing is gathered meanwhile.
fn fold_gathered(
    db: &sled::Db,
    pending: &Mutex<updates::Pending>,
) -> std::result::Result<(), sled::Error> {
    let mut b = sled::Batch::default();
    {
        let pending = lock(pending);
        if pending.is_empty() {
            return Ok(());
        }
        pending.fold_into(&mut b);
    }
    db.apply_batch(b)?;
    lock(pending).folded();
    Ok(())
}

/// Reads and checks the whole store on a guarded thread (`integrity.rs`): a store written by
/// something else or a newer herald is refused, a damaged one is reported with what is wrong.
fn open_checked(
    path: &Path,
    cache_capacity: u64,
    timeout: Duration,
) -> Result<(sled::Db, integrity::Report)> {
    let (db, report, foreign) = scan(path, cache_capacity, timeout)?;
    let foreign_store = || JournalError::UnsupportedSchema {
        path: path.to_owned(),
        found: None,
        supported: SCHEMA_VERSION,
    };
    match report.schema_version.as_deref() {
        None if foreign => return Err(foreign_store()),
        Some(v) if v.parse::<u32>().is_ok_and(|n| n > SCHEMA_VERSION) => {
            return Err(JournalError::UnsupportedSchema {
                path: path.to_owned(),
                found: Some(v.to_owned()),
                supported: SCHEMA_VERSION,
            });
        }
        _ => {}
    }
    match db {
        Some(db) if report.intact() => Ok((db, report)),
        _ => Err(JournalError::Damaged {
            path: path.to_owned(),
            problems: report.summary(),
        }),
    }
}

/// Reads the whole store and the head record; the store is returned only when it could be read to
/// the end. Also tells whether the store looks like something herald did not write (keys of no
/// herald layout or trees of its own, and no head record).
fn scan(
    path: &Path,
    cache_capacity: u64,
    timeout: Duration,
) -> Result<(Option<sled::Db>, integrity::Report, bool)> {
    let record = head::read(path).map_err(|source| JournalError::HeadRecordFailed {
        path: head::path(path),
        source,
    })?;
    let mut checker = integrity::Checker::new(path);
    let ended = integrity::read_store(path, cache_capacity, timeout, integrity::CHUNK, |k, v| {
        checker.entry(k, v)
    });
    let (db, broken) = match ended {
        integrity::Ended::Done(db) => (Some(db), None),
        integrity::Ended::Broken(why) => (None, Some(why)),
        integrity::Ended::OpenFailed(JournalError::OpenFailed {
            source: source @ sled::Error::Corruption { .. },
            ..
        }) => (
            None,
            Some(format!(
                "sled found corrupted data recovering the store: {source}"
            )),
        ),
        integrity::Ended::OpenFailed(e) => return Err(e),
    };
    if let Some(db) = &db {
        checker.count_gathered(db);
    }
    let trees = db.as_ref().map_or(1, |db| db.tree_names().len());
    let foreign = record == head::Stored::Missing && (trees > 1 || checker.unknown_keys() > 0);
    Ok((db, checker.finish(broken, &record), foreign))
}

/// Makes the store's layout the current one: a new store gets the schema version and its head
/// record; a version-1 store (no head record) is upgraded by writing one; a version-2 to 6 store
/// needs nothing but the new version (its sinks have no acknowledged ranges yet, its streams no
/// first-sync markers, its events are single-event keys, which stay readable beside segments, its
/// values are plain, which stay readable beside compressed ones, its index updates are all in the
/// `i/` keys).
fn prepare_schema(db: &sled::Db, path: &Path, found: Option<&str>, head: u64) -> Result<()> {
    let meta_failed = |source| JournalError::MetaFailed {
        path: path.to_owned(),
        source,
    };
    let current = SCHEMA_VERSION.to_string();
    if found == Some(current.as_str()) {
        return Ok(());
    }
    // Versions 2 → 3 → 4 → 5 → 6 → 7 only add keys (`a/`, then `f/`, then segment `e/` keys,
    // then `u/` keys) or value forms (compressed values) an older store does not have: setting
    // the version is the whole upgrade. A version-3 store has no marker for a first sync a version-3
    // herald left half-way: that sync is finished as a relist, which reports what it had not
    // reached (as version 3 did), never less. Before version 2 there was no head record: the record first, so a crash
    // before the version is written leaves a store that opens as before (a version-1 store with a
    // valid record, or an empty one), never a current store without a record.
    if !matches!(found, Some("2" | "3" | "4" | "5" | "6")) {
        // What recovery found may sit in the OS cache only: it must be durable before a record
        // claims it, or a power cut would leave a record that leads the store.
        db.flush().map_err(meta_failed)?;
        head::create(path, head).map_err(|source| JournalError::HeadRecordFailed {
            path: head::path(path),
            source,
        })?;
    }
    db.insert(keys::SCHEMA_VERSION_KEY, current.as_bytes())
        .map_err(meta_failed)?;
    db.flush().map_err(meta_failed)?;
    if let Some(old) = found {
        tracing::info!(
            message = "Journal upgraded: it now keeps a head record, acknowledgements above the cursors, first-sync markers, event segments, compressed values and gathered index updates.",
            path = %path.display(),
            from = old,
            to = SCHEMA_VERSION,
            head
        );
    }
    Ok(())
}
