//! Filters that look into the objects, end to end through the herald binary and the simulator: a
//! resource `when` (CEL) that fires once per transition across restarts and relists, `changed`,
//! the default that bookkeeping-only updates (managedFields, resourceVersion) are no events, a
//! route `when` that narrows one sink only, and `herald check` on expressions.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{
    Herald, Raw, Receiver, WIDGETS_RESOURCE, admin_addr, herald_config, id_of, ids, sim,
    webhook_config, widget, widgets_crd,
};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";
const MERGE: &str = "application/merge-patch+json";
const TRANSITION: &str =
    "object.status.phase == 'Failed' && (oldObject == null || oldObject.status.phase != 'Failed')";

/// A metric's value for one label (`resource="Widget.example.com"`, `sink="gold"`).
async fn metric(addr: &str, name: &str, label: &str) -> u64 {
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("metrics reachable")
        .text()
        .await
        .expect("metrics body");
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{{label}}} ")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name}{{{label}}} in:\n{text}"))
}

/// Waits until the metric reaches `at_least`; panics after 20 s.
async fn metric_reaches(addr: &str, name: &str, label: &str, at_least: u64) {
    let started = Instant::now();
    loop {
        let v = metric(addr, name, label).await;
        if v >= at_least {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{name}{{{label}}} stays at {v}, expected {at_least}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const WIDGET: &str = "resource=\"Widget.example.com\"";

async fn set_phase(raw: &Raw, name: &str, phase: &str) -> Value {
    let r = raw
        .patch(
            &format!("{WIDGETS}/{name}/status"),
            MERGE,
            &json!({"status": {"phase": phase}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

#[tokio::test]
async fn a_transition_expression_fires_once_per_transition_across_restarts_and_relists() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        &format!("{WIDGETS_RESOURCE}\n    when: \"{TRANSITION}\""),
    );
    let addr = admin_addr(&config);
    let mut herald = Herald::start(dir.path(), &config);
    herald.wait_for_log("Listed and reconciled.").await;

    // Created without a status: `object.status.phase` fails, and onError's default skips it.
    raw.post(WIDGETS, &widget("a", json!({}), json!({"v": 1})))
        .await;
    metric_reaches(&addr, "herald_filter_errors_total", WIDGET, 1).await;
    set_phase(&raw, "a", "Pending").await;
    let first = set_phase(&raw, "a", "Failed").await;
    // Still failed: a spec change, then the same phase written again with other news.
    raw.patch(&format!("{WIDGETS}/a"), MERGE, &json!({"spec": {"v": 2}}))
        .await;
    set_phase(&raw, "a", "Ready").await;
    let second = set_phase(&raw, "a", "Failed").await;
    herald.wait_for(2).await;
    let events = herald.settle(2).await;
    assert_eq!(
        ids(&events),
        [id_of(&first, "updated"), id_of(&second, "updated")]
    );
    assert_eq!(events[0]["data"]["object"]["status"]["phase"], "Failed");

    // Across a restart: the watch resumes where the checkpoint says, the index still holds the
    // last recorded state (a filtered one), so the transition made while stopped fires once.
    assert_eq!(herald.terminate().await, Some(0));
    set_phase(&raw, "a", "Ready").await;
    let third = set_phase(&raw, "a", "Failed").await;
    herald.restart();
    herald.wait_for(3).await;
    // Changes are recorded in order, so every change before the third event is counted by now.
    let filtered = metric(&addr, "herald_filtered_changes_total", WIDGET).await;
    raw.patch(&format!("{WIDGETS}/a"), MERGE, &json!({"spec": {"v": 3}}))
        .await;
    set_phase(&raw, "a", "Ready").await;
    // The Ready state is recorded (filtered, but the next change's old object) before herald stops.
    metric_reaches(&addr, "herald_filtered_changes_total", WIDGET, filtered + 2).await;
    let events = herald.settle(3).await;
    assert_eq!(ids(&events)[2], id_of(&third, "updated"));
    assert_eq!(herald.terminate().await, Some(0));

    // Across a 410 relist: a fails while herald is stopped, b is created and fails; the history
    // is compacted, so the restart lists and diffs against the index. Each fires once.
    let fourth = set_phase(&raw, "a", "Failed").await;
    raw.post(WIDGETS, &widget("b", json!({}), json!({}))).await;
    let b = set_phase(&raw, "b", "Failed").await;
    sim.compact();
    herald.restart();
    herald.wait_for(5).await;
    let events = herald.settle(5).await;
    let relisted = ids(&events[3..]);
    assert_eq!(relisted.len(), 2);
    assert!(
        relisted.contains(&id_of(&fourth, "updated")) && relisted.contains(&id_of(&b, "created")),
        "{relisted:#?}"
    );
    assert!(events[3..].iter().all(|e| e["resync"] == true));

    // Nothing fires twice: a live 410 relist, then a restart, with no change in between.
    let relists = metric(&addr, "herald_watch_relists_total", WIDGET).await;
    // Another write moves the revision past herald's, so the compaction leaves its resume point
    // behind and the re-watch gets 410.
    let ns = raw
        .post(
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "elsewhere"}}),
        )
        .await;
    assert_eq!(ns.status, 201, "{}", ns.body);
    sim.compact();
    sim.drop_watches();
    metric_reaches(&addr, "herald_watch_relists_total", WIDGET, relists + 1).await;
    herald.settle(5).await;
    assert_eq!(herald.terminate().await, Some(0));
    herald.restart();
    // A positive signal instead of a pause: a transition after the restart fires, and it is the
    // very next event (nothing was re-sent before it).
    set_phase(&raw, "a", "Ready").await;
    let sixth = set_phase(&raw, "a", "Failed").await;
    herald.wait_for(6).await;
    let events = herald.settle(6).await;
    assert_eq!(ids(&events)[5], id_of(&sixth, "updated"));
}

#[tokio::test]
async fn changed_spec_passes_spec_changes_only() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        &format!("{WIDGETS_RESOURCE}\n    changed: [spec]"),
    );
    let addr = admin_addr(&config);
    let herald = Herald::start(dir.path(), &config);
    herald.wait_for_log("Listed and reconciled.").await;

    let created = raw
        .post(WIDGETS, &widget("w", json!({"tier": "a"}), json!({"v": 1})))
        .await
        .body;
    set_phase(&raw, "w", "Ready").await;
    let labelled = raw
        .patch(
            &format!("{WIDGETS}/w"),
            MERGE,
            &json!({"metadata": {"labels": {"tier": "b"}}}),
        )
        .await
        .body;
    assert_eq!(labelled["metadata"]["labels"]["tier"], "b");
    metric_reaches(&addr, "herald_filtered_changes_total", WIDGET, 2).await;
    let spec = raw
        .patch(&format!("{WIDGETS}/w"), MERGE, &json!({"spec": {"v": 2}}))
        .await
        .body;
    herald.wait_for(2).await;
    let events = herald.settle(2).await;
    assert_eq!(
        ids(&events),
        [id_of(&created, "created"), id_of(&spec, "updated")]
    );
    // The patch is against the last recorded state, filtered changes included: no status or
    // label in it, only what the spec change wrote.
    let mut paths: Vec<&str> = events[1]["data"]["patch"]
        .as_array()
        .unwrap()
        .iter()
        .map(|op| op["path"].as_str().unwrap())
        .collect();
    paths.sort_unstable();
    assert_eq!(
        paths,
        [
            "/metadata/generation",
            "/metadata/resourceVersion",
            "/spec/v"
        ]
    );
}

