//! Fault: the API server is down or answers garbage (issue 14, item 7). `herald run` keeps
//! retrying and `/readyz` says which it is ("API server unreachable: …", "API server answer
//! unreadable …"), never "CRD missing?"; `herald check --connect` names the address and the cause
//! and exits 13.

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{Herald, admin_get as get, free_port, sim, widgets_crd};

/// Polls `/readyz` every 50 ms for up to 30 s until `f` holds for it; returns the body.
async fn readyz_until(herald: &Herald, admin: &str, f: impl Fn(u16, &str) -> bool) -> String {
    let started = Instant::now();
    loop {
        let (code, body) = get(admin, "/readyz").await;
        if f(code, &body) {
            return body;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "/readyz never matched; last: {code} {body}\nherald stderr:\n{}",
            std::fs::read_to_string(&herald.stderr).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A kubeconfig for a plain-HTTP API server at `addr`.
fn kubeconfig(dir: &Path, addr: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://{addr}\n\
             users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n\
             current-context: x\n"
        ),
    )
    .unwrap();
    path
}

fn config(dir: &Path, kubeconfig: &Path, admin: &str) -> String {
    format!(
        "cluster:\n  name: test\n  kubeconfig:\n    path: {kc}\n\
         resources:\n  - group: example.com\n    kind: Widget\n\
         sinks:\n  - {{name: out, type: file, path: {out}}}\n\
         journal:\n  path: {journal}\n  flushInterval: 2ms\nadmin:\n  listen: {admin}\n",
        kc = kubeconfig.display(),
        out = dir.join("events.jsonl").display(),
        journal = dir.join("journal").display(),
    )
}

/// A server that answers every request with a 200 whose body is not JSON: something that is not
/// a Kubernetes API server (a proxy's error page), which a real API server cannot produce.
async fn garbage_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let _ = conn.read(&mut buf).await;
                let body = "<html>502 Bad Gateway, but with 200</html>";
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn readyz_says_the_api_server_is_unreachable_when_it_goes_down_and_herald_keeps_running() {
    let sim = sim().await;
    let raw = crate::support::Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let admin = format!("127.0.0.1:{}", free_port());
    let mut herald = Herald::start(
        dir.path(),
        &config(dir.path(), sim.kubeconfig_path(), &admin),
    );
    readyz_until(&herald, &admin, |code, _| code == 200).await;

    sim.shutdown().await;
    let body = readyz_until(&herald, &admin, |code, body| {
        code == 503 && body.contains("API server unreachable")
    })
    .await;
    assert!(body.contains("connection refused"), "{body}");
    assert!(!body.contains("CRD missing"), "{body}");
    assert!(
        herald.child.as_mut().unwrap().try_wait().unwrap().is_none(),
        "herald run must keep retrying, not exit"
    );
    assert_eq!(get(&admin, "/healthz").await.0, 200);
}

#[tokio::test]
async fn readyz_says_the_answers_are_unreadable_when_the_server_answers_garbage() {
    herald::cli::install_crypto_provider();
    let addr = garbage_server().await;
    let dir = tempfile::tempdir().unwrap();
    let admin = format!("127.0.0.1:{}", free_port());
    let kc = kubeconfig(dir.path(), &addr);
    let mut herald = Herald::start(dir.path(), &config(dir.path(), &kc, &admin));
    let body = readyz_until(&herald, &admin, |code, body| {
        code == 503 && body.contains("API server answer unreadable")
    })
    .await;
    assert!(!body.contains("CRD missing"), "{body}");
    assert!(!body.contains("unreachable"), "{body}");
    assert!(
        herald.child.as_mut().unwrap().try_wait().unwrap().is_none(),
        "herald run must keep retrying, not exit"
    );
}

#[tokio::test]
async fn check_connect_on_a_closed_port_names_the_address_and_the_refusal_and_exits_13() {
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let kc = kubeconfig(dir.path(), &addr);
    let path = dir.path().join("herald.yaml");
    std::fs::write(
        &path,
        config(dir.path(), &kc, &format!("127.0.0.1:{}", free_port())),
    )
    .unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["check", "--connect", "-c"])
        .arg(&path)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(herald::exit_code::CLUSTER_UNREACHABLE),
        "{stderr}"
    );
    assert!(stderr.contains(&addr), "{stderr}");
    assert!(stderr.contains("connection refused"), "{stderr}");
}

#[tokio::test]
async fn check_connect_against_garbage_says_so_and_exits_13() {
    let addr = garbage_server().await;
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), &addr);
    let path = dir.path().join("herald.yaml");
    std::fs::write(
        &path,
        config(dir.path(), &kc, &format!("127.0.0.1:{}", free_port())),
    )
    .unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["check", "--connect", "-c"])
        .arg(&path)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(herald::exit_code::CLUSTER_UNREACHABLE),
        "{stderr}"
    );
    assert!(stderr.contains(&addr), "{stderr}");
    assert!(stderr.contains("API server answer unreadable"), "{stderr}");
}
