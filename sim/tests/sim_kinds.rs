//! The built-in kinds a chart installs (issue 17 item 1): discovery as kube-apiserver 1.33 gives it,
//! CRUD and watch of each kind through kube-rs, the registry behaviours (Secret `stringData`, Service
//! cluster IPs and defaults, generation, the scale subresource), strategic merge patches, protobuf
//! bodies, and `kubectl apply --server-side` of a manifest holding every kind.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::api::{
    Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use crate::support::{Kubectl, Raw, kubectl_path, sim};

/// (group, version, plural, kind, namespaced, short names, categories, subresources)
type Row = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
);

/// What `kubectl api-resources` and aggregated discovery show on a 1.33 cluster for these kinds.
const KINDS: &[Row] = &[
    (
        "",
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        true,
        &["sa"],
        &[],
        &["token"],
    ),
    ("", "v1", "configmaps", "ConfigMap", true, &["cm"], &[], &[]),
    ("", "v1", "secrets", "Secret", true, &[], &[], &[]),
    (
        "",
        "v1",
        "services",
        "Service",
        true,
        &["svc"],
        &["all"],
        &["status"],
    ),
    (
        "apps",
        "v1",
        "deployments",
        "Deployment",
        true,
        &["deploy"],
        &["all"],
        &["status", "scale"],
    ),
    (
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        true,
        &["sts"],
        &["all"],
        &["status", "scale"],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "roles",
        "Role",
        true,
        &[],
        &[],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "ClusterRole",
        false,
        &[],
        &[],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "RoleBinding",
        true,
        &[],
        &[],
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
        &[],
        &[],
        &[],
    ),
    (
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        true,
        &["pdb"],
        &[],
        &["status"],
    ),
    (
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        "NetworkPolicy",
        true,
        &["netpol"],
        &[],
        &[],
    ),
];

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    }
}

