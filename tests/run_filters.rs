//! What a resource's filters let through, end to end: `fieldSelector`, `namespaces.selector` and
//! `resources[].events`, each through the herald binary against the simulator, on the live watch
//! and on the relist after a 410.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::support::{
    Herald, Raw, WIDGETS_RESOURCE, herald_config, id_of, ids, sim, widget, widgets_crd,
};

const MERGE: &str = "application/merge-patch+json";

fn widgets(ns: &str) -> String {
    format!("/apis/example.com/v1/namespaces/{ns}/widgets")
}

fn widget_in(ns: &str, name: &str, spec: Value) -> Value {
    let mut w = widget(name, json!({}), spec);
    w["metadata"]["namespace"] = json!(ns);
    w
}

/// Ids per `partitionkey`, in delivery order: delivery keeps order within a key only.
fn per_key(events: &[Value]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in events {
        out.entry(e["partitionkey"].as_str().unwrap().to_string())
            .or_default()
            .push(e["id"].as_str().unwrap().to_string());
    }
    out
}

fn want(pairs: &[(&str, &[String])]) -> BTreeMap<String, Vec<String>> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.to_vec()))
        .collect()
}

fn uid(obj: &Value) -> &str {
    obj["metadata"]["uid"].as_str().unwrap()
}

async fn namespace(raw: &Raw, name: &str, team: &str) {
    let r = raw
        .post(
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": name, "labels": {"team": team}}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
}

/// The list revision a relist gave a deletion it synthesized.
fn list_rv_of(events: &[Value], subject: &str) -> String {
    events
        .iter()
        .find(|e| e["subject"] == subject && e["type"] == "dev.herald.resource.deleted")
        .unwrap_or_else(|| panic!("no deletion of {subject} in {:#?}", ids(events)))["resourceversion"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_field_selector_filters_the_watch_and_the_relist() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        &format!("{WIDGETS_RESOURCE}\n    fieldSelector: metadata.name!=scratch"),
    );
    let mut herald = Herald::start(dir.path(), &config);
    herald.wait_for_log("Listed and reconciled.").await;
    let w = widgets("default");

    let keep = raw
        .post(&w, &widget_in("default", "keep", json!({"v": 1})))
        .await
        .body;
    raw.post(&w, &widget_in("default", "scratch", json!({"v": 1})))
        .await;
    let keep2 = raw
        .patch(&format!("{w}/keep"), MERGE, &json!({"spec": {"v": 2}}))
        .await
        .body;
    raw.patch(&format!("{w}/scratch"), MERGE, &json!({"spec": {"v": 2}}))
        .await;
    raw.delete(&format!("{w}/scratch")).await;
    raw.delete(&format!("{w}/keep")).await;
    let keep_gone = sim.resource_version();
    let other = raw
        .post(&w, &widget_in("default", "other", json!({})))
        .await
        .body;
    let events = herald.wait_for(4).await;
    assert_eq!(
        per_key(&events),
        want(&[
            (
                "default/keep",
                &[
                    id_of(&keep, "created"),
                    id_of(&keep2, "updated"),
                    format!("{}:{keep_gone}:deleted", uid(&keep)),
                ]
            ),
            ("default/other", &[id_of(&other, "created")]),
        ]),
        "scratch never shows"
    );
    assert_eq!(herald.terminate().await, Some(0));

    // While herald is stopped: both names come back, `other` goes; the relist after the 410
    // lists with the selector too.
    let keep_again = raw
        .post(&w, &widget_in("default", "keep", json!({"v": 3})))
        .await
        .body;
    raw.post(&w, &widget_in("default", "scratch", json!({"v": 3})))
        .await;
    raw.delete(&format!("{w}/other")).await;
    sim.compact();
    herald.restart();
    let events = herald.wait_for(6).await;
    let list_rv = list_rv_of(&events, "default/other");
    assert_eq!(
        per_key(&events[4..]),
        want(&[
            ("default/keep", &[id_of(&keep_again, "created")]),
            (
                "default/other",
                &[format!("{}:{list_rv}:deleted", uid(&other))]
            ),
        ])
    );
    assert!(events[4..].iter().all(|e| e["resync"] == true));
    herald.settle(6).await;
}

#[tokio::test]
async fn a_namespace_selector_follows_the_namespaces_labels() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    namespace(&raw, "shop", "a").await;
    namespace(&raw, "lab", "b").await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        &format!("{WIDGETS_RESOURCE}\n    namespaces:\n      selector: team=a"),
    );
    let mut herald = Herald::start(dir.path(), &config);
    herald.wait_for_log("Listed and reconciled.").await;

    raw.post(&widgets("lab"), &widget_in("lab", "l1", json!({})))
        .await;
    let s1 = raw
        .post(&widgets("shop"), &widget_in("shop", "s1", json!({"v": 1})))
        .await
        .body;
    raw.patch(
        &format!("{}/l1", widgets("lab")),
        MERGE,
        &json!({"spec": {"v": 2}}),
    )
    .await;
    let s1_2 = raw
        .patch(
            &format!("{}/s1", widgets("shop")),
            MERGE,
            &json!({"spec": {"v": 2}}),
        )
        .await
        .body;
    // herald has looked at the namespaces by now (for lab and shop); then a namespace that
    // matches is created while it runs, and a widget in it at once.
    herald.wait_for(2).await;
    namespace(&raw, "shop-eu", "a").await;
    let e1 = raw
        .post(&widgets("shop-eu"), &widget_in("shop-eu", "e1", json!({})))
        .await
        .body;
    raw.delete(&format!("{}/l1", widgets("lab"))).await;
    let events = herald.wait_for(3).await;
    assert_eq!(
        per_key(&events),
        want(&[
            ("shop/s1", &[id_of(&s1, "created"), id_of(&s1_2, "updated")]),
            ("shop-eu/e1", &[id_of(&e1, "created")]),
        ]),
        "lab (team=b) never shows"
    );
    assert_eq!(herald.terminate().await, Some(0));

    // While herald is stopped, in both kinds of namespace; the relist after the 410 filters too.
    let s2 = raw
        .post(&widgets("shop"), &widget_in("shop", "s2", json!({})))
        .await
        .body;
    raw.post(&widgets("lab"), &widget_in("lab", "l2", json!({})))
        .await;
    raw.delete(&format!("{}/e1", widgets("shop-eu"))).await;
    sim.compact();
    herald.restart();
    let events = herald.wait_for(5).await;
    let list_rv = list_rv_of(&events, "shop-eu/e1");
    assert_eq!(
        per_key(&events[3..]),
        want(&[
            ("shop/s2", &[id_of(&s2, "created")]),
            ("shop-eu/e1", &[format!("{}:{list_rv}:deleted", uid(&e1))]),
        ])
    );
    herald.settle(5).await;
}

