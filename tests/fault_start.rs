//! Fault: a sink's target is down when herald starts (issue 14, item 5). herald must not exit:
//! the other sinks and the watches run, the sink starts paused and probing, `/readyz`, `/status`
//! and `herald_sink_paused` say so, and once the target is up it gets every event, in order per
//! object.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{
    Herald, Raw, Receiver, admin_get as get, free_port, sim, widget, widgets_crd,
};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";
const MERGE: &str = "application/merge-patch+json";

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The ids of `events` per subject, in the order given.
fn per_subject<'a>(
    events: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> HashMap<String, Vec<String>> {
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    for (id, subject) in events {
        out.entry(subject.to_owned())
            .or_default()
            .push(id.to_owned());
    }
    out
}

#[tokio::test]
async fn a_webhook_down_at_start_pauses_its_sink_and_gets_everything_once_it_listens() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    // Nobody listens on this port until the receiver starts below.
    let port = free_port();
    let admin = format!("127.0.0.1:{}", free_port());
    let config = format!(
        "cluster:\n  name: test\n  kubeconfig:\n    path: {kc}\n\
         resources:\n  - group: example.com\n    kind: Widget\n\
         sinks:\n  - {{name: out, type: file, path: {out}, fsync: always}}\n  \
         - {{name: hook, type: webhook, url: 'http://127.0.0.1:{port}/hook', timeout: 2s}}\n\
         journal:\n  path: {journal}\n  flushInterval: 2ms\nadmin:\n  listen: {admin}\n",
        kc = sim.kubeconfig_path().display(),
        out = dir.path().join("events.jsonl").display(),
        journal = dir.path().join("journal").display(),
    );
    let mut herald = Herald::start(dir.path(), &config);

    // herald runs: its watch opens, and the paused sink is named with its cause.
    herald
        .until(30, "herald ready", async || {
            get(&admin, "/readyz").await.0 == 200
        })
        .await;
    assert!(
        herald.child.as_mut().unwrap().try_wait().unwrap().is_none(),
        "herald exited"
    );
    let (_, ready) = get(&admin, "/readyz").await;
    assert!(
        ready.contains("sink hook: paused") && ready.contains("127.0.0.1"),
        "{ready}"
    );
    let (_, status) = get(&admin, "/status").await;
    let status: Value = serde_json::from_str(&status).unwrap();
    let hook = status["sinks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sink"] == "hook")
        .unwrap()
        .clone();
    assert_eq!(hook["paused"], true, "{hook}");
    assert!(
        hook["pausedReason"]
            .as_str()
            .is_some_and(|r| r.contains("unreachable")),
        "{hook}"
    );
    let (_, metrics) = get(&admin, "/metrics").await;
    assert_eq!(
        metric(&metrics, "herald_sink_paused{sink=\"hook\"}"),
        Some(1.0)
    );
    let stderr = std::fs::read_to_string(&herald.stderr).unwrap_or_default();
    assert!(
        stderr.contains("Sink target unreachable") && stderr.contains("hook"),
        "{stderr}"
    );

    // The file sink gets every event while the webhook is down.
    for i in 0..4 {
        raw.post(
            WIDGETS,
            &widget(&format!("w{i}"), json!({}), json!({"n": 0})),
        )
        .await;
    }
    for round in 1..=2 {
        for i in 0..4 {
            raw.patch(
                &format!("{WIDGETS}/w{i}"),
                MERGE,
                &json!({"spec": {"n": round}}),
            )
            .await;
        }
    }
    let file = herald.wait_for(12).await;

    // The receiver comes up on the port herald was given: every event arrives, in order per object.
    let rx = Receiver::start_on(port).await;
    herald
        .until(30, "the webhook's 12 events", async || {
            rx.taken_ids().iter().collect::<HashSet<_>>().len() >= 12
        })
        .await;
    let taken = rx.taken.lock().unwrap().clone();
    let mut seen = HashSet::new();
    let first_arrivals: Vec<(&str, &str)> = taken
        .iter()
        .filter(|(id, _, _)| seen.insert(id.clone()))
        .map(|(id, subject, _)| (id.as_str(), subject.as_str()))
        .collect();
    let expected = per_subject(
        file.iter()
            .map(|e| (e["id"].as_str().unwrap(), e["subject"].as_str().unwrap())),
    );
    assert_eq!(per_subject(first_arrivals), expected);

    herald
        .until(30, "the sink resumed", async || {
            let (_, metrics) = get(&admin, "/metrics").await;
            metric(&metrics, "herald_sink_paused{sink=\"hook\"}") == Some(0.0)
                && !get(&admin, "/readyz").await.1.contains("paused")
        })
        .await;
    assert_eq!(herald.terminate().await, Some(0));
}

