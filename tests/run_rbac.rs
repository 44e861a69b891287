//! `herald rbac`: offline output, the plural warning, the `--namespace-scoped` refusal, and
//! `--connect` resolving plurals through discovery against the simulator.

use serde_json::Value;

use crate::support::{Raw, crd, herald_config, sim};

/// Runs `herald rbac -c <config> <extra>`: exit code, stdout, stderr.
fn rbac(dir: &std::path::Path, config: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let path = dir.join("rbac.yaml");
    std::fs::write(&path, config).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["rbac", "-c"])
        .arg(&path)
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A configuration with `resources` and a file sink, no cluster needed.
fn offline_config(dir: &std::path::Path, resources: &str) -> String {
    format!(
        "resources:\n{resources}\nsinks:\n  - name: out\n    type: file\n    path: {}\n",
        dir.join("events.jsonl").display()
    )
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(yaml)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

/// Every printed object read back as its Kubernetes type (k8s-openapi) gives the same document again:
/// required fields are there and no field is misspelt. Then, with kubectl on PATH (required in CI),
/// `kubectl label --local` must read the file: `kubectl create --dry-run=client` would need a server
/// for its type mapping, and the simulator serves no RBAC API.
fn kubectl_accepts(dir: &std::path::Path, yaml: &str) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    fn again<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &Value) -> Value {
        let typed: T = serde_json::from_value(doc.clone()).unwrap();
        serde_json::to_value(typed).unwrap()
    }
    let docs = documents(yaml);
    for doc in &docs {
        let back = match doc["kind"].as_str().unwrap() {
            "ClusterRole" => again::<ClusterRole>(doc),
            "ClusterRoleBinding" => again::<ClusterRoleBinding>(doc),
            "Role" => again::<Role>(doc),
            "RoleBinding" => again::<RoleBinding>(doc),
            other => panic!("unexpected kind {other}"),
        };
        assert_eq!(&back, doc);
    }
    let file = dir.join("printed.yaml");
    std::fs::write(&file, yaml).unwrap();
    let out = std::process::Command::new("kubectl")
        .args(["label", "--local", "-o", "json", "-f"])
        .arg(&file)
        .arg("herald.dev/probe=1")
        .output();
    match out {
        Ok(out) => {
            assert!(
                out.status.success(),
                "kubectl refused the printed RBAC: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let read: Vec<Value> = serde_json::Deserializer::from_slice(&out.stdout)
                .into_iter::<Value>()
                .map(Result::unwrap)
                .flat_map(|v| match v["kind"].as_str() {
                    Some("List") => v["items"].as_array().cloned().unwrap_or_default(),
                    _ => vec![v],
                })
                .collect();
            let kinds = |v: &[Value]| v.iter().map(|d| d["kind"].clone()).collect::<Vec<_>>();
            assert_eq!(kinds(&read), kinds(&docs));
        }
        Err(e) => assert!(
            std::env::var_os("CI").is_none(),
            "kubectl is needed in CI: {e}"
        ),
    }
}

#[test]
fn offline_prints_a_cluster_role_and_warns_about_guessed_plurals() {
    let dir = tempfile::tempdir().unwrap();
    let config = offline_config(
        dir.path(),
        "  - group: example.com\n    kind: Policy\n  - group: example.com\n    kind: Octopus\n    plural: octopi\n    namespaces: {selector: team=pay}",
    );
    let (code, stdout, stderr) = rbac(
        dir.path(),
        &config,
        &["--service-account", "h", "--namespace", "ops"],
    );
    assert_eq!(code, Some(herald::exit_code::OK), "{stderr}");
    assert!(
        stderr.contains(
            r#"resources[0]: no plural configured; assuming "policies" for kind "Policy""#
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("resources[1]"), "{stderr}");
    let docs = documents(&stdout);
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ClusterRole", "ClusterRoleBinding"]);
    assert_eq!(
        docs[0]["rules"],
        serde_json::json!([
            {"apiGroups": ["example.com"], "resources": ["octopi", "policies"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]},
        ])
    );
    assert_eq!(
        docs[1]["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": "h", "namespace": "ops"}])
    );
    assert_eq!(docs[1]["roleRef"]["name"], "h");
    kubectl_accepts(dir.path(), &stdout);

    let (code, json, _) = rbac(dir.path(), &config, &["--json"]);
    assert_eq!(code, Some(herald::exit_code::OK));
    let list: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"][0]["rules"], docs[0]["rules"]);
}

