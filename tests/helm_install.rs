//! Helm's own engine against the simulator (issue 17, items 1 and 3 without authentication): the real
//! Helm v4 binary and Helm's Go library (helm_sdkpy, driven by tests/helm/sdk.py) install, upgrade,
//! list and uninstall tests/fixtures/kinds-chart (one object of every built-in kind) over HTTP with a
//! kubeconfig. What is asserted is what the simulator stored: the objects with Helm's labels, the
//! changed value after the upgrade, the release Secrets `sh.helm.release.v1.<name>.v<N>`, and that
//! nothing is left after the uninstall.
//!
//! Helm and the venv come from `bash tests/deploy-tools/install` (`.ci/run` calls it). Without them
//! a test fails when `CI` is set and is skipped with a line on stderr otherwise.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::support::{Raw, sim};

const INSTALL_HINT: &str = "run `bash tests/deploy-tools/install`";

/// A deploy tool under `~/.cache/herald` (or the path in `env`), or `None` after a skip line.
fn tool(env: &str, under_cache: &str) -> Option<PathBuf> {
    let path = std::env::var_os(env).map_or_else(
        || {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/herald")
                .join(under_cache)
        },
        PathBuf::from,
    );
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{} is missing and CI is set: {INSTALL_HINT}",
        path.display()
    );
    let _ = writeln!(
        std::io::stderr(),
        "skipping: {} is missing ({INSTALL_HINT})",
        path.display()
    );
    None
}

fn helm_bin() -> Option<PathBuf> {
    tool("HERALD_HELM", "bin/helm")
}

pub(crate) fn deploy_python() -> Option<PathBuf> {
    tool("HERALD_DEPLOY_PYTHON", "deploy-tools/bin/python")
}

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kinds-chart")
}

/// Runs a command off the async runtime (the simulator serves on it) and returns its output.
pub(crate) async fn output(
    mut cmd: std::process::Command,
    stdin: Option<String>,
) -> std::process::Output {
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    tokio::task::spawn_blocking(move || {
        let mut child = cmd.spawn().expect("the tool starts");
        let mut pipe = child.stdin.take().expect("stdin");
        if let Some(s) = stdin {
            pipe.write_all(s.as_bytes()).expect("write stdin");
        }
        drop(pipe);
        child.wait_with_output().expect("the tool ends")
    })
    .await
    .expect("join")
}

/// The Helm CLI with private cache/config/data directories, against the simulator's kubeconfig.
struct Helm {
    bin: PathBuf,
    kubeconfig: PathBuf,
    home: tempfile::TempDir,
}

