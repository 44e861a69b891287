//! Fault: herald runs out of file descriptors (issue 14, item 6). herald raises its soft
//! open-files limit to the hard one at start; when descriptors then run short (the soft limit
//! lowered under it, below what its watches need, and every connection dropped by an API server
//! restart), it must keep its admin endpoint answering, say in `/readyz` and a metric that
//! descriptors ran out, and once they come back (the limit raised again while it runs) connect
//! every watch and deliver everything, the changes made while it was starved included.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Herald, Raw, free_port, id_of, sim, widgets_crd};

/// One watch per listed namespace: each holds a connection (a descriptor) while it runs.
const NAMESPACES: usize = 120;
/// Below what the watches need (one each, plus herald's own files).
const LIMIT: u64 = 64;
/// The hard limit, and the soft limit herald starts with and gets back.
const ROOM: u64 = 4096;

async fn get(addr: &str, path: &str) -> (u16, String) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    match client.get(format!("http://{addr}{path}")).send().await {
        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
        Err(_) => (0, String::new()),
    }
}

/// Polls `f` every 100 ms for up to `secs`; panics with herald's stderr if it never holds.
async fn until(what: &str, secs: u64, herald: &Herald, mut f: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !f().await {
        let stderr = std::fs::read_to_string(&herald.stderr).unwrap_or_default();
        assert!(
            started.elapsed() < Duration::from_secs(secs),
            "{what} did not happen; herald stderr (last 40 lines):\n{}",
            stderr
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `prlimit`, which sets a child's limits before it runs (and a running process's), is needed.
fn prlimit() -> Option<&'static str> {
    let found = Command::new("prlimit")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        Some("prlimit")
    } else {
        assert!(
            std::env::var_os("CI").is_none(),
            "prlimit (util-linux) is missing"
        );
        eprintln!("SKIPPED: prlimit (util-linux) is missing");
        None
    }
}

/// The soft open-files limit of process `pid`, from `/proc/<pid>/limits`.
fn soft_limit(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .ok()?
        .lines()
        .find(|l| l.starts_with("Max open files"))?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

fn set_limit(prlimit: &str, pid: u32, soft: u64, hard: u64) {
    let done = Command::new(prlimit)
        .args([
            "--pid",
            &pid.to_string(),
            &format!("--nofile={soft}:{hard}"),
        ])
        .status()
        .unwrap();
    assert!(done.success(), "prlimit --pid {pid} --nofile={soft}:{hard}");
}

#[tokio::test]
async fn out_of_file_descriptors_keeps_the_admin_endpoint_answering_and_heals_when_they_come_back()
{
    let Some(prlimit) = prlimit() else { return };
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let namespaces: Vec<String> = (0..NAMESPACES).map(|i| format!("ns-{i}")).collect();
    for ns in &namespaces {
        let r = raw
            .post(
                "/api/v1/namespaces",
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
    }

    let dir = tempfile::tempdir().unwrap();
    let admin = format!("127.0.0.1:{}", free_port());
    let config = format!(
        "cluster:\n  name: test\n  kubeconfig:\n    path: {kc}\n\
         resources:\n  - group: example.com\n    kind: Widget\n    namespaces: [{list}]\n\
         sinks:\n  - {{name: out, type: file, path: {out}}}\n\
         journal:\n  path: {journal}\n  flushInterval: 2ms\nadmin:\n  listen: {admin}\n",
        kc = sim.kubeconfig_path().display(),
        list = namespaces.join(", "),
        out = dir.path().join("events.jsonl").display(),
        journal = dir.path().join("journal").display(),
    );
    let config_path = dir.path().join("herald.yaml");
    std::fs::write(&config_path, config).unwrap();
    let stderr = dir.path().join("herald.stderr");
    let log = std::fs::File::create(&stderr).unwrap();
    // prlimit sets the limits and then runs herald in its own process (the pid stays).
    let child = Command::new(prlimit)
        .arg(format!("--nofile=1024:{ROOM}"))
        .arg(env!("CARGO_BIN_EXE_herald"))
        .args(["run", "-c"])
        .arg(&config_path)
        .env("RUST_LOG", "info,herald=debug")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut herald = Herald {
        child: Some(child),
        config: config_path,
        events: dir.path().join("events.jsonl"),
        stderr,
        bin: None,
        args: Vec::new(),
    };

    // Every watch is open; herald raised its soft limit to the hard one at start (checked at
    // the end, so that old code fails where it stops answering).
    until("/readyz says ready", 60, &herald, async || {
        get(&admin, "/readyz").await.0 == 200
    })
    .await;
    let raised = soft_limit(pid);

    // Descriptors run short: the soft limit drops below what the watches need, and the API
    // server's restart closes every connection, so each watch must open a new one.
    set_limit(prlimit, pid, LIMIT, ROOM);
    sim.restart(true, false, Duration::from_millis(200)).await;

    // Starved, herald still answers, and says what is wrong.
    until(
        "/readyz names the exhausted file descriptors",
        30,
        &herald,
        async || {
            let (code, body) = get(&admin, "/readyz").await;
            code == 503 && body.contains("file descriptors exhausted (limit 64)")
        },
    )
    .await;
    let (_, metrics) = get(&admin, "/metrics").await;
    let exhausted: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("herald_open_files_exhausted_total "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(exhausted > 0.0, "{metrics}");
    // It keeps answering while starved, request after request.
    for _ in 0..20 {
        assert_eq!(get(&admin, "/healthz").await.0, 200);
        assert_eq!(get(&admin, "/readyz").await.0, 503);
    }

    // Changes made while herald is starved.
    let mut expected = BTreeSet::new();
    for ns in &namespaces {
        let r = raw
            .post(
                &format!("/apis/example.com/v1/namespaces/{ns}/widgets"),
                &json!({"apiVersion": "example.com/v1", "kind": "Widget",
                        "metadata": {"name": "w", "namespace": ns}, "spec": {"size": 1}}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        expected.insert(id_of(&r.body, "created"));
    }

    // Descriptors come back: herald heals in place, every watch connects, everything arrives.
    set_limit(prlimit, pid, ROOM, ROOM);
    until("/readyz says ready again", 90, &herald, async || {
        get(&admin, "/readyz").await.0 == 200
    })
    .await;
    until(
        "every namespace's event delivered",
        60,
        &herald,
        async || herald.delivered().len() >= expected.len(),
    )
    .await;
    let got: BTreeSet<String> = herald
        .delivered()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(got, expected);
    assert_eq!(
        raised,
        Some(ROOM),
        "the soft limit is raised to the hard one at start"
    );
    assert_eq!(herald.terminate().await, Some(0));
}
