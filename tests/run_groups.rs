//! Namespace name patterns and whole API groups (issue 19), end to end through the herald binary
//! and the simulator: an excluded namespace created at run time stays silent; a CRD of a watched
//! group installed at run time is watched and its objects' events arrive; deleting it reports each
//! object's deletion and stops its watcher; restarts resume per kind; a storage version change
//! repeats nothing; `herald check --connect` lists the kinds a pattern matches; `herald rbac` grants
//! what the pattern needs.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{
    Herald, Raw, Receiver, admin_addr, admin_get_retrying, crd, free_port, herald_config, id_of,
    ids, sim, widget, widgets_crd,
};

const MERGE: &str = "application/merge-patch+json";
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

fn widgets(ns: &str) -> String {
    format!("/apis/example.com/v1/namespaces/{ns}/widgets")
}

fn widget_in(ns: &str, name: &str) -> Value {
    let mut w = widget(name, json!({}), json!({}));
    w["metadata"]["namespace"] = json!(ns);
    w
}

fn gadgets_crd() -> Value {
    crd(
        "example.com",
        "gadgets",
        "Gadget",
        "Namespaced",
        &[("v1", true, true)],
    )
}

fn gadget(name: &str) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Gadget",
           "metadata": {"name": name, "namespace": "default"}, "spec": {}})
}

const GADGETS: &str = "/apis/example.com/v1/namespaces/default/gadgets";

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

async fn namespace(raw: &Raw, name: &str) {
    let r = raw
        .post(
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
}

async fn create(raw: &Raw, path: &str, obj: &Value) -> Value {
    let r = raw.post(path, obj).await;
    assert_eq!(r.status, 201, "{}", r.body);
    r.body
}

/// The deletion id herald gives an object deleted at `rv` (the DELETED event's resourceVersion).
fn deleted_id(obj: &Value, rv: &str) -> String {
    format!("{}:{rv}:deleted", obj["metadata"]["uid"].as_str().unwrap())
}

/// The admin endpoint's answer (retried while herald starts).
async fn admin_get(addr: &str, path: &str) -> (u16, String) {
    admin_get_retrying(addr, path, 20).await
}

/// The watchers `/status` lists, by label.
async fn watched(addr: &str) -> Vec<String> {
    let (code, body) = admin_get(addr, "/status").await;
    assert_eq!(code, 200, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    doc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["resource"].as_str().unwrap().to_string())
        .collect()
}

/// Waits until `/status` lists exactly `want` (in any order); panics with herald's stderr after 20 s.
async fn wait_watched(herald: &Herald, addr: &str, want: &[&str]) {
    let started = Instant::now();
    let want = sorted(want.iter().map(|s| (*s).to_string()).collect());
    loop {
        let got = sorted(watched(addr).await);
        if got == want {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "watchers {got:?}, expected {want:?}\n--- herald stderr ---\n{}",
            herald.stderr_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn namespace_patterns_keep_excluded_namespaces_silent_including_new_ones() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        "  - group: example.com\n    kind: Widget\n    namespaces: {include: [\"team-*\"], exclude: [\"team-skip*\"]}",
    );
    let herald = Herald::start(dir.path(), &config);
    herald.wait_for_log("Listed and reconciled.").await;

    // Namespaces created after herald started: one included, one excluded, one never included.
    for ns in ["team-a", "team-skip-1", "other"] {
        namespace(&raw, ns).await;
    }
    create(
        &raw,
        &widgets("team-skip-1"),
        &widget_in("team-skip-1", "x"),
    )
    .await;
    create(&raw, &widgets("other"), &widget_in("other", "y")).await;
    create(&raw, &widgets("default"), &widget_in("default", "z")).await;
    let a = create(&raw, &widgets("team-a"), &widget_in("team-a", "a")).await;
    let a2 = raw
        .patch(
            &format!("{}/a", widgets("team-a")),
            MERGE,
            &json!({"spec": {"v": 2}}),
        )
        .await
        .body;
    raw.patch(
        &format!("{}/x", widgets("team-skip-1")),
        MERGE,
        &json!({"spec": {"v": 2}}),
    )
    .await;
    raw.delete(&format!("{}/x", widgets("team-skip-1"))).await;
    let events = herald.wait_for(2).await;
    assert_eq!(ids(&events), [id_of(&a, "created"), id_of(&a2, "updated")]);
    herald.settle(2).await;
}

#[tokio::test]
async fn exclude_alone_watches_every_namespace_but_those() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    namespace(&raw, "quiet").await;
    // Present before the start: the first list filters too.
    create(&raw, &widgets("quiet"), &widget_in("quiet", "before")).await;
    let before = create(&raw, &widgets("default"), &widget_in("default", "before")).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        "  - group: example.com\n    kind: Widget\n    namespaces: {exclude: [\"kube-*\", quiet, \"hush-?\"]}",
    );
    let herald = Herald::start(dir.path(), &config);
    herald.wait_for(1).await;
    for ns in ["loud", "hush-1", "hush-12"] {
        namespace(&raw, ns).await;
    }
    create(
        &raw,
        &widgets("kube-system"),
        &widget_in("kube-system", "k"),
    )
    .await;
    create(&raw, &widgets("quiet"), &widget_in("quiet", "q")).await;
    create(&raw, &widgets("hush-1"), &widget_in("hush-1", "h")).await;
    let h12 = create(&raw, &widgets("hush-12"), &widget_in("hush-12", "h")).await;
    let loud = create(&raw, &widgets("loud"), &widget_in("loud", "l")).await;
    let events = herald.wait_for(3).await;
    assert_eq!(ids(&events)[0], id_of(&before, "created"));
    assert_eq!(
        sorted(ids(&events[1..])),
        sorted(vec![id_of(&h12, "created"), id_of(&loud, "created")])
    );
    assert_eq!(events[0]["resync"], json!(true), "{:#?}", events[0]);
    herald.settle(3).await;
}

