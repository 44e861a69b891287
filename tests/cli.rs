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
