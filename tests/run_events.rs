//! `herald run` end to end: the herald binary against the simulator over HTTP, delivering into a file
//! sink. Asserts on what was delivered: ids, order, counts.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use serde_json::{Value, json};

use crate::support::{
    Herald, Raw, WIDGETS_RESOURCE, herald_config, id_of, ids, sim, widget, widgets_crd,
};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";
const MERGE: &str = "application/merge-patch+json";

fn rv(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn lifecycle_changes_become_exact_deterministic_events() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let herald = Herald::start(
        dir.path(),
        &herald_config(&sim, dir.path(), WIDGETS_RESOURCE),
    );

    let created = raw
        .post(
            WIDGETS,
            &widget("w1", json!({"app": "shop"}), json!({"size": 1})),
        )
        .await
        .body;
    let first = herald.wait_for(1).await;
    assert_eq!(ids(&first), [id_of(&created, "created")]);

    let a = format!("{WIDGETS}/w1");
    let spec = raw
        .patch(&a, MERGE, &json!({"spec": {"size": 2}}))
        .await
        .body;
    let status = raw
        .patch(
            &format!("{a}/status"),
            MERGE,
            &json!({"status": {"phase": "Ready"}}),
        )
        .await
        .body;
    let fin = raw
        .patch(
            &a,
            MERGE,
            &json!({"metadata": {"finalizers": ["example.com/hold"]}}),
        )
        .await
        .body;
    let deleting = raw.delete(&a).await.body;
    raw.patch(&a, MERGE, &json!({"metadata": {"finalizers": null}}))
        .await;
    let deleted_rv = sim.resource_version().to_string();

    let events = herald.wait_for(6).await;
    let uid = created["metadata"]["uid"].as_str().unwrap();
    assert_eq!(
        ids(&events),
        [
            id_of(&created, "created"),
            id_of(&spec, "updated"),
            id_of(&status, "updated"),
            id_of(&fin, "updated"),
            id_of(&deleting, "updated"),
            format!("{uid}:{deleted_rv}:deleted"),
        ]
    );
    let e = &events[1];
    assert_eq!(e["specversion"], "1.0");
    assert_eq!(e["source"], "k8s://test/example.com/widgets");
    assert_eq!(e["type"], "dev.herald.resource.updated");
    assert_eq!(e["subject"], "default/w1");
    assert_eq!(e["partitionkey"], "default/w1");
    assert_eq!(e["k8snamespace"], "default");
    assert_eq!(e["k8skind"], "Widget");
    assert_eq!(e["k8sversion"], "v1");
    assert_eq!(e["resync"], false);
    assert_eq!(e["generation"], "2");
    assert_eq!(
        e["sequence"],
        format!(
            "{:020}",
            spec["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        )
    );
    assert_eq!(e["datacontenttype"], "application/json");
    assert_eq!(e["dataschema"], "urn:herald:change:v1");
    assert_eq!(e["data"]["op"], "updated");
    assert!(
        e["data"]["patch"]
            .as_array()
            .unwrap()
            .contains(&json!({"op": "replace", "path": "/spec/size", "value": 2}))
    );
    assert!(
        e["data"]["object"]["metadata"]
            .get("managedFields")
            .is_none(),
        "managedFields stripped"
    );
    assert_eq!(
        events[2]["data"]["object"]["status"]["phase"], "Ready",
        "status-only updates are events by default"
    );
    assert!(events[0]["data"].get("patch").is_none());
    let last = &events[5];
    assert_eq!(last["type"], "dev.herald.resource.deleted");
    assert_eq!(
        last["data"]["object"]["metadata"]["finalizers"],
        json!(["example.com/hold"]),
        "the last stored state"
    );
    herald.settle(6).await;
}

#[tokio::test]
async fn sigterm_then_restart_delivers_every_change_exactly_once() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut herald = Herald::start(
        dir.path(),
        &herald_config(&sim, dir.path(), WIDGETS_RESOURCE),
    );
    for i in 0..5 {
        raw.post(
            WIDGETS,
            &widget(&format!("w{i}"), json!({}), json!({"n": i})),
        )
        .await;
    }
    herald.wait_for(5).await;
    assert_eq!(
        herald.terminate().await,
        Some(0),
        "SIGTERM drains and exits 0"
    );

    // Changes while herald is down are picked up from the checkpoint on restart.
    raw.patch(
        &format!("{WIDGETS}/w0"),
        MERGE,
        &json!({"spec": {"n": 100}}),
    )
    .await;
    raw.delete(&format!("{WIDGETS}/w1")).await;
    herald.restart();
    let events = herald.wait_for(7).await;
    let unique: BTreeSet<String> = ids(&events).into_iter().collect();
    assert_eq!(
        unique.len(),
        7,
        "no duplicates after a clean stop: {:?}",
        ids(&events)
    );
    assert_eq!(events[5]["type"], "dev.herald.resource.updated");
    assert_eq!(
        events[5]["resync"], false,
        "resumed from the checkpoint, not relisted"
    );
    assert_eq!(events[6]["type"], "dev.herald.resource.deleted");
    herald.settle(7).await;
}

#[tokio::test]
async fn kill_9_loses_nothing_and_duplicates_keep_their_ids() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut herald = Herald::start(
        dir.path(),
        &herald_config(&sim, dir.path(), WIDGETS_RESOURCE),
    );
    let mut expected = BTreeSet::new();
    for i in 0..20 {
        let o = raw
            .post(WIDGETS, &widget(&format!("w{i}"), json!({}), json!({})))
            .await
            .body;
        expected.insert(id_of(&o, "created"));
    }
    herald.wait_for(5).await;
    herald.kill().await;
    for i in 0..20 {
        let o = raw
            .patch(
                &format!("{WIDGETS}/w{i}"),
                MERGE,
                &json!({"spec": {"n": i}}),
            )
            .await
            .body;
        expected.insert(id_of(&o, "updated"));
    }
    herald.restart();
    // Duplicates are allowed after a crash (same ids), so wait for the set, not a count.
    let started = std::time::Instant::now();
    let events = loop {
        let events = herald.delivered();
        let got: BTreeSet<String> = ids(&events).into_iter().collect();
        if got.is_superset(&expected) || started.elapsed() > std::time::Duration::from_secs(20) {
            break events;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let got: BTreeSet<String> = ids(&events).into_iter().collect();
    assert_eq!(
        got, expected,
        "every change arrived; any duplicate repeats an id"
    );
    // Order per object holds across the crash, for a consumer that drops repeated ids.
    let mut last_seq: HashMap<String, String> = HashMap::new();
    let mut seen = BTreeSet::new();
    for e in events
        .iter()
        .filter(|e| seen.insert(e["id"].as_str().unwrap().to_string()))
    {
        let key = e["partitionkey"].as_str().unwrap().to_string();
        let seq = e["sequence"].as_str().unwrap().to_string();
        if let Some(prev) = last_seq.get(&key) {
            assert!(*prev <= seq, "order per object: {key} {prev} then {seq}");
        }
        last_seq.insert(key, seq);
    }
}

#[tokio::test]
async fn a_gap_with_410_yields_exactly_the_missed_changes_with_deletions() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut herald = Herald::start(
        dir.path(),
        &herald_config(&sim, dir.path(), WIDGETS_RESOURCE),
    );
    let mut objs = HashMap::new();
    for n in ["a", "b", "c", "same"] {
        objs.insert(
            n,
            raw.post(WIDGETS, &widget(n, json!({}), json!({"v": 1})))
                .await
                .body,
        );
    }
    herald.wait_for(4).await;
    assert_eq!(herald.terminate().await, Some(0));

    let a2 = raw
        .patch(&format!("{WIDGETS}/a"), MERGE, &json!({"spec": {"v": 2}}))
        .await
        .body;
    raw.delete(&format!("{WIDGETS}/b")).await;
    raw.delete(&format!("{WIDGETS}/c")).await;
    let c2 = raw
        .post(WIDGETS, &widget("c", json!({}), json!({"v": 9})))
        .await
        .body;
    let d = raw
        .post(WIDGETS, &widget("d", json!({}), json!({})))
        .await
        .body;
    sim.compact();
    herald.restart();

    let events = herald.wait_for(9).await;
    let resync: Vec<&Value> = events[4..].iter().collect();
    assert!(
        resync.iter().all(|e| e["resync"] == true),
        "synthesized after the 410"
    );
    let list_rv = {
        let b_del = resync.iter().find(|e| e["subject"] == "default/b").unwrap();
        b_del["resourceversion"].as_str().unwrap().to_string()
    };
    let uid = |n: &str| objs[n]["metadata"]["uid"].as_str().unwrap().to_string();
    let got: BTreeSet<String> = resync
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    // The re-created c's deletion is dated just before the new c (docs/adr/0007), not at the
    // list revision, which would sort it after the new c's creation.
    let c_deleted = format!("{}:{}:deleted", uid("c"), rv(&c2) - 1);
    let want: BTreeSet<String> = [
        id_of(&a2, "updated"),
        format!("{}:{list_rv}:deleted", uid("b")),
        c_deleted.clone(),
        id_of(&c2, "created"),
        id_of(&d, "created"),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want);
    assert!(
        list_rv.parse::<u64>().unwrap()
            >= d["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap()
    );
    let c_old = resync.iter().position(|e| e["id"] == c_deleted).unwrap();
    let c_new = resync
        .iter()
        .position(|e| e["id"] == id_of(&c2, "created"))
        .unwrap();
    assert!(
        c_old < c_new,
        "the old c is deleted before the new c is created"
    );
    herald.settle(9).await;
}

/// A copy of a stopped herald's journal directory.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// `sequence` strictly rises in delivery order within each `partitionkey`.
fn assert_sequence_rises_per_key(events: &[Value]) {
    let mut last: HashMap<&str, &str> = HashMap::new();
    for e in events {
        let key = e["partitionkey"].as_str().unwrap();
        let seq = e["sequence"].as_str().unwrap();
        if let Some(prev) = last.insert(key, seq) {
            assert!(
                prev < seq,
                "{key}: sequence {prev} then {seq} ({}); all: {:#?}",
                e["id"],
                ids(events)
            );
        }
    }
}

#[tokio::test]
async fn names_re_created_during_a_410_gap_keep_sequence_rising_and_their_ids_repeat() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut herald = Herald::start(
        dir.path(),
        &herald_config(&sim, dir.path(), WIDGETS_RESOURCE),
    );
    let mut before = HashMap::new();
    for n in ["kept", "updated", "gone", "again", "churned"] {
        before.insert(
            n,
            raw.post(WIDGETS, &widget(n, json!({}), json!({"v": 1})))
                .await
                .body,
        );
    }
    herald.wait_for(5).await;
    assert_eq!(herald.terminate().await, Some(0));

    // While herald is stopped: an update, a deletion, a name deleted and re-created, one re-created
    // three times, a new name; then the history is compacted, so the restart gets a 410 and relists.
    let updated = raw
        .patch(
            &format!("{WIDGETS}/updated"),
            MERGE,
            &json!({"spec": {"v": 2}}),
        )
        .await
        .body;
    raw.delete(&format!("{WIDGETS}/gone")).await;
    raw.delete(&format!("{WIDGETS}/again")).await;
    let again = raw
        .post(WIDGETS, &widget("again", json!({}), json!({"v": 2})))
        .await
        .body;
    let mut churned = Value::Null;
    for v in 2..5 {
        raw.delete(&format!("{WIDGETS}/churned")).await;
        churned = raw
            .post(WIDGETS, &widget("churned", json!({}), json!({"v": v})))
            .await
            .body;
    }
    let fresh = raw
        .post(WIDGETS, &widget("fresh", json!({}), json!({})))
        .await
        .body;
    sim.compact();
    // A second herald with the same journal will relist the same cluster state.
    let twin = tempfile::tempdir().unwrap();
    copy_dir(&dir.path().join("journal"), &twin.path().join("journal"));
    herald.restart();

    let events = herald.wait_for(12).await;
    assert_sequence_rises_per_key(&events);
    let relisted = &events[5..];
    assert!(
        relisted.iter().all(|e| e["resync"] == true),
        "synthesized by the relist after the 410: {:#?}",
        ids(&events)
    );
    let gone = relisted
        .iter()
        .find(|e| e["subject"] == "default/gone")
        .unwrap();
    let list_rv: u64 = gone["resourceversion"].as_str().unwrap().parse().unwrap();
    assert!(
        list_rv > rv(&again) && list_rv > rv(&churned),
        "the list revision is later than the re-created objects' own"
    );
    let uid = |o: &Value| o["metadata"]["uid"].as_str().unwrap().to_string();
    let replaced = |old: &Value, new: &Value| {
        vec![
            format!("{}:{}:deleted", uid(old), rv(new) - 1),
            id_of(new, "created"),
        ]
    };
    let mut per_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in relisted {
        per_key
            .entry(e["partitionkey"].as_str().unwrap().to_string())
            .or_default()
            .push(e["id"].as_str().unwrap().to_string());
    }
    let want: BTreeMap<String, Vec<String>> = [
        ("default/updated", vec![id_of(&updated, "updated")]),
        (
            "default/gone",
            vec![format!("{}:{list_rv}:deleted", uid(&before["gone"]))],
        ),
        ("default/again", replaced(&before["again"], &again)),
        ("default/churned", replaced(&before["churned"], &churned)),
        ("default/fresh", vec![id_of(&fresh, "created")]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(per_key, want);

    // The same journal relisting the same cluster state gives the same ids, in the same order per
    // object. Across objects a sink may interleave them differently (order holds per
    // `partitionkey` only), so the whole file's order is not compared.
    let twin_herald = Herald::start(
        twin.path(),
        &herald_config(&sim, twin.path(), WIDGETS_RESOURCE),
    );
    let twin_events = twin_herald.wait_for(7).await;
    let mut twin_per_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in &twin_events {
        twin_per_key
            .entry(e["partitionkey"].as_str().unwrap().to_string())
            .or_default()
            .push(e["id"].as_str().unwrap().to_string());
    }
    assert_eq!(twin_per_key, per_key);
    twin_herald.settle(7).await;
    herald.settle(12).await;
}

#[tokio::test]
async fn first_start_emits_or_skips_the_existing_state() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    for n in ["x", "y"] {
        raw.post(WIDGETS, &widget(n, json!({}), json!({}))).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let herald = Herald::start(
        dir.path(),
        &herald_config(&sim, dir.path(), WIDGETS_RESOURCE),
    );
    let events = herald.wait_for(2).await;
    assert!(
        events
            .iter()
            .all(|e| e["type"] == "dev.herald.resource.created" && e["resync"] == true)
    );
    drop(herald);

    let skip_dir = tempfile::tempdir().unwrap();
    let skipping = format!("{WIDGETS_RESOURCE}\n    initialState: skip");
    let herald = Herald::start(
        skip_dir.path(),
        &herald_config(&sim, skip_dir.path(), &skipping),
    );
    // The patch must come after herald's first list, or it lands in the skipped initial state: a
    // fixed 500 ms sleep lost that race on a loaded machine.
    herald.wait_for_log("Listed and reconciled.").await;
    let x2 = raw
        .patch(&format!("{WIDGETS}/x"), MERGE, &json!({"spec": {"n": 2}}))
        .await
        .body;
    let events = herald.wait_for(1).await;
    assert_eq!(
        ids(&events),
        [id_of(&x2, "updated")],
        "skip: only later changes"
    );
    herald.settle(1).await;
}

#[tokio::test]
async fn a_crd_installed_after_start_is_picked_up() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    let dir = tempfile::tempdir().unwrap();
    let herald = Herald::start(
        dir.path(),
        &herald_config(&sim, dir.path(), WIDGETS_RESOURCE),
    );
    // The CRD goes in only once herald is waiting for it: a fixed sleep raced herald's start-up on
    // a loaded machine, and the CRD then existed before herald first looked.
    let started = std::time::Instant::now();
    while !std::fs::read_to_string(&herald.stderr)
        .unwrap_or_default()
        .contains("Waiting for the resource to be served")
    {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "herald never said it was waiting for the resource"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    raw.install_crd(&widgets_crd()).await;
    let w = raw
        .post(WIDGETS, &widget("late", json!({}), json!({})))
        .await
        .body;
    let events = herald.wait_for(1).await;
    assert_eq!(events[0]["id"], id_of(&w, "created"));
    let stderr = std::fs::read_to_string(&herald.stderr).unwrap();
    assert!(
        stderr.contains("Waiting for the resource to be served"),
        "one clear line while waiting"
    );
}

#[tokio::test]
async fn config_errors_name_the_path_and_exit_10() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "cluster:\n  name: Bad_Name\nresources: []\nsinks: []\n",
            "cluster.name",
        ),
        (
            "resources:\n  - group: example.com\n    kind: Widget\n    initialState: emitt\nsinks: []\n",
            "resources[0].initialState",
        ),
        (
            "resources: []\nsinks:\n  - name: out\n    type: file\n    path: x\n    fsyncIntervall: 1s\n",
            "sinks[0]",
        ),
        (
            "resources: []\nsinks:\n  - {name: out, type: file, path: x}\nroutes:\n  - {resources: ['*'], sinks: [archiv]}\n",
            "routes[0].sinks[0]",
        ),
    ];
    for (yaml, path) in cases {
        let file = dir.path().join("bad.yaml");
        std::fs::write(&file, yaml).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
            .args(["run", "-c"])
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(herald::exit_code::CONFIG_INVALID),
            "{yaml}: {stderr}"
        );
        assert!(stderr.contains(path), "{path} named in: {stderr}");
    }
}

