//! `herald journal salvage`: a damaged journal is moved aside (`<dir>.damaged-<time>`) and a new
//! one is built in its place from what can still be read. Entry point: [`salvage`].
//!
//! What is kept, and why it is safe:
//! - **Undelivered events** (after the slowest readable cursor) that decode. They get new sequence
//!   numbers above every number the old journal may have used (its head, its head record, its
//!   cursors), in their old order, so nothing ever reuses a number a dead letter or a replay still
//!   carries, and the new journal has no hole; each cursor moves to the same place among them.
//!   Events are kept one by one: a segment (schema 5) with an unreadable event keeps its readable
//!   ones, and the new journal holds each kept event under a single-event key (the schema-4 form,
//!   which schema 5 reads beside segments).
//! - **Cursors**, so each sink resumes where it was (at worst it gets an event again), and the
//!   readable **acknowledged ranges** above them (`a/`), renumbered with the events they cover.
//! - **Checkpoints**, only when nothing a sink still needed was lost (the store read to its end,
//!   no event missing or unreadable, the head record not ahead of the store): then watchers
//!   resume and nothing is relisted. Otherwise every checkpoint is dropped: the next start
//!   relists each resource and diffs it against the object index, and the differences are
//!   delivered as `resync` events.
//! - **The object index** (its readable entries), the base of that diff. When checkpoints are
//!   dropped, an entry whose state no readable event carries is marked *unconfirmed*
//!   ([`take_unconfirmed_mark`]): the event that recorded it may be among the lost ones, and an
//!   unmarked entry would make the relist see "no difference" and never send it. The relist sends
//!   a marked object that is still there as `created` (the id the lost event had, when it was a
//!   creation and nothing changed since), and one that is gone as `deleted`, as usual. Entries
//!   whose event was delivered and then trimmed by retention are marked too: a damaged journal
//!   cannot tell them apart, so they are sent again (at least once, never lost).
//! - **First-sync markers** (`f/`) that can be read: such a stream is in a first sync that skips
//!   the initial state and has reported nothing yet, so it continues silently. A damaged one is
//!   dropped: that stream's next start reports the differences (duplicates at worst, no loss).
//! - **Dead letters and replays** that can be read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::error::{JournalError, Result};
use super::head::{self, Stored};
use super::integrity::{self, Checker, Ended, Report};
use super::{SCHEMA_VERSION, files, keys};

/// The sled tree that holds the kept events under their old numbers until they are renumbered.
const STAGING_TREE: &[u8] = b"salvage-staging";

/// The key a salvage adds to an object-index entry that no readable event confirms. Not a valid
/// Kubernetes field name (`@`), so it never clashes with an object's own fields.
const UNCONFIRMED_MARK: &str = "@heraldUnconfirmed";

/// Removes the salvage's *unconfirmed* mark from an object-index entry; whether it was there. A
/// relist treats a marked entry as "its last change may never have been delivered".
pub fn take_unconfirmed_mark(object: &mut serde_json::Value) -> bool {
    object
        .as_object_mut()
        .and_then(|m| m.remove(UNCONFIRMED_MARK))
        .is_some()
}

/// `<uid>:<resourceVersion>` of an event's id (`<uid>:<rv>:<op>`).
fn event_state(v: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Id {
        id: String,
    }
    let id: Id = serde_json::from_slice(v).ok()?;
    id.id.rsplit_once(':').map(|(state, _)| state.to_owned())
}

/// `<uid>:<resourceVersion>` of an object-index entry.
fn object_state(object: &serde_json::Value) -> Option<String> {
    let meta = object.get("metadata")?;
    Some(format!(
        "{}:{}",
        meta.get("uid")?.as_str()?,
        meta.get("resourceVersion")?.as_str()?
    ))
}

/// What [`salvage`] did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Salvaged {
    /// The journal directory (now the rebuilt journal).
    pub path: PathBuf,
    /// Where the damaged journal was moved; `None` when it was intact and left alone.
    pub moved_to: Option<PathBuf>,
    /// The integrity report of the damaged journal.
    pub report: Report,
    /// The rebuilt journal's head.
    pub head: u64,
    /// Undelivered events kept (renumbered after the old head).
    pub events_kept: u64,
    /// Events dropped: unreadable, or delivered to every sink already.
    pub events_dropped: u64,
    /// Cursors kept, as renumbered.
    pub cursors: BTreeMap<String, u64>,
    /// Streams whose checkpoint was kept (their watch resumes).
    pub checkpoints_kept: Vec<String>,
    /// Streams whose checkpoint was dropped (their watch relists at the next start).
    pub checkpoints_dropped: Vec<String>,
    /// Object-index entries kept.
    pub index_entries_kept: u64,
    /// Of those, entries marked unconfirmed (no readable event carries their state): the next
    /// relist sends them again.
    pub index_entries_unconfirmed: u64,
    /// First-sync markers kept (streams whose skipping first sync continues at the next start).
    pub first_syncs_kept: u64,
    /// Dead letters kept.
    pub dead_letters_kept: u64,
    /// Replays kept.
    pub replays_kept: u64,
    /// Other entries that could not be read and were dropped.
    pub other_dropped: u64,
}

