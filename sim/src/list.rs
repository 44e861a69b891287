//! LIST: the resourceVersion / resourceVersionMatch table, selectors, and `limit`/`continue`
//! pagination served from one snapshot (WATCH-PROTOCOL.md §A5).

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::meta;
use super::ops::present;
use super::resource::{Behaviour, ObjectKey, ResourceDef};
use super::selector::{FieldSelector, LabelSelector};
use super::status::{ApiError, ApiResult, Cause};
use super::store::State;

/// The list options of a request, parsed.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListQuery {
    pub(crate) labels: LabelSelector,
    pub(crate) fields: FieldSelector,
    /// `limit`; `None` when unset or 0.
    pub(crate) limit: Option<usize>,
    pub(crate) continue_token: Option<String>,
    pub(crate) resource_version: Option<String>,
    pub(crate) resource_version_match: Option<String>,
}

/// Which revision a list is served at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadAt {
    /// The newest state (a consistent read).
    Latest,
    /// Any state, served like the watch cache: the newest here, and `limit` is ignored.
    Any,
    /// At least this revision: waits (up to 3 s) while the server is behind, then 504.
    NotOlderThan(u64),
    /// Exactly this revision: 410 once compacted.
    Exact(u64),
    /// A continued page: the first page's snapshot, after the token's key.
    Continue(u64),
}

#[derive(Serialize, Deserialize)]
struct Token {
    v: String,
    rv: u64,
    start: (String, String),
}

fn encode_token(rv: u64, key: &ObjectKey) -> String {
    let t = Token {
        v: "meta.k8s.io/v1".into(),
        rv,
        start: (key.namespace.clone(), key.name.clone()),
    };
    // Serializing a struct of strings and integers cannot fail.
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&t).unwrap_or_default())
}

fn decode_token(s: &str) -> ApiResult<(u64, ObjectKey)> {
    let bad = |why: String| ApiError::bad_request(format!("continue key is not valid: {why}"));
    let bytes = URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .map_err(|e| bad(e.to_string()))?;
    let t: Token = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    if t.v != "meta.k8s.io/v1" {
        return Err(bad(format!(
            "incorrect encoded start resourceVersion (version {})",
            t.v
        )));
    }
    Ok((
        t.rv,
        ObjectKey {
            namespace: t.start.0,
            name: t.start.1,
        },
    ))
}

fn list_options_invalid(field: &str, message: String) -> ApiError {
    ApiError::invalid(
        "ListOptions",
        "meta.k8s.io",
        "",
        vec![Cause::new("FieldValueForbidden", field, message)],
    )
}

/// Parses a resourceVersion parameter (decimal, as the server's revisions are).
pub(crate) fn parse_rv(rv: &str) -> ApiResult<u64> {
    rv.parse::<u64>().map_err(|_| {
        ApiError::bad_request(format!(
            "Invalid value: \"{rv}\": resourceVersion must be an integer"
        ))
    })
}

