//! RFC 6902 JSON patches between two recorded states, for the `patch` part of an event's data.

use serde_json::{Map, Value, json};

/// The operations that turn `old` into `new`. Objects are compared key by key; arrays and scalars that
/// differ are replaced whole (an element-wise array diff is ambiguous and rarely what a reader wants).
pub fn diff(old: &Value, new: &Value) -> Vec<Value> {
    let mut ops = Vec::new();
    walk(old, new, &mut String::new(), &mut ops);
    ops
}

/// Escapes a key as one JSON pointer token (RFC 6901).
fn token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
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
    for (k, va) in a {
        let len = path.len();
        path.push('/');
        path.push_str(&token(k));
        match b.get(k) {
            None => ops.push(json!({"op": "remove", "path": path.clone()})),
            Some(vb) => walk(va, vb, path, ops),
        }
        path.truncate(len);
    }
    for (k, vb) in b {
        if !a.contains_key(k) {
            ops.push(json!({"op": "add", "path": format!("{path}/{}", token(k)), "value": vb}));
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
