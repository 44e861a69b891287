//! Request bodies in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`), read into
//! the JSON the rest of the simulator works on. client-go's typed clientset sends built-in objects this
//! way: Helm stores its releases through it, as Secrets, and deletes them with protobuf DeleteOptions.
//!
//! Only the messages those clients send are decoded (Secret, ConfigMap, Namespace, ServiceAccount,
//! the RBAC kinds, DeleteOptions, TokenRequest, the self-subject reviews, and the
//! ObjectMeta inside them); any other kind is answered 415, so a client that can fall back to JSON does.
//! Replies stay JSON: every client that offers protobuf also accepts JSON.

use base64::Engine;
use serde_json::{Map, Value, json};

use super::status::ApiError;

/// The media type, as clients send it in `Content-Type`.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The four bytes every protobuf-encoded Kubernetes object starts with.
const MAGIC: &[u8] = b"k8s\0";

/// Why a body could not be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum DecodeError {
    #[error("the body does not start with the protobuf magic number")]
    NoMagic,
    #[error("the protobuf message is truncated or malformed")]
    Malformed,
    #[error("kind {0:?} in protobuf is not supported by the simulator")]
    Unsupported(String),
}

impl From<DecodeError> for ApiError {
    fn from(e: DecodeError) -> Self {
        match e {
            DecodeError::Unsupported(kind) => ApiError::custom(
                415,
                "UnsupportedMediaType",
                &format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (herald-sim reads {kind} in JSON only)"
                ),
            ),
            other => ApiError::bad_request(format!("error decoding the request body: {other}")),
        }
    }
}

/// One field of a message: its number and its value (varint or length-delimited bytes).
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut out = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self.buf.split_first().ok_or(DecodeError::Malformed)?;
            self.buf = rest;
            out |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(out);
            }
        }
        Err(DecodeError::Malformed)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.buf.len() {
            return Err(DecodeError::Malformed);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    /// The next field, skipping the fixed-width kinds no message here uses.
    fn next(&mut self) -> Result<Option<(u64, Field<'a>)>, DecodeError> {
        loop {
            if self.buf.is_empty() {
                return Ok(None);
            }
            let tag = self.varint()?;
            let number = tag >> 3;
            match tag & 7 {
                0 => return Ok(Some((number, Field::Varint(self.varint()?)))),
                1 => {
                    self.take(8)?;
                }
                2 => {
                    let len =
                        usize::try_from(self.varint()?).map_err(|_| DecodeError::Malformed)?;
                    return Ok(Some((number, Field::Bytes(self.take(len)?))));
                }
                5 => {
                    self.take(4)?;
                }
                _ => return Err(DecodeError::Malformed),
            }
        }
    }
}

fn fields(buf: &[u8]) -> Result<Vec<(u64, Field<'_>)>, DecodeError> {
    let mut r = Reader { buf };
    let mut out = Vec::new();
    while let Some(f) = r.next()? {
        out.push(f);
    }
    Ok(out)
}

fn string(b: &[u8]) -> Result<String, DecodeError> {
    String::from_utf8(b.to_vec()).map_err(|_| DecodeError::Malformed)
}

/// A `map<string, string>` entry (or `map<string, bytes>`, base64-encoded as JSON carries bytes).
fn map_entry(b: &[u8], bytes_values: bool) -> Result<(String, Value), DecodeError> {
    let mut key = String::new();
    let mut value = Value::String(String::new());
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(k)) => key = string(k)?,
            (2, Field::Bytes(v)) if bytes_values => {
                value = Value::String(base64::engine::general_purpose::STANDARD.encode(v));
            }
            (2, Field::Bytes(v)) => value = Value::String(string(v)?),
            _ => {}
        }
    }
    Ok((key, value))
}

fn insert_entry(map: &mut Map<String, Value>, key: &str, entry: (String, Value)) {
    if let Some(m) = map.entry(key).or_insert_with(|| json!({})).as_object_mut() {
        m.insert(entry.0, entry.1);
    }
}