#[tokio::test]
async fn name_patterns_and_a_selector_must_all_agree() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        "  - group: example.com\n    kind: Widget\n    namespaces: {include: [\"team-*\"], selector: tier=gold}",
    );
    let herald = Herald::start(dir.path(), &config);
    herald.wait_for_log("Listed and reconciled.").await;
    for (ns, tier) in [("team-a", "gold"), ("team-b", "silver"), ("other", "gold")] {
        let r = raw
            .post(
                "/api/v1/namespaces",
                &json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": ns, "labels": {"tier": tier}}}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    create(&raw, &widgets("team-b"), &widget_in("team-b", "b")).await;
    create(&raw, &widgets("other"), &widget_in("other", "o")).await;
    let a = create(&raw, &widgets("team-a"), &widget_in("team-a", "a")).await;
    assert_eq!(ids(&herald.wait_for(1).await), [id_of(&a, "created")]);
    herald.settle(1).await;
}

/// The whole life of a kind in a watched group: installed at run time, its objects reported,
/// deleted (each object's deletion reported, its watcher stopped), while the group's other kinds
/// go on; a restart then resumes per kind, repeating nothing.
#[tokio::test]
async fn a_group_pattern_follows_crds_installed_and_deleted_at_run_time() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    // Another group: never watched.
    raw.install_crd(&crd(
        "other.example",
        "things",
        "Thing",
        "Namespaced",
        &[("v1", true, true)],
    ))
    .await;
    let w1 = create(&raw, &widgets("default"), &widget_in("default", "w1")).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        "  - group: example.com\n    kinds: [\"*\"]",
    );
    let addr = admin_addr(&config);
    let mut herald = Herald::start(dir.path(), &config);
    assert_eq!(ids(&herald.wait_for(1).await), [id_of(&w1, "created")]);
    wait_watched(&herald, &addr, &["*.example.com", "widgets.example.com"]).await;

    // A CRD of the group installed now: watched within seconds, its objects' events arrive.
    raw.install_crd(&gadgets_crd()).await;
    wait_watched(
        &herald,
        &addr,
        &[
            "*.example.com",
            "widgets.example.com",
            "gadgets.example.com",
        ],
    )
    .await;
    let g1 = create(&raw, GADGETS, &gadget("g1")).await;
    let g2 = create(&raw, GADGETS, &gadget("g2")).await;
    create(
        &raw,
        "/apis/other.example/v1/namespaces/default/things",
        &json!({"apiVersion": "other.example/v1", "kind": "Thing",
                "metadata": {"name": "t", "namespace": "default"}}),
    )
    .await;
    let events = herald.wait_for(3).await;
    let g_created = [id_of(&g1, "created"), id_of(&g2, "created")];
    // g1 came first, unless the new watcher's first list took both at once (then as resync).
    assert_eq!(sorted(ids(&events[1..])), sorted(g_created.to_vec()));
    assert!(
        events[1..]
            .iter()
            .all(|e| e["source"] == "k8s://test/example.com/gadgets"),
        "{events:#?}"
    );

    // Deleting the CRD deletes its objects: each deletion is reported, then the watcher stops.
    let before_delete = sim.resource_version();
    let r = raw.delete(&format!("{CRDS}/gadgets.example.com")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let events = herald.wait_for(5).await;
    let deletions: Vec<&Value> = events[3..].iter().collect();
    assert!(
        deletions
            .iter()
            .all(|e| e["type"] == "dev.herald.resource.deleted"),
        "{deletions:#?}"
    );
    let mut subjects: Vec<&str> = deletions
        .iter()
        .map(|e| e["subject"].as_str().unwrap())
        .collect();
    subjects.sort_unstable();
    assert_eq!(subjects, ["default/g1", "default/g2"]);
    for (e, g) in deletions
        .iter()
        .zip(if subjects[0] == deletions[0]["subject"] {
            [&g1, &g2]
        } else {
            [&g2, &g1]
        })
    {
        // Deleted as the watch showed it: the DELETED event's revision, after the request.
        let rv = e["resourceversion"].as_str().unwrap();
        assert!(rv.parse::<u64>().unwrap() > before_delete, "{e:#}");
        assert_eq!(e["id"], json!(deleted_id(g, rv)));
        assert_eq!(
            e["resync"],
            json!(false),
            "a watch event, not a relist: {e:#}"
        );
    }
    wait_watched(&herald, &addr, &["*.example.com", "widgets.example.com"]).await;
    let (_, metrics) = admin_get(&addr, "/metrics").await;
    assert!(
        !metrics.contains("resource=\"gadgets.example.com\""),
        "{metrics}"
    );
    assert!(
        metrics.contains("herald_watch_synced{resource=\"widgets.example.com\"} 1"),
        "{metrics}"
    );

    // The group's other kinds go on.
    let w1b = raw
        .patch(
            &format!("{}/w1", widgets("default")),
            MERGE,
            &json!({"spec": {"v": 2}}),
        )
        .await
        .body;
    assert_eq!(ids(&herald.wait_for(6).await)[5], id_of(&w1b, "updated"));
    herald.settle(6).await;

    // Restart: each kind resumes from its own checkpoint; what happened meanwhile comes once.
    assert_eq!(herald.terminate().await, Some(0));
    let w2 = create(&raw, &widgets("default"), &widget_in("default", "w2")).await;
    herald.restart();
    let events = herald.wait_for(7).await;
    assert_eq!(ids(&events)[6], id_of(&w2, "created"));
    // The deleted CRD installed again: a new watcher, new objects, nothing old repeated.
    raw.install_crd(&gadgets_crd()).await;
    let g3 = create(&raw, GADGETS, &gadget("g3")).await;
    let events = herald.wait_for(8).await;
    assert_eq!(ids(&events)[7], id_of(&g3, "created"));
    herald.settle(8).await;
}