#[tokio::test]
async fn a_nats_server_down_at_start_pauses_its_sink_and_gets_everything_once_it_runs() {
    let Some(mut server) = crate::support::nats::NatsServer::start(&[]) else {
        return;
    };
    // The server's port and store are kept; it runs again only after herald started.
    server.stop();
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let admin = format!("127.0.0.1:{}", free_port());
    let config = format!(
        "cluster:\n  name: test\n  kubeconfig:\n    path: {kc}\n\
         resources:\n  - group: example.com\n    kind: Widget\n\
         sinks:\n  - {{name: out, type: file, path: {out}, fsync: always}}\n  \
         - name: bus\n    type: nats\n    servers: ['{url}']\n    connectTimeout: 1s\n    \
         subject: 'herald.{{plural}}.{{namespace}}.{{name}}'\n    \
         jetstream:\n      stream: HERALD\n      create: {{subjects: ['herald.>'], storage: memory}}\n\
         journal:\n  path: {journal}\n  flushInterval: 2ms\nadmin:\n  listen: {admin}\n",
        kc = sim.kubeconfig_path().display(),
        out = dir.path().join("events.jsonl").display(),
        url = server.url(),
        journal = dir.path().join("journal").display(),
    );
    let mut herald = Herald::start(dir.path(), &config);
    herald
        .until(30, "herald ready", async || {
            get(&admin, "/readyz").await.0 == 200
        })
        .await;
    let (_, ready) = get(&admin, "/readyz").await;
    assert!(ready.contains("sink bus: paused"), "{ready}");

    for i in 0..3 {
        raw.post(
            WIDGETS,
            &widget(&format!("n{i}"), json!({}), json!({"n": 0})),
        )
        .await;
        raw.patch(
            &format!("{WIDGETS}/n{i}"),
            MERGE,
            &json!({"spec": {"n": 1}}),
        )
        .await;
    }
    let file = herald.wait_for(6).await;
    assert!(
        herald.child.as_mut().unwrap().try_wait().unwrap().is_none(),
        "herald exited"
    );

    // The server comes up: herald connects, creates the stream and delivers everything.
    server.restart();
    let total = file.len() as u64;
    herald
        .until(30, "every event in the stream", async || {
            let Ok(client) = async_nats::connect(server.url()).await else {
                return false;
            };
            match async_nats::jetstream::new(client)
                .get_stream("HERALD")
                .await
            {
                Ok(mut stream) => stream.info().await.is_ok_and(|i| i.state.messages >= total),
                Err(_) => false,
            }
        })
        .await;
    let stored = crate::sink_nats::stream_messages(&server, "HERALD").await;
    let in_stream = per_subject(stored.iter().map(|m| {
        let id = crate::sink_nats::header(Some(&m.headers), "Nats-Msg-Id").unwrap();
        // herald.widgets.<namespace>.<name> → <namespace>/<name>, the events' subject.
        let object = m
            .subject
            .splitn(3, '.')
            .nth(2)
            .unwrap()
            .replacen('.', "/", 1);
        (id, Box::leak(object.into_boxed_str()) as &str)
    }));
    let expected = per_subject(
        file.iter()
            .map(|e| (e["id"].as_str().unwrap(), e["subject"].as_str().unwrap())),
    );
    assert_eq!(in_stream, expected);
    herald
        .until(30, "the sink resumed", async || {
            !get(&admin, "/readyz").await.1.contains("paused")
        })
        .await;
    assert_eq!(herald.terminate().await, Some(0));
}

/// `herald run` with one webhook sink at `url`, beside a file sink; returns its exit code if it
/// exits within 30 s.
async fn run_exit(url: &str) -> (Option<i32>, String) {
    let sim = sim().await;
    Raw::new(&sim).install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "cluster:\n  name: test\n  kubeconfig:\n    path: {kc}\n\
         resources:\n  - group: example.com\n    kind: Widget\n\
         sinks:\n  - {{name: out, type: file, path: {out}}}\n  \
         - {{name: hook, type: webhook, url: '{url}', timeout: 2s}}\n\
         journal:\n  path: {journal}\nadmin:\n  listen: 127.0.0.1:{admin}\n",
        kc = sim.kubeconfig_path().display(),
        out = dir.path().join("events.jsonl").display(),
        journal = dir.path().join("journal").display(),
        admin = free_port(),
    );
    let path = dir.path().join("herald.yaml");
    std::fs::write(&path, &config).unwrap();
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["run", "-c"])
        .arg(&path)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("herald kept running")
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_receiver_that_can_never_verify_still_stops_the_start() {
    // TLS to a plain-HTTP receiver: the handshake fails however long herald waits.
    let rx = Receiver::start().await;
    let url = rx.url.replacen("http://", "https://", 1);
    let (code, stderr) = run_exit(&url).await;
    assert_eq!(
        code,
        Some(herald::exit_code::HEALTHCHECK_FAILED),
        "{stderr}"
    );
    assert!(stderr.contains("hook"), "{stderr}");
}

#[tokio::test]
async fn check_connect_still_fails_on_a_receiver_that_is_down() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "cluster:\n  name: test\n  kubeconfig:\n    path: {kc}\n\
         resources:\n  - group: example.com\n    kind: Widget\n\
         sinks:\n  - {{name: hook, type: webhook, url: 'http://127.0.0.1:{port}/hook', timeout: 2s}}\n\
         journal:\n  path: {journal}\n",
        kc = sim.kubeconfig_path().display(),
        port = free_port(),
        journal = dir.path().join("journal").display(),
    );
    Raw::new(&sim).install_crd(&widgets_crd()).await;
    let path = dir.path().join("check.yaml");
    std::fs::write(&path, &config).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["check", "--connect", "-c"])
        .arg(&path)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(herald::exit_code::HEALTHCHECK_FAILED),
        "{stderr}"
    );
    assert!(stderr.contains("hook"), "{stderr}");
}