#[tokio::test]
async fn an_update_of_managed_fields_only_emits_nothing() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    // managedFields kept in the recorded object, so the update differs from it in them.
    let config = herald_config(
        &sim,
        dir.path(),
        &format!("{WIDGETS_RESOURCE}\n    keepManagedFields: true"),
    );
    let addr = admin_addr(&config);
    let herald = Herald::start(dir.path(), &config);
    herald.wait_for_log("Listed and reconciled.").await;

    let apply = |manager: &str, v: i64| {
        let body = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                          "metadata": {"name": "w", "namespace": "default"}, "spec": {"v": v}});
        let path = format!("{WIDGETS}/w?fieldManager={manager}");
        let raw = &raw;
        async move {
            let r = raw
                .patch(&path, "application/apply-patch+yaml", &body)
                .await;
            assert!(r.status == 200 || r.status == 201, "{}", r.body);
            r.body
        }
    };
    let created = apply("one", 1).await;
    herald.wait_for(1).await;
    // A second manager applies the same values: only managedFields (and the version) change.
    let shared = apply("two", 1).await;
    assert_ne!(
        shared["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
    assert_ne!(
        shared["metadata"]["managedFields"],
        created["metadata"]["managedFields"]
    );
    assert_eq!(shared["spec"], created["spec"]);
    metric_reaches(&addr, "herald_filtered_changes_total", WIDGET, 1).await;
    let changed = raw
        .patch(&format!("{WIDGETS}/w"), MERGE, &json!({"spec": {"v": 2}}))
        .await
        .body;
    herald.wait_for(2).await;
    let events = herald.settle(2).await;
    assert_eq!(
        ids(&events),
        [id_of(&created, "created"), id_of(&changed, "updated")]
    );
}

#[tokio::test]
async fn a_route_when_narrows_one_sink_and_leaves_the_other_whole() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let (gold, all) = (Receiver::start().await, Receiver::start().await);
    let dir = tempfile::tempdir().unwrap();
    let config = webhook_config(
        &sim,
        dir.path(),
        &[("gold", &gold.url, ""), ("all", &all.url, "")],
    )
    .replace(
        "journal:\n",
        "routes:\n  - sinks: [all]\n  - sinks: [gold]\n    when: \"object.spec.tier == 'gold' && op != 'deleted'\"\njournal:\n",
    );
    let addr = admin_addr(&config);
    let herald = Herald::start(dir.path(), &config);
    herald.wait_for_log("Listed and reconciled.").await;

    let g = raw
        .post(WIDGETS, &widget("g", json!({}), json!({"tier": "gold"})))
        .await
        .body;
    let s = raw
        .post(WIDGETS, &widget("s", json!({}), json!({"tier": "silver"})))
        .await
        .body;
    // No tier: the expression fails on it, and onError's default keeps it from `gold`.
    let n = raw
        .post(WIDGETS, &widget("n", json!({}), json!({})))
        .await
        .body;
    let s2 = raw
        .patch(
            &format!("{WIDGETS}/s"),
            MERGE,
            &json!({"spec": {"tier": "gold"}}),
        )
        .await
        .body;
    raw.delete(&format!("{WIDGETS}/g")).await;
    let wanted_all = 5;
    let started = Instant::now();
    while all.taken_ids().len() < wanted_all {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:#?}",
            all.taken_ids()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // `gold` reads the journal on its own: wait for what it should get, then for anything more.
    while gold.taken_ids().len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:#?}",
            gold.taken_ids()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mut got = gold.taken_ids();
    got.sort();
    let mut want = vec![id_of(&g, "created"), id_of(&s2, "updated")];
    want.sort();
    assert_eq!(got, want);
    let everything = all.taken_ids();
    assert_eq!(everything.len(), wanted_all, "{everything:#?}");
    for id in [
        id_of(&g, "created"),
        id_of(&s, "created"),
        id_of(&n, "created"),
        id_of(&s2, "updated"),
    ] {
        assert!(
            everything.contains(&id),
            "{id} missing from {everything:#?}"
        );
    }
    assert_eq!(
        metric(&addr, "herald_route_filter_errors_total", "sink=\"gold\"").await,
        1
    );
    assert_eq!(
        metric(&addr, "herald_route_filter_errors_total", "sink=\"all\"").await,
        0
    );
}

async fn check(config: &str, dir: &std::path::Path) -> (Option<i32>, String) {
    let path = dir.join("check.yaml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_herald"));
    cmd.args(["check", "-c"]).arg(&path);
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn herald_check_shows_expression_errors_and_the_old_object_warning() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        &format!(
            "{WIDGETS_RESOURCE}\n    when: \"object.spec.v > 1 &&\\n  oldObjekt.spec.v <= 1\""
        ),
    );
    let (code, stderr) = check(&config, dir.path()).await;
    assert_eq!(code, Some(herald::exit_code::CONFIG_INVALID), "{stderr}");
    assert!(
        stderr.contains(
            "resources[0].when: line 2, column 3: unknown variable `oldObjekt` (the variables are object, oldObject, op, resync, namespace, name)"
        ),
        "{stderr}"
    );

    let config = herald_config(&sim, dir.path(), WIDGETS_RESOURCE).replace(
        "journal:\n",
        "routes:\n  - sinks: [out]\n    when: \"oldObject == null || object.spec != oldObject.spec\"\njournal:\n",
    );
    let (code, stderr) = check(&config, dir.path()).await;
    assert_eq!(code, Some(herald::exit_code::OK), "{stderr}");
    assert!(
        stderr.contains("warning: routes[0].when: uses oldObject, but the events of resources[0] do not carry it"),
        "{stderr}"
    );
}
