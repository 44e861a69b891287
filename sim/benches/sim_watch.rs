//! How fast the simulator serves watch events: to one watcher and to ten, read by a raw line reader
//! (the ceiling) and by kube-rs, with CPU-seconds per 1,000 events. Printed, never asserted.
//!
//! The backlog is written in-process first (the bulk API, no HTTP), then each scenario watches it from
//! the revision before it, so the figure is the serving path alone: history → JSON lines → HTTP → reader.
//! `HERALD_BENCH_EVENTS` sets the backlog size (default 200,000).

// A benchmark binary: a failed setup step should stop it loudly, so expect() is the right tool.
#![allow(clippy::expect_used)]

#[path = "support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use herald_sim::{ResourceRef, SimConfig, Simulator};
use kube::api::{Api, DynamicObject, WatchEvent, WatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use support::{cpu_seconds, raw_reader};

const OBJECTS: usize = 1000;

struct Row {
    reader: &'static str,
    watchers: usize,
    events: u64,
    wall: Duration,
    cpu: f64,
}

async fn measure<F, Fut>(reader: &'static str, watchers: usize, each: u64, f: F) -> Row
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = u64> + Send + 'static,
{
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..watchers).map(|_| tokio::spawn(f())).collect();
    let mut events = 0;
    for t in tasks {
        events += t.await.expect("reader task");
    }
    let row = Row {
        reader,
        watchers,
        events,
        wall: t0.elapsed(),
        cpu: cpu_seconds() - cpu0,
    };
    assert_eq!(
        events,
        each * watchers as u64,
        "every watcher saw the whole backlog"
    );
    row
}

async fn kube_reader(api: Api<DynamicObject>, from: String, want: u64) -> u64 {
    let mut stream = api
        .watch(&WatchParams::default().disable_bookmarks(), &from)
        .await
        .expect("watch starts")
        .boxed();
    let mut seen = 0;
    while let Some(ev) = stream.try_next().await.expect("watch event") {
        if matches!(ev, WatchEvent::Modified(_)) {
            seen += 1;
        }
        if seen >= want {
            break;
        }
    }
    seen
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

async fn run() {
    let events: u64 = std::env::var("HERALD_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let history = usize::try_from(events).expect("fits") + OBJECTS + 100;
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
    let names: Vec<String> = (0..OBJECTS).map(|i| format!("widget-{i:05}")).collect();
    sim.create_many(
        &widgets,
        names.iter().map(|n| {
            json!({
                "apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": n, "labels": {"app": "bench", "tier": "gold"}},
                "spec": {"replicas": 3, "image": "registry.example/app:1.2.3", "churn": -1}
            })
        }),
    )
    .expect("preload");
    let from = sim.resource_version();
    let cpu0 = cpu_seconds();
    let churned = sim.churn(&widgets, &names, 0, events).await.expect("churn");
    let writer_cpu = cpu_seconds() - cpu0;
    eprintln!("backlog: {events} changes over {OBJECTS} objects written in-process");

    let url = format!(
        "{}/apis/example.com/v1/namespaces/default/widgets?watch=1&resourceVersion={from}",
        sim.url()
    );
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let api: Api<DynamicObject> =
        Api::namespaced_with(sim.client().expect("client"), "default", &ar);
    let mut rows = Vec::new();
    for watchers in [1, 10] {
        let u = url.clone();
        rows.push(
            measure("raw line reader", watchers, events, move || {
                raw_reader(u.clone(), events)
            })
            .await,
        );
        let (a, f) = (api.clone(), from.to_string());
        rows.push(
            measure("kube-rs Api::watch", watchers, events, move || {
                kube_reader(a.clone(), f.clone(), events)
            })
            .await,
        );
    }

    println!(
        "herald sim watch throughput ({events} events per watcher, {OBJECTS} objects, 2-core machine)"
    );
    println!(
        "{:<22} {:>8} {:>14} {:>16}",
        "reader", "watchers", "events/s", "cpu-s/1k events"
    );
    for r in &rows {
        let secs = r.wall.as_secs_f64();
        println!(
            "{:<22} {:>8} {:>14.0} {:>16.4}",
            r.reader,
            r.watchers,
            r.events as f64 / secs,
            r.cpu / (r.events as f64 / 1000.0)
        );
    }
    println!(
        "{:<22} {:>8} {:>14.0} {:>16.4}   (in-process bulk writer, for reference)",
        "writer (churn)",
        "-",
        churned.changes as f64 / churned.elapsed.as_secs_f64(),
        writer_cpu / (churned.changes as f64 / 1000.0)
    );
    let raw1 = &rows[0];
    let target = 50_000.0;
    let got = raw1.events as f64 / raw1.wall.as_secs_f64();
    println!(
        "target: >= {target:.0} events/s to one raw reader: {}",
        if got >= target { "met" } else { "NOT met" }
    );
    sim.shutdown().await;
}
