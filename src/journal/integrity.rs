//! Opening a possibly damaged store without trusting it: sled runs on a thread of its own (a panic
//! in its recovery or its iterators is contained there, and a spin cannot hold herald), every key
//! is walked and checked against the layout of `keys.rs`, and the result is a [`Report`].
//!
//! sled 0.34 reacts to a truncated or damaged data file in three ways, all seen here: it panics
//! (`segment.rs`/`serialization.rs` index out of bounds), its iterator loops for ever, or its
//! recovery silently rolls back to an earlier consistent state. The thread answers the first two;
//! the head record (`head.rs`) answers the third.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use serde::Serialize;

use super::error::JournalError;
use super::head::Stored;
use super::{SCHEMA_VERSION, keys, updates};

/// Problems listed one by one in a report; the rest are counted.
const MAX_LISTED: usize = 20;

/// Entries in flight between the sled thread and the checker.
const CHANNEL: usize = 1_024;

/// Entries handed over per message where losing the last few read before a stall costs nothing
/// but a report's counts (opening and compacting: either refuses a store that stalls; `verify`'s
/// counts of such a store stop up to 63 entries short). One per message took the reader thread's
/// hand-offs to about a tenth of a restart's samples at 100,000 objects (docs/operations.md, "A
/// restart's check at 100,000 objects (round 9)"). Salvage reads one per message: each entry read
/// before a stall is one it can save.
pub(super) const CHUNK: usize = 64;

/// What the integrity scan found in a journal.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The journal directory.
    pub path: PathBuf,
    /// `meta/schema_version` as stored (`None`: absent).
    pub schema_version: Option<String>,
    /// The last assigned sequence number the store knows (its `meta/head` or its last event).
    pub head: u64,
    /// What `herald.head` says was durable (`None`: no readable record).
    pub head_record: Option<u64>,
    /// Events stored (delivered ones kept by `retain` included).
    pub events: u64,
    /// The first stored event's sequence number.
    pub first_event: Option<u64>,
    /// The last stored event's sequence number.
    pub last_event: Option<u64>,
    /// Sink cursors: the last sequence number each sink has passed.
    pub cursors: BTreeMap<String, u64>,
    /// Events acknowledged above each sink's cursor (schema 3: delivered while an earlier one was
    /// still pending); a restart does not send them again.
    pub acked_above_cursor: BTreeMap<String, u64>,
    /// Watch checkpoints (resourceVersions) per stream.
    pub checkpoints: BTreeMap<String, String>,
    /// Streams whose first sync is under way and skips the initial state (schema 4: their
    /// first-sync marker, `f/`): the next start continues it silently.
    pub skipping_first_syncs: Vec<String>,
    /// Entries of the object index (all streams), as the fold of the `index_updates` leaves it.
    pub index_entries: u64,
    /// Appends' index updates not yet folded into those entries (schema 7, `u/` keys: what a
    /// crash left; the next open folds them).
    pub index_updates: u64,
    /// Dead letters (all sinks).
    pub dead_letters: u64,
    /// Queued replays (all sinks).
    pub replays: u64,
    /// Bytes of the entries read (keys and values): what a compacted store holds.
    pub live_bytes: u64,
    /// Bytes the journal directory takes on disk (set by `herald journal verify`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<u64>,
    /// Whether every key of the store could be read.
    pub complete: bool,
    /// What is wrong; empty when the journal is intact.
    pub problems: Vec<String>,
    /// Whether events a sink still needed are gone or unreadable (salvage then drops checkpoints).
    #[serde(skip)]
    pub(super) events_lost: bool,
}

impl Report {
    /// No problem found.
    pub fn intact(&self) -> bool {
        self.problems.is_empty()
    }

    pub(super) fn problem(&mut self, what: String) {
        self.problems.push(what);
    }

    /// The first problems and how many more, for one error line.
    pub(super) fn summary(&self) -> String {
        let shown: Vec<&str> = self.problems.iter().take(3).map(String::as_str).collect();
        let mut s = shown.join("; ");
        if self.problems.len() > 3 {
            s.push_str(&format!(" (and {} more)", self.problems.len() - 3));
        }
        s
    }
}

/// How reading the store ended.
pub(super) enum Ended {
    /// Every key was read; the store is open.
    Done(sled::Db),
    /// sled could not open the store (not damage: a lock, a permission…).
    OpenFailed(JournalError),
    /// Reading stopped: the reason (a panic, an error, a stall, keys out of order).
    Broken(String),
}

