use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;

/// Set in a child process re-executed by a test: the journal directory it must use.
const CHILD_DIR_ENV: &str = "HERALD_JOURNAL_TEST_CHILD_DIR";

/// The store at `dir` opened with sled directly (sled's defaults). sled lets go of its file lock
/// when its last io job ends, a moment after a close returns: a lock error is waited out.
fn raw_store(dir: &Path) -> sled::Db {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match sled::Config::new().path(dir).open() {
            Err(e) if files::is_sled_lock_error(&e) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            opened => return opened.unwrap(),
        }
    }
}

/// A journal opened and closed under `dir` with nothing appended: its store's directory.
async fn empty_store(dir: &Path) -> std::path::PathBuf {
    let j = Journal::open(cfg(dir)).unwrap();
    let path = j.path().to_owned();
    j.close().await.unwrap();
    path
}

fn cfg(dir: &Path) -> JournalConfig {
    JournalConfig {
        flush_interval: Duration::from_millis(2),
        ..JournalConfig::new(dir.join("journal"))
    }
}

fn event(stream: &str, rv: u64, key: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({ "stream": stream, "rv": rv, "key": key })).unwrap()
}

/// A batch of events only (no index, no checkpoint) of one object, `pods` `ns/a`, one event per
/// resourceVersion in `rvs`: a write each, so tests can stay under the flush's entry bound.
fn events_only(rvs: std::ops::RangeInclusive<u64>) -> Batch {
    Batch {
        stream: "pods".to_owned(),
        events: rvs.map(|rv| event("pods", rv, "ns/a")).collect(),
        ..Batch::default()
    }
}

fn batch(stream: &str, rv: u64, keys: &[&str]) -> Batch {
    Batch {
        stream: stream.to_owned(),
        events: keys.iter().map(|k| event(stream, rv, k)).collect(),
        index: keys
            .iter()
            .map(|k| IndexUpdate::Put {
                key: (*k).to_owned(),
                object: serde_json::to_vec(&json!({ "rv": rv })).unwrap(),
            })
            .collect(),
        checkpoint: Some(rv.to_string()),
        listed: false,
    }
}

fn rv_of(bytes: &[u8]) -> u64 {
    serde_json::from_slice::<Value>(bytes).unwrap()["rv"]
        .as_u64()
        .unwrap()
}

/// The `pods` index as (key, `rv` of its object) in key order.
fn index_rvs<C: FromIterator<(String, u64)>>(j: &Journal) -> C {
    j.index_scan("pods")
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k, rv_of(&v)))
        .collect()
}

/// Re-runs `test` (a test of this module) in a child process with `CHILD_DIR_ENV` set.
fn child(test: &str, dir: &Path) -> Command {
    let module = module_path!()
        .split_once("::")
        .map_or(module_path!(), |(_, rest)| rest);
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        &format!("{module}::{test}"),
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_DIR_ENV, dir)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    cmd
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[cfg(unix)]
fn assert_private(dir: &Path) {
    assert_eq!(mode(dir), 0o700, "{}", dir.display());
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            assert_private(&path);
        } else {
            assert_eq!(mode(&path), 0o600, "{}", path.display());
            seen += 1;
        }
    }
    let _ = seen;
}

#[cfg(unix)]
#[tokio::test]
async fn creates_a_private_directory_and_private_files() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    j.append(batch("pods", 1, &["ns/a"])).unwrap();
    j.durable(u64::MAX).await.unwrap();
    let dir = j.path().to_owned();
    assert!(dir.join("db").exists() && dir.join("conf").exists());
    assert_private(&dir);
    j.register_sink("s", true).unwrap();
    j.ack("s", 1).unwrap();
    j.apply_retention().unwrap();
    assert_private(&dir);
    j.close().await.unwrap();
    assert_private(&dir);
}

#[cfg(unix)]
#[test]
fn an_existing_directory_is_restricted_to_0700() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert_private(j.path());
}

#[test]
fn a_second_open_in_the_same_process_fails_naming_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let first = Journal::open(cfg(tmp.path())).unwrap();
    let err = Journal::open(cfg(tmp.path())).unwrap_err();
    let JournalError::AlreadyOpen { path } = &err else {
        panic!("expected AlreadyOpen, got {err:?}");
    };
    assert_eq!(path, first.path());
    assert!(
        err.to_string()
            .contains(&first.path().display().to_string())
    );
    // Clones share the lock; dropping the last one releases it.
    let clone = first.clone();
    drop(first);
    assert!(matches!(
        Journal::open(cfg(tmp.path())),
        Err(JournalError::AlreadyOpen { .. })
    ));
    drop(clone);
    Journal::open(cfg(tmp.path())).unwrap();
}

#[test]
fn a_store_held_by_sled_directly_is_reported_as_already_open() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    let raw = raw_store(&dir);
    let err = Journal::open(cfg(tmp.path())).unwrap_err();
    assert!(
        matches!(err, JournalError::AlreadyOpen { .. }),
        "expected AlreadyOpen, got {err:?}"
    );
    drop(raw);
}