/// A kind configured alone and the same kind found by a group pattern are one resource: switching
/// the configuration resumes from the checkpoint instead of reporting everything again.
#[tokio::test]
async fn switching_from_a_kind_to_a_group_pattern_resumes_from_the_checkpoint() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let w1 = create(&raw, &widgets("default"), &widget_in("default", "w1")).await;
    let dir = tempfile::tempdir().unwrap();
    let single = herald_config(&sim, dir.path(), "  - group: example.com\n    kind: Widget");
    let mut herald = Herald::start(dir.path(), &single);
    assert_eq!(ids(&herald.wait_for(1).await), [id_of(&w1, "created")]);
    assert_eq!(herald.terminate().await, Some(0));

    let w1b = raw
        .patch(
            &format!("{}/w1", widgets("default")),
            MERGE,
            &json!({"spec": {"v": 2}}),
        )
        .await
        .body;
    let pattern = single.replace("    kind: Widget", "    kinds: [Widget]");
    std::fs::write(&herald.config, &pattern).unwrap();
    herald.restart();
    let events = herald.wait_for(2).await;
    assert_eq!(
        ids(&events),
        [id_of(&w1, "created"), id_of(&w1b, "updated")]
    );
    // Resumed from the checkpoint: the missed change came from the watch, not from a relist.
    assert_eq!(events[1]["resync"], json!(false), "{:#}", events[1]);
    herald.settle(2).await;
}

/// A CRD whose storage version changes, and whose old version stops being served, is followed
/// without repeating an event: the watcher moves to the served version from its checkpoint.
#[tokio::test]
async fn a_storage_version_change_repeats_no_event() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&crd(
        "example.com",
        "widgets",
        "Widget",
        "Namespaced",
        &[("v1", true, true), ("v2", true, false)],
    ))
    .await;
    let a = create(&raw, &widgets("default"), &widget_in("default", "a")).await;
    let b = create(&raw, &widgets("default"), &widget_in("default", "b")).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        "  - group: example.com\n    kinds: [\"*\"]",
    );
    let herald = Herald::start(dir.path(), &config);
    let events = herald.wait_for(2).await;
    assert_eq!(
        sorted(ids(&events)),
        sorted(vec![id_of(&a, "created"), id_of(&b, "created")])
    );

    let path = format!("{CRDS}/widgets.example.com");
    let mut next = raw.get(&path).await.body;
    next["spec"]["versions"][0]["storage"] = json!(false);
    next["spec"]["versions"][1]["storage"] = json!(true);
    assert_eq!(raw.put(&path, &next).await.status, 200);
    let a2 = raw
        .patch(
            &format!("{}/a", widgets("default")),
            MERGE,
            &json!({"spec": {"v": 2}}),
        )
        .await
        .body;
    assert_eq!(ids(&herald.wait_for(3).await)[2], id_of(&a2, "updated"));

    // v1 no longer served: the watcher finds v2 and resumes from its checkpoint.
    let mut next = raw.get(&path).await.body;
    next["spec"]["versions"][0]["served"] = json!(false);
    assert_eq!(raw.put(&path, &next).await.status, 200);
    let b2 = raw
        .patch(
            "/apis/example.com/v2/namespaces/default/widgets/b",
            MERGE,
            &json!({"spec": {"v": 2}}),
        )
        .await
        .body;
    let events = herald.wait_for(4).await;
    assert_eq!(ids(&events)[3], id_of(&b2, "updated"));
    assert_eq!(events[3]["data"]["object"]["apiVersion"], "example.com/v2");
    let all = herald.settle(4).await;
    let mut unique = ids(&all);
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 4, "{unique:#?}");
}

