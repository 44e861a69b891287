//! Disk that comes back (issue 18, item 4), with the real binary and real files: a burst fills the
//! journal, retention drops it (`herald_journal_retained_events` falls to 0) but sled keeps the
//! space; `herald journal compact` refuses while herald runs, leaves the journal as it was when it
//! stops before its swap, gives the space back with every cursor, checkpoint and index entry kept,
//! and herald resumes on the compacted journal, after a compaction stopped in the middle of its
//! swap too, delivering every later change once.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{
    Herald, Raw, WIDGETS_RESOURCE, admin_addr, admin_get, herald_config, id_of, ids, sim,
    widgets_crd,
};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";
const BURST: usize = 1_200;
const COMMAND_BOUND: Duration = Duration::from_secs(120);
/// The test hook that stops `herald journal compact` at a step, and its exit code.
const CRASH_ENV: &str = "HERALD_TEST_COMPACT_CRASH_AT";
const CRASHED: i32 = 86;

/// Runs the herald binary (with `env`) under a time bound: `(exit code, stdout, stderr)`.
async fn herald(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_herald"));
    cmd.args(args)
        .env_remove(CRASH_ENV)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(COMMAND_BOUND, cmd.spawn().unwrap().wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("herald {args:?} hung"))
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `herald journal verify --json`'s report of the journal configured in `config`; asserts intact.
async fn verify(config: &Path) -> Value {
    let (code, stdout, stderr) = herald(
        &[
            "journal",
            "verify",
            "-c",
            config.to_str().unwrap(),
            "--json",
        ],
        &[],
    )
    .await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["intact"], true, "{doc}");
    doc["report"].clone()
}

/// What must survive a compaction unchanged.
fn kept(report: &Value) -> Value {
    json!({
        "head": report["head"],
        "events": report["events"],
        "cursors": report["cursors"],
        "checkpoints": report["checkpoints"],
        "indexEntries": report["indexEntries"],
        "deadLetters": report["deadLetters"],
        "liveBytes": report["liveBytes"],
    })
}

fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

async fn create(raw: &Raw, name: &str, pad: &str) -> String {
    let body = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"pad": pad}});
    let reply = raw.post(WIDGETS, &body).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    id_of(&reply.body, "created")
}

#[tokio::test]
async fn compaction_gives_back_a_bursts_space_and_herald_resumes_with_nothing_lost_or_repeated() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(&sim, dir.path(), WIDGETS_RESOURCE);
    let admin = admin_addr(&config);
    let mut run = Herald::start(dir.path(), &config);
    let cfg = run.config.clone();
    let cfg_arg = cfg.to_str().unwrap().to_owned();

    // The burst: objects created and deleted again, all delivered.
    let pad = "x".repeat(1_500);
    let mut created = BTreeSet::new();
    for i in 0..BURST {
        created.insert(create(&raw, &format!("w-{i}"), &pad).await);
    }
    for i in 0..BURST {
        let reply = raw.delete(&format!("{WIDGETS}/w-{i}")).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    run.wait_for(2 * BURST).await;
    // Retention drops it (every 5 s): the journal holds no event, but its files stay.
    run.until(30, "retention dropped the burst", async || {
        let (status, text) = admin_get(&admin, "/metrics").await;
        status == 200 && metric(&text, "herald_journal_retained_events") == Some(0)
    })
    .await;

    // A running herald holds the journal.
    let (code, _, stderr) = herald(&["journal", "compact", "-c", &cfg_arg], &[]).await;
    assert_eq!(code, 12, "{stderr}");
    assert!(stderr.contains("already open"), "{stderr}");
    assert_eq!(run.terminate().await, Some(0));

    let before = verify(&cfg).await;
    assert_eq!(before["events"], 0, "{before}");
    let disk_before = before["diskBytes"].as_u64().unwrap();

    // Stopped after the copy, before the swap: the journal is as it was.
    let (code, _, stderr) = herald(
        &["journal", "compact", "-c", &cfg_arg],
        &[(CRASH_ENV, "copied")],
    )
    .await;
    assert_eq!(code, CRASHED, "{stderr}");
    let after_crash = verify(&cfg).await;
    assert_eq!(kept(&after_crash), kept(&before));
    assert!(
        after_crash["diskBytes"].as_u64().unwrap() * 2 > disk_before,
        "{after_crash}"
    );

    let (code, stdout, stderr) =
        herald(&["journal", "compact", "-c", &cfg_arg, "--json"], &[]).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stderr.contains("compacting the journal"), "{stderr}");
    let out: Value = serde_json::from_str(&stdout).unwrap();
    let (b, a) = (
        out["bytesBefore"].as_u64().unwrap(),
        out["bytesAfter"].as_u64().unwrap(),
    );
    assert!(a * 2 < b, "{out}");
    assert!(out["seconds"].as_f64().is_some(), "{out}");
    assert_eq!(out["eventsKept"], 0, "{out}");
    let compacted = verify(&cfg).await;
    assert_eq!(kept(&compacted), kept(&before));
    assert!(compacted["diskBytes"].as_u64().unwrap() * 2 < disk_before);

    // Stopped in the middle of the swap: the next `herald run` finishes it and resumes.
    let (code, _, stderr) = herald(
        &["journal", "compact", "-c", &cfg_arg],
        &[(CRASH_ENV, "moving-new")],
    )
    .await;
    assert_eq!(code, CRASHED, "{stderr}");
    run.restart();
    let mut later = BTreeSet::new();
    for i in 0..5 {
        later.insert(create(&raw, &format!("after-{i}"), "y").await);
    }
    run.wait_for(2 * BURST + 5).await;
    let delivered = run.settle(2 * BURST + 5).await;
    let all = ids(&delivered);
    let unique: BTreeSet<&String> = all.iter().collect();
    assert_eq!(unique.len(), all.len(), "an event was delivered twice");
    let tail: BTreeSet<String> = all[2 * BURST..].iter().cloned().collect();
    assert_eq!(tail, later);
    assert!(created.iter().all(|id| unique.contains(id)));
    assert_eq!(run.terminate().await, Some(0));
    let resumed = verify(&cfg).await;
    assert_eq!(
        resumed["head"].as_u64().unwrap(),
        before["head"].as_u64().unwrap() + 5
    );
}