#[tokio::test]
async fn discovery_lists_each_builtin_kind_as_kube_apiserver_does() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    let accept =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let aggregated = |path: &'static str| {
        let raw = &raw;
        async move {
            let r = raw
                .http
                .get(format!("{}{path}", raw.base))
                .header("accept", accept)
                .send()
                .await
                .unwrap();
            r.json::<Value>().await.unwrap()
        }
    };
    let core_v2 = aggregated("/api").await;
    let groups_v2 = aggregated("/apis").await;
    for (group, version, plural, kind, namespaced, short, categories, subs) in KINDS {
        let list = raw.get(&gv_path(group, version)).await.body;
        let resources = list["resources"].as_array().unwrap();
        let r = resources
            .iter()
            .find(|r| r["name"] == *plural)
            .unwrap_or_else(|| panic!("{plural} in {}", gv_path(group, version)));
        assert_eq!(r["kind"], *kind, "{plural}");
        assert_eq!(r["namespaced"], *namespaced, "{plural}");
        assert_eq!(r["verbs"], json!(VERBS), "{plural}");
        assert_eq!(
            r.get("shortNames").cloned().unwrap_or(json!([])),
            json!(short),
            "{plural}"
        );
        assert_eq!(
            r.get("categories").cloned().unwrap_or(json!([])),
            json!(categories),
            "{plural}"
        );
        let listed_subs: Vec<&str> = resources
            .iter()
            .filter_map(|x| x["name"].as_str()?.strip_prefix(&format!("{plural}/")))
            .collect();
        assert_eq!(listed_subs, *subs, "{plural}");
        if subs.contains(&"token") {
            let token = resources
                .iter()
                .find(|x| x["name"] == format!("{plural}/token"))
                .unwrap();
            assert_eq!(
                (
                    &token["group"],
                    &token["version"],
                    &token["kind"],
                    &token["verbs"]
                ),
                (
                    &json!("authentication.k8s.io"),
                    &json!("v1"),
                    &json!("TokenRequest"),
                    &json!(["create"])
                )
            );
        }
        if subs.contains(&"scale") {
            let scale = resources
                .iter()
                .find(|x| x["name"] == format!("{plural}/scale"))
                .unwrap();
            assert_eq!(
                (&scale["group"], &scale["version"], &scale["kind"]),
                (&json!("autoscaling"), &json!("v1"), &json!("Scale"))
            );
        }

        let doc = if group.is_empty() {
            &core_v2
        } else {
            &groups_v2
        };
        let g = doc["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == *group)
            .unwrap_or_else(|| panic!("group {group:?} in aggregated discovery"));
        let a = g["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["resource"] == *plural)
            .unwrap();
        assert_eq!(
            a["scope"],
            if *namespaced { "Namespaced" } else { "Cluster" }
        );
        assert_eq!(a["responseKind"]["kind"], *kind);
        let agg_subs: Vec<&str> = a
            .get("subresources")
            .and_then(Value::as_array)
            .map(|s| {
                s.iter()
                    .map(|x| x["subresource"].as_str().unwrap())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(agg_subs, *subs, "{plural} (aggregated)");

        let root = raw.get("/openapi/v3").await.body;
        let key = gv_path(group, version).trim_start_matches('/').to_string();
        let url = root["paths"][&key]["serverRelativeURL"]
            .as_str()
            .unwrap_or_else(|| panic!("{key} in /openapi/v3"))
            .to_string();
        let openapi = raw.get(&url).await.body;
        assert!(
            openapi["components"]["schemas"]
                .as_object()
                .unwrap()
                .values()
                .any(|s| s["x-kubernetes-group-version-kind"][0]["kind"] == *kind),
            "{kind} in {url}"
        );
    }
}

fn api(client: &kube::Client, row: &Row) -> Api<DynamicObject> {
    let (group, version, plural, kind, namespaced, ..) = *row;
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    if namespaced {
        Api::namespaced_with(client.clone(), "default", &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    }
}

/// A valid minimal object of each kind; `mark` goes where an update can change it.
fn sample(kind: &str, mark: &str) -> Value {
    let body = match kind {
        "ServiceAccount" => json!({"automountServiceAccountToken": mark == "b"}),
        "ConfigMap" => json!({"data": {"mark": mark}}),
        "Secret" => json!({"stringData": {"mark": mark}}),
        "Service" => json!({"spec": {"selector": {"mark": mark}, "ports": [{"port": 80}]}}),
        "Deployment" | "StatefulSet" => json!({"spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "template": {"metadata": {"labels": {"app": "x"}},
                         "spec": {"containers": [{"name": "c", "image": format!("img:{mark}")}]}}}}),
        "Role" | "ClusterRole" => {
            json!({"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": [mark]}]})
        }
        "RoleBinding" | "ClusterRoleBinding" => json!({
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": mark},
            "subjects": [{"kind": "ServiceAccount", "name": "x", "namespace": "default"}]}),
        "PodDisruptionBudget" => {
            json!({"spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"mark": mark}}}})
        }
        "NetworkPolicy" => json!({"spec": {"podSelector": {"matchLabels": {"mark": mark}}}}),
        other => panic!("no sample for {other}"),
    };
    let mut obj = body;
    obj["metadata"] = json!({"name": "one"});
    obj
}

#[tokio::test]
async fn each_builtin_kind_takes_crud_and_watch_through_kube_rs() {
    let sim = sim().await;
    let client = sim.client().unwrap();
    for row in KINDS {
        let kind = row.3;
        let api = api(&client, row);
        let start = api.list(&Default::default()).await.unwrap();
        assert!(start.items.is_empty(), "{kind}");
        let rv = start.metadata.resource_version.unwrap();
        let mut events = api
            .watch(&WatchParams::default().timeout(20), &rv)
            .await
            .unwrap()
            .boxed();

        let typed = |mark: &str| -> DynamicObject {
            let mut v = sample(kind, mark);
            v["apiVersion"] = json!(if row.0.is_empty() {
                row.1.to_string()
            } else {
                format!("{}/{}", row.0, row.1)
            });
            v["kind"] = json!(kind);
            serde_json::from_value(v).unwrap()
        };
        let obj = typed("a");
        let created = api.create(&PostParams::default(), &obj).await.unwrap();
        assert_eq!(created.types.as_ref().unwrap().kind, kind);
        let got = api.get("one").await.unwrap();
        assert_eq!(got.metadata.uid, created.metadata.uid, "{kind}");
        let mut replace = typed("b");
        replace.metadata.resource_version = got.metadata.resource_version.clone();
        let replaced = api
            .replace("one", &PostParams::default(), &replace)
            .await
            .unwrap();
        assert_ne!(
            replaced.metadata.resource_version, got.metadata.resource_version,
            "{kind}: the update was stored"
        );
        let listed = api.list(&Default::default()).await.unwrap();
        assert_eq!(listed.items.len(), 1, "{kind}");
        api.delete("one", &Default::default()).await.unwrap();
        assert!(api.get_opt("one").await.unwrap().is_none(), "{kind}");

        let mut seen = Vec::new();
        while seen.len() < 3 {
            let ev = tokio::time::timeout(Duration::from_secs(10), events.try_next())
                .await
                .expect("a watch event in time")
                .unwrap()
                .expect("the watch stays open");
            match ev {
                WatchEvent::Added(o) => seen.push(("ADDED", o)),
                WatchEvent::Modified(o) => seen.push(("MODIFIED", o)),
                WatchEvent::Deleted(o) => seen.push(("DELETED", o)),
                WatchEvent::Bookmark(_) => {}
                WatchEvent::Error(e) => panic!("{kind}: {e:?}"),
            }
        }
        let types: Vec<&str> = seen.iter().map(|(t, _)| *t).collect();
        assert_eq!(types, ["ADDED", "MODIFIED", "DELETED"], "{kind}");
        assert_eq!(
            seen[1].1.metadata.resource_version, replaced.metadata.resource_version,
            "{kind}"
        );
    }
}

#[tokio::test]
async fn secret_string_data_is_folded_into_data_and_never_stored() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    let path = "/api/v1/namespaces/default/secrets";
    let created = raw
        .post(
            path,
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                    "data": {"kept": "a2VwdA==", "over": "b2xk"},
                    "stringData": {"over": "new", "plain": "hello"}}),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(
        created.body["data"],
        json!({"kept": "a2VwdA==", "over": "bmV3", "plain": "aGVsbG8="})
    );
    assert_eq!(created.body["type"], "Opaque");
    assert!(created.body.get("stringData").is_none());
    let got = raw.get(&format!("{path}/s")).await.body;
    assert!(got.get("stringData").is_none());
    assert_eq!(got["data"]["plain"], "aGVsbG8=");

    let patched = raw
        .patch(
            &format!("{path}/s"),
            "application/merge-patch+json",
            &json!({"stringData": {"plain": "bye"}}),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    assert_eq!(patched.body["data"]["plain"], "Ynll");
    assert!(patched.body.get("stringData").is_none());

    let typed = raw
        .post(
            path,
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "t"},
                    "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "e30="}}),
        )
        .await;
    assert_eq!(typed.body["type"], "kubernetes.io/dockerconfigjson");
}

