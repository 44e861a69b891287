//! The admin endpoint as a pod runs it: bound to the pod's own IP through `${POD_IP}` (IPv4 and
//! IPv6), and what it answers without the bearer token (`/metrics`, `/healthz`, `/readyz`,
//! `/status`) and only with it (every `/dlq` call, reads included, and `/replay`).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{WIDGETS_RESOURCE, admin_addr, herald_config, sim};

/// `herald run` with extra environment variables (the downward API's `POD_IP`); killed on drop.
struct PodHerald {
    child: Child,
    stderr: std::path::PathBuf,
}

impl PodHerald {
    fn start(dir: &Path, config: &str, env: &[(&str, &str)]) -> Self {
        let config_path = dir.join("herald.yaml");
        std::fs::write(&config_path, config).unwrap();
        let stderr = dir.join("herald.stderr");
        let child = Command::new(env!("CARGO_BIN_EXE_herald"))
            .args(["run", "-c"])
            .arg(&config_path)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        Self { child, stderr }
    }

    fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for PodHerald {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `method path` on `addr` with an optional bearer token, retried while herald is starting.
async fn call(
    herald: &PodHerald,
    method: reqwest::Method,
    addr: &str,
    path: &str,
    token: Option<&str>,
) -> (u16, String) {
    let client = reqwest::Client::new();
    let started = Instant::now();
    loop {
        let mut request = client.request(method.clone(), format!("http://{addr}{path}"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        match request.send().await {
            Ok(r) => {
                let code = r.status().as_u16();
                return (code, r.text().await.unwrap_or_default());
            }
            Err(e) if e.is_connect() && started.elapsed() < Duration::from_secs(15) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!(
                "admin endpoint {addr} unreachable: {e}\n--- herald stderr ---\n{}",
                herald.stderr_text()
            ),
        }
    }
}

/// `herald check -c` on `config` with `env`: exit code and stderr.
fn check(dir: &Path, config: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let path = dir.join("check.yaml");
    std::fs::write(&path, config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["check", "-c"])
        .arg(&path)
        .env_remove("POD_IP")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `config` (from `herald_config`) with its admin address replaced by `listen`.
fn with_listen(config: &str, listen: &str) -> String {
    let line = format!("  listen: {}\n", admin_addr(config));
    assert!(config.contains(&line), "{config}");
    config.replace(&line, &format!("  listen: {listen}\n"))
}

/// A port nobody listens on right now at `ip`.
fn free_port_on(ip: &str) -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind((ip, 0))?.local_addr()?.port())
}

#[tokio::test]
async fn admin_listen_binds_the_pod_ip_from_the_environment() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port_on("127.0.0.1").unwrap();
    let config = with_listen(
        &herald_config(&sim, dir.path(), WIDGETS_RESOURCE),
        &format!("\"${{POD_IP}}:{port}\""),
    );

    // Without the variable the configuration is refused, naming the field and the variable.
    let (code, stderr) = check(dir.path(), &config, &[]);
    assert_eq!(code, Some(herald::exit_code::CONFIG_INVALID), "{stderr}");
    assert!(
        stderr.contains(r#"admin.listen: environment variable "POD_IP" is not set"#),
        "{stderr}"
    );
    let (code, stderr) = check(dir.path(), &config, &[("POD_IP", "127.0.0.1")]);
    assert_eq!(code, Some(herald::exit_code::OK), "{stderr}");

    let herald = PodHerald::start(dir.path(), &config, &[("POD_IP", "127.0.0.1")]);
    let (code, body) = call(
        &herald,
        reqwest::Method::GET,
        &format!("127.0.0.1:{port}"),
        "/healthz",
        None,
    )
    .await;
    assert_eq!(code, 200, "{body}");
}

#[tokio::test]
async fn admin_listen_brackets_a_bare_ipv6_pod_ip() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let listen = "\"${POD_IP}:9464\"".to_owned();
    let config = with_listen(&herald_config(&sim, dir.path(), WIDGETS_RESOURCE), &listen);
    // The parsing, whatever the machine: `::1:9464` would be a valid IPv6 address without a port,
    // so only the bracketing makes it an address and port.
    let (code, stderr) = check(dir.path(), &config, &[("POD_IP", "::1")]);
    assert_eq!(code, Some(herald::exit_code::OK), "{stderr}");

    let port = match free_port_on("::1") {
        Ok(port) => port,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "no IPv6 loopback (::1) to bind ({e}), and CI is set: the IPv6 admin endpoint must be tested"
            );
            eprintln!("no IPv6 loopback (::1): {e}; only the parsing of an IPv6 POD_IP was tested");
            return;
        }
    };
    let config = with_listen(&config, &format!("\"${{POD_IP}}:{port}\""));
    let herald = PodHerald::start(dir.path(), &config, &[("POD_IP", "::1")]);
    let (code, body) = call(
        &herald,
        reqwest::Method::GET,
        &format!("[::1]:{port}"),
        "/healthz",
        None,
    )
    .await;
    assert_eq!(code, 200, "{body}");
}