impl Helm {
    async fn ok(&self, args: &[&str]) -> String {
        let mut cmd = std::process::Command::new(&self.bin);
        for (var, dir) in [
            ("HELM_CACHE_HOME", "cache"),
            ("HELM_CONFIG_HOME", "config"),
            ("HELM_DATA_HOME", "data"),
        ] {
            cmd.env(var, self.home.path().join(dir));
        }
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        let out = output(cmd, None).await;
        assert!(
            out.status.success(),
            "helm {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// Every object the chart makes for `release` in `ns`, as API paths.
fn chart_objects(ns: &str, release: &str) -> Vec<String> {
    let core = format!("/api/v1/namespaces/{ns}");
    let apps = format!("/apis/apps/v1/namespaces/{ns}");
    let rbac = "/apis/rbac.authorization.k8s.io/v1";
    vec![
        format!("{core}/serviceaccounts/{release}"),
        format!("{core}/configmaps/{release}"),
        format!("{core}/secrets/{release}"),
        format!("{core}/services/{release}"),
        format!("{core}/services/{release}-headless"),
        format!("{apps}/deployments/{release}"),
        format!("{apps}/statefulsets/{release}"),
        format!("{rbac}/namespaces/{ns}/roles/{release}"),
        format!("{rbac}/namespaces/{ns}/rolebindings/{release}"),
        format!("{rbac}/clusterroles/{ns}-{release}"),
        format!("{rbac}/clusterrolebindings/{ns}-{release}"),
        format!("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{release}"),
    ]
}

/// The release Secrets of `release`, found as Helm finds them (`owner=helm,name=<release>`).
async fn release_secrets(raw: &Raw, ns: &str, release: &str) -> Vec<Value> {
    let r = raw
        .get(&format!(
            "/api/v1/namespaces/{ns}/secrets?labelSelector=owner%3Dhelm%2Cname%3D{release}"
        ))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["items"].as_array().unwrap().clone()
}

/// Asserts the release is installed at `revision` with `greeting` as its value.
async fn assert_installed(raw: &Raw, ns: &str, release: &str, greeting: &str, revision: usize) {
    for path in chart_objects(ns, release) {
        let r = raw.get(&path).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        let meta = &r.body["metadata"];
        assert_eq!(
            meta["labels"]["app.kubernetes.io/managed-by"], "Helm",
            "{path}"
        );
        assert_eq!(meta["annotations"]["meta.helm.sh/release-name"], release);
        assert_eq!(meta["annotations"]["meta.helm.sh/release-namespace"], ns);
    }
    let get = |p: String| async move { raw.get(&p).await.body };
    let cm = get(format!("/api/v1/namespaces/{ns}/configmaps/{release}")).await;
    assert_eq!(cm["data"]["greeting"], greeting);
    let secret = get(format!("/api/v1/namespaces/{ns}/secrets/{release}")).await;
    assert_eq!(
        secret["data"]["greeting"],
        base64::engine::general_purpose::STANDARD.encode(greeting)
    );
    assert!(secret.get("stringData").is_none());
    let deploy = get(format!(
        "/apis/apps/v1/namespaces/{ns}/deployments/{release}"
    ))
    .await;
    assert_eq!(
        deploy["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"],
        greeting
    );
    let svc = get(format!("/api/v1/namespaces/{ns}/services/{release}")).await;
    assert!(
        svc["spec"]["clusterIP"]
            .as_str()
            .is_some_and(|ip| ip.starts_with("10.9")),
        "{svc}"
    );

    let secrets = release_secrets(raw, ns, release).await;
    let mut names: Vec<&str> = secrets
        .iter()
        .map(|s| s["metadata"]["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    let expected: Vec<String> = (1..=revision)
        .map(|v| format!("sh.helm.release.v1.{release}.v{v}"))
        .collect();
    assert_eq!(names, expected);
    for s in &secrets {
        assert_eq!(s["type"], "helm.sh/release.v1");
        let version = s["metadata"]["labels"]["version"].as_str().unwrap();
        let status = if version == revision.to_string() {
            "deployed"
        } else {
            "superseded"
        };
        assert_eq!(s["metadata"]["labels"]["status"], status, "{version}");
    }
}

async fn assert_uninstalled(raw: &Raw, ns: &str, release: &str) {
    for path in chart_objects(ns, release) {
        assert_eq!(raw.get(&path).await.status, 404, "{path} is gone");
    }
    assert!(release_secrets(raw, ns, release).await.is_empty());
}

/// The Helm CLI: install, upgrade with a changed value, list, status, uninstall. `server_side` is
/// passed to install (Helm v4 defaults to server-side apply; `false` takes the client-side path,
/// whose upgrade sends strategic merge patches); the upgrade keeps the release's method.
async fn helm_cli_round_trip(server_side: &str, ns: &str) {
    let Some(bin) = helm_bin() else { return };
    let sim = sim().await;
    let raw = Raw::new(&sim);
    let helm = Helm {
        bin,
        kubeconfig: sim.kubeconfig_path().to_path_buf(),
        home: tempfile::tempdir().unwrap(),
    };
    let chart = chart();
    let chart = chart.to_str().unwrap();
    let install_flag = format!("--server-side={server_side}");
    // Outside `default` Helm creates the namespace first (`--create-namespace`).
    helm.ok(&[
        "install",
        "demo",
        chart,
        "-n",
        ns,
        "--create-namespace",
        "--wait=false",
        &install_flag,
    ])
    .await;
    assert_installed(&raw, ns, "demo", "hello", 1).await;

    helm.ok(&[
        "upgrade",
        "demo",
        chart,
        "-n",
        ns,
        "--wait=false",
        "--set",
        "greeting=bonjour",
    ])
    .await;
    assert_installed(&raw, ns, "demo", "bonjour", 2).await;

    let list: Value = serde_json::from_str(&helm.ok(&["list", "-n", ns, "-o", "json"]).await)
        .expect("helm list prints JSON");
    assert_eq!(list[0]["name"], "demo");
    assert_eq!(list[0]["revision"], "2");
    assert_eq!(list[0]["status"], "deployed");
    let status: Value =
        serde_json::from_str(&helm.ok(&["status", "demo", "-n", ns, "-o", "json"]).await)
            .expect("helm status prints JSON");
    assert_eq!(status["info"]["status"], "deployed");
    assert_eq!(status["version"], 2);

    helm.ok(&["uninstall", "demo", "-n", ns, "--wait=false"])
        .await;
    assert_uninstalled(&raw, ns, "demo").await;
    assert_eq!(helm.ok(&["list", "-n", ns, "-q"]).await.trim(), "");
}

#[tokio::test]
async fn helm_installs_upgrades_and_uninstalls_with_server_side_apply() {
    helm_cli_round_trip("true", "apps").await;
}

#[tokio::test]
async fn helm_installs_upgrades_and_uninstalls_client_side() {
    helm_cli_round_trip("false", "default").await;
}

/// One action of tests/helm/sdk.py (Helm's Go library through helm_sdkpy); returns its result.
async fn sdk(python: &Path, kubeconfig: &Path, action: &str, values: Value) -> Value {
    let release = Release {
        namespace: "apps",
        name: "lib",
        chart: &chart(),
    };
    sdk_release(python, kubeconfig, &release, action, values).await
}

/// A Helm release: where, what name, which chart.
pub(crate) struct Release<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) name: &'a str,
    pub(crate) chart: &'a Path,
}

/// One action of tests/helm/sdk.py on `release`; returns its result.
pub(crate) async fn sdk_release(
    python: &Path,
    kubeconfig: &Path,
    release: &Release<'_>,
    action: &str,
    values: Value,
) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/helm/sdk.py");
    let request = json!({
        "kubeconfig": kubeconfig, "namespace": release.namespace, "release": release.name,
        "chart": release.chart, "action": action, "values": values,
        // helm_sdkpy's own default for install: client-side apply.
        "server_side": false,
    });
    let mut cmd = std::process::Command::new(python);
    cmd.arg(&script);
    let out = output(cmd, Some(request.to_string())).await;
    assert!(
        out.status.success(),
        "sdk.py {action} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_slice(&out.stdout).expect("sdk.py prints JSON");
    assert_eq!(answer["ok"], true, "sdk.py {action}: {answer}");
    answer["result"].clone()
}

#[tokio::test]
async fn helm_sdkpy_installs_upgrades_and_uninstalls() {
    let Some(python) = deploy_python() else {
        return;
    };
    let sim = sim().await;
    let raw = Raw::new(&sim);
    let ns_created = raw
        .post(
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}),
        )
        .await;
    assert_eq!(ns_created.status, 201);
    let kc = sim.kubeconfig_path();

    let installed = sdk(&python, kc, "install", json!({})).await;
    assert_eq!(installed["info"]["status"], "deployed");
    assert_installed(&raw, "apps", "lib", "hello", 1).await;

    let upgraded = sdk(&python, kc, "upgrade", json!({"greeting": "hola"})).await;
    assert_eq!(upgraded["info"]["status"], "deployed");
    assert_installed(&raw, "apps", "lib", "hola", 2).await;
    let listed = sdk(&python, kc, "list", json!({})).await;
    assert_eq!(listed[0]["name"], "lib");

    sdk(&python, kc, "uninstall", json!({})).await;
    assert_uninstalled(&raw, "apps", "lib").await;
}