fn failed(path: &Path, reason: impl Into<String>) -> JournalError {
    JournalError::SalvageFailed {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

fn sled_failed(path: &Path) -> impl Fn(sled::Error) -> JournalError + '_ {
    move |e| failed(path, format!("writing the new journal failed: {e}"))
}

/// Salvages the journal in `dir` when it is damaged (or always, with `force`): reads what it can
/// (sled guarded as at open, `timeout` without progress at most), builds the new journal beside
/// it, then moves the damaged one to `<dir>.damaged-<UTC time>` and the new one to `dir`. An
/// intact journal is left alone unless `force`.
pub fn salvage(dir: &Path, timeout: Duration, force: bool) -> Result<Salvaged> {
    if !dir.is_dir() {
        return Err(JournalError::NotFound {
            path: dir.to_owned(),
        });
    }
    let lock = files::lock(dir)?;
    super::compact::recover(dir)?;
    let record = head::read(dir).map_err(|source| JournalError::HeadRecordFailed {
        path: head::path(dir),
        source,
    })?;
    let stamp = jiff::Timestamp::now()
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string();
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "journal".to_owned());
    let staging = dir.with_file_name(format!("{name}.salvage-{stamp}"));
    let moved_to = dir.with_file_name(format!("{name}.damaged-{stamp}"));
    if staging.exists() || moved_to.exists() {
        return Err(failed(
            dir,
            format!("{} already exists", moved_to.display()),
        ));
    }
    let mut out = match rebuild(dir, &staging, timeout, force, &record) {
        Ok(out) => out,
        Err(e) => {
            // Nothing was moved yet: the damaged journal is untouched.
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
    };
    if out.report.intact() && !force {
        let _ = std::fs::remove_dir_all(&staging);
        return Ok(out);
    }
    let next = out.head;
    if let Err(e) = std::fs::rename(dir, &moved_to) {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(failed(
            dir,
            format!("moving it to {} failed: {e}", moved_to.display()),
        ));
    }
    drop(lock);
    std::fs::rename(&staging, dir).map_err(|e| {
        failed(
            dir,
            format!(
                "moving the new journal {} into place failed: {e} (the damaged one is at {})",
                staging.display(),
                moved_to.display()
            ),
        )
    })?;
    tracing::info!(
        message = "Journal salvaged.",
        path = %dir.display(),
        moved_to = %moved_to.display(),
        head = next,
        events_kept = out.events_kept,
        checkpoints_dropped = out.checkpoints_dropped.len()
    );
    out.moved_to = Some(moved_to);
    Ok(out)
}

/// Reads the journal in `dir` and writes the new one into `staging`; moves nothing.
/// Marks every object-index entry in `new` whose state is not in `confirmed`; how many.
fn mark_unconfirmed(
    new: &sled::Db,
    confirmed: &std::collections::HashSet<String>,
) -> std::result::Result<u64, sled::Error> {
    let mut marked = 0;
    for item in new.scan_prefix(keys::INDEX_PREFIX) {
        let (k, v) = item?;
        let Ok(stored) = keys::index_object(&k, &v) else {
            continue;
        };
        let Ok(mut object) = serde_json::from_slice::<serde_json::Value>(&stored) else {
            continue;
        };
        if object_state(&object).is_some_and(|s| confirmed.contains(&s)) {
            continue;
        }
        if let Some(m) = object.as_object_mut() {
            m.insert(UNCONFIRMED_MARK.to_owned(), serde_json::Value::Bool(true));
            // Stored plain: schema 6 reads both forms, and salvage is no hot path.
            if let Ok(bytes) = serde_json::to_vec(&object) {
                new.insert(k, bytes)?;
                marked += 1;
            }
        }
    }
    Ok(marked)
}

fn rebuild(
    dir: &Path,
    staging: &Path,
    timeout: Duration,
    force: bool,
    record: &Stored,
) -> Result<Salvaged> {
    files::private_dir(staging)?;
    let new = super::open_sled(staging, 64 * 1024 * 1024)?;
    let staged = new.open_tree(STAGING_TREE).map_err(sled_failed(dir))?;

    let mut out = Salvaged {
        path: dir.to_owned(),
        moved_to: None,
        report: Report::default(),
        head: 0,
        events_kept: 0,
        events_dropped: 0,
        cursors: BTreeMap::new(),
        checkpoints_kept: Vec::new(),
        checkpoints_dropped: Vec::new(),
        index_entries_kept: 0,
        index_entries_unconfirmed: 0,
        first_syncs_kept: 0,
        dead_letters_kept: 0,
        replays_kept: 0,
        other_dropped: 0,
    };
    let mut checkpoints: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut cursors: BTreeMap<String, u64> = BTreeMap::new();
    let mut acked: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    let mut write_error: Option<sled::Error> = None;
    let mut index_updates_dropped = false;
    // The object states some readable event carries (kept, or delivered to every sink).
    let mut confirmed: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut checker = Checker::new(dir);
    let ended = integrity::read_store(dir, 64 * 1024 * 1024, timeout, 1, |k, v| {
        checker.entry(k, v);
        let kept = if k.starts_with(keys::EVENT_PREFIX) {
            // Staged one event a key, either form: a segment with an unreadable event keeps the
            // others, and the renumbering below needs no segment boundaries.
            let stored =
                keys::event_span(k).map_or(1, |(first, last)| (last - first).saturating_add(1));
            let plain = keys::plain_events(k, v);
            let (at, readable) = plain
                .as_deref()
                .ok()
                .and_then(|p| integrity::readable_events(k, p))
                .unwrap_or_default();
            out.events_dropped += stored - readable.len() as u64;
            let mut staging = Ok(!readable.is_empty());
            for (seq, payload) in readable {
                if let Some(state) = event_state(payload) {
                    confirmed.insert(state);
                }
                if let Err(e) = staged.insert(keys::event(seq), keys::event_value(at, payload)) {
                    staging = Err(e);
                    break;
                }
            }
            staging
        } else if let Some(rest) = k.strip_prefix(keys::INDEX_PREFIX) {
            let readable = integrity::index_key_readable(rest)
                && keys::index_object(k, v).is_ok_and(|object| integrity::is_json(&object));
            if readable {
                out.index_entries_kept += 1;
                new.insert(k, v).map(|_| true)
            } else {
                out.other_dropped += 1;
                Ok(false)
            }
        } else if k.starts_with(keys::UPDATES_PREFIX) {
            // Read after every `i/` key (key order) and newer than them: applied over them, as a
            // fold would. An unreadable entry leaves the index older than the checkpoints say,
            // so they are dropped (below): the next start relists and reports the differences.
            if let Some(updates) = integrity::readable_updates(k, v) {
                let mut applied = Ok(true);
                for (key, value) in updates {
                    let done = match value {
                        Some(value) => new.insert(key, value).map(|_| ()),
                        None => new.remove(key).map(|_| ()),
                    };
                    if let Err(e) = done {
                        applied = Err(e);
                        break;
                    }
                }
                applied
            } else {
                out.other_dropped += 1;
                index_updates_dropped = true;
                Ok(false)
            }
        } else if let Some(stream) = k.strip_prefix(keys::CHECKPOINT_PREFIX) {
            if std::str::from_utf8(stream).is_ok() && std::str::from_utf8(v).is_ok() {
                checkpoints.insert(k.to_vec(), v.to_vec());
            } else {
                out.other_dropped += 1;
            }
            Ok(true)
        } else if let Some(stream) = k.strip_prefix(keys::FIRST_SYNC_PREFIX) {
            // Kept as it is: the stream never reported anything (a skipping first sync appends
            // no event before its checkpoint), so no lost event is its. One that cannot be read
            // is dropped: that stream's next start reports what it finds (again, at worst).
            if keys::first_sync_readable(stream, v) {
                out.first_syncs_kept += 1;
                new.insert(k, v).map(|_| true)
            } else {
                out.other_dropped += 1;
                Ok(false)
            }
        } else if let Some(sink) = k.strip_prefix(keys::CURSOR_PREFIX) {
            match (std::str::from_utf8(sink), keys::decode_u64(k, v)) {
                (Ok(sink), Ok(c)) if !sink.is_empty() => {
                    cursors.insert(sink.to_owned(), c);
                }
                _ => out.other_dropped += 1,
            }
            Ok(true)
        } else if let Some(sink) = k.strip_prefix(keys::ACKED_PREFIX) {
            match (std::str::from_utf8(sink), keys::decode_ranges(k, v)) {
                (Ok(sink), Ok(ranges)) if !sink.is_empty() => {
                    acked.insert(sink.to_owned(), ranges);
                }
                _ => out.other_dropped += 1,
            }
            Ok(true)
        } else if k.starts_with(keys::DEAD_PREFIX) || k.starts_with(keys::REPLAY_PREFIX) {
            if keys::queue_key_is_valid(k) {
                if k.starts_with(keys::DEAD_PREFIX) {
                    out.dead_letters_kept += 1;
                } else {
                    out.replays_kept += 1;
                }
                new.insert(k, v).map(|_| true)
            } else {
                out.other_dropped += 1;
                Ok(false)
            }
        } else {
            if k != keys::SCHEMA_VERSION_KEY && k != keys::HEAD_KEY {
                out.other_dropped += 1;
            }
            Ok(true)
        };
        match kept {
            Ok(_) => true,
            Err(e) => {
                write_error = Some(e);
                false
            }
        }
    });
    if let Some(e) = write_error {
        return Err(sled_failed(dir)(e));
    }
    let broken = match ended {
        Ended::Done(old) => {
            checker.count_gathered(&old);
            drop(old);
            None
        }
        Ended::Broken(why) => Some(why),
        Ended::OpenFailed(JournalError::OpenFailed { source, .. }) => {
            Some(format!("sled could not open the store: {source}"))
        }
        Ended::OpenFailed(e) => return Err(e),
    };
    let foreign = *record == Stored::Missing && checker.unknown_keys() > 0;
    let report = checker.finish(broken, record);
    let events_lost = report.events_lost;
    let newer = report
        .schema_version
        .as_deref()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|v| *v > SCHEMA_VERSION);
    if newer.is_some() || (foreign && report.schema_version.is_none()) {
        // Not ours to rebuild: a newer herald's layout, or something herald did not write.
        return Err(JournalError::UnsupportedSchema {
            path: dir.to_owned(),
            found: report.schema_version,
            supported: SCHEMA_VERSION,
        });
    }
    if report.intact() && !force {
        out.head = report.head;
        out.report = report;
        return Ok(out);
    }

    // New numbers start above anything the old journal may have handed out.
    let recorded = match record {
        Stored::Head(h) => *h,
        _ => 0,
    };
    let base = report
        .head
        .max(recorded)
        .max(cursors.values().copied().max().unwrap_or(0));
    let slowest = cursors.values().copied().min();
    let mut renumbered: Vec<u64> = Vec::new();
    let mut next = base;
    for item in staged.iter() {
        let (k, v) = item.map_err(sled_failed(dir))?;
        let (old, _) = keys::event_span(&k)?;
        if slowest.is_some_and(|s| old <= s) {
            // Every sink has it already; it was only kept for replay.
            out.events_dropped += 1;
            continue;
        }
        next += 1;
        new.insert(keys::event(next), v).map_err(sled_failed(dir))?;
        renumbered.push(old);
    }
    drop(staged);
    new.drop_tree(STAGING_TREE).map_err(sled_failed(dir))?;
    out.events_kept = renumbered.len() as u64;
    out.head = next;
    for (sink, old) in cursors {
        let passed = renumbered.partition_point(|s| *s <= old) as u64;
        let cursor = base + passed;
        new.insert(keys::cursor(&sink), &cursor.to_be_bytes()[..])
            .map_err(sled_failed(dir))?;
        // The kept events are numbered base + 1, base + 2… in their old order, so an old range
        // maps onto a contiguous run of new numbers (possibly empty).
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for (first, last) in acked.remove(&sink).unwrap_or_default() {
            let from = renumbered.partition_point(|s| *s < first) as u64;
            let to = renumbered.partition_point(|s| *s <= last) as u64;
            if to <= from || base + to <= cursor {
                continue;
            }
            let range = ((base + from + 1).max(cursor + 1), base + to);
            match ranges.last_mut() {
                Some(prev) if prev.1 + 1 >= range.0 => prev.1 = prev.1.max(range.1),
                _ => ranges.push(range),
            }
        }
        if !ranges.is_empty() {
            new.insert(keys::acked(&sink), keys::encode_ranges(&ranges))
                .map_err(sled_failed(dir))?;
        }
        out.cursors.insert(sink, cursor);
    }
    let keep_checkpoints = report.complete && !events_lost && !index_updates_dropped;
    if !keep_checkpoints {
        out.index_entries_unconfirmed =
            mark_unconfirmed(&new, &confirmed).map_err(sled_failed(dir))?;
    }
    for (k, v) in checkpoints {
        let stream = keys::printable(&k[keys::CHECKPOINT_PREFIX.len()..]);
        if keep_checkpoints {
            new.insert(k, v).map_err(sled_failed(dir))?;
            out.checkpoints_kept.push(stream);
        } else {
            out.checkpoints_dropped.push(stream);
        }
    }
    new.insert(keys::HEAD_KEY, &next.to_be_bytes()[..])
        .map_err(sled_failed(dir))?;
    head::create(staging, next).map_err(|source| JournalError::HeadRecordFailed {
        path: head::path(staging),
        source,
    })?;
    new.insert(
        keys::SCHEMA_VERSION_KEY,
        SCHEMA_VERSION.to_string().as_bytes(),
    )
    .map_err(sled_failed(dir))?;
    new.flush().map_err(sled_failed(dir))?;
    drop(new);
    files::restrict_tree(staging)?;
    out.report = report;
    Ok(out)
}
