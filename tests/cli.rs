//! The `herald` binary: help, exit codes, and `herald sim` serving kubectl.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{
    Herald, Kubectl, Raw, WIDGETS_RESOURCE, herald_config, kubectl_path, sim, widget, widgets_crd,
};

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

#[tokio::test]
async fn herald_demo_into_a_closed_pipe_ends_quietly() {
    let mut cmd = herald();
    cmd.args(["demo", "--pace", "10ms", "--duration", "25s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = tokio::task::spawn_blocking(move || {
        let mut child = cmd.spawn()?;
        // The reader is gone before the demo writes its first line (`herald demo | head -0`).
        drop(child.stdout.take());
        child.wait_with_output()
    })
    .await
    .unwrap()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(herald::exit_code::BROKEN_PIPE),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Runs `herald check` on a missing file with debug logs (the open-files line is logged before
/// the configuration is read), under `script` when `terminal`, so stderr is a terminal; returns
/// what was written.
fn check_logs(terminal: bool, no_color: Option<&str>) -> String {
    let bin = env!("CARGO_BIN_EXE_herald");
    let mut cmd = if terminal {
        let mut c = Command::new("script");
        c.args([
            "-qec",
            &format!("'{bin}' check -c /nonexistent/herald.yaml"),
            "/dev/null",
        ]);
        c
    } else {
        let mut c = Command::new(bin);
        c.args(["check", "-c", "/nonexistent/herald.yaml"]);
        c
    };
    cmd.env("RUST_LOG", "herald=debug").env_remove("NO_COLOR");
    if let Some(v) = no_color {
        cmd.env("NO_COLOR", v);
    }
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    // `script` copies the terminal's output to its stdout; without it the logs are on stderr.
    let text =
        String::from_utf8_lossy(if terminal { &out.stdout } else { &out.stderr }).into_owned();
    assert!(text.contains("Open-files limit"), "{text}");
    text
}

#[test]
fn logs_are_coloured_only_on_a_terminal_and_never_with_no_color() {
    assert!(
        !check_logs(false, None).contains('\u{1b}'),
        "stderr is a pipe: no colours"
    );
    let has_script = Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_script {
        assert!(
            std::env::var_os("CI").is_none(),
            "util-linux `script` is needed for a terminal"
        );
        eprintln!("skipped the terminal half: util-linux `script` is not installed");
        return;
    }
    assert!(
        check_logs(true, None).contains('\u{1b}'),
        "a terminal: colours"
    );
    assert!(
        check_logs(true, Some("")).contains('\u{1b}'),
        "an empty NO_COLOR is unset"
    );
    assert!(
        !check_logs(true, Some("1")).contains('\u{1b}'),
        "NO_COLOR=1: none"
    );
}

#[tokio::test]
async fn herald_status_columns_take_the_width_of_the_data() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let long = "a-sink-whose-name-is-longer-than-any-column-was";
    let config = herald_config(&sim, dir.path(), WIDGETS_RESOURCE).replace(
        "sinks:\n",
        &format!(
            "sinks:\n  - name: {long}\n    type: file\n    path: {}\n",
            dir.path().join("long.jsonl").display()
        ),
    );
    let mut run = Herald::start(dir.path(), &config);
    raw.post(
        "/apis/example.com/v1/namespaces/default/widgets",
        &widget("a", json!({}), json!({})),
    )
    .await;
    run.wait_for(1).await;
    let running = run.config.clone();
    let live =
        tokio::task::spawn_blocking(move || herald().arg("status").arg("-c").arg(running).output())
            .await
            .unwrap()
            .unwrap();
    assert_eq!(run.terminate().await, Some(0));
    let stopped = herald()
        .arg("status")
        .arg("-c")
        .arg(&run.config)
        .output()
        .unwrap();
    for out in [live, stopped] {
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(text.contains(long), "{text}");
        assert_aligned(&text, "SINK", 3);
        if text.contains("RESOURCE") {
            assert_aligned(&text, "RESOURCE", 2);
        }
    }
}

/// The table whose header starts with `first` has `rows` rows, and each of its cells ends where
/// its header ends (numbers are right-aligned), the first column's cells starting at 0.
fn assert_aligned(text: &str, first: &str, rows: usize) {
    let lines: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with(first))
        .take(rows)
        .collect();
    assert_eq!(lines.len(), rows, "{text}");
    let ends = |line: &str| -> Vec<usize> {
        let mut ends = Vec::new();
        let chars: Vec<char> = line.chars().collect();
        for (i, c) in chars.iter().enumerate() {
            if *c != ' ' && chars.get(i + 1).is_none_or(|n| *n == ' ') {
                ends.push(i);
            }
        }
        ends
    };
    let header = ends(lines[0]);
    for line in &lines[1..] {
        let cells = ends(line);
        assert_eq!(cells.len(), header.len(), "one cell per column:\n{text}");
        // The first column is text, left-aligned; the others end with their header.
        assert_eq!(cells[1..], header[1..], "aligned:\n{text}");
    }
}