/// Decides the revision a list is served at, with the server's 422/400 answers for invalid combinations.
pub(crate) fn read_at(q: &ListQuery) -> ApiResult<(ReadAt, Option<ObjectKey>)> {
    let rv = q.resource_version.as_deref().filter(|s| !s.is_empty());
    let rv_match = q
        .resource_version_match
        .as_deref()
        .filter(|s| !s.is_empty());
    if let Some(m) = rv_match {
        if rv.is_none() {
            return Err(list_options_invalid(
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
                    .into(),
            ));
        }
        if q.continue_token.is_some() {
            return Err(list_options_invalid(
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden when continue is provided".into(),
            ));
        }
        if m != "Exact" && m != "NotOlderThan" {
            return Err(ApiError::invalid(
                "ListOptions",
                "meta.k8s.io",
                "",
                vec![Cause::new(
                    "FieldValueNotSupported",
                    "resourceVersionMatch",
                    format!(
                        "Unsupported value: \"{m}\": supported values: \"Exact\", \"NotOlderThan\", \"\""
                    ),
                )],
            ));
        }
        if m == "Exact" && rv == Some("0") {
            return Err(list_options_invalid(
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""
                    .into(),
            ));
        }
    }
    if let Some(token) = &q.continue_token {
        if rv.is_some_and(|r| r != "0") {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        let (at, key) = decode_token(token)?;
        return Ok((ReadAt::Continue(at), Some(key)));
    }
    let at = match (rv, rv_match) {
        (None, _) => ReadAt::Latest,
        (Some("0"), _) => ReadAt::Any,
        (Some(n), Some("Exact")) => ReadAt::Exact(parse_rv(n)?),
        (Some(n), Some(_)) => ReadAt::NotOlderThan(parse_rv(n)?),
        // The legacy rule: an RV with a limit is an exact read, without one "not older than".
        (Some(n), None) if q.limit.is_some() => ReadAt::Exact(parse_rv(n)?),
        (Some(n), None) => ReadAt::NotOlderThan(parse_rv(n)?),
    };
    Ok((at, None))
}

/// The value of a field label of `obj`, for field selectors.
pub(crate) fn field_value(def: &ResourceDef, obj: &Value, field: &str) -> Option<String> {
    match field {
        "metadata.name" => Some(meta::name(obj).to_string()),
        "metadata.namespace" => Some(meta::namespace(obj).to_string()),
        "status.phase" if def.behaviour == Behaviour::Namespace => obj
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .map(str::to_string),
        other if is_event(def) && EVENT_FIELDS.contains(&other) => {
            let pointer = format!("/{}", other.replace('.', "/"));
            obj.pointer(&pointer)
                .and_then(Value::as_str)
                .map(str::to_string)
        }
        _ => None,
    }
}

/// Field labels core `v1` Events support besides the metadata ones.
const EVENT_FIELDS: [&str; 10] = [
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "source",
    "type",
];

fn is_event(def: &ResourceDef) -> bool {
    def.gr.group.is_empty() && def.gr.resource == "events"
}

/// Refuses field labels the resource does not support, with the server's 400.
pub(crate) fn check_fields(def: &ResourceDef, fields: &FieldSelector) -> ApiResult<()> {
    for r in fields.requirements() {
        let supported = match r.field.as_str() {
            "metadata.name" => true,
            "metadata.namespace" => def.namespaced,
            "status.phase" => def.behaviour == Behaviour::Namespace,
            other => is_event(def) && EVENT_FIELDS.contains(&other),
        };
        if !supported {
            return Err(ApiError::bad_request(format!(
                "field label not supported: {}",
                r.field
            )));
        }
    }
    Ok(())
}

/// Whether `obj` matches both selectors.
pub(crate) fn matches(
    def: &ResourceDef,
    obj: &Value,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> bool {
    (labels.is_empty() || labels.matches(meta::labels(obj)))
        && (fields.is_empty() || fields.matches(|f| field_value(def, obj, f)))
}

impl State {
    /// Serves one list page at a decided revision. The caller has already waited for a future revision.
    pub(crate) fn list(
        &self,
        def: &ResourceDef,
        version: &str,
        namespace: Option<&str>,
        q: &ListQuery,
        at: ReadAt,
        after: Option<&ObjectKey>,
    ) -> ApiResult<Value> {
        let (snapshot_rv, limit) = match at {
            ReadAt::Latest => (self.rv, q.limit),
            ReadAt::Any => (self.rv, None),
            ReadAt::NotOlderThan(n) => {
                if n > self.rv {
                    return Err(ApiError::too_large_resource_version(n, self.rv));
                }
                (self.rv, q.limit)
            }
            ReadAt::Exact(n) => {
                if n > self.rv {
                    return Err(ApiError::too_large_resource_version(n, self.rv));
                }
                if n < self.compacted {
                    return Err(ApiError::list_expired());
                }
                (n, q.limit)
            }
            ReadAt::Continue(n) => (n, q.limit),
        };
        let in_scope = |k: &ObjectKey| namespace.is_none_or(|ns| k.namespace == ns);
        let wanted =
            |k: &ObjectKey, o: &Value| in_scope(k) && matches(def, o, &q.labels, &q.fields);

        let mut items: Vec<Value> = Vec::new();
        let mut next: Option<ObjectKey> = None;
        let mut take = |k: &ObjectKey, o: &Arc<Value>| -> bool {
            if !wanted(k, o) {
                return true;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                // One more match exists beyond the page: hand out a token to it.
                return false;
            }
            items.push(if def.items_carry_type() {
                present(def, version, o)
            } else {
                strip_type(o)
            });
            next = Some(k.clone());
            true
        };
        let mut more = false;
        if snapshot_rv == self.rv {
            let empty = std::collections::BTreeMap::new();
            let objs = self.objects.get(&def.gr).unwrap_or(&empty);
            let range: Box<dyn Iterator<Item = (&ObjectKey, &Arc<Value>)>> = match after {
                Some(a) => Box::new(objs.range((
                    std::ops::Bound::Excluded(a.clone()),
                    std::ops::Bound::Unbounded,
                ))),
                None => Box::new(objs.iter()),
            };
            for (k, o) in range {
                if !take(k, o) {
                    more = true;
                    break;
                }
            }
        } else {
            let Some(view) = self.snapshot(&def.gr, snapshot_rv, after) else {
                return Err(match at {
                    ReadAt::Continue(_) => ApiError::continue_expired(
                        after.map(|k| encode_token(self.rv, k)).unwrap_or_default(),
                    ),
                    _ => ApiError::list_expired(),
                });
            };
            for (k, o) in &view {
                if !take(k, o) {
                    more = true;
                    break;
                }
            }
        }
        let mut metadata = json!({"resourceVersion": snapshot_rv.to_string()});
        if more && let Some(k) = &next {
            metadata["continue"] = Value::String(encode_token(snapshot_rv, k));
        }
        Ok(json!({
            "apiVersion": def.api_version(version),
            "kind": def.list_kind,
            "metadata": metadata,
            "items": items,
        }))
    }
}

/// Built-in list items omit `apiVersion`/`kind`, as the real server's JSON does.
fn strip_type(o: &Value) -> Value {
    let mut v = o.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(rv: Option<&str>, m: Option<&str>, limit: Option<usize>) -> ListQuery {
        ListQuery {
            resource_version: rv.map(str::to_string),
            resource_version_match: m.map(str::to_string),
            limit,
            ..ListQuery::default()
        }
    }

    #[test]
    fn resource_version_table() {
        let at = |rv, m, l| read_at(&q(rv, m, l)).map(|(a, _)| a);
        assert_eq!(at(None, None, Some(5)), Ok(ReadAt::Latest));
        assert_eq!(at(Some("0"), None, Some(5)), Ok(ReadAt::Any));
        assert_eq!(at(Some("0"), Some("NotOlderThan"), None), Ok(ReadAt::Any));
        assert_eq!(at(Some("7"), None, None), Ok(ReadAt::NotOlderThan(7)));
        assert_eq!(at(Some("7"), None, Some(5)), Ok(ReadAt::Exact(7)));
        assert_eq!(
            at(Some("7"), Some("NotOlderThan"), Some(5)),
            Ok(ReadAt::NotOlderThan(7))
        );
        assert_eq!(at(Some("7"), Some("Exact"), None), Ok(ReadAt::Exact(7)));
        for (rv, m) in [
            (None, Some("Exact")),
            (Some("0"), Some("Exact")),
            (Some("1"), Some("Newest")),
        ] {
            assert_eq!(
                at(rv, m, None).map_err(|e| e.code),
                Err(422),
                "{rv:?} {m:?}"
            );
        }
        let mut with_continue = q(Some("5"), Some("Exact"), None);
        with_continue.continue_token = Some(encode_token(3, &ObjectKey::new("a", "b")));
        assert_eq!(read_at(&with_continue).map_err(|e| e.code).err(), Some(422));
    }

    #[test]
    fn continue_tokens_round_trip_and_reject_garbage() {
        let t = encode_token(42, &ObjectKey::new("ns", "name"));
        assert_eq!(
            decode_token(&t).unwrap(),
            (42, ObjectKey::new("ns", "name"))
        );
        assert_eq!(decode_token("!!!").map_err(|e| e.code).err(), Some(400));
    }
}
