//! The `herald` binary: help, exit codes, and `herald sim` serving kubectl.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Kubectl, kubectl_path};

fn herald() -> Command {
    Command::new(env!("CARGO_BIN_EXE_herald"))
}

#[test]
fn help_is_everywhere_and_exits_zero() {
    for args in [vec!["--help"], vec!["sim", "--help"], vec!["help", "sim"]] {
        let out = herald().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(herald::exit_code::OK), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Usage"),
            "{args:?}"
        );
    }
}

#[test]
fn bad_usage_exits_with_the_usage_code() {
    let out = herald().args(["sim", "--no-such-flag"]).output().unwrap();
    assert_eq!(out.status.code(), Some(herald::exit_code::USAGE));
}

#[test]
fn a_taken_port_exits_with_bind_failed() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = herald()
        .args(["sim", "--listen", &addr, "--kubeconfig-out"])
        .arg(dir.path().join("kc"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(herald::exit_code::BIND_FAILED));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot listen on") && stderr.contains("caused by"),
        "{stderr}"
    );
}

#[tokio::test]
async fn herald_sim_serves_kubectl_and_stops_on_sigterm() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut child = herald()
        .args([
            "sim",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--kubeconfig-out",
        ])
        .arg(&kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !kubeconfig.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "kubeconfig written in time"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if let Some(bin) = kubectl_path() {
        let k = Kubectl::new(bin, &kubeconfig);
        let out = k.ok(&["get", "namespaces", "-o", "name"]).await;
        assert_eq!(
            out.lines().collect::<Vec<_>>(),
            ["namespace/default", "namespace/kube-system"]
        );
    }
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(herald::exit_code::OK));
}

#[tokio::test]
async fn herald_sim_loads_objects_and_keeps_them_in_its_data_dir() {
    let Some(bin) = kubectl_path() else { return };
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle.yaml");
    std::fs::write(&bundle, concat!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\n",
        "spec:\n  group: example.com\n  scope: Namespaced\n  names: {plural: widgets, kind: Widget}\n",
        "  versions:\n  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}\n",
        "---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: loaded}\nspec: {size: 1}\n",
    )).unwrap();
    let kubeconfig = dir.path().join("kc");
    let data = dir.path().join("data");
    for round in 0..2 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let _ = std::fs::remove_file(&kubeconfig);
        let mut cmd = herald();
        cmd.args([
            "sim",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--kubeconfig-out",
        ])
        .arg(&kubeconfig);
        cmd.arg("--data-dir").arg(&data);
        if round == 0 {
            cmd.arg("--load").arg(&bundle);
        }
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while !kubeconfig.exists() {
            assert!(started.elapsed() < Duration::from_secs(10));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let k = Kubectl::new(bin.clone(), &kubeconfig);
        let names = k.ok(&["get", "widgets", "-o", "name"]).await;
        assert_eq!(names.trim(), "widget.example.com/loaded", "round {round}");
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        let status = tokio::task::spawn_blocking(move || child.wait())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(status.code(), Some(herald::exit_code::OK));
    }
    let bad = herald()
        .args(["sim", "--listen", "127.0.0.1:0", "--kubeconfig-out"])
        .arg(dir.path().join("kc2"))
        .arg("--load")
        .arg(dir.path().join("missing.yaml"))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(herald::exit_code::CONFIG_INVALID));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("missing.yaml"));
}

#[tokio::test]
async fn herald_demo_runs_end_to_end_and_ends_by_itself() {
    let mut cmd = herald();
    cmd.args(["demo", "--pace", "100ms", "--duration", "25s"]);
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(herald::exit_code::OK),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let arrived: Vec<&str> = stdout.lines().filter(|l| l.contains("webhook ←")).collect();
    assert_eq!(arrived.len(), 7, "{stdout}");
    assert!(
        arrived[0].contains("dev.herald.resource.created") && arrived[0].contains("[redacted]")
    );
    assert!(arrived[5].contains("dev.herald.resource.deleted"));
    assert!(
        stdout.contains("7 events reached the webhook and 7 the file sink"),
        "{stdout}"
    );
    assert!(
        stdout.contains("kubeconfig"),
        "closes with how to point herald at a real cluster"
    );
}
