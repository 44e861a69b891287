//! The normalizer: a watched object's change → the CloudEvent of EVENT-FORMAT.md Part 1. Entry point:
//! [`normalize`]; [`prepare`] makes the recorded form (managedFields stripped, redactions applied) that
//! is diffed, stored in the journal's object index and sent.

mod diff;
pub mod filter;
pub mod members;
pub mod spans;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::ops::Range;

use herald_sink_core::Layout;
use herald_sink_core::event::{CloudEvent, ExtensionValue};
use serde_json::{Map, Value, json};

pub use diff::{diff, write_diff, write_diff_spans};

/// The `dataschema` of herald's change payload.
pub const DATASCHEMA: &str = "urn:herald:change:v1";
/// The default `type` prefix.
pub const DEFAULT_TYPE_PREFIX: &str = "dev.herald.resource";
/// What a redacted value is replaced with.
pub const REDACTED: &str = "[redacted]";

/// What happened to an object, as consumers see it: its lifecycle, never selector membership.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// The object came into existence (or was first seen, with `resync`).
    Created,
    /// The object changed.
    Updated,
    /// The object is gone.
    Deleted,
}

impl From<crate::config::EventType> for Op {
    fn from(e: crate::config::EventType) -> Self {
        match e {
            crate::config::EventType::Created => Self::Created,
            crate::config::EventType::Updated => Self::Updated,
            crate::config::EventType::Deleted => Self::Deleted,
        }
    }
}

impl Op {
    /// `created`, `updated` or `deleted`.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Created => "created",
            Op::Updated => "updated",
            Op::Deleted => "deleted",
        }
    }
}

/// Which parts of the object go into `data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Payload {
    /// The new state (for deletions: the last known state).
    pub object: bool,
    /// The previous recorded state (doubles the size, so off by default).
    pub old_object: bool,
    /// The JSON patch from the previous to the new state (updates only).
    pub patch: bool,
}

impl Payload {
    /// The default: `object` + `patch`.
    pub const DEFAULT: Payload = Payload {
        object: true,
        old_object: false,
        patch: true,
    };
    /// Reference-only: `data` is `{"op", "resync"}`.
    pub const REFERENCE: Payload = Payload {
        object: false,
        old_object: false,
        patch: false,
    };
}

/// What the normalizer needs to know about a watched resource.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    /// `cluster.name` from the configuration.
    pub cluster: String,
    /// API group (`""` for the core group, written `core` in `source`).
    pub group: String,
    /// The version being watched.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural resource name.
    pub plural: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// `type` prefix; `<prefix>.<op>`.
    pub type_prefix: String,
    /// Payload parts.
    pub payload: Payload,
    /// JSON pointers whose values are replaced by [`REDACTED`] before anything is stored or sent.
    pub redact: Vec<String>,
    /// Keep `metadata.managedFields` (stripped by default: it is large and about writers, not state).
    pub keep_managed_fields: bool,
}

impl Resource {
    /// `k8s://<cluster>/<group>/<plural>`; no version, so ids and sources survive a version change.
    pub fn source(&self) -> String {
        source(&self.cluster, &self.group, &self.plural)
    }
}

/// `k8s://<cluster>/<group>/<plural>`, the core group (`""`) written `core`.
pub fn source(cluster: &str, group: &str, plural: &str) -> String {
    let group = if group.is_empty() { "core" } else { group };
    format!("k8s://{cluster}/{group}/{plural}")
}

/// One observed change, ready to normalize.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    /// What happened.
    pub op: Op,
    /// The new state in recorded form (see [`prepare`]); for a deletion the last known state.
    pub object: &'a Value,
    /// The previous recorded state, if herald had one.
    pub old: Option<&'a Value>,
    /// Synthesized at first start or after a relist rather than seen on a watch.
    pub resync: bool,
    /// The resourceVersion for the id when it is not the object's own: a deletion missed during a gap
    /// uses the relist's revision, or [`replaced_deletion_version`] when another object took the name.
    pub resource_version: Option<&'a str>,
    /// When herald observed it; `time` is frozen at observation.
    pub observed_at: jiff::Timestamp,
}

