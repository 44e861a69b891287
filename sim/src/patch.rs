//! JSON merge patch (RFC 7386) and JSON patch (RFC 6902) with the Kubernetes API server's semantics.

use serde_json::{Map, Number, Value};

/// Why a JSON patch was rejected.
///
/// Messages follow evanphx/json-patch v4 (what the API server surfaces to clients) where that is
/// practical, so client code matching on them behaves as against a real cluster.
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum PatchError {
    /// The patch body is not a JSON array.
    #[error("json patch must be a JSON array of operations")]
    NotAnArray,
    /// An element of the patch is not a well-formed operation.
    #[error("invalid operation {index}: {reason}")]
    InvalidOperation {
        /// Position of the offending operation in the patch array.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The location an operation targets (or its parent) does not exist.
    #[error("{op} operation does not apply: doc is missing path: {path}")]
    MissingPath {
        /// Operation name.
        op: &'static str,
        /// The pointer as written in the patch.
        path: String,
    },
    /// A `replace` targets a member or element that does not exist.
    #[error("replace operation does not apply: doc is missing key: {path}")]
    MissingKey {
        /// The pointer as written in the patch.
        path: String,
    },
    /// The `from` location of a `move` or `copy` does not exist.
    #[error("{op} operation does not apply: doc is missing from path: {from}")]
    MissingFrom {
        /// Operation name.
        op: &'static str,
        /// The pointer as written in the patch.
        from: String,
    },
    /// The parent of the destination of a `move` or `copy` does not exist.
    #[error("{op} operation does not apply: doc is missing destination path: {path}")]
    MissingDestination {
        /// Operation name.
        op: &'static str,
        /// The pointer as written in the patch.
        path: String,
    },
    /// An array was addressed with a token that is not a usable index for that operation.
    #[error(
        "error in {op} for path: '{path}': Unable to access invalid index: {token}: invalid index referenced"
    )]
    InvalidIndex {
        /// Operation name.
        op: &'static str,
        /// The pointer as written in the patch.
        path: String,
        /// The offending reference token.
        token: String,
    },
    /// A `test` operation found a different value.
    #[error("testing value {path} failed: test failed")]
    TestFailed {
        /// The pointer as written in the patch.
        path: String,
    },
    /// A `move` whose destination lies inside the value being moved.
    #[error("move operation does not apply: path {path} is a child of from path {from}")]
    MoveIntoChild {
        /// The source pointer as written in the patch.
        from: String,
        /// The destination pointer as written in the patch.
        path: String,
    },
}

impl PatchError {
    /// True when the patch document itself is broken (answer 400 `BadRequest`); false when a
    /// well-formed patch does not apply to this object (answer 422 `Invalid`).
    pub(crate) fn is_malformed(&self) -> bool {
        matches!(
            self,
            PatchError::NotAnArray | PatchError::InvalidOperation { .. }
        )
    }
}

/// RFC 7386 JSON merge patch applied in place: null deletes a key, objects merge recursively,
/// anything else (arrays included) replaces whole. A non-object patch replaces the target.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch_members) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target_members) = target {
        for (key, value) in patch_members {
            if value.is_null() {
                // shift_remove keeps the remaining keys in their original order, so a PATCH does
                // not visibly reshuffle fields the client did not touch.
                target_members.shift_remove(key);
            } else {
                // Starting from null makes a nested object patch build a fresh object with its
                // own nulls dropped, as RFC 7386 requires for members absent from the target.
                let slot = target_members.entry(key.clone()).or_insert(Value::Null);
                merge_patch(slot, value);
            }
        }
    }
}

/// RFC 6902 JSON patch. All-or-nothing: on error the target is untouched (work on a clone).
pub(crate) fn json_patch(target: &Value, ops: &Value) -> Result<Value, PatchError> {
    let Value::Array(raw_ops) = ops else {
        return Err(PatchError::NotAnArray);
    };
    // Decoding every operation before touching the document means a malformed patch is always
    // reported as such, even when an earlier operation would also have failed to apply.
    let parsed = raw_ops
        .iter()
        .enumerate()
        .map(|(index, raw)| {
            Operation::parse(raw).map_err(|reason| PatchError::InvalidOperation { index, reason })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut doc = target.clone();
    for op in &parsed {
        op.apply(&mut doc)?;
    }
    Ok(doc)
}

/// A decoded RFC 6901 pointer, kept next to its original spelling for error messages.
struct Pointer<'a> {
    raw: &'a str,
    tokens: Vec<String>,
}

impl<'a> Pointer<'a> {
    fn parse(raw: &'a str) -> Result<Self, String> {
        if raw.is_empty() {
            return Ok(Pointer {
                raw,
                tokens: Vec::new(),
            });
        }
        let Some(rest) = raw.strip_prefix('/') else {
            return Err(format!(
                "invalid JSON pointer {raw:?}: must be empty or start with '/'"
            ));
        };
        let tokens = rest
            .split('/')
            .map(|token| {
                unescape(token).ok_or_else(|| {
                    format!("invalid JSON pointer {raw:?}: '~' must be followed by '0' or '1'")
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Pointer { raw, tokens })
    }

    fn path(&self) -> String {
        self.raw.to_owned()
    }
}

/// Decodes `~1` and `~0` in one left-to-right pass, so `~01` becomes `~1` rather than `/`.
fn unescape(token: &str) -> Option<String> {
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return None,
            }
        } else {
            out.push(c);
        }
    }
    Some(out)
}

enum Operation<'a> {
    Add {
        path: Pointer<'a>,
        value: &'a Value,
    },
    Remove {
        path: Pointer<'a>,
    },
    Replace {
        path: Pointer<'a>,
        value: &'a Value,
    },
    Move {
        from: Pointer<'a>,
        path: Pointer<'a>,
    },
    Copy {
        from: Pointer<'a>,
        path: Pointer<'a>,
    },
    Test {
        path: Pointer<'a>,
        value: &'a Value,
    },
}

