//! The normalizer: a watched object's change → the CloudEvent of EVENT-FORMAT.md Part 1. Entry point:
//! [`normalize`]; [`prepare`] makes the recorded form (managedFields stripped, redactions applied) that
//! is diffed, stored in the journal's object index and sent.

mod diff;
pub mod filter;

use std::collections::BTreeMap;

use herald_sink_core::event::{CloudEvent, ExtensionValue};
use serde_json::{Map, Value, json};

pub use diff::diff;

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
    if !resource.keep_managed_fields
        && let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut)
    {
        // `remove` swaps the last member into the hole; the event keeps the server's key order.
        meta.shift_remove("managedFields");
    }
    for pointer in &resource.redact {
        if let Some(v) = out.pointer_mut(pointer) {
            *v = Value::String(REDACTED.into());
        }
    }
    out
}

fn meta_str<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `<namespace>/<name>`, or `<name>` for cluster-scoped objects: the subject and the partition key.
pub fn object_key(resource: &Resource, object: &Value) -> String {
    let name = meta_str(object, "name");
    if resource.namespaced {
        format!("{}/{name}", meta_str(object, "namespace"))
    } else {
        name.to_string()
    }
}

/// The resourceVersion zero-padded to 20 digits, so string order is change order.
pub fn sequence(resource_version: &str) -> String {
    match resource_version.parse::<u64>() {
        Ok(n) => format!("{n:020}"),
        Err(_) => resource_version.to_string(),
    }
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
    let (mut event, data) = normalize_parts(resource, ob);
    event.data = Some(data.to_value());
    event
}

/// [`normalize`] and [`CloudEvent::to_structured_json`] in one step, the bytes the journal stores:
/// the same bytes, written from the observed object where it lies instead of from a copy of it
/// in the event (a deep copy of every object was a good part of the normalizer's allocations).
/// The event comes back without `data`, for its attributes (validation, logging).
///
/// # Panics
///
/// Never in practice: `data` is made of JSON values with string keys, which `serde_json` always
/// serializes; a failure there is a broken invariant (`unreachable!`).
pub fn normalize_structured(resource: &Resource, ob: Observed<'_>) -> (CloudEvent, Vec<u8>) {
    normalize_structured_with(resource, ob, None)
}

/// [`normalize_structured`], given the object already serialized (`serde_json::to_vec` of
/// `ob.object`, which the recorder writes to the object index anyway): its bytes go into `data` as
/// they are, so each object is serialized once per change, not twice.
///
/// # Panics
///
/// As [`normalize_structured`]: never in practice.
pub fn normalize_structured_with(
    resource: &Resource,
    ob: Observed<'_>,
    object_json: Option<&[u8]>,
) -> (CloudEvent, Vec<u8>) {
    let (event, data) = normalize_parts(resource, ob);
    let mut out = event.to_structured_json();
    // `{…attributes…}` → `{…attributes…,"data":{…}}`, as the serializer writes `data` last; `data`
    // written member by member as `Data`'s derived serializer writes it.
    if out.last() == Some(&b'}') {
        out.pop();
        let raw = object_json.filter(|_| data.object.is_some());
        let size = raw.map_or(0, <[u8]>::len);
        out.reserve(size + 64);
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
        if let Some(patch) = &data.patch {
            out.extend_from_slice(b",\"patch\":");
            write_json(&mut out, patch);
        }
        out.extend_from_slice(if data.resync {
            b",\"resync\":true}}"
        } else {
            b",\"resync\":false}}"
        });
    }
    (event, out)
}

/// Appends `value` as compact JSON.
fn write_json(out: &mut Vec<u8>, value: &impl serde::Serialize) {
    if let Err(error) = serde_json::to_writer(out, value) {
        // Values and string keys only: serde_json cannot fail on them.
        unreachable!("serializing an event's data failed: {error}");
    }
}

/// An event's `data`, borrowing the object: written by [`normalize_structured_with`] in the order
/// [`normalize`] builds it (`op`, `object`, `oldObject`, `patch`, `resync`; absent parts left out).
struct Data<'a> {
    op: &'static str,
    object: Option<&'a Value>,
    old_object: Option<Option<&'a Value>>,
    patch: Option<Vec<Value>>,
    resync: bool,
}

impl Data<'_> {
    fn to_value(&self) -> Value {
        let mut data = Map::new();
        data.insert("op".into(), json!(self.op));
        if let Some(object) = self.object {
            data.insert("object".into(), object.clone());
        }
        if let Some(old) = self.old_object {
            data.insert("oldObject".into(), old.cloned().unwrap_or(Value::Null));
        }
        if let Some(patch) = &self.patch {
            data.insert("patch".into(), Value::Array(patch.clone()));
        }
        data.insert("resync".into(), json!(self.resync));
        Value::Object(data)
    }
}

/// The event of one observed change without `data`, and its `data`.
fn normalize_parts<'a>(resource: &Resource, ob: Observed<'a>) -> (CloudEvent, Data<'a>) {
    let obj = ob.object;
    let uid = meta_str(obj, "uid");
    let rv = ob
        .resource_version
        .unwrap_or_else(|| meta_str(obj, "resourceVersion"));
    let name = meta_str(obj, "name");
    let namespace = meta_str(obj, "namespace");
    let key = object_key(resource, obj);
    let generation = obj
        .get("metadata")
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .map(|g| g.to_string());

    let mut ext: BTreeMap<String, ExtensionValue> = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        ext.insert(k.to_string(), ExtensionValue::String(v));
    };
    put("k8sgroup", resource.group.clone());
    put("k8sversion", resource.version.clone());
    put("k8skind", resource.kind.clone());
    if resource.namespaced {
        put("k8snamespace", namespace.to_string());
    }
    put("k8sname", name.to_string());
    put("k8suid", uid.to_string());
    put("resourceversion", rv.to_string());
    if let Some(g) = generation {
        put("generation", g);
    }
    put("sequence", sequence(rv));
    put("partitionkey", key.clone());
    ext.insert("resync".into(), ExtensionValue::Bool(ob.resync));

    let p = resource.payload;
    let data = Data {
        op: ob.op.as_str(),
        object: p.object.then_some(obj),
        old_object: p.old_object.then_some(ob.old),
        patch: (p.patch && ob.op == Op::Updated)
            .then(|| ob.old.map(|old| diff(old, obj)).unwrap_or_default()),
        resync: ob.resync,
    };

    let event = CloudEvent {
        id: format!("{uid}:{rv}:{}", ob.op.as_str()),
        source: resource.source(),
        ty: format!("{}.{}", resource.type_prefix, ob.op.as_str()),
        subject: Some(key),
        time: Some(
            ob.observed_at
                .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
                .to_string(),
        ),
        datacontenttype: Some("application/json".into()),
        dataschema: Some(DATASCHEMA.into()),
        extensions: ext,
        data: None,
    };
    (event, data)
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