#[tokio::test]
async fn selector_exits_are_updates_not_deletions() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let gold = format!("{WIDGETS_RESOURCE}\n    labelSelector: tier=gold");
    let herald = Herald::start(dir.path(), &herald_config(&sim, dir.path(), &gold));
    let g = raw
        .post(WIDGETS, &widget("g", json!({"tier": "gold"}), json!({})))
        .await
        .body;
    raw.post(WIDGETS, &widget("s", json!({"tier": "silver"}), json!({})))
        .await;
    herald.wait_for(1).await;
    let left = raw
        .patch(
            &format!("{WIDGETS}/g"),
            MERGE,
            &json!({"metadata": {"labels": {"tier": "silver"}}}),
        )
        .await
        .body;
    let events = herald.wait_for(2).await;
    assert_eq!(
        ids(&events),
        [id_of(&g, "created"), id_of(&left, "updated")],
        "leaving the selection is an update"
    );
    // Changes outside the selection are not watched; coming back is an update, not a creation.
    raw.patch(&format!("{WIDGETS}/g"), MERGE, &json!({"spec": {"n": 1}}))
        .await;
    let back = raw
        .patch(
            &format!("{WIDGETS}/g"),
            MERGE,
            &json!({"metadata": {"labels": {"tier": "gold"}}}),
        )
        .await
        .body;
    let events = herald.wait_for(3).await;
    assert_eq!(events[2]["id"], id_of(&back, "updated"));
    // A silver object deleted is never a gold event.
    raw.delete(&format!("{WIDGETS}/s")).await;
    let gone = raw.delete(&format!("{WIDGETS}/g")).await.body;
    let events = herald.wait_for(4).await;
    assert_eq!(events[3]["type"], "dev.herald.resource.deleted");
    assert_eq!(events[3]["k8suid"], gone["details"]["uid"]);
    herald.settle(4).await;
}

