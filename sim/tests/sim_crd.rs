//! CRDs and discovery: validation, conditions, served versions, scopes, and cascading deletion
//! (WATCH-PROTOCOL.md §A2, §A3).

use serde_json::json;

use crate::support::{Raw, crd, sim, widget, widgets_crd};

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

#[tokio::test]
async fn an_accepted_crd_gets_conditions_and_defaults() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    let r = raw.post(CRDS, &widgets_crd()).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let conds = r.body["status"]["conditions"].as_array().unwrap();
    let cond = |t: &str| conds.iter().find(|c| c["type"] == t).unwrap().clone();
    assert_eq!(
        (
            cond("Established")["status"].as_str(),
            cond("Established")["reason"].as_str()
        ),
        (Some("True"), Some("InitialNamesAccepted"))
    );
    assert_eq!(
        (
            cond("NamesAccepted")["status"].as_str(),
            cond("NamesAccepted")["reason"].as_str()
        ),
        (Some("True"), Some("NoConflicts"))
    );
    assert_eq!(r.body["spec"]["names"]["listKind"], "WidgetList");
    assert_eq!(r.body["spec"]["names"]["singular"], "widget");
    assert_eq!(r.body["status"]["storedVersions"], json!(["v1"]));
    assert_eq!(r.body["status"]["acceptedNames"]["kind"], "Widget");
}

#[tokio::test]
async fn invalid_crds_get_422_naming_the_field() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    let mut wrong_name = widgets_crd();
    wrong_name["metadata"]["name"] = json!("widget.example.com");
    let mut bad_scope = widgets_crd();
    bad_scope["spec"]["scope"] = json!("Global");
    let two_storage = crd(
        "example.com",
        "widgets",
        "Widget",
        "Namespaced",
        &[("v1", true, true), ("v2", true, true)],
    );
    let mut no_schema = widgets_crd();
    no_schema["spec"]["versions"][0]
        .as_object_mut()
        .unwrap()
        .remove("schema");
    let mut bad_version = widgets_crd();
    bad_version["spec"]["versions"][0]["name"] = json!("V1");
    for (body, field) in [
        (wrong_name, "metadata.name"),
        (bad_scope, "spec.scope"),
        (two_storage, "spec.versions"),
        (no_schema, "spec.versions[0].schema.openAPIV3Schema"),
        (bad_version, "spec.versions[0].name"),
    ] {
        let r = raw.post(CRDS, &body).await;
        assert_eq!(
            (r.status, r.body["reason"].as_str()),
            (422, Some("Invalid")),
            "{field}: {}",
            r.body
        );
        assert_eq!(r.body["details"]["kind"], "CustomResourceDefinition");
        let fields: Vec<&str> = r.body["details"]["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["field"].as_str().unwrap())
            .collect();
        assert!(fields.contains(&field), "{field} in {fields:?}");
    }
    assert_eq!(
        raw.get("/apis/example.com/v1").await.status,
        404,
        "nothing is served by rejected CRDs"
    );
}

#[tokio::test]
async fn discovery_lists_groups_resources_and_aggregated_v2() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&crd(
        "example.com",
        "widgets",
        "Widget",
        "Namespaced",
        &[
            ("v1beta1", true, false),
            ("v1", true, true),
            ("v1alpha1", false, false),
        ],
    ))
    .await;

    let version = raw.get("/version").await.body;
    assert_eq!(
        (version["major"].as_str(), version["minor"].as_str()),
        (Some("1"), Some("33"))
    );
    for key in [
        "gitVersion",
        "gitCommit",
        "gitTreeState",
        "buildDate",
        "goVersion",
        "compiler",
        "platform",
    ] {
        assert!(version[key].is_string(), "{key}");
    }
    let api = raw.get("/api").await.body;
    assert_eq!(
        (api["kind"].as_str(), api["versions"].clone()),
        (Some("APIVersions"), json!(["v1"]))
    );

    let apis = raw.get("/apis").await.body;
    let groups = apis["groups"].as_array().unwrap();
    assert!(groups.iter().any(|g| g["name"] == "apiextensions.k8s.io"));
    let ex = groups.iter().find(|g| g["name"] == "example.com").unwrap();
    assert_eq!(ex["preferredVersion"]["version"], "v1");
    let versions: Vec<&str> = ex["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(
        versions,
        ["v1", "v1beta1"],
        "served versions only, by priority"
    );
    assert_eq!(raw.get("/apis/example.com").await.body["kind"], "APIGroup");

    let rl = raw.get("/apis/example.com/v1").await.body;
    assert_eq!(rl["groupVersion"], "example.com/v1");
    let res = rl["resources"].as_array().unwrap();
    assert!(
        res.iter()
            .any(|r| r["name"] == "widgets" && r["namespaced"] == true && r["kind"] == "Widget")
    );
    assert!(
        res.iter()
            .any(|r| r["name"] == "widgets/status"
                && r["verbs"] == json!(["get", "patch", "update"]))
    );
    assert_eq!(raw.get("/apis/example.com/v1alpha1").await.status, 404);
    assert!(
        raw.get("/api/v1").await.body["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "namespaces")
    );

    let agg = raw
        .http
        .get(format!("{}/apis", raw.base))
        .header(
            "accept",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        agg.headers()["content-type"],
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    let agg: serde_json::Value = agg.json().await.unwrap();
    assert_eq!(agg["kind"], "APIGroupDiscoveryList");
    let item = agg["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == "example.com")
        .unwrap();
    assert_eq!(item["versions"][0]["version"], "v1");
    let widgets = &item["versions"][0]["resources"][0];
    assert_eq!(widgets["resource"], "widgets");
    assert_eq!(widgets["scope"], "Namespaced");
    assert_eq!(widgets["subresources"][0]["subresource"], "status");
}

#[tokio::test]
async fn every_served_version_presents_the_same_objects() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&crd(
        "example.com",
        "widgets",
        "Widget",
        "Namespaced",
        &[("v1", true, true), ("v2", true, false)],
    ))
    .await;
    raw.post(
        "/apis/example.com/v1/namespaces/default/widgets",
        &widget("a", json!({}), json!({"n": 1})),
    )
    .await;
    let v2 = raw
        .get("/apis/example.com/v2/namespaces/default/widgets/a")
        .await;
    assert_eq!(
        (v2.status, v2.body["apiVersion"].as_str()),
        (200, Some("example.com/v2"))
    );
    let list = raw
        .get("/apis/example.com/v2/namespaces/default/widgets")
        .await
        .body;
    assert_eq!(list["apiVersion"], "example.com/v2");
    assert_eq!(list["items"][0]["apiVersion"], "example.com/v2");
}

