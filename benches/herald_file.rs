//! herald end to end into the file sink with the durable journal: events/s for the initial sync of
//! 10,000 objects and for a stream of changes, the memory herald adds while watching 10,000 objects,
//! and in the same run the ceiling — the simulator serving the same changes to a bare line reader.
//! CPU-seconds per 1,000 events cover the whole process (simulator included). Printed, not asserted.
//!
//! `HERALD_BENCH_OBJECTS` (default 10,000) and `HERALD_BENCH_CHANGES` (default 100,000) size it.

// A benchmark binary: a failed setup step should stop it loudly, so expect() is the right tool.
#![allow(clippy::expect_used)]

#[path = "../sim/benches/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use herald_sim::{ResourceRef, SimConfig, Simulator};
use serde_json::json;
use support::{cpu_seconds, raw_reader};

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn wait_delivered(running: &herald::app::Running, n: u64) {
    while running.delivered() < n {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

async fn run() {
    herald::cli::install_crypto_provider();
    let objects = env("HERALD_BENCH_OBJECTS", 10_000);
    let changes = env("HERALD_BENCH_CHANGES", 100_000);
    let history = usize::try_from(objects + changes * 2 + 100).expect("fits");
    let sim = Simulator::start(SimConfig::default().history_limit(history))
        .await
        .expect("simulator");
    let crds = ResourceRef::cluster("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    sim.create(&crds, json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "widgets", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .expect("CRD");
    let widgets = ResourceRef::namespaced("example.com", "v1", "widgets", "default");
    let names: Vec<String> = (0..objects).map(|i| format!("widget-{i:05}")).collect();
    sim.create_many(&widgets, names.iter().map(|n| json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": n, "labels": {"app": "bench", "tier": "gold"}},
        "spec": {"replicas": 3, "image": "registry.example/app:1.2.3", "churn": -1,
                 "env": [{"name": "MODE", "value": "production"}, {"name": "REGION", "value": "eu-west-1"}]}
    })))
    .expect("preload");

    let dir = tempfile::tempdir().expect("tempdir");
    let config = format!(
        "cluster:\n  name: bench\n  kubeconfig:\n    path: {kc}\nresources:\n  - group: example.com\n    kind: Widget\nsinks:\n  - name: out\n    type: file\n    path: {out}\njournal:\n  path: {journal}\n",
        kc = sim.kubeconfig_path().display(),
        out = dir.path().join("events.jsonl").display(),
        journal = dir.path().join("journal").display(),
    );
    let cfg = herald::config::from_str(&config).expect("config");
    let rss_before = rss_mib();
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let running = herald::app::start(&cfg, None).await.expect("herald starts");
    wait_delivered(&running, objects).await;
    let sync_wall = t0.elapsed();
    let sync_cpu = cpu_seconds() - cpu0;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_watching = rss_mib();

    let from = sim.resource_version();
    let cpu1 = cpu_seconds();
    let t1 = Instant::now();
    sim.churn(&widgets, &names, 0, changes)
        .await
        .expect("churn");
    let written = t1.elapsed();
    wait_delivered(&running, objects + changes).await;
    let stream_wall = t1.elapsed();
    let stream_cpu = cpu_seconds() - cpu1;
    let journal_bytes = running.journal().size_on_disk().unwrap_or(0);
    running
        .stop(Duration::from_secs(30))
        .await
        .expect("clean stop");

    // The ceiling: the same changes served by the simulator to a bare line reader.
    let url = format!(
        "{}/apis/example.com/v1/namespaces/default/widgets?watch=1&resourceVersion={from}",
        sim.url()
    );
    let cpu2 = cpu_seconds();
    let t2 = Instant::now();
    let seen = raw_reader(url, changes).await;
    let raw_wall = t2.elapsed();
    let raw_cpu = cpu_seconds() - cpu2;
    assert_eq!(seen, changes);

    let rate = |n: u64, d: Duration| n as f64 / d.as_secs_f64();
    let per_k = |cpu: f64, n: u64| cpu / (n as f64 / 1000.0);
    println!(
        "herald → file sink, durable journal ({objects} objects, {changes} changes, 2-core machine)"
    );
    println!(
        "{:<44} {:>12} {:>16}",
        "phase", "events/s", "cpu-s/1k events"
    );
    println!(
        "{:<44} {:>12.0} {:>16.4}",
        "initial sync (list → created, resync)",
        rate(objects, sync_wall),
        per_k(sync_cpu, objects)
    );
    println!(
        "{:<44} {:>12.0} {:>16.4}",
        "change stream (watch → journal → file)",
        rate(changes, stream_wall),
        per_k(stream_cpu, changes)
    );
    println!(
        "{:<44} {:>12.0} {:>16.4}",
        "ceiling: simulator → bare line reader",
        rate(changes, raw_wall),
        per_k(raw_cpu, changes)
    );
    println!(
        "{:<44} {:>12.0}",
        "(load generator wrote changes at)",
        rate(changes, written)
    );
    println!(
        "memory: RSS {rss_before:.1} MiB before herald (simulator with {objects} objects), {rss_watching:.1} MiB while watching: herald adds {:.1} MiB",
        rss_watching - rss_before
    );
    println!(
        "journal on disk after the run: {:.1} MiB",
        journal_bytes as f64 / 1024.0 / 1024.0
    );
    sim.shutdown().await;
}
