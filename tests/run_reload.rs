//! Live reload of a running `herald run` (issue 23): SIGHUP, a ConfigMap-style symlink swap of the
//! configuration file and `herald reload` each apply a new configuration; an invalid one is refused
//! while the old one keeps delivering. Asserts on what the sinks received (ids), `/status`,
//! `/metrics`, `/readyz` and exit codes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Herald, Raw, Receiver, crd, free_port, sim, widget, widgets_crd};

fn gadgets_crd() -> Value {
    crd(
        "example.com",
        "gadgets",
        "Gadget",
        "Namespaced",
        &[("v1", true, true)],
    )
}

async fn create(raw: &Raw, plural: &str, name: &str) {
    let mut obj = widget(name, json!({}), json!({}));
    if plural == "gadgets" {
        obj["kind"] = json!("Gadget");
    }
    let reply = raw
        .post(
            &format!("/apis/example.com/v1/namespaces/default/{plural}"),
            &obj,
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
}

async fn get(addr: &str, path: &str) -> (u16, String) {
    let r = reqwest::get(format!("http://{addr}{path}")).await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

async fn status(addr: &str) -> Value {
    serde_json::from_str(&get(addr, "/status").await.1).unwrap()
}

/// Waits until `/status` answers and `check` holds of it; panics with it and herald's stderr after
/// 20 s.
async fn status_until(herald: &Herald, addr: &str, what: &str, check: impl Fn(&Value) -> bool) {
    let started = Instant::now();
    loop {
        let doc = match reqwest::get(format!("http://{addr}/status")).await {
            Ok(r) => r.json::<Value>().await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if doc.as_ref().is_ok_and(&check) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{what}: /status {doc:#?}\n--- herald stderr ---\n{}",
            herald.stderr_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The ids in a file sink's output, in file order (complete lines only).
fn file_ids(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_inclusive('\n')
        .filter_map(|l| l.strip_suffix('\n'))
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let e: Value = serde_json::from_str(l).unwrap();
            e["id"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// The objects (`namespace/name` subjects end in the name) a file sink's output names.
fn file_names(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_inclusive('\n')
        .filter_map(|l| l.strip_suffix('\n'))
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let e: Value = serde_json::from_str(l).unwrap();
            e["subject"]
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .to_owned()
        })
        .collect()
}

fn unique(ids: &[String]) -> BTreeSet<String> {
    let set: BTreeSet<String> = ids.iter().cloned().collect();
    assert_eq!(set.len(), ids.len(), "duplicates among {ids:?}");
    set
}

async fn wait_until(herald: &Herald, what: &str, check: impl Fn() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{what}\n--- herald stderr ---\n{}",
            herald.stderr_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn file_sink(name: &str, path: &Path) -> String {
    format!(
        "  - name: {name}\n    type: file\n    path: {}\n    fsync: always\n",
        path.display()
    )
}

/// A configuration for `resources` (YAML list body) and `sinks` (YAML list body), with the journal,
/// admin address and token fixed by `base`.
struct Base {
    kubeconfig: PathBuf,
    journal: PathBuf,
    token: PathBuf,
    listen: String,
}

impl Base {
    fn new(sim: &herald_sim::Simulator, dir: &Path) -> Self {
        let token = dir.join("token");
        std::fs::write(&token, "s3cret\n").unwrap();
        Self {
            kubeconfig: sim.kubeconfig_path().to_path_buf(),
            journal: dir.join("journal"),
            token,
            listen: format!("127.0.0.1:{}", free_port()),
        }
    }

    fn config(&self, resources: &str, sinks: &str) -> String {
        format!(
            "cluster:\n  name: test\n  kubeconfig:\n    path: {}\nresources:\n{resources}sinks:\n{sinks}journal:\n  path: {}\n  flushInterval: 2ms\nadmin:\n  listen: {}\n  token: {{fromFile: {}}}\n",
            self.kubeconfig.display(),
            self.journal.display(),
            self.listen,
            self.token.display()
        )
    }
}

const WIDGETS: &str = "  - group: example.com\n    kind: Widget\n";
const GADGETS: &str = "  - group: example.com\n    kind: Gadget\n";

/// Starts `herald run -c config` (a path already written).
fn start(dir: &Path, config: PathBuf, args: &[&str]) -> Herald {
    let mut h = Herald {
        child: None,
        config,
        events: dir.join("out.jsonl"),
        stderr: dir.join("herald.stderr"),
        bin: None,
        args: args.iter().map(|a| (*a).to_owned()).collect(),
    };
    h.restart();
    h
}

#[tokio::test]
async fn sighup_adds_a_resource_and_a_sink_removes_a_sink_and_changes_others_while_changes_flow() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    raw.install_crd(&gadgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let base = Base::new(&sim, dir.path());
    let (out, old) = (dir.path().join("out.jsonl"), dir.path().join("old.jsonl"));
    let receiver = Receiver::start().await;
    let lag = Receiver::start().await;
    let lag_sink = |timeout: &str| {
        format!(
            "  - name: lag\n    type: webhook\n    url: {}\n    timeout: {timeout}\n",
            lag.url
        )
    };
    let config = dir.path().join("herald.yaml");
    std::fs::write(
        &config,
        base.config(
            WIDGETS,
            &format!(
                "{}{}{}",
                file_sink("out", &out),
                file_sink("old", &old),
                lag_sink("2s")
            ),
        ),
    )
    .unwrap();
    // A short drain: the reload stops `lag` while its receiver fails.
    let herald = start(dir.path(), config.clone(), &["--drain-timeout", "1s"]);
    let addr = base.listen.clone();

    for i in 0..5 {
        create(&raw, "widgets", &format!("w{i}")).await;
    }
    wait_until(&herald, "the first five reach every sink", || {
        file_ids(&out).len() == 5 && file_ids(&old).len() == 5 && lag.taken_ids().len() == 5
    })
    .await;
    // `lag` falls behind: what it has not delivered when the reload changes it must still come,
    // from its cursor, once its receiver is back.
    lag.status.store(503, Ordering::SeqCst);

    // Changes keep flowing while the reload happens.
    let reloaded = Arc::new(AtomicBool::new(false));
    let producer = {
        let raw = Raw::new(&sim);
        let reloaded = reloaded.clone();
        tokio::spawn(async move {
            let mut after = Vec::new();
            // Until a few were created after the reload (it waits for `lag`'s drain).
            let mut i = 5;
            while after.len() < 10 && i < 400 {
                let was_reloaded = reloaded.load(Ordering::SeqCst);
                create(&raw, "widgets", &format!("w{i}")).await;
                if was_reloaded {
                    after.push(format!("w{i}"));
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            (i, after)
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let hook = format!(
        "  - name: hook\n    type: webhook\n    url: {}\n    timeout: 2s\n",
        receiver.url
    );
    // `out` and the widgets change too (keys that change nothing they deliver): both restart, and
    // must resume from their cursor and checkpoint, or `out` would get events twice (the watcher
    // would list every widget again as `created`).
    std::fs::write(
        &config,
        base.config(
            &format!("{WIDGETS}    skipStatusOnlyUpdates: true\n{GADGETS}"),
            &format!(
                "{}    fsyncInterval: 50ms\n{hook}{}",
                file_sink("out", &out),
                lag_sink("3s")
            ),
        ),
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
    status_until(&herald, &addr, "generation 2 after SIGHUP", |s| {
        s["config"]["generation"] == 2
    })
    .await;
    reloaded.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    lag.status.store(204, Ordering::SeqCst);
    let old_at_reload = file_ids(&old);
    let doc = status(&addr).await;
    assert_eq!(doc["config"]["lastReloadError"], Value::Null, "{doc:#}");
    let mut sinks: Vec<&str> = doc["sinks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sink"].as_str().unwrap())
        .collect();
    sinks.sort_unstable();
    assert_eq!(sinks, ["hook", "lag", "out"], "{doc:#}");
    assert_eq!(doc["resources"].as_array().unwrap().len(), 2, "{doc:#}");

    for i in 0..3 {
        create(&raw, "gadgets", &format!("g{i}")).await;
    }
    let (widgets, after) = producer.await.unwrap();
    let total = widgets + 3;
    assert!(
        !after.is_empty(),
        "some widgets were created after the reload"
    );

    // `out` stayed (changed): every change exactly once.
    wait_until(&herald, "out gets every widget and 3 gadgets", || {
        file_ids(&out).len() >= total
    })
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let out_ids = unique(&file_ids(&out));
    assert_eq!(out_ids.len(), total, "{out_ids:?}");
    let mut expected: BTreeSet<String> = (0..widgets).map(|i| format!("w{i}")).collect();
    expected.extend((0..3).map(|i| format!("g{i}")));
    let names: BTreeSet<String> = file_names(&out).into_iter().collect();
    assert_eq!(names, expected);

    // `lag` (changed while behind) resumed from its cursor: everything, once.
    wait_until(&herald, "lag catches up", || lag.taken_ids().len() >= total).await;
    let lag_names: BTreeSet<String> = lag
        .taken
        .lock()
        .unwrap()
        .iter()
        .map(|t| t.1.rsplit('/').next().unwrap().to_owned())
        .collect();
    assert_eq!(lag_names, expected);
    assert_eq!(unique(&lag.taken_ids()).len(), total);

    // `hook` is new: it starts at the journal head, so none of the first five, and it gets
    // everything created after the reload, each once.
    let hook_ids = receiver.taken_ids();
    let hook_set = unique(&hook_ids);
    assert!(hook_set.is_subset(&out_ids), "{hook_ids:?}");
    let hook_names: BTreeSet<String> = receiver
        .taken
        .lock()
        .unwrap()
        .iter()
        .map(|t| t.1.rsplit('/').next().unwrap().to_owned())
        .collect();
    for name in after.iter().chain(&["g0".into(), "g1".into(), "g2".into()]) {
        assert!(
            hook_names.contains(name),
            "hook lacks {name}: {hook_names:?}"
        );
    }
    for i in 0..5 {
        assert!(
            !hook_names.contains(&format!("w{i}")),
            "hook started at the head, yet got w{i}"
        );
    }

    // `old` was removed: nothing more after the reload, nothing twice.
    let old_ids = file_ids(&old);
    unique(&old_ids);
    assert_eq!(
        old_ids, old_at_reload,
        "old received events after its removal"
    );
    let old_names: BTreeSet<String> = file_names(&old).into_iter().collect();
    for name in after.iter().chain(&["g0".into()]) {
        assert!(
            !old_names.contains(name),
            "old got {name} after its removal"
        );
    }
}

/// Makes `cm` a ConfigMap volume as the kubelet writes it (`herald.yaml -> ..data/herald.yaml`,
/// `..data -> ..<version>`), or swaps it to a new version as the kubelet does on an update: a new
/// timestamped directory, a new `..data_tmp` link renamed over `..data`.
fn configmap(cm: &Path, version: &str, text: &str) -> PathBuf {
    let data = cm.join(version);
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("herald.yaml"), text).unwrap();
    let tmp = cm.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(version, &tmp).unwrap();
    std::fs::rename(&tmp, cm.join("..data")).unwrap();
    let link = cm.join("herald.yaml");
    if std::fs::symlink_metadata(&link).is_err() {
        std::os::unix::fs::symlink("..data/herald.yaml", &link).unwrap();
    }
    link
}

fn reload_cli(config: &Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["reload", "--json", "-c"])
        .arg(config)
        .output()
        .unwrap()
}

#[tokio::test]
async fn a_configmap_swap_reloads_a_broken_file_is_refused_and_herald_reload_needs_the_token() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let base = Base::new(&sim, dir.path());
    let (out, second) = (
        dir.path().join("out.jsonl"),
        dir.path().join("second.jsonl"),
    );
    let cm = dir.path().join("cm");
    let good = base.config(WIDGETS, &file_sink("out", &out));
    let config = configmap(&cm, "..2026_01_01_00_00_00.1", &good);
    let herald = start(dir.path(), config.clone(), &[]);
    let addr = base.listen.clone();

    create(&raw, "widgets", "w0").await;
    wait_until(&herald, "w0 delivered", || file_ids(&out).len() == 1).await;

    // A broken update: refused, the error on /status with its path, the metrics say so, herald
    // stays ready and keeps delivering with the old configuration.
    let broken = good.replace("type: file", "type: nope");
    configmap(&cm, "..2026_01_01_00_01_00.2", &broken);
    status_until(&herald, &addr, "the broken file refused", |s| {
        s["config"]["lastReloadError"].is_string()
    })
    .await;
    let doc = status(&addr).await;
    assert_eq!(doc["config"]["generation"], 1, "{doc:#}");
    let error = doc["config"]["lastReloadError"].as_str().unwrap();
    assert!(
        error.contains("sinks[0]") && error.contains("herald.yaml"),
        "{error}"
    );
    let (code, metrics) = get(&addr, "/metrics").await;
    assert_eq!(code, 200);
    assert!(
        metrics.contains("\nherald_config_reload_failures_total 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("\nherald_config_last_reload_success 0\n"),
        "{metrics}"
    );
    assert_eq!(get(&addr, "/readyz").await.0, 200);
    create(&raw, "widgets", "w1").await;
    wait_until(&herald, "w1 delivered by the old configuration", || {
        file_ids(&out).len() == 2
    })
    .await;

    // A good update adds a sink: applied, the error cleared; the new sink starts at the head.
    let with_second = base.config(
        WIDGETS,
        &format!("{}{}", file_sink("out", &out), file_sink("second", &second)),
    );
    configmap(&cm, "..2026_01_01_00_02_00.3", &with_second);
    status_until(&herald, &addr, "the swap applied", |s| {
        s["config"]["generation"] == 2
    })
    .await;
    assert_eq!(
        status(&addr).await["config"]["lastReloadError"],
        Value::Null
    );
    create(&raw, "widgets", "w2").await;
    wait_until(&herald, "w2 reaches both sinks", || {
        file_ids(&out).len() == 3 && !file_ids(&second).is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(file_names(&second), ["w2"]);
    assert_eq!(file_names(&out), ["w0", "w1", "w2"]);
    let metrics = get(&addr, "/metrics").await.1;
    assert!(
        metrics.contains("\nherald_config_last_reload_success 1\n"),
        "{metrics}"
    );

    // `herald reload` without the token is refused (and nothing reloads); with it, it reloads.
    let no_token = dir.path().join("no-token.yaml");
    std::fs::write(
        &no_token,
        with_second
            .lines()
            .filter(|l| !l.contains("token:"))
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .unwrap();
    let refused = reload_cli(&no_token);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("401"),
        "{refused:?}"
    );
    assert_eq!(status(&addr).await["config"]["generation"], 2);
    let ok = reload_cli(&config);
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");
    let answer: Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(answer["generation"], 3, "{answer}");
    assert_eq!(status(&addr).await["config"]["generation"], 3);
    // Nothing was re-delivered by the reloads.
    create(&raw, "widgets", "w3").await;
    wait_until(&herald, "w3 delivered", || file_ids(&out).len() == 4).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    unique(&file_ids(&out));
    assert_eq!(file_names(&out), ["w0", "w1", "w2", "w3"]);
    assert_eq!(file_names(&second), ["w2", "w3"]);
}

#[tokio::test]
async fn a_removed_sink_that_comes_back_within_retain_resumes_and_a_restart_only_change_is_refused()
{
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let base = Base::new(&sim, dir.path());
    let (out, back) = (dir.path().join("out.jsonl"), dir.path().join("back.jsonl"));
    let config = dir.path().join("herald.yaml");
    let write = |sinks: &str| {
        let text = base.config(WIDGETS, sinks).replace(
            "  flushInterval: 2ms\n",
            "  flushInterval: 2ms\n  retain: 1h\n",
        );
        std::fs::write(&config, text).unwrap();
    };
    let both = format!("{}{}", file_sink("out", &out), file_sink("back", &back));
    write(&both);
    let herald = start(dir.path(), config.clone(), &[]);
    let addr = base.listen.clone();
    create(&raw, "widgets", "w0").await;
    wait_until(&herald, "w0 reaches both", || {
        file_ids(&out).len() == 1 && file_ids(&back).len() == 1
    })
    .await;

    // `back` removed: its cursor stays (journal.retain is 1h) while events pass it by.
    write(&file_sink("out", &out));
    let removed = reload_cli(&config);
    assert_eq!(removed.status.code(), Some(0), "{removed:?}");
    create(&raw, "widgets", "w1").await;
    create(&raw, "widgets", "w2").await;
    wait_until(&herald, "w1 and w2 reach out", || file_ids(&out).len() == 3).await;
    assert_eq!(file_names(&back), ["w0"]);
    // Past a few of the once-a-second passes that drop the cursors of removed sinks past retain.
    tokio::time::sleep(Duration::from_millis(2500)).await;

    // Back again: it resumes from its cursor, so it gets what it missed, once. (The file poll may
    // apply a write before `herald reload` does: generations are compared, not counted.)
    let before = status(&addr).await["config"]["generation"]
        .as_u64()
        .unwrap();
    write(&both);
    let added = reload_cli(&config);
    assert_eq!(added.status.code(), Some(0), "{added:?}");
    let answer: Value = serde_json::from_slice(&added.stdout).unwrap();
    let generation = answer["generation"].as_u64().unwrap();
    assert!(generation > before, "{answer}");
    wait_until(&herald, "back catches up", || file_ids(&back).len() >= 3).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    unique(&file_ids(&back));
    assert_eq!(file_names(&back), ["w0", "w1", "w2"]);

    // Moving the journal needs a restart: refused (exit 10, naming the field), nothing changes.
    std::fs::write(
        &config,
        std::fs::read_to_string(&config).unwrap().replace(
            &format!("path: {}", base.journal.display()),
            "path: /elsewhere",
        ),
    )
    .unwrap();
    let refused = reload_cli(&config);
    assert_eq!(refused.status.code(), Some(10), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("journal.path") && stderr.contains("restart"),
        "{stderr}"
    );
    let doc = status(&addr).await;
    assert_eq!(doc["config"]["generation"], generation, "{doc:#}");
    assert!(
        doc["config"]["lastReloadError"]
            .as_str()
            .is_some_and(|e| e.contains("journal.path")),
        "{doc:#}"
    );
    create(&raw, "widgets", "w3").await;
    wait_until(&herald, "w3 reaches both", || {
        file_ids(&out).len() == 4 && file_ids(&back).len() == 4
    })
    .await;
}