#[test]
fn a_second_open_from_another_process_fails() {
    if let Some(dir) = std::env::var_os(CHILD_DIR_ENV) {
        let outcome = match Journal::open(JournalConfig::new(dir)) {
            Ok(_) => "opened".to_owned(),
            Err(JournalError::AlreadyOpen { .. }) => "already-open".to_owned(),
            Err(other) => format!("{other:?}"),
        };
        println!("open-result: {outcome}");
        return;
    }
    let outcome_in_child = |dir: &Path| {
        let out = child("a_second_open_from_another_process_fails", dir)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        stdout
            .lines()
            // libtest prints the test name on the same line before `--nocapture` output.
            .find_map(|l| l.split_once("open-result: ").map(|(_, r)| r))
            .map(str::to_owned)
            .unwrap_or_else(|| {
                panic!(
                    "child said nothing: {stdout} {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })
    };
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert_eq!(outcome_in_child(j.path()), "already-open");
    let dir = j.path().to_owned();
    drop(j);
    assert_eq!(outcome_in_child(&dir), "opened");
}

#[tokio::test]
async fn writes_and_checks_the_schema_version() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = empty_store(tmp.path()).await;
    {
        let raw = raw_store(&dir);
        assert_eq!(raw.get(b"meta/schema_version").unwrap().unwrap(), b"7");
        raw.insert(b"meta/schema_version", b"8").unwrap();
        raw.flush().unwrap();
    }
    // A newer herald's journal is refused, naming its version.
    let err = Journal::open(cfg(tmp.path())).unwrap_err();
    assert!(
        matches!(&err, JournalError::UnsupportedSchema { found: Some(v), supported: 7, .. } if v == "8"),
        "{err:?}"
    );
    assert!(err.to_string().contains("\"8\""), "{err}");

    // A store with data but no version was not written by herald.
    let other = tmp.path().join("other");
    {
        let raw = raw_store(&other);
        raw.insert(b"foreign", b"x").unwrap();
        raw.flush().unwrap();
    }
    let err = Journal::open(JournalConfig::new(other)).unwrap_err();
    assert!(
        matches!(err, JournalError::UnsupportedSchema { found: None, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_version_1_store_is_upgraded_with_a_head_record() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    let j = Journal::open(cfg(tmp.path())).unwrap();
    j.append(batch("pods", 10, &["ns/a", "ns/b"])).unwrap();
    j.close().await.unwrap();
    // What a version-1 herald left: the same keys, no head record.
    std::fs::remove_file(dir.join(head::FILE)).unwrap();
    {
        let raw = raw_store(&dir);
        raw.insert(b"meta/schema_version", b"1").unwrap();
        raw.flush().unwrap();
    }
    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert_eq!(j.head(), 2);
    assert_eq!(head::read(&dir).unwrap(), head::Stored::Head(2));
    j.close().await.unwrap();
    let raw = raw_store(&dir);
    assert_eq!(raw.get(b"meta/schema_version").unwrap().unwrap(), b"7");
}

/// Schema 4: a first sync's marker is written and removed with the appends that carry it, read
/// by `first_sync_skipping`, reported by verify, kept by compaction and by a salvage; a damaged
/// one is a problem at open, and a salvage drops it (that stream then reports what it finds).
#[tokio::test]
async fn first_sync_markers_move_with_their_appends_and_survive_compaction_and_salvage() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    let j = Journal::open(cfg(tmp.path())).unwrap();
    let index = |key: &str| IndexUpdate::Put {
        key: key.to_owned(),
        object: b"{}".to_vec(),
    };
    let page = |keys: &[&str], checkpoint: Option<&str>| Batch {
        stream: "w".to_owned(),
        index: keys.iter().map(|k| index(k)).collect(),
        checkpoint: checkpoint.map(str::to_owned),
        ..Batch::default()
    };
    j.append_with(page(&["ns/a"], None), FirstSync::Skipping)
        .unwrap();
    j.append(page(&["ns/x"], Some("1"))).unwrap();
    assert!(j.first_sync_skipping("w").unwrap());
    assert!(!j.first_sync_skipping("other").unwrap());
    j.close().await.unwrap();

    let report = verify(&dir, Duration::from_secs(30)).unwrap();
    assert!(report.intact(), "{report:?}");
    assert_eq!(report.skipping_first_syncs, ["w"]);
    let compacted = compact(&dir, Duration::from_secs(30), &mut |_| {}).unwrap();
    assert_eq!(compacted.head, 0);
    let out = salvage(&dir, Duration::from_secs(30), true).unwrap();
    assert_eq!(out.first_syncs_kept, 1, "{out:?}");
    // The next salvage may come within the same second, under the same name.
    std::fs::remove_dir_all(out.moved_to.unwrap()).unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert!(
        j.first_sync_skipping("w").unwrap(),
        "lost by compaction or salvage"
    );
    // The append with the checkpoint ends the first sync.
    j.append_with(page(&["ns/b"], Some("2")), FirstSync::Done)
        .unwrap();
    assert!(!j.first_sync_skipping("w").unwrap());
    j.append_with(page(&["ns/c"], None), FirstSync::Skipping)
        .unwrap();
    j.close().await.unwrap();

    // A damaged marker: the journal does not open; the salvage drops it.
    {
        let raw = raw_store(&dir);
        raw.insert(b"f/w", b"skiq").unwrap();
        raw.flush().unwrap();
    }
    let report = verify(&dir, Duration::from_secs(30)).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("first-sync marker f/w")),
        "{report:?}"
    );
    assert!(matches!(
        Journal::open(cfg(tmp.path())),
        Err(JournalError::Damaged { .. })
    ));
    let out = salvage(&dir, Duration::from_secs(30), false).unwrap();
    assert_eq!(out.first_syncs_kept, 0, "{out:?}");
    assert_eq!(out.other_dropped, 1, "{out:?}");
    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert!(!j.first_sync_skipping("w").unwrap());
    j.close().await.unwrap();
}

/// A version-3 store (no `f/` keys) opens and is upgraded by setting the version alone.
#[tokio::test]
async fn a_version_3_store_is_upgraded_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    let j = Journal::open(cfg(tmp.path())).unwrap();
    j.append(batch("pods", 10, &["ns/a", "ns/b"])).unwrap();
    j.close().await.unwrap();
    {
        let raw = raw_store(&dir);
        raw.insert(b"meta/schema_version", b"3").unwrap();
        raw.flush().unwrap();
    }
    let report = verify(&dir, Duration::from_secs(30)).unwrap();
    assert!(report.intact(), "{report:?}");
    assert_eq!(report.schema_version.as_deref(), Some("3"));
    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert_eq!(j.head(), 2);
    assert!(!j.first_sync_skipping("pods").unwrap());
    j.close().await.unwrap();
    let raw = raw_store(&dir);
    assert_eq!(raw.get(b"meta/schema_version").unwrap().unwrap(), b"7");
}

#[tokio::test]
async fn acknowledgements_above_the_cursor_survive_a_reopen_and_are_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    j.register_sink("out", false).unwrap();
    let keys: Vec<String> = (0..2_000).map(|i| format!("ns/{i}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    j.append(batch("pods", 10, &keys)).unwrap();
    j.durable(u64::MAX).await.unwrap();
    j.acknowledge("out", 2, &[(4, 6), (9, 9)]).unwrap();
    assert_eq!(j.cursor("out").unwrap(), 2);
    assert_eq!(j.acked("out").unwrap(), [(4, 6), (9, 9)]);
    assert!(matches!(
        j.acknowledge("out", 2, &[(4, 2_001)]),
        Err(JournalError::AckBeyondDurable { .. })
    ));
    // Every other event acknowledged: more ranges than the bound keeps.
    let many: Vec<(u64, u64)> = (0..900u64).map(|i| (3 + 2 * i, 3 + 2 * i)).collect();
    j.acknowledge("out", 1, &many).unwrap();
    assert_eq!(j.cursor("out").unwrap(), 2, "a cursor never moves back");
    let kept = j.acked("out").unwrap();
    assert_eq!(kept.len(), MAX_ACKED_RANGES);
    assert_eq!(
        kept[..],
        many[..MAX_ACKED_RANGES],
        "those nearest the cursor"
    );
    j.close().await.unwrap();

    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert_eq!(j.cursor("out").unwrap(), 2);
    assert_eq!(j.acked("out").unwrap().len(), MAX_ACKED_RANGES);
    let report = verify_open(&j);
    assert_eq!(report, MAX_ACKED_RANGES as u64);
    // The cursor passing ranges drops them; an empty set removes the key.
    j.acknowledge("out", 6, &[(9, 9)]).unwrap();
    assert_eq!(j.acked("out").unwrap(), [(9, 9)]);
    j.acknowledge("out", 9, &[]).unwrap();
    assert!(j.acked("out").unwrap().is_empty());
    j.acknowledge("out", 9, &[(11, 12)]).unwrap();
    j.remove_sink("out").unwrap();
    j.register_sink("out", false).unwrap();
    assert!(
        j.acked("out").unwrap().is_empty(),
        "a removed sink forgets them"
    );
    j.close().await.unwrap();
}

#[tokio::test]
async fn salvage_renumbers_acknowledged_ranges_with_their_events() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    let j = Journal::open(cfg(tmp.path())).unwrap();
    j.register_sink("out", false).unwrap();
    let keys: Vec<String> = (0..10).map(|i| format!("ns/{i}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    j.append(batch("pods", 10, &keys)).unwrap();
    j.durable(u64::MAX).await.unwrap();
    j.acknowledge("out", 2, &[(4, 6), (9, 9)]).unwrap();
    j.close().await.unwrap();

    let out = salvage(&dir, OPEN_TIMEOUT, true).unwrap();
    // Events 3..=10 become 11..=18; the cursor stays before them.
    assert_eq!((out.events_kept, out.head), (8, 18));
    assert_eq!(out.cursors.get("out"), Some(&10));
    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert_eq!(j.acked("out").unwrap(), [(12, 14), (17, 17)]);
    j.close().await.unwrap();
}

/// Events acknowledged above the cursor of sink `out`, as `herald journal verify` counts them
/// (its checker fed from the open store).
fn verify_open(j: &Journal) -> u64 {
    let mut checker = super::integrity::Checker::new(j.path());
    for entry in j.inner.db.iter() {
        let (k, v) = entry.unwrap();
        checker.entry(&k, &v);
    }
    let report = checker.finish(None, &head::Stored::Head(j.head()));
    assert!(report.intact(), "{:?}", report.problems);
    report.acked_above_cursor["out"]
}

#[tokio::test]
async fn a_store_behind_its_head_record_is_damaged_and_salvage_rebuilds_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    let j = Journal::open(cfg(tmp.path())).unwrap();
    j.register_sink("out", false).unwrap();
    j.append(batch("pods", 10, &["ns/a", "ns/b"])).unwrap();
    j.durable(u64::MAX).await.unwrap();
    j.close().await.unwrap();
    assert_eq!(head::read(&dir).unwrap(), head::Stored::Head(2));
    // The store rolled back by one committed event (as sled's recovery does after a truncation).
    {
        let raw = raw_store(&dir);
        // Events 1 and 2 share a segment: it is rewritten with event 1 alone.
        let both = keys::segment(1, 2);
        let value = raw.remove(&both).unwrap().unwrap();
        let plain = keys::plain_events(&both, &value).unwrap();
        let (at, events) = keys::split_events(&both, &plain).unwrap();
        let first = keys::segment_value(at, [events[0].1]).unwrap();
        raw.insert(keys::segment(1, 1), first).unwrap();
        raw.insert(keys::HEAD_KEY, &1u64.to_be_bytes()[..]).unwrap();
        raw.flush().unwrap();
    }
    let err = Journal::open(cfg(tmp.path())).unwrap_err();
    assert!(
        matches!(&err, JournalError::Damaged { problems, .. } if problems.contains("committed entries are lost")),
        "{err:?}"
    );
    let report = verify(&dir, OPEN_TIMEOUT).unwrap();
    assert!(!report.intact());
    assert_eq!((report.head, report.head_record), (1, Some(2)));

    let out = salvage(&dir, OPEN_TIMEOUT, false).unwrap();
    assert!(out.moved_to.as_ref().is_some_and(|p| p.is_dir()));
    // The surviving event is kept, renumbered after the old head; the checkpoint is dropped.
    assert_eq!((out.events_kept, out.head), (1, 3));
    assert_eq!(out.cursors.get("out"), Some(&2));
    assert_eq!(out.checkpoints_dropped, ["pods"]);
    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert_eq!(j.checkpoint("pods").unwrap(), None);
    assert_eq!(j.index_scan("pods").unwrap().len(), 2);
    let read = j.read("out", j.cursor("out").unwrap(), 10).unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!(rv_of(&read[0].1), 10);
    j.close().await.unwrap();
}

#[tokio::test]
async fn a_store_that_makes_no_progress_within_the_bound_is_reported_damaged() {
    let tmp = tempfile::tempdir().unwrap();
    empty_store(tmp.path()).await;
    // sled cannot even recover within a nanosecond: the open gives up instead of waiting on it.
    let err = Journal::open(JournalConfig {
        open_timeout: Duration::from_nanos(1),
        ..cfg(tmp.path())
    })
    .unwrap_err();
    assert!(
        matches!(&err, JournalError::Damaged { problems, .. } if problems.contains("no progress")),
        "{err:?}"
    );
}

/// A batch that updates a key more than once (an object that changes several times while a batch
/// gathers) keeps the last update of each key, whatever came before it, after a reopen too.
#[tokio::test]
async fn the_last_update_of_a_key_in_a_batch_is_what_the_index_keeps() {
    let tmp = tempfile::tempdir().unwrap();
    let put = |key: &str, rv: u64| IndexUpdate::Put {
        key: key.to_owned(),
        object: serde_json::to_vec(&json!({ "rv": rv })).unwrap(),
    };
    let remove = |key: &str| IndexUpdate::Remove {
        key: key.to_owned(),
    };
    {
        let j = Journal::open(cfg(tmp.path())).unwrap();
        j.append(batch("pods", 1, &["ns/gone", "ns/back"])).unwrap();
        let index = vec![
            put("ns/a", 2),
            put("ns/b", 3),
            put("ns/a", 4),
            remove("ns/b"),
            put("ns/gone", 5),
            remove("ns/back"),
            put("ns/a", 6),
            put("ns/back", 7),
            remove("ns/gone"),
        ];
        let events = (2..=10).map(|rv| event("pods", rv, "ns/a")).collect();
        j.append(Batch {
            stream: "pods".to_owned(),
            events,
            index,
            checkpoint: Some("10".to_owned()),
            listed: false,
        })
        .unwrap();
        j.close().await.unwrap();
    }
    let j = Journal::open(cfg(tmp.path())).unwrap();
    let kept: Vec<(String, u64)> = index_rvs(&j);
    assert_eq!(kept, [("ns/a".to_owned(), 6), ("ns/back".to_owned(), 7)]);
    assert_eq!(j.head(), 11);
}

fn put(key: &str, rv: u64) -> IndexUpdate {
    IndexUpdate::Put {
        key: key.to_owned(),
        object: serde_json::to_vec(&json!({ "rv": rv })).unwrap(),
    }
}

/// A batch of `pods` that only updates the index.
fn index_only(index: Vec<IndexUpdate>) -> Batch {
    Batch {
        stream: "pods".to_owned(),
        index,
        ..Batch::default()
    }
}

fn rv_at(j: &Journal, key: &str) -> Option<u64> {
    j.index_get("pods", key).unwrap().map(|v| rv_of(&v))
}

/// Closes `j` with its gathered index updates unfolded, once all it appended is durable: the store
/// then holds what a crash after the last flush leaves.
async fn close_unfolded(j: Journal) {
    j.durable(u64::MAX).await.unwrap();
    j.forget_gathered();
    j.close().await.unwrap();
}

/// An append's index updates go into one `u/` key, are read from memory until they are folded
/// into the `i/` keys, and a crash before the fold leaves them for the next open to fold.
#[tokio::test]
async fn index_updates_are_read_before_their_fold_and_a_crash_leaves_them_to_the_next_open() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    {
        let j = Journal::open(cfg(tmp.path())).unwrap();
        j.append(batch("pods", 1, &["ns/a", "ns/b"])).unwrap();
        j.append(index_only(vec![
            put("ns/a", 2),
            IndexUpdate::Remove {
                key: "ns/b".to_owned(),
            },
        ]))
        .unwrap();
        assert_eq!(j.stored_under(keys::UPDATES_PREFIX), 2);
        assert_eq!(j.stored_under(keys::INDEX_PREFIX), 0);
        assert_eq!((rv_at(&j, "ns/a"), rv_at(&j, "ns/b")), (Some(2), None));
        close_unfolded(j).await;
    }
    let report = verify(&dir, OPEN_TIMEOUT).unwrap();
    assert!(report.intact(), "{:?}", report.problems);
    // Counted as the fold will leave them: `ns/a` put, `ns/b` put then removed.
    assert_eq!((report.index_updates, report.index_entries), (2, 1));

    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert_eq!((rv_at(&j, "ns/a"), rv_at(&j, "ns/b")), (Some(2), None));
    assert_eq!(j.stored_under(keys::UPDATES_PREFIX), 0);
    assert_eq!(j.stored_under(keys::INDEX_PREFIX), 1);
    j.close().await.unwrap();
}

/// Past `FOLD_ENTRIES` gathered keys each append folds the oldest entries, writing only the keys
/// whose latest update they hold; a scan of the index folds the rest first, so it finds every put
/// and misses every removal.
#[tokio::test]
async fn gathered_index_updates_fold_oldest_first_and_before_a_scan() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    let names: Vec<String> = (0..updates::FOLD_ENTRIES)
        .map(|n| format!("ns/{n}"))
        .collect();
    for (rv, name) in names.iter().enumerate() {
        j.append(index_only(vec![put(name, rv as u64)])).unwrap();
    }
    assert_eq!(j.stored_under(keys::UPDATES_PREFIX), updates::FOLD_ENTRIES);
    assert_eq!(j.stored_under(keys::INDEX_PREFIX), 0);
    // `ns/0` again: no key more, nothing folded.
    j.append(index_only(vec![put(&names[0], 100)])).unwrap();
    assert_eq!(
        j.stored_under(keys::UPDATES_PREFIX),
        updates::FOLD_ENTRIES + 1
    );
    assert_eq!(j.stored_under(keys::INDEX_PREFIX), 0);
    // A new key: the two oldest entries are folded, `ns/0`'s without an `i/` write (a later
    // entry replaced its update), `ns/1`'s into its `i/` key.
    j.append(index_only(vec![put("ns/new", 101)])).unwrap();
    assert_eq!(j.stored_under(keys::UPDATES_PREFIX), updates::FOLD_ENTRIES);
    assert_eq!(j.stored_under(keys::INDEX_PREFIX), 1);
    assert_eq!(
        (rv_at(&j, &names[0]), rv_at(&j, &names[1])),
        (Some(100), Some(1))
    );

    j.append(index_only(vec![
        put(&names[1], 200),
        IndexUpdate::Remove {
            key: names[2].clone(),
        },
    ]))
    .unwrap();
    j.append(batch("cms", 1, &["ns/x"])).unwrap();
    assert!(j.stored_under(keys::UPDATES_PREFIX) > 0);
    let keys: Vec<String> = j.index_keys("pods").unwrap().map(Result::unwrap).collect();
    assert_eq!(j.stored_under(keys::UPDATES_PREFIX), 0);
    let mut expected: Vec<String> = names.iter().filter(|n| **n != names[2]).cloned().collect();
    expected.push("ns/new".to_owned());
    expected.sort();
    assert_eq!(keys, expected);
    let rvs: BTreeMap<String, u64> = index_rvs(&j);
    assert_eq!((rvs[&names[0]], rvs[&names[1]]), (100, 200));
    j.append(batch("cms2", 1, &["ns/y"])).unwrap();
    assert_eq!(j.indexed_streams("cms").unwrap(), ["cms", "cms2"]);
    j.close().await.unwrap();
}

