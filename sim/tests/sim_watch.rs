//! WATCH as WATCH-PROTOCOL.md §A6 and the edge cases list describe it, checked over raw HTTP.

use std::time::Duration;

use herald_sim::SimConfig;
use serde_json::{Value, json};

use crate::support::{Raw, sim, sim_with, widget, widgets_crd};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

#[tokio::test]
async fn fresh_watch_sends_synthetic_added_then_live_changes_one_compact_line_each() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    raw.post(WIDGETS, &widget("a", json!({}), json!({"n": 1})))
        .await;

    let mut w = raw.watch(&format!("{WIDGETS}?watch=1")).await;
    let first = w.next_line(Duration::from_secs(5)).await.unwrap();
    assert!(
        !first.contains('\n') && !first.contains("  "),
        "compact single line: {first}"
    );
    let ev: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(ev["type"], "ADDED");
    assert_eq!(ev["object"]["apiVersion"], "example.com/v1");
    assert_eq!(ev["object"]["kind"], "Widget");

    raw.post(WIDGETS, &widget("b", json!({}), json!({}))).await;
    let (ty, obj) = w.next_event().await.unwrap();
    assert_eq!(
        (ty.as_str(), obj["metadata"]["name"].as_str()),
        ("ADDED", Some("b"))
    );
}

#[tokio::test]
async fn resume_from_a_revision_sends_only_later_changes() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    raw.post(WIDGETS, &widget("a", json!({}), json!({}))).await;
    let rv = sim.resource_version();
    raw.post(WIDGETS, &widget("b", json!({}), json!({}))).await;
    raw.delete(&format!("{WIDGETS}/a")).await;

    let mut w = raw
        .watch(&format!("{WIDGETS}?watch=true&resourceVersion={rv}"))
        .await;
    let (t1, o1) = w.next_event().await.unwrap();
    let (t2, o2) = w.next_event().await.unwrap();
    assert_eq!(
        (t1.as_str(), o1["metadata"]["name"].as_str()),
        ("ADDED", Some("b"))
    );
    assert_eq!(
        (t2.as_str(), o2["metadata"]["name"].as_str()),
        ("DELETED", Some("a"))
    );
    // DELETED carries the last state stamped with the deletion revision.
    assert_eq!(
        o2["metadata"]["resourceVersion"],
        sim.resource_version().to_string()
    );
}

#[tokio::test]
async fn too_old_revision_is_http_200_then_one_error_event_410_then_end() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    raw.post(WIDGETS, &widget("a", json!({}), json!({}))).await;
    let old = sim.resource_version() - 1;
    sim.compact();

    let mut w = raw
        .watch(&format!("{WIDGETS}?watch=true&resourceVersion={old}"))
        .await;
    let line = w.next_line(Duration::from_secs(5)).await.unwrap();
    let ev: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(ev["type"], "ERROR");
    let status = &ev["object"];
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["apiVersion"], "v1");
    assert_eq!(status["code"], 410);
    assert_eq!(status["reason"], "Expired");
    assert_eq!(
        status["message"],
        format!(
            "too old resource version: {old} ({})",
            sim.resource_version()
        )
    );
    assert!(
        w.next_line(Duration::from_secs(5)).await.is_none(),
        "stream ends after the ERROR"
    );
}

#[tokio::test]
async fn bookmarks_carry_type_meta_and_timeout_ends_the_stream() {
    let sim = sim_with(SimConfig::default().bookmark_interval(Duration::from_millis(200))).await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let rv = sim.resource_version();

    let mut w = raw
        .watch(&format!(
            "{WIDGETS}?watch=1&allowWatchBookmarks=True&timeoutSeconds=2&resourceVersion={rv}"
        ))
        .await;
    let ev: Value =
        serde_json::from_str(&w.next_line(Duration::from_secs(5)).await.unwrap()).unwrap();
    assert_eq!(ev["type"], "BOOKMARK");
    assert_eq!(ev["object"]["apiVersion"], "example.com/v1");
    assert_eq!(ev["object"]["kind"], "Widget");
    assert_eq!(ev["object"]["metadata"]["resourceVersion"], rv.to_string());
    let started = std::time::Instant::now();
    while w.next_line(Duration::from_secs(5)).await.is_some() {}
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "timeoutSeconds ends the stream"
    );

    // Without allowWatchBookmarks no bookmark is ever sent.
    let mut quiet = raw
        .watch(&format!(
            "{WIDGETS}?watch=1&timeoutSeconds=1&resourceVersion={rv}"
        ))
        .await;
    assert!(quiet.next_line(Duration::from_secs(5)).await.is_none());
}

