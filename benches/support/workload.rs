//! The broker benchmarks' shared workload: a simulator preloaded with objects through its bulk API,
//! herald started in-process on it, and the timed change stream (watch → journal → sink) whose
//! phases are read from herald's own counters.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use herald_sim::{ResourceRef, SimConfig, Simulator};
use serde_json::json;

use crate::support::cpu_seconds;

/// A positive integer from the environment, or `default`.
pub fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|v| *v > 0)
        .unwrap_or(default)
}

/// The simulator, the resource the changes go to and the preloaded objects' names.
pub struct Workload {
    pub sim: Simulator,
    pub widgets: ResourceRef,
    pub names: Vec<String>,
}

/// Starts the simulator and preloads `objects` widgets with `create_many` (no HTTP, no events
/// herald would see: herald starts with `initialState: skip`).
pub async fn preload(objects: u64, changes: u64) -> Workload {
    herald::cli::install_crypto_provider();
    let history = usize::try_from(objects + changes * 2 + 50_000).expect("fits");
    let sim = Simulator::start(
        SimConfig::default()
            .listen(([127, 0, 0, 1], 0).into())
            .history_limit(history),
    )
    .await
    .expect("simulator");
    sim.load_yaml(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {plural: widgets, kind: Widget}\n  versions:\n  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}\n",
    )
    .expect("CRD");
    let widgets = ResourceRef::namespaced("example.com", "v1", "widgets", "default");
    let names: Vec<String> = (0..objects).map(|i| format!("widget-{i:05}")).collect();
    sim.create_many(
        &widgets,
        names.iter().map(|n| {
            json!({
                "apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": n, "labels": {"app": "bench", "tier": "gold"}},
                "spec": {"replicas": 3, "image": "registry.example/app:1.2.3", "churn": -1,
                         "env": [{"name": "MODE", "value": "production"},
                                 {"name": "REGION", "value": "eu-west-1"}]}
            })
        }),
    )
    .expect("preload");
    Workload {
        sim,
        widgets,
        names,
    }
}

/// The YAML head of a herald configuration on the simulator: the cluster, the widgets (existing
/// objects skipped), the journal in `dir` (delivered events kept, for [`backlog`]) and an admin
/// endpoint on a free loopback port. The caller appends `sinks:`.
pub fn config_head(sim: &Simulator, dir: &std::path::Path) -> String {
    format!(
        "cluster:\n  name: bench\n  kubeconfig:\n    path: {kc}\nresources:\n  - group: example.com\n    kind: Widget\n    initialState: skip\njournal:\n  path: {journal}\n  retain: 1h\nadmin:\n  listen: 127.0.0.1:0\n",
        kc = sim.kubeconfig_path().display(),
        journal = dir.join("journal").display(),
    )
}

