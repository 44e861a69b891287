//! Fault: a damaged journal (issue 14, item 2). A journal written by the real binary is truncated
//! as a full disk, a bad copy or a broken volume would leave it; `herald status`, `herald dlq list`
//! and `herald run` must then exit 12 (never panic with 101, never hang) or open it intact with
//! nothing lost, never silently rolled back; `herald journal verify` says so, and
//! `herald journal salvage` followed by `herald run` delivers every change. Also: a journal written
//! by an earlier layout (schema 1, `tests/fixtures/journal-v1`; schema 2,
//! `tests/fixtures/journal-v2`; schema 3, `tests/fixtures/journal-v3`; schema 4,
//! `tests/fixtures/journal-v4`; schema 5, `tests/fixtures/journal-v5`; schema 6,
//! `tests/fixtures/journal-v6`) opens, is upgraded and delivers its events; a journal of a newer
//! layout is refused with exit 12.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{
    Herald, Raw, Receiver, admin_addr, free_port, herald_config, id_of, sim, widgets_crd,
};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";
/// Longer than herald's open bound (30 s without progress), so a stall ends as exit 12 in time.
const COMMAND_BOUND: Duration = Duration::from_secs(60);
const OBJECTS: usize = 400;

/// Runs the herald binary with a time bound: `(exit code, stdout, stderr)`. Panics when it hangs.
async fn herald(args: &[&str]) -> (i32, String, String) {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(COMMAND_BOUND, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("herald {args:?} hung for {COMMAND_BOUND:?}"))
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A journal built by `herald run`, stopped cleanly, and what it holds.
struct Built {
    _sim: herald_sim::Simulator,
    raw: Raw,
    dir: tempfile::TempDir,
    config: PathBuf,
    journal: PathBuf,
    /// The intact journal, copied after the clean stop.
    intact: PathBuf,
    /// The ids of every change made so far.
    ids: BTreeSet<String>,
    /// The intact journal's head.
    head: u64,
    /// The port of the `late` webhook sink, down until the test starts a receiver there.
    late_port: u16,
}

impl Built {
    /// Creates `n` widgets named `<prefix>-<i>`, each with some bulk so the store grows past a few
    /// MiB; returns their `created` ids. The bulk is bytes LZ4 finds no repeats in: the journal
    /// compresses its values (schema 6), and a repeated byte would shrink to nothing.
    async fn create(&mut self, prefix: &str, n: usize) {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ prefix.len() as u64;
        for i in 0..n {
            let pad: String = (0..1_500)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    char::from(b"0123456789abcdefghijklmnopqrstuv"[(state % 32) as usize])
                })
                .collect();
            let body = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": format!("{prefix}-{i}"), "namespace": "default"},
                "spec": {"size": i, "pad": pad}});
            let reply = self.raw.post(WIDGETS, &body).await;
            assert_eq!(reply.status, 201, "{}", reply.body);
            self.ids.insert(id_of(&reply.body, "created"));
        }
    }

    fn config_arg(&self) -> &str {
        self.config.to_str().unwrap()
    }

    /// Puts a fresh copy of `from` where the configuration's journal is.
    fn restore(&self, from: &Path) {
        copy_dir(from, &self.journal);
    }
}

