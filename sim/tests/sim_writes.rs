//! Writes: server-owned metadata, generation, the status subresource, patches, finalizers, and the
//! error answers a real server gives (WATCH-PROTOCOL.md §A4, §A7, §A8).

use serde_json::{Value, json};

use crate::support::{Raw, sim, widget, widgets_crd};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";
const MERGE: &str = "application/merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";

async fn ready() -> (herald_sim::Simulator, Raw) {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    (sim, raw)
}

#[tokio::test]
async fn create_fills_server_metadata_and_drops_status() {
    let (sim, raw) = ready().await;
    let mut w = widget("a", json!({}), json!({"n": 1}));
    w["status"] = json!({"phase": "Set by client"});
    let r = raw.post(WIDGETS, &w).await;
    assert_eq!(r.status, 201);
    let m = &r.body["metadata"];
    assert_eq!(m["generation"], 1);
    assert_eq!(m["resourceVersion"], sim.resource_version().to_string());
    assert_eq!(m["uid"].as_str().unwrap().len(), 36);
    let ts = m["creationTimestamp"].as_str().unwrap();
    assert!(ts.len() == 20 && ts.ends_with('Z'), "{ts}");
    assert!(
        r.body.get("status").is_none(),
        "status subresource on: create drops status"
    );

    let generated = raw
        .post(
            WIDGETS,
            &json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"generateName": "gen-"}, "spec": {}}),
        )
        .await;
    assert_eq!(generated.status, 201);
    let name = generated.body["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    let dup = raw.post(WIDGETS, &w).await;
    assert_eq!(
        (dup.status, dup.body["reason"].as_str()),
        (409, Some("AlreadyExists"))
    );
    assert_eq!(
        dup.body["message"],
        "widgets.example.com \"a\" already exists"
    );
}

#[tokio::test]
async fn generation_moves_only_for_spec_changes() {
    let (_sim, raw) = ready().await;
    raw.post(WIDGETS, &widget("a", json!({}), json!({"n": 1})))
        .await;
    let a = format!("{WIDGETS}/a");
    let g = |v: &Value| v["metadata"]["generation"].as_i64().unwrap();
    assert_eq!(
        g(&raw
            .patch(
                &a,
                MERGE,
                &json!({"metadata": {"labels": {"l": "1"}, "annotations": {"x": "y"}}})
            )
            .await
            .body),
        1
    );
    assert_eq!(
        g(&raw.patch(&a, MERGE, &json!({"spec": {"n": 2}})).await.body),
        2
    );
    let status = raw
        .patch(
            &format!("{a}/status"),
            MERGE,
            &json!({"status": {"phase": "Ready"}}),
        )
        .await
        .body;
    assert_eq!(
        (g(&status), status["status"]["phase"].as_str()),
        (2, Some("Ready"))
    );
    // The main endpoint ignores status; the status endpoint ignores everything else.
    let ignored = raw
        .patch(&a, MERGE, &json!({"status": {"phase": "Hacked"}}))
        .await
        .body;
    assert_eq!(ignored["status"]["phase"], "Ready");
    let spec_via_status = raw
        .patch(&format!("{a}/status"), MERGE, &json!({"spec": {"n": 99}}))
        .await
        .body;
    assert_eq!(spec_via_status["spec"]["n"], 2);
    assert_eq!(
        raw.get(&format!("{a}/status")).await.body["status"]["phase"],
        "Ready"
    );
}

