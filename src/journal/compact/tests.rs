//! Compaction against real stores: every entry survives byte for byte, the files shrink, and a
//! crash at each step of the swap (a child process stopped by the test hook) leaves a journal
//! that the next open finishes or rolls back with nothing changed.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::json;

use super::super::{Batch, IndexUpdate, Journal, JournalConfig, files};
use super::*;

/// Set in a child process re-executed by a test: the journal directory it must compact.
const CHILD_DIR_ENV: &str = "HERALD_COMPACT_TEST_CHILD_DIR";

/// The exit code of a child stopped by the crash hook.
const CRASHED: i32 = 86;

type Entries = BTreeMap<Vec<u8>, Vec<u8>>;

/// Every entry of the store in `dir`, read with sled directly.
fn entries(dir: &Path) -> Entries {
    // sled lets go of its file lock when its last thread ends, a moment after a close returns.
    let mut tries = 0;
    let db = loop {
        match sled::Config::new().path(dir).open() {
            Ok(db) => break db,
            Err(e) if tries < 100 => {
                tries += 1;
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("{e}"),
        }
    };
    let all = db
        .iter()
        .map(|e| {
            let (k, v) = e.unwrap();
            (k.to_vec(), v.to_vec())
        })
        .collect();
    drop(db);
    all
}

/// A journal after a burst that retention dropped: 4,000 events of 2 KiB and their index entries
/// (created, then deleted), of which the last 50 stay (the `slow` sink has not passed them), with
/// acknowledged ranges above `slow`'s cursor, two dead letters (one of 300 KiB, which sled keeps
/// in `blobs/`), a replay and a checkpoint.
async fn fill(dir: &Path) {
    let j = Journal::open(JournalConfig::new(dir)).unwrap();
    j.register_sink("out", true).unwrap();
    j.register_sink("slow", true).unwrap();
    // Bytes LZ4 finds no repeats in, so events and index entries stay ~2 KiB as stored (schema 6
    // compresses values): one event a segment, as the figures below count.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut noise = move || -> String {
        (0..2_048)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                char::from(b"0123456789abcdefghijklmnopqrstuv"[(state % 32) as usize])
            })
            .collect()
    };
    for round in 0..40u64 {
        let keys: Vec<String> = (0..100).map(|i| format!("ns/w-{round}-{i}")).collect();
        j.append(Batch {
            stream: "widgets".to_owned(),
            events: keys
                .iter()
                .map(|k| serde_json::to_vec(&json!({"id": k, "pad": noise()})).unwrap())
                .collect(),
            index: keys
                .iter()
                .map(|k| IndexUpdate::Put {
                    key: k.clone(),
                    object: serde_json::to_vec(&json!({"k": k, "pad": noise()})).unwrap(),
                })
                .collect(),
            checkpoint: Some(round.to_string()),
            listed: false,
        })
        .unwrap();
    }
    j.append(Batch {
        stream: "widgets".to_owned(),
        events: Vec::new(),
        index: (0..40)
            .flat_map(|r| (0..100).map(move |i| format!("ns/w-{r}-{i}")))
            .filter(|k| k != "ns/w-39-99")
            .map(|key| IndexUpdate::Remove { key })
            .collect(),
        checkpoint: Some("4000".to_owned()),
        listed: false,
    })
    .unwrap();
    let head = j.head();
    j.durable(head).await.unwrap();
    j.ack("out", head).unwrap();
    j.acknowledge("slow", head - 50, &[(head - 40, head - 30)])
        .unwrap();
    j.dead_letter_put("slow", 7, br#"{"event":"dead"}"#)
        .unwrap();
    j.replay_put("slow", 9, br#"{"event":"again"}"#).unwrap();
    // Above sled's blob threshold (~128 KiB): stored in `blobs/`, which compaction must sync.
    let big =
        serde_json::to_vec(&json!({"event": "large", "pad": "b".repeat(300 * 1024)})).unwrap();
    j.dead_letter_put("slow", 8, &big).unwrap();
    assert_eq!(j.apply_retention().unwrap(), head - 50);
    assert_eq!(j.retained_events(), 50);
    j.close().await.unwrap();
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("compact."))
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
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

#[tokio::test]
async fn compaction_keeps_every_entry_and_gives_back_the_space() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    fill(&dir).await;
    let before = entries(&dir);
    let record = std::fs::read(dir.join(head::FILE)).unwrap();
    let disk_before = files::allocated_bytes(&dir).unwrap();

    let mut lines = Vec::new();
    let out = compact(&dir, Duration::from_secs(30), &mut |l| {
        lines.push(l.to_owned())
    })
    .unwrap();

    assert_eq!(entries(&dir), before, "every entry survives byte for byte");
    assert!(
        std::fs::read_dir(dir.join("blobs")).unwrap().count() > 0,
        "the large dead letter is kept in blobs/"
    );
    assert_eq!(std::fs::read(dir.join(head::FILE)).unwrap(), record);
    assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
    assert_eq!(out.bytes_before, disk_before);
    assert_eq!(out.bytes_after, files::allocated_bytes(&dir).unwrap());
    assert!(
        out.bytes_after * 2 < out.bytes_before,
        "{} -> {} bytes",
        out.bytes_before,
        out.bytes_after
    );
    assert_eq!(out.events_kept, 50);
    assert_eq!(out.entries, before.len() as u64);
    assert!(!lines.is_empty());

    // It opens and goes on where it was.
    let j = Journal::open(JournalConfig::new(&dir)).unwrap();
    let head = j.head();
    assert_eq!(j.retained_events(), 50);
    assert_eq!(j.cursor("slow").unwrap(), head - 50);
    assert_eq!(j.acked("slow").unwrap(), vec![(head - 40, head - 30)]);
    let seqs = j
        .append(Batch {
            stream: "widgets".to_owned(),
            events: vec![br#"{"id":"next"}"#.to_vec()],
            index: Vec::new(),
            checkpoint: Some("4001".to_owned()),
            listed: false,
        })
        .unwrap();
    assert_eq!(seqs, vec![head + 1]);
    j.close().await.unwrap();
}

#[tokio::test]
async fn compaction_refuses_a_journal_in_use() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    let j = Journal::open(JournalConfig::new(&dir)).unwrap();
    let err = compact(&dir, Duration::from_secs(30), &mut |_| {}).unwrap_err();
    assert!(matches!(err, JournalError::AlreadyOpen { .. }), "{err:?}");
    j.close().await.unwrap();
}