impl<'a> Operation<'a> {
    fn parse(raw: &'a Value) -> Result<Self, String> {
        let Value::Object(members) = raw else {
            return Err("operation must be a JSON object".to_owned());
        };
        let kind = match members.get("op") {
            None => return Err(r#"missing "op" member"#.to_owned()),
            Some(Value::String(kind)) => kind.as_str(),
            Some(_) => return Err(r#""op" must be a string"#.to_owned()),
        };
        let pointer = |name: &str| -> Result<Pointer<'a>, String> {
            match members.get(name) {
                None => Err(format!("missing {name:?} member")),
                Some(Value::String(raw)) => Pointer::parse(raw),
                Some(_) => Err(format!("{name:?} must be a string")),
            }
        };
        // `"value": null` is present-and-null, which the test-on-missing-key quirk depends on;
        // only an absent member is an error.
        let value = || -> Result<&'a Value, String> {
            members
                .get("value")
                .ok_or_else(|| r#"missing "value" member"#.to_owned())
        };
        Ok(match kind {
            "add" => Operation::Add {
                path: pointer("path")?,
                value: value()?,
            },
            "remove" => Operation::Remove {
                path: pointer("path")?,
            },
            "replace" => Operation::Replace {
                path: pointer("path")?,
                value: value()?,
            },
            "move" => Operation::Move {
                from: pointer("from")?,
                path: pointer("path")?,
            },
            "copy" => Operation::Copy {
                from: pointer("from")?,
                path: pointer("path")?,
            },
            "test" => Operation::Test {
                path: pointer("path")?,
                value: value()?,
            },
            other => return Err(format!("Unexpected kind: {other}")),
        })
    }

    fn apply(&self, doc: &mut Value) -> Result<(), PatchError> {
        match self {
            Operation::Add { path, value } => add_at(doc, &path.tokens, (*value).clone())
                .map_err(|miss| miss.into_error("add", path)),
            Operation::Remove { path } => remove_at(doc, &path.tokens)
                .map(drop)
                .map_err(|miss| miss.into_error("remove", path)),
            Operation::Replace { path, value } => replace_at(doc, &path.tokens, (*value).clone())
                .map_err(|miss| match miss {
                    Miss::Parent => miss.into_error("replace", path),
                    Miss::Key | Miss::Index(_) => PatchError::MissingKey { path: path.path() },
                }),
            Operation::Move { from, path } => {
                if from.tokens == path.tokens {
                    // RFC 6902 makes this a no-op, but the source must still exist.
                    return get_at(doc, &from.tokens)
                        .map(drop)
                        .map_err(|miss| miss.into_from_error("move", from));
                }
                if path.tokens.starts_with(&from.tokens) {
                    return Err(PatchError::MoveIntoChild {
                        from: from.path(),
                        path: path.path(),
                    });
                }
                let moved = remove_at(doc, &from.tokens)
                    .map_err(|miss| miss.into_from_error("move", from))?;
                add_at(doc, &path.tokens, moved)
                    .map_err(|miss| miss.into_destination_error("move", path))
            }
            Operation::Copy { from, path } => {
                let copied = get_at(doc, &from.tokens)
                    .map_err(|miss| miss.into_from_error("copy", from))?
                    .clone();
                add_at(doc, &path.tokens, copied)
                    .map_err(|miss| miss.into_destination_error("copy", path))
            }
            Operation::Test { path, value } => match get_at(doc, &path.tokens) {
                Ok(found) if json_eq(found, value) => Ok(()),
                // evanphx/json-patch reads an absent object member as null, and kube-runtime's
                // finalizer helper relies on `test <finalizers> == null` passing when the field is
                // absent.
                Err(Miss::Key) if value.is_null() => Ok(()),
                Ok(_) | Err(Miss::Key) => Err(PatchError::TestFailed { path: path.path() }),
                Err(miss) => Err(miss.into_error("test", path)),
            },
        }
    }
}

/// Why a pointer could not be resolved; each operation turns this into its own error wording.
enum Miss {
    /// Some ancestor of the target is absent or is not a container.
    Parent,
    /// The parent is an object without that member.
    Key,
    /// The parent is an array and the token is not a usable index.
    Index(String),
}

impl Miss {
    fn into_error(self, op: &'static str, path: &Pointer<'_>) -> PatchError {
        match self {
            Miss::Parent | Miss::Key => PatchError::MissingPath {
                op,
                path: path.path(),
            },
            Miss::Index(token) => PatchError::InvalidIndex {
                op,
                path: path.path(),
                token,
            },
        }
    }

    fn into_from_error(self, op: &'static str, from: &Pointer<'_>) -> PatchError {
        match self {
            Miss::Parent | Miss::Key => PatchError::MissingFrom {
                op,
                from: from.path(),
            },
            Miss::Index(token) => PatchError::InvalidIndex {
                op,
                path: from.path(),
                token,
            },
        }
    }

    fn into_destination_error(self, op: &'static str, path: &Pointer<'_>) -> PatchError {
        match self {
            Miss::Parent | Miss::Key => PatchError::MissingDestination {
                op,
                path: path.path(),
            },
            Miss::Index(token) => PatchError::InvalidIndex {
                op,
                path: path.path(),
                token,
            },
        }
    }
}

/// RFC 6901 array index: `0` or digits without a leading zero. `-` is handled by callers because
/// only `add` may use it.
fn array_index(token: &str) -> Option<usize> {
    let well_formed = match token.as_bytes() {
        [] => false,
        [b'0'] => true,
        [b'0', ..] => false,
        digits => digits.iter().all(u8::is_ascii_digit),
    };
    if well_formed {
        token.parse().ok()
    } else {
        None
    }
}

fn child<'v>(value: &'v Value, token: &str) -> Option<&'v Value> {
    match value {
        Value::Object(members) => members.get(token),
        Value::Array(items) => array_index(token).and_then(|i| items.get(i)),
        _ => None,
    }
}