#[tokio::test]
async fn update_requires_the_current_resource_version() {
    let (_sim, raw) = ready().await;
    let created = raw
        .post(WIDGETS, &widget("a", json!({}), json!({"n": 1})))
        .await
        .body;
    let a = format!("{WIDGETS}/a");
    let mut next = created.clone();
    next["spec"]["n"] = json!(2);
    let ok = raw.put(&a, &next).await;
    assert_eq!(
        (ok.status, ok.body["metadata"]["generation"].as_i64()),
        (200, Some(2))
    );

    let stale = raw.put(&a, &next).await;
    assert_eq!(
        (stale.status, stale.body["reason"].as_str()),
        (409, Some("Conflict"))
    );
    assert_eq!(
        stale.body["message"],
        "Operation cannot be fulfilled on widgets.example.com \"a\": the object has been modified; please apply your changes to the latest version and try again"
    );

    let mut unconditional = next.clone();
    unconditional["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let r = raw.put(&a, &unconditional).await;
    assert_eq!(
        (r.status, r.body["reason"].as_str()),
        (422, Some("Invalid"))
    );
    assert!(
        r.body["message"].as_str().unwrap().contains(
            "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
        )
    );

    let precondition = raw
        .patch(
            &a,
            MERGE,
            &json!({"metadata": {"resourceVersion": "1"}, "spec": {"n": 5}}),
        )
        .await;
    assert_eq!(
        precondition.status, 409,
        "an RV in a patch is a precondition"
    );

    let mut renamed = ok.body.clone();
    renamed["metadata"]["name"] = json!("b");
    let r = raw.put(&a, &renamed).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body["message"],
        "the name of the object (b) does not match the name on the URL (a)"
    );
    assert_eq!(
        raw.put(
            &format!("{WIDGETS}/missing"),
            &widget("missing", json!({}), json!({}))
        )
        .await
        .status,
        404
    );
}