/// A relist's append (`listed`) writes the updates of objects with nothing gathered straight into
/// the index, and gathers those of objects with an update gathered before it, so that a crash
/// leaves no older update to be folded over a newer one.
#[tokio::test]
async fn a_listed_append_writes_fresh_keys_into_the_index_and_gathers_the_others() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let j = Journal::open(cfg(tmp.path())).unwrap();
        j.append(index_only(vec![put("ns/watched", 1)])).unwrap();
        assert_eq!(j.stored_under(keys::UPDATES_PREFIX), 1);
        j.append(Batch {
            listed: true,
            ..index_only(vec![
                put("ns/listed", 2),
                put("ns/watched", 3),
                IndexUpdate::Remove {
                    key: "ns/gone".to_owned(),
                },
            ])
        })
        .unwrap();
        assert_eq!(j.stored_under(keys::UPDATES_PREFIX), 2);
        assert_eq!(j.stored_under(keys::INDEX_PREFIX), 1);
        assert_eq!(
            (rv_at(&j, "ns/listed"), rv_at(&j, "ns/watched")),
            (Some(2), Some(3))
        );
        close_unfolded(j).await;
    }
    let j = Journal::open(cfg(tmp.path())).unwrap();
    let rvs: Vec<(String, u64)> = index_rvs(&j);
    assert_eq!(
        rvs,
        [("ns/listed".to_owned(), 2), ("ns/watched".to_owned(), 3)]
    );
    j.close().await.unwrap();
}

/// A store a crash left with `u/` keys compacts (its counts, the index as folded, match the
/// copy's), and the copy opens with the updates folded.
#[tokio::test]
async fn a_store_with_index_updates_compacts_and_opens_folded() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    {
        let j = Journal::open(cfg(tmp.path())).unwrap();
        j.append(batch("pods", 1, &["ns/a", "ns/b"])).unwrap();
        j.append(index_only(vec![
            IndexUpdate::Remove {
                key: "ns/b".to_owned(),
            },
            put("ns/c", 2),
        ]))
        .unwrap();
        close_unfolded(j).await;
    }
    compact(&dir, OPEN_TIMEOUT, &mut |_| {}).unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert_eq!(j.stored_under(keys::UPDATES_PREFIX), 0);
    let rvs: Vec<(String, u64)> = index_rvs(&j);
    assert_eq!(rvs, [("ns/a".to_owned(), 1), ("ns/c".to_owned(), 2)]);
    j.close().await.unwrap();
}

/// A `u/` entry that cannot be read makes the journal damaged; salvage applies the readable
/// ones over the index entries, as a fold would, drops the damaged one and the checkpoints.
#[tokio::test]
async fn a_damaged_index_update_is_reported_and_salvage_applies_the_readable_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    {
        let j = Journal::open(cfg(tmp.path())).unwrap();
        j.append(batch("pods", 1, &["ns/a", "ns/b"])).unwrap();
        j.fold().unwrap();
        j.append(index_only(vec![put("ns/a", 2)])).unwrap();
        j.append(index_only(vec![put("ns/b", 3)])).unwrap();
        close_unfolded(j).await;
    }
    {
        let raw = raw_store(&dir);
        let damaged = keys::updates(1);
        let value = raw.get(&damaged).unwrap().unwrap();
        raw.insert(&damaged, &value[..value.len() - 1]).unwrap();
        raw.flush().unwrap();
    }
    let err = Journal::open(cfg(tmp.path())).unwrap_err();
    assert!(
        matches!(&err, JournalError::Damaged { problems, .. } if problems.contains("index updates")),
        "{err:?}"
    );
    let out = salvage(&dir, OPEN_TIMEOUT, false).unwrap();
    assert!(out.moved_to.is_some());
    // The index is older than the checkpoint says: the next start relists, and no entry is
    // confirmed by an event (the test's objects carry no uid or resourceVersion).
    assert_eq!(out.checkpoints_dropped, ["pods"]);
    assert_eq!(out.index_entries_unconfirmed, 2, "{out:?}");
    // `u/1` (`ns/a` at 2) was damaged: `ns/a` keeps its folded entry; `u/2` is applied over `ns/b`.
    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert_eq!((rv_at(&j, "ns/a"), rv_at(&j, "ns/b")), (Some(1), Some(3)));
    j.close().await.unwrap();
}

#[tokio::test]
async fn append_assigns_consecutive_seqs_and_writes_index_and_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert_eq!(j.head(), 0);
    assert_eq!(j.checkpoint("pods").unwrap(), None);

    assert_eq!(
        j.append(batch("pods", 10, &["ns/a", "ns/b"])).unwrap(),
        [1, 2]
    );
    assert_eq!(j.append(batch("pods", 11, &["ns/c"])).unwrap(), [3]);
    let remove = Batch {
        stream: "pods".to_owned(),
        events: vec![event("pods", 12, "ns/b")],
        index: vec![IndexUpdate::Remove {
            key: "ns/b".to_owned(),
        }],
        checkpoint: Some("12".to_owned()),
        listed: false,
    };
    assert_eq!(j.append(remove).unwrap(), [4]);
    // A batch with only a checkpoint (a bookmark) moves no sequence number.
    let bookmark = Batch {
        stream: "pods".to_owned(),
        checkpoint: Some("13".to_owned()),
        ..Batch::default()
    };
    assert_eq!(j.append(bookmark).unwrap(), Vec::<u64>::new());
    assert_eq!(
        j.append(Batch {
            stream: "pods".to_owned(),
            ..Batch::default()
        })
        .unwrap(),
        Vec::<u64>::new()
    );
    j.append(batch("podsx", 1, &["ns/a"])).unwrap();

    assert_eq!(j.head(), 5);
    assert_eq!(j.checkpoint("pods").unwrap().as_deref(), Some("13"));
    assert_eq!(j.checkpoint("podsx").unwrap().as_deref(), Some("1"));
    assert_eq!(rv_of(&j.index_get("pods", "ns/a").unwrap().unwrap()), 10);
    assert_eq!(j.index_get("pods", "ns/b").unwrap(), None);
    let scan: Vec<(String, u64)> = index_rvs(&j);
    assert_eq!(scan, [("ns/a".to_owned(), 10), ("ns/c".to_owned(), 11)]);

    j.durable(u64::MAX).await.unwrap();
    j.register_sink("s", true).unwrap();
    let read = j.read("s", 0, 100).unwrap();
    let seqs: Vec<u64> = read.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    assert_eq!(read[3].1, event("pods", 12, "ns/b"));
    assert_eq!(j.read("s", 2, 2).unwrap().len(), 2);

    assert!(matches!(
        j.append(batch("a\0b", 1, &[])),
        Err(JournalError::InvalidName { .. })
    ));
}

