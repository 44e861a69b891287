//! Shared helpers: a `herald run` child process and its configurations, a webhook receiver, and
//! (from the simulator's test support, included below) a simulator per test, raw HTTP access to it,
//! CRD fixtures and the kubectl runner.

pub mod alertmanager;
pub mod api_receiver;
pub mod deploy;
pub mod kafka;
pub mod nats;
pub mod raw_receiver;
// The simulator's own tests and herald's share these helpers: one file, compiled into both binaries.
#[path = "../../sim/tests/support/mod.rs"]
mod sim_support;

pub use sim_support::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use herald_sim::Simulator;
use serde_json::Value;

/// A `herald run` child process with a file sink, and readers for what it delivered.
pub struct Herald {
    pub child: Option<std::process::Child>,
    pub config: PathBuf,
    pub events: PathBuf,
    pub stderr: PathBuf,
    /// The herald binary to run (`None`: this build's).
    pub bin: Option<PathBuf>,
    /// Options passed to `herald run` after `-c <config>`.
    pub args: Vec<String>,
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

/// A loopback port nobody listens on right now, below the kernel's ephemeral range (32768 up).
///
/// Tests write the port into a config and start herald on it later, often more than once: a port
/// the kernel handed out as ephemeral could meanwhile be taken as the source port of any other
/// test's outgoing connection, and herald's bind then fails (`Address already in use`).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 10_000;
    const SPAN: u32 = 22_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    // Each test process starts at its own place in the range, so parallel tests rarely meet.
    let seed = std::process::id().wrapping_mul(2_654_435_761)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    let _ = NEXT.compare_exchange(u32::MAX, seed % SPAN, Ordering::AcqRel, Ordering::Acquire);
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::AcqRel) % SPAN;
        let port = u16::try_from(FIRST + n).expect("below 32768");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port between {FIRST} and {}", FIRST + SPAN);
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
        Self::start_with(dir, config, &[])
    }

    /// [`Herald::start`] with more options for `herald run`.
    pub fn start_with(dir: &Path, config: &str, args: &[&str]) -> Self {
        Self::start_bin(dir, config, None, args)
    }

    /// As [`Herald::start_with`], running the herald binary at `bin` (`None`: this build's), so a
    /// measurement can compare two builds in one scenario.
    pub fn start_bin(dir: &Path, config: &str, bin: Option<&str>, args: &[&str]) -> Self {
        let config_path = dir.join("herald.yaml");
        std::fs::write(&config_path, config).expect("write config");
        let mut h = Self {
            child: None,
            config: config_path,
            events: dir.join("events.jsonl"),
            stderr: dir.join("herald.stderr"),
            bin: bin.map(PathBuf::from),
            args: args.iter().map(|a| (*a).to_string()).collect(),
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
        let bin = self
            .bin
            .clone()
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_herald")));
        let child = Command::new(bin)
            .args(["run", "-c"])
            .arg(&self.config)
            .args(&self.args)
            .env("RUST_LOG", "info,herald=debug")
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("herald starts");
        self.child = Some(child);
    }

    /// What herald wrote to stderr so far (for failure messages).
    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Polls `f` every 50 ms for up to `secs` seconds; panics naming `what`, with herald's stderr,
    /// if it never holds.
    pub async fn until(&self, secs: u64, what: &str, mut f: impl AsyncFnMut() -> bool) {
        let started = std::time::Instant::now();
        while !f().await {
            assert!(
                started.elapsed() < Duration::from_secs(secs),
                "{what} did not happen within {secs}s\n--- herald stderr ---\n{}",
                self.stderr_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every event delivered so far, in file order.
    ///
    /// Only complete lines count: the file sink's buffered writes can leave the last line half
    /// written at the moment a test reads the file.
    pub fn delivered(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.events)
            .unwrap_or_default()
            .split_inclusive('\n')
            .filter_map(|l| l.strip_suffix('\n'))
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

    /// Waits until herald's stderr holds `needle`: a point in its start-up (say, its first list
    /// is done) that a test must not race with a fixed sleep. Panics after 20 s.
    pub async fn wait_for_log(&self, needle: &str) {
        let started = std::time::Instant::now();
        while !std::fs::read_to_string(&self.stderr)
            .unwrap_or_default()
            .contains(needle)
        {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "herald never logged {needle:?}\n--- herald stderr ---\n{}",
                std::fs::read_to_string(&self.stderr).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
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
    /// Every taken event decoded with sink-core's decoder for its content mode (binary,
    /// structured or batch), in arrival order; a request that does not decode is an `Err` with why.
    pub events: std::sync::Arc<std::sync::Mutex<Vec<Result<herald_sink_core::CloudEvent, String>>>>,
}

impl Receiver {
    pub async fn start() -> Self {
        Self::start_on(0).await
    }

    /// A receiver on `127.0.0.1:port` (a port herald was already told about; 0 picks one).
    pub async fn start_on(port: u16) -> Self {
        use std::sync::atomic::Ordering;
        let status = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(204));
        let reject_subjects = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let max_latency_ms = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let taken = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let requests = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let dead_letters = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (st, rj, lat, tk, rq, dl, ev) = (
            status.clone(),
            reject_subjects.clone(),
            max_latency_ms.clone(),
            taken.clone(),
            requests.clone(),
            dead_letters.clone(),
            events.clone(),
        );
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let (st, rj, lat, tk, rq, dl, ev) = (
                        st.clone(),
                        rj.clone(),
                        lat.clone(),
                        tk.clone(),
                        rq.clone(),
                        dl.clone(),
                        ev.clone(),
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
                        let code =
                            axum::http::StatusCode::from_u16(st.load(Ordering::SeqCst)).unwrap();
                        if code.is_success() {
                            tk.lock().unwrap().push((
                                h("ce-id"),
                                h("ce-subject"),
                                h("ce-sequence"),
                            ));
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
                            ev.lock().unwrap().extend(decode_request(&headers, &body));
                        }
                        code
                    }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
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
            events,
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

/// The events of one webhook request, decoded as its content type says.
fn decode_request(
    headers: &axum::http::HeaderMap,
    body: &[u8],
) -> Vec<Result<herald_sink_core::CloudEvent, String>> {
    use herald_sink_core::{CloudEvent, Mode, encode};
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok());
    let err = |e: encode::DecodeError| herald_sink_core::error_chain(&e);
    match Mode::from_content_type(content_type) {
        Mode::Binary => vec![
            encode::http_binary_decode(
                headers.iter().map(|(k, v)| (k.as_str(), v.as_bytes())),
                body,
            )
            .map_err(err),
        ],
        Mode::Structured => vec![CloudEvent::from_structured_json(body).map_err(err)],
        Mode::Batch => match encode::from_structured_json_batch(body) {
            Ok(events) => events.into_iter().map(Ok).collect(),
            Err(e) => vec![Err(err(e))],
        },
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

/// The `id` of each event, in order.
pub fn ids(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect()
}

/// The CloudEvent id herald gives `op` of `obj` as the API server returned it:
/// `<uid>:<resourceVersion>:<op>`.
pub fn id_of(obj: &Value, op: &str) -> String {
    format!(
        "{}:{}:{op}",
        obj["metadata"]["uid"].as_str().unwrap(),
        obj["metadata"]["resourceVersion"].as_str().unwrap()
    )
}

/// An admin endpoint's answer to `GET path`: status and body, `(0, "")` when nothing answers.
pub async fn admin_get(addr: &str, path: &str) -> (u16, String) {
    match reqwest::get(format!("http://{addr}{path}")).await {
        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
        Err(_) => (0, String::new()),
    }
}

/// [`admin_get`], retried every 50 ms while herald starts; panics when nothing answers within
/// `secs` seconds.
pub async fn admin_get_retrying(addr: &str, path: &str, secs: u64) -> (u16, String) {
    let started = std::time::Instant::now();
    loop {
        match reqwest::get(format!("http://{addr}{path}")).await {
            Ok(r) => return (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(e) => {
                assert!(
                    started.elapsed() < Duration::from_secs(secs),
                    "admin endpoint unreachable: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
