//! LIST: the resourceVersion table, pagination from one snapshot, selectors (WATCH-PROTOCOL.md §A5).

use serde_json::{Value, json};

use crate::support::{Raw, sim, widget, widgets_crd};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

async fn seeded(n: usize) -> (herald_sim::Simulator, Raw) {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    for i in 0..n {
        let labels = json!({"app": if i % 2 == 0 { "even" } else { "odd" }, "rank": i.to_string()});
        assert_eq!(
            raw.post(WIDGETS, &widget(&format!("w{i}"), labels, json!({"n": i})))
                .await
                .status,
            201
        );
    }
    (sim, raw)
}

#[tokio::test]
async fn list_carries_kind_items_and_the_global_revision() {
    let (sim, raw) = seeded(2).await;
    // A write elsewhere moves the global revision past the newest widget.
    raw.post(
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}}),
    )
    .await;
    let list = raw.get(WIDGETS).await.body;
    assert_eq!(list["kind"], "WidgetList");
    assert_eq!(list["apiVersion"], "example.com/v1");
    assert_eq!(
        list["metadata"]["resourceVersion"],
        sim.resource_version().to_string()
    );
    assert_eq!(
        list["items"][0]["kind"], "Widget",
        "custom resource items carry their type"
    );
    let empty = raw
        .get("/apis/example.com/v1/namespaces/other/widgets")
        .await
        .body;
    assert_eq!(
        empty["items"],
        json!([]),
        "items is [] when empty, never missing"
    );
    // Built-in lists leave apiVersion/kind out of the items.
    let nss = raw.get("/api/v1/namespaces").await.body;
    assert_eq!(nss["kind"], "NamespaceList");
    assert!(nss["items"][0].get("kind").is_none());
}

#[tokio::test]
async fn pages_come_from_one_snapshot() {
    let (sim, raw) = seeded(7).await;
    let first = raw.get(&format!("{WIDGETS}?limit=3")).await.body;
    assert_eq!(names(&first), ["w0", "w1", "w2"]);
    let snapshot = first["metadata"]["resourceVersion"].clone();
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();

    // Changes after the first page must not show in later pages.
    let merge = "application/merge-patch+json";
    raw.patch(
        &format!("{WIDGETS}/w4"),
        merge,
        &json!({"spec": {"n": 100}}),
    )
    .await;
    raw.delete(&format!("{WIDGETS}/w5")).await;
    raw.post(WIDGETS, &widget("w3a", json!({}), json!({})))
        .await;
    assert!(sim.resource_version().to_string() != snapshot.as_str().unwrap());

    let mut all = names(&first);
    let mut token = Some(token);
    while let Some(t) = token {
        let page = raw
            .get(&format!("{WIDGETS}?limit=3&continue={t}"))
            .await
            .body;
        assert_eq!(
            page["metadata"]["resourceVersion"], snapshot,
            "every page reports the first page's snapshot"
        );
        for item in page["items"].as_array().unwrap() {
            if item["metadata"]["name"] == "w4" {
                assert_eq!(item["spec"]["n"], 4, "page served from the snapshot");
            }
        }
        all.extend(names(&page));
        token = page["metadata"]["continue"].as_str().map(str::to_string);
    }
    assert_eq!(all, ["w0", "w1", "w2", "w3", "w4", "w5", "w6"]);
}

#[tokio::test]
async fn expired_continue_token_is_410() {
    let (sim, raw) = seeded(4).await;
    let first = raw.get(&format!("{WIDGETS}?limit=2")).await.body;
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    raw.post(WIDGETS, &widget("late", json!({}), json!({})))
        .await;
    sim.compact();
    let r = raw
        .get(&format!("{WIDGETS}?limit=2&continue={token}"))
        .await;
    assert_eq!(r.status, 410);
    assert_eq!(r.body["reason"], "Expired");
    assert!(
        r.body["metadata"]["continue"].is_string(),
        "an inconsistent continue token is offered"
    );
    assert_eq!(
        raw.get(&format!("{WIDGETS}?continue=garbage")).await.status,
        400
    );
}

