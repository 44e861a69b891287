//! `herald journal compact`: sled never gives disk space back, so a journal that once held a burst
//! keeps its files at that high-water mark after retention dropped the events. Compaction copies
//! every live entry into a fresh store and swaps it in. Entry points: [`compact`] (the command,
//! and [`Journal::open`](super::Journal::open) at start when the files are far larger than what
//! they hold, see [`worth_compacting`]) and [`recover`] (every open finishes or discards a swap
//! that a crash interrupted).
//!
//! # The swap, crash-safe inside the journal directory
//! The journal directory is often a volume's mount point, which cannot be renamed; so the swap
//! moves sled's files (`db`, `conf`, `blobs/`, `snap.*`) and the head record (`herald.head`)
//! inside it, under the journal's lock (`herald.lock` never moves), in steps a crash can stop
//! anywhere:
//! 1. the new store is built in `compact.new/`, flushed, compared entry by entry with the old
//!    one and checked like any journal at open; a crash here leaves `compact.new/` behind, which
//!    the next open deletes: the old journal is untouched;
//! 2. the marker `compact.swap` is written (and synced): from now on the new store is the journal;
//! 3. the old files move into `compact.old/`;
//! 4. the marker is renamed `compact.install`;
//! 5. the new files move from `compact.new/` into the directory;
//! 6. `compact.new/` and the marker are removed, then `compact.old/`.
//!
//! [`recover`] repeats what a marker says is unfinished: with `compact.swap`, steps 3 to 6, with
//! `compact.install`, steps 5 and 6; every step is a set of renames that can be repeated. A
//! `compact.swap` without a complete `compact.new/` (a marker that reached disk although writing
//! it failed) is dropped and the live store kept; `compact.old/` goes only once `db` is back. Without
//! a marker it deletes `compact.new/` (an unfinished build) and `compact.old/` (a finished swap).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::error::{JournalError, Result};
use super::head::{self, Stored};
use super::integrity::{self, Checker, Ended, Report};
use super::{JournalConfig, files};

/// Where the new store is built.
const NEW_DIR: &str = "compact.new";
/// Where the old store's files wait until the swap is done.
const OLD_DIR: &str = "compact.old";
/// Marker: the new store is complete; the old files are being moved out.
const SWAP_MARKER: &str = "compact.swap";
/// Marker: the old files are out; the new ones are being moved in.
const INSTALL_MARKER: &str = "compact.install";

/// Entries per sled batch while copying.
const COPY_CHUNK: usize = 1_024;

/// Entries between two progress lines.
const PROGRESS_EVERY: u64 = 50_000;

/// The start-time compaction's floor: a journal below this size on disk is left alone.
pub const AUTO_FLOOR_BYTES: u64 = 64 * 1024 * 1024;

/// The start-time compaction's ratio: the files must take this many times the bytes of the
/// entries they hold (keys and values).
pub const AUTO_RATIO: u64 = 8;

/// Test hook: the name of a step (`copied`, `marked`, `moving-old`, `moved-old`, `installing`,
/// `moving-new`, `installed`) at which compaction stops the process, as a crash would.
const CRASH_ENV: &str = "HERALD_TEST_COMPACT_CRASH_AT";

/// What [`compact`] did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Compacted {
    /// The journal directory.
    pub path: PathBuf,
    /// Bytes the journal's store (sled's files and the head record) took on disk before; other
    /// files in the directory do not count.
    pub bytes_before: u64,
    /// Bytes it takes now.
    pub bytes_after: u64,
    /// Bytes of the entries the journal holds (keys and values).
    pub live_bytes: u64,
    /// Events kept (every stored event: compaction drops nothing).
    pub events_kept: u64,
    /// Entries copied (events, index, checkpoints, cursors, dead letters, replays, metadata).
    pub entries: u64,
    /// Bytes on disk per kept event after compaction (`None` without events).
    pub bytes_per_event: Option<u64>,
    /// Seconds the compaction took.
    pub seconds: f64,
    /// The journal's head, unchanged.
    pub head: u64,
}

