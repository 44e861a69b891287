//! The install proved end to end (issue 17, item 3): Helm's own engine (helm_sdkpy) installs, upgrades
//! and uninstalls the real chart deploy/helm/herald into the simulator; herald then runs with the
//! configuration the chart rendered (read back from its ConfigMap) and exactly the identity the chart
//! gives it: a TokenRequest token for the chart's ServiceAccount, which the simulator's RBAC
//! authorizer holds to the chart's ClusterRole. With one verb removed from that role the API answers
//! 403 and `herald check --connect` and `/readyz` name the missing verb and resource; Secrets are out
//! of the ServiceAccount's reach. And `herald rbac`'s output alone lets herald run.
//!
//! Helm's Go library comes from the deploy-tools venv (`bash tests/deploy-tools/install`, which
//! `.ci/run` calls); kubectl from PATH. Without them a test fails under `CI` and is skipped otherwise.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::helm_install::{Release, deploy_python, sdk_release};
use crate::support::{
    Herald, Kubectl, Raw, free_port, id_of, ids, kubectl_path, sim, widget, widgets_crd,
};

/// A kubeconfig for `server` that authenticates with `token`.
fn token_kubeconfig(dir: &Path, server: &str, token: &str) -> PathBuf {
    let path = dir.join("token.kubeconfig");
    let doc = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "sim", "cluster": {"server": server}}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "sim", "user": "sa"}}],
        "current-context": "sa",
    });
    std::fs::write(&path, doc.to_string()).unwrap();
    path
}

/// A TokenRequest for the ServiceAccount `ns/name`.
async fn create_token(raw: &Raw, ns: &str, name: &str) -> String {
    let r = raw
        .post(
            &format!("/api/v1/namespaces/{ns}/serviceaccounts/{name}/token"),
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
        )
        .await;
    assert_eq!(r.status, 201, "TokenRequest for {ns}/{name}: {}", r.body);
    r.body["status"]["token"].as_str().unwrap().to_string()
}

/// `GET path` on the simulator with `token` as the bearer: status and body.
async fn get_as(raw: &Raw, token: &str, path: &str) -> (u16, Value) {
    let resp = raw
        .http
        .get(format!("{}{path}", raw.base))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// herald's configuration as the chart rendered it (`herald.yaml` of the ConfigMap), switched from
/// `inCluster: true` to `kubeconfig`, its journal moved into `dir` and its admin endpoint kept on
/// `${POD_IP}` (the test sets POD_IP) with a free port. Returns the YAML and the admin address.
fn from_configmap(cm: &Value, kubeconfig: &Path, dir: &Path) -> (String, String) {
    let rendered = cm["data"]["herald.yaml"]
        .as_str()
        .expect("herald.yaml in the ConfigMap");
    let mut cfg: Value = serde_yaml_ng::from_str(rendered).unwrap();
    assert_eq!(cfg["cluster"]["inCluster"], true, "{rendered}");
    let cluster = cfg["cluster"].as_object_mut().unwrap();
    cluster.remove("inCluster");
    cluster.insert("kubeconfig".into(), json!({"path": kubeconfig}));
    cfg["journal"]["path"] = json!(dir.join("journal"));
    let listen = cfg["admin"]["listen"].as_str().unwrap().to_string();
    assert!(listen.starts_with("${POD_IP}:"), "{listen}");
    let port = free_port();
    cfg["admin"]["listen"] = json!(format!("${{POD_IP}}:{port}"));
    (
        serde_yaml_ng::to_string(&cfg).unwrap(),
        format!("127.0.0.1:{port}"),
    )
}

/// `herald run` on `config` in `dir` with POD_IP=127.0.0.1, as the chart's pod has its IP.
fn run_herald(dir: &Path, config: &str) -> Herald {
    let config_path = dir.join("herald.yaml");
    std::fs::write(&config_path, config).unwrap();
    let stderr = dir.join("herald.stderr");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["run", "-c"])
        .arg(&config_path)
        .env("POD_IP", "127.0.0.1")
        .env("RUST_LOG", "info,herald=debug")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .expect("herald starts");
    Herald {
        child: Some(child),
        config: config_path,
        events: dir.join("events.jsonl"),
        stderr,
        bin: None,
        args: vec![],
    }
}

/// Creates Widgets `names` in `ns` (as the all-powerful client) and returns their `created` ids.
async fn create_widgets(raw: &Raw, ns: &str, names: &[&str]) -> Vec<String> {
    let mut ids = Vec::new();
    for name in names {
        let r = raw
            .post(&format!("/apis/example.com/v1/namespaces/{ns}/widgets"), &{
                let mut w = widget(name, json!({}), json!({"size": 1}));
                w["metadata"]["namespace"] = json!(ns);
                w
            })
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        ids.push(id_of(&r.body, "created"));
    }
    ids
}

