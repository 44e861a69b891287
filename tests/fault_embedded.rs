//! Faults around the embedded cluster, whose state lives in the journal directory (issue 14,
//! item 9): `herald check --connect` must not start a second cluster on the state of a running
//! herald; the `load` file is applied to a new cluster only, never again over a restored one; a
//! journal directory that cannot be created is the journal's failure (exit 12, naming the
//! directory and the OS error), not the cluster's.

use std::path::Path;
use std::time::{Duration, Instant};

use herald_sim::{SimConfig, Simulator};
use serde_json::{Value, json};

use crate::support::{Herald, Raw, free_port};

const LOAD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: default}
spec: {size: 1}
";

/// An embedded-cluster configuration in `dir` loading [`LOAD`], with a file sink.
fn config(dir: &Path, admin: &str) -> String {
    herald::cli::install_crypto_provider();
    std::fs::write(dir.join("load.yaml"), LOAD).unwrap();
    format!(
        "cluster:\n  embedded:\n    load: {load}\n\
         resources:\n  - group: example.com\n    kind: Widget\n\
         sinks:\n  - {{name: out, type: file, path: {out}}}\n\
         journal:\n  path: {journal}\n  flushInterval: 2ms\nadmin:\n  listen: {admin}\n",
        load = dir.join("load.yaml").display(),
        out = dir.join("events.jsonl").display(),
        journal = dir.join("journal").display(),
    )
}

async fn ready(herald: &Herald, admin: &str) {
    let started = Instant::now();
    while reqwest::get(format!("http://{admin}/readyz"))
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
        != 200
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "not ready:\n{}",
            std::fs::read_to_string(&herald.stderr).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The `spec.size` of every delivered event about `w`, in order.
fn sizes(herald: &Herald) -> Vec<(String, i64)> {
    herald
        .delivered()
        .iter()
        .filter(|e| e["subject"] == "default/w")
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_owned(),
                e["data"]["object"]["spec"]["size"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn check_connect(config: &Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["check", "--connect", "-c"])
        .arg(config)
        .output()
        .unwrap()
}

#[tokio::test]
async fn check_connect_refuses_the_embedded_state_of_a_running_herald() {
    let dir = tempfile::tempdir().unwrap();
    let admin = format!("127.0.0.1:{}", free_port());
    let herald = Herald::start(dir.path(), &config(dir.path(), &admin));
    ready(&herald, &admin).await;
    herald.wait_for(1).await;
    let state = dir.path().join("journal/embedded-cluster");
    let before = std::fs::read(state.join("snapshot.json")).unwrap();

    let out = check_connect(&herald.config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(herald::exit_code::JOURNAL_ERROR),
        "{stderr}"
    );
    assert!(
        stderr.contains("in use by a herald running on that journal")
            && stderr.contains(&dir.path().join("journal").display().to_string()),
        "{stderr}"
    );
    // The running herald's cluster state was not rewritten.
    assert_eq!(std::fs::read(state.join("snapshot.json")).unwrap(), before);
    assert_eq!(
        reqwest::get(format!("http://{admin}/readyz"))
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
}

#[tokio::test]
async fn check_connect_works_on_the_embedded_state_of_a_stopped_herald() {
    let dir = tempfile::tempdir().unwrap();
    let admin = format!("127.0.0.1:{}", free_port());
    let mut herald = Herald::start(dir.path(), &config(dir.path(), &admin));
    ready(&herald, &admin).await;
    assert_eq!(herald.terminate().await, Some(0));
    let out = check_connect(&herald.config);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn the_load_file_is_applied_to_a_new_embedded_cluster_only() {
    let dir = tempfile::tempdir().unwrap();
    let admin = format!("127.0.0.1:{}", free_port());
    let mut herald = Herald::start(dir.path(), &config(dir.path(), &admin));
    ready(&herald, &admin).await;
    herald.wait_for(1).await;
    assert_eq!(
        sizes(&herald),
        vec![("dev.herald.resource.created".into(), 1)]
    );
    assert_eq!(herald.terminate().await, Some(0));

    // While herald is stopped, the cluster's state changes (the widget grows).
    let state = dir.path().join("journal/embedded-cluster");
    let sim = Simulator::start(SimConfig::default().data_dir(&state))
        .await
        .unwrap();
    let r = Raw::new(&sim)
        .patch(
            "/apis/example.com/v1/namespaces/default/widgets/w",
            "application/merge-patch+json",
            &json!({"spec": {"size": 5}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    sim.shutdown().await;

    // Restarted, herald reports the change, and the load file does not revert it.
    herald.restart();
    ready(&herald, &admin).await;
    herald.wait_for(2).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let seen = sizes(&herald);
    assert_eq!(
        seen,
        vec![
            ("dev.herald.resource.created".into(), 1),
            ("dev.herald.resource.updated".into(), 5),
        ],
        "{}",
        std::fs::read_to_string(&herald.stderr).unwrap_or_default()
    );
    let status: Value = serde_json::from_str(
        &reqwest::get(format!("http://{admin}/status"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(status["sinks"][0]["delivered"], 1, "{status}");
}

#[tokio::test]
async fn an_embedded_journal_directory_that_cannot_be_created_exits_12_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    // The journal's parent is a file: the directory cannot be created, root or not.
    std::fs::write(dir.path().join("file"), "").unwrap();
    let journal = dir.path().join("file/journal");
    let text = config(dir.path(), &format!("127.0.0.1:{}", free_port())).replace(
        &dir.path().join("journal").display().to_string(),
        &journal.display().to_string(),
    );
    let path = dir.path().join("herald.yaml");
    std::fs::write(&path, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["run", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(herald::exit_code::JOURNAL_ERROR),
        "{stderr}"
    );
    assert!(
        stderr.contains(&journal.display().to_string()) && stderr.contains("os error"),
        "{stderr}"
    );
    assert!(!stderr.contains("embedded cluster"), "{stderr}");
}