#[tokio::test]
async fn json_patch_test_of_null_on_a_missing_path_succeeds() {
    let (_sim, raw) = ready().await;
    raw.post(WIDGETS, &widget("a", json!({}), json!({}))).await;
    let a = format!("{WIDGETS}/a");
    // kube-runtime's finalizer helper sends exactly this for an object without finalizers.
    let add = json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
                     {"op": "add", "path": "/metadata/finalizers", "value": ["herald.dev/x"]}]);
    let r = raw.patch(&a, JSON_PATCH, &add).await;
    assert_eq!(
        (r.status, r.body["metadata"]["finalizers"].clone()),
        (200, json!(["herald.dev/x"]))
    );
    let again = raw.patch(&a, JSON_PATCH, &add).await;
    assert_eq!(
        (again.status, again.body["reason"].as_str()),
        (422, Some("Invalid")),
        "test fails now"
    );
    let malformed = raw.patch(&a, JSON_PATCH, &json!({"op": "add"})).await;
    assert_eq!(malformed.status, 400);
    assert_eq!(
        raw.patch(&format!("{WIDGETS}/missing"), MERGE, &json!({}))
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn delete_with_finalizers_marks_then_deletes_when_emptied() {
    let (sim, raw) = ready().await;
    let mut w = widget("a", json!({}), json!({}));
    w["metadata"]["finalizers"] = json!(["herald.dev/keep"]);
    raw.post(WIDGETS, &w).await;
    let a = format!("{WIDGETS}/a");
    let rv = sim.resource_version();
    let mut watch = raw
        .watch(&format!("{WIDGETS}?watch=1&resourceVersion={rv}"))
        .await;

    let marked = raw.delete(&a).await;
    assert_eq!(marked.status, 200);
    assert_eq!(
        marked.body["kind"], "Widget",
        "still there: the object is returned"
    );
    assert!(marked.body["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(marked.body["metadata"]["deletionGracePeriodSeconds"], 0);
    assert_eq!(marked.body["metadata"]["generation"], 2);

    let add = raw
        .patch(
            &a,
            MERGE,
            &json!({"metadata": {"finalizers": ["herald.dev/keep", "new"]}}),
        )
        .await;
    assert_eq!(add.status, 422, "no new finalizers while deleting");

    let last_stored_rv = sim.resource_version();
    let emptied = raw
        .patch(&a, MERGE, &json!({"metadata": {"finalizers": null}}))
        .await;
    assert_eq!(emptied.status, 200);
    assert_eq!(raw.get(&a).await.status, 404);

    let (t, o) = watch.next_event().await.unwrap();
    assert_eq!(t, "MODIFIED");
    assert!(o["metadata"]["deletionTimestamp"].is_string());
    let (t, o) = watch.next_event().await.unwrap();
    assert_eq!(t, "DELETED");
    // The last stored state (finalizer still listed) at the deletion revision.
    assert_eq!(o["metadata"]["finalizers"], json!(["herald.dev/keep"]));
    assert_eq!(
        o["metadata"]["resourceVersion"],
        (last_stored_rv + 1).to_string()
    );
}

#[tokio::test]
async fn delete_without_finalizers_answers_a_success_status() {
    let (_sim, raw) = ready().await;
    let created = raw
        .post(WIDGETS, &widget("a", json!({}), json!({})))
        .await
        .body;
    let wrong_uid = raw
        .send(
            reqwest::Method::DELETE,
            &format!("{WIDGETS}/a"),
            "application/json",
            Some(
                json!({"preconditions": {"uid": "nope"}})
                    .to_string()
                    .into_bytes(),
            ),
        )
        .await;
    assert_eq!(wrong_uid.status, 409);
    let r = raw.delete(&format!("{WIDGETS}/a")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["kind"], "Status");
    assert_eq!(r.body["status"], "Success");
    assert_eq!(
        r.body["details"],
        json!({"name": "a", "group": "example.com", "kind": "widgets", "uid": created["metadata"]["uid"]})
    );
    let again = raw.delete(&format!("{WIDGETS}/a")).await;
    assert_eq!(
        (again.status, again.body["reason"].as_str()),
        (404, Some("NotFound"))
    );
    assert_eq!(again.body["message"], "widgets.example.com \"a\" not found");
    assert_eq!(
        again.body["details"],
        json!({"name": "a", "group": "example.com", "kind": "widgets"})
    );
}

#[tokio::test]
async fn deletecollection_deletes_what_the_selector_matches() {
    let (_sim, raw) = ready().await;
    for (name, app) in [("a", "x"), ("b", "y"), ("c", "x")] {
        raw.post(WIDGETS, &widget(name, json!({"app": app}), json!({})))
            .await;
    }
    let r = raw
        .delete(&format!("{WIDGETS}?labelSelector=app%3Dx"))
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["kind"], "WidgetList");
    assert_eq!(r.body["items"].as_array().unwrap().len(), 2);
    let left = raw.get(WIDGETS).await.body;
    assert_eq!(left["items"].as_array().unwrap().len(), 1);
    assert_eq!(left["items"][0]["metadata"]["name"], "b");
}

#[tokio::test]
async fn bad_bodies_get_the_real_answers() {
    let (_sim, raw) = ready().await;
    let send = |body: &'static [u8]| {
        raw.send(
            reqwest::Method::POST,
            WIDGETS,
            "application/json",
            Some(body.to_vec()),
        )
    };
    assert_eq!(send(b"{not json").await.status, 400);
    assert_eq!(send(b"[1,2]").await.status, 400);
    let no_kind = raw
        .post(
            WIDGETS,
            &json!({"apiVersion": "example.com/v1", "metadata": {"name": "a"}}),
        )
        .await;
    assert_eq!(no_kind.status, 400);
    assert!(
        no_kind.body["message"]
            .as_str()
            .unwrap()
            .starts_with("Object 'Kind' is missing in")
    );
    let wrong_kind = raw
        .post(
            WIDGETS,
            &json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "a"}}),
        )
        .await;
    assert_eq!(
        (wrong_kind.status, wrong_kind.body["reason"].as_str()),
        (422, Some("Invalid"))
    );
    let wrong_version = raw
        .post(
            WIDGETS,
            &json!({"apiVersion": "example.com/v9", "kind": "Widget", "metadata": {"name": "a"}}),
        )
        .await;
    assert_eq!(wrong_version.status, 400);
    assert_eq!(
        wrong_version.body["message"],
        "the API version in the data (example.com/v9) does not match the expected API version (example.com/v1)"
    );
    let bad_name = raw
        .post(WIDGETS, &widget("Bad_Name", json!({}), json!({})))
        .await;
    assert_eq!(bad_name.status, 422);
    let other_ns = raw.post(WIDGETS, &json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "a", "namespace": "kube-system"}})).await;
    assert_eq!(other_ns.status, 400);
    let no_ns = raw
        .post(
            "/apis/example.com/v1/namespaces/nope/widgets",
            &json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "a"}}),
        )
        .await;
    assert_eq!(no_ns.status, 404);
    assert_eq!(no_ns.body["message"], "namespaces \"nope\" not found");

    let huge = vec![b' '; 3 * 1024 * 1024 + 10];
    let r = raw
        .send(
            reqwest::Method::POST,
            WIDGETS,
            "application/json",
            Some(huge),
        )
        .await;
    assert_eq!(
        (r.status, r.body["reason"].as_str()),
        (413, Some("RequestEntityTooLarge"))
    );

    let smp = raw
        .patch(
            &format!("{WIDGETS}/a"),
            "application/strategic-merge-patch+json",
            &json!({}),
        )
        .await;
    assert_eq!(
        (smp.status, smp.body["reason"].as_str()),
        (415, Some("UnsupportedMediaType"))
    );
}

