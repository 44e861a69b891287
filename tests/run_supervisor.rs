//! The supervisor: watchers, sinks and routes added and removed while herald runs, against the
//! simulator over HTTP, delivering into file sinks. Asserts on what each sink received.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use herald::app::SupervisorError;
use herald::event::Op;
use herald::route::{ResourcePattern, Route};
use herald::watch::WatchSpec;
use serde_json::{Value, json};

use crate::support::{Raw, Receiver, free_port, sim, widget, widgets_crd};

const MERGE: &str = "application/merge-patch+json";

fn widgets(ns: &str) -> String {
    format!("/apis/example.com/v1/namespaces/{ns}/widgets")
}

/// Creates the Widget `ns/name`.
async fn create(raw: &Raw, ns: &str, name: &str) {
    let mut w = widget(name, json!({}), json!({}));
    w["metadata"]["namespace"] = json!(ns);
    let reply = raw.post(&widgets(ns), &w).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
}

/// Each object's ops (`namespace/name` → ops in delivery order) in a file sink's output: events
/// of different objects may interleave, each object's are in order.
fn received(path: &Path) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
        if line.trim().is_empty() {
            continue;
        }
        let e: Value = serde_json::from_str(line).unwrap();
        let op = e["type"].as_str().unwrap().rsplit('.').next().unwrap();
        out.entry(e["subject"].as_str().unwrap().to_owned())
            .or_default()
            .push(op.to_owned());
    }
    out
}

fn objects(expected: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
    expected
        .iter()
        .map(|(subject, ops)| {
            (
                (*subject).to_owned(),
                ops.iter().map(|op| (*op).to_owned()).collect(),
            )
        })
        .collect()
}

fn count(events: &BTreeMap<String, Vec<String>>) -> usize {
    events.values().map(Vec::len).sum()
}

/// Waits until `path` holds exactly `expected`, then a little longer to see that nothing more comes.
async fn exactly(path: &Path, expected: &[(&str, &[&str])]) {
    let expected = objects(expected);
    let started = std::time::Instant::now();
    while count(&received(path)) < count(&expected) && started.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(received(path), expected, "{}", path.display());
}