/// `k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta`: the fields a client sets (server-owned ones
/// are set again by the write anyway).
fn object_meta(b: &[u8]) -> Result<Value, DecodeError> {
    let mut m = Map::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            // Empty strings are how gogo-protobuf sends unset fields; JSON leaves them out.
            (1..=6, Field::Bytes([])) => {}
            (1, Field::Bytes(v)) => drop(m.insert("name".into(), json!(string(v)?))),
            (2, Field::Bytes(v)) => drop(m.insert("generateName".into(), json!(string(v)?))),
            (3, Field::Bytes(v)) => drop(m.insert("namespace".into(), json!(string(v)?))),
            (5, Field::Bytes(v)) => drop(m.insert("uid".into(), json!(string(v)?))),
            (6, Field::Bytes(v)) => drop(m.insert("resourceVersion".into(), json!(string(v)?))),
            (11, Field::Bytes(v)) => insert_entry(&mut m, "labels", map_entry(v, false)?),
            (12, Field::Bytes(v)) => insert_entry(&mut m, "annotations", map_entry(v, false)?),
            (14, Field::Bytes(v)) => {
                let list = m.entry("finalizers").or_insert_with(|| json!([]));
                if let Some(a) = list.as_array_mut() {
                    a.push(json!(string(v)?));
                }
            }
            _ => {}
        }
    }
    Ok(Value::Object(m))
}

/// `k8s.io.api.core.v1.Secret`.
fn secret(b: &[u8]) -> Result<Value, DecodeError> {
    let mut o = Map::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(v)) => drop(o.insert("metadata".into(), object_meta(v)?)),
            (2, Field::Bytes(v)) => insert_entry(&mut o, "data", map_entry(v, true)?),
            (3, Field::Bytes(v)) => drop(o.insert("type".into(), json!(string(v)?))),
            (4, Field::Bytes(v)) => insert_entry(&mut o, "stringData", map_entry(v, false)?),
            (5, Field::Varint(v)) => drop(o.insert("immutable".into(), json!(v != 0))),
            _ => {}
        }
    }
    Ok(Value::Object(o))
}

/// `k8s.io.api.core.v1.ConfigMap`.
fn config_map(b: &[u8]) -> Result<Value, DecodeError> {
    let mut o = Map::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(v)) => drop(o.insert("metadata".into(), object_meta(v)?)),
            (2, Field::Bytes(v)) => insert_entry(&mut o, "data", map_entry(v, false)?),
            (3, Field::Bytes(v)) => insert_entry(&mut o, "binaryData", map_entry(v, true)?),
            (4, Field::Varint(v)) => drop(o.insert("immutable".into(), json!(v != 0))),
            _ => {}
        }
    }
    Ok(Value::Object(o))
}

/// `k8s.io.api.core.v1.Namespace` (what `kubectl create namespace` sends): metadata and finalizers.
fn namespace(b: &[u8]) -> Result<Value, DecodeError> {
    let mut o = Map::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(v)) => drop(o.insert("metadata".into(), object_meta(v)?)),
            (2, Field::Bytes(spec)) => {
                let mut finalizers = Vec::new();
                for (n, f) in fields(spec)? {
                    if let (1, Field::Bytes(x)) = (n, f) {
                        finalizers.push(json!(string(x)?));
                    }
                }
                o.insert("spec".into(), json!({"finalizers": finalizers}));
            }
            _ => {}
        }
    }
    Ok(Value::Object(o))
}

/// `k8s.io.api.core.v1.ServiceAccount` (what `kubectl create serviceaccount` sends).
fn service_account(b: &[u8]) -> Result<Value, DecodeError> {
    let mut o = Map::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(v)) => drop(o.insert("metadata".into(), object_meta(v)?)),
            (3, Field::Bytes(v)) => {
                let mut name = String::new();
                for (n, f) in fields(v)? {
                    if let (1, Field::Bytes(x)) = (n, f) {
                        name = string(x)?;
                    }
                }
                let list = o.entry("imagePullSecrets").or_insert_with(|| json!([]));
                if let Some(a) = list.as_array_mut() {
                    a.push(json!({"name": name}));
                }
            }
            (4, Field::Varint(v)) => {
                drop(o.insert("automountServiceAccountToken".into(), json!(v != 0)));
            }
            _ => {}
        }
    }
    Ok(Value::Object(o))
}

/// `k8s.io.api.authentication.v1.TokenRequest` (what `kubectl create token` sends): metadata and the
/// spec's audiences and expiration; a bound object reference is not read.
fn token_request(b: &[u8]) -> Result<Value, DecodeError> {
    let mut o = Map::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(v)) => drop(o.insert("metadata".into(), object_meta(v)?)),
            (2, Field::Bytes(v)) => {
                let mut spec = Map::new();
                let mut audiences = Vec::new();
                for (n, f) in fields(v)? {
                    match (n, f) {
                        (1, Field::Bytes(x)) => audiences.push(json!(string(x)?)),
                        (4, Field::Varint(x)) => {
                            drop(spec.insert("expirationSeconds".into(), json!(x)))
                        }
                        _ => {}
                    }
                }
                spec.insert("audiences".into(), Value::Array(audiences));
                o.insert("spec".into(), Value::Object(spec));
            }
            _ => {}
        }
    }
    Ok(Value::Object(o))
}