/// `*.group` routes take every kind a pattern finds, including one whose CRD comes later; a
/// webhook receiver gets exactly those events.
#[tokio::test]
async fn a_route_naming_the_group_pattern_takes_its_kinds() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "cluster:\n  name: test\n  kubeconfig:\n    path: {kc}\nresources:\n  - group: example.com\n    kinds: [\"*\"]\n  - group: core\n    kind: ConfigMap\n\
         sinks:\n  - name: out\n    type: file\n    path: {events}\n    fsync: always\n  - name: hook\n    type: webhook\n    url: {url}\n    timeout: 2s\n\
         routes:\n  - resources: [\"*\"]\n    sinks: [out]\n  - resources: [\"*.example.com\"]\n    sinks: [hook]\n\
         journal:\n  path: {journal}\n  flushInterval: 2ms\nadmin:\n  listen: 127.0.0.1:{port}\n",
        kc = sim.kubeconfig_path().display(),
        events = dir.path().join("events.jsonl").display(),
        url = receiver.url,
        journal = dir.path().join("journal").display(),
        port = free_port(),
    );
    let herald = Herald::start(dir.path(), &config);
    herald.wait_for_log("Listed and reconciled.").await;
    raw.install_crd(&gadgets_crd()).await;
    let w = create(&raw, &widgets("default"), &widget_in("default", "w")).await;
    let cm = create(
        &raw,
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
    )
    .await;
    // The gadget watcher may still be starting: retry the create until served.
    let started = Instant::now();
    let g = loop {
        let r = raw.post(GADGETS, &gadget("g")).await;
        if r.status == 201 {
            break r.body;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{}", r.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let all = herald.wait_for(3).await;
    assert_eq!(
        sorted(ids(&all)),
        sorted(vec![
            id_of(&w, "created"),
            id_of(&cm, "created"),
            id_of(&g, "created")
        ])
    );
    let started = Instant::now();
    while receiver.taken_ids().len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}\n{}",
            receiver.taken_ids(),
            herald.stderr_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    herald.settle(3).await;
    assert_eq!(
        sorted(receiver.taken_ids()),
        sorted(vec![id_of(&w, "created"), id_of(&g, "created")])
    );
}

fn herald_cmd(args: &[&str], config: &std::path::Path) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(args)
        .arg("-c")
        .arg(config)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn check_connect_lists_the_kinds_a_pattern_matches_now() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    raw.install_crd(&gadgets_crd()).await;
    raw.install_crd(&crd(
        "other.example",
        "things",
        "Thing",
        "Namespaced",
        &[("v1", true, true)],
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        "  - group: example.com\n    kinds: [\"*\"]\n  - group: other.example\n    kinds: [Widget]",
    );
    let path = dir.path().join("check.yaml");
    std::fs::write(&path, &config).unwrap();
    let (code, stdout, stderr) = tokio::task::spawn_blocking({
        let path = path.clone();
        move || herald_cmd(&["check", "--connect"], &path)
    })
    .await
    .unwrap();
    assert_eq!(code, Some(herald::exit_code::OK), "{stderr}");
    assert!(
        stdout.contains(
            "resources[0] (*.example.com): matches Gadget (gadgets.example.com), Widget (widgets.example.com)"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("resources[1] (*.other.example): matches no kind yet"),
        "{stdout}"
    );
    let (code, stdout, stderr) =
        tokio::task::spawn_blocking(move || herald_cmd(&["check", "--connect", "--json"], &path))
            .await
            .unwrap();
    assert_eq!(code, Some(herald::exit_code::OK), "{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        doc["checked"][0]["kinds"],
        json!([
            {"kind": "Gadget", "resource": "gadgets.example.com"},
            {"kind": "Widget", "resource": "widgets.example.com"}
        ])
    );

    // Without the right to follow CRDs, check says which.
    sim.deny(herald_sim::DenyRule {
        verb: Some("watch".into()),
        resource: Some("customresourcedefinitions".into()),
        ..herald_sim::DenyRule::default()
    });
    let path = dir.path().join("check.yaml");
    let (code, _, stderr) =
        tokio::task::spawn_blocking(move || herald_cmd(&["check", "--connect"], &path))
            .await
            .unwrap();
    assert_eq!(
        code,
        Some(herald::exit_code::HEALTHCHECK_FAILED),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "resources[0].kinds: herald may not watch customresourcedefinitions (RBAC), which a group pattern follows"
        ),
        "{stderr}"
    );
}

