//! The delivery engine through the binary and real webhook receivers: outages and pausing, dead
//! letters and their replay, order per object under concurrency, and isolation between sinks.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Herald, Raw, Receiver, admin_addr, sim, webhook_config, widget, widgets_crd};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";
const MERGE: &str = "application/merge-patch+json";

async fn until(what: &str, herald: &Herald, f: impl Fn() -> bool) {
    let started = Instant::now();
    while !f() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what} did not happen; herald stderr:\n{}",
            std::fs::read_to_string(&herald.stderr).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every subject's events arrived in sequence order (the first arrival of each id counts).
fn in_order_per_object(taken: &[(String, String, String)]) {
    let mut seen = std::collections::HashSet::new();
    let mut last: HashMap<&str, &str> = HashMap::new();
    for (id, subject, seq) in taken {
        if !seen.insert(id) {
            continue;
        }
        if let Some(prev) = last.get(subject.as_str()) {
            assert!(
                *prev < seq.as_str(),
                "order per object broken for {subject}: {prev} then {seq}"
            );
        }
        last.insert(subject, seq);
    }
}

/// Waits until herald reports ready (listed and watching), so later writes arrive as live events.
async fn ready(addr: &str) {
    let started = Instant::now();
    loop {
        if let Ok(r) = reqwest::get(format!("http://{addr}/readyz")).await
            && r.status() == 200
        {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "herald never became ready"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn metric(addr: &str, name: &str) -> f64 {
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1.0)
}

#[tokio::test]
async fn a_receiver_down_for_a_while_pauses_the_sink_then_everything_arrives_in_order() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let rx = Receiver::start().await;
    rx.status.store(503, Ordering::SeqCst);
    let dir = tempfile::tempdir().unwrap();
    let config = webhook_config(
        &sim,
        dir.path(),
        &[("hook", &rx.url, "    concurrency: 4\n")],
    );
    let admin = admin_addr(&config);
    let herald = Herald::start(dir.path(), &config);
    ready(&admin_addr(&config)).await;
    for i in 0..3 {
        raw.post(
            WIDGETS,
            &widget(&format!("w{i}"), json!({}), json!({"n": 0})),
        )
        .await;
    }
    for round in 1..=3 {
        for i in 0..3 {
            raw.patch(
                &format!("{WIDGETS}/w{i}"),
                MERGE,
                &json!({"spec": {"n": round}}),
            )
            .await;
        }
    }
    until("the sink pausing", &herald, || {
        rx.requests.load(Ordering::SeqCst) > 3
    })
    .await;
    let started = Instant::now();
    loop {
        if metric(&admin, "herald_sink_paused{sink=\"hook\"}").await == 1.0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the sink never paused"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let while_down = rx.requests.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        rx.requests.load(Ordering::SeqCst) - while_down < 10,
        "a paused sink is probed, not hammered"
    );

    rx.status.store(204, Ordering::SeqCst);
    until("all 12 events after recovery", &herald, || {
        rx.taken_ids()
            .iter()
            .collect::<std::collections::HashSet<_>>()
            .len()
            == 12
    })
    .await;
    in_order_per_object(&rx.taken.lock().unwrap());
    assert_eq!(
        metric(&admin, "herald_dead_lettered_events_total{sink=\"hook\"}").await,
        0.0,
        "an outage never dead-letters"
    );
    assert_eq!(
        metric(&admin, "herald_sink_paused{sink=\"hook\"}").await,
        0.0
    );
}

#[tokio::test]
async fn a_400_is_dead_lettered_and_replay_delivers_it_once_the_receiver_is_fixed() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let rx = Receiver::start().await;
    rx.reject_subjects
        .lock()
        .unwrap()
        .push("default/bad".into());
    let dir = tempfile::tempdir().unwrap();
    let config = webhook_config(&sim, dir.path(), &[("hook", &rx.url, "")]);
    let admin = admin_addr(&config);
    let mut herald = Herald::start(dir.path(), &config);
    ready(&admin).await;
    let bad = raw
        .post(WIDGETS, &widget("bad", json!({}), json!({})))
        .await
        .body;
    raw.post(WIDGETS, &widget("good", json!({}), json!({})))
        .await;
    let bad2 = raw
        .patch(&format!("{WIDGETS}/bad"), MERGE, &json!({"spec": {"n": 1}}))
        .await
        .body;
    until("good delivered", &herald, || {
        rx.taken
            .lock()
            .unwrap()
            .iter()
            .any(|t| t.1 == "default/good")
    })
    .await;
    let started = Instant::now();
    while metric(&admin, "herald_dead_lettered_events_total{sink=\"hook\"}").await < 2.0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "both events of bad dead-lettered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(herald.terminate().await, Some(0));

    let cfg = herald.config.to_str().unwrap().to_string();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["dlq", "list", "-c", &cfg, "--sink", "hook", "--json"])
        .output()
        .unwrap();
    let letters: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let uid = bad["metadata"]["uid"].as_str().unwrap();
    assert_eq!(letters.as_array().unwrap().len(), 2);
    assert_eq!(
        letters[0]["id"],
        format!(
            "{uid}:{}:created",
            bad["metadata"]["resourceVersion"].as_str().unwrap()
        )
    );
    assert_eq!(
        (letters[0]["class"].as_str(), letters[0]["code"].as_str()),
        (Some("permanent"), Some("http_4xx"))
    );

    rx.reject_subjects.lock().unwrap().clear();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["dlq", "replay", "-c", &cfg, "--sink", "hook"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    herald.restart();
    let want = [
        format!(
            "{uid}:{}:created",
            bad["metadata"]["resourceVersion"].as_str().unwrap()
        ),
        format!(
            "{uid}:{}:updated",
            bad2["metadata"]["resourceVersion"].as_str().unwrap()
        ),
    ];
    until("the replayed dead letters", &herald, || {
        let ids = rx.taken_ids();
        want.iter().all(|w| ids.contains(w))
    })
    .await;
}

