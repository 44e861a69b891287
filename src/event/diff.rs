//! RFC 6902 JSON patches between two recorded states, for the `patch` part of an event's data.

use serde_json::{Map, Value, json};

/// The operations that turn `old` into `new`. Objects are compared key by key; arrays and scalars that
/// differ are replaced whole (an element-wise array diff is ambiguous and rarely what a reader wants).
pub fn diff(old: &Value, new: &Value) -> Vec<Value> {
    let mut ops = Vec::new();
    walk(old, new, &mut String::new(), &mut ops);
    ops
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

fn walk(old: &Value, new: &Value, path: &mut String, ops: &mut Vec<Value>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => objects(a, b, path, ops),
        _ if old == new => {}
        _ => ops.push(json!({"op": "replace", "path": path.clone(), "value": new})),
    }
}

fn objects(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    path: &mut String,
    ops: &mut Vec<Value>,
) {
    // Two states of one object mostly hold the same keys in the same order (the API server's):
    // `b` is walked beside `a`, and looked up by key only once the orders part.
    let mut beside = b.iter();
    let mut in_step = true;
    for (k, va) in a {
        let len = path.len();
        path.push('/');
        push_token(path, k);
        let vb = match in_step.then(|| beside.next()).flatten() {
            Some((kb, vb)) if kb == k => Some(vb),
            _ => {
                in_step = false;
                b.get(k)
            }
        };
        match vb {
            None => ops.push(json!({"op": "remove", "path": path.clone()})),
            Some(vb) => walk(va, vb, path, ops),
        }
        path.truncate(len);
    }
    // Every key of `a` met its twin in `b`, in order, and `b` has no more: nothing was added.
    if in_step && beside.next().is_none() {
        return;
    }
    for (k, vb) in b {
        if !a.contains_key(k) {
            let len = path.len();
            path.push('/');
            push_token(path, k);
            ops.push(json!({"op": "add", "path": path.clone(), "value": vb}));
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
    }
}