#[tokio::test]
async fn resource_version_semantics() {
    let (sim, raw) = seeded(3).await;
    let at = sim.resource_version();
    raw.delete(&format!("{WIDGETS}/w0")).await;

    // Exact: the state at that revision.
    let exact = raw
        .get(&format!(
            "{WIDGETS}?resourceVersion={at}&resourceVersionMatch=Exact"
        ))
        .await;
    assert_eq!(names(&exact.body), ["w0", "w1", "w2"]);
    assert_eq!(exact.body["metadata"]["resourceVersion"], at.to_string());
    // Legacy rule: an RV with a limit is exact too.
    let legacy = raw
        .get(&format!("{WIDGETS}?resourceVersion={at}&limit=10"))
        .await;
    assert_eq!(names(&legacy.body), ["w0", "w1", "w2"]);
    // NotOlderThan, and "0" (any), serve the newest state; "0" ignores limit like the watch cache.
    let not_older = raw
        .get(&format!(
            "{WIDGETS}?resourceVersion={at}&resourceVersionMatch=NotOlderThan"
        ))
        .await;
    assert_eq!(names(&not_older.body), ["w1", "w2"]);
    let any = raw
        .get(&format!("{WIDGETS}?resourceVersion=0&limit=1"))
        .await
        .body;
    assert_eq!(names(&any), ["w1", "w2"]);
    assert!(any["metadata"].get("continue").is_none());

    sim.compact();
    let gone = raw
        .get(&format!(
            "{WIDGETS}?resourceVersion={at}&resourceVersionMatch=Exact"
        ))
        .await;
    assert_eq!(
        (gone.status, gone.body["reason"].as_str()),
        (410, Some("Expired"))
    );
    assert_eq!(
        gone.body["message"],
        "The resourceVersion for the provided list is too old."
    );

    for bad in [
        "resourceVersionMatch=Exact",
        "resourceVersion=0&resourceVersionMatch=Exact",
        "resourceVersion=1&resourceVersionMatch=Newest",
        "sendInitialEvents=true",
    ] {
        let r = raw.get(&format!("{WIDGETS}?{bad}")).await;
        assert_eq!(
            (r.status, r.body["reason"].as_str()),
            (422, Some("Invalid")),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn a_revision_ahead_of_the_server_is_504_with_the_too_large_cause() {
    let (sim, raw) = seeded(1).await;
    let ahead = sim.resource_version() + 100;
    let r = raw
        .get(&format!(
            "{WIDGETS}?resourceVersion={ahead}&resourceVersionMatch=NotOlderThan"
        ))
        .await;
    assert_eq!(r.status, 504);
    assert_eq!(r.body["reason"], "Timeout");
    assert_eq!(
        r.body["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    assert_eq!(r.headers["retry-after"], "1");
}

#[tokio::test]
async fn label_selectors_support_the_whole_grammar() {
    let (_sim, raw) = seeded(6).await;
    let cases: &[(&str, &[&str])] = &[
        ("app%3Deven", &["w0", "w2", "w4"]),
        ("app%3D%3Dodd", &["w1", "w3", "w5"]),
        ("app!%3Deven", &["w1", "w3", "w5"]),
        ("rank+in+%281%2C4%29", &["w1", "w4"]),
        ("rank+notin+%281%2C4%29%2Capp%3Deven", &["w0", "w2"]),
        ("rank%3E3", &["w4", "w5"]),
        ("rank%3C1", &["w0"]),
        ("app", &["w0", "w1", "w2", "w3", "w4", "w5"]),
        ("!app", &[]),
        ("missing!%3Dx", &["w0", "w1", "w2", "w3", "w4", "w5"]),
    ];
    for (sel, want) in cases {
        let list = raw.get(&format!("{WIDGETS}?labelSelector={sel}")).await;
        assert_eq!(list.status, 200, "{sel}: {}", list.body);
        assert_eq!(names(&list.body), *want, "{sel}");
    }
    let bad = raw.get(&format!("{WIDGETS}?labelSelector=app+in+x")).await;
    assert_eq!(
        (bad.status, bad.body["reason"].as_str()),
        (400, Some("BadRequest"))
    );
}

#[tokio::test]
async fn field_selectors_support_name_and_namespace_only() {
    let (_sim, raw) = seeded(3).await;
    assert_eq!(
        names(
            &raw.get(&format!("{WIDGETS}?fieldSelector=metadata.name%3Dw1"))
                .await
                .body
        ),
        ["w1"]
    );
    assert_eq!(
        names(
            &raw.get(&format!("{WIDGETS}?fieldSelector=metadata.name!%3Dw1"))
                .await
                .body
        ),
        ["w0", "w2"]
    );
    let cross = raw
        .get("/apis/example.com/v1/widgets?fieldSelector=metadata.namespace%3Ddefault")
        .await;
    assert_eq!(names(&cross.body).len(), 3);
    let bad = raw
        .get(&format!("{WIDGETS}?fieldSelector=spec.n%3D1"))
        .await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.body["message"], "field label not supported: spec.n");
    // Cluster-scoped resources have no metadata.namespace field.
    let ns = raw
        .get("/api/v1/namespaces?fieldSelector=metadata.namespace%3Dx")
        .await;
    assert_eq!(ns.status, 400);
}

#[tokio::test]
async fn pagination_with_a_selector_pages_over_matches() {
    let (_sim, raw) = seeded(9).await;
    let first = raw
        .get(&format!("{WIDGETS}?limit=2&labelSelector=app%3Deven"))
        .await
        .body;
    assert_eq!(names(&first), ["w0", "w2"]);
    let t = first["metadata"]["continue"].as_str().unwrap();
    let second = raw
        .get(&format!(
            "{WIDGETS}?limit=2&labelSelector=app%3Deven&continue={t}"
        ))
        .await
        .body;
    assert_eq!(names(&second), ["w4", "w6"]);
    let t = second["metadata"]["continue"].as_str().unwrap();
    let third = raw
        .get(&format!(
            "{WIDGETS}?limit=2&labelSelector=app%3Deven&continue={t}"
        ))
        .await
        .body;
    assert_eq!(names(&third), ["w8"]);
    assert!(third["metadata"].get("continue").is_none());
}