#[test]
fn rbac_grants_what_patterns_need() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rbac.yaml");
    let config = format!(
        "resources:\n  - group: example.com\n    kinds: [\"*\"]\n  - group: other.example\n    kinds: [Policy]\n    namespaces: {{exclude: [\"kube-*\"], selector: team=a}}\n  - group: core\n    kind: ConfigMap\n    namespaces: {{include: [\"team-*\"]}}\n\
         sinks:\n  - name: out\n    type: file\n    path: {}\n",
        dir.path().join("events.jsonl").display()
    );
    std::fs::write(&path, config).unwrap();
    let (code, stdout, stderr) = herald_cmd(&["rbac", "--json"], &path);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("assuming \"policies\" for kind \"Policy\""),
        "{stderr}"
    );
    let list: Value = serde_json::from_str(&stdout).unwrap();
    let rules = &list["items"][0]["rules"];
    assert_eq!(
        rules,
        &json!([
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["example.com"], "resources": ["*"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["other.example"], "resources": ["policies"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]},
            {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["list", "watch"]}
        ])
    );
    let (code, _, stderr) = herald_cmd(&["rbac", "--namespace-scoped"], &path);
    assert_ne!(code, Some(0));
    assert!(
        stderr.contains("resources[0].kinds: a group pattern follows the group's CustomResourceDefinitions, which only a ClusterRole can grant"),
        "{stderr}"
    );
}

/// `herald rbac`'s output alone lets a group pattern run under a ServiceAccount the simulator's RBAC
/// authorizer holds to it: the CRDs are followed, a kind installed later is read.
#[tokio::test]
async fn rbac_output_alone_lets_a_group_pattern_run() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
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
        create(&raw, path, &doc).await;
    }
    let token = raw
        .post(
            "/api/v1/namespaces/ops/serviceaccounts/watcher/token",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
        )
        .await
        .body["status"]["token"]
        .as_str()
        .unwrap()
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("token.kubeconfig");
    std::fs::write(
        &kc,
        json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "sim", "cluster": {"server": sim.url()}}],
            "users": [{"name": "sa", "user": {"token": token}}],
            "contexts": [{"name": "sa", "context": {"cluster": "sim", "user": "sa"}}],
            "current-context": "sa",
        })
        .to_string(),
    )
    .unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        "  - group: example.com\n    kinds: [\"*\"]\n    namespaces: {exclude: [\"kube-*\"]}",
    )
    .replace(
        &sim.kubeconfig_path().display().to_string(),
        &kc.display().to_string(),
    );
    let path = dir.path().join("herald.yaml");
    std::fs::write(&path, &config).unwrap();

    // Without the rules, the ServiceAccount may not even list CRDs.
    let denied = raw
        .http
        .get(format!("{}{CRDS}", raw.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16();
    assert_eq!(denied, 403);

    let (code, stdout, stderr) = herald_cmd(
        &[
            "rbac",
            "--json",
            "--service-account",
            "watcher",
            "--namespace",
            "ops",
        ],
        &path,
    );
    assert_eq!(code, Some(0), "{stderr}");
    let list: Value = serde_json::from_str(&stdout).unwrap();
    for item in list["items"].as_array().unwrap() {
        let collection = match item["kind"].as_str().unwrap() {
            "ClusterRole" => "clusterroles",
            "ClusterRoleBinding" => "clusterrolebindings",
            other => panic!("unexpected {other}"),
        };
        create(
            &raw,
            &format!("/apis/rbac.authorization.k8s.io/v1/{collection}"),
            item,
        )
        .await;
    }

    let w = create(&raw, &widgets("default"), &widget_in("default", "w")).await;
    let herald = Herald::start(dir.path(), &config);
    assert_eq!(ids(&herald.wait_for(1).await), [id_of(&w, "created")]);
    raw.install_crd(&gadgets_crd()).await;
    wait_watched(
        &herald,
        &admin_addr(&config),
        &[
            "*.example.com",
            "widgets.example.com",
            "gadgets.example.com",
        ],
    )
    .await;
    let g = create(&raw, GADGETS, &gadget("g")).await;
    let events = herald.wait_for(2).await;
    assert_eq!(
        ids(&events)[1],
        id_of(&g, "created"),
        "{}",
        herald.stderr_text()
    );
    let (code, body) = admin_get(&admin_addr(&config), "/readyz").await;
    assert_eq!(code, 200, "{body}");
}

/// A live reload from `kind: Widget` to `kinds: ["*"]`: the kind's watcher becomes the pattern's
/// and resumes from its checkpoint (nothing repeated), and a CRD installed afterwards is watched.
#[tokio::test]
async fn a_reload_to_a_group_pattern_resumes_the_kind_and_finds_new_ones() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let w1 = create(&raw, &widgets("default"), &widget_in("default", "w1")).await;
    let dir = tempfile::tempdir().unwrap();
    let single = herald_config(&sim, dir.path(), "  - group: example.com\n    kind: Widget");
    let addr = admin_addr(&single);
    let herald = Herald::start(dir.path(), &single);
    assert_eq!(ids(&herald.wait_for(1).await), [id_of(&w1, "created")]);

    std::fs::write(
        &herald.config,
        single.replace("    kind: Widget", "    kinds: [\"*\"]"),
    )
    .unwrap();
    let pid = herald.child.as_ref().unwrap().id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    wait_watched(&herald, &addr, &["*.example.com", "widgets.example.com"]).await;
    let w1b = raw
        .patch(
            &format!("{}/w1", widgets("default")),
            MERGE,
            &json!({"spec": {"v": 2}}),
        )
        .await
        .body;
    raw.install_crd(&gadgets_crd()).await;
    wait_watched(
        &herald,
        &addr,
        &[
            "*.example.com",
            "widgets.example.com",
            "gadgets.example.com",
        ],
    )
    .await;
    let g = create(&raw, GADGETS, &gadget("g")).await;
    let events = herald.wait_for(3).await;
    assert_eq!(ids(&events)[0], id_of(&w1, "created"));
    // Two objects, two keys: delivery keeps order within a key only.
    assert_eq!(
        sorted(ids(&events[1..])),
        sorted(vec![id_of(&w1b, "updated"), id_of(&g, "created")])
    );
    herald.settle(3).await;
}

