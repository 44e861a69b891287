//! Shared helpers: a simulator per test, raw HTTP access to it, CRD fixtures, and the kubectl runner.

pub mod kafka;
pub mod nats;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use futures::StreamExt;
use herald::sim::{SimConfig, Simulator};
use serde_json::{Value, json};

/// Starts a simulator on an ephemeral loopback port.
pub async fn sim() -> Simulator {
    sim_with(SimConfig::default()).await
}

/// Starts a simulator with `config` (its listen address forced to an ephemeral loopback port).
pub async fn sim_with(config: SimConfig) -> Simulator {
    // reqwest's rustls has no bundled crypto provider (the webhook sink enables rustls for the whole
    // workspace), so every test installs herald's one, ring, before any reqwest client exists.
    herald::sim::install_crypto_provider();
    Simulator::start(config.listen(([127, 0, 0, 1], 0).into()))
        .await
        .expect("simulator starts")
}

/// A CRD for `plural.group` with the given scope, versions `(name, served, storage)` and a status subresource.
pub fn crd(
    group: &str,
    plural: &str,
    kind: &str,
    scope: &str,
    versions: &[(&str, bool, bool)],
) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|(name, served, storage)| {
            json!({"name": name, "served": served, "storage": storage,
                   "subresources": {"status": {}},
                   "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}})
        })
        .collect();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": scope,
                 "names": {"plural": plural, "kind": kind, "shortNames": []},
                 "versions": versions}
    })
}

/// The namespaced `widgets.example.com` CRD (v1, status subresource) most tests use.
pub fn widgets_crd() -> Value {
    crd(
        "example.com",
        "widgets",
        "Widget",
        "Namespaced",
        &[("v1", true, true)],
    )
}

/// A Widget in `default`.
pub fn widget(name: &str, labels: Value, spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget",
           "metadata": {"name": name, "namespace": "default", "labels": labels}, "spec": spec})
}

/// Plain HTTP access to the simulator, for asserting on exact status codes, headers and watch lines.
pub struct Raw {
    pub base: String,
    pub http: reqwest::Client,
}