#[tokio::test]
async fn label_selector_transitions_become_added_and_deleted() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    raw.post(
        WIDGETS,
        &widget("a", json!({"tier": "gold"}), json!({"n": 1})),
    )
    .await;
    let rv = sim.resource_version();

    let mut w = raw
        .watch(&format!(
            "{WIDGETS}?watch=true&labelSelector=tier+in+%28gold%29&resourceVersion={rv}"
        ))
        .await;
    let merge = "application/merge-patch+json";
    raw.patch(&format!("{WIDGETS}/a"), merge, &json!({"spec": {"n": 2}}))
        .await;
    raw.patch(
        &format!("{WIDGETS}/a"),
        merge,
        &json!({"metadata": {"labels": {"tier": "silver"}}, "spec": {"n": 3}}),
    )
    .await;
    let left_at = sim.resource_version();
    raw.patch(&format!("{WIDGETS}/a"), merge, &json!({"spec": {"n": 4}}))
        .await;
    raw.patch(
        &format!("{WIDGETS}/a"),
        merge,
        &json!({"metadata": {"labels": {"tier": "gold"}}}),
    )
    .await;

    let (t, o) = w.next_event().await.unwrap();
    assert_eq!((t.as_str(), o["spec"]["n"].as_i64()), ("MODIFIED", Some(2)));
    let (t, o) = w.next_event().await.unwrap();
    // Leaving the selection: DELETED with the previous content, stamped with the new revision.
    assert_eq!((t.as_str(), o["spec"]["n"].as_i64()), ("DELETED", Some(2)));
    assert_eq!(o["metadata"]["labels"]["tier"], "gold");
    assert_eq!(o["metadata"]["resourceVersion"], left_at.to_string());
    let (t, o) = w.next_event().await.unwrap();
    assert_eq!((t.as_str(), o["spec"]["n"].as_i64()), ("ADDED", Some(4)));
}

#[tokio::test]
async fn field_selector_watch_and_the_deprecated_watch_path_select_by_name() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let rv = sim.resource_version();
    let mut by_field = raw
        .watch(&format!(
            "{WIDGETS}?watch=1&fieldSelector=metadata.name%3Db&resourceVersion={rv}"
        ))
        .await;
    let mut by_path = raw
        .watch(&format!(
            "/apis/example.com/v1/watch/namespaces/default/widgets/b?resourceVersion={rv}"
        ))
        .await;
    for name in ["a", "b", "c"] {
        raw.post(WIDGETS, &widget(name, json!({}), json!({}))).await;
    }
    raw.delete(&format!("{WIDGETS}/b")).await;
    for w in [&mut by_field, &mut by_path] {
        let (t, o) = w.next_event().await.unwrap();
        assert_eq!(
            (t.as_str(), o["metadata"]["name"].as_str()),
            ("ADDED", Some("b"))
        );
        let (t, o) = w.next_event().await.unwrap();
        assert_eq!(
            (t.as_str(), o["metadata"]["name"].as_str()),
            ("DELETED", Some("b"))
        );
    }
    let clash = raw.get("/apis/example.com/v1/watch/namespaces/default/widgets/b?fieldSelector=metadata.name%3Dc").await;
    assert_eq!(clash.status, 400);
    assert_eq!(
        clash.body["message"],
        "fieldSelector metadata.name doesn't match requested name"
    );
}

#[tokio::test]
async fn no_op_writes_produce_no_event_and_no_new_revision() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let created = raw
        .post(WIDGETS, &widget("a", json!({"x": "1"}), json!({"n": 1})))
        .await
        .body;
    let rv = sim.resource_version();
    let mut w = raw
        .watch(&format!("{WIDGETS}?watch=1&resourceVersion={rv}"))
        .await;

    let same = raw.put(&format!("{WIDGETS}/a"), &created).await;
    assert_eq!(same.status, 200);
    assert_eq!(same.body["metadata"]["resourceVersion"], rv.to_string());
    let merge = "application/merge-patch+json";
    let patched = raw
        .patch(&format!("{WIDGETS}/a"), merge, &json!({"spec": {"n": 1}}))
        .await;
    assert_eq!(patched.body["metadata"]["resourceVersion"], rv.to_string());
    assert_eq!(sim.resource_version(), rv);

    raw.patch(&format!("{WIDGETS}/a"), merge, &json!({"spec": {"n": 2}}))
        .await;
    let (t, o) = w.next_event().await.unwrap();
    assert_eq!(
        (t.as_str(), o["spec"]["n"].as_i64()),
        ("MODIFIED", Some(2)),
        "the no-op writes sent nothing"
    );
}

#[tokio::test]
async fn watch_parameter_errors_come_before_the_stream() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let no_match = raw
        .get(&format!(
            "{WIDGETS}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true"
        ))
        .await;
    assert_eq!(
        (no_match.status, no_match.body["reason"].as_str()),
        (422, Some("Invalid"))
    );
    assert_eq!(no_match.body["details"]["kind"], "ListOptions");
    assert_eq!(
        raw.get(&format!("{WIDGETS}?watch=1&resourceVersion=abc"))
            .await
            .status,
        400
    );
    assert_eq!(raw.get(&format!("{WIDGETS}?watch=maybe")).await.status, 400);
    let match_alone = raw
        .get(&format!(
            "{WIDGETS}?watch=1&resourceVersionMatch=NotOlderThan&resourceVersion=0"
        ))
        .await;
    assert_eq!(match_alone.status, 422);
}

