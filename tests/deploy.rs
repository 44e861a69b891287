//! The install (`deploy/`), checked offline with the real tools: the Helm chart lints (`helm lint
//! --strict` and helm_sdkpy's `Lint`, Helm's Go library), renders for every documented example,
//! and refuses contradicting values with a clear message; its RBAC is exactly what `herald rbac`
//! prints for the same configuration; its configuration passes `herald check`; the kustomize base
//! is the chart rendered with `deploy/kustomize/base/values.yaml`; every rendered object validates
//! against the Kubernetes OpenAPI schemas and passes checkov; the chart README documents every value.
//!
//! The tools come from `support::deploy` (installed by `tests/deploy-tools/install`): when one is
//! missing the test fails if `CI` is set, and otherwise prints why and returns early.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::deploy::{self, Ran, documents, helm_template, run};

/// The Kubernetes version every object is validated against (kubernetes-validate's schemas).
const K8S_VERSION: &str = "1.35.0";

/// Kinds kubernetes-validate has no schema for: the Prometheus Operator's CRDs. Skipped by name, so
/// any other kind without a schema fails.
const CRD_KINDS: [&str; 2] = ["ServiceMonitor", "PodMonitor"];

/// The release namespace every render uses.
const NAMESPACE: &str = "herald";

/// The documented example values files, sorted.
fn examples() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy::chart_dir().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let names: Vec<String> = files.iter().map(|p| stem(p)).collect();
    for wanted in [
        "minimal-webhook",
        "kafka-sasl",
        "nats",
        "namespace-scoped",
        "existing-configmap",
        "monitoring",
    ] {
        assert!(
            names.iter().any(|n| n == wanted),
            "examples/{wanted}.yaml is missing"
        );
    }
    files
}