/// The recorded form of an object: `managedFields` stripped (unless kept) and redactions applied.
pub fn prepare(resource: &Resource, object: Value) -> Value {
    let mut out = object;
    prepare_in_place(resource, &mut out);
    out
}

/// [`prepare`] in place; says whether it changed anything (the recorder keeps the bytes the
/// watch's decoder wrote for the object only when it did not).
pub fn prepare_in_place(resource: &Resource, out: &mut Value) -> bool {
    let mut changed = false;
    // Looked for by a scan first: the watch's decoder has skipped them already, and a lookup by
    // key hashes it.
    if !resource.keep_managed_fields
        && members::get(out, "metadata").is_some_and(|m| members::get(m, "managedFields").is_some())
        && let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut)
    {
        // `remove` swaps the last member into the hole; the event keeps the server's key order.
        changed |= meta.shift_remove("managedFields").is_some();
    }
    for pointer in &resource.redact {
        if let Some(v) = out.pointer_mut(pointer) {
            *v = Value::String(REDACTED.into());
            changed = true;
        }
    }
    changed
}

use members::meta_str;

/// `<namespace>/<name>`, or `<name>` for cluster-scoped objects: the subject and the partition key.
pub fn object_key(resource: &Resource, object: &Value) -> String {
    let name = meta_str(object, "name");
    if resource.namespaced {
        // Twice per change: concatenated without `format!`'s machinery.
        let namespace = meta_str(object, "namespace");
        let mut key = String::with_capacity(namespace.len() + 1 + name.len());
        key.push_str(namespace);
        key.push('/');
        key.push_str(name);
        key
    } else {
        name.to_string()
    }
}

/// The resourceVersion zero-padded to 20 digits, so string order is change order.
pub fn sequence(resource_version: &str) -> String {
    match resource_version.parse::<u64>() {
        Ok(n) => String::from_utf8_lossy(&padded(n)).into_owned(),
        Err(_) => resource_version.to_string(),
    }
}

/// `n` in decimal, zero-padded to 20 digits (`u64::MAX` has 20): `format!("{n:020}")` without
/// the formatter, which was a good part of writing each event's attributes.
fn padded(mut n: u64) -> [u8; 20] {
    let mut digits = [b'0'; 20];
    for d in digits.iter_mut().rev() {
        // `n % 10` is below 10: the cast cannot truncate.
        #[allow(clippy::cast_possible_truncation)]
        let digit = (n % 10) as u8;
        *d = b'0' + digit;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    digits
}

/// Appends `time` as [`TIME_FORMAT`] writes it, from its civil fields instead of through
/// `strftime`'s parser of the format (years outside 0..=9999, which `%Y` writes otherwise, go
/// through `strftime`).
fn write_time(out: &mut Vec<u8>, time: jiff::Timestamp) {
    let t = jiff::tz::Offset::UTC.to_datetime(time);
    let Ok(year) = u16::try_from(t.year()) else {
        let _ = write!(out, "{}", time.strftime(TIME_FORMAT));
        return;
    };
    if year > 9999 {
        let _ = write!(out, "{}", time.strftime(TIME_FORMAT));
        return;
    }
    let two = |out: &mut Vec<u8>, v: i8| {
        let v = v.unsigned_abs();
        out.extend_from_slice(&[b'0' + v / 10, b'0' + v % 10]);
    };
    let year = padded(u64::from(year));
    out.extend_from_slice(&year[16..]);
    out.push(b'-');
    two(out, t.month());
    out.push(b'-');
    two(out, t.day());
    out.push(b'T');
    two(out, t.hour());
    out.push(b':');
    two(out, t.minute());
    out.push(b':');
    two(out, t.second());
    out.push(b'.');
    let ms = padded(u64::from(t.millisecond().unsigned_abs()));
    out.extend_from_slice(&ms[17..]);
    out.push(b'Z');
}

/// The resourceVersion of a synthesized `deleted` for an object that another one (another uid)
/// replaced under the same name while herald was not looking: one less than the new object's.
///
/// The real deletion came after the old object's last recorded state and before the new object
/// existed, so this revision sorts between the two (`sequence` keeps rising within the
/// `partitionkey`), and it depends on the cluster's state alone, so every relist of the same state
/// gives the same id. The list's revision would not do: it is later than the new object's own, so
/// the deletion would sort after the creation. `None` when the resourceVersion is not a positive
/// integer (resourceVersions are opaque to clients; etcd's are integers).
pub fn replaced_deletion_version(new_resource_version: &str) -> Option<String> {
    let n = new_resource_version.parse::<u64>().ok()?;
    n.checked_sub(1).map(|before| before.to_string())
}

/// Whether two recorded states differ only in `status` (and the bookkeeping that moves with every write).
pub fn status_only_change(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| -> Value {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("status");
            if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("resourceVersion");
                meta.remove("managedFields");
            }
        }
        v
    };
    old.get("status") != new.get("status") && strip(old) == strip(new)
}

