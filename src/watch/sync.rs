//! Turning what the API server shows into journal batches: the relist diff against the object index,
//! and watch events classified by the object's lifecycle (never by selector membership).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use herald_sink_core::Layout;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value;
use tokio_util::task::AbortOnDropHandle;

use super::{Decoded, Health, Object, Resolved, Spanned, WatchSpec};
use crate::config::OnError;
use crate::event::filter::{self, Vars};
use crate::event::members::meta_str as meta;
use crate::event::{self, Ident, Observed, Op};
use crate::journal::{Batch, FirstSync, IndexUpdate, Journal, JournalError, take_unconfirmed_mark};

/// Events synthesized by a relist (or index updates, when filters leave few events) are appended in
/// chunks of this many; only the last carries the
/// checkpoint, so a crash mid-way relists again and the index makes the rest come out once.
const RELIST_CHUNK: usize = 500;
/// How long a namespace-selector answer is trusted.
const NAMESPACE_CACHE: Duration = Duration::from_secs(30);
/// The recorded states a watch keeps beside the object index (see [`Known`]), in bytes of their
/// index entries at most; past it the remembered states are dropped and read from the store again.
const KNOWN_BYTES: usize = 2 << 20;
/// A recorded state larger than this (its index entry, in bytes) is never remembered.
const KNOWN_OBJECT_MAX: usize = 64 << 10;
/// Where an index entry keeps the keyed digests of its redacted values (`{pointer: hex}`): the
/// recorded object holds `"[redacted]"`, so without them a change to a redacted value alone (a
/// rotated Secret) would look like a bookkeeping-only update and be lost. Never part of an event.
const REDACTED_DIGESTS: &str = "@heraldRedacted";

/// What a watch line said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// ADDED.
    Added,
    /// MODIFIED.
    Modified,
    /// DELETED.
    Deleted,
    /// BOOKMARK (the value is the resourceVersion).
    Bookmark,
}