#[tokio::test]
async fn an_open_compacts_only_when_asked_and_worth_it() {
    let tmp = tempfile::tempdir().unwrap();
    let template = tmp.path().join("template");
    fill(&template).await;
    let before = entries(&template);
    let disk = files::allocated_bytes(&template).unwrap();

    // `herald run`'s floor is far above this journal: left as it is.
    let dir = tmp.path().join("run");
    copy_dir(&template, &dir);
    let cfg = JournalConfig {
        compact_at_open: Some(AUTO_FLOOR_BYTES),
        ..JournalConfig::new(&dir)
    };
    Journal::open(cfg).unwrap().close().await.unwrap();
    assert!(files::allocated_bytes(&dir).unwrap() * 2 > disk);

    // Not asked: left as it is.
    let dir = tmp.path().join("other");
    copy_dir(&template, &dir);
    Journal::open(JournalConfig::new(&dir))
        .unwrap()
        .close()
        .await
        .unwrap();
    assert!(files::allocated_bytes(&dir).unwrap() * 2 > disk);

    // A floor below it: compacted before it opens, nothing lost.
    let dir = tmp.path().join("small-floor");
    copy_dir(&template, &dir);
    let cfg = JournalConfig {
        compact_at_open: Some(1024 * 1024),
        ..JournalConfig::new(&dir)
    };
    let j = Journal::open(cfg).unwrap();
    assert!(j.size_on_disk().unwrap() * 2 < disk);
    j.close().await.unwrap();
    assert_eq!(entries(&dir), before);
}

#[tokio::test]
async fn a_swap_marker_without_a_complete_copy_keeps_the_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let template = tmp.path().join("template");
    fill(&template).await;
    let before = entries(&template);
    // A marker that reached disk although writing it failed, its copy deleted or half there.
    for (case, staged) in [
        ("none", None),
        ("partial", Some("conf")),
        ("no-head", Some("db")),
    ] {
        let dir = tmp.path().join(case);
        copy_dir(&template, &dir);
        std::fs::write(dir.join(SWAP_MARKER), b"marker\n").unwrap();
        if let Some(file) = staged {
            std::fs::create_dir_all(dir.join(NEW_DIR)).unwrap();
            std::fs::copy(template.join(file), dir.join(NEW_DIR).join(file)).unwrap();
        }
        let j = Journal::open(JournalConfig::new(&dir)).unwrap();
        assert_eq!(j.retained_events(), 50, "{case}");
        j.close().await.unwrap();
        assert!(leftovers(&dir).is_empty(), "{case}: {:?}", leftovers(&dir));
        assert_eq!(entries(&dir), before, "{case}: the journal is kept intact");
    }
}

#[tokio::test]
async fn the_start_time_trigger_measures_only_the_store() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    fill(&dir).await;
    compact(&dir, Duration::from_secs(30), &mut |_| {}).unwrap();
    let disk = files::allocated_bytes(&dir).unwrap();
    // The embedded cluster's state, far larger than the compacted journal.
    std::fs::create_dir_all(dir.join("embedded-cluster")).unwrap();
    std::fs::write(
        dir.join("embedded-cluster").join("changes.jsonl"),
        "c".repeat(usize::try_from(disk * 16).unwrap()),
    )
    .unwrap();
    let inode = std::fs::metadata(dir.join("db")).unwrap().ino();
    let cfg = JournalConfig {
        compact_at_open: Some(1024 * 1024),
        ..JournalConfig::new(&dir)
    };
    Journal::open(cfg).unwrap().close().await.unwrap();
    assert_eq!(
        std::fs::metadata(dir.join("db")).unwrap().ino(),
        inode,
        "a compacted journal is not compacted again for its neighbours' files"
    );
}