/// How many times herald's stderr says a relist finished.
fn relists(herald: &Herald) -> usize {
    herald
        .stderr_text()
        .matches("Listed and reconciled.")
        .count()
}

/// Narrowing `namespaces` from every namespace to `exclude: [kube-*]` (same resource, same journal
/// stream) forgets the objects of the newly excluded namespaces: a 410 relist afterwards reports no
/// deletion for those that still exist, nor for one changed while excluded.
#[tokio::test]
async fn narrowing_the_name_patterns_reports_no_deletion_at_relist() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let k = create(
        &raw,
        &widgets("kube-system"),
        &widget_in("kube-system", "k"),
    )
    .await;
    let j = create(
        &raw,
        &widgets("kube-system"),
        &widget_in("kube-system", "j"),
    )
    .await;
    let d = create(&raw, &widgets("default"), &widget_in("default", "d")).await;
    let dir = tempfile::tempdir().unwrap();
    let all = herald_config(&sim, dir.path(), "  - group: example.com\n    kind: Widget");
    let mut herald = Herald::start(dir.path(), &all);
    assert_eq!(
        sorted(ids(&herald.wait_for(3).await)),
        sorted(vec![
            id_of(&k, "created"),
            id_of(&j, "created"),
            id_of(&d, "created")
        ])
    );
    assert_eq!(herald.terminate().await, Some(0));

    // Restart excluding kube-*: it resumes from the checkpoint, and a change there is skipped.
    let narrow = all.replace(
        "    kind: Widget",
        "    kind: Widget\n    namespaces: {exclude: [\"kube-*\"]}",
    );
    std::fs::write(&herald.config, &narrow).unwrap();
    herald.restart();
    herald.wait_for_log("Watching resource.").await;
    raw.patch(
        &format!("{}/j", widgets("kube-system")),
        MERGE,
        &json!({"spec": {"v": 2}}),
    )
    .await;
    let d2 = raw
        .patch(
            &format!("{}/d", widgets("default")),
            MERGE,
            &json!({"spec": {"v": 2}}),
        )
        .await
        .body;
    assert_eq!(ids(&herald.wait_for(4).await)[3], id_of(&d2, "updated"));

    // A 410 forces a relist at the next start: kube-system's widgets still exist, so nothing is
    // reported for them.
    assert_eq!(herald.terminate().await, Some(0));
    let before = relists(&herald);
    create(
        &raw,
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bump"}}),
    )
    .await;
    sim.compact();
    herald.restart();
    let started = Instant::now();
    while relists(&herald) == before {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no relist after the 410\n{}",
            herald.stderr_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let d3 = raw
        .patch(
            &format!("{}/d", widgets("default")),
            MERGE,
            &json!({"spec": {"v": 3}}),
        )
        .await
        .body;
    let events = herald.wait_for(5).await;
    assert_eq!(ids(&events)[4], id_of(&d3, "updated"), "{events:#?}");
    herald.settle(5).await;
}