/// A response: status, headers and the JSON body (Null when not JSON).
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Raw {
    pub fn new(sim: &Simulator) -> Self {
        Self {
            base: sim.url(),
            http: reqwest::Client::new(),
        }
    }

    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        content_type: &str,
        body: Option<Vec<u8>>,
    ) -> Reply {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req.header("content-type", content_type).body(b);
        }
        let resp = req.send().await.expect("request reaches the simulator");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.expect("body");
        Reply {
            status,
            headers,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(reqwest::Method::GET, path, "", None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        self.send(
            reqwest::Method::POST,
            path,
            "application/json",
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Reply {
        self.send(
            reqwest::Method::PUT,
            path,
            "application/json",
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    pub async fn patch(&self, path: &str, content_type: &str, body: &Value) -> Reply {
        self.send(
            reqwest::Method::PATCH,
            path,
            content_type,
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    pub async fn delete(&self, path: &str) -> Reply {
        self.send(reqwest::Method::DELETE, path, "", None).await
    }

    /// Creates a CRD and checks it was accepted.
    pub async fn install_crd(&self, crd: &Value) {
        let r = self
            .post(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                crd,
            )
            .await;
        assert_eq!(r.status, 201, "CRD create: {}", r.body);
    }

    /// Opens a watch and returns its line reader.
    pub async fn watch(&self, path_and_query: &str) -> WatchLines {
        let resp = self
            .http
            .get(format!("{}{path_and_query}", self.base))
            .send()
            .await
            .expect("watch starts");
        assert_eq!(resp.status().as_u16(), 200, "watch status");
        assert_eq!(resp.headers()["content-type"], "application/json");
        WatchLines {
            stream: Box::pin(resp.bytes_stream()),
            buf: Vec::new(),
        }
    }
}

/// Reads a watch body line by line (each line one compact JSON event).
pub struct WatchLines {
    stream: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buf: Vec<u8>,
}

impl WatchLines {
    /// The next raw line, `None` at the end of the stream; panics after `timeout`.
    pub async fn next_line(&mut self, timeout: Duration) -> Option<String> {
        tokio::time::timeout(timeout, async {
            loop {
                if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = self.buf.drain(..=pos).collect();
                    return Some(
                        String::from_utf8(line[..line.len() - 1].to_vec()).expect("utf-8 line"),
                    );
                }
                match self.stream.next().await {
                    Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                    Some(Err(e)) => panic!("watch stream failed: {e}"),
                    None => {
                        assert!(self.buf.is_empty(), "partial line at end of stream");
                        return None;
                    }
                }
            }
        })
        .await
        .expect("a watch line in time")
    }

    /// The next event as `(type, object)`, skipping bookmarks unless `bookmarks` is set.
    pub async fn next_event(&mut self) -> Option<(String, Value)> {
        loop {
            let line = self.next_line(Duration::from_secs(10)).await?;
            let v: Value = serde_json::from_str(&line).expect("event is JSON");
            let ty = v["type"].as_str().expect("type").to_string();
            if ty == "BOOKMARK" {
                continue;
            }
            return Some((ty, v["object"].clone()));
        }
    }
}

/// The kubectl binary, or `None` outside CI when it is missing (the test then says so on stderr).
/// Under `CI` a missing kubectl fails the test: no silent skips.
pub fn kubectl_path() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("kubectl"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "kubectl is required under CI but is not on PATH"
        );
        eprintln!("SKIPPED: kubectl not found on PATH (set CI=1 to make this a failure)");
    }
    found
}

/// Runs kubectl against a kubeconfig with a private discovery cache.
pub struct Kubectl {
    pub bin: PathBuf,
    pub kubeconfig: PathBuf,
    pub cache: tempfile::TempDir,
}

impl Kubectl {
    pub fn new(bin: PathBuf, kubeconfig: &Path) -> Self {
        Self {
            bin,
            kubeconfig: kubeconfig.to_path_buf(),
            cache: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.cache.path())
            .args(args);
        c
    }

    /// Runs kubectl to completion off the async runtime; returns (success, stdout, stderr).
    pub async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let mut c = self.command(args);
        let out = tokio::task::spawn_blocking(move || c.output())
            .await
            .expect("join")
            .expect("kubectl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs kubectl with `stdin` as input and asserts success; returns stdout.
    pub async fn ok_with_stdin(&self, args: &[&str], stdin: &str) -> String {
        use std::io::Write;
        let mut c = self.command(args);
        c.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let stdin = stdin.to_string();
        let argv = args.join(" ");
        let out = tokio::task::spawn_blocking(move || {
            let mut child = c.spawn().expect("kubectl spawns");
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(stdin.as_bytes())
                .expect("write stdin");
            child.wait_with_output()
        })
        .await
        .expect("join")
        .expect("kubectl runs");
        assert!(
            out.status.success(),
            "kubectl {argv} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs kubectl and asserts success; returns stdout.
    pub async fn ok(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.run(args).await;
        assert!(ok, "kubectl {} failed: {stderr}", args.join(" "));
        stdout
    }
}

/// A `herald run` child process with a file sink, and readers for what it delivered.
pub struct Herald {
    pub child: Option<std::process::Child>,
    pub config: PathBuf,
    pub events: PathBuf,
    pub stderr: PathBuf,
}

/// A configuration for `herald run` against `sim`: file sink `events.jsonl` in `dir`, journal in
/// `dir/journal`, fsync always; `resources` is the YAML list body (indented two spaces).
pub fn herald_config(sim: &Simulator, dir: &Path, resources: &str) -> String {
    format!(
        "cluster:\n  name: test\n  kubeconfig:\n    path: {kc}\nresources:\n{resources}\nsinks:\n  - name: out\n    type: file\n    path: {events}\n    fsync: always\njournal:\n  path: {journal}\n  flushInterval: 2ms\nadmin:\n  listen: 127.0.0.1:{port}\n",
        port = free_port(),
        kc = sim.kubeconfig_path().display(),
        events = dir.join("events.jsonl").display(),
        journal = dir.join("journal").display(),
    )
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// The admin address written into a `herald_config`.
pub fn admin_addr(config: &str) -> String {
    config
        .lines()
        .find_map(|l| l.trim().strip_prefix("listen: "))
        .expect("an admin listen line")
        .to_string()
}

/// The usual resource list: every Widget of example.com.
pub const WIDGETS_RESOURCE: &str = "  - group: example.com\n    kind: Widget";

impl Herald {
    /// Writes `config` into `dir` and starts `herald run -c` on it.
    pub fn start(dir: &Path, config: &str) -> Self {
        let config_path = dir.join("herald.yaml");
        std::fs::write(&config_path, config).expect("write config");
        let mut h = Self {
            child: None,
            config: config_path,
            events: dir.join("events.jsonl"),
            stderr: dir.join("herald.stderr"),
        };
        h.restart();
        h
    }

    /// Starts (again) with the same configuration.
    pub fn restart(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.stderr)
            .expect("stderr file");
        let child = Command::new(env!("CARGO_BIN_EXE_herald"))
            .args(["run", "-c"])
            .arg(&self.config)
            .env("RUST_LOG", "info,herald=debug")
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("herald starts");
        self.child = Some(child);
    }

    /// Every event delivered so far, in file order.
    pub fn delivered(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.events)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("each line is one JSON CloudEvent"))
            .collect()
    }

    /// Waits until at least `n` events were delivered; panics (with herald's stderr) after 20 s.
    pub async fn wait_for(&self, n: usize) -> Vec<Value> {
        let started = std::time::Instant::now();
        loop {
            let got = self.delivered();
            if got.len() >= n {
                return got;
            }
            if started.elapsed() > Duration::from_secs(20) {
                panic!(
                    "expected {n} events, got {}: {:#?}\n--- herald stderr ---\n{}",
                    got.len(),
                    got.iter().map(|e| e["id"].clone()).collect::<Vec<_>>(),
                    std::fs::read_to_string(&self.stderr).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits a little and checks that no more than `n` events arrived.
    pub async fn settle(&self, n: usize) -> Vec<Value> {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let got = self.delivered();
        assert_eq!(
            got.len(),
            n,
            "{:#?}\n--- herald stderr ---\n{}",
            got.iter().map(|e| e["id"].clone()).collect::<Vec<_>>(),
            std::fs::read_to_string(&self.stderr).unwrap_or_default()
        );
        got
    }

    /// SIGTERM, then waits for the exit code.
    pub async fn terminate(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        let pid = child.id().to_string();
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill runs");
        tokio::task::spawn_blocking(move || child.wait())
            .await
            .expect("join")
            .expect("wait")
            .code()
    }

    /// SIGKILL: no chance to flush or drain.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = tokio::task::spawn_blocking(move || child.wait()).await;
        }
    }
}

impl Drop for Herald {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A webhook receiver on 127.0.0.1 whose answers a test can change: records every request it takes.
/// `herald-error-*` header name → value.
pub type ErrorHeaders = BTreeMap<String, String>;

pub struct Receiver {
    pub url: String,
    /// Status to answer with (204 = take it).
    pub status: std::sync::Arc<std::sync::atomic::AtomicU16>,
    /// Answer 400 to events whose `ce-subject` is listed.
    pub reject_subjects: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// Random latency up to this many milliseconds per request.
    pub max_latency_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// `(ce-id, ce-subject, ce-sequence)` of every event taken (2xx), in arrival order.
    pub taken: std::sync::Arc<std::sync::Mutex<Vec<(String, String, String)>>>,
    /// Requests seen, whatever the answer.
    pub requests: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// `herald-error-*` headers (name → value) of every taken request that had any, with its
    /// `ce-id`: what a dead-letter sink receives.
    pub dead_letters: std::sync::Arc<std::sync::Mutex<Vec<(String, ErrorHeaders)>>>,
}

impl Receiver {
    pub async fn start() -> Self {
        use std::sync::atomic::Ordering;
        let status = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(204));
        let reject_subjects = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let max_latency_ms = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let taken = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let requests = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let dead_letters = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (st, rj, lat, tk, rq, dl) = (
            status.clone(),
            reject_subjects.clone(),
            max_latency_ms.clone(),
            taken.clone(),
            requests.clone(),
            dead_letters.clone(),
        );
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: axum::http::HeaderMap| {
                let (st, rj, lat, tk, rq, dl) = (
                    st.clone(),
                    rj.clone(),
                    lat.clone(),
                    tk.clone(),
                    rq.clone(),
                    dl.clone(),
                );
                async move {
                    rq.fetch_add(1, Ordering::SeqCst);
                    let max = lat.load(Ordering::SeqCst);
                    if max > 0 {
                        let ms = rand::random_range(0..=max);
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                    }
                    let h = |k: &str| {
                        headers
                            .get(k)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_string()
                    };
                    if rj.lock().unwrap().contains(&h("ce-subject")) {
                        return axum::http::StatusCode::BAD_REQUEST;
                    }
                    let code = axum::http::StatusCode::from_u16(st.load(Ordering::SeqCst)).unwrap();
                    if code.is_success() {
                        tk.lock()
                            .unwrap()
                            .push((h("ce-id"), h("ce-subject"), h("ce-sequence")));
                        let errors: BTreeMap<String, String> = headers
                            .iter()
                            .filter(|(k, _)| k.as_str().starts_with("herald-error-"))
                            .map(|(k, v)| {
                                (k.to_string(), v.to_str().unwrap_or_default().to_string())
                            })
                            .collect();
                        if !errors.is_empty() {
                            dl.lock().unwrap().push((h("ce-id"), errors));
                        }
                    }
                    code
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            url,
            status,
            reject_subjects,
            max_latency_ms,
            taken,
            requests,
            dead_letters,
        }
    }

    pub fn taken_ids(&self) -> Vec<String> {
        self.taken
            .lock()
            .unwrap()
            .iter()
            .map(|t| t.0.clone())
            .collect()
    }
}

/// A herald config with webhook sinks `(name, url, extra yaml lines)` instead of the file sink.
pub fn webhook_config(sim: &Simulator, dir: &Path, sinks: &[(&str, &str, &str)]) -> String {
    let mut out = format!(
        "cluster:\n  name: test\n  kubeconfig:\n    path: {}\nresources:\n{WIDGETS_RESOURCE}\nsinks:\n",
        sim.kubeconfig_path().display()
    );
    for (name, url, extra) in sinks {
        out.push_str(&format!(
            "  - name: {name}\n    type: webhook\n    url: {url}\n    timeout: 2s\n{extra}"
        ));
    }
    out.push_str(&format!(
        "journal:\n  path: {}\n  flushInterval: 2ms\nadmin:\n  listen: 127.0.0.1:{}\n",
        dir.join("journal").display(),
        free_port()
    ));
    out
}