/// `k8s.io.api.authorization.v1.SelfSubjectAccessReview` (what `kubectl auth can-i` sends): the
/// resource or non-resource attributes of its spec.
fn access_review(b: &[u8]) -> Result<Value, DecodeError> {
    let mut o = Map::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(v)) => drop(o.insert("metadata".into(), object_meta(v)?)),
            (2, Field::Bytes(v)) => {
                let mut spec = Map::new();
                for (n, f) in fields(v)? {
                    match (n, f) {
                        (1, Field::Bytes(x)) => drop(spec.insert(
                            "resourceAttributes".into(),
                            strings_message(
                                x,
                                &[
                                    "namespace",
                                    "verb",
                                    "group",
                                    "version",
                                    "resource",
                                    "subresource",
                                    "name",
                                ],
                            )?,
                        )),
                        (2, Field::Bytes(x)) => drop(spec.insert(
                            "nonResourceAttributes".into(),
                            strings_message(x, &["path", "verb"])?,
                        )),
                        _ => {}
                    }
                }
                o.insert("spec".into(), Value::Object(spec));
            }
            _ => {}
        }
    }
    Ok(Value::Object(o))
}

/// `k8s.io.api.authentication.v1.SelfSubjectReview` (`kubectl auth whoami`): metadata only, the
/// status being the server's to fill.
fn self_subject_review(b: &[u8]) -> Result<Value, DecodeError> {
    let mut o = Map::new();
    for (n, f) in fields(b)? {
        if let (1, Field::Bytes(v)) = (n, f) {
            o.insert("metadata".into(), object_meta(v)?);
        }
    }
    Ok(Value::Object(o))
}

/// `k8s.io.api.authorization.v1.SelfSubjectRulesReview` (`kubectl auth can-i --list`).
fn rules_review(b: &[u8]) -> Result<Value, DecodeError> {
    let mut o = Map::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(v)) => drop(o.insert("metadata".into(), object_meta(v)?)),
            (2, Field::Bytes(v)) => {
                drop(o.insert("spec".into(), strings_message(v, &["namespace"])?))
            }
            _ => {}
        }
    }
    Ok(Value::Object(o))
}

/// A message of string fields only (`PolicyRule`, `Subject`, `RoleRef`): `names[n - 1]` is field n;
/// a name ending in `[]` is a repeated field.
fn strings_message(b: &[u8], names: &[&str]) -> Result<Value, DecodeError> {
    let mut o = Map::new();
    for (n, f) in fields(b)? {
        let Field::Bytes(v) = f else { continue };
        let Some(name) = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| names.get(i))
        else {
            continue;
        };
        match name.strip_suffix("[]") {
            Some(list) => {
                if let Some(a) = o.entry(list).or_insert_with(|| json!([])).as_array_mut() {
                    a.push(json!(string(v)?));
                }
            }
            // Empty strings are how gogo-protobuf sends unset fields; JSON leaves them out.
            None if v.is_empty() => {}
            None => drop(o.insert((*name).to_string(), json!(string(v)?))),
        }
    }
    Ok(Value::Object(o))
}

const POLICY_RULE: &[&str] = &[
    "verbs[]",
    "apiGroups[]",
    "resources[]",
    "resourceNames[]",
    "nonResourceURLs[]",
];

/// `k8s.io.api.rbac.v1.Role` and `ClusterRole` (`kubectl create role|clusterrole`); a ClusterRole's
/// aggregation rule is not read.
fn role(b: &[u8]) -> Result<Value, DecodeError> {
    let mut o = Map::new();
    let mut rules = Vec::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(v)) => drop(o.insert("metadata".into(), object_meta(v)?)),
            (2, Field::Bytes(v)) => rules.push(strings_message(v, POLICY_RULE)?),
            _ => {}
        }
    }
    o.insert("rules".into(), Value::Array(rules));
    Ok(Value::Object(o))
}

/// `k8s.io.api.rbac.v1.RoleBinding` and `ClusterRoleBinding` (`kubectl create rolebinding|...`).
fn binding(b: &[u8]) -> Result<Value, DecodeError> {
    let mut o = Map::new();
    let mut subjects = Vec::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(v)) => drop(o.insert("metadata".into(), object_meta(v)?)),
            (2, Field::Bytes(v)) => {
                subjects.push(strings_message(
                    v,
                    &["kind", "apiGroup", "name", "namespace"],
                )?);
            }
            (3, Field::Bytes(v)) => {
                let role_ref = strings_message(v, &["apiGroup", "kind", "name"])?;
                o.insert("roleRef".into(), role_ref);
            }
            _ => {}
        }
    }
    if !subjects.is_empty() {
        o.insert("subjects".into(), Value::Array(subjects));
    }
    Ok(Value::Object(o))
}