/// The examples, and a test-only values file that switches on every optional branch they leave
/// off (existing Secret config and claim, no ServiceAccount, extra rules, scheduling, …).
fn all_values() -> Vec<PathBuf> {
    let mut files = examples();
    files
        .push(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/deploy/every-value.yaml"));
    files
}

fn stem(p: &Path) -> String {
    p.file_stem().unwrap().to_string_lossy().into_owned()
}

/// Renders the chart with `values` (files) and returns its objects, asserting it rendered.
fn render(helm: &Path, values: &[&Path]) -> Vec<Value> {
    let out = helm_template(helm, values, &[]).ok("helm template");
    documents(&out.stdout)
}

/// The chart rendered with values given as YAML text.
fn render_text(helm: &Path, dir: &Path, values: &str) -> Ran {
    let file = dir.join(format!("values-{}.yaml", rand::random::<u32>()));
    std::fs::write(&file, values).unwrap();
    helm_template(helm, &[&file], &[])
}

/// `kubectl kustomize <dir>`: the objects.
fn kustomize(kubectl: &Path, dir: &Path) -> Vec<Value> {
    let out = run(
        Command::new(kubectl).arg("kustomize").arg(dir),
        Duration::from_secs(30),
    )
    .ok("kubectl kustomize");
    documents(&out.stdout)
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

/// The `herald.yaml` of the chart's ConfigMap.
fn herald_yaml(objects: &[Value]) -> String {
    let maps = of_kind(objects, "ConfigMap");
    assert_eq!(maps.len(), 1, "one ConfigMap expected");
    maps[0]["data"]["herald.yaml"].as_str().unwrap().to_owned()
}

/// The pod IP the downward API gives herald in the pod (`admin.listen: "${POD_IP}:9464"`).
const POD_IP: &str = "10.0.0.7";

/// Every RBAC rule as a sorted, comparable tuple.
type NormRule = (Vec<String>, Vec<String>, Vec<String>);

fn norm_rules(rules: &Value) -> BTreeSet<NormRule> {
    let strings = |v: &Value| -> Vec<String> {
        let mut s: Vec<String> = v
            .as_array()
            .map(|a| a.iter().map(|x| x.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default();
        s.sort();
        s
    };
    rules
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                strings(&r["apiGroups"]),
                strings(&r["resources"]),
                strings(&r["verbs"]),
            )
        })
        .collect()
}

/// The RBAC of a set of objects: per (kind, namespace) the role's rules, and per (binding kind,
/// namespace) the bound role kind and the subjects. Each binding must point at the role of the same
/// scope in the same set.
#[derive(Debug, PartialEq, Eq)]
struct Rbac {
    roles: BTreeMap<(String, String), BTreeSet<NormRule>>,
    bindings: BTreeMap<(String, String), (String, BTreeSet<String>)>,
}

fn rbac_of(objects: &[Value]) -> Rbac {
    let ns = |o: &Value| o["metadata"]["namespace"].as_str().unwrap_or("").to_owned();
    let mut roles = BTreeMap::new();
    let mut names = BTreeMap::new();
    for o in objects {
        let kind = o["kind"].as_str().unwrap();
        if kind == "Role" || kind == "ClusterRole" {
            let key = (kind.to_owned(), ns(o));
            names.insert(
                key.clone(),
                o["metadata"]["name"].as_str().unwrap().to_owned(),
            );
            assert!(
                roles.insert(key, norm_rules(&o["rules"])).is_none(),
                "two {kind}s in one scope"
            );
        }
    }
    let mut bindings = BTreeMap::new();
    for o in objects {
        let kind = o["kind"].as_str().unwrap();
        if kind == "RoleBinding" || kind == "ClusterRoleBinding" {
            let role_kind = o["roleRef"]["kind"].as_str().unwrap().to_owned();
            let role_name = o["roleRef"]["name"].as_str().unwrap();
            assert_eq!(
                names.get(&(role_kind.clone(), ns(o))).map(String::as_str),
                Some(role_name),
                "{kind} in {:?} binds a role that is not there",
                ns(o)
            );
            let subjects: BTreeSet<String> = o["subjects"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| format!("{}/{}/{}", s["kind"], s["namespace"], s["name"]))
                .collect();
            bindings.insert((kind.to_owned(), ns(o)), (role_kind, subjects));
        }
    }
    Rbac { roles, bindings }
}

/// `herald rbac -c <file> --json` with the chart's ServiceAccount and namespace.
fn herald_rbac(config: &Path, service_account: &str, namespace_scoped: bool) -> Ran {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_herald"));
    cmd.args(["rbac", "--json", "-c"]).arg(config).args([
        "--namespace",
        NAMESPACE,
        "--service-account",
        service_account,
    ]);
    if namespace_scoped {
        cmd.arg("--namespace-scoped");
    }
    cmd.env("POD_IP", POD_IP);
    run(&mut cmd, Duration::from_secs(30))
}

/// A webhook sink for the RBAC cases (RBAC does not depend on sinks).
const SINK: &str = "  sinks:\n    - {name: out, type: webhook, url: \"http://receiver:8080/\"}\n";

/// For configurations covering each way a rule arises, the chart's Role/ClusterRole rules and
/// bindings are exactly those `herald rbac` prints for the chart's own `herald.yaml`: rules as
/// sets per role, bindings' role kinds and subjects.
#[test]
fn deploy_chart_rbac_agrees_with_herald_rbac() {
    let Some(helm) = deploy::helm() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &str, bool); 9] = [
        (
            "all namespaces",
            "  resources:\n    - {group: example.com, kind: Widget}\n    - {group: example.com, kind: Database, namespaces: all}\n",
            false,
        ),
        (
            "namespace list, namespace-scoped",
            "  resources:\n    - {group: example.com, kind: Widget, namespaces: [sea, aquarium]}\n    - {group: batch.example.com, kind: Job, namespaces: [aquarium]}\n    - {group: \"\", kind: ConfigMap, namespaces: [sea]}\n",
            true,
        ),
        (
            "namespace list, cluster role",
            "  resources:\n    - {group: example.com, kind: Widget, namespaces: [sea, aquarium]}\n",
            false,
        ),
        (
            "namespace selector",
            "  resources:\n    - {group: example.com, kind: Gateway, namespaces: {selector: \"team=platform\"}}\n    - {group: example.com, kind: Widget}\n",
            false,
        ),
        (
            "namespace name patterns",
            "  resources:\n    - {group: example.com, kind: Gateway, namespaces: {include: [\"team-*\"], exclude: [\"kube-*\"]}}\n    - {group: example.com, kind: Widget, namespaces: {exclude: [\"kube-*\"]}}\n",
            false,
        ),
        (
            "group patterns",
            "  resources:\n    - {group: example.com, kinds: [\"*\"]}\n    - {group: other.example.com, kinds: [Policy, Box], namespaces: {selector: \"team=a\", exclude: [\"kube-*\"]}}\n    - {group: \"\", kind: ConfigMap}\n",
            false,
        ),
        (
            "core group",
            "  resources:\n    - {group: \"\", kind: ConfigMap}\n    - {group: \"\", kind: Pod, namespaces: [default]}\n    - {group: apps, kind: Deployment}\n",
            false,
        ),
        (
            "conventional plurals",
            "  resources:\n    - {group: example.com, kind: Policy}\n    - {group: example.com, kind: Box}\n    - {group: example.com, kind: Ingress}\n    - {group: example.com, kind: Branch}\n    - {group: example.com, kind: Dish}\n    - {group: example.com, kind: Quiz}\n    - {group: example.com, kind: Gateway}\n    - {group: example.com, kind: Key}\n",
            false,
        ),
        (
            "explicit plurals",
            "  resources:\n    - {group: example.com, kind: Octopus, plural: octopi, namespaces: [sea]}\n    - {group: example.com, plural: people, namespaces: [sea, land]}\n",
            true,
        ),
    ];
    for (service_account, sa_values) in [
        ("herald", ""),
        ("events-reader", "serviceAccount:\n  name: events-reader\n"),
    ] {
        for (name, resources, scoped) in cases {
            let values = format!(
                "config:\n{resources}{SINK}rbac:\n  namespaceScoped: {scoped}\n{sa_values}"
            );
            let objects = documents(
                &render_text(&helm, dir.path(), &values)
                    .ok(&format!("helm template ({name})"))
                    .stdout,
            );
            let config = dir.path().join("herald.yaml");
            std::fs::write(&config, herald_yaml(&objects)).unwrap();
            let printed = herald_rbac(&config, service_account, scoped).ok("herald rbac");
            let list: Value = serde_json::from_str(&printed.stdout).unwrap();
            let want = rbac_of(list["items"].as_array().unwrap());
            let got = rbac_of(&objects);
            assert!(
                !want.roles.is_empty(),
                "{name}: herald rbac printed no role"
            );
            assert_eq!(
                got, want,
                "{name} (ServiceAccount {service_account}): the chart's RBAC differs from herald rbac's"
            );
        }
    }
}