#[tokio::test]
async fn sequence_numbers_continue_after_reopen_even_when_retention_emptied_the_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    j.append(batch("pods", 1, &["ns/a", "ns/b", "ns/c"]))
        .unwrap();
    j.durable(u64::MAX).await.unwrap();
    j.close().await.unwrap();

    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert_eq!((j.head(), j.durable_seq()), (3, 3));
    assert_eq!(j.append(batch("pods", 2, &["ns/a"])).unwrap(), [4]);
    j.durable(4).await.unwrap();
    j.register_sink("s", false).unwrap();
    // No sink has anything to read here: retention of everything up to the head.
    j.register_sink("early", true).unwrap();
    j.ack("early", 4).unwrap();
    j.remove_sink("s").unwrap();
    assert_eq!(j.apply_retention().unwrap(), 4);
    j.close().await.unwrap();

    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert_eq!(j.head(), 4);
    assert_eq!(j.append(batch("pods", 3, &["ns/a"])).unwrap(), [5]);
}

#[tokio::test]
async fn cursors_survive_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    for rv in 1..=5 {
        j.append(batch("pods", rv, &["ns/a"])).unwrap();
    }
    j.durable(u64::MAX).await.unwrap();
    assert_eq!(j.register_sink("kafka", true).unwrap(), 0);
    assert_eq!(j.register_sink("webhook", false).unwrap(), 5);
    j.ack("kafka", 3).unwrap();
    // A second registration keeps the stored cursor, whatever `from_start` says.
    assert_eq!(j.register_sink("kafka", false).unwrap(), 3);
    j.close().await.unwrap();

    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert_eq!(j.cursor("kafka").unwrap(), 3);
    assert_eq!(j.cursor("webhook").unwrap(), 5);
    assert_eq!(j.sinks(), ["kafka", "webhook"]);
    assert_eq!(j.register_sink("kafka", true).unwrap(), 3);
    let next: Vec<u64> = j
        .read("kafka", 3, 10)
        .unwrap()
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(next, [4, 5]);
}

#[tokio::test]
async fn ack_is_idempotent_and_refuses_unknown_sinks_and_non_durable_seqs() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(JournalConfig {
        flush_interval: Duration::from_secs(3_600),
        flush_entries: 1_000_000,
        // Holds the append unflushed: the adaptive commit would flush it at once.
        adaptive_commit: false,
        ..cfg(tmp.path())
    })
    .unwrap();
    j.register_sink("s", true).unwrap();
    j.append(batch("pods", 1, &["ns/a"])).unwrap();
    assert!(matches!(
        j.ack("s", 1),
        Err(JournalError::AckBeyondDurable {
            upto: 1,
            durable: 0,
            ..
        })
    ));
    assert!(matches!(
        j.ack("nope", 1),
        Err(JournalError::UnknownSink { .. })
    ));
    assert!(matches!(
        j.read("nope", 0, 1),
        Err(JournalError::UnknownSink { .. })
    ));
    assert!(matches!(
        j.cursor("nope"),
        Err(JournalError::UnknownSink { .. })
    ));
    j.close().await.unwrap();
}

#[tokio::test]
async fn reading_never_returns_events_that_are_not_durable() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(JournalConfig {
        // Only the entry bound can trigger a flush in this test.
        flush_interval: Duration::from_secs(3_600),
        flush_entries: 5,
        adaptive_commit: false,
        ..cfg(tmp.path())
    })
    .unwrap();
    j.register_sink("s", true).unwrap();
    let seqs = j.append(events_only(1..=3)).unwrap();
    assert_eq!(seqs, [1, 2, 3]);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(j.head(), 3);
    assert_eq!(j.durable_seq(), 0);
    assert!(j.read("s", 0, 100).unwrap().is_empty());
    // Nor does `herald replay` queue one: a crash could still take it back.
    assert!(j.events_from(1, 100).unwrap().is_empty());

    let seqs = j.append(events_only(4..=5)).unwrap();
    tokio::time::timeout(Duration::from_secs(10), j.durable(seqs[1]))
        .await
        .unwrap()
        .unwrap();
    assert!(j.durable_seq() >= 5);
    let read: Vec<u64> = j
        .read("s", 0, 100)
        .unwrap()
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(read, [1, 2, 3, 4, 5]);
    let replayable: Vec<u64> = j
        .events_from(2, 100)
        .unwrap()
        .iter()
        .map(|(s, _)| *s)
        .collect();
    assert_eq!(replayable, [2, 3, 4, 5]);
    j.close().await.unwrap();
}

/// The tail in memory (ADR 0027) hands out the bytes the store holds, never past `durable_seq`
/// either; a reader behind it, or any reader after a reopen, reads the store.
#[tokio::test]
async fn shared_reads_come_from_memory_at_the_head_and_from_the_store_behind_it() {
    let tmp = tempfile::tempdir().unwrap();
    let open = || {
        Journal::open(JournalConfig {
            // Only the entry bound can trigger a flush in this test.
            flush_interval: Duration::from_secs(3_600),
            flush_entries: 5,
            adaptive_commit: false,
            // Room for four of these events (the tail counts their buffers' capacity, which
            // `exact` makes their length).
            tail_bytes: 4 * (event("pods", 1, "ns/a").len() + super::tail::OVERHEAD),
            ..cfg(tmp.path())
        })
        .unwrap()
    };
    let j = open();
    j.register_sink("s", true).unwrap();
    let append = |rvs: std::ops::RangeInclusive<u64>| {
        j.append(Batch {
            stream: "pods".to_owned(),
            events: rvs
                .map(|rv| {
                    let mut exact = event("pods", rv, "ns/a");
                    exact.shrink_to_fit();
                    exact
                })
                .collect(),
            ..Batch::default()
        })
        .unwrap()
    };
    append(1..=3);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(j.durable_seq(), 0);
    assert!(
        j.read_shared("s", 0, 100).unwrap().is_empty(),
        "not durable"
    );
    let seqs = append(4..=6);
    tokio::time::timeout(Duration::from_secs(10), j.durable(seqs[2]))
        .await
        .unwrap()
        .unwrap();
    let rvs = |rows: Vec<(u64, bytes::Bytes)>| -> Vec<(u64, u64)> {
        rows.into_iter().map(|(s, b)| (s, rv_of(&b))).collect()
    };
    // The tail holds 3 to 6 (4 events); 1 and 2 went over its bound.
    assert_eq!(
        rvs(j.read_shared("s", 2, 100).unwrap()),
        [(3, 3), (4, 4), (5, 5), (6, 6)]
    );
    assert_eq!(j.shared_reads(), (4, 0));
    assert_eq!(
        rvs(j.read_shared("s", 0, 3).unwrap()),
        [(1, 1), (2, 2), (3, 3)]
    );
    assert_eq!(j.shared_reads(), (4, 3), "behind the tail: the store");
    let stored: Vec<(u64, Vec<u8>)> = j.read("s", 2, 100).unwrap();
    let shared = j.read_shared("s", 2, 100).unwrap();
    assert_eq!(stored.len(), shared.len());
    for ((a, x), (b, y)) in stored.iter().zip(&shared) {
        assert_eq!(
            (a, &x[..]),
            (b, &y[..]),
            "memory hands out what the store holds"
        );
    }
    assert!(matches!(
        j.read_shared("nobody", 0, 10),
        Err(JournalError::UnknownSink { .. })
    ));
    j.close().await.unwrap();

    let j = open();
    assert_eq!(rvs(j.read_shared("s", 4, 100).unwrap()), [(5, 5), (6, 6)]);
    assert_eq!(
        j.shared_reads(),
        (0, 2),
        "a reopened journal reads the store"
    );
    j.close().await.unwrap();
}

/// The layouts an append vouches for are handed out beside the events from memory, and never
/// with an event read back from the store (a reader behind the tail, or after a reopen, reads
/// those in full).
#[tokio::test]
async fn vouched_layouts_come_with_events_from_memory_only() {
    let tmp = tempfile::tempdir().unwrap();
    let open = || {
        Journal::open(JournalConfig {
            flush_interval: Duration::from_millis(1),
            ..cfg(tmp.path())
        })
        .unwrap()
    };
    let j = open();
    j.register_sink("s", true).unwrap();
    let layout = |n: usize| herald_sink_core::Layout::new(n..n, 1..2, 2..3, 3..4, 4..5, 5..6);
    let seqs = j
        .append_vouched(
            events_only(1..=3),
            FirstSync::Keep,
            // The last event's layout is missing: it vouches for nothing.
            vec![layout(1), None],
        )
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), j.durable(seqs[2]))
        .await
        .unwrap()
        .unwrap();
    let layouts = |rows: Vec<(u64, bytes::Bytes, Option<herald_sink_core::Layout>)>| {
        rows.into_iter()
            .map(|(seq, bytes, l)| (seq, rv_of(&bytes), l))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        layouts(j.read_vouched("s", 0, 10).unwrap()),
        [(1, 1, layout(1)), (2, 2, None), (3, 3, None)]
    );
    j.close().await.unwrap();
    let j = open();
    assert_eq!(
        layouts(j.read_vouched("s", 0, 10).unwrap()),
        [(1, 1, None), (2, 2, None), (3, 3, None)],
        "the store keeps no layout"
    );
    j.close().await.unwrap();
}