enum Msg {
    Opened,
    Entries(Vec<(sled::IVec, sled::IVec)>),
    Done(sled::Db),
    OpenFailed(JournalError),
    Failed(String),
}

/// The name of the thread that reads the store; its panics are reported as damage, not printed.
const READER_THREAD: &str = "journal-open";

thread_local! {
    /// Where the reader thread's last panic happened (set by the hook, read after the unwind).
    static PANIC_AT: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Keeps sled's panics on the reader thread out of stderr (they become a damage report that names
/// the path and the way out; the location is kept in it); every other panic goes to the hook
/// that was installed before.
fn quiet_reader_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some(READER_THREAD) {
                let at = info
                    .location()
                    .map(|l| format!("{}:{}", l.file(), l.line()));
                PANIC_AT.with(|p| *p.borrow_mut() = at);
                return;
            }
            previous(info);
        }));
    });
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// Opens the store on a thread of its own and hands every entry, in key order, to `entry` (which
/// returns `false` to stop), `chunk` entries per message (at least one). The thread gets `timeout`
/// of silence at most, for sled's recovery and then between two messages: past that herald stops
/// waiting (the thread may spin on; it holds nothing herald needs, and it dies with the process).
/// Entries read into a message not yet sent when sled stalls or panics are not handed over.
pub(super) fn read_store(
    path: &Path,
    cache_capacity: u64,
    timeout: Duration,
    chunk: usize,
    mut entry: impl FnMut(&[u8], &[u8]) -> bool,
) -> Ended {
    let chunk = chunk.max(1);
    let (tx, rx) = mpsc::sync_channel::<Msg>((CHANNEL / chunk).max(1));
    let dir = path.to_owned();
    quiet_reader_panics();
    let spawned = std::thread::Builder::new()
        .name(READER_THREAD.to_owned())
        .spawn(move || {
            let read = catch_unwind(AssertUnwindSafe(|| {
                let db = match super::open_sled(&dir, cache_capacity) {
                    Ok(db) => db,
                    Err(e) => {
                        let _ = tx.send(Msg::OpenFailed(e));
                        return;
                    }
                };
                if tx.send(Msg::Opened).is_err() {
                    return;
                }
                let mut entries = Vec::with_capacity(chunk);
                for item in db.iter() {
                    match item {
                        Ok(kv) => entries.push(kv),
                        Err(e) => {
                            let read = Msg::Entries(std::mem::take(&mut entries));
                            let failed = format!("sled failed to read the store: {e}");
                            if tx.send(read).is_ok() {
                                let _ = tx.send(Msg::Failed(failed));
                            }
                            return;
                        }
                    }
                    if entries.len() >= chunk {
                        let full = std::mem::replace(&mut entries, Vec::with_capacity(chunk));
                        if tx.send(Msg::Entries(full)).is_err() {
                            return;
                        }
                    }
                }
                if !entries.is_empty() && tx.send(Msg::Entries(entries)).is_err() {
                    return;
                }
                let _ = tx.send(Msg::Done(db));
            }));
            if let Err(payload) = read {
                let at = PANIC_AT
                    .with(|p| p.borrow_mut().take())
                    .map(|at| format!(" (at {at})"))
                    .unwrap_or_default();
                let _ = tx.send(Msg::Failed(format!(
                    "sled panicked reading the store: {}{at}",
                    panic_message(payload.as_ref())
                )));
            }
        });
    if let Err(e) = spawned {
        return Ended::OpenFailed(JournalError::ReaderStartFailed { source: e });
    }
    let mut opened = false;
    let mut last: Option<sled::IVec> = None;
    loop {
        match rx.recv_timeout(timeout) {
            Ok(Msg::Opened) => opened = true,
            Ok(Msg::Entries(entries)) => {
                for (k, v) in entries {
                    if last.as_ref().is_some_and(|l| *l >= k) {
                        return Ended::Broken(format!(
                            "sled returned key {} after {}: the tree is damaged",
                            keys::printable(&k),
                            last.as_deref().map(keys::printable).unwrap_or_default()
                        ));
                    }
                    if !entry(&k, &v) {
                        return Ended::Broken("reading stopped".to_owned());
                    }
                    last = Some(k);
                }
            }
            Ok(Msg::Done(db)) => return Ended::Done(db),
            Ok(Msg::OpenFailed(e)) => return Ended::OpenFailed(e),
            Ok(Msg::Failed(why)) => return Ended::Broken(why),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Ended::Broken(format!(
                    "sled made no progress {} for {} (it loops over a damaged tree)",
                    if opened {
                        "reading the store"
                    } else {
                        "recovering the store"
                    },
                    humantime::format_duration(timeout)
                ));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Ended::Broken("the store reader ended without an answer".to_owned());
            }
        }
    }
}