/// The CloudEvent of one observed change (EVENT-FORMAT.md Part 1).
pub fn normalize(resource: &Resource, ob: Observed<'_>) -> CloudEvent {
    let (attributes, data) = normalize_parts(resource, ob);
    let mut event = attributes.event();
    event.data = Some(data.to_value(ob.object));
    event
}

/// [`normalize`] and [`CloudEvent::to_structured_json`] in one step, the bytes the journal stores:
/// the same bytes, written from the observed object where it lies instead of from a copy of it
/// in the event (a deep copy of every object was a good part of the normalizer's allocations),
/// and the attributes written from what they are made of (see [`Attributes`]). The attributes come
/// back too (validation, logging).
///
/// # Panics
///
/// Never in practice: `data` is made of JSON values with string keys, which `serde_json` always
/// serializes; a failure there is a broken invariant (`unreachable!`).
pub fn normalize_structured<'a>(
    resource: &'a Resource,
    ob: Observed<'a>,
) -> (Attributes<'a>, Vec<u8>) {
    normalize_structured_with(resource, ob, None, None)
}

/// [`normalize_structured`], given the object already serialized (`serde_json::to_vec` of
/// `ob.object`, which the recorder writes to the object index anyway): its bytes go into `data` as
/// they are, so each object is serialized once per change, not twice. Likewise `patch_json`, the
/// patch from `ob.old` already written by [`write_diff`] (the recorder writes it to decide whether
/// an update is worth an event).
///
/// # Panics
///
/// As [`normalize_structured`]: never in practice.
pub fn normalize_structured_with<'a>(
    resource: &'a Resource,
    ob: Observed<'a>,
    object_json: Option<&[u8]>,
    patch_json: Option<&[u8]>,
) -> (Attributes<'a>, Vec<u8>) {
    let (attributes, bytes, _) =
        normalize_structured_laid_out(resource, ob, object_json, patch_json);
    (attributes, bytes)
}

