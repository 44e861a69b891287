//! RFC 6902 JSON patches between two recorded states, for the `patch` part of an event's data.

use serde_json::{Map, Value, json};

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
    out.push(b'[');
    let mut first = true;
    let mut outside = false;
    // Room for a deep path at once, rather than growing it key by key.
    walk(
        old,
        new,
        &mut String::with_capacity(128),
        &mut |op, path, value| {
            outside = outside || !bookkeeping(path);
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"op\":\"");
            out.extend_from_slice(op.as_bytes());
            out.extend_from_slice(b"\",\"path\":\"");
            super::write_escaped(out, path);
            out.push(b'"');
            if let Some(value) = value {
                out.extend_from_slice(b",\"value\":");
                super::write_json(out, value);
            }
            out.push(b'}');
        },
    );
    out.push(b']');
    outside
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

#[cfg(test)]
mod tests {
    use super::*;

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