#[tokio::test]
async fn watchers_sinks_and_routes_change_while_herald_runs() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let ns = raw
        .post(
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}}),
        )
        .await;
    assert_eq!(ns.status, 201, "{}", ns.body);
    let dir = tempfile::tempdir().unwrap();
    let (out, late) = (dir.path().join("out.jsonl"), dir.path().join("late.jsonl"));
    let yaml = format!(
        "cluster:\n  name: test\n  kubeconfig:\n    path: {kc}\n\
         resources:\n  - group: example.com\n    kind: Widget\n    namespaces: [default, other]\n\
         sinks:\n  - {{name: out, type: file, path: {out}, fsync: always}}\n  \
         - {{name: late, type: file, path: {late}, fsync: always}}\n\
         journal:\n  path: {journal}\n  flushInterval: 2ms\nadmin:\n  listen: 127.0.0.1:{port}\n",
        kc = sim.kubeconfig_path().display(),
        out = out.display(),
        late = late.display(),
        journal = dir.path().join("journal").display(),
        port = free_port(),
    );
    let full = herald::config::from_str(&yaml).unwrap();
    let mut cfg = full.clone();
    cfg.sinks.truncate(1);
    let mut running = herald::app::start(&cfg, None).await.unwrap();
    while !running.synced() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let other_label = "Widget.example.com/other";
    assert_eq!(
        running.supervisor().watcher_labels(),
        ["Widget.example.com/default", other_label]
    );

    create(&raw, "default", "a").await;
    create(&raw, "other", "b").await;
    exactly(
        &out,
        &[("default/a", &["created"]), ("other/b", &["created"])],
    )
    .await;

    // A removed watcher journals nothing more; the other keeps going.
    running
        .supervisor()
        .remove_watcher(other_label)
        .await
        .unwrap();
    assert_eq!(
        running.supervisor().watcher_labels(),
        ["Widget.example.com/default"]
    );
    create(&raw, "other", "c").await;
    create(&raw, "default", "d").await;
    exactly(
        &out,
        &[
            ("default/a", &["created"]),
            ("default/d", &["created"]),
            ("other/b", &["created"]),
        ],
    )
    .await;

    // A sink added at run time starts at the head: it gets what is journaled from now on.
    running.supervisor().add_sink(&full.sinks[1]).await.unwrap();
    assert_eq!(running.supervisor().sink_names(), ["out", "late"]);
    create(&raw, "default", "e").await;
    exactly(&late, &[("default/e", &["created"])]).await;

    // Replaced routes: `late` now gets only deletions, `out` everything.
    running.supervisor().set_routes(vec![
        Route {
            resources: vec![ResourcePattern::Any],
            ops: vec![Op::Deleted],
            sinks: vec!["late".into()],
            when: None,
        },
        Route {
            resources: vec!["Widget.example.com".parse().unwrap()],
            ops: vec![],
            sinks: vec!["out".into()],
            when: None,
        },
    ]);
    let e = format!("{}/e", widgets("default"));
    raw.patch(&e, MERGE, &json!({"spec": {"size": 2}})).await;
    raw.delete(&e).await;
    exactly(&late, &[("default/e", &["created", "deleted"])]).await;

    // The watcher added again resumes from its checkpoint: what happened while it was gone comes out.
    let spec = WatchSpec::from_config(&cfg)
        .into_iter()
        .find(|s| s.label() == other_label)
        .unwrap();
    running.supervisor().add_watcher(spec).unwrap();
    exactly(
        &out,
        &[
            ("default/a", &["created"]),
            ("default/d", &["created"]),
            ("default/e", &["created", "updated", "deleted"]),
            ("other/b", &["created"]),
            ("other/c", &["created"]),
        ],
    )
    .await;

    // A removed sink gets nothing more and its cursor leaves the journal.
    running
        .supervisor()
        .remove_sink("late", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(running.journal().sinks(), ["out"]);
    raw.delete(&format!("{}/d", widgets("default"))).await;
    exactly(
        &out,
        &[
            ("default/a", &["created"]),
            ("default/d", &["created", "deleted"]),
            ("default/e", &["created", "updated", "deleted"]),
            ("other/b", &["created"]),
            ("other/c", &["created"]),
        ],
    )
    .await;
    assert_eq!(
        received(&late),
        objects(&[("default/e", &["created", "deleted"])])
    );

    // What cannot be done is refused by name, and changes nothing.
    let s = running.supervisor();
    let again = WatchSpec::from_config(&cfg).remove(0);
    assert!(matches!(
        s.add_watcher(again),
        Err(SupervisorError::WatcherExists(l)) if l == "Widget.example.com/default"
    ));
    assert!(matches!(
        s.remove_watcher("nope").await,
        Err(SupervisorError::NoSuchWatcher(_))
    ));
    assert!(matches!(
        s.add_sink(&cfg.sinks[0]).await,
        Err(SupervisorError::SinkExists(n)) if n == "out"
    ));
    assert!(matches!(
        s.remove_sink("late", Duration::from_secs(1)).await,
        Err(SupervisorError::NoSuchSink(_))
    ));
    assert_eq!(s.sink_names(), ["out"]);
    running.stop(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn a_failing_sink_removed_while_watching_stops_for_good() {
    use std::sync::atomic::Ordering;
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let receiver = Receiver::start().await;
    receiver.status.store(503, Ordering::SeqCst);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let yaml = format!(
        "cluster:\n  name: test\n  kubeconfig:\n    path: {kc}\n\
         resources:\n  - group: example.com\n    kind: Widget\n\
         sinks:\n  - {{name: out, type: file, path: {out}, fsync: always}}\n  \
         - {{name: hook, type: webhook, url: '{url}'}}\n\
         journal:\n  path: {journal}\n  flushInterval: 2ms\nadmin:\n  listen: 127.0.0.1:{port}\n",
        kc = sim.kubeconfig_path().display(),
        out = out.display(),
        url = receiver.url,
        journal = dir.path().join("journal").display(),
        port = free_port(),
    );
    let cfg = herald::config::from_str(&yaml).unwrap();
    let mut running = herald::app::start(&cfg, None).await.unwrap();
    while !running.synced() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    create(&raw, "default", "a").await;
    while receiver.requests.load(Ordering::SeqCst) < 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The receiver keeps failing, so the sink cannot drain: its delivery is stopped anyway.
    running
        .supervisor()
        .remove_sink("hook", Duration::from_millis(300))
        .await
        .unwrap();
    let seen = receiver.requests.load(Ordering::SeqCst);
    // Were its loop still running, a receiver taking events again would now get them.
    receiver.status.store(204, Ordering::SeqCst);
    create(&raw, "default", "b").await;
    exactly(
        &out,
        &[("default/a", &["created"]), ("default/b", &["created"])],
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(receiver.requests.load(Ordering::SeqCst), seen);
    assert!(receiver.taken_ids().is_empty());
    assert_eq!(running.supervisor().sink_names(), ["out"]);
    running.stop(Duration::from_secs(5)).await.unwrap();
}