/// What a [`recover`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovered {
    /// No compaction was interrupted.
    Nothing,
    /// A compaction stopped before its swap: its unfinished copy was deleted; the journal is the
    /// old one.
    Discarded,
    /// A compaction stopped during its swap: the swap was finished; the journal is the new one.
    Finished,
}

fn failed(dir: &Path, reason: impl Into<String>) -> JournalError {
    JournalError::CompactFailed {
        path: dir.to_owned(),
        reason: reason.into(),
    }
}

fn io_failed<'a>(dir: &'a Path, what: &'a str) -> impl Fn(io::Error) -> JournalError + 'a {
    move |e| failed(dir, format!("{what}: {e}"))
}

/// Stops the process at `step`, as a crash would (no destructor runs), when the test hook names
/// it; exit code 86 tells the test it was the hook.
fn crash_point(step: &str) {
    if std::env::var_os(CRASH_ENV).is_some_and(|v| v == step) {
        std::process::exit(86);
    }
}

/// Whether a directory entry is part of the sled store or the head record (what the swap moves);
/// the lock file, the embedded cluster's state and compaction's own names stay.
fn is_store_entry(name: &str) -> bool {
    matches!(name, "db" | "conf" | "blobs" | head::FILE) || name.starts_with("snap.")
}

/// Bytes the journal's own store takes on disk in `dir`: what [`is_store_entry`] matches, so
/// neighbours such as the embedded cluster's `changes.jsonl` neither trigger nor count.
pub(super) fn store_bytes(dir: &Path) -> io::Result<u64> {
    let mut total = 0u64;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if !is_store_entry(&entry.file_name().to_string_lossy()) {
            continue;
        }
        let meta = entry.metadata()?;
        let bytes = if meta.is_dir() {
            files::allocated_bytes(&entry.path())?
        } else {
            files::file_bytes(&meta)
        };
        total = total.saturating_add(bytes);
    }
    Ok(total)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Syncs every file under `dir`, then every directory (the deepest first, `dir` last), so a
/// crash after it returns finds the tree's contents and names on disk.
fn sync_tree(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            sync_tree(&entry.path())?;
        } else {
            File::open(entry.path())?.sync_all()?;
        }
    }
    sync_dir(dir)
}

/// Moves every store entry of `from` into `to` (created when missing); repeatable.
fn move_entries(from: &Path, to: &Path, crash_after_first: &str) -> io::Result<()> {
    fs::create_dir_all(to)?;
    let mut moved = false;
    let mut names: Vec<String> = Vec::new();
    for entry in fs::read_dir(from)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if is_store_entry(&name) {
            names.push(name);
        }
    }
    names.sort();
    for name in names {
        fs::rename(from.join(&name), to.join(&name))?;
        if !moved {
            moved = true;
            crash_point(crash_after_first);
        }
    }
    sync_dir(to)?;
    sync_dir(from)
}