const STEPS: [&str; 7] = [
    "copied",
    "marked",
    "moving-old",
    "moved-old",
    "installing",
    "moving-new",
    "installed",
];

#[tokio::test]
async fn a_crash_at_any_step_leaves_a_journal_the_next_open_completes() {
    if let Some(dir) = std::env::var_os(CHILD_DIR_ENV) {
        // The child: compact until the hook stops the process.
        let done = compact(Path::new(&dir), Duration::from_secs(30), &mut |_| {});
        println!("compact-result: {done:?}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let template = tmp.path().join("template");
    fill(&template).await;
    let before = entries(&template);
    let disk = files::allocated_bytes(&template).unwrap();
    let test = module_path!()
        .split_once("::")
        .map_or(module_path!(), |(_, rest)| rest)
        .to_owned()
        + "::a_crash_at_any_step_leaves_a_journal_the_next_open_completes";
    for step in STEPS {
        let dir = tmp.path().join(step);
        copy_dir(&template, &dir);
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &test, "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR_ENV, &dir)
            .env(CRASH_ENV, step)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(CRASHED),
            "step {step}: the child did not stop there\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !leftovers(&dir).is_empty(),
            "step {step}: nothing half done"
        );

        let j = Journal::open(JournalConfig::new(&dir)).unwrap();
        let shrunk = j.size_on_disk().unwrap() * 2 < disk;
        assert_eq!(j.retained_events(), 50, "step {step}");
        j.close().await.unwrap();
        assert!(
            leftovers(&dir).is_empty(),
            "step {step}: {:?}",
            leftovers(&dir)
        );
        assert_eq!(entries(&dir), before, "step {step}: entries changed");
        // Before the marker the copy is discarded; from the marker on the swap is finished.
        assert_eq!(shrunk, step != "copied", "step {step}");
    }
}

/// The figures of docs/operations.md ("Reclaiming disk space"): 100,000 events of about 1 KiB
/// over 10,000 objects (each change updates its object's index entry), the last 1,000 left
/// undelivered, then one compaction; either a sink acknowledging as it goes with retention
/// passing every 10,000 events (as `herald run`'s pass every 5 s would), or a burst (the sink
/// down, retention passing once it caught up). Run it with
/// `cargo test --lib measure_compaction -- --ignored --nocapture`.
#[tokio::test]
#[ignore = "a measurement: prints figures, asserts nothing about them"]
async fn measure_compaction_after_100k_events() {
    for (name, every) in [("steady", 100u64), ("burst", 1_000)] {
        measure(name, every).await;
    }
}

async fn measure(name: &str, retention_every: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    let j = Journal::open(JournalConfig::new(&dir)).unwrap();
    j.register_sink("out", true).unwrap();
    let pad = "e".repeat(900);
    for round in 0..1_000u64 {
        let keys: Vec<String> = (0..100)
            .map(|i| format!("default/w-{}", (round * 100 + i) % 10_000))
            .collect();
        j.append(Batch {
            stream: "widgets".to_owned(),
            events: keys
                .iter()
                .map(|k| {
                    serde_json::to_vec(&json!({"id": format!("{k}:{round}"), "pad": pad})).unwrap()
                })
                .collect(),
            index: keys
                .iter()
                .map(|k| IndexUpdate::Put {
                    key: k.clone(),
                    object: serde_json::to_vec(&json!({"k": k, "round": round, "pad": pad}))
                        .unwrap(),
                })
                .collect(),
            checkpoint: Some(round.to_string()),
            listed: false,
        })
        .unwrap();
        if round % retention_every == retention_every - 1 {
            let head = j.head();
            j.durable(head).await.unwrap();
            j.ack("out", head.min(99_000)).unwrap();
            j.apply_retention().unwrap();
        }
    }
    let retained = j.retained_events();
    j.close().await.unwrap();
    let out = compact(&dir, Duration::from_secs(30), &mut |_| {}).unwrap();
    let mib = |b: u64| b as f64 / 1024.0 / 1024.0;
    println!(
        "measure {name}: retained {retained} events; live {:.1} MiB; before {:.1} MiB ({} B/retained event); after {:.1} MiB ({} B/retained event); {:.2} s",
        mib(out.live_bytes),
        mib(out.bytes_before),
        out.bytes_before / retained,
        mib(out.bytes_after),
        out.bytes_after / retained,
        out.seconds
    );
}
