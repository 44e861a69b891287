//! Fault: herald runs out of file descriptors (issue 14, item 6). With a limit below what its
//! watches need (and the hard limit lowered too, so herald cannot raise it), herald must keep its
//! admin endpoint answering, say in `/readyz` that file descriptors ran out, stop cleanly, and with
//! a limit above what it needs deliver everything, the changes made while it was starved included.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Herald, Raw, free_port, id_of, sim, widgets_crd};

/// One watch per listed namespace: each holds a connection (a descriptor) while it runs.
const NAMESPACES: usize = 120;
/// Below what the watches need (one each, plus herald's own files), above what herald needs to
/// start (its journal, its listener, the runtime).
const LIMIT: u32 = 64;

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

#[tokio::test]
async fn out_of_file_descriptors_keeps_the_admin_endpoint_answering_and_loses_nothing() {
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
    // Soft and hard limit both: herald raises its soft limit to the hard one at start.
    let child = Command::new(prlimit)
        .arg(format!("--nofile={LIMIT}:{LIMIT}"))
        .arg(env!("CARGO_BIN_EXE_herald"))
        .args(["run", "-c"])
        .arg(&config_path)
        .env("RUST_LOG", "info,herald=debug")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut herald = Herald {
        child: Some(child),
        config: config_path,
        events: dir.path().join("events.jsonl"),
        stderr,
    };

    // Starved of descriptors, herald still answers, and says what is wrong.
    until("/healthz answers 200", 30, &herald, async || {
        get(&admin, "/healthz").await.0 == 200
    })
    .await;
    until(
        "/readyz names the exhausted file descriptors",
        30,
        &herald,
        async || {
            let (code, body) = get(&admin, "/readyz").await;
            code == 503 && body.contains("file descriptors") && body.contains("limit 64")
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

    // Changes made while herald is starved are not lost: with a limit above what it needs, herald
    // delivers every namespace's event. (The limit of a running process cannot be raised back
    // here without CAP_SYS_RESOURCE; the recovery in place is the watchers' retry with backoff,
    // which is what connects them after the restart too.)
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
    assert_eq!(
        herald.terminate().await,
        Some(0),
        "a starved herald stops cleanly"
    );
    let log = std::fs::OpenOptions::new()
        .append(true)
        .open(&herald.stderr)
        .unwrap();
    herald.child = Some(
        Command::new(prlimit)
            .arg("--nofile=4096:4096")
            .arg(env!("CARGO_BIN_EXE_herald"))
            .args(["run", "-c"])
            .arg(&herald.config)
            .env("RUST_LOG", "info,herald=debug")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    until("/readyz says ready", 60, &herald, async || {
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
}
