//! What kube-apiserver's registry strategies do to the built-in kinds a chart installs, and nothing a
//! controller would do: Secret `stringData` folded into `data`, Service defaults and cluster IPs, the
//! empty status a new workload starts with, and the `autoscaling/v1` Scale view of workloads.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use base64::Engine;
use serde_json::{Map, Value, json};

use super::meta;
use super::resource::{GroupResource, ResourceDef};
use super::status::{ApiError, ApiResult, Cause};
use super::store::State;

/// The service CIDR kube-apiserver defaults to (`--service-cluster-ip-range=10.96.0.0/12`).
const SERVICE_CIDR_BASE: u32 = u32::from_be_bytes([10, 96, 0, 0]);
const SERVICE_CIDR_SIZE: u32 = 1 << 20;

fn is(def: &ResourceDef, group: &str, resource: &str) -> bool {
    def.gr.group == group && def.gr.resource == resource
}

/// The status a new object of `def` starts with (a status in the create request is dropped, as the
/// strategies' `PrepareForCreate` do), or `None` when the kind has no status subresource.
pub(crate) fn initial_status(def: &ResourceDef) -> Option<Value> {
    if is(def, "", "services") {
        Some(json!({"loadBalancer": {}}))
    } else if def.versions.iter().any(|v| v.status_subresource) {
        Some(json!({}))
    } else {
        None
    }
}

/// Applies the defaults and conversions of `def`'s kind to a create (`old` is `None`) or an update.
pub(crate) fn prepare(
    state: &State,
    def: &ResourceDef,
    old: Option<&Value>,
    obj: &mut Value,
) -> ApiResult<()> {
    match (def.gr.group.as_str(), def.gr.resource.as_str()) {
        ("", "secrets") => prepare_secret(def, obj),
        ("", "services") => prepare_service(state, def, old, obj),
        ("apps", "deployments" | "statefulsets") => {
            let spec = object_at(obj, "spec");
            spec.entry("replicas").or_insert(json!(1));
            Ok(())
        }
        _ => Ok(()),
    }
}

fn object_at<'a>(obj: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    let map = meta::object_mut(obj);
    let entry = map.entry(key).or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    meta::object_mut(entry)
}

/// `stringData` is write-only: its entries replace those of `data` (base64-encoded) and it is never
/// stored or returned. `type` defaults to `Opaque`.
fn prepare_secret(def: &ResourceDef, obj: &mut Value) -> ApiResult<()> {
    let map = meta::object_mut(obj);
    if let Some(string_data) = map.remove("stringData") {
        match string_data {
            Value::Null => {}
            Value::Object(entries) => {
                let data = map.entry("data").or_insert_with(|| json!({}));
                if data.is_null() {
                    *data = json!({});
                }
                let data = meta::object_mut(data);
                for (k, v) in entries {
                    let Some(text) = v.as_str() else {
                        return Err(invalid_secret(def, &k));
                    };
                    let encoded = base64::engine::general_purpose::STANDARD.encode(text);
                    data.insert(k, Value::String(encoded));
                }
            }
            _ => {
                return Err(ApiError::bad_request(
                    "Secret in version \"v1\" cannot be handled as a Secret: json: cannot unmarshal stringData into Go struct field Secret.stringData of type map[string]string",
                ));
            }
        }
    }
    let map = meta::object_mut(obj);
    if map
        .get("type")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        map.insert("type".into(), json!("Opaque"));
    }
    Ok(())
}

fn invalid_secret(def: &ResourceDef, key: &str) -> ApiError {
    ApiError::bad_request(format!(
        "{} in version \"v1\" cannot be handled as a {}: json: cannot unmarshal stringData.{key} into Go struct field Secret.stringData of type string",
        def.kind, def.kind
    ))
}