/// Checks each entry against the layout and sums up the store; [`finish`](Checker::finish) adds the
/// checks that need the whole picture.
pub(super) struct Checker {
    pub(super) report: Report,
    meta_head: Option<u64>,
    expected_next: Option<u64>,
    gaps: Vec<(u64, u64)>,
    store_empty: bool,
    unknown_keys: u64,
    /// The last acknowledged sequence number above each sink's cursor.
    acked_last: BTreeMap<String, u64>,
    /// Each `i/` key the readable `u/` entries update, and whether their last update puts it.
    gathered: std::collections::HashMap<Vec<u8>, bool>,
}

/// The events of an event entry (`k` under `e/`, `plain` its value as [`keys::plain_events`]
/// decodes it, either key form) that read back as stored CloudEvents: its append time and
/// `(seq, payload)` of each, or `None` when the entry itself cannot be split into the events its
/// key names. The one rule `verify` and `salvage` share; a value that does not decompress is
/// unreadable like one that does not split.
pub(super) fn readable_events<'a>(k: &[u8], plain: &'a [u8]) -> Option<keys::Stored<'a>> {
    let (at, mut events) = keys::split_events(k, plain).ok()?;
    events.retain(|(_, payload)| is_json_object(payload));
    Some((at, events))
}

/// The updates of the `u/` entry `k` when the index would read them: a well-formed key, readable
/// keys of the index, and values each a JSON object. The one rule `verify` and `salvage` share.
pub(super) fn readable_updates<'a>(k: &[u8], v: &'a [u8]) -> Option<Vec<updates::Read<'a>>> {
    if k.len() != keys::UPDATES_PREFIX.len() + 8 {
        return None;
    }
    let updates = updates::decode(k, v).ok()?;
    updates
        .iter()
        .all(|(key, value)| {
            key.strip_prefix(keys::INDEX_PREFIX)
                .is_some_and(index_key_readable)
                && value.is_none_or(|value| {
                    keys::index_object(key, value).is_ok_and(|object| is_json(&object))
                })
        })
        .then_some(updates)
}

/// Whether an index key's part after `i/` is `<stream>\0<object key>` in UTF-8.
pub(super) fn index_key_readable(rest: &[u8]) -> bool {
    rest.contains(&0) && std::str::from_utf8(rest).is_ok()
}

/// Whether `bytes` are one JSON object, as reading them into a `BTreeMap<String, IgnoredAny>`
/// would answer (its keys checked as strings: UTF-8, escapes, surrogates), without building one:
/// that map's `String` and node per member were most of a restart's check at 100,000 objects
/// (docs/operations.md, "A restart's check at 100,000 objects (round 9)").
pub(super) fn is_json_object(bytes: &[u8]) -> bool {
    serde_json::from_slice::<ObjectCheck>(bytes).is_ok()
}

/// A JSON object read member by member and kept nowhere.
struct ObjectCheck;

impl<'de> serde::Deserialize<'de> for ObjectCheck {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ObjectCheck)
    }
}

impl<'de> serde::de::Visitor<'de> for ObjectCheck {
    type Value = ObjectCheck;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
        while map.next_key::<KeyCheck>()?.is_some() {
            map.next_value::<serde::de::IgnoredAny>()?;
        }
        Ok(ObjectCheck)
    }
}

/// A member name read as a string (what a `String` key checks), and dropped.
struct KeyCheck;

impl<'de> serde::Deserialize<'de> for KeyCheck {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(KeyCheck)
    }
}

impl serde::de::Visitor<'_> for KeyCheck {
    type Value = KeyCheck;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self, E> {
        Ok(KeyCheck)
    }
}

pub(super) fn is_json(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok()
}

impl Checker {
    pub(super) fn new(path: &Path) -> Self {
        Self {
            report: Report {
                path: path.to_owned(),
                ..Report::default()
            },
            meta_head: None,
            expected_next: None,
            gaps: Vec::new(),
            store_empty: true,
            unknown_keys: 0,
            acked_last: BTreeMap::new(),
            gathered: std::collections::HashMap::new(),
        }
    }

    fn problem(&mut self, what: String) {
        self.report.problem(what);
    }