/// [`normalize_structured_with`], and where it wrote what delivery reads of every event (its
/// [`Layout`]; none when one of those strings holds an escape): the recorder hands that to the
/// journal's memory beside the bytes for an event it vouches for, so a reader at the head need not
/// read it again (ADR 0031).
///
/// # Panics
///
/// As [`normalize_structured`]: never in practice.
pub fn normalize_structured_laid_out<'a>(
    resource: &'a Resource,
    ob: Observed<'a>,
    object_json: Option<&[u8]>,
    patch_json: Option<&[u8]>,
) -> (Attributes<'a>, Vec<u8>, Option<Layout>) {
    let (attributes, data) = normalize_parts(resource, ob);
    let raw = object_json.filter(|_| data.object.is_some());
    let mut out = Vec::with_capacity(raw.map_or(0, <[u8]>::len) + attributes.len_hint());
    // `{…attributes…,"data":{…}}`, as the event's serializer writes it (`data` last); `data`
    // written member by member as `Data`'s derived serializer writes it.
    let marks = attributes.write_json(&mut out);
    let data_at = out.len() + b",\"data\":".len();
    out.extend_from_slice(b",\"data\":{\"op\":\"");
    // `created`, `updated` or `deleted`: nothing to escape.
    out.extend_from_slice(data.op.as_bytes());
    out.push(b'"');
    if let Some(object) = data.object {
        out.extend_from_slice(b",\"object\":");
        match raw {
            Some(raw) => out.extend_from_slice(raw),
            None => write_json(&mut out, object),
        }
    }
    if let Some(old) = data.old_object {
        out.extend_from_slice(b",\"oldObject\":");
        write_json(&mut out, &old);
    }
    if let Some(old) = data.patch {
        out.extend_from_slice(b",\"patch\":");
        match (old, patch_json) {
            (Some(_), Some(patch)) => out.extend_from_slice(patch),
            (Some(old), None) => {
                diff::write_diff(&mut out, old, ob.object);
            }
            (None, _) => out.extend_from_slice(b"[]"),
        }
    }
    out.extend_from_slice(if data.resync {
        b",\"resync\":true}}"
    } else {
        b",\"resync\":false}}"
    });
    let layout = marks.layout(&out, data_at..out.len() - 1);
    (attributes, out, layout)
}

/// What a change's attributes are made of, read from an object kept as its bytes
/// ([`crate::watch::Spanned`]) rather than from a [`Value`]: its `metadata`'s strings (empty when
/// absent) and `generation` (as [`Value::as_i64`] reads it).
#[derive(Debug, Clone, Copy)]
pub struct Ident<'a> {
    /// `metadata.uid`.
    pub uid: &'a str,
    /// `metadata.resourceVersion`.
    pub resource_version: &'a str,
    /// `metadata.name`.
    pub name: &'a str,
    /// `metadata.namespace`.
    pub namespace: &'a str,
    /// `metadata.generation`.
    pub generation: Option<i64>,
}

/// `<namespace>/<name>` (or `<name>`) of an object known by its [`Ident`], as [`object_key`].
pub fn ident_key(resource: &Resource, ident: &Ident<'_>) -> String {
    if resource.namespaced {
        let mut key = String::with_capacity(ident.namespace.len() + 1 + ident.name.len());
        key.push_str(ident.namespace);
        key.push('/');
        key.push_str(ident.name);
        key
    } else {
        ident.name.to_string()
    }
}

/// One observed change of an object kept as its bytes: what [`Observed`] says of a [`Value`].
#[derive(Debug, Clone, Copy)]
pub struct ObservedBytes<'a> {
    /// What happened.
    pub op: Op,
    /// The new state's identity (for a deletion: the last known state's).
    pub ident: Ident<'a>,
    /// The new state, as `serde_json::to_vec` writes it.
    pub object: &'a [u8],
    /// The previous recorded state, written likewise, if herald had one.
    pub old: Option<&'a [u8]>,
    /// The patch from `old` to `object` ([`write_diff_spans`]), for an update with `old`.
    pub patch: Option<&'a [u8]>,
    /// As [`Observed::resync`].
    pub resync: bool,
    /// As [`Observed::resource_version`].
    pub resource_version: Option<&'a str>,
    /// As [`Observed::observed_at`].
    pub observed_at: jiff::Timestamp,
}

/// [`normalize_structured_with`] of a change whose states are bytes: the same bytes, written from
/// the states' bytes and their [`Ident`] (the recorder keeps states as bytes where nothing needs
/// their tree; see `watch::Spanned`).
pub fn normalize_bytes<'a>(
    resource: &'a Resource,
    ob: ObservedBytes<'a>,
) -> (Attributes<'a>, Vec<u8>) {
    let (attributes, bytes, _) = normalize_bytes_laid_out(resource, ob);
    (attributes, bytes)
}

