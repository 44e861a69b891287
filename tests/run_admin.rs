//! The admin endpoint of a running herald: liveness, readiness, Prometheus metrics and status.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{
    Herald, Raw, WIDGETS_RESOURCE, admin_addr, admin_get_retrying, herald_config, sim, widget,
    widgets_crd,
};

/// The admin endpoint's answer (retried while herald starts).
async fn get(addr: &str, path: &str) -> (u16, String) {
    admin_get_retrying(addr, path, 10).await
}

#[tokio::test]
async fn health_readiness_metrics_and_status() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(&sim, dir.path(), WIDGETS_RESOURCE);
    let addr = admin_addr(&config);
    let herald = Herald::start(dir.path(), &config);

    assert_eq!(
        get(&addr, "/healthz").await.0,
        200,
        "herald's loops are fine even without the CRD"
    );
    let (code, body) = get(&addr, "/readyz").await;
    assert_eq!(code, 503, "not ready while the CRD is missing");
    assert!(
        body.contains("widgets.example.com") || body.contains("Widget.example.com"),
        "{body}"
    );

    raw.install_crd(&widgets_crd()).await;
    for i in 0..3 {
        raw.post(
            "/apis/example.com/v1/namespaces/default/widgets",
            &widget(&format!("w{i}"), json!({}), json!({})),
        )
        .await;
    }
    herald.wait_for(3).await;
    let started = Instant::now();
    while get(&addr, "/readyz").await.0 != 200 {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "ready once synced"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let (code, metrics) = get(&addr, "/metrics").await;
    assert_eq!(code, 200);
    let sample = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing in:\n{metrics}"))
    };
    assert_eq!(sample("herald_sink_sent_events_total{sink=\"out\"}"), 3.0);
    assert_eq!(
        sample("herald_observed_changes_total{resource=\"Widget.example.com\"}"),
        3.0
    );
    assert_eq!(sample("herald_journal_lag_events{sink=\"out\"}"), 0.0);
    assert_eq!(
        sample("herald_change_to_delivery_seconds_count{sink=\"out\"}"),
        3.0
    );
    assert!(metrics.contains("# TYPE herald_change_to_delivery_seconds histogram"));

    let (code, status) = get(&addr, "/status").await;
    assert_eq!(code, 200);
    let status: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["sinks"][0]["sink"], "out");
    assert_eq!(status["sinks"][0]["lag"], 0);
    assert_eq!(status["sinks"][0]["paused"], false);
    assert_eq!(status["resources"][0]["synced"], true);
}

#[tokio::test]
async fn herald_status_reads_a_running_herald_or_its_journal() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(&sim, dir.path(), WIDGETS_RESOURCE);
    let mut herald = Herald::start(dir.path(), &config);
    raw.post(
        "/apis/example.com/v1/namespaces/default/widgets",
        &widget("a", json!({}), json!({})),
    )
    .await;
    herald.wait_for(1).await;
    let config_path = herald.config.clone();
    let status = |json: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_herald"));
        cmd.args(["status", "-c"]).arg(&config_path);
        if json {
            cmd.arg("--json");
        }
        cmd
    };
    let mut running = status(true);
    let out = tokio::task::spawn_blocking(move || running.output())
        .await
        .unwrap()
        .unwrap();
    let live: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        live["source"]
            .as_str()
            .unwrap()
            .starts_with("admin endpoint"),
        "{live}"
    );
    assert_eq!(live["sinks"][0]["delivered"], 1);

    assert_eq!(herald.terminate().await, Some(0));
    let mut stopped = status(true);
    let out = tokio::task::spawn_blocking(move || stopped.output())
        .await
        .unwrap()
        .unwrap();
    let offline: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        offline["source"].as_str().unwrap().contains("not running"),
        "{offline}"
    );
    assert_eq!(offline["sinks"][0]["sink"], "out");
    assert_eq!(offline["sinks"][0]["lag"], 0);
    let mut human = status(false);
    let out = tokio::task::spawn_blocking(move || human.output())
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("SINK"));
}

/// A burst of changes reaches the journal in batches, not one append per change: the fixed cost of
/// an append is what limited throughput (docs/adr/0003-throughput.md).
#[tokio::test]
async fn a_burst_of_changes_is_journaled_in_batches() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let widgets = herald_sim::ResourceRef::namespaced("example.com", "v1", "widgets", "default");
    let names: Vec<String> = (0..50).map(|i| format!("w{i:02}")).collect();
    sim.create_many(
        &widgets,
        names.iter().map(|n| widget(n, json!({}), json!({"n": 0}))),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(&sim, dir.path(), WIDGETS_RESOURCE);
    let addr = admin_addr(&config);
    let herald = Herald::start(dir.path(), &config);
    herald.wait_for(50).await;
    let appends = |metrics: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("herald_journal_appends_total "))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("herald_journal_appends_total missing in:\n{metrics}"))
    };
    let before = appends(&get(&addr, "/metrics").await.1);

    const BURST: u64 = 1_000;
    sim.churn(&widgets, &names, 0, BURST).await.unwrap();
    herald.wait_for(50 + 1_000).await;
    let events = herald.settle(50 + 1_000).await;
    let updated = events
        .iter()
        .filter(|e| e["type"] == "dev.herald.resource.updated")
        .count();
    assert_eq!(updated, 1_000, "every change delivered once");
    let used = appends(&get(&addr, "/metrics").await.1) - before;
    assert!(
        (1..=BURST / 2).contains(&used),
        "{BURST} changes took {used} appends; batches should hold several events each"
    );
}