#[tokio::test]
async fn services_get_cluster_ips_and_defaults() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    let path = "/api/v1/namespaces/default/services";
    let svc = |name: &str, spec: Value| json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec});
    let a = raw
        .post(path, &svc("a", json!({"ports": [{"port": 80}, {"port": 53, "protocol": "UDP", "targetPort": "dns"}]})))
        .await;
    assert_eq!(a.status, 201, "{}", a.body);
    let spec = &a.body["spec"];
    assert_eq!(spec["type"], "ClusterIP");
    assert_eq!(
        spec["ports"],
        json!([{"port": 80, "protocol": "TCP", "targetPort": 80},
               {"port": 53, "protocol": "UDP", "targetPort": "dns"}])
    );
    let ip: std::net::Ipv4Addr = spec["clusterIP"].as_str().unwrap().parse().unwrap();
    let [o1, o2, ..] = ip.octets();
    assert!(
        o1 == 10 && (96..112).contains(&o2),
        "{ip} is in 10.96.0.0/12"
    );
    assert_eq!(spec["clusterIPs"], json!([ip.to_string()]));
    assert_eq!(a.body["status"], json!({"loadBalancer": {}}));

    let b = raw
        .post(path, &svc("b", json!({"ports": [{"port": 80}]})))
        .await;
    assert_ne!(
        b.body["spec"]["clusterIP"], spec["clusterIP"],
        "IPs are unique"
    );
    let headless = raw
        .post(
            path,
            &svc("h", json!({"clusterIP": "None", "ports": [{"port": 80}]})),
        )
        .await;
    assert_eq!(headless.body["spec"]["clusterIPs"], json!(["None"]));
    let external = raw
        .post(
            path,
            &svc(
                "e",
                json!({"type": "ExternalName", "externalName": "example.com"}),
            ),
        )
        .await;
    assert!(external.body["spec"].get("clusterIP").is_none());

    // An update without a cluster IP keeps the allocated one; changing it is refused.
    let put = raw
        .put(
            &format!("{path}/a"),
            &svc("a", json!({"ports": [{"port": 81}]})),
        )
        .await;
    assert_eq!(put.status, 200, "{}", put.body);
    assert_eq!(put.body["spec"]["clusterIP"], spec["clusterIP"]);
    let moved = raw
        .put(
            &format!("{path}/a"),
            &svc(
                "a",
                json!({"clusterIP": "10.96.9.9", "ports": [{"port": 81}]}),
            ),
        )
        .await;
    assert_eq!(moved.status, 422, "{}", moved.body);
    assert_eq!(
        moved.body["details"]["causes"][0]["field"],
        "spec.clusterIPs[0]"
    );
}