/// [`normalize_bytes`], and the event's [`Layout`], as [`normalize_structured_laid_out`].
pub fn normalize_bytes_laid_out<'a>(
    resource: &'a Resource,
    ob: ObservedBytes<'a>,
) -> (Attributes<'a>, Vec<u8>, Option<Layout>) {
    let attributes = Attributes {
        resource,
        op: ob.op,
        uid: ob.ident.uid,
        rv: ob.resource_version.unwrap_or(ob.ident.resource_version),
        name: ob.ident.name,
        namespace: ob.ident.namespace,
        key: ident_key(resource, &ob.ident),
        generation: ob.ident.generation,
        resync: ob.resync,
        observed_at: ob.observed_at,
    };
    let p = resource.payload;
    let mut out = Vec::with_capacity(
        if p.object { ob.object.len() } else { 0 }
            + if p.old_object {
                ob.old.map_or(4, <[u8]>::len)
            } else {
                0
            }
            + ob.patch.map_or(0, <[u8]>::len)
            + attributes.len_hint(),
    );
    // As `normalize_structured_with` writes the attributes and `data`.
    let marks = attributes.write_json(&mut out);
    let data_at = out.len() + b",\"data\":".len();
    out.extend_from_slice(b",\"data\":{\"op\":\"");
    out.extend_from_slice(ob.op.as_str().as_bytes());
    out.push(b'"');
    if p.object {
        out.extend_from_slice(b",\"object\":");
        out.extend_from_slice(ob.object);
    }
    if p.old_object {
        out.extend_from_slice(b",\"oldObject\":");
        out.extend_from_slice(ob.old.unwrap_or(b"null"));
    }
    if p.patch && ob.op == Op::Updated {
        out.extend_from_slice(b",\"patch\":");
        match (ob.old, ob.patch) {
            (Some(_), Some(patch)) => out.extend_from_slice(patch),
            // Never asked for: an update with a recorded state comes with its patch.
            (Some(old), None) => {
                let old = serde_json::from_slice::<Value>(old).unwrap_or(Value::Null);
                let new = serde_json::from_slice::<Value>(ob.object).unwrap_or(Value::Null);
                diff::write_diff(&mut out, &old, &new);
            }
            (None, _) => out.extend_from_slice(b"[]"),
        }
    }
    out.extend_from_slice(if ob.resync {
        b",\"resync\":true}}"
    } else {
        b",\"resync\":false}}"
    });
    let layout = marks.layout(&out, data_at..out.len() - 1);
    (attributes, out, layout)
}

/// Appends `value` as compact JSON.
fn write_json(out: &mut Vec<u8>, value: &impl serde::Serialize) {
    if let Err(error) = serde_json::to_writer(out, value) {
        // Values and string keys only: serde_json cannot fail on them.
        unreachable!("serializing an event's data failed: {error}");
    }
}

/// Appends `text` as the inside of a JSON string, escaped as `serde_json` escapes it (`"` and `\`,
/// the short escapes `\b \t \n \f \r`, other control characters as `\u00xx`), so the bytes are
/// those the event's serializer writes.
pub(crate) fn write_escaped(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut rest = text.as_bytes();
    // The run up to the next byte to escape copied at once, found eight bytes a step (the bytes
    // escaped are those the delivery scan stops at): most strings have none, and a byte-by-byte
    // loop was most of writing an event's attributes and the watch decoder's strings.
    while let Some(i) = herald_sink_core::journaled::string_stop(rest) {
        let (run, tail) = rest.split_at(i);
        out.extend_from_slice(run);
        let Some((&b, tail)) = tail.split_first() else {
            return;
        };
        let short = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            0x08 => b'b',
            0x09 => b't',
            0x0A => b'n',
            0x0C => b'f',
            0x0D => b'r',
            _ => b'u',
        };
        out.push(b'\\');
        out.push(short);
        if short == b'u' {
            out.extend_from_slice(&[
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xF)],
            ]);
        }
        rest = tail;
    }
    out.extend_from_slice(rest);
}

