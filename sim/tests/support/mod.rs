//! Helpers of the simulator's tests: a simulator per test, raw HTTP access to it, CRD fixtures, and
//! the kubectl runner. herald's tests (the top-level `tests/support`) include this file too, so it
//! uses nothing of the herald crate; each binary uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use futures::StreamExt;
use herald_sim::{SimConfig, Simulator};
use serde_json::{Value, json};

/// Starts a simulator on an ephemeral loopback port.
pub async fn sim() -> Simulator {
    sim_with(SimConfig::default()).await
}

/// Starts a simulator with `config` (its listen address forced to an ephemeral loopback port).
pub async fn sim_with(config: SimConfig) -> Simulator {
    // reqwest's rustls has no bundled crypto provider (the webhook sink enables rustls for the whole
    // workspace), so every test installs ring, herald's one, before any reqwest client exists.
    herald_sim::install_crypto_provider();
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