/// Two sinks: the file `out` (delivers at once) and the webhook `late`, whose port is closed while
/// the journal is built, so its events stay undelivered in the journal.
async fn build() -> Built {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let late_port = free_port();
    let config = herald_config(&sim, dir.path(), "  - group: example.com\n    kind: Widget")
        .replace(
            "    fsync: always\n",
            &format!(
                "    fsync: always\n  - {{name: late, type: webhook, url: 'http://127.0.0.1:{late_port}/hook', timeout: 1s}}\n"
            ),
        );
    let mut built = Built {
        _sim: sim,
        raw,
        config: dir.path().join("herald.yaml"),
        journal: dir.path().join("journal"),
        intact: dir.path().join("intact"),
        dir,
        ids: BTreeSet::new(),
        head: 0,
        late_port,
    };
    let mut run = Herald::start(built.dir.path(), &config);
    let admin = admin_addr(&config);
    wait_ready(&admin, &mut run).await;
    built.create("w", OBJECTS).await;
    run.wait_for(OBJECTS).await;
    assert_eq!(run.terminate().await, Some(0));
    copy_dir(&built.journal, &built.intact);
    let (code, stdout, stderr) = herald(&["status", "-c", built.config_arg(), "--json"]).await;
    assert_eq!(code, 0, "{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    built.head = doc["journal"]["head"].as_u64().unwrap();
    assert_eq!(built.head, OBJECTS as u64, "{doc}");
    built
}

async fn wait_ready(admin: &str, run: &mut Herald) {
    let started = Instant::now();
    loop {
        if let Ok(r) = reqwest::get(format!("http://{admin}/readyz")).await
            && r.status().is_success()
        {
            return;
        }
        if let Some(status) = run.child.as_mut().unwrap().try_wait().unwrap() {
            panic!(
                "herald exited with {status}: {}",
                std::fs::read_to_string(&run.stderr).unwrap_or_default()
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "herald not ready"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What `herald run` did with the journal: exited (with its code) or runs (and reports this head).
enum RunOutcome {
    Exited(i32),
    Running { head: u64 },
}

async fn run_outcome(built: &Built) -> RunOutcome {
    let config = std::fs::read_to_string(&built.config).unwrap();
    let admin = admin_addr(&config);
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["run", "-c", built.config_arg(), "--drain-timeout", "1s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return RunOutcome::Exited(status.code().unwrap_or(-1));
        }
        if let Ok(r) = reqwest::get(format!("http://{admin}/status")).await
            && r.status().is_success()
        {
            let doc: Value = r.json().await.unwrap();
            let pid = child.id().unwrap().to_string();
            std::process::Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap();
            let _ = tokio::time::timeout(COMMAND_BOUND, child.wait()).await;
            return RunOutcome::Running {
                head: doc["journal"]["head"].as_u64().unwrap_or(0),
            };
        }
        assert!(
            started.elapsed() < COMMAND_BOUND,
            "herald run neither exited nor answered for {COMMAND_BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Truncates sled's data file (`db`: its log, in 512 KiB segments) of the intact journal to
/// `keep(len)` bytes, then checks every command against it (each on a fresh copy: sled's recovery
/// rewrites what it opens), then salvages and checks that every change reaches both sinks.
async fn truncated(keep: impl Fn(u64) -> u64) {
    let mut built = build().await;
    let damaged = built.dir.path().join("damaged");
    copy_dir(&built.intact, &damaged);
    let db = damaged.join("db");
    let len = std::fs::metadata(&db).unwrap().len();
    let to = keep(len);
    assert!(to < len, "the store is only {len} bytes");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&db)
        .unwrap()
        .set_len(to)
        .unwrap();

    built.restore(&damaged);
    let (code, stdout, stderr) = herald(&["status", "-c", built.config_arg(), "--json"]).await;
    let is_damaged = match code {
        12 => {
            assert!(
                stderr.contains("herald journal salvage") && stderr.contains("journal"),
                "{stderr}"
            );
            true
        }
        0 => {
            let doc: Value = serde_json::from_str(&stdout).unwrap();
            // Opened: then nothing committed may be missing (a silent rollback fails here).
            assert_eq!(
                doc["journal"]["head"].as_u64(),
                Some(built.head),
                "herald status opened a rolled-back journal: {doc}"
            );
            false
        }
        other => panic!("herald status exited {other}: {stderr}"),
    };

    built.restore(&damaged);
    let (code, _, stderr) =
        herald(&["dlq", "-c", built.config_arg(), "list", "--sink", "out"]).await;
    assert_eq!(code, if is_damaged { 12 } else { 0 }, "{stderr}");

    built.restore(&damaged);
    match run_outcome(&built).await {
        RunOutcome::Exited(code) => assert!(is_damaged && code == 12, "herald run exited {code}"),
        RunOutcome::Running { head } => {
            assert!(!is_damaged, "herald run started on a damaged journal");
            assert!(head >= built.head, "herald run rolled back to {head}");
        }
    }

    built.restore(&damaged);
    let (code, stdout, stderr) =
        herald(&["journal", "verify", "-c", built.config_arg(), "--json"]).await;
    assert_eq!(code, if is_damaged { 12 } else { 0 }, "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["intact"], !is_damaged, "{report}");

    // What an operator does next: salvage the store verify's recovery left. sled may panic
    // recovering a cut log, yet a second recovery of what the first left can read it whole (seen
    // once the log held no `i/` key per event): whatever salvage finds there, it succeeds and
    // leaves an intact journal that has not rolled back.
    let (code, stdout, stderr) =
        herald(&["journal", "salvage", "-c", built.config_arg(), "--json"]).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    // Its moved-aside copy is named by the time, to the second: out of the way of the salvage
    // below.
    if let Some(moved) = serde_json::from_str::<Value>(&stdout).unwrap()["movedTo"].as_str() {
        std::fs::remove_dir_all(moved).unwrap();
    }
    let (code, stdout, stderr) =
        herald(&["journal", "verify", "-c", built.config_arg(), "--json"]).await;
    assert_eq!(
        code, 0,
        "the salvaged journal is not intact: {stdout}\n{stderr}"
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert!(
        report["report"]["head"].as_u64() >= Some(built.head),
        "salvage rolled back: {report}"
    );

    // Changes made while herald is down, after the damage; salvaged from a fresh copy of the
    // damaged store, as verify saw it, so that verify's verdict decides what salvage must do.
    built.create("after", 20).await;
    built.restore(&damaged);
    let (code, stdout, stderr) =
        herald(&["journal", "salvage", "-c", built.config_arg(), "--json"]).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let salvaged: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(salvaged["movedTo"].is_string(), is_damaged, "{salvaged}");
    let (code, _, stderr) = herald(&["journal", "verify", "-c", built.config_arg()]).await;
    assert_eq!(code, 0, "the salvaged journal is not intact: {stderr}");

    // Every change reaches both sinks (the file sink got the earlier ones before the damage).
    let late = Receiver::start_on(built.late_port).await;
    let config = std::fs::read_to_string(&built.config).unwrap();
    let run = Herald::start(built.dir.path(), &config);
    let started = Instant::now();
    loop {
        let file: BTreeSet<String> = run
            .delivered()
            .iter()
            .filter_map(|e| e["id"].as_str().map(str::to_owned))
            .collect();
        let hook: BTreeSet<String> = late.taken_ids().into_iter().collect();
        let missing_file: Vec<&String> = built.ids.difference(&file).collect();
        let missing_hook: Vec<&String> = built.ids.difference(&hook).collect();
        if missing_file.is_empty() && missing_hook.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "after salvage, {} change(s) never reached the file sink and {} the webhook, e.g. {:?} {:?}\n{salvaged}\n--- herald stderr ---\n{}",
            missing_file.len(),
            missing_hook.len(),
            missing_file.first(),
            missing_hook.first(),
            std::fs::read_to_string(&run.stderr).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_journal_truncated_by_half_is_refused_then_salvaged_without_loss() {
    truncated(|len| len / 2).await;
}

#[tokio::test]
async fn a_journal_truncated_by_one_mib_is_refused_then_salvaged_without_loss() {
    truncated(|len| len - 1024 * 1024).await;
}

#[tokio::test]
async fn a_journal_truncated_by_three_mb_is_refused_then_salvaged_without_loss() {
    truncated(|len| len - 3_000_000).await;
}

#[tokio::test]
async fn a_journal_truncated_by_100_kb_is_refused_then_salvaged_without_loss() {
    truncated(|len| len - 100_000).await;
}

#[tokio::test]
async fn a_journal_truncated_by_a_few_bytes_opens_intact_or_is_refused() {
    truncated(|len| len - 5).await;
}

#[tokio::test]
async fn a_journal_that_makes_sled_panic_is_refused_with_exit_12_and_salvaged() {
    let sim = sim().await;
    Raw::new(&sim).install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let archive = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/journal-sled-panics/journal.tar.gz");
    let unpacked = std::process::Command::new("tar")
        .arg("xzf")
        .arg(&archive)
        .arg("-C")
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(unpacked.success());
    let damaged = dir.path().join("damaged");
    std::fs::rename(dir.path().join("journal"), &damaged).unwrap();
    let config = herald_config(&sim, dir.path(), "  - group: example.com\n    kind: Widget");
    let config_path = dir.path().join("herald.yaml");
    std::fs::write(&config_path, &config).unwrap();
    let config_arg = config_path.to_str().unwrap();
    let journal = dir.path().join("journal");

    for args in [
        vec!["status", "-c", config_arg],
        vec!["dlq", "-c", config_arg, "list", "--sink", "out"],
        vec!["run", "-c", config_arg],
        vec!["journal", "verify", "-c", config_arg],
    ] {
        copy_dir(&damaged, &journal);
        let (code, stdout, stderr) = herald(&args).await;
        assert_eq!(code, 12, "herald {args:?}: {stderr}");
        // Named as damage (verify prints its report on stdout), not a panic's backtrace.
        assert!(
            format!("{stdout}{stderr}").contains("sled panicked")
                && !stderr.contains("stack backtrace"),
            "{stdout}\n{stderr}"
        );
    }
    copy_dir(&damaged, &journal);
    let (code, stdout, stderr) = herald(&["journal", "salvage", "-c", config_arg]).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let (code, stdout, stderr) = herald(&["journal", "verify", "-c", config_arg]).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
}

/// Opens a fixture journal of six undelivered events the way an operator's first command after an
/// upgrade would (`herald status` with a configuration on it): the open upgrades it, and the six
/// events are there, undelivered. Returns the configuration.
async fn upgrade_by_status(sim: &herald_sim::Simulator, dir: &Path) -> String {
    let config = herald_config(sim, dir, "  - group: example.com\n    kind: Widget");
    let config_path = dir.join("herald.yaml");
    std::fs::write(&config_path, &config).unwrap();
    let (code, stdout, stderr) =
        herald(&["status", "-c", config_path.to_str().unwrap(), "--json"]).await;
    assert_eq!(code, 0, "{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["journal"]["head"], 6, "{doc}");
    assert_eq!(doc["journal"]["backlog"], 6, "{doc}");
    config
}

/// `herald journal verify --json` of an intact journal: its report.
async fn verify_report(journal: &Path) -> Value {
    let (code, stdout, stderr) = herald(&[
        "journal",
        "verify",
        "--journal",
        journal.to_str().unwrap(),
        "--json",
    ])
    .await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    serde_json::from_str::<Value>(&stdout).unwrap()
}

/// Runs herald on an upgraded fixture and checks that each of its six undelivered events arrives.
async fn delivers_the_fixture(dir: &Path, config: &str, ids: &[String]) {
    let run = Herald::start(dir, config);
    let delivered: BTreeSet<String> = run
        .wait_for(6)
        .await
        .iter()
        .filter_map(|e| e["id"].as_str().map(str::to_owned))
        .collect();
    for id in ids {
        assert!(delivered.contains(id), "{id} not delivered: {delivered:?}");
    }
}

/// Copies the schema-1 fixture into `dir/journal` (never open the fixture in place).
fn v1_fixture(dir: &Path) -> (PathBuf, Vec<String>) {
    fixture("journal-v1", dir)
}

/// Copies `tests/fixtures/<name>` into `dir/journal` and reads its `ids.txt`.
fn fixture(name: &str, dir: &Path) -> (PathBuf, Vec<String>) {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let journal = dir.join("journal");
    copy_dir(&fixture.join("journal"), &journal);
    let ids = std::fs::read_to_string(fixture.join("ids.txt"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    (journal, ids)
}

#[tokio::test]
async fn a_journal_written_by_schema_1_is_upgraded_and_delivers_its_events() {
    let sim = sim().await;
    Raw::new(&sim).install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let (journal, ids) = v1_fixture(dir.path());
    assert_eq!(ids.len(), 6);
    assert!(!journal.join("herald.head").exists());
    // Opening upgrades it: the six events are there, undelivered, and the head record is written.
    let config = upgrade_by_status(&sim, dir.path()).await;
    let record = std::fs::read_to_string(journal.join("herald.head")).unwrap();
    assert!(record.contains("00000000000000000006"), "{record}");
    let report = verify_report(&journal).await;
    assert_eq!(report["report"]["schemaVersion"], "7", "{report}");

    // And `run` delivers them (sink `out` kept its cursor at 0).
    delivers_the_fixture(dir.path(), &config, &ids).await;
}

#[tokio::test]
async fn a_journal_written_by_schema_2_is_upgraded_and_delivers_its_events() {
    let sim = sim().await;
    Raw::new(&sim).install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let (journal, ids) = fixture("journal-v2", dir.path());
    assert_eq!(ids.len(), 6);
    let config = upgrade_by_status(&sim, dir.path()).await;
    let report = verify_report(&journal).await;
    assert_eq!(report["report"]["schemaVersion"], "7", "{report}");
    assert_eq!(report["report"]["cursors"]["out"], 0, "{report}");

    delivers_the_fixture(dir.path(), &config, &ids).await;
}

#[tokio::test]
async fn a_journal_written_by_schema_3_is_upgraded_and_delivers_its_events() {
    let sim = sim().await;
    Raw::new(&sim).install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let (journal, ids) = fixture("journal-v3", dir.path());
    assert_eq!(ids.len(), 6);
    let verify = async || verify_report(&journal).await;
    // Verify reads it as it is (no upgrade): version 3, intact, no first-sync marker.
    let report = verify().await;
    assert_eq!(report["report"]["schemaVersion"], "3", "{report}");
    assert_eq!(
        report["report"]["skippingFirstSyncs"],
        json!([]),
        "{report}"
    );
    assert_eq!(report["report"]["indexEntries"], 6, "{report}");
    let config = upgrade_by_status(&sim, dir.path()).await;
    let report = verify().await;
    assert_eq!(report["report"]["schemaVersion"], "7", "{report}");
    assert_eq!(report["report"]["cursors"]["out"], 0, "{report}");
    assert_eq!(
        report["report"]["checkpoints"].as_object().map(|c| c.len()),
        Some(1),
        "{report}"
    );

    delivers_the_fixture(dir.path(), &config, &ids).await;
}

/// Schema 4 stored one event per `e/` key; schema 5 stores an append's events in segments. The
/// fixture's six single-event keys stay as they are beside the segments appended after the upgrade.
#[tokio::test]
async fn a_journal_written_by_schema_4_is_upgraded_and_delivers_its_events() {
    upgrades_and_delivers_six_events("journal-v4", "4", None).await;
}

/// Schema 5 stored values plain; schema 6 compresses them. The fixture's plain segments (one of
/// three events) and index entries stay readable beside the compressed values appended after the
/// upgrade, and its six events are delivered.
#[tokio::test]
async fn a_journal_written_by_schema_5_is_upgraded_and_delivers_its_events() {
    upgrades_and_delivers_six_events("journal-v5", "5", Some(6)).await;
}

/// Schema 6 wrote one `i/` key per index update; schema 7 gathers an append's updates in one `u/`
/// key and folds them into the `i/` keys later. The fixture's index entries are read beside the
/// gathered updates of later appends, and its six events are delivered.
#[tokio::test]
async fn a_journal_written_by_schema_6_is_upgraded_and_delivers_its_events() {
    upgrades_and_delivers_six_events("journal-v6", "6", Some(6)).await;
}

/// A fixture of six events, written by the herald of schema `version`, reads as it is, is upgraded
/// to the current schema by a start, keeps its events (and `index` entries, when given) readable
/// and delivers all six.
async fn upgrades_and_delivers_six_events(name: &str, version: &str, index: Option<u64>) {
    let sim = sim().await;
    Raw::new(&sim).install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let (journal, ids) = fixture(name, dir.path());
    assert_eq!(ids.len(), 6);
    let verify = async || verify_report(&journal).await;
    let report = verify().await;
    assert_eq!(report["report"]["schemaVersion"], version, "{report}");
    assert_eq!(report["report"]["events"], 6, "{report}");
    if let Some(index) = index {
        assert_eq!(report["report"]["indexEntries"], index, "{report}");
    }
    let config = upgrade_by_status(&sim, dir.path()).await;
    let report = verify().await;
    assert_eq!(report["report"]["schemaVersion"], "7", "{report}");
    assert_eq!(report["report"]["cursors"]["out"], 0, "{report}");
    assert_eq!(
        (
            report["report"]["firstEvent"].as_u64(),
            report["report"]["lastEvent"].as_u64()
        ),
        (Some(1), Some(6)),
        "{report}"
    );
    if let Some(index) = index {
        assert_eq!(report["report"]["indexEntries"], index, "{report}");
    }

    delivers_the_fixture(dir.path(), &config, &ids).await;
}

/// The schema-1 fixture in `dir`, marked as written by a herald of schema 8 (newer than any).
fn newer_schema_fixture(dir: &Path) -> PathBuf {
    let (journal, _) = v1_fixture(dir);
    let db = sled::Config::new().path(&journal).open().unwrap();
    db.insert(b"meta/schema_version", b"8").unwrap();
    db.flush().unwrap();
    journal
}

#[tokio::test]
async fn a_journal_of_a_newer_schema_is_refused_naming_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let journal = newer_schema_fixture(dir.path());
    for args in [
        vec!["journal", "verify", "--journal", journal.to_str().unwrap()],
        vec!["journal", "salvage", "--journal", journal.to_str().unwrap()],
    ] {
        let (code, stdout, stderr) = herald(&args).await;
        assert_eq!(code, 12, "{args:?}: {stdout}\n{stderr}");
        assert!(
            stdout.contains("schema version 8") || stderr.contains("\"8\""),
            "{stdout}\n{stderr}"
        );
    }
    let sim = sim().await;
    let config = herald_config(&sim, dir.path(), "  - group: example.com\n    kind: Widget");
    let config_path = dir.path().join("herald.yaml");
    std::fs::write(&config_path, &config).unwrap();
    let (code, _, stderr) = herald(&["status", "-c", config_path.to_str().unwrap()]).await;
    assert_eq!(code, 12, "{stderr}");
    assert!(
        stderr.contains("schema version Some(\"8\")") || stderr.contains("\"8\""),
        "{stderr}"
    );
}

/// The cluster's client is built while the journal opens; a journal that cannot open still decides
/// the exit (12) when the client fails too, and the client's failure decides it (13) once the
/// journal opened.
#[tokio::test]
async fn a_refused_journal_outranks_a_broken_kubeconfig_built_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let journal = newer_schema_fixture(dir.path());
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, "apiVersion: v1\nkind: Config\nclusters: [[[\n").unwrap();
    let config = |journal: &Path| {
        let path = dir.path().join("herald.yaml");
        std::fs::write(
            &path,
            format!(
                "cluster:\n  name: test\n  kubeconfig:\n    path: {kc}\n\
                 resources:\n  - group: example.com\n    kind: Widget\n\
                 sinks:\n  - {{name: out, type: file, path: {out}}}\n\
                 journal:\n  path: {journal}\nadmin:\n  listen: 127.0.0.1:0\n",
                kc = kubeconfig.display(),
                out = dir.path().join("events.jsonl").display(),
                journal = journal.display(),
            ),
        )
        .unwrap();
        path
    };
    let refused = config(&journal);
    let (code, _, stderr) = herald(&["run", "-c", refused.to_str().unwrap()]).await;
    assert_eq!(code, herald::exit_code::JOURNAL_ERROR, "{stderr}");
    assert!(stderr.contains("\"8\""), "{stderr}");

    let fresh = config(&dir.path().join("fresh-journal"));
    let (code, _, stderr) = herald(&["run", "-c", fresh.to_str().unwrap()]).await;
    assert_eq!(code, herald::exit_code::CLUSTER_UNREACHABLE, "{stderr}");
    assert!(stderr.contains("kubeconfig"), "{stderr}");
}