#[tokio::test]
async fn cluster_scoped_resources_live_outside_namespaces() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&crd(
        "example.com",
        "clusterwidgets",
        "ClusterWidget",
        "Cluster",
        &[("v1", true, true)],
    ))
    .await;
    let body = json!({"apiVersion": "example.com/v1", "kind": "ClusterWidget", "metadata": {"name": "c"}, "spec": {}});
    let r = raw.post("/apis/example.com/v1/clusterwidgets", &body).await;
    assert_eq!(r.status, 201);
    assert!(r.body["metadata"].get("namespace").is_none());
    assert_eq!(
        raw.get("/apis/example.com/v1/clusterwidgets/c")
            .await
            .status,
        200
    );
    assert_eq!(
        raw.get("/apis/example.com/v1/namespaces/default/clusterwidgets")
            .await
            .status,
        404
    );
    assert_eq!(
        raw.delete("/apis/example.com/v1/clusterwidgets/c")
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn deleting_a_crd_deletes_its_objects_and_watchers_see_it() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";
    for n in ["a", "b"] {
        raw.post(widgets, &widget(n, json!({}), json!({}))).await;
    }
    let mut held = widget("held", json!({}), json!({}));
    held["metadata"]["finalizers"] = json!(["herald.dev/hold"]);
    raw.post(widgets, &held).await;
    let rv = sim.resource_version();
    let mut cr_watch = raw
        .watch(&format!(
            "/apis/example.com/v1/widgets?watch=1&resourceVersion={rv}"
        ))
        .await;
    let mut crd_watch = raw
        .watch(&format!(
            "{CRDS}?watch=1&fieldSelector=metadata.name%3Dwidgets.example.com&resourceVersion={rv}"
        ))
        .await;

    let r = raw.delete(&format!("{CRDS}/widgets.example.com")).await;
    assert_eq!(r.status, 200);
    assert!(
        r.body["metadata"]["deletionTimestamp"].is_string(),
        "a finalizer holds the CRD: still terminating"
    );
    let create = raw
        .post(widgets, &widget("new", json!({}), json!({})))
        .await;
    assert_eq!(create.status, 405, "no creates while the CRD terminates");

    let mut seen = Vec::new();
    for _ in 0..3 {
        let (t, o) = cr_watch.next_event().await.unwrap();
        seen.push(format!("{t} {}", o["metadata"]["name"].as_str().unwrap()));
    }
    assert_eq!(seen, ["DELETED a", "DELETED b", "MODIFIED held"]);
    let (t, o) = crd_watch.next_event().await.unwrap();
    assert_eq!(t, "MODIFIED");
    assert!(
        o["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Terminating")
    );

    // Releasing the last finalizer completes the CRD's deletion.
    raw.patch(
        &format!("{widgets}/held"),
        "application/merge-patch+json",
        &json!({"metadata": {"finalizers": null}}),
    )
    .await;
    let (t, o) = cr_watch.next_event().await.unwrap();
    assert_eq!(
        (t.as_str(), o["metadata"]["name"].as_str()),
        ("DELETED", Some("held"))
    );
    assert!(
        cr_watch.next_event().await.is_none(),
        "watches of a deleted resource end"
    );
    let (t, _) = crd_watch.next_event().await.unwrap();
    assert_eq!(t, "DELETED");
    assert_eq!(
        raw.get(&format!("{CRDS}/widgets.example.com")).await.status,
        404
    );
    assert_eq!(raw.get(widgets).await.status, 404);
}