/// A standby's appends (its cursors follow the leader's, it never reads for delivery) keep
/// nothing in memory; once it is elected, a reader below the head reads those events from the
/// store, every one, in order, and the next appends come from memory again.
#[tokio::test]
async fn a_standby_keeps_no_tail_and_once_elected_reads_its_appends_from_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(JournalConfig {
        flush_interval: Duration::from_millis(2),
        ..cfg(tmp.path())
    })
    .unwrap();
    j.register_sink("s", true).unwrap();
    j.set_standby(true);
    let append = |rvs: std::ops::RangeInclusive<u64>| j.append(events_only(rvs)).unwrap();
    let seqs = append(1..=3);
    j.durable(seqs[2]).await.unwrap();
    j.set_standby(false);
    let rvs = |rows: Vec<(u64, bytes::Bytes)>| -> Vec<(u64, u64)> {
        rows.into_iter().map(|(s, b)| (s, rv_of(&b))).collect()
    };
    assert_eq!(
        rvs(j.read_shared("s", 0, 100).unwrap()),
        [(1, 1), (2, 2), (3, 3)]
    );
    assert_eq!(j.shared_reads(), (0, 3), "a standby's appends: the store");
    let seqs = append(4..=5);
    j.durable(seqs[1]).await.unwrap();
    assert_eq!(rvs(j.read_shared("s", 3, 100).unwrap()), [(4, 4), (5, 5)]);
    assert_eq!(j.shared_reads(), (2, 3), "elected: memory again");
    j.close().await.unwrap();
}

#[tokio::test]
async fn durable_after_resolves_with_the_commit_that_makes_a_later_event_durable() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(JournalConfig {
        // Only the entry bound can trigger a flush in this test.
        flush_interval: Duration::from_secs(3_600),
        flush_entries: 5,
        adaptive_commit: false,
        ..cfg(tmp.path())
    })
    .unwrap();
    let waiter = {
        let j = j.clone();
        tokio::spawn(async move { j.durable_after(0).await })
    };
    j.append(events_only(1..=3)).unwrap();
    // Appended is not durable: the waiter (what the delivery reader sleeps on) must not wake.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished());
    j.append(events_only(4..=5)).unwrap();
    let woke = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(woke);
    assert_eq!(j.durable_seq(), 5);
    // At once when a later event already is durable; not while none is.
    assert!(j.durable_after(4).await);
    assert!(
        tokio::time::timeout(Duration::from_millis(100), j.durable_after(5))
            .await
            .is_err()
    );
    j.close().await.unwrap();
}

#[tokio::test]
async fn the_interval_flushes_a_small_group_and_waiters_share_it() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(JournalConfig {
        flush_interval: Duration::from_millis(20),
        flush_entries: 1_000_000,
        // The interval is what this test is about.
        adaptive_commit: false,
        ..cfg(tmp.path())
    })
    .unwrap();
    let mut waiters = Vec::new();
    for rv in 1..=20 {
        let seq = j.append(batch("pods", rv, &["ns/a"])).unwrap()[0];
        let j = j.clone();
        waiters.push(tokio::spawn(async move { j.durable(seq).await }));
    }
    let started = Instant::now();
    for w in waiters {
        tokio::time::timeout(Duration::from_secs(10), w)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
    assert_eq!(j.durable_seq(), 20);
    assert!(started.elapsed() < Duration::from_secs(5));
    j.close().await.unwrap();
}

#[tokio::test]
async fn an_idle_journal_commits_a_lone_change_without_waiting_for_the_interval() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(JournalConfig {
        // Neither the interval nor the entry bound can trigger this flush.
        flush_interval: Duration::from_secs(3_600),
        flush_entries: 1_000_000,
        ..cfg(tmp.path())
    })
    .unwrap();
    for rv in 1..=3 {
        let seq = j.append(batch("pods", rv, &["ns/a"])).unwrap()[0];
        tokio::time::timeout(Duration::from_secs(30), j.durable(seq))
            .await
            .expect("durable without waiting for the hour-long interval")
            .unwrap();
        assert_eq!(j.durable_seq(), seq);
    }
    j.close().await.unwrap();
}

#[tokio::test]
async fn after_a_large_group_the_journal_batches_for_the_interval_again() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(JournalConfig {
        flush_interval: Duration::from_secs(3_600),
        flush_entries: 1_000_000,
        ..cfg(tmp.path())
    })
    .unwrap();
    let big = j.append(events_only(1..=100)).unwrap();
    tokio::time::timeout(Duration::from_secs(30), j.durable(big[99]))
        .await
        .expect("the first group goes at once")
        .unwrap();
    // A group of 100 means load: the next change waits for the (hour-long) interval.
    j.append(batch("pods", 101, &["ns/a"])).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(j.durable_seq(), 100);
    j.close().await.unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert_eq!(j.head(), 101);
}

#[tokio::test]
async fn retention_removes_only_events_every_cursor_passed() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    j.register_sink("fast", true).unwrap();
    j.register_sink("slow", true).unwrap();
    for rv in 1..=10 {
        j.append(batch("pods", rv, &["ns/a"])).unwrap();
    }
    j.durable(u64::MAX).await.unwrap();
    j.ack("fast", 8).unwrap();
    j.ack("slow", 3).unwrap();
    assert_eq!(j.apply_retention().unwrap(), 3);
    assert_eq!(j.apply_retention().unwrap(), 0);
    let slow: Vec<u64> = j
        .read("slow", 3, 100)
        .unwrap()
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(slow, (4..=10).collect::<Vec<_>>());
    // Gone events are skipped, not errors.
    assert_eq!(j.read("slow", 0, 1).unwrap()[0].0, 4);
    // A new sink from the start begins at the earliest kept event.
    assert_eq!(j.register_sink("late", true).unwrap(), 3);
    j.remove_sink("late").unwrap();

    // Now `fast` is the slowest: 4..=8 go, 9 and 10 stay for it.
    j.ack("slow", 10).unwrap();
    assert_eq!(j.apply_retention().unwrap(), 5);
    let left: Vec<u64> = j
        .read("fast", 0, 100)
        .unwrap()
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(left, [9, 10]);
    j.close().await.unwrap();
}

#[tokio::test]
async fn retain_keeps_delivered_events_for_replay() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(JournalConfig {
        retain: Duration::from_secs(3_600),
        ..cfg(tmp.path())
    })
    .unwrap();
    j.register_sink("s", true).unwrap();
    j.append(batch("pods", 1, &["ns/a", "ns/b"])).unwrap();
    j.durable(u64::MAX).await.unwrap();
    j.ack("s", 2).unwrap();
    assert_eq!(j.apply_retention().unwrap(), 0);
    j.close().await.unwrap();

    // The stored append time decides, not the time of the retention pass.
    let j = Journal::open(JournalConfig {
        retain: Duration::from_millis(400),
        ..cfg(tmp.path())
    })
    .unwrap();
    assert_eq!(j.apply_retention().unwrap(), 0);
    std::thread::sleep(Duration::from_millis(500));
    j.append(batch("pods", 2, &["ns/a"])).unwrap();
    j.durable(u64::MAX).await.unwrap();
    j.ack("s", 3).unwrap();
    assert_eq!(j.apply_retention().unwrap(), 2);
    assert_eq!(j.read("s", 0, 10).unwrap()[0].0, 3);
}

#[tokio::test]
async fn backlog_is_head_minus_the_slowest_cursor_against_a_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(JournalConfig {
        max_backlog: 3,
        ..cfg(tmp.path())
    })
    .unwrap();
    j.append(batch("pods", 1, &["ns/a", "ns/b"])).unwrap();
    assert_eq!(j.backlog(), 0, "no sink, no backlog");
    assert!(!j.over_backlog_bound());
    j.register_sink("a", true).unwrap();
    j.register_sink("b", false).unwrap();
    assert_eq!(j.backlog(), 2);
    j.append(batch("pods", 2, &["ns/a", "ns/b"])).unwrap();
    assert_eq!(j.backlog(), 4);
    assert!(j.over_backlog_bound());
    j.durable(u64::MAX).await.unwrap();
    j.ack("a", 2).unwrap();
    assert_eq!(j.backlog(), 2);
    assert!(!j.over_backlog_bound());
    j.close().await.unwrap();
}

/// Leader election (ADR 0013): a standby's backlog is the leader's progress, so its bound never
/// stops the standby's watches; and retention keeps what the positions publisher has not read.
#[tokio::test]
async fn a_standby_ignores_the_backlog_bound_and_retention_can_be_held() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(JournalConfig {
        max_backlog: 1,
        ..cfg(tmp.path())
    })
    .unwrap();
    j.register_sink("a", true).unwrap();
    // One append each: retention removes a segment (the events of one append) whole.
    for key in ["ns/a", "ns/b", "ns/c"] {
        j.append(batch("pods", 1, &[key])).unwrap();
    }
    j.durable(u64::MAX).await.unwrap();
    assert!(j.over_backlog_bound());
    j.set_standby(true);
    assert!(!j.over_backlog_bound());
    j.set_standby(false);
    assert!(j.over_backlog_bound());
    j.ack("a", 3).unwrap();
    j.hold_retention_after(1);
    assert_eq!(
        j.apply_retention().unwrap(),
        1,
        "only what the publisher has read"
    );
    j.hold_retention_after(u64::MAX);
    assert_eq!(j.apply_retention().unwrap(), 2);
    j.close().await.unwrap();
}

#[tokio::test]
async fn a_held_floor_inside_a_segment_keeps_the_whole_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    j.register_sink("a", true).unwrap();
    // One append, one segment: events 1..=3.
    j.append(batch("pods", 1, &["ns/a", "ns/b", "ns/c"]))
        .unwrap();
    j.durable(u64::MAX).await.unwrap();
    j.ack("a", 3).unwrap();
    j.hold_retention_after(2);
    assert_eq!(
        j.apply_retention().unwrap(),
        0,
        "event 3 is held, and its segment with it"
    );
    assert_eq!(j.retained_events(), 3);
    j.hold_retention_after(u64::MAX);
    assert_eq!(j.apply_retention().unwrap(), 3);
    j.close().await.unwrap();
}

