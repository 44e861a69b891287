//! Dead letters through the CLI: list, show, replay (delivered by the next run), purge; and
//! `herald replay` from the journal.

use herald::delivery::{DeadLetter, DeadLetters};
use herald::journal::{Journal, JournalConfig};
use herald_sink_core::ErrorContext;
use herald_sink_core::event::CloudEvent;
use serde_json::{Value, json};

use crate::support::{
    Herald, Raw, Receiver, WIDGETS_RESOURCE, herald_config, sim, webhook_config, widget,
    widgets_crd,
};

fn cli(args: &[&str]) -> (Option<i32>, Value, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (
        out.status.code(),
        serde_json::from_str(&stdout).unwrap_or(Value::String(stdout)),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn dead_letters_are_listed_replayed_on_the_next_run_and_purged() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(&sim, dir.path(), WIDGETS_RESOURCE);
    let mut herald = Herald::start(dir.path(), &config);
    raw.post(
        "/apis/example.com/v1/namespaces/default/widgets",
        &widget("a", json!({}), json!({})),
    )
    .await;
    herald.wait_for(1).await;
    assert_eq!(herald.terminate().await, Some(0));

    // Two dead letters, as the delivery engine would have stored them.
    {
        let journal = Journal::open(JournalConfig::new(dir.path().join("journal"))).unwrap();
        for (seq, id, class) in [
            (101, "u-x:7:updated", "permanent"),
            (102, "u-y:8:updated", "retryable"),
        ] {
            let event = CloudEvent::new(
                id,
                "k8s://test/example.com/widgets",
                "dev.herald.resource.updated",
            )
            .extension("partitionkey", format!("default/{id}"))
            .data(json!({"op": "updated", "resync": false}));
            journal
                .dead_letter(&DeadLetter {
                    seq,
                    event,
                    error: ErrorContext {
                        sink: "out".into(),
                        attempts: 3,
                        first_failure: "2026-01-01T00:00:00.000Z".into(),
                        last_failure: "2026-01-01T00:01:00.000Z".into(),
                        class: class.into(),
                        code: if class == "permanent" {
                            "http_4xx".into()
                        } else {
                            "retries_exhausted".into()
                        },
                        message: "400 Bad Request".into(),
                    },
                })
                .unwrap();
        }
        futures::executor::block_on(journal.close()).unwrap();
    }
    let cfg = herald.config.to_str().unwrap().to_string();
    let (code, list, stderr) = cli(&["dlq", "list", "-c", &cfg, "--sink", "out", "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(list.as_array().unwrap().len(), 2);
    assert_eq!(list[0]["id"], "u-x:7:updated");
    assert_eq!(
        (list[0]["class"].as_str(), list[0]["code"].as_str()),
        (Some("permanent"), Some("http_4xx"))
    );
    let (_, show, _) = cli(&[
        "dlq", "show", "-c", &cfg, "--sink", "out", "--seq", "102", "--json",
    ]);
    assert_eq!(show[0]["event"]["id"], "u-y:8:updated");

    let (code, _, _) = cli(&[
        "dlq", "replay", "-c", &cfg, "--sink", "out", "--seq", "101", "--json",
    ]);
    assert_eq!(code, Some(0));
    let (_, purged, _) = cli(&["dlq", "purge", "-c", &cfg, "--sink", "out", "--json"]);
    assert_eq!(
        purged["purged"], 1,
        "102 purged; 101 left the queue when it was queued for replay"
    );

    herald.restart();
    let events = herald.wait_for(2).await;
    assert_eq!(
        events[1]["id"], "u-x:7:updated",
        "the replayed dead letter was delivered by the next run"
    );
    assert_eq!(herald.terminate().await, Some(0));

    // `herald replay` queues journaled events again.
    let (code, queued, stderr) = cli(&[
        "replay",
        "-c",
        &cfg,
        "--sink",
        "out",
        "--since",
        "2000-01-01T00:00:00Z",
        "--json",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let n = queued["seqs"].as_array().map_or(0, Vec::len);
    herald.restart();
    herald.wait_for(2 + n).await;
    let (code, _, _) = cli(&["replay", "-c", &cfg, "--sink", "out"]);
    assert_eq!(
        code,
        Some(herald::exit_code::USAGE),
        "--from or --since is required"
    );
}

/// Waits until `f` holds, for up to 20 s.
async fn until(what: &str, f: impl Fn() -> bool) {
    let started = std::time::Instant::now();
    while !f() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_running_herald_forwards_dead_letters_and_the_cli_works_through_its_admin_endpoint() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let hook = Receiver::start().await;
    let dlq = Receiver::start().await;
    let store = Receiver::start().await;
    hook.reject_subjects
        .lock()
        .unwrap()
        .push("default/bad".to_owned());
    std::fs::write(dir.path().join("token"), "s3cret\n").unwrap();
    // `hook` forwards its dead letters to `dlq`; `store` keeps its own in herald's queue. Routes
    // keep the dead-letter sink out of normal delivery.
    let config = webhook_config(
        &sim,
        dir.path(),
        &[
            ("hook", &hook.url, "    deadLetterSink: dlq\n"),
            ("dlq", &dlq.url, ""),
            ("store", &store.url, ""),
        ],
    ) + &format!(
        "  token: {{fromFile: {}}}\nroutes:\n  - sinks: [hook, store]\n",
        dir.path().join("token").display()
    );
    store
        .reject_subjects
        .lock()
        .unwrap()
        .push("default/bad".to_owned());
    let mut herald = Herald::start(dir.path(), &config);
    for name in ["good", "bad"] {
        raw.post(
            "/apis/example.com/v1/namespaces/default/widgets",
            &widget(name, json!({}), json!({})),
        )
        .await;
    }
    until("the dead letter forwarded to dlq", || {
        dlq.dead_letters.lock().unwrap().len() == 1
    })
    .await;
    let (id, errors) = dlq.dead_letters.lock().unwrap()[0].clone();
    assert!(id.ends_with(":created"), "{id}");
    assert_eq!(errors["herald-error-sink"], "hook");
    assert_eq!(errors["herald-error-class"], "permanent");
    assert!(
        errors["herald-error-code"].starts_with("http_"),
        "{errors:?}"
    );
    assert_eq!(errors["herald-error-attempts"], "1");
    assert!(errors.contains_key("herald-error-message"));
    assert_eq!(hook.taken_ids().len(), 1, "only `good` reached hook");
    assert!(
        dlq.taken_ids().iter().all(|i| *i == id),
        "dlq gets dead letters only"
    );

    // While herald runs, the CLI goes through the admin endpoint: `store` holds one dead letter.
    let cfg = herald.config.to_str().unwrap().to_string();
    let list = || cli(&["dlq", "list", "-c", &cfg, "--sink", "store", "--json"]);
    until("store's dead letter", || {
        list().1.as_array().is_some_and(|a| a.len() == 1)
    })
    .await;
    let (code, hook_list, stderr) = cli(&["dlq", "list", "-c", &cfg, "--sink", "hook", "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(hook_list, json!([]), "forwarded letters leave hook's queue");
    let (code, status, _) = cli(&["status", "-c", &cfg, "--json"]);
    assert_eq!(code, Some(0));
    let store_status = status["sinks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sink"] == "store")
        .unwrap()
        .clone();
    assert!(
        status["source"]
            .as_str()
            .unwrap()
            .starts_with("admin endpoint"),
        "{status}"
    );
    assert_eq!(store_status["deadLettered"], 1);

    // The receiver is fixed; replaying through the running herald delivers the letter.
    store.reject_subjects.lock().unwrap().clear();
    let (code, replayed, stderr) = cli(&["dlq", "replay", "-c", &cfg, "--sink", "store", "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(replayed["seqs"].as_array().map(Vec::len), Some(1));
    until("the replayed letter at store", || {
        store.taken_ids().len() == 2
    })
    .await;
    assert_eq!(list().1, json!([]));

    // A purge through the endpoint needs the token: a wrong one is refused with the reason.
    std::fs::write(dir.path().join("token"), "wrong\n").unwrap();
    let (code, _, stderr) = cli(&["dlq", "purge", "-c", &cfg, "--sink", "store"]);
    assert_eq!(code, Some(herald::exit_code::UNEXPECTED));
    assert!(stderr.contains("HTTP 401"), "{stderr}");
    assert_eq!(herald.terminate().await, Some(0));
}

/// Stores dead letters of sink `out` in the journal of a stopped herald, as the delivery engine
/// would have.
fn store_dead_letters(journal_dir: &std::path::Path, letters: &[(u64, &str)]) {
    let journal = Journal::open(JournalConfig::new(journal_dir.to_path_buf())).unwrap();
    for (seq, id) in letters {
        let event = CloudEvent::new(
            *id,
            "k8s://test/example.com/widgets",
            "dev.herald.resource.updated",
        )
        .extension("partitionkey", format!("default/{id}"))
        .data(json!({"op": "updated", "resync": false}));
        journal
            .dead_letter(&DeadLetter {
                seq: *seq,
                event,
                error: ErrorContext {
                    sink: "out".into(),
                    attempts: 3,
                    first_failure: "2026-01-01T00:00:00.000Z".into(),
                    last_failure: "2026-01-01T00:01:00.000Z".into(),
                    class: "permanent".into(),
                    code: "http_4xx".into(),
                    message: "400 Bad Request".into(),
                },
            })
            .unwrap();
    }
    futures::executor::block_on(journal.close()).unwrap();
}

/// `herald` with `args`, its stdout's reader gone before it writes: the exit code and stderr.
fn cli_into_closed_pipe(args: &[&str]) -> (Option<i32>, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A stopped herald (sink `out`) that journaled and delivered three events, with dead letter 101
/// queued for `out`: its directory and configuration file.
async fn stopped_herald() -> (tempfile::TempDir, String) {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(&sim, dir.path(), WIDGETS_RESOURCE);
    let mut herald = Herald::start(dir.path(), &config);
    for name in ["a", "b", "c"] {
        raw.post(
            "/apis/example.com/v1/namespaces/default/widgets",
            &widget(name, json!({}), json!({})),
        )
        .await;
    }
    herald.wait_for(3).await;
    assert_eq!(herald.terminate().await, Some(0));
    store_dead_letters(&dir.path().join("journal"), &[(101, "u-x:7:updated")]);
    let cfg = herald.config.to_str().unwrap().to_string();
    (dir, cfg)
}

#[tokio::test]
async fn against_a_stopped_herald_unknown_sinks_and_sequence_numbers_are_usage_errors() {
    let (_dir, cfg) = stopped_herald().await;

    for args in [
        vec!["dlq", "list"],
        vec!["dlq", "show"],
        vec!["dlq", "replay"],
        vec!["dlq", "purge"],
        vec!["replay", "--from", "1"],
    ] {
        let mut args = args.clone();
        args.extend(["-c", &cfg, "--sink", "nosuch"]);
        let (code, stdout, stderr) = cli(&args);
        assert_eq!(code, Some(herald::exit_code::USAGE), "{args:?}: {stderr}");
        assert!(
            stderr.contains(r#"no sink named "nosuch" (the configured sinks: out)"#),
            "{args:?}: {stderr}"
        );
        assert_eq!(stdout, json!(""), "{args:?}");
    }

    let (code, stdout, stderr) = cli(&[
        "dlq", "show", "-c", &cfg, "--sink", "out", "--seq", "999999",
    ]);
    assert_eq!(code, Some(herald::exit_code::USAGE), "{stderr}");
    assert!(
        stderr.contains(r#"sink "out" has no dead letter with sequence number 999999"#),
        "{stderr}"
    );
    assert_eq!(stdout, json!(""));
    // A purge naming one missing letter changes nothing.
    let (code, _, stderr) = cli(&[
        "dlq", "purge", "-c", &cfg, "--sink", "out", "--seq", "101", "--seq", "999999",
    ]);
    assert_eq!(code, Some(herald::exit_code::USAGE), "{stderr}");
    let (code, list, stderr) = cli(&["dlq", "list", "-c", &cfg, "--sink", "out", "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        list.as_array().map(Vec::len),
        Some(1),
        "101 is still queued"
    );
}

#[tokio::test]
async fn replay_since_takes_a_duration_and_summarises_what_it_queued() {
    let (_dir, cfg) = stopped_herald().await;
    // `--since` takes a duration back from now; the summary is one line, the list is in --json.
    let (code, queued, stderr) = cli(&[
        "replay", "-c", &cfg, "--sink", "out", "--since", "1h", "--json",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let seqs: Vec<u64> = queued["seqs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    assert_eq!(seqs.len(), 3, "{queued}");
    assert_eq!(queued["count"], 3);
    assert_eq!(queued["sink"], "out");
    assert_eq!(queued["first"], json!(seqs.iter().min()));
    assert_eq!(queued["last"], json!(seqs.iter().max()));
    let (code, text, stderr) = cli(&["replay", "-c", &cfg, "--sink", "out", "--since", "30m"]);
    assert_eq!(code, Some(0), "{stderr}");
    let text = text.as_str().unwrap().to_owned();
    assert_eq!(
        text,
        format!(
            "sink out: 3 event(s) queued for redelivery (sequence numbers {} to {})\n",
            seqs.iter().min().unwrap(),
            seqs.iter().max().unwrap()
        )
    );
    let (code, _, stderr) = cli(&[
        "replay",
        "-c",
        &cfg,
        "--sink",
        "out",
        "--since",
        "an hour ago",
    ]);
    assert_eq!(code, Some(herald::exit_code::USAGE), "{stderr}");
    assert!(stderr.contains("RFC 3339"), "{stderr}");
}

#[tokio::test]
async fn commands_whose_reader_goes_away_end_quietly() {
    let (_dir, cfg) = stopped_herald().await;
    // A reader that goes away (`| head`) ends each command quietly: no panic, exit 141.
    for args in [
        vec!["dlq", "list", "-c", &cfg, "--sink", "out"],
        vec!["dlq", "show", "-c", &cfg, "--sink", "out"],
        vec!["dlq", "show", "-c", &cfg, "--sink", "out", "--json"],
        vec!["status", "-c", &cfg],
        vec!["status", "-c", &cfg, "--json"],
        vec!["check", "-c", &cfg],
        vec!["journal", "verify", "-c", &cfg],
        vec!["replay", "-c", &cfg, "--sink", "out", "--from", "1"],
    ] {
        let (code, stderr) = cli_into_closed_pipe(&args);
        assert_eq!(
            code,
            Some(herald::exit_code::BROKEN_PIPE),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    // The replay queued before its report was lost: the journal was closed cleanly.
    let (code, _, stderr) = cli(&["journal", "verify", "-c", &cfg]);
    assert_eq!(code, Some(0), "{stderr}");
}

#[tokio::test]
async fn against_a_running_herald_unknown_sinks_are_usage_errors_and_dlq_reads_need_the_token() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = herald_config(&sim, dir.path(), WIDGETS_RESOURCE);
    let mut herald = Herald::start(dir.path(), &config);
    raw.post(
        "/apis/example.com/v1/namespaces/default/widgets",
        &widget("a", json!({}), json!({})),
    )
    .await;
    herald.wait_for(1).await;
    let cfg = herald.config.to_str().unwrap().to_string();

    // No admin.token: a DLQ read is refused, and the message says why reads need it.
    let (code, _, stderr) = cli(&["dlq", "list", "-c", &cfg, "--sink", "out"]);
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("HTTP 403"), "{stderr}");
    assert!(
        stderr.contains("reading dead letters needs the bearer token"),
        "{stderr}"
    );
    assert!(!stderr.contains("mutating"), "{stderr}");
    assert_eq!(herald.terminate().await, Some(0));

    std::fs::write(dir.path().join("token"), "s3cret\n").unwrap();
    std::fs::write(
        &herald.config,
        format!(
            "{config}  token: {{fromFile: {}}}\n",
            dir.path().join("token").display()
        ),
    )
    .unwrap();
    herald.restart();
    until("the admin endpoint", || {
        cli(&["status", "-c", &cfg, "--json"]).1["source"]
            .as_str()
            .is_some_and(|s| s.starts_with("admin endpoint"))
    })
    .await;
    let (code, list, stderr) = cli(&["dlq", "list", "-c", &cfg, "--sink", "out", "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(list, json!([]));
    for args in [
        vec!["dlq", "list"],
        vec!["dlq", "show"],
        vec!["dlq", "replay"],
        vec!["dlq", "purge"],
        vec!["replay", "--from", "1"],
        vec!["replay", "--since", "1h"],
    ] {
        let mut args = args.clone();
        args.extend(["-c", &cfg, "--sink", "nosuch"]);
        let (code, _, stderr) = cli(&args);
        assert_eq!(code, Some(herald::exit_code::USAGE), "{args:?}: {stderr}");
        assert!(
            stderr.contains(r#"no sink named "nosuch" (the configured sinks: out)"#),
            "{args:?}: {stderr}"
        );
    }
    let (code, _, stderr) = cli(&[
        "dlq", "show", "-c", &cfg, "--sink", "out", "--seq", "999999",
    ]);
    assert_eq!(code, Some(herald::exit_code::USAGE), "{stderr}");
    assert!(
        stderr.contains(r#"sink "out" has no dead letter with sequence number 999999"#),
        "{stderr}"
    );
    assert_eq!(herald.terminate().await, Some(0));
}
