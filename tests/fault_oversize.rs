//! Fault: a webhook receiver refuses an event as too large, 413 (issue 14, item 9). herald follows
//! the resource's `onOversize` as it does for Kafka and NATS: by default the reference-only event
//! (`truncated: "true"`) is sent instead, nothing is dead-lettered; with `onOversize: deadLetter`
//! the event is dead-lettered.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use crate::support::{Herald, Raw, free_port, id_of, sim, widgets_crd};

/// Bodies larger than this are refused with 413.
const LIMIT: usize = 2_000;

/// A receiver that refuses bodies over [`LIMIT`] with 413 and records `(ce-id, ce-truncated)` of
/// every event it takes.
async fn small_receiver() -> (String, Arc<Mutex<Vec<(String, String)>>>) {
    let taken = Arc::new(Mutex::new(Vec::new()));
    let t = taken.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let t = t.clone();
            async move {
                if body.len() > LIMIT {
                    return StatusCode::PAYLOAD_TOO_LARGE;
                }
                let h = |k: &str| {
                    headers
                        .get(k)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_string()
                };
                t.lock().unwrap().push((h("ce-id"), h("ce-truncated")));
                StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, taken)
}

async fn status(admin: &str) -> Value {
    let body = reqwest::get(format!("http://{admin}/status"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    serde_json::from_str(&body).unwrap()
}

/// Runs herald with the webhook sink and `on_oversize` on the Widget resource, creates a small and
/// a large widget; returns what the receiver took, the ids, and the sink's dead-lettered count.
async fn run(on_oversize: &str) -> (Vec<(String, String)>, String, String, u64) {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let (url, taken) = small_receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let admin = format!("127.0.0.1:{}", free_port());
    let config = format!(
        "cluster:\n  name: test\n  kubeconfig:\n    path: {kc}\n\
         resources:\n  - group: example.com\n    kind: Widget\n    onOversize: {on_oversize}\n\
         sinks:\n  - {{name: hook, type: webhook, url: '{url}', timeout: 2s}}\n\
         journal:\n  path: {journal}\n  flushInterval: 2ms\nadmin:\n  listen: {admin}\n",
        kc = sim.kubeconfig_path().display(),
        journal = dir.path().join("journal").display(),
    );
    let herald = Herald::start(dir.path(), &config);
    let started = Instant::now();
    while reqwest::get(format!("http://{admin}/readyz"))
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
        != 200
    {
        assert!(started.elapsed() < Duration::from_secs(30), "not ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let post = async |name: &str, size: usize| {
        let r = raw
            .post(
                "/apis/example.com/v1/namespaces/default/widgets",
                &json!({"apiVersion": "example.com/v1", "kind": "Widget",
                        "metadata": {"name": name, "namespace": "default"},
                        "spec": {"note": "x".repeat(size)}}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        id_of(&r.body, "created")
    };
    let small = post("small", 10).await;
    let large = post("large", 3 * LIMIT).await;
    // Both are settled once the small one arrived and the large one either arrived or was
    // dead-lettered.
    let started = Instant::now();
    loop {
        let got = taken.lock().unwrap().clone();
        let dead = status(&admin).await["sinks"][0]["deadLettered"]
            .as_u64()
            .unwrap_or(0);
        let has = |id: &str| got.iter().any(|(i, _)| i == id);
        if has(&small) && (has(&large) || dead > 0) {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let dead = status(&admin).await["sinks"][0]["deadLettered"]
                .as_u64()
                .unwrap_or(0);
            let got = taken.lock().unwrap().clone();
            drop(herald);
            return (got, small, large, dead);
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "events not settled: {got:?}, dead-lettered {dead}\n{}",
            std::fs::read_to_string(&herald.stderr).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_413_sends_the_reference_only_event_by_default_instead_of_dead_lettering() {
    let (got, small, large, dead) = run("reference").await;
    assert_eq!(dead, 0, "nothing is dead-lettered: {got:?}");
    assert!(got.contains(&(small, String::new())), "{got:?}");
    assert!(got.contains(&(large, "true".to_owned())), "{got:?}");
}

#[tokio::test]
async fn a_413_dead_letters_the_event_when_its_resource_says_dead_letter() {
    let (got, small, large, dead) = run("deadLetter").await;
    assert_eq!(dead, 1, "{got:?}");
    assert!(got.contains(&(small, String::new())), "{got:?}");
    assert!(!got.iter().any(|(id, _)| *id == large), "{got:?}");
}
