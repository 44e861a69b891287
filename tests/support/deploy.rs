//! The offline tools of the deploy tests (tests/deploy.rs), found in one place: Helm, the Python
//! venv with helm_sdkpy, kubernetes-validate and checkov, and kubectl. `.ci/run` installs the first
//! two through `tests/deploy-tools/install` at the default paths below; `HERALD_HELM`,
//! `HERALD_DEPLOY_TOOLS` and `HERALD_KUBECTL` override them.
//!
//! A missing tool fails the test when `CI` is set (naming the tool and how CI installs it); on a
//! workstation the test prints why on stderr and returns early.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The chart's directory in the source tree.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/helm/herald")
}

/// The `deploy/` directory.
pub fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

fn home() -> PathBuf {
    PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".to_owned()))
}

/// A tool that is not there: fails in CI, otherwise says so and lets the test return.
fn missing(what: &str, path: &Path) -> Option<PathBuf> {
    let msg = format!(
        "deploy tool missing: {what} (looked at {}); `.ci/run` installs it with tests/deploy-tools/install",
        path.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{msg}");
    eprintln!("skipping: {msg}");
    None
}

fn found(what: &str, path: PathBuf) -> Option<PathBuf> {
    if path.is_file() {
        Some(path)
    } else {
        missing(what, &path)
    }
}

/// The Helm v4 binary (`HERALD_HELM`, default `~/.cache/herald/bin/helm`).
pub fn helm() -> Option<PathBuf> {
    let path = std::env::var_os("HERALD_HELM")
        .map(PathBuf::from)
        .unwrap_or_else(|| home().join(".cache/herald/bin/helm"));
    found("helm", path)
}

/// The deploy tools' venv (`HERALD_DEPLOY_TOOLS`, default `~/.cache/herald/deploy-tools`).
fn venv() -> PathBuf {
    std::env::var_os("HERALD_DEPLOY_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| home().join(".cache/herald/deploy-tools"))
}

/// The venv's Python (with helm_sdkpy and kubernetes_validate importable).
pub fn python() -> Option<PathBuf> {
    found("the deploy-tools venv's python", venv().join("bin/python"))
}

/// The venv's checkov.
pub fn checkov() -> Option<PathBuf> {
    found("checkov", venv().join("bin/checkov"))
}

/// kubectl (`HERALD_KUBECTL`, default: the first on PATH).
pub fn kubectl() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("HERALD_KUBECTL") {
        return found("kubectl", PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
        .or_else(|| missing("kubectl", Path::new("$PATH")))
}

/// What a tool run gave.
#[derive(Debug)]
pub struct Ran {
    /// Exit code; `None` when killed by a signal.
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Ran {
    /// Asserts exit 0, showing the command's output when not.
    pub fn ok(self, what: &str) -> Self {
        assert_eq!(
            self.code,
            Some(0),
            "{what} failed:\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }
}

/// Runs `cmd` to its end, killing it after `limit` (a hung tool fails the test instead of
/// holding the suite).
pub fn run(cmd: &mut Command, limit: Duration) -> Ran {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).ok();
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).ok();
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            child.kill().ok();
            child.wait().ok();
            panic!("{cmd:?} ran longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ran {
        code: status.code(),
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    }
}

/// `helm template herald <chart> -n herald -f <values>…`: the rendered manifests.
pub fn helm_template(helm: &Path, values: &[&Path], set: &[&str]) -> Ran {
    let mut cmd = Command::new(helm);
    cmd.args(["template", "herald"])
        .arg(chart_dir())
        .args(["--namespace", "herald"]);
    for v in values {
        cmd.arg("-f").arg(v);
    }
    for s in set {
        cmd.args(["--set", s]);
    }
    run(&mut cmd, Duration::from_secs(30))
}

/// The YAML documents of a multi-document text, empty ones left out.
pub fn documents(yaml: &str) -> Vec<serde_json::Value> {
    serde_yaml_ng::Deserializer::from_str(yaml)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &serde_json::Value| !v.is_null())
        .collect()
}