#[test]
fn concurrent_appenders_get_disjoint_consecutive_seqs() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    let per_thread = 300u64;
    let handles: Vec<_> = ["left", "right"]
        .into_iter()
        .map(|stream| {
            let j = j.clone();
            std::thread::spawn(move || {
                (1..=per_thread)
                    .map(|rv| {
                        let seqs = j
                            .append(batch(stream, rv, &["ns/a", "ns/b", "ns/c"]))
                            .unwrap();
                        (rv, seqs)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut all = BTreeSet::new();
    let mut owner = BTreeMap::new();
    for (stream, h) in ["left", "right"].into_iter().zip(handles) {
        for (rv, seqs) in h.join().unwrap() {
            assert_eq!(seqs.len(), 3);
            assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
            for s in seqs {
                assert!(all.insert(s), "seq {s} assigned twice");
                owner.insert(s, (stream, rv));
            }
        }
    }
    assert_eq!(all, (1..=per_thread * 6).collect());
    assert_eq!(j.head(), per_thread * 6);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(j.durable(u64::MAX)).unwrap();
    j.register_sink("s", true).unwrap();
    let stored = j.read("s", 0, usize::MAX).unwrap();
    assert_eq!(stored.len() as u64, per_thread * 6);
    for (seq, bytes) in stored {
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        let (stream, rv) = owner[&seq];
        assert_eq!((v["stream"].as_str().unwrap(), rv_of(&bytes)), (stream, rv));
    }
}

#[tokio::test]
async fn close_refuses_later_writes_and_lets_the_journal_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(JournalConfig {
        flush_interval: Duration::from_secs(3_600),
        flush_entries: 1_000_000,
        // Holds the append unflushed: the adaptive commit would flush it at once.
        adaptive_commit: false,
        ..cfg(tmp.path())
    })
    .unwrap();
    j.append(batch("pods", 7, &["ns/a"])).unwrap();
    let other = j.clone();
    j.close().await.unwrap();
    // close flushed what the long interval had not.
    assert_eq!(other.durable_seq(), 1);
    assert!(matches!(
        other.append(batch("pods", 8, &["ns/a"])),
        Err(JournalError::Closed)
    ));
    drop(other);
    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert_eq!(j.head(), 1);
    assert_eq!(j.checkpoint("pods").unwrap().as_deref(), Some("7"));
}

#[tokio::test]
async fn size_on_disk_counts_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    let before = j.size_on_disk().unwrap();
    for rv in 1..=200 {
        j.append(batch("pods", rv, &["ns/a"])).unwrap();
    }
    j.durable(u64::MAX).await.unwrap();
    assert!(j.size_on_disk().unwrap() > before);
}

/// What the crash child reports on stdout after each `durable`.
const DURABLE_LINE: &str = "durable ";

fn crash_child(dir: &Path) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let j = Journal::open(JournalConfig {
            flush_interval: Duration::from_millis(2),
            flush_entries: 64,
            ..JournalConfig::new(dir)
        })
        .unwrap();
        let objects = ["ns/a", "ns/b", "ns/c", "ns/d", "ns/e", "ns/f", "ns/g"];
        // A later round goes on from what the previous kill left.
        let first = j
            .checkpoint("pods")
            .unwrap()
            .map_or(1, |rv| rv.parse::<u64>().unwrap() + 1);
        for rv in first.. {
            // Two objects per batch, rotating, so the index sees many overwrites.
            let i = usize::try_from(rv).unwrap() % objects.len();
            let keys = [objects[i], objects[(i + 3) % objects.len()]];
            let seqs = j.append(batch("pods", rv, &keys)).unwrap();
            // Keep writing while a flush is under way, so the kill lands among non-durable writes.
            if rv % 10 == 0 {
                j.durable(seqs[1]).await.unwrap();
                println!("{DURABLE_LINE}{} {rv}", seqs[1]);
            }
        }
    });
}

#[test]
fn kill9_loses_no_durable_event_and_keeps_index_and_checkpoint_consistent() {
    if let Some(dir) = std::env::var_os(CHILD_DIR_ENV) {
        crash_child(Path::new(&dir));
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    // Several kills on one journal, each a little later after the last `durable`, so some land
    // right after a flush and some among writes that are not durable yet.
    for (round, delay_ms) in [0u64, 3, 11].into_iter().enumerate() {
        let (durable_seq, durable_rv) = run_and_kill(&dir, Duration::from_millis(delay_ms));
        let recovered = check_recovered(&dir, durable_seq, durable_rv);
        eprintln!(
            "crash round {round}: {durable_seq} durable before the kill, {recovered} recovered"
        );
    }
}

/// Runs the crash child until it reported 300 durable points, waits `delay`, SIGKILLs it; returns
/// the last reported `(seq, rv)`.
fn run_and_kill(dir: &Path, delay: Duration) -> (u64, u64) {
    let mut proc = child(
        "kill9_loses_no_durable_event_and_keeps_index_and_checkpoint_consistent",
        dir,
    )
    .spawn()
    .unwrap();
    let stdout = proc.stdout.take().unwrap();
    let mut last = (0u64, 0u64);
    let mut reports = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some((_, rest)) = line.split_once(DURABLE_LINE) {
            let (seq, rv) = rest.split_once(' ').unwrap();
            last = (seq.parse().unwrap(), rv.parse().unwrap());
            reports += 1;
            if reports == 300 {
                break;
            }
        }
        assert!(Instant::now() < deadline, "child too slow");
    }
    std::thread::sleep(delay);
    // `Child::kill` is SIGKILL on Unix: no destructor, no final flush.
    proc.kill().unwrap();
    let status = proc.wait().unwrap();
    assert_eq!(reports, 300, "child stopped early: {status}");
    last
}

/// Reopens after a kill and checks the journal against what the child saw durable; returns the
/// recovered head.
fn check_recovered(dir: &Path, durable_seq: u64, durable_rv: u64) -> u64 {
    let j = Journal::open(JournalConfig::new(dir)).unwrap();
    assert!(j.head() >= durable_seq, "{} < {durable_seq}", j.head());
    j.register_sink("check", true).unwrap();
    let events = j.read("check", 0, usize::MAX).unwrap();
    let seqs: Vec<u64> = events.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (1..=j.head()).collect::<Vec<_>>(), "gap or loss");

    // Each batch wrote two events, two index entries and the checkpoint at once.
    let mut latest: BTreeMap<String, u64> = BTreeMap::new();
    let mut per_rv: BTreeMap<u64, usize> = BTreeMap::new();
    for (_, bytes) in &events {
        let v: Value = serde_json::from_slice(bytes).unwrap();
        let rv = rv_of(bytes);
        latest.insert(v["key"].as_str().unwrap().to_owned(), rv);
        *per_rv.entry(rv).or_default() += 1;
    }
    assert!(per_rv.values().all(|&n| n == 2), "a torn batch");
    let last_rv = *per_rv.keys().next_back().unwrap();
    assert!(last_rv >= durable_rv);
    let checkpoint: u64 = j.checkpoint("pods").unwrap().unwrap().parse().unwrap();
    assert_eq!(checkpoint, last_rv, "checkpoint and events disagree");
    let index: BTreeMap<String, u64> = index_rvs(&j);
    assert_eq!(index, latest, "index and events disagree");
    j.remove_sink("check").unwrap();
    j.head()
}

/// `index_keys` walks one stream's keys in order, not those of a stream whose name extends it,
/// and a key removed behind the walk does not disturb it (a relist removes what it walked past).
#[tokio::test]
async fn index_keys_walks_one_stream_lazily() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    j.append(batch("pods", 1, &["ns/b", "ns/a", "ns-x/c"]))
        .unwrap();
    j.append(batch("podsx", 2, &["ns/z"])).unwrap();
    let mut walked = Vec::new();
    for key in j.index_keys("pods").unwrap() {
        let key = key.unwrap();
        j.append(Batch {
            stream: "pods".into(),
            events: vec![],
            index: vec![IndexUpdate::Remove { key: key.clone() }],
            checkpoint: None,
            listed: false,
        })
        .unwrap();
        walked.push(key);
    }
    assert_eq!(walked, ["ns-x/c", "ns/a", "ns/b"]);
    assert!(j.index_keys("pods").unwrap().next().is_none());
    assert_eq!(j.index_keys("podsx").unwrap().count(), 1);
    assert!(j.index_keys("").is_err());
    j.close().await.unwrap();
}

fn seqs(events: &[(u64, Vec<u8>)]) -> Vec<u64> {
    events.iter().map(|(s, _)| *s).collect()
}

/// Schema 5: the events of one append share an `e/` key (a segment); a read, a replay or a new
/// sink starting inside one gets the events after its position only, in order, as they were.
#[tokio::test]
async fn reads_from_the_middle_of_a_segment_return_only_the_events_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    j.register_sink("out", false).unwrap();
    let keys: Vec<String> = (1..=5).map(|i| format!("ns/{i}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let sent = batch("pods", 7, &keys);
    assert_eq!(j.append(sent.clone()).unwrap(), [1, 2, 3, 4, 5]);
    j.append(batch("pods", 8, &["ns/6", "ns/7"])).unwrap();
    j.durable(u64::MAX).await.unwrap();
    let stored: Vec<Vec<u8>> = j
        .inner
        .db
        .scan_prefix(keys::EVENT_PREFIX)
        .keys()
        .map(|k| k.unwrap().to_vec())
        .collect();
    assert_eq!(stored, [keys::segment(1, 5), keys::segment(6, 7)]);

    let all = j.read("out", 0, 100).unwrap();
    assert_eq!(seqs(&all), [1, 2, 3, 4, 5, 6, 7]);
    let bytes: Vec<&[u8]> = all[..5].iter().map(|(_, e)| e.as_slice()).collect();
    let expected: Vec<&[u8]> = sent.events.iter().map(Vec::as_slice).collect();
    assert_eq!(bytes, expected, "the event bytes are unchanged");
    assert_eq!(seqs(&j.read("out", 2, 100).unwrap()), [3, 4, 5, 6, 7]);
    assert_eq!(seqs(&j.read("out", 2, 2).unwrap()), [3, 4]);
    assert_eq!(seqs(&j.read("out", 4, 2).unwrap()), [5, 6]);
    assert_eq!(seqs(&j.read("out", 5, 100).unwrap()), [6, 7]);
    assert_eq!(seqs(&j.read("out", 6, 100).unwrap()), [7]);
    assert!(j.read("out", 7, 100).unwrap().is_empty());
    let shared = j.read_shared("out", 3, 1).unwrap();
    assert_eq!((shared[0].0, &shared[0].1[..]), (4, &sent.events[3][..]));
    assert_eq!(seqs(&j.events_from(4, 100).unwrap()), [4, 5, 6, 7]);
    assert_eq!(seqs(&j.events_from(2, 3).unwrap()), [2, 3, 4]);
    assert!(j.events_from(9, 100).unwrap().is_empty());
    assert_eq!(j.register_sink("late", true).unwrap(), 0);
    j.close().await.unwrap();
}

/// A segment goes once every event of it may go; until then the events of it a slow sink has not
/// passed stay readable, and the journal counts them from the segment's first event.
#[tokio::test]
async fn retention_keeps_a_segment_until_all_of_its_events_may_go() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    j.register_sink("out", true).unwrap();
    j.append(batch("pods", 1, &["ns/a", "ns/b", "ns/c"]))
        .unwrap();
    j.append(batch("pods", 2, &["ns/d", "ns/e"])).unwrap();
    j.durable(u64::MAX).await.unwrap();
    j.ack("out", 2).unwrap();
    assert_eq!(j.apply_retention().unwrap(), 0, "event 3 is not delivered");
    assert_eq!(seqs(&j.read("out", 2, 100).unwrap()), [3, 4, 5]);
    assert_eq!(j.retained_events(), 5);
    j.ack("out", 4).unwrap();
    assert_eq!(j.apply_retention().unwrap(), 3);
    assert_eq!(j.retained_events(), 2);
    assert_eq!(seqs(&j.read("out", 4, 100).unwrap()), [5]);
    assert_eq!(seqs(&j.read("out", 0, 100).unwrap()), [4, 5]);
    assert_eq!(j.register_sink("late", true).unwrap(), 3);
    j.remove_sink("late").unwrap();
    j.close().await.unwrap();
    // Reopened: the first kept segment begins at 4.
    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert_eq!(j.retained_events(), 2);
    j.ack("out", 5).unwrap();
    assert_eq!(j.apply_retention().unwrap(), 2);
    assert_eq!(j.retained_events(), 0);
    j.close().await.unwrap();
}