/// `replicas: 2` turns leader election on: the chart's StatefulSet runs two pods with a claim each,
/// and its RBAC (the ClusterRole plus the leader-election Role in the release's namespace) is
/// exactly what `herald rbac` prints for the chart's own `herald.yaml`.
#[test]
fn deploy_chart_replicas_turn_leader_election_on_with_its_rbac() {
    let Some(helm) = deploy::helm() else { return };
    let dir = tempfile::tempdir().unwrap();
    let values = format!(
        "replicas: 2\nconfig:\n  resources:\n    - {{group: example.com, kind: Widget}}\n{SINK}"
    );
    let objects = documents(
        &render_text(&helm, dir.path(), &values)
            .ok("helm template (replicas 2)")
            .stdout,
    );
    let yaml = herald_yaml(&objects);
    let config: Value = serde_yaml_ng::from_str(&yaml).unwrap();
    assert_eq!(config["leaderElection"]["enabled"], true, "{yaml}");
    assert_eq!(config["leaderElection"]["namespace"], NAMESPACE, "{yaml}");
    let sts = of_kind(&objects, "StatefulSet");
    assert_eq!(sts[0]["spec"]["replicas"], 2);
    assert_eq!(
        sts[0]["spec"]["volumeClaimTemplates"][0]["metadata"]["name"], "journal",
        "one claim per replica"
    );
    let path = dir.path().join("herald.yaml");
    std::fs::write(&path, &yaml).unwrap();
    let printed = herald_rbac(&path, "herald", false).ok("herald rbac");
    let list: Value = serde_json::from_str(&printed.stdout).unwrap();
    let want = rbac_of(list["items"].as_array().unwrap());
    let got = rbac_of(&objects);
    assert!(
        want.roles
            .contains_key(&("Role".to_owned(), NAMESPACE.to_owned())),
        "herald rbac printed no leader-election Role: {want:?}"
    );
    assert_eq!(got, want, "the chart's RBAC differs from herald rbac's");
}

/// `helm lint --strict` passes with the default values and with every example, and helm_sdkpy's
/// `Lint` (Helm's Go library) reports no warning or error on the chart.
#[test]
fn deploy_chart_lints() {
    let (Some(helm), Some(python)) = (deploy::helm(), deploy::python()) else {
        return;
    };
    let chart = deploy::chart_dir();
    run(
        Command::new(&helm).args(["lint", "--strict"]).arg(&chart),
        Duration::from_secs(30),
    )
    .ok("helm lint --strict");
    for example in all_values() {
        let out = run(
            Command::new(&helm)
                .args(["lint", "--strict"])
                .arg(&chart)
                .arg("-f")
                .arg(&example),
            Duration::from_secs(30),
        )
        .ok(&format!("helm lint --strict -f {}", example.display()));
        assert!(out.stdout.contains("0 chart(s) failed"), "{}", out.stdout);
    }
    // Severity: 1 info, 2 warning, 3 error (Helm's support.Severity).
    let script = "import asyncio, json, sys, helm_sdkpy\n\
                  r = asyncio.run(helm_sdkpy.Lint(helm_sdkpy.Configuration()).run(sys.argv[1]))\n\
                  print(json.dumps(r, default=str))\n";
    let out = run(
        Command::new(&python).args(["-c", script]).arg(&chart),
        Duration::from_secs(60),
    )
    .ok("helm_sdkpy Lint");
    let line = out.stdout.lines().last().unwrap_or_default();
    let result: Value = serde_json::from_str(line).unwrap();
    assert_eq!(result["TotalChartsLinted"], 1, "{result}");
    assert!(result["Errors"].is_null(), "helm_sdkpy Lint: {result}");
    for m in result["Messages"].as_array().into_iter().flatten() {
        assert!(
            m["Severity"].as_i64().unwrap_or(3) < 2,
            "helm_sdkpy Lint: {m}"
        );
    }
}

/// Every manifest the tests check: each example (and every-value.yaml) rendered by the chart, and
/// the kustomize base and overlay, as (name, objects).
fn all_manifests(helm: &Path, kubectl: &Path) -> Vec<(String, Vec<Value>)> {
    let mut out: Vec<(String, Vec<Value>)> = all_values()
        .iter()
        .map(|e| (stem(e), render(helm, &[e])))
        .collect();
    let kustomize_dir = deploy::deploy_dir().join("kustomize");
    out.push((
        "kustomize-base".into(),
        kustomize(kubectl, &kustomize_dir.join("base")),
    ));
    out.push((
        "kustomize-overlay-example".into(),
        kustomize(kubectl, &kustomize_dir.join("overlays/example")),
    ));
    for (name, objects) in &out {
        assert_eq!(
            of_kind(objects, "StatefulSet").len(),
            1,
            "{name}: one StatefulSet expected"
        );
    }
    out
}