/// `/readyz` of herald at `addr`: status and body (0 while nothing answers).
async fn readyz(addr: &str) -> (u16, String) {
    match reqwest::get(format!("http://{addr}/readyz")).await {
        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
        Err(_) => (0, String::new()),
    }
}

const SA_USER: &str = "system:serviceaccount:herald:herald";

#[tokio::test]
async fn helm_installs_the_chart_and_herald_runs_with_its_service_account() {
    let Some(python) = deploy_python() else {
        return;
    };
    let sim = sim().await;
    let raw = Raw::new(&sim);
    let dir = tempfile::tempdir().unwrap();
    raw.install_crd(&widgets_crd()).await;
    let r = raw
        .post(
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "herald"}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);

    let chart = crate::support::deploy::chart_dir();
    let release = Release {
        namespace: "herald",
        name: "herald",
        chart: &chart,
    };
    let values = |events: &str| {
        json!({"config": {
            "resources": [{"group": "example.com", "kind": "Widget"}],
            "sinks": [{"name": "out", "type": "file", "path": dir.path().join(events), "fsync": "always"}],
            "journal": {"flushInterval": "2ms"},
        }})
    };
    let kc = sim.kubeconfig_path();
    let installed = sdk_release(&python, kc, &release, "install", values("first.jsonl")).await;
    assert_eq!(installed["info"]["status"], "deployed", "{installed}");
    let cm_path = "/api/v1/namespaces/herald/configmaps/herald";
    let cm = raw.get(cm_path).await;
    assert_eq!(cm.status, 200, "{}", cm.body);
    assert!(
        cm.body["data"]["herald.yaml"]
            .as_str()
            .unwrap()
            .contains("first.jsonl")
    );

    // Upgrade with a changed value: the ConfigMap follows.
    let upgraded = sdk_release(&python, kc, &release, "upgrade", values("events.jsonl")).await;
    assert_eq!(upgraded["info"]["status"], "deployed", "{upgraded}");
    assert_eq!(upgraded["version"], 2, "{upgraded}");
    let cm = raw.get(cm_path).await;
    let rendered = cm.body["data"]["herald.yaml"].as_str().unwrap();
    assert!(
        rendered.contains("events.jsonl") && !rendered.contains("first.jsonl"),
        "{rendered}"
    );

    // The ServiceAccount the chart's StatefulSet runs as, and a token for it.
    let sts = raw
        .get("/apis/apps/v1/namespaces/herald/statefulsets/herald")
        .await;
    assert_eq!(sts.status, 200, "{}", sts.body);
    let sa = sts.body["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(sa, "herald");
    let token = create_token(&raw, "herald", &sa).await;
    let token_kc = token_kubeconfig(dir.path(), &sim.url(), &token);

    // herald with the rendered configuration and only the chart's identity watches and delivers.
    let (config, admin) = from_configmap(&cm.body, &token_kc, dir.path());
    let mut herald = run_herald(dir.path(), &config);
    let mut want = create_widgets(&raw, "default", &["a", "b"]).await;
    let got = herald.wait_for(2).await;
    assert_eq!(ids(&got), want);
    want.extend(create_widgets(&raw, "default", &["c"]).await);
    let got = herald.wait_for(3).await;
    assert_eq!(ids(&got), want, "live events after the initial list");

    // The chart's ServiceAccount cannot read Secrets (Helm's release Secrets are in its namespace).
    let (code, body) = get_as(&raw, &token, "/api/v1/namespaces/herald/secrets").await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        format!(
            "secrets is forbidden: User \"{SA_USER}\" cannot list resource \"secrets\" in API group \"\" in the namespace \"herald\""
        )
    );
    let (code, body) = get_as(
        &raw,
        &token,
        "/api/v1/namespaces/herald/secrets/sh.helm.release.v1.herald.v2",
    )
    .await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["details"]["name"], "sh.helm.release.v1.herald.v2");

    // Remove `watch` from the chart's ClusterRole: the API answers 403 to a watch.
    let role_path = "/apis/rbac.authorization.k8s.io/v1/clusterroles/herald";
    let mut role = raw.get(role_path).await.body;
    let mut removed = false;
    for rule in role["rules"].as_array_mut().unwrap() {
        if let Some(verbs) = rule["verbs"].as_array_mut() {
            let before = verbs.len();
            verbs.retain(|v| v != "watch");
            removed |= verbs.len() != before;
        }
    }
    assert!(removed, "the chart's ClusterRole grants watch: {role}");
    let r = raw.put(role_path, &role).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let (code, body) = get_as(&raw, &token, "/apis/example.com/v1/widgets?watch=true").await;
    assert_eq!(code, 403, "{body}");
    let refusal = format!(
        "widgets.example.com is forbidden: User \"{SA_USER}\" cannot watch resource \"widgets\" in API group \"example.com\" at the cluster scope"
    );
    assert_eq!(body["message"], refusal.as_str());

    // herald's next watch is refused: /readyz names the verb and the resource.
    sim.drop_watches();
    let started = std::time::Instant::now();
    loop {
        let (code, text) = readyz(&admin).await;
        if code == 503 && text.contains(&refusal) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "/readyz never named the refusal; last {code}: {text}\n--- herald stderr ---\n{}",
            herald.stderr_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // `herald check --connect` with the same identity names them too.
    let out = tokio::task::spawn_blocking({
        let config = herald.config.clone();
        move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
                .args(["check", "--connect", "-c"])
                .arg(&config)
                .env("POD_IP", "127.0.0.1")
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("resources[0]: herald may not watch widgets.example.com/v1 (RBAC)"),
        "{stderr}"
    );
    assert!(!stderr.contains("may not list"), "{stderr}");
    herald.terminate().await;

    // Uninstall: the chart's objects are gone, and with its ServiceAccount the token.
    sdk_release(&python, kc, &release, "uninstall", json!({})).await;
    for path in [
        cm_path,
        role_path,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/herald",
        "/api/v1/namespaces/herald/serviceaccounts/herald",
        "/apis/apps/v1/namespaces/herald/statefulsets/herald",
    ] {
        assert_eq!(raw.get(path).await.status, 404, "{path} after uninstall");
    }
    let (code, body) = get_as(&raw, &token, "/apis").await;
    assert_eq!(code, 401, "{body}");
    sim.shutdown().await;
}

#[tokio::test]
async fn herald_rbac_output_alone_lets_herald_run() {
    let Some(kubectl) = kubectl_path() else {
        return;
    };
    let sim = sim().await;
    let raw = Raw::new(&sim);
    let dir = tempfile::tempdir().unwrap();
    raw.install_crd(&widgets_crd()).await;
    for (path, doc) in [
        (
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ops"}}),
        ),
        (
            "/api/v1/namespaces/ops/serviceaccounts",
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "watcher"}}),
        ),
    ] {
        let r = raw.post(path, &doc).await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let token = create_token(&raw, "ops", "watcher").await;
    let token_kc = token_kubeconfig(dir.path(), &sim.url(), &token);
    let admin = format!("127.0.0.1:{}", free_port());
    let config = format!(
        "cluster:\n  name: test\n  kubeconfig:\n    path: {kc}\nresources:\n  - group: example.com\n    kind: Widget\n\
         sinks:\n  - name: out\n    type: file\n    path: {events}\n    fsync: always\n\
         journal:\n  path: {journal}\n  flushInterval: 2ms\nadmin:\n  listen: {admin}\n",
        kc = token_kc.display(),
        events = dir.path().join("events.jsonl").display(),
        journal = dir.path().join("journal").display(),
    );
    let config_path = dir.path().join("herald.yaml");
    std::fs::write(&config_path, &config).unwrap();

    // Before the RBAC objects exist the token may not even list Widgets.
    let (code, body) = get_as(&raw, &token, "/apis/example.com/v1/widgets").await;
    assert_eq!(code, 403, "{body}");

    let printed = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args([
            "rbac",
            "--service-account",
            "watcher",
            "--namespace",
            "ops",
            "-c",
        ])
        .arg(&config_path)
        .output()
        .unwrap();
    assert!(
        printed.status.success(),
        "{}",
        String::from_utf8_lossy(&printed.stderr)
    );
    let kubectl = Kubectl::new(kubectl, sim.kubeconfig_path());
    kubectl
        .ok_with_stdin(
            &["apply", "-f", "-"],
            &String::from_utf8_lossy(&printed.stdout),
        )
        .await;

    let mut herald = run_herald(dir.path(), &config);
    let want = create_widgets(&raw, "default", &["x", "y"]).await;
    let got = herald.wait_for(2).await;
    assert_eq!(ids(&got), want);
    let mut live = want.clone();
    live.extend(create_widgets(&raw, "ops", &["z"]).await);
    assert_eq!(ids(&herald.wait_for(3).await), live);
    let (code, text) = readyz(&admin).await;
    assert_eq!(code, 200, "{text}");
    herald.terminate().await;
    sim.shutdown().await;
}
