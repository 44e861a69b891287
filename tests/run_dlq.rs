//! Dead letters through the CLI: list, show, replay (delivered by the next run), purge; and
//! `herald replay` from the journal.

use herald::delivery::{DeadLetter, DeadLetters};
use herald::journal::{Journal, JournalConfig};
use herald_sink_core::event::CloudEvent;
use serde_json::{Value, json};

use crate::support::{Herald, Raw, WIDGETS_RESOURCE, herald_config, sim, widget, widgets_crd};

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
                    event: event.to_structured_json(),
                    sink: "out".into(),
                    attempts: 3,
                    first_failure: "2026-01-01T00:00:00.000Z".into(),
                    last_failure: "2026-01-01T00:01:00.000Z".into(),
                    class,
                    code: if class == "permanent" {
                        "http_4xx".into()
                    } else {
                        "retries_exhausted".into()
                    },
                    error: "400 Bad Request".into(),
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
