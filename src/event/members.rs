//! Objects' members read and compared without hashing their keys where that is cheaper.
//!
//! serde_json's map (an `IndexMap` with SipHash) hashes the key of every lookup, and its equality
//! looks up every key of one side in the other. The recorder reads the same few `metadata` members
//! of every object many times per change, and compares two states of one object (which hold the
//! same keys in the same order, the API server's) for every update: a lookup by a scan of a small
//! object, and a comparison that walks both objects side by side, cost a fraction of that.

use serde_json::{Map, Value};

/// Objects with at most this many members are searched by a scan instead of a hash lookup: a
/// comparison of two short strings (their lengths first) costs less than hashing the key, up to
/// about this many members.
const SCAN_MAX: usize = 16;

/// The member `key` of `object`, as [`Map::get`] finds it.
pub fn member<'v>(object: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
    if object.len() <= SCAN_MAX {
        object
            .iter()
            .find(|(k, _)| k.as_str() == key)
            .map(|(_, v)| v)
    } else {
        object.get(key)
    }
}

/// The member `key` of `value` when it is an object, as [`Value::get`] finds it.
pub fn get<'v>(value: &'v Value, key: &str) -> Option<&'v Value> {
    value.as_object().and_then(|o| member(o, key))
}

/// The string `metadata.<key>` of an object, empty when absent or not a string.
pub fn meta_str<'v>(object: &'v Value, key: &str) -> &'v str {
    get(object, "metadata")
        .and_then(|m| get(m, key))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `a == b` ([`Value`]'s equality: objects equal whatever the order of their members), walking two
/// objects' members side by side while their orders agree and looking up by key only once they
/// part.
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => same_objects(x, y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        _ => a == b,
    }
}

fn same_objects(x: &Map<String, Value>, y: &Map<String, Value>) -> bool {
    if x.len() != y.len() {
        return false;
    }
    let mut beside = y.iter();
    let mut in_step = true;
    // Equal lengths and unique keys: every member of `x` found equal in `y` means equal maps.
    x.iter().all(|(k, va)| {
        let vb = match in_step.then(|| beside.next()).flatten() {
            Some((kb, vb)) if kb == k => Some(vb),
            _ => {
                in_step = false;
                member(y, k)
            }
        };
        vb.is_some_and(|vb| same(va, vb))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn same_agrees_with_values_equality() {
        let many: Map<String, Value> = (0..40).map(|i| (format!("k{i}"), json!(i))).collect();
        let mut reordered: Map<String, Value> =
            (0..40).rev().map(|i| (format!("k{i}"), json!(i))).collect();
        let values = [
            json!(null),
            json!(1),
            json!(1.0),
            json!("1"),
            json!([1, 2]),
            json!([2, 1]),
            json!([1, 2, 3]),
            json!({}),
            json!({"a": 1, "b": {"c": [1, {"d": 2}]}}),
            json!({"b": {"c": [1, {"d": 2}]}, "a": 1}),
            json!({"a": 1, "b": {"c": [1, {"d": 3}]}}),
            json!({"a": 1, "c": {"c": [1, {"d": 2}]}}),
            json!({"a": 1, "b": {"c": [1, {"d": 2}]}, "e": null}),
            json!({"a": 1}),
            json!({"b": 1}),
            json!({"a": 1, "b": 2, "c": 3}),
            json!({"a": 1, "c": 3, "b": 2}),
            json!({"a": 1, "c": 3, "d": 2}),
            Value::Object(many.clone()),
            Value::Object(reordered.clone()),
            {
                reordered.insert("k0".into(), json!("other"));
                Value::Object(reordered)
            },
        ];
        for a in &values {
            for b in &values {
                assert_eq!(same(a, b), a == b, "{a} against {b}");
            }
        }
        for key in ["k0", "k39", "k40", ""] {
            assert_eq!(member(&many, key), many.get(key));
        }
        let small = json!({"metadata": {"name": "n", "uid": 1}});
        assert_eq!(meta_str(&small, "name"), "n");
        assert_eq!(meta_str(&small, "uid"), "");
        assert_eq!(meta_str(&small, "namespace"), "");
        assert_eq!(meta_str(&json!("text"), "name"), "");
    }
}