/// Appends `,"name":"value"` (`name` needs no escaping).
fn write_member(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":\"");
    write_escaped(out, value);
    out.push(b'"');
}

/// An event's `data`, borrowing the object: written by [`normalize_structured_with`] in the order
/// [`normalize`] builds it (`op`, `object`, `oldObject`, `patch`, `resync`; absent parts left out).
struct Data<'a> {
    op: &'static str,
    object: Option<&'a Value>,
    old_object: Option<Option<&'a Value>>,
    /// Whether `data` has a patch, and the state it is from (none: an empty patch).
    patch: Option<Option<&'a Value>>,
    resync: bool,
}

impl Data<'_> {
    fn to_value(&self, object: &Value) -> Value {
        let mut data = Map::new();
        data.insert("op".into(), json!(self.op));
        if let Some(object) = self.object {
            data.insert("object".into(), object.clone());
        }
        if let Some(old) = self.old_object {
            data.insert("oldObject".into(), old.cloned().unwrap_or(Value::Null));
        }
        if let Some(old) = self.patch {
            let patch = old.map(|old| diff(old, object)).unwrap_or_default();
            data.insert("patch".into(), Value::Array(patch));
        }
        data.insert("resync".into(), json!(self.resync));
        Value::Object(data)
    }
}

/// The attributes of the event of one observed change, borrowed from the object and the resource:
/// [`normalize_structured_with`] writes them straight into the journaled bytes, and a
/// [`CloudEvent`] (with a map of owned strings, about thirty allocations) is built only where one
/// is asked for ([`event`](Self::event)). Written in the order the event's serializer writes
/// them: the context attributes, then the extensions by name.
#[derive(Debug, Clone)]
pub struct Attributes<'a> {
    resource: &'a Resource,
    op: Op,
    uid: &'a str,
    rv: &'a str,
    name: &'a str,
    namespace: &'a str,
    key: String,
    generation: Option<i64>,
    resync: bool,
    observed_at: jiff::Timestamp,
}

/// `time`'s format: RFC 3339 in UTC, milliseconds.
const TIME_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.3fZ";

impl<'a> Attributes<'a> {
    fn of(resource: &'a Resource, ob: Observed<'a>) -> Self {
        let obj = ob.object;
        Self {
            resource,
            op: ob.op,
            uid: meta_str(obj, "uid"),
            rv: ob
                .resource_version
                .unwrap_or_else(|| meta_str(obj, "resourceVersion")),
            name: meta_str(obj, "name"),
            namespace: meta_str(obj, "namespace"),
            key: object_key(resource, obj),
            generation: members::get(obj, "metadata")
                .and_then(|m| members::get(m, "generation"))
                .and_then(Value::as_i64),
            resync: ob.resync,
            observed_at: ob.observed_at,
        }
    }

    /// The event's `id`.
    pub fn id(&self) -> String {
        format!("{}:{}:{}", self.uid, self.rv, self.op.as_str())
    }

    /// The event's `subject` (and `partitionkey`): the object's key.
    pub fn subject(&self) -> &str {
        &self.key
    }

