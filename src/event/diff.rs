//! RFC 6902 JSON patches between two recorded states, for the `patch` part of an event's data.

use serde_json::{Map, Value, json};

use super::spans::{Cursor, Member, Members, at, key_text, same};
use crate::bytes::{common_prefix, common_suffix};

/// The operations that turn `old` into `new`. Objects are compared key by key; arrays and scalars that
/// differ are replaced whole (an element-wise array diff is ambiguous and rarely what a reader wants).
pub fn diff(old: &Value, new: &Value) -> Vec<Value> {
    let mut ops = Vec::new();
    walk(old, new, &mut String::new(), &mut |op, path, value| {
        ops.push(match value {
            Some(value) => json!({"op": op, "path": path, "value": value}),
            None => json!({"op": op, "path": path}),
        });
    });
    ops
}

/// [`diff`] written as JSON into `out`, the bytes `serde_json` writes for [`diff`]'s value, without
/// building it (a map and a copy of the new value per operation, for the journaled bytes alone).
///
/// Returns whether an operation touches anything but the bookkeeping every write moves
/// (`metadata.resourceVersion`, `metadata.managedFields`:
/// [`ALWAYS_IGNORED`](super::filter::ALWAYS_IGNORED)): for two objects with `metadata` objects,
/// what [`meaningful_update`](super::filter::meaningful_update) answers without `changed` or
/// `ignoreFields`, so the recorder walks the two states once for both.
pub fn write_diff(out: &mut Vec<u8>, old: &Value, new: &Value) -> bool {
    let mut patch = PatchOut::open(out);
    // Room for a deep path at once, rather than growing it key by key.
    walk(
        old,
        new,
        &mut String::with_capacity(128),
        &mut |op, path, value| {
            patch.op(
                op,
                path,
                value.map(|v| move |out: &mut Vec<u8>| super::write_json(out, v)),
            );
        },
    );
    patch.close()
}

/// A patch being written as JSON, one operation at a time, for [`write_diff`] and
/// [`write_diff_spans`]: the same bytes whichever walk found the operations.
struct PatchOut<'o> {
    out: &'o mut Vec<u8>,
    first: bool,
    /// An operation touched more than the bookkeeping ([`bookkeeping`]).
    outside: bool,
}

impl<'o> PatchOut<'o> {
    fn open(out: &'o mut Vec<u8>) -> Self {
        out.push(b'[');
        Self {
            out,
            first: true,
            outside: false,
        }
    }

    /// One operation; `value` writes its value's JSON (none for `remove`).
    fn op(&mut self, op: &str, path: &str, value: Option<impl FnOnce(&mut Vec<u8>)>) {
        self.outside = self.outside || !bookkeeping(path);
        if !std::mem::take(&mut self.first) {
            self.out.push(b',');
        }
        self.out.extend_from_slice(b"{\"op\":\"");
        self.out.extend_from_slice(op.as_bytes());
        self.out.extend_from_slice(b"\",\"path\":\"");
        super::write_escaped(self.out, path);
        self.out.push(b'"');
        if let Some(value) = value {
            self.out.extend_from_slice(b",\"value\":");
            value(self.out);
        }
        self.out.push(b'}');
    }

    /// Whether an operation touched more than the bookkeeping.
    fn close(self) -> bool {
        self.out.push(b']');
        self.outside
    }
}

/// Whether a patch path is `metadata.resourceVersion` or `metadata.managedFields`, or below
/// either.
fn bookkeeping(path: &str) -> bool {
    path.strip_prefix("/metadata/").is_some_and(|rest| {
        ["resourceVersion", "managedFields"].iter().any(|field| {
            rest.strip_prefix(field)
                .is_some_and(|below| below.is_empty() || below.starts_with('/'))
        })
    })
}

/// Appends `key` to `path` as one JSON pointer token (RFC 6901), escaped only when it needs it:
/// two `replace` allocations for every key of every object compared were a good part of the diff.
fn push_token(path: &mut String, key: &str) {
    if key.contains(['~', '/']) {
        path.push_str(&key.replace('~', "~0").replace('/', "~1"));
    } else {
        path.push_str(key);
    }
}

/// Each operation, in order: its name, its path and its value (none for `remove`).
type Emit<'e> = dyn FnMut(&'static str, &str, Option<&Value>) + 'e;

fn walk(old: &Value, new: &Value, path: &mut String, emit: &mut Emit<'_>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => objects(a, b, path, emit),
        _ if super::members::same(old, new) => {}
        _ => emit("replace", path, Some(new)),
    }
}