#[tokio::test]
async fn paths_follow_scope_and_subresource_rules() {
    let (_sim, raw) = ready().await;
    raw.post(WIDGETS, &widget("a", json!({}), json!({}))).await;
    let not_found = raw.get("/apis/example.com/v1/widgets/a").await;
    assert_eq!(
        (not_found.status, not_found.body["message"].as_str()),
        (
            404,
            Some("the server could not find the requested resource")
        )
    );
    assert_eq!(raw.get("/apis/example.com/v1/gadgets").await.status, 404);
    assert_eq!(
        raw.get("/apis/example.com/v2/namespaces/default/widgets")
            .await
            .status,
        404
    );
    assert_eq!(
        raw.get("/api/v1/namespaces/default/namespaces")
            .await
            .status,
        404
    );
    assert_eq!(raw.get(&format!("{WIDGETS}/a/scale")).await.status, 404);
    assert_eq!(
        raw.post(&format!("{WIDGETS}/a"), &json!({})).await.status,
        405
    );
    // All-namespace collections allow list and watch.
    assert_eq!(raw.get("/apis/example.com/v1/widgets").await.status, 200);

    // Without a status subresource, /status is 404 and status writes through the main endpoint count.
    raw.install_crd(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "plains.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "plains", "kind": "Plain"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    })).await;
    let plains = "/apis/example.com/v1/namespaces/default/plains";
    let p = raw.post(plains, &json!({"apiVersion": "example.com/v1", "kind": "Plain", "metadata": {"name": "p"}, "status": {"s": 1}})).await;
    assert_eq!(p.body["status"]["s"], 1);
    assert_eq!(raw.get(&format!("{plains}/p/status")).await.status, 404);
    let bumped = raw
        .patch(&format!("{plains}/p"), MERGE, &json!({"status": {"s": 2}}))
        .await
        .body;
    assert_eq!(bumped["metadata"]["generation"], 2);
}

#[tokio::test]
async fn namespaces_exist_at_start_and_deleting_one_deletes_its_objects() {
    let (_sim, raw) = ready().await;
    let nss = raw.get("/api/v1/namespaces").await.body;
    let names: Vec<&str> = nss["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "kube-system"]);
    raw.post(
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
    )
    .await;
    let team = "/apis/example.com/v1/namespaces/team/widgets";
    let mut w = widget("a", json!({}), json!({}));
    w["metadata"]["namespace"] = json!("team");
    assert_eq!(raw.post(team, &w).await.status, 201);
    let rv = _sim.resource_version();
    let mut watch = raw
        .watch(&format!(
            "/apis/example.com/v1/widgets?watch=1&resourceVersion={rv}"
        ))
        .await;
    assert_eq!(raw.delete("/api/v1/namespaces/team").await.status, 200);
    let (t, o) = watch.next_event().await.unwrap();
    assert_eq!(
        (t.as_str(), o["metadata"]["namespace"].as_str()),
        ("DELETED", Some("team"))
    );
    assert_eq!(raw.get("/api/v1/namespaces/team").await.status, 404);
}

#[tokio::test]
async fn metadata_is_type_checked_and_labels_validated() {
    let (_sim, raw) = ready().await;
    let mut bad_type = widget("a", json!({"n": 1}), json!({}));
    bad_type["metadata"]["labels"] = json!({"n": 1});
    assert_eq!(raw.post(WIDGETS, &bad_type).await.status, 400);
    let mut bad_fin = widget("a", json!({}), json!({}));
    bad_fin["metadata"]["finalizers"] = json!("x");
    assert_eq!(raw.post(WIDGETS, &bad_fin).await.status, 400);
    let bad_key = raw
        .post(WIDGETS, &widget("a", json!({"a b": "c"}), json!({})))
        .await;
    assert_eq!(
        (
            bad_key.status,
            bad_key.body["details"]["causes"][0]["field"].as_str()
        ),
        (422, Some("metadata.labels"))
    );
    let bad_value = raw
        .post(WIDGETS, &widget("a", json!({"k": "-x-"}), json!({})))
        .await;
    assert_eq!(bad_value.status, 422);
}

#[tokio::test]
async fn a_uid_in_the_body_is_a_precondition() {
    let (_sim, raw) = ready().await;
    let created = raw
        .post(WIDGETS, &widget("a", json!({}), json!({})))
        .await
        .body;
    let mut other = created.clone();
    other["metadata"]["uid"] = json!("00000000-0000-0000-0000-000000000000");
    let r = raw.put(&format!("{WIDGETS}/a"), &other).await;
    assert_eq!(r.status, 409);
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .contains("Precondition failed: UID in precondition")
    );
    let patched = raw
        .patch(
            &format!("{WIDGETS}/a"),
            MERGE,
            &json!({"metadata": {"uid": "x"}}),
        )
        .await;
    assert_eq!(patched.status, 422, "uid is immutable");
}

#[tokio::test]
async fn writes_across_namespaces_and_protected_namespaces_are_refused() {
    let (_sim, raw) = ready().await;
    let all = "/apis/example.com/v1/widgets";
    let r = raw
        .post(
            all,
            &json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "a"}}),
        )
        .await;
    assert_eq!(r.status, 404, "create needs a namespace");
    assert_eq!(
        raw.delete(all).await.status,
        404,
        "deletecollection needs a namespace"
    );
    for ns in ["default", "kube-system"] {
        let r = raw.delete(&format!("/api/v1/namespaces/{ns}")).await;
        assert_eq!(
            (r.status, r.body["reason"].as_str()),
            (403, Some("Forbidden")),
            "{ns}"
        );
    }
    raw.post(
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t"}}),
    )
    .await;
    let gone = raw.delete("/api/v1/namespaces/t").await;
    assert_eq!(
        (
            gone.body["kind"].as_str(),
            gone.body["status"]["phase"].as_str()
        ),
        (Some("Namespace"), Some("Terminating"))
    );
}

#[tokio::test]
async fn dry_run_writes_change_nothing() {
    let (sim, raw) = ready().await;
    raw.post(WIDGETS, &widget("a", json!({}), json!({"n": 1})))
        .await;
    let rv = sim.resource_version();
    let r = raw
        .post(
            &format!("{WIDGETS}?dryRun=All"),
            &widget("b", json!({}), json!({})),
        )
        .await;
    assert_eq!(r.status, 201);
    let p = raw
        .patch(
            &format!("{WIDGETS}/a?dryRun=All"),
            MERGE,
            &json!({"spec": {"n": 9}}),
        )
        .await;
    assert_eq!(p.body["spec"]["n"], 9);
    let d = raw.delete(&format!("{WIDGETS}/a?dryRun=All")).await;
    assert_eq!(
        d.body["kind"], "Status",
        "a dry-run delete answers as the real one would"
    );
    assert_eq!(sim.resource_version(), rv);
    assert_eq!(raw.get(&format!("{WIDGETS}/a")).await.body["spec"]["n"], 1);
    assert_eq!(raw.get(&format!("{WIDGETS}/b")).await.status, 404);
}
