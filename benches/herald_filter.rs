//! What a resource `when` (CEL) costs: herald end to end into the file sink with the durable
//! journal, the same change stream with no filter and with a realistic expression that reads
//! `object` and `oldObject` and lets every change through (so both runs journal and deliver the
//! same events and only the evaluation differs). The two alternate within each round (the order
//! flips every round), and the figures are the min / median / max of each plus the ratio of the
//! medians. Printed, not asserted.
//!
//! `HERALD_BENCH_OBJECTS` (default 2,000), `HERALD_BENCH_CHANGES` (default 20,000 per run) and
//! `HERALD_BENCH_ROUNDS` (default 5) size it.

// A benchmark binary: a failed setup step should stop it loudly, so expect() is the right tool.
#![allow(clippy::expect_used)]

#[path = "../sim/benches/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use herald_sim::{ResourceRef, SimConfig, Simulator};
use serde_json::json;

/// The filter measured: what a user paging on a transition writes, against the bench's objects.
const WHEN: &str = "object.metadata.labels.tier == 'gold' && object.spec.replicas > 0 && \
                    (oldObject == null || object.spec.churn != oldObject.spec.churn)";

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

/// One herald from an empty journal: initial sync, then `changes` changes; the stream's events/s
/// and CPU-seconds per 1,000 events (the whole process, the simulator's writes included).
async fn one_run(
    sim: &Simulator,
    widgets: &ResourceRef,
    names: &[String],
    changes: u64,
    when: Option<&str>,
) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let filter = when.map_or(String::new(), |w| format!("    when: \"{w}\"\n"));
    let config = format!(
        "cluster:\n  name: bench\n  kubeconfig:\n    path: {kc}\nresources:\n  - group: example.com\n    kind: Widget\n{filter}sinks:\n  - name: out\n    type: file\n    path: {out}\njournal:\n  path: {journal}\n",
        kc = sim.kubeconfig_path().display(),
        out = dir.path().join("events.jsonl").display(),
        journal = dir.path().join("journal").display(),
    );
    let cfg = herald::config::from_str(&config).expect("config");
    let objects = names.len() as u64;
    let running = herald::app::start(&cfg, None).await.expect("herald starts");
    wait_delivered(&running, objects).await;
    let (t, cpu) = (Instant::now(), support::cpu_seconds());
    sim.churn(widgets, names, 0, changes).await.expect("churn");
    wait_delivered(&running, objects + changes).await;
    let rate = changes as f64 / t.elapsed().as_secs_f64();
    let cpu_per_k = (support::cpu_seconds() - cpu) / (changes as f64 / 1000.0);
    running
        .stop(Duration::from_secs(30))
        .await
        .expect("clean stop");
    (rate, cpu_per_k)
}

/// CPU-seconds of one evaluation of [`WHEN`] on a bench object and its previous state, alone.
fn evaluation_cost() -> f64 {
    use herald::event::{Op, filter::Expression, filter::Vars};
    let e = Expression::compile(WHEN).expect("compiles");
    let object = |churn: i64| {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": "widget-00001", "namespace": "default", "uid": "u", "resourceVersion": "7",
                            "generation": 1, "labels": {"app": "bench", "tier": "gold"}},
               "spec": {"replicas": 3, "image": "registry.example/app:1.2.3", "churn": churn,
                        "env": [{"name": "MODE", "value": "production"}, {"name": "REGION", "value": "eu-west-1"}]},
               "status": {"phase": "Ready", "conditions": [{"type": "Ready", "status": "True"}]}})
    };
    let (new, old) = (object(2), object(1));
    let n = 200_000;
    let cpu = support::cpu_seconds();
    let mut passed = 0u32;
    for _ in 0..n {
        let vars = Vars {
            object: Some(&new),
            old_object: Some(&old),
            op: Op::Updated,
            resync: false,
            namespace: "default",
            name: "widget-00001",
        };
        passed += u32::from(e.evaluate(std::hint::black_box(&vars)).expect("evaluates"));
    }
    assert_eq!(passed, n);
    (support::cpu_seconds() - cpu) / f64::from(n)
}

/// min, median, max.
fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

async fn run() {
    herald::cli::install_crypto_provider();
    let objects = env("HERALD_BENCH_OBJECTS", 2_000);
    let changes = env("HERALD_BENCH_CHANGES", 20_000);
    let rounds = env("HERALD_BENCH_ROUNDS", 5).max(1);
    let history = usize::try_from(objects + changes * 2 * rounds + 100).expect("fits");
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
                 "env": [{"name": "MODE", "value": "production"}, {"name": "REGION", "value": "eu-west-1"}]},
        "status": {"phase": "Ready", "conditions": [{"type": "Ready", "status": "True"}]}
    })))
    .expect("preload");

    let (mut plain, mut filtered) = (Vec::new(), Vec::new());
    let (mut plain_cpu, mut filtered_cpu) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alternate which goes first, so neither always meets a warmer (or fuller) simulator.
        let order: [Option<&str>; 2] = if round % 2 == 0 {
            [None, Some(WHEN)]
        } else {
            [Some(WHEN), None]
        };
        for when in order {
            let (rate, cpu) = one_run(&sim, &widgets, &names, changes, when).await;
            match when {
                None => {
                    plain.push(rate);
                    plain_cpu.push(cpu);
                }
                Some(_) => {
                    filtered.push(rate);
                    filtered_cpu.push(cpu);
                }
            }
        }
    }
    let (p, f) = (spread(plain), spread(filtered));
    let (pc, fc) = (spread(plain_cpu), spread(filtered_cpu));
    println!(
        "herald → file sink, durable journal: change stream with and without a resource `when` \
         ({objects} objects, {changes} changes per run, {rounds} interleaved rounds)"
    );
    println!("when: {WHEN}");
    println!(
        "{:<28} {:>12} {:>12} {:>12}",
        "events/s", "min", "median", "max"
    );
    println!(
        "{:<28} {:>12.0} {:>12.0} {:>12.0}",
        "no filter", p.0, p.1, p.2
    );
    println!(
        "{:<28} {:>12.0} {:>12.0} {:>12.0}",
        "with `when`", f.0, f.1, f.2
    );
    println!(
        "{:<28} {:>12.4} {:>12.4} {:>12.4}",
        "cpu-s/1k events, no filter", pc.0, pc.1, pc.2
    );
    println!(
        "{:<28} {:>12.4} {:>12.4} {:>12.4}",
        "cpu-s/1k events, `when`", fc.0, fc.1, fc.2
    );
    println!(
        "median events/s with `when` / without: {:.3} (overhead {:.1} %); median CPU per event: {:+.1} %",
        f.1 / p.1,
        (1.0 - f.1 / p.1) * 100.0,
        (fc.1 / pc.1 - 1.0) * 100.0
    );
    let each = evaluation_cost();
    println!(
        "one evaluation alone: {:.2} µs CPU ({:.1} % of herald's median {:.1} µs CPU per event without a filter)",
        each * 1e6,
        each / (pc.1 / 1000.0) * 100.0,
        pc.1 * 1000.0
    );
    sim.shutdown().await;
}