    /// Checks one entry; always continues (every problem is collected).
    pub(super) fn entry(&mut self, k: &[u8], v: &[u8]) -> bool {
        self.store_empty = false;
        self.report.live_bytes += (k.len() + v.len()) as u64;
        if k.starts_with(keys::EVENT_PREFIX) {
            let Ok((first, last)) = keys::event_span(k) else {
                self.problem(format!("event key {} is malformed", keys::printable(k)));
                return true;
            };
            // A span of every number (0..=u64::MAX) counts as many as a u64 holds.
            let count = (last - first).saturating_add(1);
            let plain = keys::plain_events(k, v);
            // Why nothing of the value reads: it does not decompress, or is not what its key names.
            let why = match &plain {
                Err(JournalError::CorruptEntry { reason, .. }) => reason,
                Err(_) | Ok(_) if first == last => "not a stored CloudEvent",
                Err(_) | Ok(_) => "not the events its key names",
            };
            match plain.as_deref().ok().and_then(|p| readable_events(k, p)) {
                None if first == last => {
                    self.report.events_lost = true;
                    self.problem(format!("event {first} is unreadable ({why})"));
                }
                None => {
                    self.report.events_lost = true;
                    self.problem(format!(
                        "the segment of events {first}..={last} is unreadable ({why})"
                    ));
                }
                Some((_, readable)) if readable.len() as u64 != count => {
                    self.report.events_lost = true;
                    // The numbers between the readable events, and after the last of them up
                    // to the segment's end (none after u64::MAX).
                    let mut expected = Some(first);
                    let mut lost = Vec::new();
                    for seq in readable.iter().map(|(seq, _)| *seq) {
                        lost.extend(expected.map_or(0..0, |e| e..seq));
                        expected = seq.checked_add(1);
                    }
                    if let Some(e) = expected.filter(|e| *e <= last) {
                        lost.extend(e..=last);
                    }
                    for lost in lost {
                        self.problem(format!(
                            "event {lost} is unreadable (not a stored CloudEvent)"
                        ));
                    }
                }
                Some(_) => {}
            }
            if let Some(next) = self.expected_next
                && first != next
            {
                if first > next {
                    self.gaps.push((next, first - 1));
                } else {
                    self.problem(format!(
                        "the events {first}..={last} overlap events stored before them"
                    ));
                }
            }
            self.expected_next = Some(last.saturating_add(1));
            self.report.events += count;
            self.report.first_event.get_or_insert(first);
            self.report.last_event = Some(last);
        } else if let Some(rest) = k.strip_prefix(keys::INDEX_PREFIX) {
            if !index_key_readable(rest) {
                self.problem(format!("index key {} is malformed", keys::printable(k)));
            } else if !keys::index_object(k, v).is_ok_and(|object| is_json(&object)) {
                self.problem(format!("index entry {} is unreadable", keys::printable(k)));
            }
            self.report.index_entries += 1;
        } else if k.starts_with(keys::UPDATES_PREFIX) {
            match readable_updates(k, v) {
                Some(updates) => {
                    for (key, value) in updates {
                        self.gathered.insert(key.to_vec(), value.is_some());
                    }
                }
                None => self.problem(format!(
                    "index updates {} are unreadable",
                    keys::printable(k)
                )),
            }
            self.report.index_updates += 1;
        } else if let Some(stream) = k.strip_prefix(keys::CHECKPOINT_PREFIX) {
            match (std::str::from_utf8(stream), std::str::from_utf8(v)) {
                (Ok(stream), Ok(rv)) => {
                    self.report
                        .checkpoints
                        .insert(stream.to_owned(), rv.to_owned());
                }
                _ => self.problem(format!("checkpoint {} is unreadable", keys::printable(k))),
            }
        } else if let Some(stream) = k.strip_prefix(keys::FIRST_SYNC_PREFIX) {
            if keys::first_sync_readable(stream, v) {
                self.report
                    .skipping_first_syncs
                    .push(String::from_utf8_lossy(stream).into_owned());
            } else {
                self.problem(format!(
                    "first-sync marker {} is unreadable",
                    keys::printable(k)
                ));
            }
        } else if let Some(sink) = k.strip_prefix(keys::CURSOR_PREFIX) {
            match (std::str::from_utf8(sink), keys::decode_u64(k, v)) {
                (Ok(sink), Ok(cursor)) => {
                    self.report.cursors.insert(sink.to_owned(), cursor);
                }
                _ => self.problem(format!("cursor {} is unreadable", keys::printable(k))),
            }
        } else if let Some(sink) = k.strip_prefix(keys::ACKED_PREFIX) {
            match (std::str::from_utf8(sink), keys::decode_ranges(k, v)) {
                (Ok(sink), Ok(ranges)) if !sink.is_empty() => {
                    let events = ranges.iter().map(|(a, b)| b - a + 1).sum();
                    if let Some(&(_, last)) = ranges.last() {
                        self.acked_last.insert(sink.to_owned(), last);
                    }
                    self.report
                        .acked_above_cursor
                        .insert(sink.to_owned(), events);
                }
                _ => self.problem(format!(
                    "acknowledged ranges {} are unreadable",
                    keys::printable(k)
                )),
            }
        } else if k.starts_with(keys::DEAD_PREFIX) || k.starts_with(keys::REPLAY_PREFIX) {
            if keys::queue_key_is_valid(k) {
                if k.starts_with(keys::DEAD_PREFIX) {
                    self.report.dead_letters += 1;
                } else {
                    self.report.replays += 1;
                }
            } else {
                self.problem(format!(
                    "dead-letter or replay key {} is malformed",
                    keys::printable(k)
                ));
            }
        } else if k == keys::SCHEMA_VERSION_KEY {
            self.report.schema_version = Some(String::from_utf8_lossy(v).into_owned());
        } else if k == keys::REDACTION_KEY {
            // Opaque random bytes: nothing to check.
        } else if k == keys::HEAD_KEY {
            match keys::decode_u64(k, v) {
                Ok(h) => self.meta_head = Some(h),
                Err(_) => self.problem("meta/head is unreadable".to_owned()),
            }
        } else {
            self.unknown_keys += 1;
            self.problem(format!("unknown key {}", keys::printable(k)));
        }
        true
    }