/// Every object of every example and of the kustomize base and overlay validates against the
/// Kubernetes OpenAPI schemas (kubernetes-validate, strict: no unknown field), except the
/// Prometheus Operator's CRDs, skipped by kind.
#[test]
fn deploy_manifests_validate_against_openapi() {
    let (Some(helm), Some(kubectl), Some(python)) =
        (deploy::helm(), deploy::kubectl(), deploy::python())
    else {
        return;
    };
    let mut checked = Vec::new();
    let mut skipped = BTreeSet::new();
    for (name, objects) in all_manifests(&helm, &kubectl) {
        for o in objects {
            let kind = o["kind"].as_str().unwrap().to_owned();
            if CRD_KINDS.contains(&kind.as_str()) {
                skipped.insert(kind);
            } else {
                checked.push(json!({"from": name, "object": o}));
            }
        }
    }
    assert_eq!(
        skipped,
        BTreeSet::from(CRD_KINDS.map(String::from)),
        "monitoring.yaml renders both CRD kinds"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("objects.json");
    std::fs::write(&file, serde_json::to_string(&checked).unwrap()).unwrap();
    let script = "import json, sys, kubernetes_validate as kv\n\
                  bad = 0\n\
                  for item in json.load(open(sys.argv[1])):\n\
                  \x20   o = item['object']\n\
                  \x20   try:\n\
                  \x20       kv.validate(o, sys.argv[2], strict=True)\n\
                  \x20   except Exception as e:\n\
                  \x20       bad += 1\n\
                  \x20       print(item['from'], o['kind'], o['metadata']['name'], type(e).__name__, e)\n\
                  print('validated', len(json.load(open(sys.argv[1]))) - bad, 'failed', bad)\n";
    let out = run(
        Command::new(&python)
            .args(["-c", script])
            .arg(&file)
            .arg(K8S_VERSION),
        Duration::from_secs(60),
    )
    .ok("kubernetes-validate");
    assert_eq!(
        out.stdout.trim(),
        format!("validated {} failed 0", checked.len()),
        "kubernetes-validate {K8S_VERSION} --strict:\n{}",
        out.stdout
    );
}

/// checkov passes on every rendered example and the kustomize output, run once over one directory
/// holding them all, with only the checks `deploy/.checkov.yaml` skips (each justified there).
#[test]
fn deploy_manifests_pass_checkov() {
    let (Some(helm), Some(kubectl), Some(checkov)) =
        (deploy::helm(), deploy::kubectl(), deploy::checkov())
    else {
        return;
    };
    // Not tempfile's default `.tmpXXXX`: checkov skips hidden directories.
    let dir = tempfile::Builder::new()
        .prefix("herald-checkov-")
        .tempdir()
        .unwrap();
    let manifests = all_manifests(&helm, &kubectl);
    for (name, objects) in &manifests {
        let text: Vec<String> = objects
            .iter()
            .map(|o| serde_yaml_ng::to_string(o).unwrap())
            .collect();
        std::fs::write(dir.path().join(format!("{name}.yaml")), text.join("---\n")).unwrap();
    }
    let out = run(
        Command::new(&checkov)
            .arg("--config-file")
            .arg(deploy::deploy_dir().join(".checkov.yaml"))
            .args(["--skip-download", "--output", "json", "-d"])
            .arg(dir.path()),
        Duration::from_secs(100),
    );
    assert_eq!(out.code, Some(0), "checkov failed:\n{}", out.stdout);
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    let summary = &report["summary"];
    assert_eq!(summary["failed"], 0, "checkov: {}", out.stdout);
    assert_eq!(summary["parsing_errors"], 0, "checkov: {summary}");
    // Every StatefulSet was seen: a container check passed once per manifest.
    let passed = report["results"]["passed_checks"].as_array().unwrap();
    let non_root = passed
        .iter()
        .filter(|c| c["check_id"] == "CKV_K8S_23")
        .count();
    assert!(
        non_root >= manifests.len(),
        "checkov saw {non_root} pods for {} manifests",
        manifests.len()
    );
}

/// `herald check -c` (the binary, offline) on a configuration as a pod would see it: `${POD_IP}`
/// set, each `{fromFile: …}` under `/var/run/secrets/herald/` a file in `dir`, each variable of
/// `secret_env` set.
fn herald_check_as_in_pod(dir: &Path, name: &str, config: &str, secret_env: &[&str]) {
    let secrets = dir.join(name);
    let config = config.replace(
        "/var/run/secrets/herald/",
        &format!("{}/", secrets.display()),
    );
    let parsed: Value = serde_yaml_ng::from_str(&config).unwrap();
    for path in from_files(&parsed) {
        let path = Path::new(&path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "s3cret\n").unwrap();
    }
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, &config).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_herald"));
    cmd.args(["check", "-c"]).arg(&file).env("POD_IP", POD_IP);
    for var in secret_env {
        cmd.env(var, "s3cret");
    }
    let out = run(&mut cmd, Duration::from_secs(30));
    assert_eq!(
        out.code,
        Some(0),
        "herald check on {name}'s herald.yaml:\n{config}\n{}",
        out.stderr
    );
}