#[tokio::test]
async fn order_per_object_holds_with_concurrency_under_random_latency() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let rx = Receiver::start().await;
    rx.max_latency_ms.store(15, Ordering::SeqCst);
    let dir = tempfile::tempdir().unwrap();
    let config = webhook_config(
        &sim,
        dir.path(),
        &[("hook", &rx.url, "    concurrency: 8\n")],
    );
    let herald = Herald::start(dir.path(), &config);
    ready(&admin_addr(&config)).await;
    let objects = 6;
    let rounds = 8;
    for i in 0..objects {
        raw.post(
            WIDGETS,
            &widget(&format!("o{i}"), json!({}), json!({"n": 0})),
        )
        .await;
    }
    for round in 1..=rounds {
        for i in 0..objects {
            raw.patch(
                &format!("{WIDGETS}/o{i}"),
                MERGE,
                &json!({"spec": {"n": round}}),
            )
            .await;
        }
    }
    until("every change", &herald, || {
        rx.taken.lock().unwrap().len() >= objects * (rounds + 1)
    })
    .await;
    in_order_per_object(&rx.taken.lock().unwrap());
}

#[tokio::test]
async fn one_dead_sink_does_not_slow_a_healthy_one() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let rx = Receiver::start().await;
    let dead_port = crate::support::free_port();
    let dir = tempfile::tempdir().unwrap();
    let dead_url = format!("http://127.0.0.1:{dead_port}/hook");
    let config = webhook_config(
        &sim,
        dir.path(),
        &[("healthy", &rx.url, ""), ("dead", &dead_url, "")],
    );
    // The endpoint answers at start, then goes away: the sink fails while herald runs (a target
    // already down at start is tests/fault_start.rs).
    let holder = std::net::TcpListener::bind(("127.0.0.1", dead_port)).unwrap();
    let stub = tokio::spawn({
        let listener = tokio::net::TcpListener::from_std({
            holder.set_nonblocking(true).unwrap();
            holder
        })
        .unwrap();
        async move { axum::serve(listener, axum::Router::new()).await.unwrap() }
    });
    let herald = Herald::start(dir.path(), &config);
    ready(&admin_addr(&config)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stub.abort();
    let _ = stub.await;
    let started = Instant::now();
    for i in 0..20 {
        raw.post(WIDGETS, &widget(&format!("h{i}"), json!({}), json!({})))
            .await;
    }
    until("the healthy sink's 20 events", &herald, || {
        rx.taken.lock().unwrap().len() >= 20
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the healthy sink kept its pace: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn the_admin_token_guards_live_dead_letter_replay() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let rx = Receiver::start().await;
    rx.reject_subjects
        .lock()
        .unwrap()
        .push("default/bad".into());
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("admin-token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let config = format!(
        "{}  token: {{fromFile: {}}}\n",
        webhook_config(&sim, dir.path(), &[("hook", &rx.url, "")]),
        token_file.display()
    );
    let admin = admin_addr(&config);
    let herald = Herald::start(dir.path(), &config);
    ready(&admin).await;
    let bad = raw
        .post(WIDGETS, &widget("bad", json!({}), json!({})))
        .await
        .body;
    let started = Instant::now();
    while metric(&admin, "herald_dead_lettered_events_total{sink=\"hook\"}").await < 1.0 {
        assert!(started.elapsed() < Duration::from_secs(20));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let client = reqwest::Client::new();
    assert_eq!(
        client
            .get(format!("http://{admin}/dlq/hook"))
            .send()
            .await
            .unwrap()
            .status(),
        401,
        "dead letters carry whole events"
    );
    let listed: serde_json::Value = client
        .get(format!("http://{admin}/dlq/hook"))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1);

    let post = |token: Option<&'static str>| {
        let mut r = client.post(format!("http://{admin}/dlq/hook/replay"));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    assert_eq!(post(None).await.unwrap().status(), 401);
    assert_eq!(post(Some("guess")).await.unwrap().status(), 401);
    rx.reject_subjects.lock().unwrap().clear();
    let ok = post(Some("s3cret")).await.unwrap();
    assert_eq!(ok.status(), 200);
    let id = format!(
        "{}:{}:created",
        bad["metadata"]["uid"].as_str().unwrap(),
        bad["metadata"]["resourceVersion"].as_str().unwrap()
    );
    until("the live replay", &herald, || rx.taken_ids().contains(&id)).await;
    let purge = client
        .post(format!("http://{admin}/dlq/hook/purge"))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(
        purge.json::<serde_json::Value>().await.unwrap()["purged"],
        0
    );
}

#[tokio::test]
async fn at_the_backlog_bound_watches_pause_and_resume_from_the_checkpoint() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let rx = Receiver::start().await;
    rx.status.store(503, Ordering::SeqCst);
    let dir = tempfile::tempdir().unwrap();
    let config = webhook_config(&sim, dir.path(), &[("hook", &rx.url, "")]).replace(
        "  flushInterval: 2ms\n",
        "  flushInterval: 2ms\n  maxBacklog: 3\n",
    );
    let admin = admin_addr(&config);
    let herald = Herald::start(dir.path(), &config);
    ready(&admin).await;
    let paused = || {
        std::fs::read_to_string(&herald.stderr)
            .unwrap_or_default()
            .contains("Journal backlog at its bound; pausing watches.")
    };
    let head = || async {
        let status: serde_json::Value = reqwest::get(format!("http://{admin}/status"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        status["journal"]["head"].as_u64().unwrap()
    };
    // One change at a time, each journaled before the next, until the watch pauses: how many
    // changes one watch batch carries then does not depend on how fast this machine is.
    let mut posted = 0;
    while !paused() {
        assert!(
            posted < 10,
            "no pause after {posted} changes with maxBacklog 3"
        );
        raw.post(
            WIDGETS,
            &widget(&format!("b{posted}"), json!({}), json!({})),
        )
        .await;
        posted += 1;
        let started = Instant::now();
        while head().await < posted && !paused() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "change {posted} not journaled"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let at_pause = head().await;
    // One change per batch here: the watch reads until the backlog is over the bound (3), then
    // pauses before the next batch.
    assert_eq!(
        at_pause, 4,
        "the watch pauses once the backlog is over the bound"
    );
    // Paused, the watch reads nothing: more changes stay in the API server, not in the journal.
    for i in posted..10 {
        raw.post(WIDGETS, &widget(&format!("b{i}"), json!({}), json!({})))
            .await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        head().await,
        at_pause,
        "the journal stops growing while paused"
    );
    rx.status.store(204, Ordering::SeqCst);
    until("all ten after the backlog drained", &herald, || {
        rx.taken_ids()
            .iter()
            .collect::<std::collections::HashSet<_>>()
            .len()
            >= 10
    })
    .await;
}