/// A schema-4 store's single-event keys stay readable beside the segments appended after the
/// upgrade: reads, retention and verify see one sequence.
#[tokio::test]
async fn a_version_4_store_keeps_its_single_events_beside_new_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = empty_store(tmp.path()).await;
    {
        // What a schema-4 herald wrote for an append of two events and one of one.
        let raw = raw_store(&dir);
        for (seq, key) in [(1, "ns/a"), (2, "ns/b"), (3, "ns/c")] {
            let value = keys::event_value(now_ms(), &event("pods", seq, key));
            raw.insert(keys::event(seq), value).unwrap();
        }
        raw.insert(keys::HEAD_KEY, &3u64.to_be_bytes()[..]).unwrap();
        raw.insert(b"meta/schema_version", b"4").unwrap();
        raw.flush().unwrap();
    }
    let report = verify(&dir, OPEN_TIMEOUT).unwrap();
    assert!(report.intact(), "{report:?}");
    assert_eq!(report.schema_version.as_deref(), Some("4"));
    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert_eq!(j.register_sink("out", true).unwrap(), 0);
    assert_eq!(
        j.append(batch("pods", 4, &["ns/d", "ns/e"])).unwrap(),
        [4, 5]
    );
    j.durable(u64::MAX).await.unwrap();
    let all = j.read("out", 0, 100).unwrap();
    assert_eq!(seqs(&all), [1, 2, 3, 4, 5]);
    let rvs: Vec<u64> = all.iter().map(|(_, e)| rv_of(e)).collect();
    assert_eq!(rvs, [1, 2, 3, 4, 4]);
    assert_eq!(seqs(&j.read("out", 2, 2).unwrap()), [3, 4]);
    assert_eq!(seqs(&j.read("out", 4, 2).unwrap()), [5]);
    j.ack("out", 3).unwrap();
    assert_eq!(j.apply_retention().unwrap(), 3);
    assert_eq!(seqs(&j.read("out", 0, 100).unwrap()), [4, 5]);
    j.close().await.unwrap();
    let report = verify(&dir, OPEN_TIMEOUT).unwrap();
    assert!(report.intact(), "{report:?}");
    assert_eq!(report.schema_version.as_deref(), Some("7"));
    assert_eq!(
        (report.events, report.first_event, report.last_event),
        (2, Some(4), Some(5))
    );
}