/// The configuration the chart renders for every example, and the kustomize base's and example
/// overlay's, pass `herald check` as a pod would run them (see [`herald_check_as_in_pod`]; the
/// variables are the StatefulSet's `secretKeyRef` ones). `existing-configmap` renders no
/// configuration (the user's ConfigMap is mounted instead).
#[test]
fn deploy_chart_config_passes_herald_check() {
    let Some(helm) = deploy::helm() else { return };
    let dir = tempfile::tempdir().unwrap();
    for example in examples() {
        let name = stem(&example);
        let objects = render(&helm, &[&example]);
        let sts = of_kind(&objects, "StatefulSet")[0];
        if name == "existing-configmap" {
            assert!(of_kind(&objects, "ConfigMap").is_empty());
            assert_eq!(
                sts["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"],
                "herald-config"
            );
            continue;
        }
        let secret_env: Vec<&str> = sts["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|env| !env["valueFrom"]["secretKeyRef"].is_null())
            .map(|env| env["name"].as_str().unwrap())
            .collect();
        herald_check_as_in_pod(dir.path(), &name, &herald_yaml(&objects), &secret_env);
    }
    let kustomize_dir = deploy::deploy_dir().join("kustomize");
    for (name, file) in [
        ("kustomize-base", "base/herald.yaml"),
        ("kustomize-overlay-example", "overlays/example/herald.yaml"),
    ] {
        let config = std::fs::read_to_string(kustomize_dir.join(file)).unwrap();
        herald_check_as_in_pod(dir.path(), name, &config, &[]);
    }
}

/// Every `fromFile` path in a configuration.
fn from_files(v: &Value) -> Vec<String> {
    match v {
        Value::Object(m) => m
            .iter()
            .flat_map(|(k, v)| match (k.as_str(), v) {
                ("fromFile", Value::String(p)) => vec![p.clone()],
                _ => from_files(v),
            })
            .collect(),
        Value::Array(a) => a.iter().flat_map(from_files).collect(),
        _ => Vec::new(),
    }
}

/// Values that contradict what the pod needs, or that `--namespace-scoped` cannot grant, fail the
/// install with a message naming the key; a mistyped value fails the schema.
#[test]
fn deploy_chart_refuses_contradictions() {
    let Some(helm) = deploy::helm() else { return };
    let dir = tempfile::tempdir().unwrap();
    let resources = |ns: &str| {
        format!(
            "config:\n  resources:\n    - {{group: example.com, kind: Widget, namespaces: {ns}}}\n{SINK}"
        )
    };
    let cases: Vec<(String, &str)> = vec![
        (
            format!("{}rbac: {{namespaceScoped: true}}\n", resources("all")),
            "resources[0].namespaces: watches all namespaces, which only a ClusterRole can grant",
        ),
        (
            format!(
                "{}rbac: {{namespaceScoped: true}}\n",
                resources("{selector: \"team=a\"}")
            ),
            "resources[0].namespaces: a namespace selector needs a cluster-wide watch and the namespaces' labels, which only a ClusterRole can grant",
        ),
        (
            format!("{}  journal: {{path: /data/journal}}\n", resources("all")),
            "config.journal.path: the chart keeps the journal on its volume at /var/lib/herald/journal",
        ),
        (
            format!(
                "{}  admin: {{listen: \"0.0.0.0:9464\"}}\n",
                resources("all")
            ),
            "config.admin.listen: the chart binds the admin endpoint to the pod IP",
        ),
        (
            format!("{}  cluster: {{kubeconfig: {{}}}}\n", resources("all")),
            "config.cluster.kubeconfig: the chart runs herald in the cluster",
        ),
        (
            format!(
                "{}  admin: {{token: \"${{T}}\"}}\nadminToken: {{existingSecret: s}}\n",
                resources("all")
            ),
            "config.admin.token: adminToken.existingSecret sets the admin token",
        ),
        (
            "config:\n  resources: []\n".to_owned(),
            "config.resources: list at least one custom resource to watch",
        ),
        (
            format!("{}persistence: {{size: lots}}\n", resources("all")),
            "at '/persistence/size': 'lots' does not match pattern",
        ),
        // Issue 22: `replicas` > 1 is leader election, which needs a volume per replica.
        (
            format!(
                "{}replicas: 2\npersistence: {{existingClaim: journal}}\n",
                resources("all")
            ),
            "persistence.existingClaim: replicas > 1 needs one journal volume per replica",
        ),
        (
            format!(
                "{}  leaderElection: {{enabled: false}}\nreplicas: 2\n",
                resources("all")
            ),
            "config.leaderElection.enabled: replicas > 1 needs leader election",
        ),
        (
            format!(
                "{}  leaderElection: {{identity: herald}}\nreplicas: 2\n",
                resources("all")
            ),
            "config.leaderElection.identity: replicas > 1 needs one identity per replica",
        ),
        (
            format!("{}replicas: 0\n", resources("all")),
            "at '/replicas'",
        ),
    ];
    for (values, message) in cases {
        let out = render_text(&helm, dir.path(), &values);
        assert_ne!(out.code, Some(0), "rendered:\n{values}");
        assert!(
            out.stderr.contains(message),
            "values:\n{values}\nwant {message:?} in:\n{}",
            out.stderr
        );
    }
    // The namespace-scoped refusals are herald rbac's own words.
    for ns in ["all", "{selector: \"team=a\"}", "{exclude: [\"kube-*\"]}"] {
        let file = dir.path().join("refused.yaml");
        let config = resources(ns).replace("config:\n", "").replace("\n  ", "\n");
        std::fs::write(&file, config.trim_start()).unwrap();
        let printed = herald_rbac(&file, "herald", true);
        assert_eq!(printed.code, Some(10), "{}", printed.stderr);
        let chart = render_text(
            &helm,
            dir.path(),
            &format!("{}rbac: {{namespaceScoped: true}}\n", resources(ns)),
        );
        let words = printed
            .stderr
            .lines()
            .find_map(|l| l.split_once("resources[0].namespaces: ").map(|(_, w)| w))
            .unwrap_or_else(|| panic!("herald rbac said: {}", printed.stderr));
        let words = words.split("; ").next().unwrap();
        assert!(
            chart.stderr.contains(words),
            "chart says {:?}, herald rbac {words:?}",
            chart.stderr
        );
    }
}

/// The first fenced block of `lang` after the line containing `after` in `text`.
fn fenced_after<'a>(text: &'a str, after: &str, lang: &str) -> &'a str {
    let rest = &text[text
        .find(after)
        .unwrap_or_else(|| panic!("{after:?} not found"))..];
    let open = format!("```{lang}\n");
    let rest = &rest[rest.find(&open).unwrap() + open.len()..];
    &rest[..rest.find("```").unwrap()]
}