#[tokio::test]
async fn workloads_track_generation_and_serve_scale() {
    let sim = sim().await;
    let client = sim.client().unwrap();
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client, "default");
    let d: k8s_openapi::api::apps::v1::Deployment =
        serde_json::from_value(sample("Deployment", "a")).unwrap();
    let created = deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(
        created.spec.as_ref().unwrap().replicas,
        Some(1),
        "defaulted"
    );
    let scale = deployments.get_scale("one").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(1));
    assert_eq!(scale.status.unwrap().selector.as_deref(), Some("app=x"));
    let scaled = deployments
        .patch_scale(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(scaled.spec.unwrap().replicas, Some(3));
    let after = deployments.get("one").await.unwrap();
    assert_eq!(after.spec.unwrap().replicas, Some(3));
    assert_eq!(after.metadata.generation, Some(2));
    // A status write does not bump the generation.
    let status = deployments
        .patch_status(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(status.metadata.generation, Some(2));
    assert_eq!(status.status.unwrap().replicas, Some(3));
    let raw = Raw::new(&sim);
    assert_eq!(
        raw.get("/api/v1/namespaces/default/configmaps/x/scale")
            .await
            .status,
        404,
        "only workloads have /scale"
    );
}

#[tokio::test]
async fn strategic_merge_patches_merge_keyed_lists_on_builtins_only() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    let path = "/apis/apps/v1/namespaces/default/deployments";
    let mut d = sample("Deployment", "a");
    d["apiVersion"] = json!("apps/v1");
    d["kind"] = json!("Deployment");
    d["spec"]["template"]["spec"]["containers"] = json!([
        {"name": "app", "image": "a:1", "env": [{"name": "A", "value": "1"}]},
        {"name": "side", "image": "s:1"}
    ]);
    assert_eq!(raw.post(path, &d).await.status, 201);
    let r = raw
        .patch(
            &format!("{path}/one"),
            "application/strategic-merge-patch+json",
            &json!({"spec": {"template": {"spec": {"containers": [
                {"name": "app", "env": [{"name": "B", "value": "2"}]}]}}}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body["spec"]["template"]["spec"]["containers"],
        json!([{"name": "app", "image": "a:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
               {"name": "side", "image": "s:1"}])
    );
}

/// What client-go's typed clientset sends: a Secret in Kubernetes' protobuf envelope.
#[tokio::test]
async fn protobuf_secrets_are_read_and_answered_in_json() {
    fn field(n: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![n << 3 | 2, u8::try_from(bytes.len()).unwrap()];
        out.extend_from_slice(bytes);
        out
    }
    let sim = sim().await;
    let raw = Raw::new(&sim);
    let labels = [field(1, b"owner"), field(2, b"helm")].concat();
    let meta = [field(1, b"pb"), field(11, &labels)].concat();
    let data = [field(1, b"k"), field(2, b"v")].concat();
    let secret = [
        field(1, &meta),
        field(2, &data),
        field(3, b"helm.sh/release.v1"),
    ]
    .concat();
    let type_meta = [field(1, b"v1"), field(2, b"Secret")].concat();
    let body = [b"k8s\0".to_vec(), field(1, &type_meta), field(2, &secret)].concat();
    let r = raw
        .send(
            reqwest::Method::POST,
            "/api/v1/namespaces/default/secrets",
            "application/vnd.kubernetes.protobuf",
            Some(body),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["data"], json!({"k": "dg=="}));
    assert_eq!(r.body["metadata"]["labels"], json!({"owner": "helm"}));
    let by_label = raw
        .get("/api/v1/namespaces/default/secrets?labelSelector=owner%3Dhelm")
        .await;
    assert_eq!(by_label.body["items"][0]["type"], "helm.sh/release.v1");
    // DeleteOptions in protobuf, as the typed clientset deletes release Secrets: the precondition
    // is read (a wrong uid is 409), then a delete with a propagation policy goes through.
    let delete_type = [field(1, b"v1"), field(2, b"DeleteOptions")].concat();
    let delete_body = |options: Vec<u8>| {
        [
            b"k8s\0".to_vec(),
            field(1, &delete_type),
            field(2, &options),
        ]
        .concat()
    };
    let wrong_uid = delete_body(field(2, &field(1, b"not-the-uid")));
    let r = raw
        .send(
            reqwest::Method::DELETE,
            "/api/v1/namespaces/default/secrets/pb",
            "application/vnd.kubernetes.protobuf",
            Some(wrong_uid),
        )
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    let r = raw
        .send(
            reqwest::Method::DELETE,
            "/api/v1/namespaces/default/secrets/pb",
            "application/vnd.kubernetes.protobuf",
            Some(delete_body(field(4, b"Background"))),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        raw.get("/api/v1/namespaces/default/secrets/pb")
            .await
            .status,
        404
    );
    let pod = [b"k8s\0".to_vec(), field(1, &field(2, b"Pod"))].concat();
    let r = raw
        .send(
            reqwest::Method::POST,
            "/api/v1/namespaces/default/secrets",
            "application/vnd.kubernetes.protobuf",
            Some(pod),
        )
        .await;
    assert_eq!(r.status, 415);
}

const MANIFEST: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: app}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: app}
data: {greeting: hello}
---
apiVersion: v1
kind: Secret
metadata: {name: app}
stringData: {greeting: hello}
---
apiVersion: v1
kind: Service
metadata: {name: app}
spec:
  selector: {app: app}
  ports: [{name: http, port: 8080}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: app}
spec:
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers: [{name: app, image: "example.invalid/app:1", env: [{name: GREETING, value: hello}]}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: app}
spec:
  serviceName: app
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers: [{name: app, image: "example.invalid/app:1"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: app}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: app}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: app}
subjects: [{kind: ServiceAccount, name: app, namespace: default}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: app}
rules: [{apiGroups: [""], resources: [namespaces], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: app}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: app}
subjects: [{kind: ServiceAccount, name: app, namespace: default}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: app}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: app}}
"#;

