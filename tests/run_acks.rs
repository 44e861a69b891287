//! Acknowledgements above a stuck event (issue 15, item 2): events a webhook took while an earlier
//! one was stuck in a timeout are not sent again after a kill -9, and the scenario of the issue
//! (`crash_duplicates_per_kill_9`, ignored by default: a measurement, not a test) counts the
//! duplicates each kill -9 costs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Herald, Raw, free_port, id_of, sim, widget, widgets_crd};

/// A webhook receiver whose answers a test shapes: it refuses the requests of one subject with 503
/// (herald retries them), delays the others at random (one in `slow_one_in` past herald's
/// timeout), and records the `ce-id` of every request it answered 204 — only once its handler
/// completed, so a request herald gave up on (its connection closed) is not counted as taken.
struct Hook {
    url: String,
    taken: Arc<Mutex<Vec<String>>>,
    refuse_subject: Arc<Mutex<Option<String>>>,
    max_latency_ms: Arc<AtomicU64>,
    /// One request in this many is held past herald's timeout (0: none).
    slow_one_in: Arc<AtomicU64>,
    slow_ms: u64,
    open: Arc<AtomicBool>,
}

impl Hook {
    async fn start(slow_ms: u64) -> Self {
        let taken = Arc::new(Mutex::new(Vec::new()));
        let refuse_subject = Arc::new(Mutex::new(None::<String>));
        let max_latency_ms = Arc::new(AtomicU64::new(0));
        let slow_one_in = Arc::new(AtomicU64::new(0));
        let open = Arc::new(AtomicBool::new(true));
        let (tk, hs, lat, slow, op) = (
            taken.clone(),
            refuse_subject.clone(),
            max_latency_ms.clone(),
            slow_one_in.clone(),
            open.clone(),
        );
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: axum::http::HeaderMap| {
                let (tk, hs, lat, slow, op) = (
                    tk.clone(),
                    hs.clone(),
                    lat.clone(),
                    slow.clone(),
                    op.clone(),
                );
                async move {
                    let h = |k: &str| {
                        headers
                            .get(k)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_string()
                    };
                    if !op.load(Ordering::SeqCst) {
                        return axum::http::StatusCode::SERVICE_UNAVAILABLE;
                    }
                    if hs.lock().unwrap().as_deref() == Some(h("ce-subject").as_str()) {
                        return axum::http::StatusCode::SERVICE_UNAVAILABLE;
                    }
                    let one_in = slow.load(Ordering::SeqCst);
                    let ms = if one_in > 0 && rand::random_range(0..one_in) == 0 {
                        slow_ms
                    } else {
                        rand::random_range(0..=lat.load(Ordering::SeqCst))
                    };
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    tk.lock().unwrap().push(h("ce-id"));
                    axum::http::StatusCode::NO_CONTENT
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            url,
            taken,
            refuse_subject,
            max_latency_ms,
            slow_one_in,
            slow_ms,
            open,
        }
    }

    fn taken(&self) -> Vec<String> {
        self.taken.lock().unwrap().clone()
    }

    /// Waits until every id in `ids` was taken; panics after `bound`.
    async fn wait_for(&self, ids: &BTreeSet<String>, bound: Duration, herald: &Herald) {
        let started = Instant::now();
        loop {
            let got: BTreeSet<String> = self.taken().into_iter().collect();
            if got.is_superset(ids) {
                return;
            }
            assert!(
                started.elapsed() < bound,
                "{} of {} ids taken\n--- herald stderr ---\n{}",
                ids.intersection(&got).count(),
                ids.len(),
                herald.stderr_text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A herald configuration with one webhook sink `out` (binary mode, the default concurrency) and
/// the widgets of every namespace.
fn config(sim: &herald_sim::Simulator, dir: &std::path::Path, url: &str, timeout: &str) -> String {
    format!(
        "cluster:\n  name: test\n  kubeconfig:\n    path: {kc}\nresources:\n  - group: example.com\n    kind: Widget\n\
         sinks:\n  - name: out\n    type: webhook\n    url: {url}\n    timeout: {timeout}\n\
         journal:\n  path: {journal}\n  flushInterval: 2ms\nadmin:\n  listen: 127.0.0.1:{port}\n",
        kc = sim.kubeconfig_path().display(),
        journal = dir.join("journal").display(),
        port = free_port(),
    )
}

fn widgets(ns: &str) -> String {
    format!("/apis/example.com/v1/namespaces/{ns}/widgets")
}

#[tokio::test]
async fn a_restart_after_kill_9_does_not_resend_events_taken_above_a_stuck_one() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let hook = Hook::start(0).await;
    *hook.refuse_subject.lock().unwrap() = Some("default/stuck".to_owned());
    let mut herald = Herald::start(dir.path(), &config(&sim, dir.path(), &hook.url, "2s"));
    herald
        .wait_for_log("Sink registered with the journal.")
        .await;

    // The first event is refused (503, retried with backoff, for ever); the 30 after it, of other
    // objects, are taken while the cursor stays behind it.
    let stuck = raw
        .post(&widgets("default"), &widget("stuck", json!({}), json!({})))
        .await
        .body;
    let mut others = BTreeSet::new();
    for i in 0..30 {
        let o = raw
            .post(
                &widgets("default"),
                &widget(&format!("w{i}"), json!({}), json!({})),
            )
            .await
            .body;
        others.insert(id_of(&o, "created"));
    }
    hook.wait_for(&others, Duration::from_secs(20), &herald)
        .await;
    // Every call that carried one of them has returned (the receiver answered) and, past a few
    // group commits (2 ms), what was acknowledged is on disk: only the refused event is pending.
    tokio::time::sleep(Duration::from_millis(500)).await;
    herald.kill().await;

    *hook.refuse_subject.lock().unwrap() = None;
    herald.restart();
    let stuck_id = id_of(&stuck, "created");
    hook.wait_for(
        &BTreeSet::from([stuck_id.clone()]),
        Duration::from_secs(20),
        &herald,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for id in hook.taken() {
        *counts.entry(id).or_default() += 1;
    }
    let resent: Vec<&String> = others.iter().filter(|id| counts[*id] > 1).collect();
    assert!(
        resent.is_empty(),
        "{} of the 30 events taken before the kill were sent again: {resent:?}",
        resent.len()
    );
    assert_eq!(
        counts[&stuck_id], 1,
        "the held event arrives once, after the restart"
    );
}

/// The scenario, as a measurement: 200 widgets in 3 namespaces, then updates and deletions
/// up to about 1,900 writes, against a webhook receiver with random latency that holds one request
/// in 200 past the sink's timeout; herald is killed with SIGKILL twice under that load and
/// restarted at once. Prints the distinct ids, the deliveries and the duplicates per kill -9.
/// `HERALD_BIN` names the herald binary to measure (default: this build's).
///
/// `cargo nextest run --run-ignored only -E 'test(crash_duplicates_per_kill_9)' --no-capture`
#[tokio::test]
#[ignore = "a measurement (about a minute), run on demand"]
async fn crash_duplicates_per_kill_9() {
    const OBJECTS: usize = 200;
    const WRITES: usize = 1_900;
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let namespaces = ["ns-a", "ns-b", "ns-c"];
    for ns in namespaces {
        let r = raw
            .post(
                "/api/v1/namespaces",
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let dir = tempfile::tempdir().unwrap();
    let hook = Hook::start(3_000).await;
    hook.max_latency_ms.store(20, Ordering::SeqCst);
    hook.slow_one_in.store(200, Ordering::SeqCst);
    let bin = std::env::var("HERALD_BIN").ok().filter(|b| !b.is_empty());
    let mut herald = Herald::start_bin(
        dir.path(),
        &config(&sim, dir.path(), &hook.url, "2s"),
        bin.as_deref(),
        &[],
    );
    herald
        .wait_for_log("Sink registered with the journal.")
        .await;

    let mut expected = BTreeSet::new();
    let mut alive: Vec<(String, String)> = Vec::new();
    let mut writes = 0usize;
    let kills_at = [WRITES / 3, 2 * WRITES / 3];
    let mut kills = 0;
    let mut next = 0usize;
    while writes < WRITES {
        if kills < kills_at.len() && writes >= kills_at[kills] {
            herald.kill().await;
            herald.restart();
            kills += 1;
        }
        let ns = namespaces[writes % namespaces.len()];
        let body = if alive.len() < OBJECTS {
            let name = format!("w{next}");
            next += 1;
            let mut body = widget(&name, json!({}), json!({"n": 0}));
            body["metadata"]["namespace"] = json!(ns);
            let reply = raw.post(&widgets(ns), &body).await;
            assert_eq!(reply.status, 201, "{}", reply.body);
            let o = reply.body;
            alive.push((ns.to_owned(), name));
            (o, "created")
        } else if writes.is_multiple_of(10) {
            let (ns, name) = alive.swap_remove(writes % alive.len());
            let r = raw.delete(&format!("{}/{name}", widgets(&ns))).await;
            (r.body, "deleted")
        } else {
            let (ns, name) = &alive[writes % alive.len()];
            let o = raw
                .patch(
                    &format!("{}/{name}", widgets(ns)),
                    "application/merge-patch+json",
                    &json!({"spec": {"n": writes}}),
                )
                .await
                .body;
            (o, "updated")
        };
        if body.1 != "deleted" {
            expected.insert(id_of(&body.0, body.1));
        }
        writes += 1;
        tokio::time::sleep(Duration::from_millis(4)).await;
    }
    // Deletions' ids carry the deletion's resourceVersion, which the DELETE answer may not; count
    // them from what arrived.
    hook.wait_for(&expected, Duration::from_secs(120), &herald)
        .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    hook.open.store(false, Ordering::SeqCst);
    let taken = hook.taken();
    let distinct: BTreeSet<&String> = taken.iter().collect();
    let duplicates = taken.len() - distinct.len();
    println!(
        "crash_duplicates: binary={} writes={writes} distinct={} deliveries={} duplicates={duplicates} per_kill_9={}",
        bin.as_deref().unwrap_or("this build"),
        distinct.len(),
        taken.len(),
        duplicates / kills_at.len(),
    );
    let _ = hook.slow_ms;
}

/// A request herald gave up on (its timeout expired) must not be answered, or processed, later on
/// a connection herald keeps using: herald closes that connection, and the retry comes on a new
/// one.
#[tokio::test]
async fn a_timed_out_request_closes_its_connection_and_the_retry_uses_a_new_one() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    /// What the raw receiver saw: a POST on connection N, or connection N closed by herald.
    #[derive(Debug, PartialEq)]
    enum Seen {
        Post(usize),
        Closed(usize),
    }
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (tx, mut seen) = tokio::sync::mpsc::unbounded_channel::<Seen>();
    // Answers the health check's OPTIONS; leaves the first POST unanswered; takes later ones.
    tokio::spawn(async move {
        let posts = Arc::new(AtomicU64::new(0));
        for conn_id in 0.. {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let (tx, posts) = (tx.clone(), posts.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let n = conn.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        let _ = tx.send(Seen::Closed(conn_id));
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                        let body: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        if buf.len() < end + 4 + body {
                            break;
                        }
                        buf.drain(..end + 4 + body);
                        if head.starts_with("post") {
                            let _ = tx.send(Seen::Post(conn_id));
                            if posts.fetch_add(1, Ordering::SeqCst) == 0 {
                                continue;
                            }
                        }
                        let _ = conn.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").await;
                    }
                }
            });
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let herald = Herald::start(dir.path(), &config(&sim, dir.path(), &url, "1s"));
    herald
        .wait_for_log("Sink registered with the journal.")
        .await;
    raw.post(&widgets("default"), &widget("w", json!({}), json!({})))
        .await;

    let next = async |seen: &mut tokio::sync::mpsc::UnboundedReceiver<Seen>| {
        tokio::time::timeout(Duration::from_secs(20), seen.recv())
            .await
            .ok()
            .flatten()
    };
    let first = loop {
        match next(&mut seen).await {
            Some(Seen::Post(conn)) => break conn,
            Some(Seen::Closed(_)) => {}
            None => panic!(
                "no request came\n--- herald stderr ---\n{}",
                herald.stderr_text()
            ),
        }
    };
    // Unanswered, herald's 1 s timeout expires: it must close that connection, and send the
    // retry on another one (the two may reach the receiver in either order).
    let mut events = Vec::new();
    let mut retry = None;
    let mut closed = false;
    while !(closed && retry.is_some()) {
        let Some(event) = next(&mut seen).await else {
            break;
        };
        match event {
            Seen::Post(conn) => retry = retry.or(Some(conn)),
            Seen::Closed(conn) => closed |= conn == first,
        }
        events.push(event);
    }
    assert!(
        closed,
        "the timed-out request's connection {first} stayed open: {events:?}"
    );
    assert!(
        retry.is_some_and(|conn| conn != first),
        "the retry did not come on a new connection: {events:?}"
    );
}
