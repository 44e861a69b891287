//! Helpers over `metadata` of untyped objects, and Kubernetes name validation.

use serde_json::{Map, Value};

use super::resource::ResourceDef;
use super::selector;
use super::status::{ApiError, ApiResult, Cause};

/// `obj.metadata`, if it is an object.
pub(crate) fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata")?.as_object()
}

/// `obj.metadata`, created empty when missing or not an object (an `obj` that is not an object is
/// replaced by one; bodies are checked to be objects when decoded, so that never loses data).
pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    object_mut(object_mut(obj).entry("metadata").or_insert(Value::Null))
}

/// `v` as a map, replacing it with an empty one when it is not an object.
pub(crate) fn object_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    match v {
        Value::Object(m) => m,
        // Proven invariant: `v` was made an object just above.
        _ => unreachable!("value was just made an object"),
    }
}

/// Drops empty and null metadata members, as the real server's round trip through the typed
/// `ObjectMeta` (all `omitempty`) does: `finalizers: []` is never stored.
pub(crate) fn normalize(obj: &mut Value) {
    let m = meta_mut(obj);
    m.retain(|_, v| match v {
        Value::Null => false,
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::String(s) => !s.is_empty(),
        _ => true,
    });
}

/// Refuses metadata whose members have the wrong JSON types, as decoding into `ObjectMeta` does (400).
pub(crate) fn check_types(def: &ResourceDef, obj: &Value) -> ApiResult<()> {
    let Some(m) = meta(obj) else { return Ok(()) };
    let bad = |field: &str, want: &str| {
        Err(ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: json: cannot unmarshal into Go struct field \
             ObjectMeta.metadata.{field} of type {want}",
            def.kind,
            obj.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
            def.kind
        )))
    };
    for map_field in ["labels", "annotations"] {
        match m.get(map_field) {
            None | Some(Value::Null) => {}
            Some(Value::Object(o)) if o.values().all(|v| v.is_string() || v.is_null()) => {}
            Some(_) => return bad(map_field, "map[string]string"),
        }
    }
    match m.get("finalizers") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => {}
        Some(_) => return bad("finalizers", "[]string"),
    }
    for list_field in ["ownerReferences", "managedFields"] {
        match m.get(list_field) {
            None | Some(Value::Null | Value::Array(_)) => {}
            Some(_) => return bad(list_field, "[]"),
        }
    }
    for string_field in [
        "name",
        "generateName",
        "namespace",
        "uid",
        "resourceVersion",
    ] {
        match m.get(string_field) {
            None | Some(Value::Null | Value::String(_)) => {}
            Some(_) => return bad(string_field, "string"),
        }
    }
    Ok(())
}

/// Validates label keys and values as `ValidateObjectMeta` does (422 naming each bad label).
pub(crate) fn check_labels(def: &ResourceDef, name: &str, obj: &Value) -> ApiResult<()> {
    let mut causes = Vec::new();
    if let Some(labels) = labels(obj) {
        for (k, v) in labels {
            for e in selector::qualified_name_errors(k) {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    "metadata.labels",
                    format!("Invalid value: {k:?}: {e}"),
                ));
            }
            let value = v.as_str().unwrap_or("");
            for e in selector::label_value_errors(value) {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    "metadata.labels",
                    format!("Invalid value: {value:?}: {e}"),
                ));
            }
        }
    }
    if let Some(annotations) = meta(obj)
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
    {
        for k in annotations.keys() {
            for e in selector::qualified_name_errors(&k.to_lowercase()) {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    "metadata.annotations",
                    format!("Invalid value: {k:?}: {e}"),
                ));
            }
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(&def.kind, &def.gr.group, name, causes))
    }
}

/// A string member of `metadata`.
pub(crate) fn meta_str<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    meta(obj)?.get(key)?.as_str()
}

/// `metadata.name` (empty when missing).
pub(crate) fn name(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or("")
}

/// `metadata.namespace` (empty when missing).
pub(crate) fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace").unwrap_or("")
}

/// `metadata.resourceVersion` (empty when missing).
pub(crate) fn resource_version(obj: &Value) -> &str {
    meta_str(obj, "resourceVersion").unwrap_or("")
}

/// `metadata.finalizers` as strings.
pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// `metadata.labels`, if any.
pub(crate) fn labels(obj: &Value) -> Option<&Map<String, Value>> {
    meta(obj)?.get("labels")?.as_object()
}

/// `metadata.generation` (0 when missing).
pub(crate) fn generation(obj: &Value) -> i64 {
    meta(obj)
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// Whether `metadata.deletionTimestamp` is set.
pub(crate) fn is_deleting(obj: &Value) -> bool {
    meta(obj)
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|v| !v.is_null())
}

/// Now, as Kubernetes writes timestamps: RFC 3339, seconds, UTC.
pub(crate) fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
     characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used \
     for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or \
     '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for \
     validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Checks an RFC 1123 subdomain (names of most objects); the error is the apimachinery message.
pub(crate) fn validate_subdomain(s: &str) -> Result<(), String> {
    if s.len() > 253 {
        return Err("must be no more than 253 characters".into());
    }
    if s.split('.').all(is_label) {
        Ok(())
    } else {
        Err(DNS1123_SUBDOMAIN_MSG.into())
    }
}

/// Checks an RFC 1123 label (namespace names, versions, plurals).
pub(crate) fn validate_label(s: &str) -> Result<(), String> {
    if s.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    if is_label(s) {
        Ok(())
    } else {
        Err(DNS1123_LABEL_MSG.into())
    }
}

/// Five characters from the alphabet apimachinery uses for `generateName` (no vowels, no look-alikes).
pub(crate) fn random_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated_as_rfc1123() {
        assert!(validate_subdomain("foo.example.com").is_ok());
        assert!(validate_subdomain("a-1").is_ok());
        assert!(validate_subdomain("Foo").is_err());
        assert!(validate_subdomain("-a").is_err());
        assert!(validate_subdomain("a..b").is_err());
        assert!(validate_subdomain("").is_err());
        assert!(validate_label("a.b").is_err());
        assert!(validate_label(&"a".repeat(64)).is_err());
    }

    #[test]
    fn generated_suffixes_use_the_safe_alphabet() {
        let s = random_suffix();
        assert_eq!(s.len(), 5);
        assert!(s.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    }

    #[test]
    fn timestamps_have_second_precision() {
        let t = now();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.ends_with('Z'));
    }
}