    /// Keys of no herald layout seen so far.
    pub(super) fn unknown_keys(&self) -> u64 {
        self.unknown_keys
    }

    /// Counts the index entries as a fold of the `u/` entries would leave them, `db` being the
    /// store that was read: an update puts a key the store may hold already or removes one it may
    /// not hold, so each gathered key is looked up (about `updates::FOLD_ENTRIES`, more by one
    /// append's updates at most).
    pub(super) fn count_gathered(&mut self, db: &sled::Db) {
        for (key, put) in std::mem::take(&mut self.gathered) {
            match (db.contains_key(&key).unwrap_or(false), put) {
                (false, true) => self.report.index_entries += 1,
                (true, false) => {
                    self.report.index_entries = self.report.index_entries.saturating_sub(1);
                }
                _ => {}
            }
        }
    }

    /// The checks over the whole store, given how reading it ended and the head record.
    pub(super) fn finish(mut self, broken: Option<String>, record: &Stored) -> Report {
        self.report.complete = broken.is_none();
        if let Some(why) = broken {
            self.report.events_lost = true;
            self.problem(why);
        }
        let last = self.report.last_event.unwrap_or(0);
        if let Some(meta) = self.meta_head
            && last > meta
        {
            self.problem(format!(
                "event {last} is past meta/head ({meta}): the store is inconsistent"
            ));
        }
        let head = self.meta_head.unwrap_or(0).max(last);
        self.report.head = head;
        for (from, to) in std::mem::take(&mut self.gaps) {
            self.report.events_lost = true;
            self.problem(format!("events {from}..={to} are missing"));
        }
        let cursors: Vec<(String, u64)> = self
            .report
            .cursors
            .iter()
            .map(|(s, c)| (s.clone(), *c))
            .collect();
        for (sink, last) in std::mem::take(&mut self.acked_last) {
            if last > head {
                self.report.events_lost = true;
                self.problem(format!(
                    "sink {sink} acknowledged event {last}, past the head ({head})"
                ));
            }
        }
        for (sink, cursor) in cursors {
            if cursor > head {
                self.report.events_lost = true;
                self.problem(format!(
                    "the cursor of sink {sink} ({cursor}) is past the head ({head})"
                ));
            } else if cursor < head {
                // Retention never removes what a sink has not passed, and appends are contiguous:
                // every event after the slowest cursor must be there.
                let missing = match (self.report.first_event, self.report.last_event) {
                    (Some(first), Some(last)) if first <= cursor + 1 && last >= head => None,
                    (Some(first), Some(_)) if first > cursor + 1 => {
                        Some((cursor + 1, (first - 1).min(head)))
                    }
                    (Some(_), Some(last)) => Some(((last + 1).max(cursor + 1), head)),
                    _ => Some((cursor + 1, head)),
                };
                if let Some((from, to)) = missing {
                    self.report.events_lost = true;
                    self.problem(format!(
                        "events {from}..={to}, not yet delivered to sink {sink}, are missing"
                    ));
                }
            }
        }
        self.report.head_record = match record {
            Stored::Head(h) => Some(*h),
            _ => None,
        };
        let version = self.report.schema_version.clone();
        let current = SCHEMA_VERSION.to_string();
        match version.as_deref() {
            // Versions 2 to 6 differ only by having no `a/`, no `f/`, no segment keys, no
            // compressed values or no `u/` keys; opening upgrades them.
            Some(v) if v == current || matches!(v, "2" | "3" | "4" | "5" | "6") => match record {
                Stored::Head(h) if *h > head => {
                    self.report.events_lost = true;
                    self.problem(format!(
                        "committed entries are lost: herald.head says events up to {h} were \
                         durable, the store ends at {head}"
                    ));
                }
                Stored::Head(_) => {}
                Stored::Missing => {
                    self.problem("the head record herald.head is missing".to_owned())
                }
                Stored::Unreadable(why) => {
                    self.problem(format!("the head record herald.head is unreadable: {why}"));
                }
            },
            // Written before the head record existed; opening upgrades it.
            Some("1") => {
                if let Stored::Head(h) = record
                    && *h > head
                {
                    self.report.events_lost = true;
                    self.problem(format!(
                        "committed entries are lost: herald.head says events up to {h} were \
                         durable, the store ends at {head}"
                    ));
                }
            }
            Some(v) => match v.parse::<u32>() {
                Ok(n) if n > SCHEMA_VERSION => self.problem(format!(
                    "written by a newer herald (journal schema version {n}; this herald reads \
                     1 to {SCHEMA_VERSION})"
                )),
                _ => self.problem(format!("meta/schema_version {v:?} is not a known version")),
            },
            None if self.store_empty => {
                if let Stored::Head(h) = record
                    && *h > 0
                {
                    self.report.events_lost = true;
                    self.problem(format!(
                        "the store is empty but herald.head says events up to {h} were durable"
                    ));
                }
            }
            None => self.problem("meta/schema_version is missing".to_owned()),
        }
        if self.report.problems.len() > MAX_LISTED {
            let more = self.report.problems.len() - MAX_LISTED;
            self.report.problems.truncate(MAX_LISTED);
            self.report
                .problems
                .push(format!("… and {more} more problems"));
        }
        self.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reading `is_json_object` stands for.
    fn as_map(bytes: &[u8]) -> bool {
        serde_json::from_slice::<BTreeMap<String, serde::de::IgnoredAny>>(bytes).is_ok()
    }

    /// Every case answers as the map reading does, including the ones where ignoring the keys
    /// would answer otherwise: a name that is not UTF-8, or holds a lone surrogate.
    #[test]
    fn an_object_is_recognised_exactly_as_a_map_of_its_members_would_be() {
        let cases: &[&[u8]] = &[
            br#"{}"#,
            br#"{"specversion":"1.0","id":"a","data":{"x":[1,2.5,null,true,"s"]}}"#,
            b" \n\t{\"a\":1}\r\n ",
            br#"{"a":1,"a":2}"#,
            br#"{"\u00e9\ud83d\ude00":"x","\"\\\/\b\f\n\r\t":0}"#,
            br#"{"x":"\ud800"}"#,
            br#"{"\ud800":1}"#,
            br#"{"\udc00x":1}"#,
            b"{\"\xff\":1}",
            b"{\"a\":\"\xff\"}",
            b"\x0c{\"a\":1}",
            br#"[{"a":1}]"#,
            br#""{}""#,
            b"1",
            b"null",
            b"",
            br#"{"a":1}x"#,
            br#"{"a":1"#,
            br#"{"a" 1}"#,
            br#"{a:1}"#,
            br#"{"a":1,}"#,
            br#"{"a":[1,}"#,
            br#"{"a":01}"#,
            br#"{"a":"\x"}"#,
            br#"{1:2}"#,
        ];
        for case in cases {
            assert_eq!(
                is_json_object(case),
                as_map(case),
                "{}",
                String::from_utf8_lossy(case)
            );
        }
        // The cases say something: both answers occur, and the keys' checks matter.
        assert!(is_json_object(br#"{"a":1,"a":2}"#));
        assert!(!is_json_object(br#"{"\ud800":1}"#));
        assert!(!is_json_object(b"{\"\xff\":1}"));
        assert!(is_json(br#"{"\ud800":1}"#));
    }
}