/// docs/install.md followed literally: its `my-values.yaml` renders the objects the page lists, the
/// configuration passes `herald check` as the pod runs it, and the `herald rbac` output it shows is
/// the chart's ClusterRole and binding.
#[test]
fn deploy_install_page_example_renders_as_documented() {
    let Some(helm) = deploy::helm() else { return };
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/install.md"))
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("my-values.yaml");
    std::fs::write(&values, fenced_after(&page, "A `my-values.yaml`", "yaml")).unwrap();
    let objects = render(&helm, &[&values]);
    let listed: BTreeSet<String> = objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    let documented: BTreeSet<String> = [
        "NetworkPolicy",
        "ServiceAccount",
        "ConfigMap",
        "ClusterRole",
        "ClusterRoleBinding",
        "Service",
        "StatefulSet",
    ]
    .iter()
    .map(|k| format!("{k}/herald"))
    .collect();
    assert_eq!(listed, documented);
    let sts = of_kind(&objects, "StatefulSet")[0];
    assert_eq!(
        sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"], "journal",
        "the claim the page names is journal-herald-0"
    );
    let secret_env: Vec<&str> = sts["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|env| !env["valueFrom"]["secretKeyRef"].is_null())
        .map(|env| env["name"].as_str().unwrap())
        .collect();
    assert_eq!(secret_env, ["KAFKA_PASSWORD"]);
    herald_check_as_in_pod(
        dir.path(),
        "install-page",
        &herald_yaml(&objects),
        &secret_env,
    );
    let printed = documents(fenced_after(
        &page,
        "herald rbac -c herald.yaml --namespace herald",
        "yaml",
    ));
    assert_eq!(rbac_of(&printed), rbac_of(&objects));
}

/// What a `helm upgrade` and a hardened pod rely on, for every example and every-value.yaml:
/// every selector (the StatefulSet's, its claim template's labels, the Service's, the
/// NetworkPolicy's, the budget's and the monitors') is exactly the release's name and instance
/// labels, never a version (the StatefulSet's selector and claim template cannot change, so a
/// version there breaks the next upgrade); every namespaced object is in the release namespace
/// except the Roles, which are in the namespaces they grant; the only writable mount is the
/// journal's; the pod template carries `checksum/config`, so a configuration change restarts it.
#[test]
fn deploy_chart_selectors_namespaces_and_mounts_hold_for_upgrades() {
    let Some(helm) = deploy::helm() else { return };
    let stable: BTreeSet<&str> = ["app.kubernetes.io/name", "app.kubernetes.io/instance"].into();
    for values in all_values() {
        let name = stem(&values);
        let objects = render(&helm, &[&values]);
        for o in &objects {
            let kind = o["kind"].as_str().unwrap();
            let selector = match kind {
                "StatefulSet" | "PodDisruptionBudget" | "ServiceMonitor" | "PodMonitor" => {
                    &o["spec"]["selector"]["matchLabels"]
                }
                "NetworkPolicy" => &o["spec"]["podSelector"]["matchLabels"],
                "Service" => &o["spec"]["selector"],
                _ => &Value::Null,
            };
            if !selector.is_null() {
                let keys: BTreeSet<&str> = selector
                    .as_object()
                    .unwrap()
                    .keys()
                    .map(String::as_str)
                    .collect();
                assert_eq!(keys, stable, "{name}: {kind}'s selector {selector}");
            }
            let namespace = o["metadata"]["namespace"].as_str();
            match kind {
                "ClusterRole" | "ClusterRoleBinding" => {
                    assert_eq!(namespace, None, "{name}: {kind}")
                }
                "Role" | "RoleBinding" => assert!(namespace.is_some(), "{name}: {kind}"),
                _ => assert_eq!(namespace, Some(NAMESPACE), "{name}: {kind}"),
            }
        }
        let sts = of_kind(&objects, "StatefulSet")[0];
        for claim in sts["spec"]["volumeClaimTemplates"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let keys: BTreeSet<&str> = claim["metadata"]["labels"]
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(keys, stable, "{name}: the claim template's labels");
        }
        let pod = &sts["spec"]["template"];
        assert!(
            pod["metadata"]["annotations"]["checksum/config"].is_string(),
            "{name}: no checksum/config"
        );
        let container = &pod["spec"]["containers"][0];
        assert_eq!(
            container["securityContext"]["readOnlyRootFilesystem"], true,
            "{name}"
        );
        for mount in container["volumeMounts"].as_array().unwrap() {
            if mount["name"] == "journal" {
                assert_eq!(mount["mountPath"], "/var/lib/herald", "{name}");
            } else {
                assert_eq!(mount["readOnly"], true, "{name}: {mount} is writable");
            }
        }
    }
}

/// Values each valid on their own that the pod could not run with fail the install, not the pod:
/// two volumes at one path (the API server would reject the StatefulSet's pod after `helm install`
/// succeeded), RBAC generated from no resource with `existingConfig` (every watch forbidden), and
/// a mistyped key inside the Kubernetes objects the chart passes through (`resources.limit` would
/// be dropped and the default limits kept). Each message names the value's path.
#[test]
fn deploy_chart_refuses_what_the_pod_cannot_run() {
    let Some(helm) = deploy::helm() else { return };
    let dir = tempfile::tempdir().unwrap();
    let base = format!("config:\n  resources:\n    - {{group: example.com, kind: Widget}}\n{SINK}");
    let admin = "adminToken: {existingSecret: herald-admin}\n";
    let cases: Vec<(String, &str)> = vec![
        (
            format!("{base}{admin}secretFiles:\n  - {{secretName: admin}}\n"),
            "secretFiles[0]: /var/run/secrets/herald/admin is already where adminToken.existingSecret is mounted",
        ),
        (
            format!(
                "{base}secretFiles:\n  - {{secretName: kafka-tls}}\n  - {{secretName: ca, mountPath: /var/run/secrets/herald/kafka-tls/}}\n"
            ),
            "secretFiles[1]: /var/run/secrets/herald/kafka-tls is already where secretFiles[0] is mounted",
        ),
        (
            format!("{base}secretFiles:\n  - {{secretName: conf, mountPath: /etc/herald}}\n"),
            "secretFiles[0]: /etc/herald is already where the configuration is mounted",
        ),
        (
            "existingConfig: {configMap: herald-config}\n".to_owned(),
            "config.resources: with existingConfig the chart still generates its RBAC from config.resources",
        ),
        (
            // The namespace-scoped refusal names the value's own path, not the config file's.
            format!("{base}rbac: {{namespaceScoped: true}}\n"),
            "rbac.namespaceScoped: config.resources[0].namespaces: watches all namespaces",
        ),
        (
            format!("{base}resources: {{limit: {{cpu: \"1\"}}}}\n"),
            "at '/resources': additional properties 'limit' not allowed",
        ),
        (
            format!("{base}securityContext: {{readOnlyRootFilesytem: true}}\n"),
            "at '/securityContext': additional properties 'readOnlyRootFilesytem' not allowed",
        ),
        (
            format!("{base}podSecurityContext: {{fsgroup: 1000}}\n"),
            "at '/podSecurityContext': additional properties 'fsgroup' not allowed",
        ),
        (
            format!(
                "{base}extraEnv:\n  - {{name: A, valuefrom: {{secretKeyRef: {{name: s, key: k}}}}}}\n"
            ),
            "at '/extraEnv/0': additional properties 'valuefrom' not allowed",
        ),
        (
            format!(
                "{base}rbac:\n  extraRules:\n    - {{apiGroups: [\"\"], resource: [configmaps], verbs: [get]}}\n"
            ),
            "at '/rbac/extraRules/0': additional properties 'resource' not allowed",
        ),
        (
            format!(
                "{base}networkPolicy:\n  ingressFrom:\n    - {{namespaceselector: {{matchLabels: {{team: monitoring}}}}}}\n"
            ),
            "at '/networkPolicy/ingressFrom/0': additional properties 'namespaceselector' not allowed",
        ),
    ];
    for (values, message) in cases {
        let out = render_text(&helm, dir.path(), &values);
        assert_ne!(out.code, Some(0), "rendered:\n{values}");
        assert!(
            out.stderr.contains(message),
            "values:\n{values}\nwant {message:?} in:\n{}",
            out.stderr
        );
    }
    // Their valid neighbours render: a Secret of another name next to the admin token, RBAC from
    // config.resources or from rbac.extraRules alone, or none, with existingConfig, and the fields
    // the Kubernetes types do have.
    for values in [
        format!("{base}{admin}secretFiles:\n  - {{secretName: kafka-tls}}\n  - {{secretName: ca}}\n"),
        "existingConfig: {configMap: herald-config}\nconfig:\n  resources:\n    - {group: example.com, kind: Widget}\n".to_owned(),
        "existingConfig: {secret: herald-config}\nrbac:\n  extraRules:\n    - {apiGroups: [example.com], resources: [widgets], verbs: [get, list, watch]}\n".to_owned(),
        "existingConfig: {configMap: herald-config}\nrbac: {create: false}\n".to_owned(),
        format!("{base}resources: {{limits: {{cpu: \"1\"}}, claims: []}}\nsecurityContext: {{procMount: Default}}\npodSecurityContext: {{supplementalGroups: [1000]}}\n"),
        format!("{base}extraEnv:\n  - {{name: A, valueFrom: {{secretKeyRef: {{name: s, key: k}}}}}}\nrbac:\n  extraRules:\n    - {{apiGroups: [\"\"], resources: [configmaps], resourceNames: [c], verbs: [get]}}\nnetworkPolicy:\n  ingressFrom:\n    - {{namespaceSelector: {{matchLabels: {{team: monitoring}}}}, podSelector: {{}}}}\n"),
    ] {
        let out = render_text(&helm, dir.path(), &values);
        assert_eq!(out.code, Some(0), "values:\n{values}\n{}", out.stderr);
    }
}

/// The `# --` comments of values.yaml by dotted key, in file order.
fn documented_values(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut pending: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(doc) = trimmed.strip_prefix("# --") {
            pending = Some(doc.trim().to_owned());
            continue;
        }
        if let Some(more) = trimmed.strip_prefix('#') {
            if let Some(p) = &mut pending {
                p.push(' ');
                p.push_str(more.trim());
            }
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let Some((key, _)) = trimmed.split_once(':') else {
            continue;
        };
        if trimmed.starts_with('-') || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        stack.push((indent, key.to_owned()));
        if let Some(doc) = pending.take() {
            let path: Vec<&str> = stack.iter().map(|(_, k)| k.as_str()).collect();
            out.push((path.join("."), doc));
        }
    }
    out
}

/// Keys of `value` not documented themselves nor under a documented key.
fn undocumented(value: &Value, prefix: &str, documented: &BTreeSet<String>) -> Vec<String> {
    let Value::Object(map) = value else {
        return Vec::new();
    };
    map.iter()
        .flat_map(|(k, v)| {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            if documented.contains(&path) {
                Vec::new()
            } else if v.as_object().is_some_and(|m| !m.is_empty()) {
                undocumented(v, &path, documented)
            } else {
                vec![path]
            }
        })
        .collect()
}

/// Every value in values.yaml has a `# --` comment (itself or a parent), and the README's values
/// table has exactly those keys with exactly those descriptions.
#[test]
fn deploy_readme_values_table_in_step() {
    let chart = deploy::chart_dir();
    let text = std::fs::read_to_string(chart.join("values.yaml")).unwrap();
    let documented = documented_values(&text);
    assert!(documented.len() > 40, "{documented:?}");
    let keys: BTreeSet<String> = documented.iter().map(|(k, _)| k.clone()).collect();
    let values: Value = serde_yaml_ng::from_str(&text).unwrap();
    let missing = undocumented(&values, "", &keys);
    assert!(
        missing.is_empty(),
        "values without a `# --` comment: {missing:?}"
    );
    for key in &keys {
        let mut v = &values;
        for part in key.split('.') {
            v = &v[part];
        }
        assert!(!v.is_null(), "documented key {key} is not in values.yaml");
    }
    let readme = std::fs::read_to_string(chart.join("README.md")).unwrap();
    let table: Vec<(String, String)> = readme
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("| `")?;
            let (key, rest) = rest.split_once("` | ")?;
            let doc = rest.strip_suffix(" |")?;
            Some((key.to_owned(), doc.to_owned()))
        })
        .collect();
    assert_eq!(
        table, documented,
        "README.md's values table is out of step with values.yaml"
    );
}