#[test]
fn namespace_scoped_prints_roles_or_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let listed = offline_config(
        dir.path(),
        "  - group: example.com\n    plural: widgets\n    namespaces: [a, b]",
    );
    let (code, stdout, stderr) = rbac(dir.path(), &listed, &["--namespace-scoped"]);
    assert_eq!(code, Some(herald::exit_code::OK), "{stderr}");
    let docs = documents(&stdout);
    let placed: Vec<(&str, &str)> = docs
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap(),
                d["metadata"]["namespace"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        placed,
        [
            ("Role", "a"),
            ("RoleBinding", "a"),
            ("Role", "b"),
            ("RoleBinding", "b")
        ]
    );
    kubectl_accepts(dir.path(), &stdout);

    for (namespaces, why) in [
        ("all", "resources[0].namespaces: watches all namespaces"),
        (
            "{selector: a=b}",
            "resources[0].namespaces: a namespace selector",
        ),
    ] {
        let config = offline_config(
            dir.path(),
            &format!("  - group: example.com\n    plural: widgets\n    namespaces: {namespaces}"),
        );
        let (code, stdout, stderr) = rbac(dir.path(), &config, &["--namespace-scoped"]);
        assert_eq!(code, Some(herald::exit_code::CONFIG_INVALID), "{stderr}");
        assert!(stderr.contains(why), "{stderr}");
        assert!(stdout.is_empty(), "{stdout}");
    }
}

#[tokio::test]
async fn connect_takes_plurals_and_scopes_from_discovery() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    // Irregular plural: the conventional guess (`octopus` + `es`) would grant the wrong resource.
    let config = herald_config(
        &sim,
        dir.path(),
        "  - group: example.com\n    kind: Octopus\n    namespaces: [a]",
    );
    let d = dir.path().to_owned();
    let c = config.clone();
    let (code, _, stderr) = tokio::task::spawn_blocking(move || rbac(&d, &c, &["--connect"]))
        .await
        .unwrap();
    assert_eq!(
        code,
        Some(herald::exit_code::HEALTHCHECK_FAILED),
        "{stderr}"
    );
    assert!(stderr.contains(r#"unknown kind "Octopus""#), "{stderr}");

    Raw::new(&sim)
        .install_crd(&crd(
            "example.com",
            "octopi",
            "Octopus",
            "Namespaced",
            &[("v1", true, true)],
        ))
        .await;
    let d = dir.path().to_owned();
    let c = config.clone();
    let (code, stdout, stderr) =
        tokio::task::spawn_blocking(move || rbac(&d, &c, &["--connect", "--namespace-scoped"]))
            .await
            .unwrap();
    assert_eq!(code, Some(herald::exit_code::OK), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    let docs = documents(&stdout);
    assert_eq!(docs[0]["kind"], "Role");
    assert_eq!(
        docs[0]["rules"][0]["resources"],
        serde_json::json!(["octopi"])
    );

    // A cluster-scoped resource: discovery says so, and no Role can grant it.
    Raw::new(&sim)
        .install_crd(&crd(
            "example.com",
            "mazes",
            "Maze",
            "Cluster",
            &[("v1", true, true)],
        ))
        .await;
    let config = herald_config(
        &sim,
        dir.path(),
        "  - group: example.com\n    kind: Maze\n    namespaces: [a]",
    );
    let d = dir.path().to_owned();
    let (code, _, stderr) = tokio::task::spawn_blocking(move || {
        rbac(&d, &config, &["--connect", "--namespace-scoped"])
    })
    .await
    .unwrap();
    assert_eq!(code, Some(herald::exit_code::CONFIG_INVALID), "{stderr}");
    assert!(stderr.contains("mazes is cluster-scoped"), "{stderr}");
}