fn objects(a: &Map<String, Value>, b: &Map<String, Value>, path: &mut String, emit: &mut Emit<'_>) {
    // Two states of one object mostly hold the same keys in the same order (the API server's):
    // `b` is walked beside `a`, and looked up by key only once the orders part.
    let mut beside = b.iter();
    let mut in_step = true;
    for (k, va) in a {
        let vb = match in_step.then(|| beside.next()).flatten() {
            Some((kb, vb)) if kb == k => Some(vb),
            _ => {
                in_step = false;
                super::members::member(b, k)
            }
        };
        // Equal members (most of them) are passed over before their token goes into the path:
        // writing it for every member compared was a tenth of the patch. What `walk` does, with
        // the comparison first.
        let nested = vb.is_some_and(|vb| va.is_object() && vb.is_object());
        if let Some(vb) = vb
            && !nested
            && super::members::same(va, vb)
        {
            continue;
        }
        let len = path.len();
        path.push('/');
        push_token(path, k);
        match vb {
            None => emit("remove", path, None),
            Some(vb) if nested => walk(va, vb, path, emit),
            Some(vb) => emit("replace", path, Some(vb)),
        }
        path.truncate(len);
    }
    // Every key of `a` met its twin in `b`, in order, and `b` has no more: nothing was added.
    if in_step && beside.next().is_none() {
        return;
    }
    for (k, vb) in b {
        if super::members::member(a, k).is_none() {
            let len = path.len();
            path.push('/');
            push_token(path, k);
            emit("add", path, Some(vb));
            path.truncate(len);
        }
    }
}

/// [`write_diff`] of two states kept as the compact bytes the watch's decoder (or the serializer)
/// wrote, walked by their spans in step as [`objects`] walks two maps: the same bytes and the same
/// answer, without a [`Value`] tree of either. Equal bytes are passed over whole (the one writer
/// made both, so equal bytes are equal values); a value's bytes go into the patch as they are
/// (`serde_json`'s bytes for that value). `None` when a state does not read as compact JSON: the
/// caller then diffs the parsed states (`out` may hold part of a patch).
///
/// Both states must hold no repeated member (a decoder's inexact bytes are never diffed here).
pub fn write_diff_spans(out: &mut Vec<u8>, old: Members<'_>, new: Members<'_>) -> Option<bool> {
    let (ab, bb) = (old.bytes(), new.bytes());
    let mut patch = PatchOut::open(out);
    objects_spans(
        Cursor::new(ab, (0, ab.len()), Some(old.members()))?,
        Cursor::new(bb, (0, bb.len()), Some(new.members()))?,
        &mut String::with_capacity(128),
        &mut |op, path, value| {
            patch.op(
                op,
                path,
                value.map(|v| move |out: &mut Vec<u8>| out.extend_from_slice(v)),
            );
        },
    )?;
    Some(patch.close())
}

/// Each operation, in order: its name, its path and its value's bytes (none for `remove`).
type EmitBytes<'e> = dyn FnMut(&'static str, &str, Option<&[u8]>) + 'e;

/// The members of two states of one object that can give an operation: those between the
/// leading members whose bytes (and the separator after them) both states share, and the trailing
/// ones from the first place where both states start a member the same distance from the object's
/// end with the same bytes from there on. Those two runs are the same members in both (parsing the
/// same bytes from the same place reads the same), so each compares equal with its twin, and none
/// of their keys is among the other members (no state repeats a member); the operations between
/// the two states are those between the two middles. Most updates change a member or two of an
/// object: the rest is passed over by two byte comparisons, without reading where its members lie.
fn middles(
    a: &mut Cursor<'_>,
    b: &mut Cursor<'_>,
    (ab, a_span): (&[u8], (usize, usize)),
    (bb, b_span): (&[u8], (usize, usize)),
) -> Option<(Vec<Member>, Vec<Member>)> {
    let (x, y) = (at(ab, a_span), at(bb, b_span));
    let (prefix, suffix) = (common_prefix(x, y), common_suffix(x, y));
    // The leading members whose separator lies in the common prefix: the same in `b`.
    let mut index = 0;
    let mut from = a.offset();
    while let Some(m) = a.read()? {
        if m.value.1 - a_span.0 >= prefix {
            break;
        }
        index += 1;
        from = a.offset();
    }
    a.seek(from, index);
    b.seek(from, index);
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    loop {
        if a.done() && b.done() {
            break;
        }
        let (left_a, left_b) = (a.left(), b.left());
        if left_a == left_b && left_a <= suffix {
            break;
        }
        if left_a >= left_b && !a.done() {
            xs.extend(a.read()?);
        } else {
            ys.extend(b.read()?);
        }
    }
    Some((xs, ys))
}

