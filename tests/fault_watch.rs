//! Faults of the watch stream: a server that lists fine but answers every watch with a line that does
//! not parse gets exponentially spaced relists, not a hot loop, and loses nothing once it heals; a
//! watch that goes silent (no events, no bookmarks) is detected, dropped and resumed.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::json;

use herald_sim::SimConfig;

use crate::support::{
    Herald, Raw, WIDGETS_RESOURCE, admin_addr, herald_config, id_of, sim, sim_with, widget,
    widgets_crd,
};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";
const MERGE: &str = "application/merge-patch+json";

/// herald's count of relists, each one LIST here (one page), from its metrics.
async fn relists(addr: &str) -> u64 {
    counter(addr, "herald_watch_relists_total").await
}

/// A per-resource counter of herald's, from its metrics.
async fn counter(addr: &str, name: &str) -> u64 {
    let metrics = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("metrics reachable")
        .text()
        .await
        .expect("metrics body");
    metrics
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{resource=\"Widget.example.com\"}}")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{metrics}"))
}

#[tokio::test]
async fn a_garbled_watch_gets_spaced_relists_and_loses_nothing() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(&sim, dir.path(), WIDGETS_RESOURCE);
    let addr = admin_addr(&config);
    let herald = Herald::start(dir.path(), &config);
    let w0 = raw
        .post(WIDGETS, &widget("w0", json!({}), json!({"v": 1})))
        .await
        .body;
    herald.wait_for(1).await;

    // Every watch from now on is one unparseable line; the open one ends, so herald re-watches.
    sim.garble_watches();
    sim.drop_watches();
    let before = relists(&addr).await;
    let started = Instant::now();
    let w1 = raw
        .post(WIDGETS, &widget("w1", json!({}), json!({})))
        .await
        .body;
    let w0_2 = raw
        .patch(&format!("{WIDGETS}/w0"), MERGE, &json!({"spec": {"v": 2}}))
        .await
        .body;
    tokio::time::sleep(Duration::from_secs(4).saturating_sub(started.elapsed())).await;
    let during = relists(&addr).await - before;
    // Backing off from 800 ms with equal jitter, the relists come at least 1.2 s and 2.8 s in, the
    // third not before 6 s; a relist that resets the backoff made dozens in the same 4 s.
    assert!(
        (1..=3).contains(&during),
        "{during} relists in 4 s against a server that breaks every watch\n--- herald stderr ---\n{}",
        std::fs::read_to_string(&herald.stderr).unwrap_or_default()
    );

    sim.mend_watches();
    let w2 = raw
        .post(WIDGETS, &widget("w2", json!({}), json!({})))
        .await
        .body;
    let events = herald.wait_for(4).await;
    let got: BTreeSet<String> = events
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    let want: BTreeSet<String> = [
        id_of(&w0, "created"),
        id_of(&w1, "created"),
        id_of(&w0_2, "updated"),
        id_of(&w2, "created"),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want);
    herald.settle(4).await;
}

#[tokio::test]
async fn a_stalled_watch_is_detected_dropped_and_resumed_without_loss() {
    // Bookmarks every 500 ms keep a healthy idle watch talking; herald takes 3 s of silence for a
    // stall.
    let sim = sim_with(SimConfig::default().bookmark_interval(Duration::from_millis(500))).await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(&sim, dir.path(), WIDGETS_RESOURCE);
    let addr = admin_addr(&config);
    let herald = Herald::start_with(dir.path(), &config, &["--watch-stall-timeout", "3s"]);
    let w0 = raw
        .post(WIDGETS, &widget("w0", json!({}), json!({})))
        .await
        .body;
    herald.wait_for(1).await;
    let restarts = async || counter(&addr, "herald_watch_restarts_total").await;

    // Idle but healthy: the bookmarks count as life, so longer than the stall timeout passes
    // without a restart.
    let before = restarts().await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        restarts().await,
        before,
        "an idle watch with bookmarks is not stalled"
    );

    // Silent: nothing is sent, not even bookmarks; the change is held by the server.
    sim.stall_watches();
    let w1 = raw
        .post(WIDGETS, &widget("w1", json!({}), json!({})))
        .await
        .body;
    let started = Instant::now();
    while restarts().await == before {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the stalled watch was never restarted\n--- herald stderr ---\n{}",
            std::fs::read_to_string(&herald.stderr).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        herald.delivered().len(),
        1,
        "nothing came through the stall"
    );

    // Once the server talks again, the watch herald holds now delivers what was held, from the
    // resourceVersion it had recorded: nothing lost, nothing twice.
    sim.resume_watches();
    let w2 = raw
        .post(WIDGETS, &widget("w2", json!({}), json!({})))
        .await
        .body;
    let events = herald.wait_for(3).await;
    let ids: Vec<&str> = events.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            id_of(&w0, "created"),
            id_of(&w1, "created"),
            id_of(&w2, "created")
        ]
    );
    assert!(
        events[1..].iter().all(|e| e["resync"] == false),
        "resumed from its resourceVersion, not relisted"
    );
    // The connections herald gave up on were closed, not left open beside the new one.
    let started = Instant::now();
    while sim.open_watches() != 1 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{} watches open on the server",
            sim.open_watches()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    herald.settle(3).await;
}