#[tokio::test]
async fn kubectl_server_side_applies_every_kind_idempotently() {
    let Some(bin) = kubectl_path() else { return };
    let sim = sim().await;
    let k = Kubectl::new(bin, sim.kubeconfig_path());
    let apply = ["apply", "--server-side", "-n", "default", "-f", "-"];
    let first = k.ok_with_stdin(&apply, MANIFEST).await;
    assert_eq!(first.matches("serverside-applied").count(), 11, "{first}");
    let rv = sim.resource_version();
    k.ok_with_stdin(&apply, MANIFEST).await;
    assert_eq!(sim.resource_version(), rv, "a second apply writes nothing");

    let changed = MANIFEST.replace("hello", "bonjour");
    k.ok_with_stdin(&apply, &changed).await;
    // ConfigMap, Secret and Deployment changed: three writes.
    assert_eq!(sim.resource_version(), rv + 3);
    assert_eq!(
        k.ok(&["get", "cm", "app", "-o", "jsonpath={.data.greeting}"])
            .await,
        "bonjour"
    );
    assert_eq!(
        k.ok(&["get", "secret", "app", "-o", "jsonpath={.data.greeting}"])
            .await,
        "Ym9uam91cg=="
    );
    let ip = k
        .ok(&["get", "svc", "app", "-o", "jsonpath={.spec.clusterIP}"])
        .await;
    assert!(ip.starts_with("10.9"), "{ip}");
    k.ok(&["scale", "deploy/app", "--replicas=2"]).await;
    assert_eq!(
        k.ok(&["get", "deploy", "app", "-o", "jsonpath={.spec.replicas}"])
            .await,
        "2"
    );
    let resources = k.ok(&["api-resources", "--no-headers"]).await;
    for short in ["sa", "cm", "svc", "deploy", "sts", "pdb"] {
        assert!(
            resources.split_whitespace().any(|w| w == short),
            "{short} in api-resources: {resources}"
        );
    }
    k.ok_with_stdin(&["delete", "-n", "default", "-f", "-"], &changed)
        .await;
    assert!(k.ok(&["get", "all", "-o", "name"]).await.trim().is_empty());
}

