//! A real Alertmanager for tests (Debian's `prometheus-alertmanager`, installed by `.ci/run`),
//! started on a free loopback port with its own storage and a one-receiver route, and stopped on
//! drop; plus a recording proxy in front of it, so a test sees each request exactly as Alertmanager
//! got it and what Alertmanager answered. Without the binary a test fails when `CI` is set and is
//! skipped with a line on stderr otherwise.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, Method, Uri};
use serde_json::Value;

use super::api_receiver::ApiRequest;
use super::free_port;

const DEFAULT_ALERTMANAGER: &str = "/usr/bin/prometheus-alertmanager";

/// An Alertmanager child on a free loopback port, gossip off.
pub struct Alertmanager {
    _dir: tempfile::TempDir,
    log: PathBuf,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    child: Child,
}

impl Alertmanager {
    /// A running and ready Alertmanager, or `None` (after a skip line on stderr) when the binary
    /// is missing and `CI` is not set.
    pub async fn start() -> Option<Self> {
        let binary = find_binary()?;
        // reqwest's rustls needs the process's one crypto provider before any client exists.
        herald_sim::install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("alertmanager.yml");
        // One receiver without integrations: the test reads alerts back from the API.
        std::fs::write(
            &config,
            "route:\n  receiver: herald-test\nreceivers:\n  - name: herald-test\n",
        )
        .unwrap();
        let log = dir.path().join("alertmanager.log");
        let out = std::fs::File::create(&log).unwrap();
        let port = free_port();
        let child = Command::new(&binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            // An empty address turns clustering (gossip on 9094) off.
            .arg("--cluster.listen-address=")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        let mut am = Self {
            _dir: dir,
            log,
            base: format!("http://127.0.0.1:{port}"),
            child,
        };
        am.wait_ready().await;
        Some(am)
    }

    /// Waits (up to 30 s) until `/-/ready` answers 200.
    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let client = reqwest::Client::new();
        loop {
            if let Ok(reply) = client.get(format!("{}/-/ready", self.base)).send().await
                && reply.status() == 200
            {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("alertmanager exited with {status}: {}", self.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "alertmanager is not ready: {}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `GET /api/v2/alerts<query>` as JSON (`query` is empty or starts with `?`).
    pub async fn alerts(&self, query: &str) -> Value {
        let reply = reqwest::get(format!("{}/api/v2/alerts{query}", self.base))
            .await
            .unwrap();
        assert_eq!(reply.status(), 200);
        reply.json().await.unwrap()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// One exchange through [`Proxy`]: the request as it arrived, Alertmanager's status and body.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub request: ApiRequest,
    pub status: u16,
    pub answer: String,
}

/// An HTTP proxy on 127.0.0.1 that forwards every request (but herald's start-up `OPTIONS`,
/// answered 204) to `target` and keeps it with the answer.
pub struct Proxy {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    exchanges: Arc<Mutex<Vec<Exchange>>>,
}

impl Proxy {
    pub async fn start(target: &str) -> Self {
        herald_sim::install_crypto_provider();
        let exchanges: Arc<Mutex<Vec<Exchange>>> = Arc::default();
        let kept = exchanges.clone();
        let target = target.to_owned();
        let client = reqwest::Client::new();
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: axum::body::Bytes| {
                let (kept, target, client) = (kept.clone(), target.clone(), client.clone());
                async move {
                    if method == Method::OPTIONS {
                        return axum::http::Response::builder()
                            .status(204)
                            .body(axum::body::Body::empty())
                            .unwrap();
                    }
                    let path = uri
                        .path_and_query()
                        .map(|p| p.as_str().to_owned())
                        .unwrap_or_default();
                    let mut forward = client.request(
                        reqwest::Method::from_bytes(method.as_str().as_bytes()).unwrap(),
                        format!("{target}{path}"),
                    );
                    if let Some(ct) = headers.get("content-type") {
                        forward = forward.header("content-type", ct.to_str().unwrap());
                    }
                    let reply = forward.body(body.to_vec()).send().await.unwrap();
                    let status = reply.status().as_u16();
                    let answer = reply.text().await.unwrap();
                    kept.lock().unwrap().push(Exchange {
                        request: ApiRequest {
                            method: method.to_string(),
                            path,
                            headers: headers
                                .iter()
                                .map(|(k, v)| {
                                    (
                                        k.as_str().to_owned(),
                                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                                    )
                                })
                                .collect(),
                            body: body.to_vec(),
                        },
                        status,
                        answer: answer.clone(),
                    });
                    axum::http::Response::builder()
                        .status(status)
                        .header("content-type", "application/json")
                        .body(axum::body::Body::from(answer))
                        .unwrap()
                }
            },
        );
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { base, exchanges }
    }

    /// Every exchange so far.
    pub fn exchanges(&self) -> Vec<Exchange> {
        self.exchanges.lock().unwrap().clone()
    }

    /// Waits (up to 30 s) until `n` exchanges happened, and returns them all.
    pub async fn wait_for(&self, n: usize, what: &str) -> Vec<Exchange> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = self.exchanges();
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: {} of {n} requests arrived: {got:#?}",
                got.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn find_binary() -> Option<PathBuf> {
    let candidate = std::env::var_os("ALERTMANAGER")
        .map_or_else(|| PathBuf::from(DEFAULT_ALERTMANAGER), PathBuf::from);
    if candidate.is_file() {
        return Some(candidate);
    }
    if let Some(found) = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .flat_map(|dir| {
                [
                    dir.join("prometheus-alertmanager"),
                    dir.join("alertmanager"),
                ]
            })
            .find(|path| path.is_file())
    }) {
        return Some(found);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "alertmanager not found at {} or on PATH, and CI is set: install it (apt-get install prometheus-alertmanager)",
        candidate.display()
    );
    // Written to the stderr handle, not with eprintln!, which the test harness captures and
    // hides for a passing test: a skip must be visible.
    let _ = writeln!(
        std::io::stderr(),
        "skipping: alertmanager not found at {} or on PATH (apt-get install prometheus-alertmanager)",
        candidate.display()
    );
    None
}