fn remove_dir_if_there(dir: &Path) -> io::Result<bool> {
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether `compact.new/` holds a store to install: its `db`, and the head record when the live
/// store has one (the copy is written before the marker, so a marker without them is stray).
fn staged_complete(dir: &Path) -> bool {
    let (new, old) = (dir.join(NEW_DIR), dir.join(OLD_DIR));
    let had_head = head::path(dir).exists() || head::path(&old).exists();
    new.join("db").is_file() && (!had_head || head::path(&new).is_file())
}

/// Steps 3 to 6 from `compact.swap`, or 5 and 6 from `compact.install`. A `compact.swap` without
/// a complete copy to install is dropped and the live store kept; `compact.old/` goes only once a
/// store is in place. Returns whether a swap was finished (`false`: a stray marker was dropped).
fn finish_swap(dir: &Path) -> io::Result<bool> {
    let (new, old) = (dir.join(NEW_DIR), dir.join(OLD_DIR));
    if dir.join(SWAP_MARKER).exists() && !staged_complete(dir) {
        // Whatever of the live store already moved out goes back before the marker goes.
        if old.is_dir() {
            move_entries(&old, dir, "")?;
        }
        fs::remove_file(dir.join(SWAP_MARKER))?;
        sync_dir(dir)?;
        remove_dir_if_there(&new)?;
        if dir.join("db").is_file() {
            remove_dir_if_there(&old)?;
        }
        return Ok(false);
    }
    if dir.join(SWAP_MARKER).exists() {
        move_entries(dir, &old, "moving-old")?;
        crash_point("moved-old");
        fs::rename(dir.join(SWAP_MARKER), dir.join(INSTALL_MARKER))?;
        sync_dir(dir)?;
        crash_point("installing");
    }
    if dir.join(INSTALL_MARKER).exists() {
        if new.exists() {
            move_entries(&new, dir, "moving-new")?;
        }
        crash_point("installed");
        remove_dir_if_there(&new)?;
        fs::remove_file(dir.join(INSTALL_MARKER))?;
        sync_dir(dir)?;
    }
    if dir.join("db").is_file() {
        remove_dir_if_there(&old)?;
    }
    Ok(true)
}

/// Finishes or discards a compaction that a crash interrupted in the journal at `dir` (see the
/// module doc). The caller holds the journal's lock.
pub(super) fn recover(dir: &Path) -> Result<Recovered> {
    let marked = dir.join(SWAP_MARKER).exists() || dir.join(INSTALL_MARKER).exists();
    if marked {
        let finished =
            finish_swap(dir).map_err(io_failed(dir, "finishing an interrupted compaction"))?;
        if !finished {
            tracing::warn!(
                message = "Found a journal compaction's swap marker without a complete compacted store; dropped it and kept the journal as it is.",
                path = %dir.display()
            );
            return Ok(Recovered::Discarded);
        }
        tracing::info!(
            message = "Finished a journal compaction that was interrupted during its swap; the journal is the compacted one.",
            path = %dir.display()
        );
        return Ok(Recovered::Finished);
    }
    let discarded = remove_dir_if_there(&dir.join(NEW_DIR))
        .map_err(io_failed(dir, "deleting an unfinished compaction"))?;
    if dir.join("db").is_file() {
        remove_dir_if_there(&dir.join(OLD_DIR))
            .map_err(io_failed(dir, "deleting a compacted journal's old files"))?;
    }
    if discarded {
        tracing::info!(
            message = "Deleted the copy of a journal compaction that was interrupted before its swap; the journal is unchanged.",
            path = %dir.display()
        );
        return Ok(Recovered::Discarded);
    }
    Ok(Recovered::Nothing)
}

/// Whether the start-time compaction is worth it for a journal taking `disk` bytes that holds
/// `live` bytes of entries: at least `floor` ([`AUTO_FLOOR_BYTES`] in `herald run`) and more than
/// [`AUTO_RATIO`] times the live bytes.
pub fn worth_compacting(disk: u64, live: u64, floor: u64) -> bool {
    disk >= floor && disk / AUTO_RATIO > live
}

/// Compacts the journal in `dir` of a stopped herald: copies every entry into a fresh store,
/// checks the copy, then swaps it in (see the module doc). Takes the journal's lock, so it fails
/// with [`JournalError::AlreadyOpen`] while a herald runs on it; a damaged journal is refused
/// (salvage it). `progress` gets a line now and then.
pub fn compact(dir: &Path, timeout: Duration, progress: &mut dyn FnMut(&str)) -> Result<Compacted> {
    if !dir.is_dir() {
        return Err(JournalError::NotFound {
            path: dir.to_owned(),
        });
    }
    let _lock = files::lock(dir)?;
    recover(dir)?;
    compact_locked(dir, timeout, progress)
}

/// [`compact`] for a caller that holds the lock and has run [`recover`].
pub(super) fn compact_locked(
    dir: &Path,
    timeout: Duration,
    progress: &mut dyn FnMut(&str),
) -> Result<Compacted> {
    let started = Instant::now();
    let bytes_before = store_bytes(dir).map_err(io_failed(dir, "measuring the journal"))?;
    let staging = dir.join(NEW_DIR);
    let built = build(dir, &staging, timeout, progress);
    let (report, entries) = match built {
        Ok(built) => built,
        Err(e) => {
            // Nothing was moved: the journal is untouched.
            let _ = fs::remove_dir_all(&staging);
            return Err(e);
        }
    };
    crash_point("copied");
    progress("copy checked; swapping it in");
    let marker = dir.join(SWAP_MARKER);
    let mark = || -> io::Result<()> {
        let mut opts = OpenOptions::new();
        opts.create(true).truncate(true).write(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut file = opts.open(&marker)?;
        file.write_all(b"herald journal compaction: the store in compact.new is complete\n")?;
        file.sync_all()?;
        sync_dir(dir)
    };
    if let Err(e) = mark() {
        // The marker may have reached disk: only once it is gone for sure may the copy go, else
        // a surviving marker would find no store to install (the next open finishes the swap).
        let unmarked = match fs::remove_file(&marker) {
            Ok(()) => true,
            Err(e) => e.kind() == io::ErrorKind::NotFound,
        } && sync_dir(dir).is_ok();
        if unmarked {
            let _ = fs::remove_dir_all(&staging);
        }
        return Err(failed(dir, format!("writing {SWAP_MARKER}: {e}")));
    }
    crash_point("marked");
    // Past the marker the new store is the journal: a failure here is finished by the next open.
    let finished = finish_swap(dir).map_err(|e| {
        failed(
            dir,
            format!(
                "swapping the compacted store in: {e} (the next open of the journal finishes it)"
            ),
        )
    })?;
    if !finished {
        return Err(failed(
            dir,
            "the compacted store was gone before its swap; the journal is unchanged",
        ));
    }
    let bytes_after = store_bytes(dir).map_err(io_failed(dir, "measuring the journal"))?;
    let out = Compacted {
        path: dir.to_owned(),
        bytes_before,
        bytes_after,
        live_bytes: report.live_bytes,
        events_kept: report.events,
        entries,
        bytes_per_event: bytes_after.checked_div(report.events),
        seconds: started.elapsed().as_secs_f64(),
        head: report.head,
    };
    tracing::info!(
        message = "Journal compacted.",
        path = %dir.display(),
        bytes_before,
        bytes_after,
        events = report.events,
        seconds = out.seconds
    );
    Ok(out)
}

/// Copies the journal in `dir` into a new store at `staging` and checks the copy: the same
/// entries byte for byte, and an intact journal at the integrity scan. Returns the old journal's
/// report and the entries copied.
fn build(
    dir: &Path,
    staging: &Path,
    timeout: Duration,
    progress: &mut dyn FnMut(&str),
) -> Result<(Report, u64)> {
    let record = head::read(dir).map_err(|source| JournalError::HeadRecordFailed {
        path: head::path(dir),
        source,
    })?;
    let _ = fs::remove_dir_all(staging);
    files::private_dir(staging)?;
    let cache = JournalConfig::new(dir).cache_capacity;
    let new = super::open_sled(staging, cache)?;
    let mut checker = Checker::new(dir);
    let mut chunk = sled::Batch::default();
    let mut in_chunk = 0usize;
    let mut entries = 0u64;
    let mut write_error: Option<sled::Error> = None;
    let ended = integrity::read_store(dir, cache, timeout, integrity::CHUNK, |k, v| {
        checker.entry(k, v);
        chunk.insert(k, v);
        in_chunk += 1;
        entries += 1;
        if in_chunk == COPY_CHUNK {
            in_chunk = 0;
            if let Err(e) = new.apply_batch(std::mem::take(&mut chunk)) {
                write_error = Some(e);
                return false;
            }
        }
        if entries.is_multiple_of(PROGRESS_EVERY) {
            progress(&format!("copied {entries} entries"));
        }
        true
    });
    let write = |e: sled::Error| failed(dir, format!("writing the compacted store: {e}"));
    if let Some(e) = write_error {
        return Err(write(e));
    }
    let (old, broken) = match ended {
        Ended::Done(db) => {
            // As `scan` counts the copy: the index as the `u/` keys' fold will leave it.
            checker.count_gathered(&db);
            (Some(db), None)
        }
        Ended::Broken(why) => (None, Some(why)),
        Ended::OpenFailed(e) => return Err(e),
    };
    let foreign = record == Stored::Missing
        && (checker.unknown_keys() > 0 || old.as_ref().is_some_and(|db| db.tree_names().len() > 1));
    let report = checker.finish(broken, &record);
    let Some(old) = old.filter(|_| report.intact() && !foreign) else {
        return Err(failed(
            dir,
            format!(
                "it is damaged or not a herald journal ({}); `herald journal verify --journal {}` reports it, `herald journal salvage` rebuilds a damaged one",
                if report.intact() {
                    "keys of no herald layout".to_owned()
                } else {
                    report.summary()
                },
                dir.display()
            ),
        ));
    };
    new.apply_batch(chunk).map_err(write)?;
    new.flush().map_err(write)?;
    progress(&format!("copied {entries} entries; comparing the copy"));

    // Entry by entry: the copy holds exactly what the journal held.
    let mut a = old.iter();
    let mut b = new.iter();
    let mut compared = 0u64;
    loop {
        let read = |e: sled::Error| failed(dir, format!("reading back the compacted store: {e}"));
        match (
            a.next().transpose().map_err(read)?,
            b.next().transpose().map_err(read)?,
        ) {
            (None, None) => break,
            (Some((ka, va)), Some((kb, vb))) if ka == kb && va == vb => compared += 1,
            (x, y) => {
                let name = |e: &Option<(sled::IVec, sled::IVec)>| {
                    e.as_ref()
                        .map_or_else(|| "nothing".to_owned(), |(k, _)| super::keys::printable(k))
                };
                return Err(failed(
                    dir,
                    format!(
                        "the copy differs from the journal after {compared} entries ({} against {})",
                        name(&x),
                        name(&y)
                    ),
                ));
            }
        }
    }
    drop((a, b));
    drop(old);
    drop(new);
    // The head record goes with the store it describes, as it was (a lower bound of the head).
    match fs::read(head::path(dir)) {
        Ok(bytes) => {
            fs::write(head::path(staging), bytes)
                .and_then(|()| File::open(head::path(staging))?.sync_all())
                .map_err(io_failed(dir, "copying the head record"))?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_failed(dir, "reading the head record")(e)),
    }
    files::restrict_tree(staging)?;
    // sled's flush syncs only `db`: large values sit in `blobs/` and its `conf` unsynced. The
    // marker makes this copy the journal, so every byte of it must be on disk before.
    sync_tree(staging).map_err(io_failed(dir, "syncing the compacted store"))?;

    // And it opens as an intact journal with the same contents.
    let (db, check, _) = super::scan(staging, cache, timeout)?;
    drop(db);
    let same = check.intact()
        && check.events == report.events
        && check.head == report.head
        && check.first_event == report.first_event
        && check.cursors == report.cursors
        && check.checkpoints == report.checkpoints
        && check.skipping_first_syncs == report.skipping_first_syncs
        && check.acked_above_cursor == report.acked_above_cursor
        && check.index_entries == report.index_entries
        && check.dead_letters == report.dead_letters
        && check.replays == report.replays
        && check.live_bytes == report.live_bytes;
    if !same {
        return Err(failed(
            dir,
            format!(
                "the compacted store does not check out ({}); the journal is unchanged",
                if check.intact() {
                    "its counts differ".to_owned()
                } else {
                    check.summary()
                }
            ),
        ));
    }
    Ok((report, entries))
}

#[cfg(test)]
mod tests;