#[tokio::test]
async fn listed_namespaces_event_filters_status_skips_and_routes() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    for ns in ["team-a", "team-b"] {
        raw.post(
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await;
    }
    let dir = tempfile::tempdir().unwrap();
    let base = herald_config(
        &sim,
        dir.path(),
        &format!("{WIDGETS_RESOURCE}\n    namespaces: [team-a]\n    skipStatusOnlyUpdates: true"),
    );
    let config = base.replace(
        "journal:",
        &format!(
            "  - name: deletions\n    type: file\n    path: {}\nroutes:\n  - resources: [widgets.example.com]\n    sinks: [out]\n  - resources: [Widget.example.com]\n    events: [deleted]\n    sinks: [deletions]\njournal:",
            dir.path().join("deletions.jsonl").display()
        ),
    );
    let herald = Herald::start(dir.path(), &config);
    let in_a = |n: &str| {
        let mut w = widget(n, json!({}), json!({}));
        w["metadata"]["namespace"] = json!("team-a");
        w
    };
    let mut in_b = widget("b1", json!({}), json!({}));
    in_b["metadata"]["namespace"] = json!("team-b");
    raw.post("/apis/example.com/v1/namespaces/team-b/widgets", &in_b)
        .await;
    let a1 = raw
        .post(
            "/apis/example.com/v1/namespaces/team-a/widgets",
            &in_a("a1"),
        )
        .await
        .body;
    herald.wait_for(1).await;
    let a_path = "/apis/example.com/v1/namespaces/team-a/widgets/a1";
    raw.patch(
        &format!("{a_path}/status"),
        MERGE,
        &json!({"status": {"phase": "Ready"}}),
    )
    .await;
    let spec = raw
        .patch(a_path, MERGE, &json!({"spec": {"n": 1}}))
        .await
        .body;
    raw.delete(a_path).await;
    let events = herald.wait_for(3).await;
    assert_eq!(
        ids(&events)[..2],
        [id_of(&a1, "created"), id_of(&spec, "updated")],
        "team-b never shows; status-only skipped"
    );
    assert_eq!(events[2]["type"], "dev.herald.resource.deleted");
    herald.settle(3).await;
    let deletions: Vec<Value> = std::fs::read_to_string(dir.path().join("deletions.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        deletions.len(),
        1,
        "the second sink only gets what its route sends"
    );
    assert_eq!(deletions[0]["id"], events[2]["id"]);
}