/// `kubectl create <kind>` sends protobuf bodies (client-go's typed clientset): the kinds it makes
/// for an install are read; others get 415 naming the kind.
#[tokio::test]
async fn kubectl_create_sends_protobuf_the_simulator_reads() {
    let Some(bin) = kubectl_path() else { return };
    let sim = sim().await;
    let k = Kubectl::new(bin, sim.kubeconfig_path());
    k.ok(&["create", "namespace", "apps"]).await;
    k.ok(&["create", "serviceaccount", "sa1", "-n", "apps"])
        .await;
    k.ok(&[
        "create",
        "secret",
        "generic",
        "s1",
        "--from-literal=k=v",
        "-n",
        "apps",
    ])
    .await;
    k.ok(&[
        "create",
        "configmap",
        "c1",
        "--from-literal=k=v",
        "-n",
        "apps",
    ])
    .await;
    k.ok(&[
        "create",
        "role",
        "r1",
        "--verb=get,list",
        "--resource=configmaps,secrets",
        "--resource-name=s1",
        "-n",
        "apps",
    ])
    .await;
    k.ok(&[
        "create",
        "clusterrole",
        "cr1",
        "--verb=get",
        "--non-resource-url=/healthz",
    ])
    .await;
    k.ok(&[
        "create",
        "rolebinding",
        "rb1",
        "--role=r1",
        "--serviceaccount=apps:sa1",
        "--user=alice",
        "-n",
        "apps",
    ])
    .await;
    k.ok(&[
        "create",
        "clusterrolebinding",
        "crb1",
        "--clusterrole=cr1",
        "--group=devs",
    ])
    .await;

    let raw = Raw::new(&sim);
    let get = |p: &'static str| {
        let raw = &raw;
        async move {
            let mut v = raw.get(p).await.body;
            v.as_object_mut().unwrap().remove("metadata");
            v
        }
    };
    assert_eq!(
        raw.get("/api/v1/namespaces/apps/secrets/s1").await.body["data"],
        json!({"k": "dg=="})
    );
    assert_eq!(
        raw.get("/api/v1/namespaces/apps/configmaps/c1").await.body["data"],
        json!({"k": "v"})
    );
    assert_eq!(
        raw.get("/api/v1/namespaces/apps/serviceaccounts/sa1")
            .await
            .status,
        200
    );
    let rbac = "/apis/rbac.authorization.k8s.io/v1";
    assert_eq!(
        get(Box::leak(
            format!("{rbac}/namespaces/apps/roles/r1").into_boxed_str()
        ))
        .await["rules"],
        json!([{"apiGroups": [""], "resources": ["configmaps", "secrets"],
                "resourceNames": ["s1"], "verbs": ["get", "list"]}])
    );
    assert_eq!(
        get(Box::leak(
            format!("{rbac}/clusterroles/cr1").into_boxed_str()
        ))
        .await["rules"],
        json!([{"nonResourceURLs": ["/healthz"], "verbs": ["get"]}])
    );
    let rb = get(Box::leak(
        format!("{rbac}/namespaces/apps/rolebindings/rb1").into_boxed_str(),
    ))
    .await;
    assert_eq!(
        rb["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r1"})
    );
    assert_eq!(
        rb["subjects"],
        json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"},
               {"kind": "ServiceAccount", "name": "sa1", "namespace": "apps"}])
    );
    let crb = get(Box::leak(
        format!("{rbac}/clusterrolebindings/crb1").into_boxed_str(),
    ))
    .await;
    assert_eq!(
        crb["subjects"],
        json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "devs"}])
    );

    let (ok, _, stderr) = k
        .run(&["create", "deployment", "d1", "--image=x", "-n", "apps"])
        .await;
    assert!(
        !ok && stderr.contains("Deployment in JSON only"),
        "{stderr}"
    );
}