/// Verify names an unreadable event inside a segment, and a segment that does not hold the events
/// its key names; salvage keeps the readable events of both kinds of damage, renumbered in order.
#[tokio::test]
async fn verify_and_salvage_see_into_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    let j = Journal::open(cfg(tmp.path())).unwrap();
    j.register_sink("out", false).unwrap();
    j.append(batch("pods", 1, &["ns/a", "ns/b", "ns/c"]))
        .unwrap();
    j.append(batch("pods", 2, &["ns/d", "ns/e"])).unwrap();
    j.append(batch("pods", 3, &["ns/f"])).unwrap();
    j.close().await.unwrap();
    let report = verify(&dir, OPEN_TIMEOUT).unwrap();
    assert!(report.intact(), "{report:?}");
    assert_eq!(
        (report.events, report.first_event, report.last_event),
        (6, Some(1), Some(6))
    );
    {
        let raw = raw_store(&dir);
        // Event 2's bytes no longer a CloudEvent; the segment of 4 and 5 cut short.
        let first = keys::segment(1, 3);
        let value = raw.get(&first).unwrap().unwrap();
        let plain = keys::plain_events(&first, &value).unwrap();
        let (at, events) = keys::split_events(&first, &plain).unwrap();
        let broken = keys::segment_value(at, [events[0].1, b"{not json", events[2].1]).unwrap();
        raw.insert(&first, broken).unwrap();
        let second = keys::segment(4, 5);
        let value = raw.get(&second).unwrap().unwrap();
        raw.insert(&second, &value[..value.len() - 3]).unwrap();
        raw.flush().unwrap();
    }
    let report = verify(&dir, OPEN_TIMEOUT).unwrap();
    assert!(!report.intact());
    assert!(
        report
            .problems
            .iter()
            .any(|p| p == "event 2 is unreadable (not a stored CloudEvent)"),
        "{report:?}"
    );
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.starts_with("the segment of events 4..=5 is unreadable")),
        "{report:?}"
    );
    assert_eq!(report.events, 6);
    assert!(matches!(
        Journal::open(cfg(tmp.path())),
        Err(JournalError::Damaged { .. })
    ));

    let out = salvage(&dir, OPEN_TIMEOUT, false).unwrap();
    assert_eq!(
        (out.events_kept, out.events_dropped, out.head),
        (3, 3, 9),
        "{out:?}"
    );
    assert_eq!(out.cursors.get("out"), Some(&6));
    let j = Journal::open(cfg(tmp.path())).unwrap();
    let read = j.read("out", 6, 100).unwrap();
    assert_eq!(seqs(&read), [7, 8, 9]);
    let kept: Vec<String> = read
        .iter()
        .map(|(_, e)| {
            serde_json::from_slice::<Value>(e).unwrap()["key"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(kept, ["ns/a", "ns/c", "ns/f"]);
    j.close().await.unwrap();
    assert!(verify(&dir, OPEN_TIMEOUT).unwrap().intact());
}

/// Queued appends all run on the journal's one append thread, in the order they were queued (so
/// sled's node copies are made and freed in one allocator heap; `appender.rs`), and the journal
/// holds what they appended, numbered in that order.
#[tokio::test]
async fn queued_appends_run_in_order_on_one_thread() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    j.register_sink("out", true).unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for rv in 1..=20u64 {
        let tx = tx.clone();
        let key = format!("ns/{rv}");
        j.append_queued(
            batch("s", rv, &[key.as_str()]),
            FirstSync::Keep,
            Vec::new(),
            move |appended| {
                let on = std::thread::current();
                let _ = tx.send((rv, appended.unwrap(), on.id(), on.name().map(str::to_owned)));
            },
        );
    }
    drop(tx);
    let mut seen = Vec::new();
    while let Some(one) = rx.recv().await {
        seen.push(one);
    }
    assert_eq!(seen.len(), 20);
    let order: Vec<(u64, Vec<u64>)> = seen
        .iter()
        .map(|(rv, seqs, ..)| (*rv, seqs.clone()))
        .collect();
    let expected: Vec<(u64, Vec<u64>)> = (1..=20).map(|rv| (rv, vec![rv])).collect();
    assert_eq!(order, expected);
    assert!(
        seen.iter().all(|(_, _, id, _)| *id == seen[0].2),
        "{seen:?}"
    );
    assert_eq!(seen[0].3.as_deref(), Some("journal-append"));
    assert_ne!(seen[0].2, std::thread::current().id());
    j.durable(u64::MAX).await.unwrap();
    let stored: Vec<u64> = j
        .read("out", 0, 100)
        .unwrap()
        .iter()
        .map(|(_, e)| {
            serde_json::from_slice::<Value>(e).unwrap()["rv"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(stored, (1..=20).collect::<Vec<u64>>());
    j.close().await.unwrap();
}

/// A journal whose callers all let go of it while an append is queued is still released: the
/// append lands, and the directory can be opened again at once.
#[tokio::test]
async fn a_journal_dropped_with_an_append_queued_lets_go_of_its_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    j.append_queued(
        batch("s", 1, &["ns/a"]),
        FirstSync::Keep,
        Vec::new(),
        move |appended| {
            let _ = tx.send(appended.map(|seqs| seqs.len()));
        },
    );
    drop(j);
    assert_eq!(rx.await.unwrap().unwrap(), 1);
    let j = Journal::open(cfg(tmp.path())).unwrap();
    assert_eq!(j.head(), 1);
    j.close().await.unwrap();
}

/// The append thread ends once idle (so its allocator heap gives back what the last appends freed),
/// and the next queued append starts another that carries on the numbering.
#[tokio::test]
async fn an_append_after_the_append_thread_went_idle_starts_another() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    let queue = |rv: u64| {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let key = format!("ns/{rv}");
        j.append_queued(
            batch("s", rv, &[key.as_str()]),
            FirstSync::Keep,
            Vec::new(),
            move |appended| {
                let _ = tx.send((appended.unwrap(), std::thread::current().id()));
            },
        );
        rx
    };
    let (first, on) = queue(1).await.unwrap();
    // Waits for the thread to end rather than for a fixed time, which a loaded machine can pass.
    let deadline = std::time::Instant::now() + appender::IDLE * 30;
    while j.inner.appends_queued.running() {
        assert!(
            std::time::Instant::now() < deadline,
            "the append thread never went idle"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (second, then) = queue(2).await.unwrap();
    assert_eq!((first, second), (vec![1], vec![2]));
    assert_ne!(on, then);
    j.close().await.unwrap();
}

/// A caller's `done` that panics takes the append thread down (its append had landed); the appends
/// queued after it are not stranded: each either hears it was aborted or lands on a new thread.
#[tokio::test]
async fn an_append_after_the_append_thread_panicked_starts_another() {
    let tmp = tempfile::tempdir().unwrap();
    let j = Journal::open(cfg(tmp.path())).unwrap();
    j.append_queued(
        batch("s", 1, &["ns/a"]),
        FirstSync::Keep,
        Vec::new(),
        |_| panic!("a caller's bug"),
    );
    let mut landed = None;
    for _ in 0..100 {
        let (tx, rx) = tokio::sync::oneshot::channel();
        j.append_queued(
            batch("s", 2, &["ns/b"]),
            FirstSync::Keep,
            Vec::new(),
            move |appended| {
                let _ = tx.send(appended);
            },
        );
        // Dropped unanswered: it was queued to the thread that panicked.
        if let Ok(appended) = rx.await {
            landed = Some(appended.unwrap());
            break;
        }
    }
    assert_eq!(
        landed,
        Some(vec![2]),
        "the first landed before its done panicked"
    );
    j.close().await.unwrap();
}

/// An object as the API server sends it: big enough that the dictionary shrinks it.
fn object(key: &str, rv: u64) -> Vec<u8> {
    serde_json::to_vec(&json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": key, "namespace": "ns", "uid": format!("8e08ddf6-b4cc-4ee8-a9f2-{rv:012}"),
            "resourceVersion": rv.to_string(), "generation": 1, "creationTimestamp": "2026-12-04T21:09:14Z",
            "labels": {"app": "bench"}},
        "spec": {"replicas": 3, "image": "registry.example/app:1.2.3"}}))
    .unwrap()
}

/// A CloudEvent as herald renders one: its attributes and the object.
fn rendered(key: &str, rv: u64) -> Vec<u8> {
    let mut e = serde_json::to_vec(
        &json!({"specversion": "1.0", "id": format!("uid:{rv}:updated"),
        "source": "k8s://bench/example.com/widgets", "type": "dev.herald.resource.updated",
        "subject": key, "datacontenttype": "application/json", "dataschema": "urn:herald:change:v1",
        "key": key, "resourceversion": rv.to_string(), "resync": false}),
    )
    .unwrap();
    e.pop();
    e.extend_from_slice(b",\"data\":{\"op\":\"updated\",\"object\":");
    e.extend_from_slice(&object(key, rv));
    e.extend_from_slice(b"}}");
    e
}

/// Schema 6: a schema-5 store's plain values (segments and index entries) stay readable beside the
/// compressed ones appended after the upgrade: reads, index reads, replays, retention and verify
/// see one journal, and what the new appends wrote is stored compressed.
#[tokio::test]
async fn a_version_5_store_keeps_its_plain_values_beside_compressed_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = empty_store(tmp.path()).await;
    let old: Vec<Vec<u8>> = ["ns/a", "ns/b", "ns/c"]
        .iter()
        .zip(1..)
        .map(|(k, rv)| rendered(k, rv))
        .collect();
    {
        // What a schema-5 herald wrote for an append of three events and their index entries.
        let raw = raw_store(&dir);
        let value = keys::segment_plain(now_ms(), old.iter().map(Vec::as_slice)).unwrap();
        raw.insert(keys::segment(1, 3), value).unwrap();
        for (key, rv) in [("ns/a", 1), ("ns/b", 2), ("ns/c", 3)] {
            raw.insert(keys::index("pods", key), object(key, rv))
                .unwrap();
        }
        raw.insert(keys::HEAD_KEY, &3u64.to_be_bytes()[..]).unwrap();
        raw.insert(b"meta/schema_version", b"5").unwrap();
        raw.flush().unwrap();
    }
    let report = verify(&dir, OPEN_TIMEOUT).unwrap();
    assert!(report.intact(), "{report:?}");
    assert_eq!(report.schema_version.as_deref(), Some("5"));

    let j = Journal::open(cfg(tmp.path())).unwrap();
    j.register_sink("out", true).unwrap();
    let new: Vec<Vec<u8>> = ["ns/b", "ns/d"]
        .iter()
        .zip(4..)
        .map(|(k, rv)| rendered(k, rv))
        .collect();
    let appended = j
        .append(Batch {
            stream: "pods".to_owned(),
            events: new.clone(),
            index: vec![
                IndexUpdate::Put {
                    key: "ns/b".to_owned(),
                    object: object("ns/b", 4),
                },
                IndexUpdate::Put {
                    key: "ns/d".to_owned(),
                    object: object("ns/d", 5),
                },
            ],
            checkpoint: Some("5".to_owned()),
            listed: false,
        })
        .unwrap();
    assert_eq!(appended, [4, 5]);
    j.durable(u64::MAX).await.unwrap();
    let all: Vec<Vec<u8>> = old.iter().chain(&new).cloned().collect();
    let read = j.read("out", 0, 100).unwrap();
    assert_eq!(seqs(&read), [1, 2, 3, 4, 5]);
    assert_eq!(read.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>(), all);
    // From the store, not the in-memory tail: a reader inside each kind of segment.
    assert_eq!(j.read("out", 2, 100).unwrap()[0].1, all[2]);
    assert_eq!(j.read("out", 4, 100).unwrap()[0].1, all[4]);
    assert_eq!(j.events_from(3, 2).unwrap()[1].1, all[3]);
    assert_eq!(
        j.index_get("pods", "ns/a").unwrap(),
        Some(object("ns/a", 1))
    );
    assert_eq!(
        j.index_get("pods", "ns/b").unwrap(),
        Some(object("ns/b", 4))
    );
    let scanned = j.index_scan("pods").unwrap();
    assert_eq!(
        scanned,
        [
            ("ns/a".to_owned(), object("ns/a", 1)),
            ("ns/b".to_owned(), object("ns/b", 4)),
            ("ns/c".to_owned(), object("ns/c", 3)),
            ("ns/d".to_owned(), object("ns/d", 5)),
        ]
    );
    j.ack("out", 3).unwrap();
    assert_eq!(j.apply_retention().unwrap(), 3);
    assert_eq!(seqs(&j.read("out", 0, 100).unwrap()), [4, 5]);
    j.close().await.unwrap();

    let report = verify(&dir, OPEN_TIMEOUT).unwrap();
    assert!(report.intact(), "{report:?}");
    assert_eq!(report.schema_version.as_deref(), Some("7"));
    assert_eq!((report.events, report.index_entries), (2, 4));
    // The new values are compressed, and smaller than their plain forms; the old index entries
    // stay as they were.
    let raw = raw_store(&dir);
    let segment = raw.get(keys::segment(4, 5)).unwrap().unwrap();
    assert_eq!(segment.first(), Some(&compressed::LZ4_DICTIONARY_1));
    let plain = keys::segment_plain(0, new.iter().map(Vec::as_slice)).unwrap();
    assert!(
        segment.len() < plain.len() / 2,
        "{} of {}",
        segment.len(),
        plain.len()
    );
    let b = raw.get(keys::index("pods", "ns/b")).unwrap().unwrap();
    assert_eq!(b.first(), Some(&compressed::LZ4_DICTIONARY_1));
    assert!(b.len() < object("ns/b", 4).len());
    let a = raw.get(keys::index("pods", "ns/a")).unwrap().unwrap();
    assert_eq!(&a[..], &object("ns/a", 1)[..]);
}

/// A compressed value that does not decompress is unreadable, like bad JSON: verify names it, a
/// start refuses the journal, and salvage keeps everything else.
#[tokio::test]
async fn compressed_values_that_do_not_decompress_are_unreadable() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    let j = Journal::open(cfg(tmp.path())).unwrap();
    j.register_sink("out", false).unwrap();
    for (rv, keys) in [(1, ["ns/a", "ns/b"]), (2, ["ns/c", "ns/d"])] {
        j.append(Batch {
            stream: "pods".to_owned(),
            events: keys.iter().map(|k| rendered(k, rv)).collect(),
            index: keys
                .iter()
                .map(|k| IndexUpdate::Put {
                    key: (*k).to_owned(),
                    object: object(k, rv),
                })
                .collect(),
            checkpoint: Some(rv.to_string()),
            listed: false,
        })
        .unwrap();
    }
    j.close().await.unwrap();
    assert!(verify(&dir, OPEN_TIMEOUT).unwrap().intact());
    {
        // The block of the first segment and of one index value damaged, lengths intact.
        let raw = raw_store(&dir);
        for key in [keys::segment(1, 2), keys::index("pods", "ns/c")] {
            let mut value = raw.get(&key).unwrap().unwrap().to_vec();
            assert_eq!(value.first(), Some(&compressed::LZ4_DICTIONARY_1));
            let end = value.len();
            for b in &mut value[end - 40..] {
                *b = 0xff;
            }
            raw.insert(&key, value).unwrap();
        }
        raw.flush().unwrap();
    }
    let report = verify(&dir, OPEN_TIMEOUT).unwrap();
    assert!(!report.intact());
    assert!(
        report.problems.iter().any(|p| p
            == "the segment of events 1..=2 is unreadable (compressed value does not decompress)"),
        "{report:?}"
    );
    assert!(
        report
            .problems
            .iter()
            .any(|p| p == "index entry i/pods\0ns/c is unreadable"),
        "{report:?}"
    );
    assert!(matches!(
        Journal::open(cfg(tmp.path())),
        Err(JournalError::Damaged { .. })
    ));
    let out = salvage(&dir, OPEN_TIMEOUT, false).unwrap();
    assert_eq!((out.events_kept, out.events_dropped), (2, 2), "{out:?}");
    assert_eq!(out.index_entries_kept, 3, "{out:?}");
    let j = Journal::open(cfg(tmp.path())).unwrap();
    let kept: Vec<Vec<u8>> = j
        .read("out", out.cursors["out"], 100)
        .unwrap()
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    assert_eq!(kept, [rendered("ns/c", 2), rendered("ns/d", 2)]);
    assert_eq!(j.index_get("pods", "ns/c").unwrap(), None);
    let d: Value = serde_json::from_slice(&j.index_get("pods", "ns/d").unwrap().unwrap()).unwrap();
    assert_eq!(d["metadata"]["name"], "ns/d");
    j.close().await.unwrap();
}