fn child_mut<'v>(value: &'v mut Value, token: &str) -> Option<&'v mut Value> {
    match value {
        Value::Object(members) => members.get_mut(token),
        Value::Array(items) => array_index(token).and_then(|i| items.get_mut(i)),
        _ => None,
    }
}

/// The container holding the target and the target's own token; the root has no parent.
fn parent_mut<'v, 't>(
    doc: &'v mut Value,
    tokens: &'t [String],
) -> Result<(&'v mut Value, &'t str), Miss> {
    let Some((last, ancestors)) = tokens.split_last() else {
        return Err(Miss::Parent);
    };
    let mut current = doc;
    for token in ancestors {
        current = child_mut(current, token).ok_or(Miss::Parent)?;
    }
    Ok((current, last))
}

fn get_at<'v>(doc: &'v Value, tokens: &[String]) -> Result<&'v Value, Miss> {
    let Some((last, ancestors)) = tokens.split_last() else {
        return Ok(doc);
    };
    let mut current = doc;
    for token in ancestors {
        current = child(current, token).ok_or(Miss::Parent)?;
    }
    match current {
        Value::Object(members) => members.get(last.as_str()).ok_or(Miss::Key),
        Value::Array(items) => array_index(last)
            .and_then(|i| items.get(i))
            .ok_or_else(|| Miss::Index(last.clone())),
        _ => Err(Miss::Parent),
    }
}

fn add_at(doc: &mut Value, tokens: &[String], value: Value) -> Result<(), Miss> {
    if tokens.is_empty() {
        *doc = value;
        return Ok(());
    }
    match parent_mut(doc, tokens)? {
        (Value::Object(members), key) => {
            members.insert(key.to_owned(), value);
            Ok(())
        }
        (Value::Array(items), token) => {
            let index = if token == "-" {
                items.len()
            } else {
                array_index(token)
                    .filter(|&i| i <= items.len())
                    .ok_or_else(|| Miss::Index(token.to_owned()))?
            };
            items.insert(index, value);
            Ok(())
        }
        _ => Err(Miss::Parent),
    }
}

fn remove_at(doc: &mut Value, tokens: &[String]) -> Result<Value, Miss> {
    match parent_mut(doc, tokens)? {
        (Value::Object(members), key) => members.shift_remove(key).ok_or(Miss::Key),
        (Value::Array(items), token) => match array_index(token) {
            Some(i) if i < items.len() => Ok(items.remove(i)),
            _ => Err(Miss::Index(token.to_owned())),
        },
        _ => Err(Miss::Parent),
    }
}

fn replace_at(doc: &mut Value, tokens: &[String], value: Value) -> Result<(), Miss> {
    if tokens.is_empty() {
        *doc = value;
        return Ok(());
    }
    let slot = match parent_mut(doc, tokens)? {
        (Value::Object(members), key) => members.get_mut(key).ok_or(Miss::Key)?,
        (Value::Array(items), token) => array_index(token)
            .and_then(|i| items.get_mut(i))
            .ok_or_else(|| Miss::Index(token.to_owned()))?,
        _ => return Err(Miss::Parent),
    };
    *slot = value;
    Ok(())
}

/// RFC 6902 equality: numbers by value (serde_json's `==` tells `1` from `1.0`), object members
/// regardless of order.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => numbers_eq(x, y),
        (Value::Array(xs), Value::Array(ys)) => {
            xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| json_eq(x, y))
        }
        (Value::Object(xs), Value::Object(ys)) => {
            xs.len() == ys.len()
                && xs
                    .iter()
                    .all(|(k, x)| ys.get(k).is_some_and(|y| json_eq(x, y)))
        }
        _ => a == b,
    }
}