/// [`objects`] over two objects' spans.
fn objects_spans(
    mut a: Cursor<'_>,
    mut b: Cursor<'_>,
    path: &mut String,
    emit: &mut EmitBytes<'_>,
) -> Option<()> {
    let (ab, a_span) = a.object();
    let (bb, b_span) = b.object();
    let (xs, ys) = middles(&mut a, &mut b, (ab, a_span), (bb, b_span))?;
    let mut a = Members::new(ab, xs.into());
    let mut b = Members::new(bb, ys.into());
    let mut next = 0;
    let mut in_step = true;
    for i in 0..a.members().len() {
        let ma = a.members()[i];
        let key = at(ab, ma.key);
        let mb = match in_step.then(|| b.members().get(next).copied()).flatten() {
            Some(mb) if at(bb, mb.key) == key => {
                next += 1;
                Some(mb)
            }
            _ => {
                in_step = false;
                b.find(key)
            }
        };
        let (va, vb) = (at(ab, ma.value), mb.map(|m| at(bb, m.value)));
        let nested = vb.is_some_and(|vb| va.first() == Some(&b'{') && vb.first() == Some(&b'{'));
        if let Some(mb) = mb {
            // Equal objects give no operation, whatever `objects` would walk through.
            if nested && vb == Some(va) {
                continue;
            }
            if !nested && same(ab, ma.value, bb, mb.value)? {
                continue;
            }
        }
        let len = path.len();
        path.push('/');
        push_token(path, &key_text(ab, ma.key)?);
        match mb {
            None => emit("remove", path, None),
            Some(mb) if nested => {
                objects_spans(
                    Cursor::new(ab, ma.value, None)?,
                    Cursor::new(bb, mb.value, None)?,
                    path,
                    emit,
                )?;
            }
            Some(_) => emit("replace", path, vb),
        }
        path.truncate(len);
    }
    if in_step && next == b.members().len() {
        return Some(());
    }
    for i in 0..b.members().len() {
        let mb = b.members()[i];
        if a.find(at(bb, mb.key)).is_none() {
            let len = path.len();
            path.push('/');
            push_token(path, &key_text(bb, mb.key)?);
            emit("add", path, Some(at(bb, mb.value)));
            path.truncate(len);
        }
    }
    Some(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Keys from a small set, so that two states share most of theirs; some need escaping in a
    /// pointer (`/`, `~`) or in JSON.
    fn key() -> impl Strategy<Value = String> {
        proptest::sample::select(vec![
            "a",
            "b",
            "c",
            "metadata",
            "resourceVersion",
            "managedFields",
            "d/e",
            "~f",
            "é\"\\",
        ])
        .prop_map(String::from)
    }

    /// Values whose unequal spellings can be equal (`0.0` and `-0.0`) or unequal (`1` and `1.0`).
    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(json!(null)),
            Just(json!(true)),
            Just(json!(0)),
            Just(json!(1)),
            Just(json!(-0.0)),
            Just(json!(0.0)),
            Just(json!(1.0)),
            Just(json!(1.5e300)),
            Just(json!(u64::MAX)),
            Just(json!(i64::MIN)),
            Just(json!("s")),
            Just(json!("t\"\u{1}")),
        ];
        leaf.prop_recursive(4, 48, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec((key(), inner), 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn object() -> impl Strategy<Value = Value> {
        proptest::collection::vec((key(), value()), 0..7)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    /// `v` with every object's members in the reverse order.
    fn reversed(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .rev()
                    .map(|(k, v)| (k.clone(), reversed(v)))
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(reversed).collect()),
            other => other.clone(),
        }
    }

    /// `old` with some of `new`'s members put in (most of `old` stays: mostly equal states).
    fn merged(old: &Value, new: &Value, take: usize) -> Value {
        let mut out = old.clone();
        if let (Some(o), Some(n)) = (out.as_object_mut(), new.as_object()) {
            for (k, v) in n.iter().take(take) {
                o.insert(k.clone(), v.clone());
            }
        }
        out
    }

    fn same_diff(old: &Value, new: &Value) {
        let mut by_tree = Vec::new();
        let outside = write_diff(&mut by_tree, old, new);
        let (a, b) = (
            serde_json::to_vec(old).unwrap(),
            serde_json::to_vec(new).unwrap(),
        );
        let mut by_spans = Vec::new();
        fn read(b: &[u8]) -> crate::event::spans::Members<'_> {
            crate::event::spans::Members::read(b, (0, b.len())).unwrap()
        }
        let spans_outside = write_diff_spans(&mut by_spans, read(&a), read(&b)).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&by_spans),
            String::from_utf8_lossy(&by_tree),
            "{old} -> {new}"
        );
        assert_eq!(spans_outside, outside, "{old} -> {new}");
    }

    proptest! {
        /// The patch written from two states' bytes is, byte for byte, the one written from their
        /// trees, and says the same of the bookkeeping; for unrelated states, mostly equal ones,
        /// and ones whose objects list their members in another order.
        #[test]
        fn the_patch_from_bytes_is_the_patch_from_trees(
            old in object(),
            new in object(),
            take in 0usize..3,
            meta in object(),
        ) {
            let mixed = merged(&old, &new, take);
            let mut with_meta = old.clone();
            with_meta.as_object_mut().unwrap().insert("metadata".into(), meta.clone());
            let mut with_other_meta = with_meta.clone();
            with_other_meta["metadata"] = merged(&meta, &new, take);
            for (a, b) in [
                (&old, &new),
                (&old, &mixed),
                (&mixed, &old),
                (&old, &reversed(&old)),
                (&mixed, &reversed(&old)),
                (&old, &old),
                (&with_meta, &with_other_meta),
            ] {
                same_diff(a, b);
            }
        }
    }

    /// States whose bytes part and meet again where the members do not: strings holding what
    /// reads as members (`","`, escaped quotes) where the other state has members, a member moved,
    /// added or dropped at either end or in the middle, an object emptied or filled, values that
    /// grow or shrink by a byte. The patch is the trees' each way.
    #[test]
    fn the_patch_from_bytes_is_the_patch_from_trees_where_the_bytes_part_and_meet() {
        let states = [
            json!({"a": 1, "b": "c,d"}),
            json!({"a": "1,\"b\":\"c,d"}),
            json!({"a": "x\",\"b\":1", "b": 1}),
            json!({"a": "x", "b": 1}),
            json!({"a": 1, "b": "x", "c": 2}),
            json!({"a": "1,\"b\":\"x", "c": 2}),
            json!({"a": {"k": "aa"}, "z": {"k": "aa"}}),
            json!({"a": {"k": "aaa"}, "z": {"k": "aa"}}),
            json!({"a": {"k": "aa", "l": "\",\"m\":1}"}, "z": {"k": "aa"}}),
            json!({"a": {"k": "aa", "l": "", "m": 1}, "z": {"k": "aa"}}),
            json!({"a": {}, "z": {"k": "aa"}}),
            json!({"a": {"k": "aa"}, "z": {}}),
            json!({"a": {"k": "aa"}, "m": [1, {"k": "aa"}], "z": {"k": "aa"}}),
            json!({"a": {"k": "aa"}, "m": [1, {"k": "ab"}], "z": {"k": "aa"}}),
            json!({"m": 1, "a": {"k": "aa"}, "z": {"k": "aa"}}),
            json!({"a": {"k": "aa"}, "z": {"k": "aa"}, "m": 1}),
            json!({"a": {"k": 10, "j": 0}, "z": 1}),
            json!({"a": {"k": 1, "j": 0}, "z": 1}),
            json!({"a": {"k": 1, "j": 0.0}, "z": 1}),
            json!({"a": {"k": 1, "j": -0.0}, "z": 1}),
            json!({"metadata": {"name": "w", "labels": {"app": "x"}, "resourceVersion": "9", "generation": 9}, "spec": {"n": 9, "env": [{"name": "a"}]}}),
            json!({"metadata": {"name": "w", "labels": {"app": "x"}, "resourceVersion": "10", "generation": 10}, "spec": {"n": 10, "env": [{"name": "a"}]}}),
            json!({"metadata": {"name": "w", "labels": {"app": "y"}, "resourceVersion": "10", "generation": 10}, "spec": {"n": 10, "env": [{"name": "a"}]}}),
            json!({}),
        ];
        for a in &states {
            for b in &states {
                same_diff(a, b);
            }
        }
    }

    #[test]
    fn produces_replace_add_and_remove_with_escaped_pointers() {
        let old = json!({"spec": {"replicas": 2, "gone": true, "list": [1, 2]}, "metadata": {"labels": {"a/b": "x"}}});
        let new = json!({"spec": {"replicas": 3, "list": [1, 2, 3], "new": "y"}, "metadata": {"labels": {"a/b": "z"}}});
        assert_eq!(
            diff(&old, &new),
            vec![
                json!({"op": "replace", "path": "/spec/replicas", "value": 3}),
                json!({"op": "remove", "path": "/spec/gone"}),
                json!({"op": "replace", "path": "/spec/list", "value": [1, 2, 3]}),
                json!({"op": "add", "path": "/spec/new", "value": "y"}),
                json!({"op": "replace", "path": "/metadata/labels/a~1b", "value": "z"}),
            ]
        );
        assert!(diff(&old, &old).is_empty());
        for (a, b) in [(&old, &new), (&new, &old), (&old, &old)] {
            let mut written = Vec::new();
            write_diff(&mut written, a, b);
            assert_eq!(
                String::from_utf8(written).unwrap(),
                serde_json::to_string(&diff(a, b)).unwrap()
            );
        }
    }
}