/// `k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions`.
fn delete_options(b: &[u8]) -> Result<Value, DecodeError> {
    let mut o = Map::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Varint(v)) => {
                // int64 as a two's-complement varint.
                #[allow(clippy::cast_possible_wrap)]
                let secs = v as i64;
                o.insert("gracePeriodSeconds".into(), json!(secs));
            }
            (2, Field::Bytes(v)) => {
                let mut pre = Map::new();
                for (n, f) in fields(v)? {
                    match (n, f) {
                        (1, Field::Bytes(x)) => drop(pre.insert("uid".into(), json!(string(x)?))),
                        (2, Field::Bytes(x)) => {
                            drop(pre.insert("resourceVersion".into(), json!(string(x)?)));
                        }
                        _ => {}
                    }
                }
                o.insert("preconditions".into(), Value::Object(pre));
            }
            (3, Field::Varint(v)) => drop(o.insert("orphanDependents".into(), json!(v != 0))),
            (4, Field::Bytes(v)) => drop(o.insert("propagationPolicy".into(), json!(string(v)?))),
            (5, Field::Bytes(v)) => {
                let list = o.entry("dryRun").or_insert_with(|| json!([]));
                if let Some(a) = list.as_array_mut() {
                    a.push(json!(string(v)?));
                }
            }
            _ => {}
        }
    }
    Ok(Value::Object(o))
}

/// Reads a protobuf body (the `runtime.Unknown` envelope and the object in it) as JSON.
pub(crate) fn to_json(body: &[u8]) -> Result<Value, DecodeError> {
    let envelope = body.strip_prefix(MAGIC).ok_or(DecodeError::NoMagic)?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for (n, f) in fields(envelope)? {
        match (n, f) {
            (1, Field::Bytes(type_meta)) => {
                for (n, f) in fields(type_meta)? {
                    match (n, f) {
                        (1, Field::Bytes(v)) => api_version = string(v)?,
                        (2, Field::Bytes(v)) => kind = string(v)?,
                        _ => {}
                    }
                }
            }
            (2, Field::Bytes(v)) => raw = v,
            _ => {}
        }
    }
    let mut obj = match kind.as_str() {
        "Secret" => secret(raw)?,
        "ConfigMap" => config_map(raw)?,
        "Namespace" => namespace(raw)?,
        "ServiceAccount" => service_account(raw)?,
        "Role" | "ClusterRole" => role(raw)?,
        "RoleBinding" | "ClusterRoleBinding" => binding(raw)?,
        "DeleteOptions" => delete_options(raw)?,
        "TokenRequest" => token_request(raw)?,
        "SelfSubjectAccessReview" => access_review(raw)?,
        "SelfSubjectRulesReview" => rules_review(raw)?,
        "SelfSubjectReview" => self_subject_review(raw)?,
        _ => return Err(DecodeError::Unsupported(kind)),
    };
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!(api_version));
        m.insert("kind".into(), json!(kind));
    }
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(n: u64, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![u8::try_from(n << 3 | 2).unwrap()];
        out.push(u8::try_from(bytes.len()).unwrap());
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn reads_a_secret_as_client_go_encodes_it() {
        let labels = [field(1, b"owner"), field(2, b"helm")].concat();
        let meta = [field(1, b"sh.helm.release.v1.demo.v1"), field(11, &labels)].concat();
        let data = [field(1, b"release"), field(2, b"\x00\x01")].concat();
        let secret_bytes = [
            field(1, &meta),
            field(2, &data),
            field(3, b"helm.sh/release.v1"),
        ]
        .concat();
        let type_meta = [field(1, b"v1"), field(2, b"Secret")].concat();
        let body = [
            MAGIC.to_vec(),
            field(1, &type_meta),
            field(2, &secret_bytes),
        ]
        .concat();
        let v = to_json(&body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
                   "metadata": {"name": "sh.helm.release.v1.demo.v1", "labels": {"owner": "helm"}},
                   "data": {"release": "AAE="}})
        );
        assert_eq!(to_json(b"{}"), Err(DecodeError::NoMagic));
        let pod = [MAGIC.to_vec(), field(1, &[field(2, b"Pod")].concat())].concat();
        assert_eq!(to_json(&pod), Err(DecodeError::Unsupported("Pod".into())));
        assert_eq!(
            to_json(&[MAGIC, &[0x0a, 0x05]].concat()),
            Err(DecodeError::Malformed)
        );
    }
}