#[tokio::test]
async fn updating_a_crd_changes_what_is_served() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let path = format!("{CRDS}/widgets.example.com");
    let current = raw.get(&path).await.body;
    let mut next = current.clone();
    next["spec"]["versions"] = json!([
        {"name": "v1", "served": false, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}},
        {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}}
    ]);
    let r = raw.put(&path, &next).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["metadata"]["generation"], 2);
    assert_eq!(
        raw.get("/apis/example.com/v2/namespaces/default/widgets")
            .await
            .status,
        200
    );
    assert_eq!(
        raw.get("/apis/example.com/v1/namespaces/default/widgets")
            .await
            .status,
        404
    );
    assert_eq!(
        raw.get("/apis/example.com").await.body["preferredVersion"]["version"],
        "v2"
    );

    let mut rescoped = r.body.clone();
    rescoped["spec"]["scope"] = json!("Cluster");
    assert_eq!(
        raw.put(&path, &rescoped).await.status,
        422,
        "scope is immutable"
    );
    // Re-applying the same CRD is a no-op: same revision.
    let again = raw.put(&path, &r.body).await;
    assert_eq!(
        again.body["metadata"]["resourceVersion"],
        r.body["metadata"]["resourceVersion"]
    );
}

/// A CRD whose versions change (storage moved, a version no longer served) ends the watches of the
/// old definition, as the real server rebuilds the resource's storage; a re-watch from the last
/// revision shows only what came later (nothing twice), and a version no longer served answers 404.
#[tokio::test]
async fn a_version_change_ends_watches_and_a_rewatch_resumes_without_repeats() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&crd(
        "example.com",
        "widgets",
        "Widget",
        "Namespaced",
        &[("v1", true, true), ("v2", true, false)],
    ))
    .await;
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";
    for n in ["a", "b"] {
        raw.post(widgets, &widget(n, json!({}), json!({}))).await;
    }
    let rv = sim.resource_version();
    let mut v1 = raw
        .watch(&format!(
            "/apis/example.com/v1/widgets?watch=1&resourceVersion={rv}&timeoutSeconds=60"
        ))
        .await;

    // Storage moves to v2; both stay served.
    let path = format!("{CRDS}/widgets.example.com");
    let mut next = raw.get(&path).await.body;
    next["spec"]["versions"][0]["storage"] = json!(false);
    next["spec"]["versions"][1]["storage"] = json!(true);
    assert_eq!(raw.put(&path, &next).await.status, 200);
    assert!(
        v1.next_event().await.is_none(),
        "the watch of the old definition ends, showing nothing"
    );
    let rv = sim.resource_version();
    let mut v1 = raw
        .watch(&format!(
            "/apis/example.com/v1/widgets?watch=1&resourceVersion={rv}&timeoutSeconds=60"
        ))
        .await;
    raw.patch(
        &format!("{widgets}/a"),
        "application/merge-patch+json",
        &json!({"spec": {"n": 1}}),
    )
    .await;
    let (t, o) = v1.next_event().await.unwrap();
    assert_eq!(
        (t.as_str(), o["metadata"]["name"].as_str()),
        ("MODIFIED", Some("a"))
    );

    // v1 is no longer served: its watch ends, v1 answers 404, v2 resumes from the revision.
    let rv = sim.resource_version();
    let mut next = raw.get(&path).await.body;
    next["spec"]["versions"][0]["served"] = json!(false);
    assert_eq!(raw.put(&path, &next).await.status, 200);
    assert!(v1.next_event().await.is_none(), "the v1 watch ends");
    assert_eq!(
        raw.get("/apis/example.com/v1/widgets").await.status,
        404,
        "v1 is no longer served"
    );
    let mut v2 = raw
        .watch(&format!(
            "/apis/example.com/v2/widgets?watch=1&resourceVersion={rv}&timeoutSeconds=60"
        ))
        .await;
    raw.patch(
        "/apis/example.com/v2/namespaces/default/widgets/b",
        "application/merge-patch+json",
        &json!({"spec": {"n": 2}}),
    )
    .await;
    let (t, o) = v2.next_event().await.unwrap();
    assert_eq!(
        (
            t.as_str(),
            o["metadata"]["name"].as_str(),
            o["apiVersion"].as_str()
        ),
        ("MODIFIED", Some("b"), Some("example.com/v2")),
        "only the later change, nothing repeated"
    );
}
