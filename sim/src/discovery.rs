//! Discovery (`/version`, `/api`, `/apis`, group and resource lists, aggregated v2) and the OpenAPI v3
//! documents kubectl reads before `create`/`apply` (WATCH-PROTOCOL.md §A2).

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::{Value, json};

use super::resource::{ResourceDef, version_priority};
use super::store::State;

/// `/version`: a 1.33 server, every string field filled (the Python client requires them all).
pub(crate) fn version() -> Value {
    json!({
        "major": "1", "minor": "33",
        "emulationMajor": "1", "emulationMinor": "33",
        "minCompatibilityMajor": "1", "minCompatibilityMinor": "32",
        "gitVersion": "v1.33.0-herald-sim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `/api`.
pub(crate) fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// Served versions per group, in preference order (Kubernetes version priority).
fn groups(state: &State) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for def in state.resources.values() {
        if def.gr.group.is_empty() {
            continue;
        }
        let versions = out.entry(def.gr.group.clone()).or_default();
        for v in def.versions.iter().filter(|v| v.served) {
            if !versions.contains(&v.name) {
                versions.push(v.name.clone());
            }
        }
    }
    for versions in out.values_mut() {
        versions.sort_by(|a, b| version_priority(a, b));
    }
    out.retain(|_, v| !v.is_empty());
    out
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let gvs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    let preferred = gvs.first().cloned().unwrap_or(Value::Null);
    json!({"name": name, "versions": gvs, "preferredVersion": preferred})
}

/// `/apis`: every group but the core group.
pub(crate) fn group_list(state: &State) -> Value {
    let groups: Vec<Value> = groups(state)
        .iter()
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`, or `None` when no version of it is served.
pub(crate) fn group(state: &State, name: &str) -> Option<Value> {
    let all = groups(state);
    let versions = all.get(name)?;
    let mut g = group_json(name, versions);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

fn resources_in<'a>(
    state: &'a State,
    group: &'a str,
    version: &'a str,
) -> impl Iterator<Item = &'a ResourceDef> {
    state
        .resources
        .values()
        .filter(move |d| d.gr.group == group && d.served_version(version).is_some())
}

/// `/api/v1` or `/apis/{g}/{v}`, or `None` when nothing is served there.
pub(crate) fn resource_list(state: &State, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for def in resources_in(state, group, version) {
        let mut r = json!({
            "name": def.gr.resource, "singularName": def.singular, "namespaced": def.namespaced,
            "kind": def.kind, "verbs": def.verbs(),
        });
        if !def.short_names.is_empty() {
            r["shortNames"] = json!(def.short_names);
        }
        if !def.categories.is_empty() {
            r["categories"] = json!(def.categories);
        }
        resources.push(r);
        if def
            .served_version(version)
            .is_some_and(|v| v.status_subresource)
        {
            resources.push(json!({
                "name": format!("{}/status", def.gr.resource), "singularName": "", "namespaced": def.namespaced,
                "kind": def.kind, "verbs": ["get", "patch", "update"],
            }));
        }
        if def.serves_token() {
            resources.push(json!({
                "name": format!("{}/token", def.gr.resource), "singularName": "", "namespaced": def.namespaced,
                "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest", "verbs": ["create"],
            }));
        }
        if def.scale_subresource {
            resources.push(json!({
                "name": format!("{}/scale", def.gr.resource), "singularName": "", "namespaced": def.namespaced,
                "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    Some(json!({
        "kind": "APIResourceList", "apiVersion": "v1",
        "groupVersion": super::resource::api_version(group, version),
        "resources": resources,
    }))
}

/// The media type of aggregated discovery a client asked for, if any (`v2` preferred over `v2beta1`).
pub(crate) fn aggregated_version(accept: &str) -> Option<&'static str> {
    let mut best: Option<&'static str> = None;
    for range in accept.split(',') {
        let params: Vec<(String, String)> = range
            .split(';')
            .skip(1)
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        let has = |k: &str, v: &str| params.iter().any(|(pk, pv)| pk == k && pv == v);
        if !(has("g", "apidiscovery.k8s.io") && has("as", "APIGroupDiscoveryList")) {
            continue;
        }
        if has("v", "v2") {
            return Some("v2");
        }
        if has("v", "v2beta1") {
            best = best.or(Some("v2beta1"));
        }
    }
    best
}

/// The Content-Type of an aggregated discovery reply (clients check it to pick the parser).
pub(crate) fn aggregated_content_type(v: &str) -> String {
    format!("application/json;g=apidiscovery.k8s.io;v={v};as=APIGroupDiscoveryList")
}

/// Aggregated discovery of the core group (`core = true`, for `/api`) or of all other groups (`/apis`).
pub(crate) fn aggregated(state: &State, core: bool, v: &str) -> Value {
    let group_versions: Vec<(String, Vec<String>)> = if core {
        vec![(String::new(), vec!["v1".to_string()])]
    } else {
        groups(state).into_iter().collect()
    };
    let items: Vec<Value> = group_versions
        .iter()
        .map(|(g, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|ver| {
                    let resources: Vec<Value> = resources_in(state, g, ver)
                        .map(|def| {
                            let kind = json!({"group": g, "version": ver, "kind": def.kind});
                            let mut r = json!({
                                "resource": def.gr.resource,
                                "responseKind": kind,
                                "scope": if def.namespaced { "Namespaced" } else { "Cluster" },
                                "singularResource": def.singular,
                                "verbs": def.verbs(),
                            });
                            if !def.short_names.is_empty() {
                                r["shortNames"] = json!(def.short_names);
                            }
                            if !def.categories.is_empty() {
                                r["categories"] = json!(def.categories);
                            }
                            let mut subresources = Vec::new();
                            if def.served_version(ver).is_some_and(|x| x.status_subresource) {
                                subresources.push(json!({"subresource": "status", "responseKind": kind,
                                                         "verbs": ["get", "patch", "update"]}));
                            }
                            if def.scale_subresource {
                                subresources.push(json!({"subresource": "scale",
                                    "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
                                    "verbs": ["get", "patch", "update"]}));
                            }
                            if def.serves_token() {
                                subresources.push(json!({"subresource": "token",
                                    "responseKind": {"group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest"},
                                    "verbs": ["create"]}));
                            }
                            if !subresources.is_empty() {
                                r["subresources"] = json!(subresources);
                            }
                            r
                        })
                        .collect();
                    json!({"version": ver, "resources": resources, "freshness": "Current"})
                })
                .collect();
            json!({"metadata": {"name": g}, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": format!("apidiscovery.k8s.io/{v}"),
           "metadata": {}, "items": items})
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: one entry per served group-version, with a content hash kubectl caches by.
pub(crate) fn openapi_root(state: &State) -> Value {
    let mut paths = serde_json::Map::new();
    let mut gvs: Vec<(String, String)> = vec![(String::new(), "v1".into())];
    for (g, versions) in groups(state) {
        for v in versions {
            gvs.push((g.clone(), v));
        }
    }
    for (g, v) in gvs {
        let doc = openapi_group_version(state, &g, &v);
        let mut h = DefaultHasher::new();
        doc.to_string().hash(&mut h);
        let path = gv_path(&g, &v);
        paths.insert(
            path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={:016X}", h.finish())}),
        );
    }
    json!({"paths": paths})
}

/// The OpenAPI v3 document of one group-version: enough for kubectl to see that the server supports
/// `fieldValidation` (so it skips client-side validation) and that custom resources take merge patches.
pub(crate) fn openapi_group_version(state: &State, group: &str, version: &str) -> Value {
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    for def in resources_in(state, group, version) {
        let gvk = json!({"group": group, "version": version, "kind": def.kind});
        let schema_name = format!("{}.{}.{}", reverse_dns(group), version, def.kind);
        let schema = def
            .served_version(version)
            .and_then(|v| v.schema.clone())
            .unwrap_or_else(
                || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            );
        let mut schema = schema;
        if let Some(m) = schema.as_object_mut() {
            m.insert("x-kubernetes-group-version-kind".into(), json!([gvk]));
        }
        schemas.insert(schema_name.clone(), schema);
        let body_ref = json!({"$ref": format!("#/components/schemas/{schema_name}")});
        let query = |name: &str| json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}});
        let write_params = json!([
            query("dryRun"),
            query("fieldManager"),
            query("fieldValidation")
        ]);
        let patch_body = json!({"content": {
            "application/json-patch+json": {"schema": {"type": "object"}},
            "application/merge-patch+json": {"schema": {"type": "object"}},
            "application/apply-patch+yaml": {"schema": {"type": "object"}},
        }});
        let ok = json!({"200": {"description": "OK", "content": {"application/json": {"schema": body_ref}}}});
        let base = format!("/{}", gv_path(group, version));
        let collection = if def.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", def.gr.resource)
        } else {
            format!("{base}/{}", def.gr.resource)
        };
        paths.insert(
            collection.clone(),
            json!({
                "get": {"x-kubernetes-action": "list", "x-kubernetes-group-version-kind": gvk, "responses": ok},
                "post": {"x-kubernetes-action": "post", "x-kubernetes-group-version-kind": gvk,
                         "parameters": write_params,
                         "requestBody": {"content": {"application/json": {"schema": body_ref}}},
                         "responses": ok},
            }),
        );
        paths.insert(
            format!("{collection}/{{name}}"),
            json!({
                "get": {"x-kubernetes-action": "get", "x-kubernetes-group-version-kind": gvk, "responses": ok},
                "put": {"x-kubernetes-action": "put", "x-kubernetes-group-version-kind": gvk,
                        "parameters": write_params,
                        "requestBody": {"content": {"application/json": {"schema": body_ref}}}, "responses": ok},
                "patch": {"x-kubernetes-action": "patch", "x-kubernetes-group-version-kind": gvk,
                          "parameters": write_params, "requestBody": patch_body, "responses": ok},
                "delete": {"x-kubernetes-action": "delete", "x-kubernetes-group-version-kind": gvk, "responses": ok},
            }),
        );
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0-herald-sim"},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// `example.com` → `com.example`, the prefix of OpenAPI schema names.
fn reverse_dns(group: &str) -> String {
    if group.is_empty() {
        return "io.k8s.api.core".into();
    }
    group.split('.').rev().collect::<Vec<_>>().join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_aggregated_discovery_from_accept() {
        let kubectl =
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
        assert_eq!(aggregated_version(kubectl), Some("v2"));
        let beta = "application/json;as=APIGroupDiscoveryList;v=v2beta1;g=apidiscovery.k8s.io,application/json";
        assert_eq!(aggregated_version(beta), Some("v2beta1"));
        assert_eq!(aggregated_version("application/json"), None);
    }
}