/// Waits until every watcher listed and watches, plus a moment for the sinks to settle.
pub async fn wait_synced(running: &herald::app::Running) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !running.synced() {
        assert!(Instant::now() < deadline, "herald did not sync within 60 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// CPU-seconds of this process's threads so far, summed by thread name (digits dropped, so the
/// tokio workers or librdkafka's broker threads count as one group).
pub fn thread_cpu() -> BTreeMap<String, f64> {
    let mut by_name = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return by_name;
    };
    for task in tasks.flatten() {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name: String = stat[open + 1..close]
            .chars()
            .filter(|c| !c.is_ascii_digit())
            .collect();
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        *by_name.entry(name).or_insert(0.0) += (ticks(11) + ticks(12)) / 100.0;
    }
    by_name
}

/// One timed run of the change stream through herald.
pub struct Measured {
    /// Changes written (and events expected).
    pub changes: u64,
    /// Start to the last event delivered.
    pub wall: Duration,
    /// Process CPU over `wall`.
    pub cpu: f64,
    /// Start to the load generator's return (every change in the simulator's store).
    pub written: Duration,
    /// Start to the last event emitted by herald's watcher (`emitted`, counted as each batch is
    /// built, just before its journal append).
    pub journaled: Duration,
    /// The child broker's CPU over `wall`, when it is a child of this run.
    pub broker_cpu: Option<f64>,
    /// Retries herald scheduled during the run (non-zero means a broker hiccup).
    pub retried: u64,
    /// CPU-seconds over `wall` by thread group (threads that ended during the run are missing).
    pub threads: Vec<(String, f64)>,
}

fn emitted(running: &herald::app::Running) -> u64 {
    running
        .health()
        .iter()
        .map(|(_, h)| h.emitted.load(std::sync::atomic::Ordering::Relaxed))
        .sum()
}

fn retried(running: &herald::app::Running) -> u64 {
    running
        .stats()
        .iter()
        .map(|(_, s)| s.retried.load(std::sync::atomic::Ordering::Relaxed))
        .sum()
}

/// Writes `changes` changes as fast as the simulator takes them and waits until herald's sinks
/// delivered as many events (herald's own `delivered` counters). `broker_cpu` reads the broker's
/// CPU-seconds, if known.
pub async fn stream(
    running: &herald::app::Running,
    work: &Workload,
    changes: u64,
    broker_cpu: &dyn Fn() -> Option<f64>,
) -> Measured {
    let delivered0 = running.delivered();
    let emitted0 = emitted(running);
    let retried0 = retried(running);
    let broker0 = broker_cpu();
    let threads0 = thread_cpu();
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    // The load generator runs beside the wait, so the journal phase is timed while it writes.
    let writer = async {
        work.sim
            .churn(&work.widgets, &work.names, 0, changes)
            .await
            .expect("churn");
        t0.elapsed()
    };
    let watcher = async {
        let mut journaled = None;
        let mut last = (0, Instant::now());
        loop {
            if journaled.is_none() && emitted(running) - emitted0 >= changes {
                journaled = Some(t0.elapsed());
            }
            let delivered = running.delivered() - delivered0;
            if delivered >= changes {
                return (journaled.unwrap_or_else(|| t0.elapsed()), t0.elapsed());
            }
            if delivered != last.0 {
                last = (delivered, Instant::now());
            }
            assert!(
                last.1.elapsed() < Duration::from_secs(60),
                "no progress for 60 s: {delivered} of {changes} delivered, {} journaled",
                emitted(running) - emitted0
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let (written, (journaled, wall)) = tokio::join!(writer, watcher);
    let cpu = cpu_seconds() - cpu0;
    let mut threads: Vec<(String, f64)> = thread_cpu()
        .into_iter()
        .map(|(name, cpu)| {
            let before = threads0.get(&name).copied().unwrap_or(0.0);
            (name, cpu - before)
        })
        .filter(|(_, cpu)| *cpu > 0.0)
        .collect();
    threads.sort_by(|a, b| b.1.total_cmp(&a.1));
    Measured {
        changes,
        wall,
        cpu,
        written,
        journaled,
        broker_cpu: broker0.zip(broker_cpu()).map(|(a, b)| b - a),
        retried: retried(running) - retried0,
        threads,
    }
}

/// The sink stage alone: herald started again on the journal of the timed run with `config`,
/// whose one sink is new and `start: earliest`, so it delivers the whole backlog of `events`
/// while nothing changes in the cluster. Timed from the start call (connecting included) to the
/// last event delivered.
pub async fn backlog(config: &str, events: u64, broker_cpu: &dyn Fn() -> Option<f64>) -> Ceiling {
    let cfg = herald::config::from_str(config).expect("backlog config");
    let broker0 = broker_cpu();
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let running = herald::app::start(&cfg, None)
        .await
        .expect("herald restarts");
    let mut last = (0, Instant::now());
    let mut first = None;
    loop {
        let delivered = running.delivered();
        if delivered > 0 && first.is_none() {
            first = Some(t0.elapsed());
        }
        if delivered >= events {
            break;
        }
        if delivered != last.0 {
            last = (delivered, Instant::now());
        }
        assert!(
            last.1.elapsed() < Duration::from_secs(60),
            "backlog: no progress for 60 s, {delivered} of {events} delivered"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let wall = t0.elapsed();
    let cpu = cpu_seconds() - cpu0;
    let broker_cpu = broker0.zip(broker_cpu()).map(|(a, b)| b - a);
    println!(
        "sink stage: start-up (config, journal, connect) to the first delivery {:.2} s, all {events} delivered by {:.2} s",
        first.unwrap_or(wall).as_secs_f64(),
        wall.as_secs_f64()
    );
    running
        .stop(Duration::from_secs(30))
        .await
        .expect("clean stop");
    Ceiling {
        sent: events,
        wall,
        cpu,
        broker_cpu,
    }
}

/// A bare client's run: `sent` records in `wall` with `cpu` process CPU-seconds.
pub struct Ceiling {
    pub sent: u64,
    pub wall: Duration,
    pub cpu: f64,
    pub broker_cpu: Option<f64>,
}

/// Events per second.
pub fn rate(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

/// CPU-seconds per 1,000 events.
pub fn per_k(cpu: f64, n: u64) -> f64 {
    cpu / (n as f64 / 1000.0)
}

/// Prints herald's line, its sink stage's line, the ceiling's line and both shares of the ceiling.
pub fn report(
    title: &str,
    herald_label: &str,
    (stage_label, stage): (&str, &Ceiling),
    ceiling_label: &str,
    h: &Measured,
    c: &Ceiling,
) {
    let broker = |cpu: Option<f64>, n: u64| {
        cpu.map_or_else(|| "n/a".to_owned(), |cpu| format!("{:.4}", per_k(cpu, n)))
    };
    println!("{title}");
    println!(
        "{:<58} {:>10} {:>14} {:>15}",
        "phase", "events/s", "cpu-s/1k proc", "cpu-s/1k broker"
    );
    let row = |label: &str, n: u64, wall: Duration, cpu: f64, broker_cpu: Option<f64>| {
        println!(
            "{:<58} {:>10.0} {:>14.4} {:>15}",
            label,
            rate(n, wall),
            per_k(cpu, n),
            broker(broker_cpu, n)
        );
    };
    row(herald_label, h.changes, h.wall, h.cpu, h.broker_cpu);
    row(
        stage_label,
        stage.sent,
        stage.wall,
        stage.cpu,
        stage.broker_cpu,
    );
    row(ceiling_label, c.sent, c.wall, c.cpu, c.broker_cpu);
    let share = |what: &str, n: u64, wall: Duration, cpu: f64| {
        println!(
            "{what} / ceiling: {:.0}% of the events/s, {:.1}x the process CPU per event",
            100.0 * rate(n, wall) / rate(c.sent, c.wall),
            per_k(cpu, n) / per_k(c.cpu, c.sent)
        );
    };
    share("herald", h.changes, h.wall, h.cpu);
    share("sink stage", stage.sent, stage.wall, stage.cpu);
    println!(
        "herald phases: changes written by {:.2} s ({:.0}/s), all journaled by {:.2} s ({:.0}/s), all delivered by {:.2} s; {} retries",
        h.written.as_secs_f64(),
        rate(h.changes, h.written),
        h.journaled.as_secs_f64(),
        rate(h.changes, h.journaled),
        h.wall.as_secs_f64(),
        h.retried
    );
    let threads: Vec<String> = h
        .threads
        .iter()
        .take(6)
        .map(|(name, cpu)| format!("{name} {cpu:.2} s"))
        .collect();
    println!(
        "herald run, process CPU {:.2} s over {:.2} s by thread: {}",
        h.cpu,
        h.wall.as_secs_f64(),
        threads.join(", ")
    );
    println!(
        "(process CPU covers the simulator, herald and the client; broker CPU is the broker process alone)"
    );
}