fn numbers_eq(x: &Number, y: &Number) -> bool {
    // Integers compare exactly so large values are not blurred by a trip through f64.
    if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
        return x == y;
    }
    if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
        return x == y;
    }
    if x.is_f64() || y.is_f64() {
        return x.as_f64() == y.as_f64();
    }
    // One is a negative i64 and the other a u64 above i64::MAX.
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn merged(target: Value, patch: Value) -> Value {
        let mut target = target;
        merge_patch(&mut target, &patch);
        target
    }

    fn patched(doc: Value, ops: Value) -> Result<Value, PatchError> {
        json_patch(&doc, &ops)
    }

    // Plain `==` on maps ignores order; these tests care about the serialized field order.
    fn member_order(value: &Value) -> Vec<&str> {
        value
            .as_object()
            .into_iter()
            .flat_map(Map::keys)
            .map(String::as_str)
            .collect()
    }

    fn err_message(doc: Value, ops: Value) -> String {
        match patched(doc, ops) {
            Ok(v) => panic!("patch unexpectedly applied: {v}"),
            Err(e) => e.to_string(),
        }
    }

    // ---- RFC 7386 ----

    #[test]
    fn merge_rfc7386_appendix_a() {
        let cases = [
            (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
            (json!({"a":"b"}), json!({"a":null}), json!({})),
            (
                json!({"a":"b","b":"c"}),
                json!({"a":null}),
                json!({"b":"c"}),
            ),
            (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"c"}), json!({"a":["b"]}), json!({"a":["b"]})),
            (
                json!({"a":{"b":"c"}}),
                json!({"a":{"b":"d","c":null}}),
                json!({"a":{"b":"d"}}),
            ),
            (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a":"b"}), json!(["c"]), json!(["c"])),
            (json!({"a":"foo"}), json!(null), json!(null)),
            (json!({"a":"foo"}), json!("bar"), json!("bar")),
            (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
            (json!([1, 2]), json!({"a":"b","c":null}), json!({"a":"b"})),
            (
                json!({}),
                json!({"a":{"bb":{"ccc":null}}}),
                json!({"a":{"bb":{}}}),
            ),
        ];
        for (target, patch, expected) in cases {
            let context = format!("{target} + {patch}");
            assert_eq!(merged(target, patch), expected, "{context}");
        }
    }

    #[test]
    fn merge_rfc7386_section_3_example() {
        let target = json!({
            "title": "Goodbye!",
            "author": {"givenName": "John", "familyName": "Doe"},
            "tags": ["example", "sample"],
            "content": "This will be unchanged"
        });
        let patch = json!({
            "title": "Hello!",
            "phoneNumber": "+01-123-456-7890",
            "author": {"familyName": null},
            "tags": ["example"]
        });
        let expected = json!({
            "title": "Hello!",
            "author": {"givenName": "John"},
            "tags": ["example"],
            "content": "This will be unchanged",
            "phoneNumber": "+01-123-456-7890"
        });
        assert_eq!(merged(target, patch), expected);
    }

    #[test]
    fn merge_keeps_untouched_key_order() {
        let out = merged(
            json!({"a":1,"b":2,"c":3,"d":4}),
            json!({"b":null,"c":30,"e":5}),
        );
        assert_eq!(member_order(&out), ["a", "c", "d", "e"]);
    }

    #[test]
    fn merge_keeps_nulls_inside_arrays_and_drops_them_in_new_objects() {
        assert_eq!(
            merged(json!({}), json!({"a":[1,null],"b":{"c":null,"d":1}})),
            json!({"a":[1,null],"b":{"d":1}})
        );
    }

    #[test]
    fn merge_deleting_missing_key_is_noop() {
        assert_eq!(merged(json!({"a":1}), json!({"b":null})), json!({"a":1}));
    }

    #[test]
    fn merge_typical_kubernetes_status_and_label_patch() {
        let target = json!({
            "metadata": {"name": "x", "labels": {"keep": "1", "drop": "2"}},
            "spec": {"replicas": 1, "ports": [80, 443]},
        });
        let patch = json!({
            "metadata": {"labels": {"drop": null, "new": "3"}},
            "spec": {"ports": [8080]},
            "status": {"phase": "Ready"}
        });
        assert_eq!(
            merged(target, patch),
            json!({
                "metadata": {"name": "x", "labels": {"keep": "1", "new": "3"}},
                "spec": {"replicas": 1, "ports": [8080]},
                "status": {"phase": "Ready"}
            })
        );
    }

    // ---- RFC 6902 appendix A ----

    #[test]
    fn a1_add_object_member() {
        assert_eq!(
            patched(
                json!({"foo":"bar"}),
                json!([{"op":"add","path":"/baz","value":"qux"}])
            ),
            Ok(json!({"baz":"qux","foo":"bar"}))
        );
    }

    #[test]
    fn a2_add_array_element() {
        assert_eq!(
            patched(
                json!({"foo":["bar","baz"]}),
                json!([{"op":"add","path":"/foo/1","value":"qux"}])
            ),
            Ok(json!({"foo":["bar","qux","baz"]}))
        );
    }

    #[test]
    fn a3_remove_object_member() {
        assert_eq!(
            patched(
                json!({"baz":"qux","foo":"bar"}),
                json!([{"op":"remove","path":"/baz"}])
            ),
            Ok(json!({"foo":"bar"}))
        );
    }

    #[test]
    fn a4_remove_array_element() {
        assert_eq!(
            patched(
                json!({"foo":["bar","qux","baz"]}),
                json!([{"op":"remove","path":"/foo/1"}])
            ),
            Ok(json!({"foo":["bar","baz"]}))
        );
    }

    #[test]
    fn a5_replace_value() {
        assert_eq!(
            patched(
                json!({"baz":"qux","foo":"bar"}),
                json!([{"op":"replace","path":"/baz","value":"boo"}])
            ),
            Ok(json!({"baz":"boo","foo":"bar"}))
        );
    }

    #[test]
    fn a6_move_value() {
        assert_eq!(
            patched(
                json!({"foo":{"bar":"baz","waldo":"fred"},"qux":{"corge":"grault"}}),
                json!([{"op":"move","from":"/foo/waldo","path":"/qux/thud"}])
            ),
            Ok(json!({"foo":{"bar":"baz"},"qux":{"corge":"grault","thud":"fred"}}))
        );
    }

    #[test]
    fn a7_move_array_element() {
        assert_eq!(
            patched(
                json!({"foo":["all","grass","cows","eat"]}),
                json!([{"op":"move","from":"/foo/1","path":"/foo/3"}])
            ),
            Ok(json!({"foo":["all","cows","eat","grass"]}))
        );
    }

    #[test]
    fn a8_test_success() {
        let doc = json!({"baz":"qux","foo":["a",2,"c"]});
        assert_eq!(
            patched(
                doc.clone(),
                json!([
                    {"op":"test","path":"/baz","value":"qux"},
                    {"op":"test","path":"/foo/1","value":2}
                ])
            ),
            Ok(doc)
        );
    }

    #[test]
    fn a9_test_failure() {
        assert_eq!(
            patched(
                json!({"baz":"qux"}),
                json!([{"op":"test","path":"/baz","value":"bar"}])
            ),
            Err(PatchError::TestFailed {
                path: "/baz".into()
            })
        );
    }

    #[test]
    fn a10_add_nested_member_object() {
        assert_eq!(
            patched(
                json!({"foo":"bar"}),
                json!([{"op":"add","path":"/child","value":{"grandchild":{}}}])
            ),
            Ok(json!({"foo":"bar","child":{"grandchild":{}}}))
        );
    }

    #[test]
    fn a11_ignore_unrecognized_members() {
        assert_eq!(
            patched(
                json!({"foo":"bar"}),
                json!([{"op":"add","path":"/baz","value":"qux","xyz":123}])
            ),
            Ok(json!({"foo":"bar","baz":"qux"}))
        );
    }

    #[test]
    fn a12_add_to_nonexistent_target() {
        let err = patched(
            json!({"foo":"bar"}),
            json!([{"op":"add","path":"/baz/bat","value":"qux"}]),
        );
        assert_eq!(
            err,
            Err(PatchError::MissingPath {
                op: "add",
                path: "/baz/bat".into()
            })
        );
    }

    #[test]
    fn a14_escape_ordering() {
        let doc = json!({"/":9,"~1":10});
        assert_eq!(
            patched(doc.clone(), json!([{"op":"test","path":"/~01","value":10}])),
            Ok(doc)
        );
    }

    #[test]
    fn a15_string_is_not_number() {
        assert_eq!(
            err_message(
                json!({"/":9,"~1":10}),
                json!([{"op":"test","path":"/~01","value":"10"}])
            ),
            "testing value /~01 failed: test failed"
        );
    }

    #[test]
    fn a16_add_array_value() {
        assert_eq!(
            patched(
                json!({"foo":["bar"]}),
                json!([{"op":"add","path":"/foo/-","value":["abc","def"]}])
            ),
            Ok(json!({"foo":["bar",["abc","def"]]}))
        );
    }

    // ---- Kubernetes / evanphx quirks ----

    #[test]
    fn test_null_on_missing_member_succeeds() {
        let doc = json!({"metadata":{"name":"x"}});
        assert_eq!(
            patched(
                doc.clone(),
                json!([{"op":"test","path":"/metadata/finalizers","value":null}])
            ),
            Ok(doc)
        );
    }

    #[test]
    fn test_null_on_explicit_null_succeeds() {
        let doc = json!({"a":null});
        assert_eq!(
            patched(doc.clone(), json!([{"op":"test","path":"/a","value":null}])),
            Ok(doc)
        );
    }

    #[test]
    fn test_null_on_present_value_fails() {
        assert_eq!(
            err_message(
                json!({"metadata":{"finalizers":[]}}),
                json!([{"op":"test","path":"/metadata/finalizers","value":null}])
            ),
            "testing value /metadata/finalizers failed: test failed"
        );
    }

    #[test]
    fn test_value_on_missing_member_fails() {
        assert_eq!(
            patched(
                json!({"metadata":{}}),
                json!([{"op":"test","path":"/metadata/finalizers","value":["x"]}])
            ),
            Err(PatchError::TestFailed {
                path: "/metadata/finalizers".into()
            })
        );
    }

    #[test]
    fn test_null_with_missing_parent_fails() {
        assert_eq!(
            patched(
                json!({}),
                json!([{"op":"test","path":"/metadata/finalizers","value":null}])
            ),
            Err(PatchError::MissingPath {
                op: "test",
                path: "/metadata/finalizers".into()
            })
        );
    }

    #[test]
    fn test_null_on_missing_array_index_fails() {
        let err = patched(
            json!({"a":[]}),
            json!([{"op":"test","path":"/a/0","value":null}]),
        );
        assert_eq!(
            err,
            Err(PatchError::InvalidIndex {
                op: "test",
                path: "/a/0".into(),
                token: "0".into()
            })
        );
    }

    #[test]
    fn test_compares_numbers_by_value() {
        let doc = json!({"a":1,"b":1.0,"c":[2.5],"d":{"x":-3}});
        assert_eq!(
            patched(
                doc.clone(),
                json!([
                    {"op":"test","path":"/a","value":1.0},
                    {"op":"test","path":"/b","value":1},
                    {"op":"test","path":"/c","value":[2.5]},
                    {"op":"test","path":"/d","value":{"x":-3.0}}
                ])
            ),
            Ok(doc)
        );
        assert!(
            patched(
                json!({"a":1}),
                json!([{"op":"test","path":"/a","value":1.5}])
            )
            .is_err()
        );
        assert!(
            patched(
                json!({"a":u64::MAX}),
                json!([{"op":"test","path":"/a","value":-1}])
            )
            .is_err()
        );
    }

    #[test]
    fn test_object_equality_ignores_member_order() {
        let doc = json!({"a":{"x":1,"y":2}});
        assert_eq!(
            patched(
                doc.clone(),
                json!([{"op":"test","path":"/a","value":{"y":2,"x":1}}])
            ),
            Ok(doc)
        );
        assert!(
            patched(
                json!({"a":{"x":1,"y":2}}),
                json!([{"op":"test","path":"/a","value":{"x":1}}])
            )
            .is_err()
        );
        assert!(
            patched(
                json!({"a":[1,2]}),
                json!([{"op":"test","path":"/a","value":[2,1]}])
            )
            .is_err()
        );
    }

    #[test]
    fn test_whole_document() {
        let doc = json!({"a":1});
        assert_eq!(
            patched(
                doc.clone(),
                json!([{"op":"test","path":"","value":{"a":1}}])
            ),
            Ok(doc)
        );
        assert!(patched(json!({"a":1}), json!([{"op":"test","path":"","value":{}}])).is_err());
    }

    // ---- kube-runtime finalizer helper sequences ----

    fn object(finalizers: Option<Value>) -> Value {
        let mut obj = json!({
            "apiVersion": "example.com/v1",
            "kind": "Thing",
            "metadata": {"name": "t", "namespace": "default", "resourceVersion": "7"},
            "spec": {}
        });
        if let Some(f) = finalizers {
            obj["metadata"]["finalizers"] = f;
        }
        obj
    }

    #[test]
    fn kube_runtime_adds_first_finalizer() {
        let ops = json!([
            {"op":"test","path":"/metadata/finalizers","value":null},
            {"op":"add","path":"/metadata/finalizers","value":["example.com/cleanup"]}
        ]);
        assert_eq!(
            patched(object(None), ops.clone()),
            Ok(object(Some(json!(["example.com/cleanup"]))))
        );
        // A concurrent writer added finalizers in the meantime: the guard must trip.
        assert_eq!(
            patched(object(Some(json!(["other"]))), ops),
            Err(PatchError::TestFailed {
                path: "/metadata/finalizers".into()
            })
        );
    }

    #[test]
    fn kube_runtime_adds_second_finalizer() {
        let ops = json!([
            {"op":"test","path":"/metadata/finalizers","value":["other"]},
            {"op":"add","path":"/metadata/finalizers/-","value":"example.com/cleanup"}
        ]);
        assert_eq!(
            patched(object(Some(json!(["other"]))), ops.clone()),
            Ok(object(Some(json!(["other", "example.com/cleanup"]))))
        );
        let stale = patched(object(Some(json!(["other", "third"]))), ops);
        assert!(matches!(stale, Err(PatchError::TestFailed { .. })));
    }

    #[test]
    fn kube_runtime_removes_finalizer() {
        let ops = json!([
            {"op":"test","path":"/metadata/finalizers/0","value":"example.com/cleanup"},
            {"op":"remove","path":"/metadata/finalizers/0"}
        ]);
        assert_eq!(
            patched(
                object(Some(json!(["example.com/cleanup", "other"]))),
                ops.clone()
            ),
            Ok(object(Some(json!(["other"]))))
        );
        assert_eq!(
            patched(object(Some(json!(["example.com/cleanup"]))), ops.clone()),
            Ok(object(Some(json!([]))))
        );
        assert_eq!(
            err_message(object(Some(json!(["other", "example.com/cleanup"]))), ops),
            "testing value /metadata/finalizers/0 failed: test failed"
        );
    }

    // ---- add ----

    #[test]
    fn add_array_index_rules() {
        let doc = json!({"a":[1,2]});
        assert_eq!(
            patched(doc.clone(), json!([{"op":"add","path":"/a/2","value":3}])),
            Ok(json!({"a":[1,2,3]}))
        );
        assert_eq!(
            patched(doc.clone(), json!([{"op":"add","path":"/a/0","value":0}])),
            Ok(json!({"a":[0,1,2]}))
        );
        assert_eq!(
            patched(doc.clone(), json!([{"op":"add","path":"/a/-","value":3}])),
            Ok(json!({"a":[1,2,3]}))
        );
        for bad in ["3", "01", "-1", "+1", "1.0", "x", ""] {
            let path = format!("/a/{bad}");
            assert_eq!(
                patched(doc.clone(), json!([{"op":"add","path":path,"value":9}])),
                Err(PatchError::InvalidIndex {
                    op: "add",
                    path: path.clone(),
                    token: bad.into()
                }),
                "{path}"
            );
        }
        assert_eq!(
            err_message(doc, json!([{"op":"add","path":"/a/5","value":9}])),
            "error in add for path: '/a/5': Unable to access invalid index: 5: invalid index referenced"
        );
    }

    #[test]
    fn add_replaces_existing_member_in_place() {
        let out = patched(
            json!({"a":1,"b":2,"c":3}),
            json!([{"op":"add","path":"/b","value":20}]),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out, json!({"a":1,"b":20,"c":3}));
        assert_eq!(member_order(&out), ["a", "b", "c"]);
    }

    #[test]
    fn add_missing_parent_message() {
        assert_eq!(
            err_message(json!({}), json!([{"op":"add","path":"/a/b","value":1}])),
            "add operation does not apply: doc is missing path: /a/b"
        );
        // A scalar or null parent cannot hold members either.
        for doc in [json!({"a":1}), json!({"a":null}), json!({"a":"s"})] {
            assert!(matches!(
                patched(doc, json!([{"op":"add","path":"/a/b","value":1}])),
                Err(PatchError::MissingPath { op: "add", .. })
            ));
        }
    }

    #[test]
    fn add_null_value_is_allowed() {
        assert_eq!(
            patched(json!({}), json!([{"op":"add","path":"/a","value":null}])),
            Ok(json!({"a":null}))
        );
    }

    #[test]
    fn add_and_replace_root() {
        assert_eq!(
            patched(
                json!({"a":1}),
                json!([{"op":"add","path":"","value":{"b":2}}])
            ),
            Ok(json!({"b":2}))
        );
        assert_eq!(
            patched(
                json!({"a":1}),
                json!([{"op":"replace","path":"","value":[1]}])
            ),
            Ok(json!([1]))
        );
    }

    #[test]
    fn add_through_array_element() {
        assert_eq!(
            patched(
                json!({"items":[{"name":"a"},{"name":"b"}]}),
                json!([{"op":"add","path":"/items/1/ready","value":true}])
            ),
            Ok(json!({"items":[{"name":"a"},{"name":"b","ready":true}]}))
        );
        assert!(matches!(
            patched(
                json!({"items":[{"name":"a"}]}),
                json!([{"op":"add","path":"/items/01/ready","value":true}])
            ),
            Err(PatchError::MissingPath { op: "add", .. })
        ));
    }

    // ---- remove / replace ----

    #[test]
    fn remove_missing_paths() {
        assert_eq!(
            err_message(json!({}), json!([{"op":"remove","path":"/a"}])),
            "remove operation does not apply: doc is missing path: /a"
        );
        assert_eq!(
            err_message(json!({}), json!([{"op":"remove","path":"/a/b"}])),
            "remove operation does not apply: doc is missing path: /a/b"
        );
        assert_eq!(
            patched(json!({"a":[1]}), json!([{"op":"remove","path":"/a/1"}])),
            Err(PatchError::InvalidIndex {
                op: "remove",
                path: "/a/1".into(),
                token: "1".into()
            })
        );
        assert!(matches!(
            patched(json!({"a":[1]}), json!([{"op":"remove","path":"/a/-"}])),
            Err(PatchError::InvalidIndex { .. })
        ));
        assert!(matches!(
            patched(json!({"a":1}), json!([{"op":"remove","path":""}])),
            Err(PatchError::MissingPath { op: "remove", .. })
        ));
    }

    #[test]
    fn remove_keeps_sibling_order() {
        let out = patched(
            json!({"a":1,"b":2,"c":3,"d":4}),
            json!([{"op":"remove","path":"/b"}]),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(member_order(&out), ["a", "c", "d"]);
    }

    #[test]
    fn replace_missing_paths() {
        assert_eq!(
            err_message(
                json!({"spec":{}}),
                json!([{"op":"replace","path":"/spec/x","value":1}])
            ),
            "replace operation does not apply: doc is missing key: /spec/x"
        );
        assert_eq!(
            err_message(
                json!({}),
                json!([{"op":"replace","path":"/spec/x","value":1}])
            ),
            "replace operation does not apply: doc is missing path: /spec/x"
        );
        assert_eq!(
            patched(
                json!({"a":[1]}),
                json!([{"op":"replace","path":"/a/1","value":2}])
            ),
            Err(PatchError::MissingKey {
                path: "/a/1".into()
            })
        );
        assert_eq!(
            patched(
                json!({"a":[1]}),
                json!([{"op":"replace","path":"/a/0","value":2}])
            ),
            Ok(json!({"a":[2]}))
        );
    }

    // ---- move / copy ----

    #[test]
    fn move_into_own_child_fails() {
        assert_eq!(
            patched(
                json!({"a":{"b":{}}}),
                json!([{"op":"move","from":"/a","path":"/a/b/c"}])
            ),
            Err(PatchError::MoveIntoChild {
                from: "/a".into(),
                path: "/a/b/c".into()
            })
        );
        assert!(matches!(
            patched(json!({"a":1}), json!([{"op":"move","from":"","path":"/b"}])),
            Err(PatchError::MoveIntoChild { .. })
        ));
    }

    #[test]
    fn move_to_sibling_with_shared_prefix_is_not_a_child() {
        assert_eq!(
            patched(
                json!({"a":1}),
                json!([{"op":"move","from":"/a","path":"/ab"}])
            ),
            Ok(json!({"ab":1}))
        );
    }

    #[test]
    fn move_to_itself_is_noop_but_source_must_exist() {
        let doc = json!({"a":[1,2]});
        assert_eq!(
            patched(
                doc.clone(),
                json!([{"op":"move","from":"/a/1","path":"/a/1"}])
            ),
            Ok(doc)
        );
        assert_eq!(
            patched(json!({}), json!([{"op":"move","from":"/x","path":"/x"}])),
            Err(PatchError::MissingFrom {
                op: "move",
                from: "/x".into()
            })
        );
    }

    #[test]
    fn move_errors() {
        assert_eq!(
            err_message(json!({}), json!([{"op":"move","from":"/x","path":"/y"}])),
            "move operation does not apply: doc is missing from path: /x"
        );
        assert_eq!(
            err_message(
                json!({"x":1}),
                json!([{"op":"move","from":"/x","path":"/y/z"}])
            ),
            "move operation does not apply: doc is missing destination path: /y/z"
        );
    }

    #[test]
    fn copy_value() {
        assert_eq!(
            patched(
                json!({"a":{"b":[1]},"c":[]}),
                json!([
                    {"op":"copy","from":"/a","path":"/d"},
                    {"op":"copy","from":"/a/b/0","path":"/c/-"},
                    {"op":"add","path":"/d/b/-","value":2}
                ])
            ),
            Ok(json!({"a":{"b":[1]},"c":[1],"d":{"b":[1,2]}}))
        );
        assert_eq!(
            patched(json!({}), json!([{"op":"copy","from":"/x","path":"/y"}])),
            Err(PatchError::MissingFrom {
                op: "copy",
                from: "/x".into()
            })
        );
        assert_eq!(
            patched(
                json!({"x":1}),
                json!([{"op":"copy","from":"/x","path":"/y/z"}])
            ),
            Err(PatchError::MissingDestination {
                op: "copy",
                path: "/y/z".into()
            })
        );
    }

    // ---- pointers ----

    #[test]
    fn pointer_escapes() {
        let doc = json!({"a/b":1,"m~n":2,"":3,"~1":4});
        assert_eq!(
            patched(
                doc,
                json!([
                    {"op":"replace","path":"/a~1b","value":10},
                    {"op":"replace","path":"/m~0n","value":20},
                    {"op":"replace","path":"/","value":30},
                    {"op":"remove","path":"/~01"},
                    {"op":"add","path":"/metadata~1annotations","value":{}}
                ])
            ),
            Ok(json!({"a/b":10,"m~n":20,"":30,"metadata/annotations":{}}))
        );
    }

    #[test]
    fn kubernetes_annotation_key_with_slash() {
        assert_eq!(
            patched(
                json!({"metadata":{"annotations":{}}}),
                json!([{"op":"add","path":"/metadata/annotations/example.com~1owner","value":"me"}])
            ),
            Ok(json!({"metadata":{"annotations":{"example.com/owner":"me"}}}))
        );
    }

    // ---- atomicity ----

    #[test]
    fn failure_leaves_target_untouched() {
        let doc = json!({"a":1,"list":[1,2]});
        let before = doc.clone();
        let result = json_patch(
            &doc,
            &json!([
                {"op":"replace","path":"/a","value":2},
                {"op":"remove","path":"/list/0"},
                {"op":"remove","path":"/missing"}
            ]),
        );
        assert_eq!(
            result,
            Err(PatchError::MissingPath {
                op: "remove",
                path: "/missing".into()
            })
        );
        assert_eq!(doc, before);
    }

    #[test]
    fn operations_apply_in_sequence() {
        assert_eq!(
            patched(
                json!({}),
                json!([
                    {"op":"add","path":"/a","value":[]},
                    {"op":"add","path":"/a/-","value":1},
                    {"op":"test","path":"/a","value":[1]},
                    {"op":"replace","path":"/a/0","value":2},
                    {"op":"move","from":"/a","path":"/b"}
                ])
            ),
            Ok(json!({"b":[2]}))
        );
    }

    #[test]
    fn empty_patch_is_identity() {
        let doc = json!({"a":1});
        assert_eq!(patched(doc.clone(), json!([])), Ok(doc));
    }

    // ---- malformed patches ----

    #[test]
    fn malformed_patches() {
        let cases = [
            (
                json!({"op":"add","path":"/a","value":1}),
                PatchError::NotAnArray,
            ),
            (json!(null), PatchError::NotAnArray),
            (
                json!(["add"]),
                PatchError::InvalidOperation {
                    index: 0,
                    reason: "operation must be a JSON object".into(),
                },
            ),
            (
                json!([{"path":"/a"}]),
                PatchError::InvalidOperation {
                    index: 0,
                    reason: r#"missing "op" member"#.into(),
                },
            ),
            (
                json!([{"op":1,"path":"/a"}]),
                PatchError::InvalidOperation {
                    index: 0,
                    reason: r#""op" must be a string"#.into(),
                },
            ),
            (
                json!([{"op":"test","path":"/a","value":1},{"op":"merge","path":"/a"}]),
                PatchError::InvalidOperation {
                    index: 1,
                    reason: "Unexpected kind: merge".into(),
                },
            ),
            (
                json!([{"op":"remove"}]),
                PatchError::InvalidOperation {
                    index: 0,
                    reason: r#"missing "path" member"#.into(),
                },
            ),
            (
                json!([{"op":"remove","path":3}]),
                PatchError::InvalidOperation {
                    index: 0,
                    reason: r#""path" must be a string"#.into(),
                },
            ),
            (
                json!([{"op":"add","path":"/a"}]),
                PatchError::InvalidOperation {
                    index: 0,
                    reason: r#"missing "value" member"#.into(),
                },
            ),
            (
                json!([{"op":"replace","path":"/a"}]),
                PatchError::InvalidOperation {
                    index: 0,
                    reason: r#"missing "value" member"#.into(),
                },
            ),
            (
                json!([{"op":"test","path":"/a"}]),
                PatchError::InvalidOperation {
                    index: 0,
                    reason: r#"missing "value" member"#.into(),
                },
            ),
            (
                json!([{"op":"move","path":"/a"}]),
                PatchError::InvalidOperation {
                    index: 0,
                    reason: r#"missing "from" member"#.into(),
                },
            ),
            (
                json!([{"op":"copy","from":"/a"}]),
                PatchError::InvalidOperation {
                    index: 0,
                    reason: r#"missing "path" member"#.into(),
                },
            ),
            (
                json!([{"op":"remove","path":"a/b"}]),
                PatchError::InvalidOperation {
                    index: 0,
                    reason: r#"invalid JSON pointer "a/b": must be empty or start with '/'"#.into(),
                },
            ),
            (
                json!([{"op":"remove","path":"/a~2"}]),
                PatchError::InvalidOperation {
                    index: 0,
                    reason: r#"invalid JSON pointer "/a~2": '~' must be followed by '0' or '1'"#
                        .into(),
                },
            ),
            (
                json!([{"op":"remove","path":"/a~"}]),
                PatchError::InvalidOperation {
                    index: 0,
                    reason: r#"invalid JSON pointer "/a~": '~' must be followed by '0' or '1'"#
                        .into(),
                },
            ),
        ];
        for (ops, expected) in cases {
            let got = patched(json!({"a":1}), ops.clone());
            assert_eq!(got, Err(expected), "{ops}");
            assert!(got.is_err_and(|e| e.is_malformed()), "{ops}");
        }
    }

    #[test]
    fn malformed_operation_wins_over_earlier_apply_failure() {
        let err = patched(
            json!({}),
            json!([{"op":"remove","path":"/missing"},{"op":"bogus","path":"/a"}]),
        );
        assert_eq!(
            err,
            Err(PatchError::InvalidOperation {
                index: 1,
                reason: "Unexpected kind: bogus".into()
            })
        );
    }

    #[test]
    fn error_classification_and_messages() {
        let applicable = [
            PatchError::MissingPath {
                op: "add",
                path: "/a".into(),
            },
            PatchError::MissingKey { path: "/a".into() },
            PatchError::MissingFrom {
                op: "move",
                from: "/a".into(),
            },
            PatchError::MissingDestination {
                op: "copy",
                path: "/a".into(),
            },
            PatchError::InvalidIndex {
                op: "add",
                path: "/a/9".into(),
                token: "9".into(),
            },
            PatchError::TestFailed { path: "/a".into() },
            PatchError::MoveIntoChild {
                from: "/a".into(),
                path: "/a/b".into(),
            },
        ];
        for e in &applicable {
            assert!(!e.is_malformed(), "{e}");
        }
        assert_eq!(
            PatchError::InvalidOperation {
                index: 2,
                reason: "Unexpected kind: merge".into()
            }
            .to_string(),
            "invalid operation 2: Unexpected kind: merge"
        );
        assert_eq!(
            PatchError::MoveIntoChild {
                from: "/a".into(),
                path: "/a/b".into()
            }
            .to_string(),
            "move operation does not apply: path /a/b is a child of from path /a"
        );
    }
}