    /// The event without `data`, as [`normalize`] makes it.
    pub fn event(&self) -> CloudEvent {
        let resource = self.resource;
        let mut ext: BTreeMap<String, ExtensionValue> = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            ext.insert(k.to_string(), ExtensionValue::String(v));
        };
        put("k8sgroup", resource.group.clone());
        put("k8sversion", resource.version.clone());
        put("k8skind", resource.kind.clone());
        if resource.namespaced {
            put("k8snamespace", self.namespace.to_string());
        }
        put("k8sname", self.name.to_string());
        put("k8suid", self.uid.to_string());
        put("resourceversion", self.rv.to_string());
        if let Some(g) = self.generation {
            put("generation", g.to_string());
        }
        put("sequence", sequence(self.rv));
        put("partitionkey", self.key.clone());
        ext.insert("resync".into(), ExtensionValue::Bool(self.resync));
        CloudEvent {
            id: self.id(),
            source: resource.source(),
            ty: format!("{}.{}", resource.type_prefix, self.op.as_str()),
            subject: Some(self.key.clone()),
            time: Some(self.observed_at.strftime(TIME_FORMAT).to_string()),
            datacontenttype: Some("application/json".into()),
            dataschema: Some(DATASCHEMA.into()),
            extensions: ext,
            data: None,
        }
    }

    /// [`CloudEvent::validate`] of [`event`](Self::event), building the event only when it can
    /// fail: every attribute but the object's key (`subject`, `partitionkey`) and its
    /// resourceVersion (`sequence`) is non-empty and well-formed however the object looks (a
    /// scheme or a separator in it, a formatted time, constants, fixed extension names). The
    /// property tests hold both verdicts equal on arbitrary objects.
    ///
    /// # Errors
    ///
    /// The first rule the event breaks.
    pub fn validate(&self) -> Result<(), herald_sink_core::ValidationError> {
        if self.key.is_empty() || self.rv.is_empty() {
            return self.event().validate();
        }
        Ok(())
    }

    /// At least what [`write_json`](Self::write_json) writes and `data`'s own members (not its
    /// object, old object or patch), unless a string needs escapes: a first guess short of it
    /// (a fixed 640 bytes before) grew the event's buffer, a copy of the whole event, every time.
    fn len_hint(&self) -> usize {
        let r = self.resource;
        // The names, quotes and separators, `time`, `sequence`, `generation` and `data`'s `op`
        // and `resync`, with room to spare.
        512 + 2 * (self.uid.len() + self.key.len() + r.group.len())
            + 3 * self.rv.len()
            + self.name.len()
            + self.namespace.len()
            + r.cluster.len()
            + r.plural.len()
            + r.type_prefix.len()
            + r.kind.len()
            + r.version.len()
    }

    /// Writes `{` and the attributes, comma-separated, as the event's serializer writes them: the
    /// caller appends `data` and the closing brace. Returns where it wrote the strings delivery
    /// reads of every event ([`Layout`]).
    fn write_json(&self, out: &mut Vec<u8>) -> Marks {
        let resource = self.resource;
        let op = self.op.as_str();
        // `id` and `source` written from their parts (`:` and `/` need no escaping), as
        // [`id`](Self::id) and [`Resource::source`] make them.
        out.extend_from_slice(b"{\"specversion\":\"1.0\",\"id\":\"");
        let id = out.len();
        write_escaped(out, self.uid);
        out.push(b':');
        write_escaped(out, self.rv);
        out.push(b':');
        out.extend_from_slice(op.as_bytes());
        let id = id..out.len();
        out.extend_from_slice(b"\",\"source\":\"");
        let source = out.len();
        out.extend_from_slice(b"k8s://");
        write_escaped(out, &resource.cluster);
        out.push(b'/');
        write_escaped(
            out,
            if resource.group.is_empty() {
                "core"
            } else {
                &resource.group
            },
        );
        out.push(b'/');
        write_escaped(out, &resource.plural);
        let source = source..out.len();
        out.extend_from_slice(b"\",\"type\":\"");
        let ty = out.len();
        write_escaped(out, &resource.type_prefix);
        out.push(b'.');
        out.extend_from_slice(op.as_bytes());
        let ty = ty..out.len();
        out.push(b'"');
        write_member(out, "subject", &self.key);
        out.extend_from_slice(b",\"time\":\"");
        let time = out.len();
        // Digits and separators only: nothing to escape.
        write_time(out, self.observed_at);
        let time = time..out.len();
        out.extend_from_slice(b"\",\"datacontenttype\":\"application/json\",\"dataschema\":\"");
        out.extend_from_slice(DATASCHEMA.as_bytes());
        out.push(b'"');
        // The extensions in name order (the event's `BTreeMap`).
        if let Some(g) = self.generation {
            out.extend_from_slice(b",\"generation\":\"");
            write_json(out, &g);
            out.push(b'"');
        }
        write_member(out, "k8sgroup", &resource.group);
        write_member(out, "k8skind", &resource.kind);
        write_member(out, "k8sname", self.name);
        if resource.namespaced {
            write_member(out, "k8snamespace", self.namespace);
        }
        write_member(out, "k8suid", self.uid);
        write_member(out, "k8sversion", &resource.version);
        // `write_member`'s bytes, its string's place noted.
        out.extend_from_slice(b",\"partitionkey\":\"");
        let partition_key = out.len();
        write_escaped(out, &self.key);
        let partition_key = partition_key..out.len();
        out.push(b'"');
        write_member(out, "resourceversion", self.rv);
        out.extend_from_slice(if self.resync {
            b",\"resync\":true"
        } else {
            b",\"resync\":false"
        });
        match self.rv.parse::<u64>() {
            Ok(n) => {
                out.extend_from_slice(b",\"sequence\":\"");
                out.extend_from_slice(&padded(n));
                out.push(b'"');
            }
            Err(_) => write_member(out, "sequence", self.rv),
        }
        Marks {
            id,
            source,
            ty,
            partition_key,
            time,
        }
    }
}