/// Why recording failed.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// A LIST request failed.
    #[error("listing failed")]
    ListFailed(#[source] kube::Error),
    /// The resource is no longer served (its CRD went away).
    #[error("the resource is no longer served")]
    NotServed,
    /// The journal's redaction key does not fit HMAC (never: it is 32 bytes).
    #[error("the journal's redaction key is unusable")]
    RedactionKey,
    /// Reading one object (to tell a selector exit from a deletion) failed.
    #[error("reading an object failed")]
    GetFailed(#[source] kube::Error),
    /// Listing namespaces for a namespace selector failed.
    #[error("listing namespaces failed")]
    NamespacesFailed(#[source] kube::Error),
    /// The journal refused a batch.
    #[error("the journal refused the batch")]
    JournalFailed(#[source] JournalError),
    /// The task reading a LIST page ended without an answer (it panicked).
    #[error("reading a list page ended without an answer")]
    ListAborted,
    /// The task appending a relist's chunk ended without an answer (it panicked).
    #[error("appending a relist's chunk to the journal ended without an answer")]
    AppendAborted,
}

impl SyncError {
    /// The API server's error, when a request to it is what failed.
    pub fn api_error(&self) -> Option<&kube::Error> {
        match self {
            Self::ListFailed(e) | Self::GetFailed(e) | Self::NamespacesFailed(e) => Some(e),
            Self::NotServed
            | Self::JournalFailed(_)
            | Self::RedactionKey
            | Self::ListAborted
            | Self::AppendAborted => None,
        }
    }
}

/// Cached answer to "which namespaces match the namespace selector".
#[derive(Debug, Default)]
pub struct NamespaceCache(Mutex<Option<Namespaces>>);

/// The namespaces as of one look.
#[derive(Debug)]
struct Namespaces {
    at: Instant,
    /// Those whose labels match.
    allowed: HashSet<String>,
    /// Every namespace seen, matching or not: one missing from here is newer than the look.
    known: HashSet<String>,
}

/// Records what one watcher sees into the journal.
pub struct Recorder<'a> {
    /// The journal.
    pub journal: &'a Journal,
    /// The watcher's configuration.
    pub spec: &'a WatchSpec,
    /// The resolved resource.
    pub resolved: &'a Resolved,
    health: &'a Health,
    namespaces: &'a NamespaceCache,
    /// The journal's redaction key, read on first need.
    redaction_key: std::sync::OnceLock<Vec<u8>>,
    /// States this recorder appended to the object index, so the next change of the same object
    /// is diffed without reading its entry back and parsing it (a catch-up's most frequent cost
    /// after the journal's writes).
    known: Mutex<Known>,
    /// The watch batch being appended while the next is recorded (see
    /// [`record_watch_beside`](Self::record_watch_beside)).
    appending: Mutex<Option<Appending>>,
}

/// A watch batch appending on the journal's append thread while the watch records the next one:
/// sled's `apply_batch` was as much of the recorder's one task as recording itself, and the two took
/// turns. Only one is ever in flight, and the next batch's append waits for it, so batches land in
/// order, a failed one stops every later one, and the checkpoint moves only with its events.
struct Appending {
    append: Chunk,
    /// What the batch leaves in the object index for each key it changes: the next batch diffs
    /// against these (taking them out as it reads them), since the store may not hold them yet;
    /// the rest goes to [`Known`] once the batch landed.
    overlay: Keyed<Option<State>>,
    /// Where the watch resumes once the batch landed.
    next: String,
    /// How many events the batch appends (for the backlog bound).
    events: u64,
}

/// Closed once a [`Chunk`]'s append returned (or its thread panicked). Dropping it waits for
/// that: at once after [`Recorder::settle_watch`], which every way out of a watch goes through; but
/// a watcher aborted between handing a batch over and settling it (one that did not stop in time)
/// drops its recorder, and this, with the append still running, which would otherwise land on its
/// own, possibly after the watcher that replaces it read the index or the checkpoint. Waiting here
/// is what the aborted task did when it appended in line.
struct Landed(std::sync::mpsc::Receiver<()>);

impl Drop for Landed {
    fn drop(&mut self) {
        // Returns once the sender is dropped: after the append, or if its thread panicked.
        let _ = self.0.recv();
    }
}

/// The recorded states a watch appended, each exactly what the object index holds for its key
/// (as [`Recorder::recorded`] would parse it): entries go in only once their append succeeded and
/// come out when taken for a change, and only this recorder writes its stream's index while it
/// watches (a relist, `report_gone` and the offline commands never run beside it; a recorder lives
/// for one watch). Bounded by [`KNOWN_BYTES`]; anything missing is read from the store.
#[derive(Default)]
struct Known {
    objects: Keyed<State>,
    bytes: usize,
    /// The last batch's overlay, emptied, for the next batch: an overlay grown from nothing
    /// rehashed its table several times a batch (and touched fresh pages each time).
    spare: Keyed<Option<State>>,
}

/// A recorded state as the recorder keeps it: its tree, or, for a resource on the spans path
/// ([`Recorder::spans_path`]), the index entry's bytes and their spans (less memory than the tree,
/// and what the next change's patch is written from).
///
/// Each knows the size of its index entry, for [`Known`]'s bound: a tree's is noted beside it
/// (none when not known, and then it is not kept past its batch), a span's is its bytes. A map of
/// sizes beside the states was one more key copied and hashed per change.
#[derive(Debug)]
enum State {
    Tree(Value, Option<usize>),
    Spans(Spanned),
}

impl State {
    /// The size of its index entry, when known.
    fn size(&self) -> Option<usize> {
        match self {
            Self::Tree(_, size) => *size,
            Self::Spans(s) => Some(s.bytes.len()),
        }
    }

    /// The state's tree (parsed from its bytes when it has none).
    fn into_value(self) -> Value {
        match self {
            Self::Tree(v, _) => v,
            Self::Spans(s) => s.into_tree().0,
        }
    }
}

impl Known {
    fn take(&mut self, key: &str) -> Option<State> {
        let taken = self.objects.remove(key)?;
        self.bytes -= taken.size().unwrap_or(0);
        Some(taken)
    }

    /// Remembers what a successful append left in the index for these keys.
    fn remember(&mut self, mut overlay: Keyed<Option<State>>) {
        for (key, state) in overlay.drain() {
            let Some((mut object, size)) = state
                .and_then(|state| Some((state.size()?, state)))
                .filter(|&(size, _)| size <= KNOWN_OBJECT_MAX)
                .map(|(size, state)| (state, size))
            else {
                self.take(&key);
                continue;
            };
            // A buffer with little room to spare (the decoder's first guess is 512 bytes) is kept
            // as it is: shrinking it was a copy of every state remembered.
            if let State::Spans(s) = &mut object
                && s.bytes.capacity() > s.bytes.len() + s.bytes.len() / 2
            {
                s.shrink();
            }
            if self.bytes + size > KNOWN_BYTES {
                self.objects.clear();
                self.bytes = 0;
            }
            self.bytes += size;
            // One lookup: what the key held before (a change taken out of here meanwhile leaves
            // nothing) goes out of the count as the new state comes in.
            if let Some(before) = self.objects.insert(key, object) {
                self.bytes -= before.size().unwrap_or(0);
            }
        }
        self.spare = overlay;
    }
}

/// One watch line's change as the recorder takes it: the object (a bookmark's resourceVersion)
/// and its bytes when the decoder wrote them.
pub type Change = (Seen, Value, Option<Vec<u8>>);

/// A map by object key, hashed with foldhash rather than std's SipHash: the recorder looks every
/// change's key up in three of them (the batch's overlay, the one appending, [`Known`]),
/// and SipHash of each key was most of those lookups. foldhash's seed is random per process, and
/// keys are the names of objects in the watched resources.
type Keyed<V> = HashMap<String, V, foldhash::fast::RandomState>;

/// A batch being built: rendered events and index updates.
#[derive(Default)]
struct Pending {
    events: Vec<Vec<u8>>,
    /// Each event's layout when the recorder vouches for it (valid, and readable as written):
    /// handed to the journal's memory beside the bytes, so delivery reads none of it again.
    layouts: Vec<Option<Layout>>,
    index: Vec<IndexUpdate>,
    /// Index state changed within this batch, so a second change to the same object sees the first.
    overlay: Keyed<Option<State>>,
}

/// A journal batch and the layouts of the events the recorder vouches for
/// ([`Journal::append_vouched`]).
struct Vouched {
    batch: Batch,
    layouts: Vec<Option<Layout>>,
}

/// `v` without the index's [`REDACTED_DIGESTS`] (borrowed when it has none).
fn public(v: &Value) -> std::borrow::Cow<'_, Value> {
    match v.as_object() {
        Some(o) if event::members::member(o, REDACTED_DIGESTS).is_some() => {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut() {
                o.remove(REDACTED_DIGESTS);
            }
            std::borrow::Cow::Owned(v)
        }
        _ => std::borrow::Cow::Borrowed(v),
    }
}

impl Pending {
    /// Adds a rendered event, with its layout if the recorder vouches for it.
    fn push_event(&mut self, bytes: Vec<u8>, vouched: Option<Layout>) {
        self.events.push(bytes);
        self.layouts.push(vouched);
    }

    /// Whether a relist should append what it has built: at [`RELIST_CHUNK`] events, or as many
    /// index updates (a relist whose changes are mostly filtered records them without events, and
    /// one batch for all of them would be unbounded).
    fn chunk_full(&self) -> bool {
        self.events.len() >= RELIST_CHUNK || self.index.len() >= RELIST_CHUNK
    }
}

/// `value` escaped for a field selector (`\\`, `\,` and `\=`), for names that are not DNS names.
fn field_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl<'a> Recorder<'a> {
    /// A recorder for one watcher.
    pub fn new(
        journal: &'a Journal,
        spec: &'a WatchSpec,
        resolved: &'a Resolved,
        health: &'a Health,
        namespaces: &'a NamespaceCache,
    ) -> Self {
        Self {
            journal,
            spec,
            resolved,
            health,
            namespaces,
            redaction_key: std::sync::OnceLock::new(),
            known: Mutex::new(Known::default()),
            appending: Mutex::new(None),
        }
    }

    /// Whether the object's namespace passes the `namespaces` name patterns (cluster-scoped
    /// objects always do).
    fn name_pattern_allowed(&self, obj: &Value) -> bool {
        let ns = meta(obj, "namespace");
        ns.is_empty() || self.spec.namespace_name_allowed(ns)
    }

    /// The recorded form of `raw` ([`event::prepare`]), plus, for a resource that redacts, the
    /// keyed digest of each redacted value under [`REDACTED_DIGESTS`].
    fn prepare(&self, raw: Value) -> Result<Value, SyncError> {
        let redact = &self.resolved.resource.redact;
        if redact.is_empty() {
            return Ok(event::prepare(&self.resolved.resource, raw));
        }
        let key = match self.redaction_key.get() {
            Some(k) => k,
            None => {
                let k = self
                    .journal
                    .redaction_key()
                    .map_err(SyncError::JournalFailed)?;
                self.redaction_key.get_or_init(|| k)
            }
        };
        let mut digests = serde_json::Map::new();
        for pointer in redact {
            if let Some(v) = raw.pointer(pointer) {
                use hmac::{KeyInit, Mac};
                let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key)
                    .map_err(|_| SyncError::RedactionKey)?;
                mac.update(serde_json::to_string(v).unwrap_or_default().as_bytes());
                let hex: String = mac
                    .finalize()
                    .into_bytes()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                digests.insert(pointer.clone(), Value::String(hex));
            }
        }
        let mut out = event::prepare(&self.resolved.resource, raw);
        if let Some(o) = out.as_object_mut()
            && !digests.is_empty()
        {
            o.insert(REDACTED_DIGESTS.to_owned(), Value::Object(digests));
        }
        Ok(out)
    }

    /// [`prepare`](Self::prepare) of an object the decoder also serialized (`json`): the bytes
    /// stay only while they are still the recorded form's, that is when preparing changes nothing
    /// (no redaction, whose digests go in too; managedFields already skipped, or kept).
    fn prepare_json(
        &self,
        raw: Value,
        json: Option<Vec<u8>>,
    ) -> Result<(Value, Option<Vec<u8>>), SyncError> {
        let resource = &self.resolved.resource;
        if !resource.redact.is_empty() {
            return Ok((self.prepare(raw)?, None));
        }
        let mut obj = raw;
        let changed = event::prepare_in_place(resource, &mut obj);
        Ok((obj, json.filter(|_| !changed)))
    }

    /// Whether a redacted value within one of the `changed` fields (any, without them) differs
    /// between `old` and `new`, by their digests.
    fn redacted_value_changed(&self, old: &Value, new: &Value) -> bool {
        let (a, b) = (old.get(REDACTED_DIGESTS), new.get(REDACTED_DIGESTS));
        if a == b {
            return false;
        }
        let changed = &self.spec.changed;
        self.resolved.resource.redact.iter().any(|pointer| {
            a.and_then(|d| d.get(pointer)) != b.and_then(|d| d.get(pointer))
                && (changed.is_empty()
                    || filter::FieldPath::parse(pointer)
                        .is_ok_and(|p| changed.iter().any(|c| c.covers(&p))))
        })
    }

    fn selective(&self) -> bool {
        self.spec.label_selector.is_some()
            || self.spec.field_selector.is_some()
            || self.spec.namespace_selector.is_some()
    }

    /// What the index holds for `key` as of this batch. Taken out of the overlay rather than copied:
    /// every caller puts or removes the key again before the next lookup.
    fn recorded(&self, p: &mut Pending, key: &str) -> Result<Option<State>, SyncError> {
        if let Some(v) = p.overlay.remove(key) {
            return Ok(v);
        }
        if let Some(a) = self.lock_appending().as_mut()
            && let Some(v) = a.overlay.remove(key)
        {
            return Ok(v);
        }
        if let Some(v) = self.lock_known().take(key) {
            return Ok(Some(v));
        }
        let raw = self
            .journal
            .index_get(&self.resolved.stream, key)
            .map_err(SyncError::JournalFailed)?;
        let size = raw.as_ref().map(Vec::len);
        // Kept as bytes on the spans path, unless the entry is not plain (a salvage's mark, which
        // `plain` refuses, is taken out of the tree below).
        if self.spans_path()
            && let Some(s) = raw
                .as_deref()
                .and_then(Spanned::index)
                .filter(Spanned::plain)
        {
            return Ok(Some(State::Spans(s)));
        }
        // A salvage's mark is read by the relist that always comes first; never diff against it.
        Ok(raw
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .map(|mut v| {
                take_unconfirmed_mark(&mut v);
                State::Tree(v, size)
            }))
    }

    fn lock_known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock_appending(&self) -> std::sync::MutexGuard<'_, Option<Appending>> {
        self.appending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// [`put_json`](Self::put_json), serializing `obj` unless the decoder did (`json`).
    fn put(&self, p: &mut Pending, key: &str, obj: Value, json: Option<Vec<u8>>) {
        let json = json.unwrap_or_else(|| serde_json::to_vec(&obj).unwrap_or_default());
        self.put_json(p, key, obj, json);
    }

    /// [`put`](Self::put) with the object already serialized (`json`).
    fn put_json(&self, p: &mut Pending, key: &str, obj: Value, json: Vec<u8>) {
        let size = json.len();
        p.index.push(IndexUpdate::Put {
            key: key.to_string(),
            object: json,
        });
        p.overlay
            .insert(key.to_string(), Some(State::Tree(obj, Some(size))));
    }

    fn remove(&self, p: &mut Pending, key: &str) {
        p.index.push(IndexUpdate::Remove {
            key: key.to_string(),
        });
        p.overlay.insert(key.to_string(), None);
    }

    /// Whether the resource's `when` lets this change through (always, without one). `prior` is
    /// the state recorded before the change: the expression's `oldObject`.
    fn wanted(&self, op: Op, obj: &Value, prior: Option<&Value>, resync: bool) -> bool {
        let Some(when) = &self.spec.when else {
            return true;
        };
        let vars = Vars {
            object: Some(obj),
            old_object: prior,
            op,
            resync,
            namespace: meta(obj, "namespace"),
            name: meta(obj, "name"),
        };
        match when.evaluate(&vars) {
            Ok(pass) => pass,
            Err(error) => {
                self.health
                    .filter_errors
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let key = event::object_key(&self.resolved.resource, obj);
                if self.health.first_filter_error(&key) {
                    tracing::warn!(
                        message = "The resource's `when` expression failed on an object; onError decides (logged once per object).",
                        resource = %self.resolved.display(),
                        object = %key,
                        on_error = ?when.on_error,
                        %error,
                    );
                }
                when.on_error == OnError::Emit
            }
        }
    }

    /// Journals the change as an event, unless the resource's `events` or `when` leave it out.
    /// `old` goes into the event (patch, oldObject); `prior` is what `when` sees as `oldObject`,
    /// which for a deletion is the recorded state the event itself does not carry.
    #[allow(clippy::too_many_arguments)]
    fn emit(
        &self,
        p: &mut Pending,
        op: Op,
        obj: &Value,
        old: Option<&Value>,
        prior: Option<&Value>,
        resync: bool,
        rv: Option<&str>,
    ) {
        self.emit_json(p, op, obj, None, None, old, prior, resync, rv);
    }

    /// A `created` event for `obj`, serialized as `json`.
    fn emit_created(&self, p: &mut Pending, obj: &Value, json: &[u8], resync: bool) {
        self.emit_json(
            p,
            Op::Created,
            obj,
            Some(json),
            None,
            None,
            None,
            resync,
            None,
        );
    }

    /// [`emit`](Self::emit), given `obj` serialized (`obj_json`), which the event then carries as
    /// it is (unless the index's digests of redacted values have to come out of it first), and
    /// the patch from `old` to `obj` already written (`patch_json`; `old` and `obj` without
    /// digests then).
    #[allow(clippy::too_many_arguments)]
    fn emit_json(
        &self,
        p: &mut Pending,
        op: Op,
        obj: &Value,
        obj_json: Option<&[u8]>,
        patch_json: Option<&[u8]>,
        old: Option<&Value>,
        prior: Option<&Value>,
        resync: bool,
        rv: Option<&str>,
    ) {
        let obj = public(obj);
        let obj_json = obj_json.filter(|_| matches!(obj, std::borrow::Cow::Borrowed(_)));
        let (old, prior) = (old.map(public), prior.map(public));
        let (obj, old, prior) = (obj.as_ref(), old.as_deref(), prior.as_deref());
        if !self.spec.ops.contains(&op) || !self.wanted(op, obj, prior, resync) {
            self.health
                .filtered
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        self.health
            .emitted
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (attributes, bytes, layout) = event::normalize_structured_laid_out(
            &self.resolved.resource,
            Observed {
                op,
                object: obj,
                old,
                resync,
                resource_version: rv,
                observed_at: jiff::Timestamp::now(),
            },
            obj_json,
            patch_json,
        );
        let valid = self.counted_and_valid(resync, &attributes);
        let deep = valid
            && [Some(obj), old]
                .into_iter()
                .flatten()
                .any(|o| depth(o) > DEEP);
        if deep && let Err(error) = herald_sink_core::CloudEvent::from_structured_json(&bytes) {
            // Nested near serde_json's limit: the event wraps the object two levels deeper, past
            // what a reader parses. Journaled all the same, as an invalid one is.
            tracing::warn!(
                message = "Event cannot be read back (its object is nested too deep); each sink will dead-letter it.",
                resource = %self.resolved.display(),
                id = %attributes.id(),
                object = %attributes.subject(),
                %error,
            );
        }
        // Vouched for only when valid and nested too little to be refused by a reader (a deep
        // one that reads back is read in full, as before).
        p.push_event(bytes, layout.filter(|_| valid && !deep));
    }

    /// Counts a resync event, and whether the event's attributes are valid. The one definition the
    /// journal reader applies too: an event that breaks it is journaled all the same (dropping it
    /// here would lose it without a trace), and every sink's reader dead-letters it with this
    /// reason. Odd characters in names are valid: they are carried.
    fn counted_and_valid(&self, resync: bool, attributes: &event::Attributes<'_>) -> bool {
        if resync {
            self.health
                .resync_events
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let Err(error) = attributes.validate() else {
            return true;
        };
        tracing::warn!(
            message = "Event is not a valid CloudEvent; each sink will dead-letter it.",
            resource = %self.resolved.display(),
            id = %attributes.id(),
            %error,
        );
        false
    }

    /// An object that exists now, against what was recorded. `json` is `new` serialized, when the
    /// decoder wrote that already. `rv` is the list's revision during a relist.
    #[allow(clippy::too_many_arguments)]
    fn present(
        &self,
        p: &mut Pending,
        key: &str,
        new: Value,
        json: Option<Vec<u8>>,
        old: Option<Value>,
        resync: bool,
        rv: Option<&str>,
    ) {
        if old.as_ref().is_some_and(|old| {
            meta(old, "uid") == meta(&new, "uid")
                && meta(old, "resourceVersion") == meta(&new, "resourceVersion")
        }) {
            // Nothing changed; keep what `recorded` took out of the overlay.
            // Its entry's size went with `recorded`'s state: not kept past this batch (rare: a
            // watch seldom sends a state it sent before).
            p.overlay
                .insert(key.to_string(), old.map(|old| State::Tree(old, None)));
            return;
        }
        // Serialized once (while it was parsed, where it could be), for the index entry and the
        // event's `data.object` both.
        let json = json.unwrap_or_else(|| serde_json::to_vec(&new).unwrap_or_default());
        match old {
            None => self.emit_created(p, &new, &json, resync),
            Some(old) if meta(&old, "uid") != meta(&new, "uid") => {
                // Deleted and re-created under the same name while we were not looking: the
                // deletion first, dated just before the new object, so `sequence` keeps rising
                // within the key (the list's revision is later than the new object's own).
                // Opaque resourceVersions have no "just before": then the list's revision, or on
                // a watch the new object's.
                let before = event::replaced_deletion_version(meta(&new, "resourceVersion"));
                let deleted_at = before
                    .as_deref()
                    .or(rv)
                    .or(Some(meta(&new, "resourceVersion")));
                self.emit(p, Op::Deleted, &old, None, Some(&old), resync, deleted_at);
                self.emit_created(p, &new, &json, resync);
            }
            Some(old) if self.patch_decides(&old, &new) => {
                // The patch the event carries is written first: it says whether the update is
                // meaningful, so the two states are walked once, not twice.
                let mut patch = Vec::with_capacity(256);
                if event::write_diff(&mut patch, &old, &new) {
                    self.emit_json(
                        p,
                        Op::Updated,
                        &new,
                        Some(&json),
                        Some(&patch),
                        Some(&old),
                        Some(&old),
                        resync,
                        None,
                    );
                } else {
                    self.health
                        .filtered
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
            Some(old) => {
                // Filtered or not, `new` is recorded below: it is the state the next change is
                // compared with (and what a `when` sees as `oldObject`).
                if (self.spec.skip_status_only_updates && event::status_only_change(&old, &new))
                    || !(filter::meaningful_update(
                        &old,
                        &new,
                        &self.spec.changed,
                        &self.spec.ignore_fields,
                    ) || self.redacted_value_changed(&old, &new))
                {
                    self.health
                        .filtered
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                } else {
                    self.emit_json(
                        p,
                        Op::Updated,
                        &new,
                        Some(&json),
                        None,
                        Some(&old),
                        Some(&old),
                        resync,
                        None,
                    );
                }
            }
        }
        self.put_json(p, key, new, json);
    }

    /// Whether an update from `old` to `new` (of the same uid) is decided by the patch the event
    /// carries: whether [`event::write_diff`] writes an operation outside the bookkeeping is then
    /// exactly [`filter::meaningful_update`]'s answer. So when the update's event has a patch and
    /// nothing else filters updates: no `changed`, no `ignoreFields`, no status-only skip, no
    /// redaction (whose digests `meaningful_update` compares and the patch leaves out).
    fn patch_decides(&self, old: &Value, new: &Value) -> bool {
        let spec = self.spec;
        let resource = &self.resolved.resource;
        resource.payload.patch
            && spec.ops.contains(&Op::Updated)
            && spec.changed.is_empty()
            && spec.ignore_fields.is_empty()
            && !spec.skip_status_only_updates
            && resource.redact.is_empty()
            && [old, new].iter().all(|o| {
                // An object of its own carrying the digests' member name: the event leaves the
                // member out of both states (`public`), a patch of the raw states would not.
                event::members::get(o, REDACTED_DIGESTS).is_none()
                    && event::members::get(o, "metadata").is_some_and(Value::is_object)
            })
    }

    /// [`append`](Self::append), with what the append does to the stream's first-sync marker.
    fn append_marked(
        &self,
        p: Pending,
        checkpoint: Option<String>,
        first_sync: FirstSync,
    ) -> Result<(), SyncError> {
        match self.batch(p, checkpoint, true) {
            Some(batch) => append_batch(self.journal, batch, first_sync),
            None => Ok(()),
        }
    }

    /// The journal batch of `p` and `checkpoint`; none when there is nothing to append (a
    /// first-sync marker alone protects nothing: it goes with index entries or the checkpoint).
    /// `listed`: `p` holds a relist's changes, each object at most once (`Batch::listed`).
    fn batch(&self, p: Pending, checkpoint: Option<String>, listed: bool) -> Option<Vouched> {
        if p.events.is_empty() && p.index.is_empty() && checkpoint.is_none() {
            return None;
        }
        Some(Vouched {
            batch: Batch {
                stream: self.resolved.stream.clone(),
                events: p.events,
                index: p.index,
                checkpoint,
                listed,
            },
            layouts: p.layouts,
        })
    }

    /// [`append_marked`](Self::append_marked) on the journal's append thread, so the relist records
    /// its next chunk while sled applies this one (sled's `apply_batch` was about a third of the relist's
    /// one task). Waits first for the chunk before it (`inflight`), so chunks land in order and a
    /// failed one stops the next; the caller [`settle`]s before it reads the index for a key an
    /// unsettled chunk may hold.
    async fn append_beside(
        &self,
        inflight: &mut Option<Chunk>,
        p: Pending,
        first_sync: FirstSync,
    ) -> Result<(), SyncError> {
        settle(inflight).await?;
        let Some(batch) = self.batch(p, None, true) else {
            return Ok(());
        };
        *inflight = Some(Chunk::spawn(self.journal, batch, first_sync));
        Ok(())
    }

    /// Whether `namespace` passes `namespaces`: its name patterns, then the namespace selector
    /// (always, without either).
    ///
    /// The answer is cached for [`NAMESPACE_CACHE`], except for a namespace the cache has never
    /// seen: one created since then is looked up at once, or the objects created in it right away
    /// would be taken for outsiders and never reported.
    async fn namespace_allowed(&self, namespace: &str) -> Result<bool, SyncError> {
        if namespace.is_empty() {
            return Ok(true);
        }
        // Name patterns first: they need no request.
        if !self.spec.namespace_name_allowed(namespace) {
            return Ok(false);
        }
        let Some(selector) = &self.spec.namespace_selector else {
            return Ok(true);
        };
        let api: Api<Namespace> = Api::all(self.resolved.client.clone());
        let look = |c: &Namespaces| {
            let allowed = c.allowed.contains(namespace);
            (allowed, allowed || c.known.contains(namespace))
        };
        let cached = self.namespaces.0.lock().ok().and_then(|guard| {
            guard
                .as_ref()
                .filter(|c| c.at.elapsed() < NAMESPACE_CACHE)
                .map(look)
        });
        let (allowed, known) = match cached {
            Some(answer) => answer,
            None => {
                let names = |list: kube::core::ObjectList<Namespace>| -> HashSet<String> {
                    list.items
                        .into_iter()
                        .filter_map(|n| n.metadata.name)
                        .collect()
                };
                // Every namespace first, then the matching ones: one created in between is then
                // taken for new and asked about, never for an outsider.
                let known = names(
                    api.list(&ListParams::default())
                        .await
                        .map_err(SyncError::NamespacesFailed)?,
                );
                let allowed = names(
                    api.list(&ListParams::default().labels(selector))
                        .await
                        .map_err(SyncError::NamespacesFailed)?,
                );
                let fresh = Namespaces {
                    at: Instant::now(),
                    allowed,
                    known,
                };
                let answer = look(&fresh);
                if let Ok(mut guard) = self.namespaces.0.lock() {
                    *guard = Some(fresh);
                }
                answer
            }
        };
        if known {
            return Ok(allowed);
        }
        // New since the last look: ask about this one namespace only, and remember the answer.
        let one = api
            .list(
                &ListParams::default()
                    .labels(selector)
                    .fields(&format!("metadata.name={}", field_value(namespace))),
            )
            .await
            .map_err(SyncError::NamespacesFailed)?;
        let allowed = !one.items.is_empty();
        if let Ok(mut guard) = self.namespaces.0.lock()
            && let Some(c) = guard.as_mut()
        {
            c.known.insert(namespace.to_string());
            if allowed {
                c.allowed.insert(namespace.to_string());
            }
        }
        Ok(allowed)
    }

    /// Whether the object still exists with the same uid (a selector exit rather than a deletion).
    async fn still_exists(&self, recorded: &Value) -> Result<Option<Value>, SyncError> {
        let ns = meta(recorded, "namespace");
        let api: Api<DynamicObject> = if self.resolved.namespaced && !ns.is_empty() {
            Api::namespaced_with(
                self.resolved.client.clone(),
                ns,
                &self.resolved.api_resource,
            )
        } else {
            Api::all_with(self.resolved.client.clone(), &self.resolved.api_resource)
        };
        // Read as a `Value`, as the watch reads: a typed object would re-order `metadata` and
        // drop unknown fields, and the event built from it would differ from a watched one.
        let request = kube::core::Request::new(api.resource_url())
            .get(meta(recorded, "name"), &kube::api::GetParams::default())
            .map_err(|e| SyncError::GetFailed(kube::Error::BuildRequest(e)))?;
        match self.resolved.client.request::<Value>(request).await {
            Ok(o) => {
                let o = super::WatchedObject::into_value(o).map_err(SyncError::GetFailed)?;
                let v = self.prepare(o)?;
                Ok((meta(&v, "uid") == meta(recorded, "uid")).then_some(v))
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(SyncError::GetFailed(e)),
        }
    }

    /// Records a run of watch events and moves `rv` past them (the checkpoint goes with them).
    pub async fn record_watch(
        &self,
        changes: Vec<(Seen, Value)>,
        rv: &mut String,
    ) -> Result<(), SyncError> {
        let changes = changes
            .into_iter()
            .map(|(s, v)| (s, Object::Tree(v, None)))
            .collect();
        self.record_objects_beside(changes, rv).await?;
        self.settle_watch(rv).await
    }

    /// Records a run of watch events and leaves them appending on the journal's append thread while
    /// the caller reads and records the next run (see [`Appending`]); first it waits for the run
    /// appending before, and moves `rv` past that one once it landed. The caller
    /// [`settle_watch`](Self::settle_watch)es before it uses `rv` or leaves the stream to anything
    /// else (a relist, another watch).
    ///
    /// # Errors
    ///
    /// What recording this run or appending the one before ran into: neither this run nor any
    /// later one is appended then, and `rv` stays where the last landed run left it.
    pub async fn record_watch_beside(
        &self,
        changes: Vec<Change>,
        rv: &mut String,
    ) -> Result<(), SyncError> {
        let changes = changes
            .into_iter()
            .map(|(s, v, json)| (s, Object::Tree(v, json)))
            .collect();
        self.record_objects_beside(changes, rv).await
    }

    /// [`record_watch_beside`](Self::record_watch_beside) of objects as the watch's decoder gives
    /// them (trees, or bytes and spans).
    ///
    /// # Errors
    ///
    /// As [`record_watch_beside`](Self::record_watch_beside).
    pub async fn record_objects_beside(
        &self,
        changes: Vec<(Seen, Object)>,
        rv: &mut String,
    ) -> Result<(), SyncError> {
        let from = match self.lock_appending().as_ref() {
            Some(a) => a.next.clone(),
            None => rv.clone(),
        };
        let (mut p, next) = self.record_changes(changes, from).await?;
        // The run before lands first: one that failed stops this one.
        self.settle_watch(rv).await?;
        let checkpoint = (next != *rv).then(|| next.clone());
        let overlay = std::mem::take(&mut p.overlay);
        let Some(batch) = self.batch(p, checkpoint, false) else {
            self.lock_known().remember(overlay);
            *rv = next;
            return Ok(());
        };
        let events = batch.batch.events.len() as u64;
        *self.lock_appending() = Some(Appending {
            append: Chunk::spawn(self.journal, batch, FirstSync::Keep),
            overlay,
            next,
            events,
        });
        Ok(())
    }

    /// How many events the watch batch still appending holds (0 when none is).
    pub fn events_appending(&self) -> u64 {
        self.lock_appending().as_ref().map_or(0, |a| a.events)
    }

    /// Waits for the run of watch events appending, if any, and moves `rv` past it once it landed.
    ///
    /// # Errors
    ///
    /// The journal refused the run (or its task ended without an answer): `rv` stays where it was.
    pub async fn settle_watch(&self, rv: &mut String) -> Result<(), SyncError> {
        let Some(appending) = self.lock_appending().take() else {
            return Ok(());
        };
        appending.append.landed().await?;
        // In the index now: the next change of these objects is diffed against them as they are.
        self.lock_known().remember(appending.overlay);
        *rv = appending.next;
        Ok(())
    }

    /// The batch of a run of watch events, against what the index holds (or will, once the run
    /// appending lands), and the resourceVersion the run ends at (`rv` when it has none).
    async fn record_changes(
        &self,
        changes: Vec<(Seen, Object)>,
        rv: String,
    ) -> Result<(Pending, String), SyncError> {
        let mut p = Pending {
            events: Vec::with_capacity(changes.len()),
            layouts: Vec::with_capacity(changes.len()),
            index: Vec::with_capacity(changes.len()),
            overlay: std::mem::take(&mut self.lock_known().spare),
        };
        let mut next = rv;
        for (seen, object) in changes {
            let (raw, json) = match object {
                Object::Spans(s) if seen != Seen::Bookmark && self.spans_path() => {
                    self.record_spans(&mut p, seen, s, &mut next).await?;
                    continue;
                }
                Object::Spans(s) => s.into_tree(),
                Object::Tree(raw, json) => (raw, json),
            };
            if seen == Seen::Bookmark {
                if let Some(b) = raw.as_str().filter(|b| !b.is_empty()) {
                    next = b.to_string();
                }
                continue;
            }
            let (obj, json) = self.prepare_json(raw, json)?;
            let obj_rv = meta(&obj, "resourceVersion").to_string();
            if !obj_rv.is_empty() {
                next.clone_from(&obj_rv);
            }
            let key = event::object_key(&self.resolved.resource, &obj);
            if !self.name_pattern_allowed(&obj) {
                // Outside the name patterns: untracked, so a later relist reports nothing for it
                // (an entry left from before the patterns changed is dropped without an event).
                if self.recorded(&mut p, &key)?.is_some() {
                    self.remove(&mut p, &key);
                } else {
                    p.overlay.insert(key, None);
                }
                continue;
            }
            if !self.namespace_allowed(meta(&obj, "namespace")).await? {
                continue;
            }
            let old = self.recorded(&mut p, &key)?.map(State::into_value);
            match seen {
                Seen::Added | Seen::Modified => {
                    self.present(&mut p, &key, obj, json, old, false, None);
                }
                Seen::Deleted if self.selective() => match self.still_exists(&obj).await? {
                    // It stopped matching but lives on: an update if it changed, then nothing more.
                    Some(current) => self.present(&mut p, &key, current, None, old, false, None),
                    None => {
                        self.emit(&mut p, Op::Deleted, &obj, None, old.as_ref(), false, None);
                        self.remove(&mut p, &key);
                    }
                },
                Seen::Deleted => {
                    self.emit(&mut p, Op::Deleted, &obj, None, old.as_ref(), false, None);
                    self.remove(&mut p, &key);
                }
                Seen::Bookmark => {}
            }
        }
        Ok((p, next))
    }
}

impl Recorder<'_> {
    /// Whether this resource's watched changes are recorded from their bytes and spans
    /// ([`Spanned`]) instead of their trees: when nothing of the recording reads an object's tree.
    /// What does: `when` (its variables are the trees), `changed` and `ignoreFields`
    /// (`meaningful_update` walks the trees by path), the status-only skip, and redaction (values
    /// replaced in the tree, digests beside it). The `metadata` strings the rest reads (the key,
    /// the namespace for name patterns and selectors, the attributes) come from the spans. A
    /// selective watch's deletion (which asks the API server whether the object lives on) and
    /// an object that is not [`plain`](Spanned::plain) take the tree path, change by change.
    pub(crate) fn spans_path(&self) -> bool {
        let spec = self.spec;
        spec.when.is_none()
            && spec.changed.is_empty()
            && spec.ignore_fields.is_empty()
            && !spec.skip_status_only_updates
            && self.resolved.resource.redact.is_empty()
    }

    /// [`record_changes`](Self::record_changes) of one change whose object is bytes and spans: the
    /// same events and index updates.
    async fn record_spans(
        &self,
        p: &mut Pending,
        seen: Seen,
        new: Spanned,
        next: &mut String,
    ) -> Result<(), SyncError> {
        let ident = new.ident();
        if !ident.resource_version.is_empty() {
            next.clear();
            next.push_str(ident.resource_version);
        }
        let key = event::ident_key(&self.resolved.resource, &ident);
        let namespace = ident.namespace;
        if !(namespace.is_empty() || self.spec.namespace_name_allowed(namespace)) {
            // As `record_changes`: outside the name patterns, untracked.
            if self.recorded(p, &key)?.is_some() {
                self.remove(p, &key);
            } else {
                p.overlay.insert(key, None);
            }
            return Ok(());
        }
        if !self.namespace_allowed(namespace).await? {
            return Ok(());
        }
        let old = self.recorded(p, &key)?;
        match (seen, old) {
            (Seen::Added | Seen::Modified, None) => {
                self.present_spans(p, key, new, None, false, None);
            }
            (Seen::Added | Seen::Modified, Some(State::Spans(old))) => {
                self.present_spans(p, key, new, Some(old), false, None);
            }
            // A state the tree path recorded (an object that was not plain) is diffed as a tree.
            (Seen::Added | Seen::Modified, Some(State::Tree(old, _))) => {
                let (new, json) = new.into_tree();
                self.present(p, &key, new, json, Some(old), false, None);
            }
            (Seen::Deleted, old) if self.selective() => {
                let (obj, _) = new.into_tree();
                let old = old.map(State::into_value);
                match self.still_exists(&obj).await? {
                    Some(current) => self.present(p, &key, current, None, old, false, None),
                    None => {
                        self.emit(p, Op::Deleted, &obj, None, old.as_ref(), false, None);
                        self.remove(p, &key);
                    }
                }
            }
            (Seen::Deleted, _) => {
                self.emit_spans(p, Op::Deleted, &new, new.ident(), None, None, false, None);
                self.remove(p, &key);
            }
            (Seen::Bookmark, _) => {}
        }
        Ok(())
    }

    /// [`present`](Self::present) of an object and its recorded state as bytes and spans.
    fn present_spans(
        &self,
        p: &mut Pending,
        key: String,
        new: Spanned,
        old: Option<Spanned>,
        resync: bool,
        rv: Option<&str>,
    ) {
        // The old state's identity compared as bytes, and read whole only for a deletion: its
        // text checked again was a good part of taking a state out of memory.
        let (uid, version) = new.version();
        if old
            .as_ref()
            .is_some_and(|old| old.version() == (uid, version))
        {
            // Nothing changed; keep what `recorded` took out of the overlay.
            p.overlay.insert(key, old.map(State::Spans));
            return;
        }
        let now = new.ident();
        match &old {
            Some(old) if old.version().0 != uid => {
                // As `present`: the deletion first, dated just before the new object.
                let before = event::replaced_deletion_version(now.resource_version);
                let deleted_at = before.as_deref().or(rv).or(Some(now.resource_version));
                self.emit_spans(
                    p,
                    Op::Deleted,
                    old,
                    old.ident(),
                    None,
                    None,
                    resync,
                    deleted_at,
                );
                self.emit_spans(p, Op::Created, &new, now, None, None, resync, None);
            }
            Some(old) => self.update_spans(p, old, (&new, now), resync),
            None => self.emit_spans(p, Op::Created, &new, now, None, None, resync, None),
        }
        self.put_spans(p, key, new);
    }

    /// What a relist does with one listed object that is bytes and spans ([`plain`](Spanned::plain),
    /// on the [`spans_path`](Self::spans_path)), as the tree path does with its tree: given back
    /// when its indexed state is not plain (a salvage's mark, an object the tree path recorded),
    /// for the tree path. `rv` is the list's revision.
    async fn relist_spans(
        &self,
        p: &mut Pending,
        new: Spanned,
        emit: bool,
        unindexed: bool,
        rv: &str,
    ) -> Result<Relisted, SyncError> {
        let ident = new.ident();
        if !self.namespace_allowed(ident.namespace).await? {
            return Ok(Relisted::Skipped);
        }
        let key = event::ident_key(&self.resolved.resource, &ident);
        if !emit {
            self.put_spans(p, key.clone(), new);
            return Ok(Relisted::Recorded(key));
        }
        let old = if unindexed {
            None
        } else {
            let raw = self
                .journal
                .index_get(&self.resolved.stream, &key)
                .map_err(SyncError::JournalFailed)?;
            match raw {
                None => None,
                Some(raw) => match Spanned::index(&raw).filter(Spanned::plain) {
                    Some(old) => Some(old),
                    None => return Ok(Relisted::Tree(new)),
                },
            }
        };
        self.present_spans(p, key.clone(), new, old, true, Some(rv));
        Ok(Relisted::Recorded(key))
    }

    /// [`put_json`](Self::put_json) of an object as bytes and spans.
    fn put_spans(&self, p: &mut Pending, key: String, new: Spanned) {
        p.index.push(IndexUpdate::Put {
            key: key.clone(),
            object: new.bytes.clone(),
        });
        p.overlay.insert(key, Some(State::Spans(new)));
    }

    /// An update from `old` to `new` (of the same uid): journaled when its patch touches more than
    /// the bookkeeping, which without `changed`, `ignoreFields` or redaction is
    /// [`filter::meaningful_update`]'s answer (see [`patch_decides`](Self::patch_decides)).
    fn update_spans(
        &self,
        p: &mut Pending,
        old: &Spanned,
        (new, now): (&Spanned, Ident<'_>),
        resync: bool,
    ) {
        if !self.spec.ops.contains(&Op::Updated) {
            self.health
                .filtered
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        let mut patch = Vec::with_capacity(256);
        let meaningful = match event::write_diff_spans(&mut patch, old.object(), new.object()) {
            Some(meaningful) => meaningful,
            // Bytes that do not read back as compact JSON (never: they are the decoder's): the
            // patch of the trees.
            None => {
                patch.clear();
                let (old, new) = (old.clone().into_tree().0, new.clone().into_tree().0);
                event::write_diff(&mut patch, &old, &new)
            }
        };
        if meaningful {
            self.emit_spans(
                p,
                Op::Updated,
                new,
                now,
                Some(&patch),
                Some(old),
                resync,
                None,
            );
        } else {
            self.health
                .filtered
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// [`emit_json`](Self::emit_json) of states as bytes and spans: `patch` is the update's, from
    /// `old`.
    #[allow(clippy::too_many_arguments)]
    fn emit_spans(
        &self,
        p: &mut Pending,
        op: Op,
        obj: &Spanned,
        ident: Ident<'_>,
        patch: Option<&[u8]>,
        old: Option<&Spanned>,
        resync: bool,
        rv: Option<&str>,
    ) {
        // No `when` on the spans path: the resource's `events` alone decide.
        if !self.spec.ops.contains(&op) {
            self.health
                .filtered
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        self.health
            .emitted
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (attributes, bytes, layout) = event::normalize_bytes_laid_out(
            &self.resolved.resource,
            event::ObservedBytes {
                op,
                ident,
                object: &obj.bytes,
                old: old.map(|o| o.bytes.as_slice()),
                patch,
                resync,
                resource_version: rv,
                observed_at: jiff::Timestamp::now(),
            },
        );
        // A plain object nests less than `DEEP`, so a valid event reads back.
        let valid = self.counted_and_valid(resync, &attributes);
        p.push_event(bytes, layout.filter(|_| valid));
    }
}

/// What [`Recorder::relist_spans`] did with a listed object.
enum Relisted {
    /// Recorded, under this key.
    Recorded(String),
    /// Outside the namespace selector.
    Skipped,
    /// Left to the tree path.
    Tree(Spanned),
}

/// One LIST page as the API server sends it, its items decoded straight into `Value`s (no typed
/// object in between, and each object keeps the key order the server sent) and their bytes,
/// through `T`: [`Decoded`], with or without managedFields.
#[derive(serde::Deserialize)]
#[serde(bound = "T: serde::de::DeserializeOwned")]
struct Page<T> {
    #[serde(default)]
    metadata: PageMeta,
    #[serde(default = "Option::default")]
    items: Option<Vec<T>>,
}

/// What a relist works on: a page's items as [`Value`]s, each with its bytes when the decoder
/// could write them, or as bytes and spans (see [`Spanned`]).
type Items = Vec<Object>;

/// A listed item as the decoder gives it, as a relist takes it (its shape checked there).
trait Item: serde::de::DeserializeOwned + Send + 'static {
    fn into_item(self) -> Object;

    /// The page read by the [`scan`](super::scan)ner, when it reads it and this decoder has it
    /// read; `None`: serde decodes it.
    fn scan_page(text: &str) -> Option<(PageMeta, Items)> {
        let _ = text;
        None
    }
}

impl<const STRIP: bool> Item for Decoded<STRIP> {
    fn into_item(self) -> Object {
        Object::Tree(self.value, self.json)
    }
}

impl<const STRIP: bool> Item for super::Spans<STRIP> {
    fn into_item(self) -> Object {
        if self.0.plain() {
            Object::Spans(self.0)
        } else {
            let (value, json) = self.0.into_tree();
            Object::Tree(value, json)
        }
    }

    fn scan_page(text: &str) -> Option<(PageMeta, Items)> {
        let (meta, items) = super::scan::page(text, STRIP)?;
        let meta = PageMeta {
            resource_version: meta.resource_version,
            continue_: meta.continue_,
        };
        Some((
            meta,
            items.into_iter().map(|s| Self(s).into_item()).collect(),
        ))
    }
}

/// Reads one LIST page, its items decoded as `T`.
async fn list_page_as<T: Item>(
    client: kube::Client,
    url: String,
    lp: ListParams,
) -> kube::Result<(PageMeta, Items)> {
    let request = kube::core::Request::new(url)
        .list(&lp)
        .map_err(kube::Error::BuildRequest)?;
    // As `Client::request`, the scanner first.
    let text = client.request_text(request).await?;
    if let Some(page) = T::scan_page(&text) {
        return Ok(page);
    }
    let page = serde_json::from_str::<Page<T>>(&text).map_err(|e| {
        tracing::warn!("{}, {:?}", text, e);
        kube::Error::SerdeError(e)
    })?;
    let items = page
        .items
        .unwrap_or_default()
        .into_iter()
        .map(Item::into_item)
        .collect();
    Ok((page.metadata, items))
}

/// Objects nested deeper than this are read back once journaled, to warn of one the readers
/// refuse (`serde_json` parses 127 levels; the event and its `data` take two, a patch two more).
const DEEP: usize = super::spanned::DEEP;

/// How deep a JSON value nests (a scalar is 0). The value was parsed under `serde_json`'s depth
/// limit, so the recursion is bounded.
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(members) => 1 + members.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// What a page's `metadata` says: the snapshot's revision and where the next page starts.
#[derive(serde::Deserialize, Default)]
struct PageMeta {
    #[serde(rename = "resourceVersion", default)]
    resource_version: Option<String>,
    #[serde(rename = "continue", default)]
    continue_: Option<String>,
}

/// Reads one LIST page; managedFields are skipped while it is parsed, unless the resource keeps
/// them; into bytes and spans on the [`spans_path`](Recorder::spans_path).
async fn list_page(
    client: kube::Client,
    url: String,
    lp: ListParams,
    keep_managed_fields: bool,
    spans: bool,
) -> kube::Result<(PageMeta, Items)> {
    match (keep_managed_fields, spans) {
        (true, false) => list_page_as::<Decoded<false>>(client, url, lp).await,
        (false, false) => list_page_as::<Decoded<true>>(client, url, lp).await,
        (true, true) => list_page_as::<super::Spans<false>>(client, url, lp).await,
        (false, true) => list_page_as::<super::Spans<true>>(client, url, lp).await,
    }
}

/// Appends `batch` to the journal, with what it does to the stream's first-sync marker.
fn append_batch(journal: &Journal, batch: Vouched, first_sync: FirstSync) -> Result<(), SyncError> {
    journal
        .append_vouched(batch.batch, first_sync, batch.layouts)
        .map(|_| ())
        .map_err(SyncError::JournalFailed)
}

/// A batch appending on the journal's append thread while the next is recorded: a relist's chunk
/// ([`Recorder::append_beside`]) or a watch batch ([`Appending`]).
struct Chunk {
    appended: tokio::sync::oneshot::Receiver<Result<(), SyncError>>,
    /// Waited for when the chunk is dropped unsettled (its watcher aborted): see [`Landed`].
    _landed: Landed,
}

impl Chunk {
    fn spawn(journal: &Journal, batch: Vouched, first_sync: FirstSync) -> Self {
        let (done, landed) = std::sync::mpsc::channel::<()>();
        let (tx, appended) = tokio::sync::oneshot::channel();
        let Vouched { batch, layouts } = batch;
        journal.append_queued(batch, first_sync, layouts, move |outcome| {
            // A receiver gone is a watcher that no longer waits for it.
            let _ = tx.send(outcome.map(|_| ()).map_err(SyncError::JournalFailed));
            drop(done);
        });
        Self {
            appended,
            _landed: Landed(landed),
        }
    }

    /// Waits for the append and returns what it ran into.
    async fn landed(self) -> Result<(), SyncError> {
        self.appended.await.map_err(|_| SyncError::AppendAborted)?
    }
}

/// Waits for the chunk [`Recorder::append_beside`] left appending, if any.
async fn settle(inflight: &mut Option<Chunk>) -> Result<(), SyncError> {
    match inflight.take() {
        Some(chunk) => chunk.landed().await,
        None => Ok(()),
    }
}

/// The first page is this small (at most), so the first events leave while the rest is read.
const FIRST_PAGE: u32 = 100;

impl Recorder<'_> {
    /// What the index holds for `key` (read from the store, never an overlay), and whether a
    /// salvage left it unconfirmed (its last change may be among the lost events).
    fn indexed(&self, key: &str) -> Result<Option<(Value, bool)>, SyncError> {
        let raw = self
            .journal
            .index_get(&self.resolved.stream, key)
            .map_err(SyncError::JournalFailed)?;
        Ok(raw
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .map(|mut v| {
                let unconfirmed = take_unconfirmed_mark(&mut v);
                (v, unconfirmed)
            }))
    }

    /// What a relist diffs `new` against: the indexed state, except that an unconfirmed entry of
    /// the same object is no base for a diff (the object is sent whole, as `created`, so a
    /// receiver that missed it gets it). A new uid still deletes the old one.
    fn relist_base(&self, key: &str, new: &Value) -> Result<Option<Value>, SyncError> {
        Ok(self
            .indexed(key)?
            .filter(|(old, unconfirmed)| !(*unconfirmed && meta(old, "uid") == meta(new, "uid")))
            .map(|(old, _)| old))
    }
}

/// Lists the resource page by page (`limit`/`continue`, one snapshot) and reconciles each page
/// against the object index in the journal's store as it arrives, appending in chunks, so the
/// first events leave while later pages are still being read; then walks the index for what the
/// list no longer holds. Returns the list's revision, the resume point.
///
/// Memory: one page, one chunk and the set of keys listed (what the walk for deletions needs).
/// Only the last append carries the checkpoint: a crash or a stop mid-way relists again, and the
/// index (updated with every chunk) makes what was already appended come out once. A snapshot that
/// expires mid-list (410) starts the list over at a newer one: what the expired one appended is
/// in the index, so an object unchanged since compares equal (same resourceVersion) and is not
/// emitted again, one changed since is an update against the state already reported, and one gone
/// since is a deletion of an object already reported.
///
/// Given up when `stop` completes (`None` then). A relist that fails or is stopped
/// half-way leaves no chunk appending behind it: it waits for the one in flight before it returns,
/// so whatever runs next on the stream (the watcher that replaces a stopped one, a relist again,
/// `report_gone` once a retired watcher ended) sees the index as the relist left it and never
/// overlaps a write of it. Dropping the relist future instead would detach that write.
pub async fn relist_until(
    rec: &Recorder<'_>,
    page_size: u32,
    stop: impl std::future::Future<Output = ()>,
) -> Option<Result<String, SyncError>> {
    let mut inflight = None;
    let listed = tokio::select! {
        listed = relist_with(rec, page_size, &mut inflight) => Some(listed),
        () = stop => None,
    };
    let settled = settle(&mut inflight).await;
    let rv = match listed? {
        Ok(rv) => rv,
        Err(error) => return Some(Err(error)),
    };
    Some(settled.map(|()| rv))
}

/// [`relist_until`], with the chunk being appended while the next is recorded in `inflight`: a pass
/// reads the index only for keys it lists (each once), never one an earlier chunk of the same pass
/// wrote, so only a restart and the walk for deletions wait for it.
async fn relist_with(
    rec: &Recorder<'_>,
    page_size: u32,
    inflight: &mut Option<Chunk>,
) -> Result<String, SyncError> {
    let r = rec.resolved;
    // A relist rewrites the index: what a watch of this recorder remembered of it goes.
    *rec.lock_known() = Known::default();
    let url = r.api(r.client.clone()).resource_url().to_owned();
    let has_checkpoint = rec
        .journal
        .checkpoint(&r.stream)
        .map_err(SyncError::JournalFailed)?
        .is_some();
    // A first sync that skips the initial state marks its stream until it writes its checkpoint
    // (schema 4): one stopped half-way (a crash, a stop, a failed page) is continued as the first
    // sync it is, silently (what it finds is the initial state, as after a 410 below).
    let marked = rec
        .journal
        .first_sync_skipping(&r.stream)
        .map_err(SyncError::JournalFailed)?;
    // No checkpoint and no marker but an index: a salvaged journal (`herald journal salvage`
    // drops checkpoints it cannot trust), a first sync that emits stopped half-way, or one that a
    // version-3 journal left, not a first start, so the differences are emitted whatever
    // `initialState` says. Decided once: a restarted list (410) appended by the same rule as the
    // expired one.
    let index_empty = match rec
        .journal
        .index_keys(&r.stream)
        .map_err(SyncError::JournalFailed)?
        .next()
    {
        None => true,
        Some(first) => {
            first.map_err(SyncError::JournalFailed)?;
            false
        }
    };
    let first_start = !has_checkpoint && (marked || index_empty);
    let emit = !first_start || rec.spec.initial_emit;
    // Every append before the checkpoint carries the marker when skipping; the one with the
    // checkpoint removes it (and a stray one: a marker beside a checkpoint is never trusted). A
    // marked stream now emitting (its config turned to `emit`) drops the marker with its first
    // append: from then on it has reported objects, and a later skipping start must diff.
    let (during, done) = match (emit, marked) {
        (false, _) => (FirstSync::Skipping, FirstSync::Done),
        (true, true) => (FirstSync::Done, FirstSync::Done),
        (true, false) => (FirstSync::Keep, FirstSync::Keep),
    };
    let keep = r.resource.keep_managed_fields;
    let spans = rec.spans_path();
    let fetch = |lp: ListParams| {
        AbortOnDropHandle::new(tokio::spawn(list_page(
            r.client.clone(),
            url.clone(),
            lp,
            keep,
            spans,
        )))
    };

    // A first pass over an index that was empty: nothing this pass has not listed can be in it
    // (only this recorder writes the stream's index), and a snapshot lists each key once, so no
    // listed key has an entry to read, and there is no walk for deletions (nor a set of listed
    // keys for it): every entry is one this list wrote. The walk reads every index entry through
    // sled's cache, whose evictions lag behind a sequential read: at an initial sync of 100,000
    // objects it held about 35 MiB of index nodes at once, the peak of the whole sync
    // (docs/operations.md, "What is live at 100,000 objects"). A list that starts over (410) ends
    // it: the index then holds what the expired snapshot put there, to be checked against the new.
    let mut unindexed = index_empty;
    // Where the relist's time goes, for its log line: waiting for list pages, waiting for the
    // journal (a chunk still being applied); the rest is recording.
    let began = Instant::now();
    let (mut on_pages, mut on_journal) = (Duration::ZERO, Duration::ZERO);
    let (seen, listed, list_rv) = 'list: loop {
        let waiting = Instant::now();
        settle(inflight).await?;
        on_journal += waiting.elapsed();
        let mut lp = ListParams::default().limit(page_size.min(FIRST_PAGE));
        if let Some(l) = &rec.spec.label_selector {
            lp = lp.labels(l);
        }
        if let Some(f) = &rec.spec.field_selector {
            lp = lp.fields(f);
        }
        // The keys of this snapshot's objects (not of an expired one's): the walk for deletions
        // reads the index for the others only.
        let mut seen: HashSet<Box<str>> = HashSet::new();
        let mut listed = 0usize;
        let mut list_rv: Option<String> = None;
        let mut next = Some(fetch(lp.clone()));
        while let Some(pending) = next.take() {
            let waiting = Instant::now();
            let fetched = pending.await;
            on_pages += waiting.elapsed();
            let (page_meta, items) = match fetched {
                Ok(Ok(page)) => page,
                Ok(Err(kube::Error::Api(s))) if s.code == 404 => return Err(SyncError::NotServed),
                // The snapshot of a long list expired under us: start over (against what the
                // expired one appended).
                Ok(Err(kube::Error::Api(s))) if s.code == 410 => {
                    unindexed = false;
                    continue 'list;
                }
                Ok(Err(e)) => return Err(SyncError::ListFailed(e)),
                Err(_) => return Err(SyncError::ListAborted),
            };
            let rv = list_rv
                .get_or_insert_with(|| page_meta.resource_version.clone().unwrap_or_default());
            // The next page is read (and decoded) while this one is reconciled.
            if let Some(token) = page_meta.continue_.filter(|c| !c.is_empty()) {
                lp = lp.limit(page_size).continue_token(&token);
                next = Some(fetch(lp.clone()));
            }
            let mut p = Pending::default();
            'items: for item in items {
                let key = 'recorded: {
                    let (item, json) = match item {
                        Object::Tree(item, json) => (item, json),
                        Object::Spans(s) => {
                            match rec.relist_spans(&mut p, s, emit, unindexed, rv).await? {
                                Relisted::Skipped => continue 'items,
                                Relisted::Recorded(key) => break 'recorded key,
                                Relisted::Tree(s) => s.into_tree(),
                            }
                        }
                    };
                    // The watch's shape check: a listed object without it would be journaled
                    // unreadable to the index; it is skipped, named as well as it can be.
                    if !super::shaped(&item) {
                        let named = format!(
                            "{}/{}",
                            item.pointer("/metadata/namespace").unwrap_or(&Value::Null),
                            item.pointer("/metadata/name").unwrap_or(&Value::Null)
                        );
                        if let Err(error) = super::WatchedObject::into_value(item) {
                            tracing::warn!(
                                message = "A listed object is not shaped like a Kubernetes object; skipping it.",
                                stream = %r.stream,
                                object = %named,
                                %error,
                            );
                        }
                        continue 'items;
                    }
                    let (new, json) = rec.prepare_json(item, json)?;
                    if !rec.namespace_allowed(meta(&new, "namespace")).await? {
                        continue 'items;
                    }
                    let key = event::object_key(&r.resource, &new);
                    if emit {
                        let old = if unindexed {
                            None
                        } else {
                            rec.relist_base(&key, &new)?
                        };
                        rec.present(&mut p, &key, new, json, old, true, Some(rv.as_str()));
                    } else {
                        rec.put(&mut p, &key, new, json);
                    }
                    key
                };
                // Lookups go to the store: no second copy of every object in the overlay.
                p.overlay.clear();
                listed += 1;
                if !unindexed {
                    seen.insert(key.into_boxed_str());
                }
                if p.chunk_full() {
                    let waiting = Instant::now();
                    rec.append_beside(inflight, std::mem::take(&mut p), during)
                        .await?;
                    on_journal += waiting.elapsed();
                }
            }
            // Each page's changes go out now: the store is what a restarted list compares with.
            let waiting = Instant::now();
            rec.append_beside(inflight, p, during).await?;
            on_journal += waiting.elapsed();
        }
        break (seen, listed, list_rv.unwrap_or_default());
    };

    let waiting = Instant::now();
    settle(inflight).await?;
    on_journal += waiting.elapsed();
    // What the index holds and the list did not: walked lazily, one entry read at a time.
    let mut p = Pending::default();
    let keys = if !unindexed {
        Some(
            rec.journal
                .index_keys(&r.stream)
                .map_err(SyncError::JournalFailed)?,
        )
    } else {
        None
    };
    for key in keys.into_iter().flatten() {
        let key = key.map_err(SyncError::JournalFailed)?;
        if seen.contains(key.as_str()) {
            continue;
        }
        let Some((old, _)) = rec.indexed(&key)? else {
            continue;
        };
        if !emit {
            // A first start that skips the initial state and whose list restarted (410): the
            // entry came from the expired snapshot and was never reported; forgotten quietly.
            rec.remove(&mut p, &key);
        } else if !rec.name_pattern_allowed(&old) {
            // Indexed before the name patterns excluded its namespace: no longer watched, so
            // forgotten without an event (it may well still exist).
            rec.remove(&mut p, &key);
        } else if rec.selective()
            && let Some(current) = rec.still_exists(&old).await?
        {
            // Outside the selection but alive: not a deletion.
            let old = rec.relist_base(&key, &current)?;
            rec.present(&mut p, &key, current, None, old, true, Some(&list_rv));
        } else {
            rec.emit(
                &mut p,
                Op::Deleted,
                &old,
                None,
                Some(&old),
                true,
                Some(&list_rv),
            );
            rec.remove(&mut p, &key);
        }
        p.overlay.clear();
        if p.chunk_full() {
            rec.append_marked(std::mem::take(&mut p), None, during)?;
        }
    }
    let waiting = Instant::now();
    rec.append_marked(p, Some(list_rv.clone()), done)?;
    on_journal += waiting.elapsed();
    tracing::info!(
        message = "Listed and reconciled.",
        resource = %r.display(),
        objects = listed,
        rv = %list_rv,
        took_ms = began.elapsed().as_millis(),
        waited_for_pages_ms = on_pages.as_millis(),
        waited_for_journal_ms = on_journal.as_millis(),
    );
    Ok(list_rv)
}

/// Reports the deletion of every object `stream`'s index still holds and empties the index, in
/// one batch: for a kind of a group pattern whose CRD is gone (its objects went with it) while its
/// watcher could not read their deletions (paused, relisting, or herald was down). `deleted`
/// events with `resync: true`, dated at the stream's checkpoint (the last revision herald read; the
/// object's own without one), so their ids are as deterministic as a relist's. Names come from the
/// stream (`<group>/<plural>/<namespace or *>`) and the indexed objects. Returns how many objects
/// the index held.
pub fn report_gone(
    journal: &Journal,
    spec: &WatchSpec,
    stream: &str,
) -> Result<usize, JournalError> {
    let entries = journal.index_scan(stream)?;
    if entries.is_empty() {
        return Ok(0);
    }
    let rv = journal.checkpoint(stream)?;
    let mut batch = Batch {
        stream: stream.to_string(),
        events: Vec::new(),
        index: Vec::new(),
        checkpoint: None,
        // Every key of the index once.
        listed: true,
    };
    let mut resource: Option<event::Resource> = None;
    for (key, raw) in &entries {
        batch.index.push(IndexUpdate::Remove { key: key.clone() });
        let Ok(mut obj) = serde_json::from_slice::<Value>(raw) else {
            continue;
        };
        take_unconfirmed_mark(&mut obj);
        // The index's digests of redacted values never leave the journal.
        if let Some(o) = obj.as_object_mut() {
            o.remove(REDACTED_DIGESTS);
        }
        // The resource's `when`, as for a relist's deletion (the last known state as both).
        let wanted = spec.when.as_ref().is_none_or(|when| {
            when.evaluate(&Vars {
                object: Some(&obj),
                old_object: Some(&obj),
                op: Op::Deleted,
                resync: true,
                namespace: meta(&obj, "namespace"),
                name: meta(&obj, "name"),
            })
            .unwrap_or(when.on_error == OnError::Emit)
        });
        if !spec.ops.contains(&Op::Deleted) || !wanted {
            continue;
        }
        let resource = resource.get_or_insert_with(|| {
            let mut r = spec.template.clone();
            r.group.clone_from(&spec.group);
            r.plural = stream.split('/').nth(1).unwrap_or_default().to_string();
            r.kind = obj
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            r.version = obj
                .get("apiVersion")
                .and_then(Value::as_str)
                .and_then(|v| v.rsplit('/').next())
                .unwrap_or_default()
                .to_string();
            r.namespaced = !meta(&obj, "namespace").is_empty();
            r
        });
        let ev = event::normalize(
            resource,
            Observed {
                op: Op::Deleted,
                object: &obj,
                old: None,
                resync: true,
                resource_version: rv.as_deref(),
                observed_at: jiff::Timestamp::now(),
            },
        );
        batch.events.push(ev.to_structured_json());
    }
    // The stream has reported its objects' deletions: no longer a first sync that never reported.
    journal.append_with(batch, FirstSync::Done)?;
    Ok(entries.len())
}

#[cfg(test)]
mod tests;