/// A re-apply that leaves out what the server defaulted (a Service port's `protocol` and
/// `targetPort`) changes nothing: no write, not even a new managedFields time. The pause crosses a
/// second, the resolution of managedFields times, so a bumped time would show.
#[tokio::test]
async fn reapplying_a_service_that_relies_on_defaults_writes_nothing() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    let path = "/api/v1/namespaces/default/services/web?fieldManager=helm";
    let body = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                      "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80}]}});
    let first = raw.patch(path, "application/apply-patch+yaml", &body).await;
    assert_eq!(first.status, 201, "{}", first.body);
    assert_eq!(first.body["spec"]["ports"][0]["targetPort"], 80);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let again = raw.patch(path, "application/apply-patch+yaml", &body).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(
        again.body["metadata"]["resourceVersion"],
        first.body["metadata"]["resourceVersion"]
    );
    assert_eq!(
        again.body["metadata"]["managedFields"],
        first.body["metadata"]["managedFields"]
    );
}

/// Client-side `kubectl apply` of every kind: creates, then strategic merge patches computed against
/// the last-applied annotation (none when nothing changed).
#[tokio::test]
async fn kubectl_client_side_apply_patches_builtins_strategically() {
    let Some(bin) = kubectl_path() else { return };
    let sim = sim().await;
    let k = Kubectl::new(bin, sim.kubeconfig_path());
    let apply = ["apply", "-n", "default", "-f", "-"];
    let first = k.ok_with_stdin(&apply, MANIFEST).await;
    assert_eq!(first.matches(" created").count(), 11, "{first}");
    let rv = sim.resource_version();
    let again = k.ok_with_stdin(&apply, MANIFEST).await;
    // As on a real cluster, kubectl still sends a patch for the Secret (`stringData` is never
    // returned, so it always looks missing) and the PodDisruptionBudget (its `selector` has patch
    // strategy `replace`, so it is always sent) and says "configured"; the server writes nothing.
    assert_eq!(again.matches(" unchanged").count(), 9, "{again}");
    assert!(
        again.contains("secret/app configured")
            && again.contains("poddisruptionbudget.policy/app configured"),
        "{again}"
    );
    assert_eq!(sim.resource_version(), rv, "a re-apply writes nothing");
    let changed = MANIFEST.replace("hello", "bonjour").replace(
        "image: \"example.invalid/app:1\", env",
        "image: \"example.invalid/app:2\", env",
    );
    k.ok_with_stdin(&apply, &changed).await;
    // ConfigMap, Secret and Deployment changed: three writes.
    assert_eq!(sim.resource_version(), rv + 3);
    let deploy: Value =
        serde_json::from_str(&k.ok(&["get", "deploy", "app", "-o", "json"]).await).unwrap();
    assert_eq!(
        deploy["spec"]["template"]["spec"]["containers"],
        json!([{"name": "app", "image": "example.invalid/app:2",
                "env": [{"name": "GREETING", "value": "bonjour"}]}])
    );
    assert_eq!(deploy["metadata"]["generation"], 2);
    assert_eq!(
        k.ok(&["get", "secret", "app", "-o", "jsonpath={.data.greeting}"])
            .await,
        "Ym9uam91cg=="
    );
}
