//! herald into a webhook: events/s to a local receiver that answers at once, and the p99
//! change-to-delivery latency at 1,000 changes/s; in the same run the ceiling — a bare HTTP client
//! posting the same number of requests with the same concurrency — and the same throughput phase
//! with a request template (a JSON body from the object and a templated header) beside the
//! plain CloudEvent. Printed, not asserted.
//!
//! `HERALD_BENCH_CHANGES` (default 30,000) sizes the throughput phase.

// A benchmark binary: a failed setup step should stop it loudly, so expect() is the right tool.
#![allow(clippy::expect_used)]

#[path = "../sim/benches/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use herald_sim::{ResourceRef, SimConfig, Simulator};
use serde_json::json;
use support::cpu_seconds;

const OBJECTS: u64 = 1000;
const CONCURRENCY: usize = 8;

async fn receiver() -> (String, Arc<AtomicU64>) {
    let count = Arc::new(AtomicU64::new(0));
    let c = count.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let c = c.clone();
            async move {
                c.fetch_add(1, Ordering::Relaxed);
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    (url, count)
}

/// The template of the templated phase: what a chat or alerting receiver gets, built from the
/// object (docs/configuration.md, "Request templates").
const TEMPLATE: &str = "    template:\n      headers: {X-Object: \"{{ subject }}\"}\n      body: '{\"text\": {{ (kind ~ \" \" ~ subject ~ \" \" ~ op) | tojson }}, \"replicas\": {{ object | dig(\"spec\", \"replicas\") | tojson }}, \"image\": {{ object.spec.image | tojson }}, \"at\": {{ time | unix_ms }}}'\n";

fn config(
    sim: &Simulator,
    dir: &std::path::Path,
    url: &str,
    template: &str,
) -> herald::config::Config {
    herald::config::from_str(&format!(
        "cluster:\n  kubeconfig:\n    path: {kc}\nresources:\n  - group: example.com\n    kind: Widget\n    initialState: skip\nsinks:\n  - name: hook\n    type: webhook\n    url: {url}\n    concurrency: {CONCURRENCY}\n{template}journal:\n  path: {journal}\nadmin:\n  listen: 127.0.0.1:0\n",
        kc = sim.kubeconfig_path().display(),
        journal = dir.join("journal").display(),
    ))
    .expect("config")
}

async fn wait_synced(running: &herald::app::Running) {
    while !running.synced() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
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
    let changes: u64 = std::env::var("HERALD_BENCH_CHANGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30_000);
    let sim = Simulator::start(
        SimConfig::default().history_limit(usize::try_from(changes * 3 + 50_000).expect("fits")),
    )
    .await
    .expect("simulator");
    sim.load_yaml(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {plural: widgets, kind: Widget}\n  versions:\n  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}\n",
    )
    .expect("CRD");
    let widgets = ResourceRef::namespaced("example.com", "v1", "widgets", "default");
    let names: Vec<String> = (0..OBJECTS).map(|i| format!("widget-{i:05}")).collect();
    sim.create_many(
        &widgets,
        names.iter().map(|n| {
            json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": n},
        "spec": {"replicas": 3, "image": "registry.example/app:1.2.3", "churn": -1}})
        }),
    )
    .expect("preload");
    let (url, received) = receiver().await;

    // Throughput: changes as fast as the load generator writes them; plain CloudEvents, then the
    // same with a request template.
    let throughput = |template: &'static str| {
        let (sim, widgets, names, url, received) = (&sim, &widgets, &names, &url, &received);
        async move {
            let dir = tempfile::tempdir().expect("tempdir");
            let running = herald::app::start(&config(sim, dir.path(), url, template), None)
                .await
                .expect("herald");
            wait_synced(&running).await;
            let base = received.load(Ordering::Relaxed);
            let cpu0 = cpu_seconds();
            let t0 = Instant::now();
            sim.churn(widgets, names, 0, changes).await.expect("churn");
            while received.load(Ordering::Relaxed) - base < changes {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let wall = t0.elapsed();
            let cpu = cpu_seconds() - cpu0;
            running.stop(Duration::from_secs(10)).await.expect("stop");
            (wall, cpu)
        }
    };
    let (wall, cpu) = throughput("").await;
    let (templated_wall, templated_cpu) = throughput(TEMPLATE).await;

    // Latency at a steady 1,000 changes/s for 10 s.
    let dir2 = tempfile::tempdir().expect("tempdir");
    let running = herald::app::start(&config(&sim, dir2.path(), &url, ""), None)
        .await
        .expect("herald");
    wait_synced(&running).await;
    let paced = 10_000;
    let base = received.load(Ordering::Relaxed);
    sim.churn(&widgets, &names, 1_000, paced)
        .await
        .expect("paced churn");
    while received.load(Ordering::Relaxed) - base < paced {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let stats = running.stats()[0].1.clone();
    let p50 = stats.latency.quantile(0.50).unwrap_or(f64::NAN);
    let p99 = stats.latency.quantile(0.99).unwrap_or(f64::NAN);
    running.stop(Duration::from_secs(10)).await.expect("stop");

    // The ceiling: a bare client posting as many small JSON bodies with the same concurrency.
    let client = reqwest::Client::new();
    let per_task = changes / CONCURRENCY as u64;
    let cpu1 = cpu_seconds();
    let t1 = Instant::now();
    let tasks: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                for i in 0..per_task {
                    let body =
                        json!({"op": "updated", "object": {"spec": {"churn": i}}}).to_string();
                    client
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await
                        .expect("post");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    let bare_wall = t1.elapsed();
    let bare_cpu = cpu_seconds() - cpu1;
    let sent = per_task * CONCURRENCY as u64;

    let rate = |n: u64, d: Duration| n as f64 / d.as_secs_f64();
    println!(
        "herald → webhook (binary mode, concurrency {CONCURRENCY}, receiver answers 204 at once, 2-core machine)"
    );
    println!(
        "{:<48} {:>12} {:>16}",
        "phase", "events/s", "cpu-s/1k events"
    );
    println!(
        "{:<48} {:>12.0} {:>16.4}",
        "herald: watch → journal → webhook",
        rate(changes, wall),
        cpu / (changes as f64 / 1000.0)
    );
    println!(
        "{:<48} {:>12.0} {:>16.4}",
        "herald, request template (body, header)",
        rate(changes, templated_wall),
        templated_cpu / (changes as f64 / 1000.0)
    );
    println!(
        "{:<48} {:>12.0} {:>16.4}",
        "ceiling: bare client, same concurrency",
        rate(sent, bare_wall),
        bare_cpu / (sent as f64 / 1000.0)
    );
    println!(
        "change-to-delivery latency at 1,000 changes/s: p50 <= {p50} s, p99 <= {p99} s (histogram bucket bounds)"
    );
    sim.shutdown().await;
}