/// Service defaults (`type`, `sessionAffinity`, IP families, ports' `protocol` and `targetPort`) and a
/// cluster IP from 10.96.0.0/12 when none is asked for. An update without a cluster IP keeps the one
/// allocated, as the registry's `patchAllocatedValues` does; a changed one is refused (immutable).
fn prepare_service(
    state: &State,
    def: &ResourceDef,
    old: Option<&Value>,
    obj: &mut Value,
) -> ApiResult<()> {
    let name = meta::name(obj).to_string();
    let spec = object_at(obj, "spec");
    let ty = spec
        .get("type")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .unwrap_or("ClusterIP")
        .to_string();
    spec.insert("type".into(), json!(ty));
    spec.entry("sessionAffinity").or_insert(json!("None"));
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            port.entry("protocol").or_insert(json!("TCP"));
            if !port.contains_key("targetPort")
                && let Some(p) = port.get("port").cloned()
            {
                port.insert("targetPort".into(), p);
            }
        }
    }
    if ty == "ExternalName" {
        return Ok(());
    }
    spec.entry("internalTrafficPolicy")
        .or_insert(json!("Cluster"));
    let requested = spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .filter(|ip| !ip.is_empty())
        .map(str::to_string)
        .or_else(|| {
            spec.get("clusterIPs")
                .and_then(|ips| ips.get(0))
                .and_then(Value::as_str)
                .filter(|ip| !ip.is_empty())
                .map(str::to_string)
        });
    let previous = old
        .and_then(|o| o.pointer("/spec/clusterIP"))
        .and_then(Value::as_str)
        .filter(|ip| !ip.is_empty())
        .map(str::to_string);
    let ip = match (requested, previous) {
        (Some(new), Some(prev)) if new != prev => {
            return Err(ApiError::invalid(
                &def.kind,
                &def.gr.group,
                &name,
                vec![Cause::new(
                    "FieldValueInvalid",
                    "spec.clusterIPs[0]",
                    format!("Invalid value: []string{{\"{new}\"}}: may not change once set"),
                )],
            ));
        }
        (Some(ip), _) | (None, Some(ip)) => {
            if ip != "None" && ip.parse::<Ipv4Addr>().is_err() {
                return Err(ApiError::invalid(
                    &def.kind,
                    &def.gr.group,
                    &name,
                    vec![Cause::new(
                        "FieldValueInvalid",
                        "spec.clusterIPs[0]",
                        format!(
                            "Invalid value: \"{ip}\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
                        ),
                    )],
                ));
            }
            ip
        }
        (None, None) => allocate_cluster_ip(state)
            .ok_or_else(|| ApiError::internal("failed to allocate a serviceIP: range is full"))?,
    };
    spec.insert("clusterIP".into(), json!(ip));
    spec.insert("clusterIPs".into(), json!([ip]));
    spec.entry("ipFamilies").or_insert(json!(["IPv4"]));
    spec.entry("ipFamilyPolicy").or_insert(json!("SingleStack"));
    Ok(())
}

/// The lowest free address of the service range after 10.96.0.10 (`.1` is the `kubernetes`
/// Service's and `.10` the cluster DNS's on a real cluster).
fn allocate_cluster_ip(state: &State) -> Option<String> {
    let used: BTreeSet<String> = state
        .objects
        .get(&GroupResource::new("", "services"))
        .map(|svcs| {
            svcs.values()
                .filter_map(|s| s.pointer("/spec/clusterIP").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    (11..SERVICE_CIDR_SIZE - 1)
        .map(|offset| Ipv4Addr::from(SERVICE_CIDR_BASE + offset).to_string())
        .find(|ip| !used.contains(ip))
}

/// The `autoscaling/v1` Scale of a workload, as `GET …/scale` answers it.
pub(crate) fn scale_of(obj: &Value) -> Value {
    let m = meta::meta(obj).cloned().unwrap_or_default();
    let pick: Map<String, Value> = m
        .into_iter()
        .filter(|(k, _)| {
            matches!(
                k.as_str(),
                "name" | "namespace" | "uid" | "resourceVersion" | "creationTimestamp"
            )
        })
        .collect();
    let replicas = obj.pointer("/spec/replicas").cloned().unwrap_or(json!(1));
    let status_replicas = obj.pointer("/status/replicas").cloned().unwrap_or(json!(0));
    let selector = obj
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": pick,
        "spec": {"replicas": replicas},
        "status": {"replicas": status_replicas, "selector": selector},
    })
}

/// The replica count a Scale written to `…/scale` asks for.
pub(crate) fn requested_replicas(def: &ResourceDef, name: &str, scale: &Value) -> ApiResult<i64> {
    match scale.pointer("/spec/replicas") {
        None | Some(Value::Null) => Ok(0),
        Some(v) => match v.as_i64() {
            Some(n) if n >= 0 => Ok(n),
            _ => Err(ApiError::invalid(
                "Scale",
                "autoscaling",
                name,
                vec![Cause::new(
                    "FieldValueInvalid",
                    "spec.replicas",
                    format!(
                        "Invalid value: {v}: must be greater than or equal to 0 ({})",
                        def.kind
                    ),
                )],
            )),
        },
    }
}