/// Waits until `/readyz` answers `want`; panics with its last answer and herald's stderr after 30 s.
async fn wait_readyz(herald: &Herald, addr: &str, want: u16) {
    let started = Instant::now();
    loop {
        let (code, body) = admin_get(addr, "/readyz").await;
        if code == want {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "/readyz {code}, expected {want}: {body}\n--- herald stderr ---\n{}",
            herald.stderr_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A brief API server outage breaks the pattern's watch of the CRDs; the watch resumes without a
/// relist, and `/readyz` is ready again.
#[tokio::test]
async fn a_group_pattern_is_ready_again_after_a_brief_outage() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        "  - group: example.com\n    kinds: [\"*\"]",
    );
    let addr = admin_addr(&config);
    let herald = Herald::start(dir.path(), &config);
    wait_readyz(&herald, &addr, 200).await;
    sim.restart(true, false, Duration::from_millis(1500)).await;
    wait_readyz(&herald, &addr, 200).await;
    // Still following the CRDs: a kind installed after the outage is watched.
    raw.install_crd(&gadgets_crd()).await;
    wait_watched(
        &herald,
        &addr,
        &[
            "*.example.com",
            "widgets.example.com",
            "gadgets.example.com",
        ],
    )
    .await;
}

/// The `deleted` events herald synthesizes for a gone CRD's objects it did not see deleted: resync,
/// one per object, each id `<uid>:<rv>:deleted` at one revision (the stream's last checkpoint).
fn assert_synthesized_deletions(events: &[Value], objects: &[&Value]) {
    assert_eq!(events.len(), objects.len(), "{events:#?}");
    let rv = events[0]["resourceversion"].as_str().unwrap().to_string();
    let want = sorted(objects.iter().map(|o| deleted_id(o, &rv)).collect());
    assert_eq!(sorted(ids(events)), want, "{events:#?}");
    assert!(
        events
            .iter()
            .all(|e| e["resync"] == json!(true) && e["type"] == "dev.herald.resource.deleted"),
        "{events:#?}"
    );
}

/// A CRD deleted while its watcher cannot read its watch (failing watches here; a paused or
/// relisting watcher alike): the watcher retires with its index full, and herald reports the
/// deletion of each object the index held, once.
#[tokio::test]
async fn a_retired_watcher_reports_the_deletions_it_did_not_read() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let w1 = create(&raw, &widgets("default"), &widget_in("default", "w1")).await;
    let w2 = create(&raw, &widgets("default"), &widget_in("default", "w2")).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        "  - group: example.com\n    kinds: [\"*\"]",
    );
    let addr = admin_addr(&config);
    let herald = Herald::start(dir.path(), &config);
    assert_eq!(
        sorted(ids(&herald.wait_for(2).await)),
        sorted(vec![id_of(&w1, "created"), id_of(&w2, "created")])
    );
    // The widgets' watches fail from now on; the open one ends with the server's restart.
    sim.fail(herald_sim::FailRule {
        path_prefix: "/apis/example.com/v1/widgets".into(),
        method: None,
        watch: Some(true),
        status: 500,
        count: 1000,
        retry_after_seconds: None,
        client: None,
    });
    sim.restart(true, false, Duration::from_millis(200)).await;
    // The CRDs are followed again (a new kind is found) while the widgets' watcher cannot watch.
    raw.install_crd(&gadgets_crd()).await;
    wait_watched(
        &herald,
        &addr,
        &[
            "*.example.com",
            "widgets.example.com",
            "gadgets.example.com",
        ],
    )
    .await;
    let r = raw.delete(&format!("{CRDS}/widgets.example.com")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    sim.clear_faults();
    wait_watched(&herald, &addr, &["*.example.com", "gadgets.example.com"]).await;
    let events = herald.wait_for(4).await;
    assert_synthesized_deletions(&events[2..], &[&w1, &w2]);
    herald.settle(4).await;
}