#[tokio::test]
async fn streaming_list_sends_initial_state_then_the_end_bookmark_then_changes() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    for n in ["a", "b"] {
        raw.post(WIDGETS, &widget(n, json!({}), json!({}))).await;
    }
    let snapshot = sim.resource_version();
    let mut w = raw
        .watch(&format!("{WIDGETS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"))
        .await;
    let mut lines = Vec::new();
    for _ in 0..3 {
        lines.push(
            serde_json::from_str::<Value>(&w.next_line(Duration::from_secs(5)).await.unwrap())
                .unwrap(),
        );
    }
    assert_eq!(
        (lines[0]["type"].as_str(), lines[1]["type"].as_str()),
        (Some("ADDED"), Some("ADDED"))
    );
    let end = &lines[2];
    assert_eq!(end["type"], "BOOKMARK");
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(
        end["object"]["metadata"]["resourceVersion"],
        snapshot.to_string()
    );
    assert_eq!(
        (
            end["object"]["apiVersion"].as_str(),
            end["object"]["kind"].as_str()
        ),
        (Some("example.com/v1"), Some("Widget"))
    );
    raw.post(WIDGETS, &widget("c", json!({}), json!({}))).await;
    let (t, o) = w.next_event().await.unwrap();
    assert_eq!(
        (t.as_str(), o["metadata"]["name"].as_str()),
        ("ADDED", Some("c"))
    );

    // Without allowWatchBookmarks the marker is not sent; sendInitialEvents=false starts at the revision.
    let mut quiet = raw.watch(&format!("{WIDGETS}?watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&timeoutSeconds=1")).await;
    assert!(
        quiet.next_line(Duration::from_secs(5)).await.is_none(),
        "no initial events, no marker"
    );
}

#[tokio::test]
async fn a_fresh_watch_with_bookmarks_ends_its_initial_events_with_the_marker() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    raw.post(WIDGETS, &widget("a", json!({}), json!({}))).await;
    let mut w = raw
        .watch(&format!("{WIDGETS}?watch=1&allowWatchBookmarks=true"))
        .await;
    let first: Value =
        serde_json::from_str(&w.next_line(Duration::from_secs(5)).await.unwrap()).unwrap();
    assert_eq!(first["type"], "ADDED");
    let marker: Value =
        serde_json::from_str(&w.next_line(Duration::from_secs(5)).await.unwrap()).unwrap();
    assert_eq!(
        marker["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
}

#[tokio::test]
async fn a_streaming_list_from_a_future_revision_is_an_in_stream_504() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let ahead = sim.resource_version() + 50;
    let mut w = raw
        .watch(&format!("{WIDGETS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion={ahead}"))
        .await;
    let ev: Value =
        serde_json::from_str(&w.next_line(Duration::from_secs(10)).await.unwrap()).unwrap();
    assert_eq!(ev["type"], "ERROR");
    assert_eq!(ev["object"]["code"], 504);
    assert_eq!(
        ev["object"]["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
}

#[tokio::test]
async fn a_watch_from_a_future_revision_waits_for_it() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let future = sim.resource_version() + 1;
    let mut w = raw
        .watch(&format!("{WIDGETS}?watch=1&resourceVersion={future}"))
        .await;
    raw.post(WIDGETS, &widget("skipped", json!({}), json!({})))
        .await;
    raw.post(WIDGETS, &widget("seen", json!({}), json!({})))
        .await;
    let (_, o) = w.next_event().await.unwrap();
    assert_eq!(o["metadata"]["name"], "seen");
}

#[tokio::test]
async fn dropped_watches_end_cleanly() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let mut w = raw
        .watch(&format!(
            "{WIDGETS}?watch=1&resourceVersion={}",
            sim.resource_version()
        ))
        .await;
    sim.drop_watches();
    assert!(w.next_line(Duration::from_secs(5)).await.is_none());
}

#[tokio::test]
async fn timeout_seconds_zero_means_the_default_and_huge_values_are_safe() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let rv = sim.resource_version();
    for t in ["0", "18446744073709551615"] {
        let mut w = raw
            .watch(&format!(
                "{WIDGETS}?watch=1&timeoutSeconds={t}&resourceVersion={rv}"
            ))
            .await;
        raw.post(
            WIDGETS,
            &widget(&format!("w{}", t.len()), json!({}), json!({})),
        )
        .await;
        let (ty, _) = w
            .next_event()
            .await
            .expect("the watch stays open and delivers");
        assert_eq!(ty, "ADDED", "timeoutSeconds={t}");
    }
    let clash = raw.get("/apis/example.com/v1/watch/namespaces/default/widgets/a?fieldSelector=metadata.namespace%3Ddefault").await;
    assert_eq!(
        clash.status, 400,
        "a name in the path allows no other field selector"
    );
}