#[tokio::test]
async fn resource_events_choose_which_operations_become_events() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        &format!("{WIDGETS_RESOURCE}\n    events: [created, deleted]"),
    );
    let mut herald = Herald::start(dir.path(), &config);
    herald.wait_for_log("Listed and reconciled.").await;
    let w = widgets("default");

    let a = raw
        .post(&w, &widget_in("default", "a", json!({"v": 1})))
        .await
        .body;
    let b = raw
        .post(&w, &widget_in("default", "b", json!({"v": 1})))
        .await
        .body;
    raw.patch(&format!("{w}/a"), MERGE, &json!({"spec": {"v": 2}}))
        .await;
    raw.delete(&format!("{w}/a")).await;
    let a_gone = sim.resource_version();
    let events = herald.wait_for(3).await;
    assert_eq!(
        per_key(&events),
        want(&[
            (
                "default/a",
                &[
                    id_of(&a, "created"),
                    format!("{}:{a_gone}:deleted", uid(&a))
                ]
            ),
            ("default/b", &[id_of(&b, "created")]),
        ]),
        "no updated"
    );
    let a_deleted = events
        .iter()
        .find(|e| e["type"] == "dev.herald.resource.deleted")
        .unwrap();
    assert_eq!(
        a_deleted["data"]["object"]["spec"]["v"], 2,
        "the deletion carries the state of the update that was not sent"
    );
    assert_eq!(herald.terminate().await, Some(0));

    // While herald is stopped; the relist after the 410 sends only what the filter allows.
    raw.patch(&format!("{w}/b"), MERGE, &json!({"spec": {"v": 2}}))
        .await;
    let c = raw
        .post(&w, &widget_in("default", "c", json!({})))
        .await
        .body;
    sim.compact();
    herald.restart();
    let events = herald.wait_for(4).await;
    assert_eq!(ids(&events[3..]), [id_of(&c, "created")]);
    assert_eq!(events[3]["resync"], true);
    herald.settle(4).await;

    // The filtered update was still recorded: deleting b now reports its latest state.
    raw.delete(&format!("{w}/b")).await;
    let b_gone = sim.resource_version();
    let events = herald.wait_for(5).await;
    assert_eq!(events[4]["id"], format!("{}:{b_gone}:deleted", uid(&b)));
    assert_eq!(events[4]["data"]["object"]["spec"]["v"], 2);
    herald.settle(5).await;
}