/// A CRD of the group deleted while herald was down: at the pattern's first view, the deletion of
/// each object its kind's index holds is reported, once (not again at the next start).
#[tokio::test]
async fn a_crd_deleted_while_herald_was_down_reports_its_objects_deleted() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    raw.install_crd(&gadgets_crd()).await;
    let g1 = create(&raw, GADGETS, &gadget("g1")).await;
    let g2 = create(&raw, GADGETS, &gadget("g2")).await;
    let w1 = create(&raw, &widgets("default"), &widget_in("default", "w1")).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        "  - group: example.com\n    kinds: [\"*\"]",
    );
    let addr = admin_addr(&config);
    let mut herald = Herald::start(dir.path(), &config);
    assert_eq!(
        sorted(ids(&herald.wait_for(3).await)),
        sorted(vec![
            id_of(&g1, "created"),
            id_of(&g2, "created"),
            id_of(&w1, "created")
        ])
    );
    assert_eq!(herald.terminate().await, Some(0));
    let r = raw.delete(&format!("{CRDS}/gadgets.example.com")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    herald.restart();
    let events = herald.wait_for(5).await;
    assert_synthesized_deletions(&events[3..], &[&g1, &g2]);
    wait_watched(&herald, &addr, &["*.example.com", "widgets.example.com"]).await;
    herald.settle(5).await;
    assert_eq!(herald.terminate().await, Some(0));
    herald.restart();
    let w2 = create(&raw, &widgets("default"), &widget_in("default", "w2")).await;
    let events = herald.wait_for(6).await;
    assert_eq!(ids(&events)[5], id_of(&w2, "created"));
    herald.settle(6).await;
}

/// `initialState: skip` is about what existed at herald's very first start: a CRD of the group
/// installed while herald was down is new, and its objects are reported at the next start.
#[tokio::test]
async fn a_crd_installed_while_herald_was_down_is_reported_despite_initial_state_skip() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    create(&raw, &widgets("default"), &widget_in("default", "w1")).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        "  - group: example.com\n    kinds: [\"*\"]\n    initialState: skip",
    );
    let addr = admin_addr(&config);
    let mut herald = Herald::start(dir.path(), &config);
    wait_watched(&herald, &addr, &["*.example.com", "widgets.example.com"]).await;
    herald.wait_for_log("Listed and reconciled.").await;
    let w2 = create(&raw, &widgets("default"), &widget_in("default", "w2")).await;
    assert_eq!(ids(&herald.wait_for(1).await), [id_of(&w2, "created")]);
    assert_eq!(herald.terminate().await, Some(0));

    raw.install_crd(&gadgets_crd()).await;
    let g1 = create(&raw, GADGETS, &gadget("g1")).await;
    herald.restart();
    let events = herald.wait_for(2).await;
    assert_eq!(ids(&events)[1], id_of(&g1, "created"), "{events:#?}");
    assert_eq!(events[1]["resync"], json!(true));
    herald.settle(2).await;
}

/// With `namespaces: [a, b]`, a cluster-scoped kind of the group gets one watcher (labelled as if
/// configured alone), not one per listed namespace on the same stream; namespaced kinds get one each.
#[tokio::test]
async fn a_cluster_scoped_kind_is_watched_once_with_a_namespace_list() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    raw.install_crd(&crd(
        "example.com",
        "clusterthings",
        "ClusterThing",
        "Cluster",
        &[("v1", true, true)],
    ))
    .await;
    for ns in ["a", "b"] {
        namespace(&raw, ns).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        "  - group: example.com\n    kinds: [\"*\"]\n    namespaces: [a, b]",
    );
    let addr = admin_addr(&config);
    let herald = Herald::start(dir.path(), &config);
    wait_watched(
        &herald,
        &addr,
        &[
            "*.example.com/a",
            "*.example.com/b",
            "clusterthings.example.com",
            "widgets.example.com/a",
            "widgets.example.com/b",
        ],
    )
    .await;
    let t = create(
        &raw,
        "/apis/example.com/v1/clusterthings",
        &json!({"apiVersion": "example.com/v1", "kind": "ClusterThing", "metadata": {"name": "t"}}),
    )
    .await;
    assert_eq!(ids(&herald.wait_for(1).await), [id_of(&t, "created")]);
    herald.settle(1).await;
    // Still one watcher for it (the list is compared again after the settle).
    let got = sorted(watched(&addr).await);
    assert_eq!(
        got.iter()
            .filter(|l| l.starts_with("clusterthings."))
            .count(),
        1,
        "{got:?}"
    );
}

/// The deletions synthesized for a CRD gone while herald was down pass the resource's `when`, as a
/// relist's do.
#[tokio::test]
async fn synthesized_deletions_pass_the_resources_when() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&gadgets_crd()).await;
    let g1 = create(&raw, GADGETS, &gadget("g1")).await;
    create(&raw, GADGETS, &gadget("g2")).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(
        &sim,
        dir.path(),
        "  - group: example.com\n    kinds: [\"*\"]\n    when: \"name != 'g2'\"",
    );
    let mut herald = Herald::start(dir.path(), &config);
    assert_eq!(ids(&herald.wait_for(1).await), [id_of(&g1, "created")]);
    herald.settle(1).await;
    assert_eq!(herald.terminate().await, Some(0));
    let r = raw.delete(&format!("{CRDS}/gadgets.example.com")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    herald.restart();
    let events = herald.wait_for(2).await;
    assert_synthesized_deletions(&events[1..], &[&g1]);
    herald.settle(2).await;
}