#[tokio::test]
async fn only_metrics_health_readiness_and_status_answer_without_the_token() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let port = free_port_on("127.0.0.1").unwrap();
    let config = format!(
        "{}  token: {{fromFile: {}}}\n",
        with_listen(
            &herald_config(&sim, dir.path(), WIDGETS_RESOURCE),
            &format!("\"${{POD_IP}}:{port}\""),
        ),
        token_file.display()
    );
    let herald = PodHerald::start(dir.path(), &config, &[("POD_IP", "127.0.0.1")]);
    let addr = format!("127.0.0.1:{port}");
    let (get, post) = (reqwest::Method::GET, reqwest::Method::POST);

    // Open: what Prometheus and the kubelet's probes call, with no token at all.
    for path in ["/metrics", "/healthz", "/status"] {
        let (code, body) = call(&herald, get.clone(), &addr, path, None).await;
        assert_eq!(code, 200, "GET {path} without a token: {body}");
    }
    // Not ready (the CRD is missing), but answered: 503, not 401/403.
    let (code, body) = call(&herald, get.clone(), &addr, "/readyz", None).await;
    assert_eq!(code, 503, "GET /readyz without a token: {body}");

    // Behind the token: every DLQ call (reads too: dead letters carry whole events) and replay.
    // Each with the JSON pointer its answer carries when the call is done (nothing is dead-lettered
    // or journaled yet, so nothing changes).
    let guarded = [
        (get.clone(), "/dlq/out", ""),
        (post.clone(), "/dlq/out/replay", "/queued"),
        (post.clone(), "/dlq/out/purge", "/purged"),
        (post.clone(), "/replay?sink=out&from=1", "/queued"),
    ];
    for (method, path, _) in &guarded {
        for token in [
            None,
            Some("wrong"),
            Some("s3cre"),
            Some("s3cret2"),
            Some("S3CRET"),
        ] {
            let (code, body) = call(&herald, method.clone(), &addr, path, token).await;
            assert_eq!(
                code, 401,
                "{method} {path} with token {token:?} must be refused: {body}"
            );
        }
    }
    for (method, path, answer) in &guarded {
        let (code, body) = call(&herald, method.clone(), &addr, path, Some("s3cret")).await;
        assert_eq!(code, 200, "{method} {path} with the token: {body}");
        let answer_json: serde_json::Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {body}"));
        assert!(
            answer_json.pointer(answer).is_some(),
            "{method} {path}: {body}"
        );
    }
    // Nothing else is served, token or not.
    for path in ["/", "/dlq", "/debug", "/config"] {
        let (code, _) = call(&herald, get.clone(), &addr, path, Some("s3cret")).await;
        assert_eq!(code, 404, "GET {path}");
    }
}