/// Objects as compared between the chart and the kustomize base: Helm's own labels and the
/// checksum annotation left out (the base rolls the pod through the configMapGenerator's name
/// hash), the generated ConfigMap's hash suffix removed.
fn comparable(mut objects: Vec<Value>) -> BTreeMap<(String, String), Value> {
    fn strip(meta: &mut Value) {
        if let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut) {
            labels.remove("helm.sh/chart");
            labels.remove("app.kubernetes.io/managed-by");
        }
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove("checksum/config");
            if a.is_empty() {
                meta.as_object_mut().unwrap().remove("annotations");
            }
        }
    }
    let generated = objects
        .iter()
        .filter(|o| o["kind"] == "ConfigMap")
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .next();
    let mut out = BTreeMap::new();
    for o in &mut objects {
        strip(&mut o["metadata"]);
        if o["kind"] == "StatefulSet" {
            strip(&mut o["spec"]["template"]["metadata"]);
        }
        let mut text = serde_json::to_string(o).unwrap();
        if let Some(name) = &generated {
            text = text.replace(&format!("\"{name}\""), "\"herald\"");
        }
        let o: Value = serde_json::from_str(&text).unwrap();
        out.insert(
            (
                o["kind"].as_str().unwrap().to_owned(),
                o["metadata"]["name"].as_str().unwrap().to_owned(),
            ),
            o,
        );
    }
    out
}

/// The kustomize base is the chart rendered with `deploy/kustomize/base/values.yaml` (regenerate
/// it with `deploy/kustomize/regenerate`): the same objects, field for field.
#[test]
fn deploy_kustomize_base_in_step_with_chart() {
    let (Some(helm), Some(kubectl)) = (deploy::helm(), deploy::kubectl()) else {
        return;
    };
    let base = deploy::deploy_dir().join("kustomize/base");
    let chart = comparable(render(&helm, &[&base.join("values.yaml")]));
    let kustomized = kustomize(&kubectl, &base);
    assert!(
        of_kind(&kustomized, "ConfigMap")[0]["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("herald-"),
        "the base's ConfigMap is generated (a name hash rolls the pod)"
    );
    let kustomized = comparable(kustomized);
    assert_eq!(
        chart.keys().collect::<Vec<_>>(),
        kustomized.keys().collect::<Vec<_>>(),
        "the base has other objects than the chart; run deploy/kustomize/regenerate"
    );
    for (key, object) in &chart {
        assert_eq!(
            Some(object),
            kustomized.get(key),
            "{key:?} differs between the chart and the kustomize base; run deploy/kustomize/regenerate"
        );
    }
}