/// Where [`Attributes::write_json`] wrote the strings of a [`Layout`].
struct Marks {
    id: Range<usize>,
    source: Range<usize>,
    ty: Range<usize>,
    partition_key: Range<usize>,
    time: Range<usize>,
}

impl Marks {
    /// The event's [`Layout`], `data` lying at `data` in `out`: none when one of the strings
    /// holds an escape (a reader finds it escaped, not where it reads), so a reader reads it.
    fn layout(self, out: &[u8], data: Range<usize>) -> Option<Layout> {
        let plain = |r: &Range<usize>| {
            out.get(r.clone())
                .is_some_and(|b| herald_sink_core::journaled::string_stop(b).is_none())
        };
        if ![
            &self.id,
            &self.source,
            &self.ty,
            &self.partition_key,
            &self.time,
        ]
        .into_iter()
        .all(plain)
        {
            return None;
        }
        Layout::new(
            self.id,
            self.source,
            self.ty,
            self.partition_key,
            self.time,
            data,
        )
    }
}

/// The attributes of one observed change's event, and its `data`.
fn normalize_parts<'a>(resource: &'a Resource, ob: Observed<'a>) -> (Attributes<'a>, Data<'a>) {
    let obj = ob.object;
    let p = resource.payload;
    let data = Data {
        op: ob.op.as_str(),
        object: p.object.then_some(obj),
        old_object: p.old_object.then_some(ob.old),
        patch: (p.patch && ob.op == Op::Updated).then_some(ob.old),
        resync: ob.resync,
    };
    (Attributes::of(resource, ob), data)
}

/// The reference-only form of an event whose payload is too large for a sink: `data` is `{"op",
/// "resync"}` and the `truncated` extension says why.
pub fn to_reference(event: &CloudEvent) -> CloudEvent {
    let mut out = event.clone();
    let data = event.data.as_ref();
    let op = data
        .and_then(|d| d.get("op"))
        .cloned()
        .unwrap_or(Value::Null);
    let resync = data
        .and_then(|d| d.get("resync"))
        .cloned()
        .unwrap_or(Value::Bool(false));
    out.data = Some(json!({"op": op, "resync": resync}));
    out.extensions
        .insert("truncated".into(), ExtensionValue::String("true".into()));
    out
}

#[cfg(test)]
mod tests;
