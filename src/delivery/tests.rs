//! The driver against a real journal and a scripted sink (a real peer cannot be told to fail the third
//! call exactly): ordering per key, retries, dead letters, pausing and recovery.

use std::collections::HashMap;
use std::sync::Mutex;

use herald_sink_core::event::ExtensionValue;
use herald_sink_core::sink::{ErrorContext, SinkError};

use super::*;
use crate::journal::{Batch, JournalConfig};

/// Answers from a script, keyed by event id and attempt; records what it took, in order.
#[derive(Default)]
struct Scripted {
    /// id → outcomes for its first attempts (then Ok).
    script: Mutex<HashMap<String, Vec<Outcome>>>,
    /// Fail every call while set.
    down: AtomicBool,
    taken: Mutex<Vec<String>>,
    calls: AtomicU64,
}

impl Sink for Scripted {
    const NAME: &'static str = "scripted";

    async fn healthcheck(&self) -> Result<(), SinkError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(SinkError::ConnectFailed {
                target: "scripted".into(),
                source: "receiver down".into(),
            });
        }
        Ok(())
    }

    async fn send(&self, batch: &[Envelope]) -> Vec<Outcome> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(1)).await;
        batch
            .iter()
            .map(|e| {
                if self.down.load(Ordering::SeqCst) {
                    return Outcome::retry(Reason::new("down", "receiver down"));
                }
                let next = self
                    .script
                    .lock()
                    .unwrap()
                    .get_mut(&e.event.id)
                    .and_then(|v| (!v.is_empty()).then(|| v.remove(0)));
                let o = next.unwrap_or(Outcome::Ok);
                if o.is_ok() {
                    let truncated = if e.event.extensions.contains_key("truncated") {
                        " (truncated)"
                    } else {
                        ""
                    };
                    self.taken
                        .lock()
                        .unwrap()
                        .push(format!("{}{truncated}", e.event.id));
                }
                o
            })
            .collect()
    }

    async fn send_dead_letters(&self, letters: &[Envelope], _: &[ErrorContext]) -> Vec<Outcome> {
        self.send(letters).await
    }
}

#[derive(Default)]
struct Graveyard(Mutex<Vec<DeadLetter>>);

impl DeadLetters for Graveyard {
    fn dead_letter(&self, letter: &DeadLetter) -> Result<(), String> {
        self.0.lock().unwrap().push(letter.clone());
        Ok(())
    }

    fn count(&self, _: &str) -> usize {
        self.0.lock().unwrap().len()
    }
}

fn event(id: &str, key: &str) -> Vec<u8> {
    CloudEvent::new(id, "k8s://c/g/p", "dev.herald.resource.updated")
        .extension("partitionkey", ExtensionValue::String(key.into()))
        .to_structured_json()
}

fn journal(dir: &std::path::Path) -> Journal {
    let mut cfg = JournalConfig::new(dir.join("journal"));
    cfg.flush_interval = Duration::from_millis(1);
    Journal::open(cfg).unwrap()
}

fn fast() -> Settings {
    Settings {
        concurrency: 4,
        batch_max: 8,
        min_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(20),
        ..Settings::default()
    }
}

async fn append(j: &Journal, events: Vec<Vec<u8>>) {
    let seqs = j
        .append(Batch {
            stream: "s".into(),
            events,
            index: vec![],
            checkpoint: None,
            listed: false,
        })
        .unwrap();
    j.durable(*seqs.last().unwrap()).await.unwrap();
}

async fn until(f: impl Fn() -> bool) {
    let started = std::time::Instant::now();
    while !f() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "condition not reached in time"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn retries_keep_per_key_order_and_the_cursor_never_skips() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    let sink = Arc::new(Scripted::default());
    // a1 fails twice; a2 must wait behind it; b flows meanwhile.
    sink.script.lock().unwrap().insert(
        "a1".into(),
        vec![
            Outcome::retry(Reason::new("x", "503")),
            Outcome::retry(Reason::new("x", "503")),
        ],
    );
    let stop = CancellationToken::new();
    let stats = Arc::new(Stats::default());
    let driver = tokio::spawn(run(
        "s".into(),
        sink.clone(),
        j.clone(),
        Arc::new(Router::default()),
        fast(),
        true,
        stop.clone(),
        stats.clone(),
        None,
    ));
    append(
        &j,
        vec![
            event("a1", "a"),
            event("b1", "b"),
            event("a2", "a"),
            event("b2", "b"),
        ],
    )
    .await;
    until(|| stats.delivered.load(Ordering::SeqCst) == 4).await;
    let taken = sink.taken.lock().unwrap().clone();
    let pos = |id: &str| taken.iter().position(|t| t == id).unwrap();
    assert!(pos("a1") < pos("a2"), "{taken:?}");
    assert!(pos("b1") < pos("b2"), "{taken:?}");
    assert!(
        pos("b1") < pos("a1"),
        "b was not held back by a's retries: {taken:?}"
    );
    assert_eq!(stats.retried.load(Ordering::SeqCst), 2);
    stop.cancel();
    driver.await.unwrap();
    assert_eq!(j.cursor("s").unwrap(), 4);
}

#[tokio::test]
async fn rejects_and_exhausted_budgets_become_dead_letters_and_the_key_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    let sink = Arc::new(Scripted::default());
    sink.script.lock().unwrap().insert(
        "bad".into(),
        vec![Outcome::reject(Reason::new("http_4xx", "400 Bad Request"))],
    );
    sink.script.lock().unwrap().insert(
        "slow".into(),
        vec![Outcome::retry(Reason::new("http_5xx", "503")); 10],
    );
    let grave = Arc::new(Graveyard::default());
    let stats = Arc::new(Stats::default());
    let stop = CancellationToken::new();
    let settings = Settings {
        max_attempts: Some(3),
        ..fast()
    };
    let driver = tokio::spawn(run(
        "s".into(),
        sink.clone(),
        j.clone(),
        Arc::new(Router::default()),
        settings,
        true,
        stop.clone(),
        stats.clone(),
        Some(grave.clone() as Arc<dyn DeadLetters>),
    ));
    append(
        &j,
        vec![
            event("bad", "k"),
            event("after-bad", "k"),
            event("slow", "m"),
            event("after-slow", "m"),
        ],
    )
    .await;
    until(|| {
        stats.delivered.load(Ordering::SeqCst) == 2
            && stats.dead_lettered.load(Ordering::SeqCst) == 2
    })
    .await;
    let letters = grave.0.lock().unwrap().clone();
    let bad = letters.iter().find(|l| l.seq == 1).unwrap();
    assert_eq!(
        (
            bad.error.class.as_str(),
            bad.error.code.as_str(),
            bad.error.attempts
        ),
        ("permanent", "http_4xx", 1)
    );
    let slow = letters.iter().find(|l| l.seq == 3).unwrap();
    assert_eq!(
        (
            slow.error.class.as_str(),
            slow.error.code.as_str(),
            slow.error.attempts
        ),
        ("retryable", "retries_exhausted", 3)
    );
    assert!(slow.error.message.contains("503"));
    assert_eq!(*sink.taken.lock().unwrap(), ["after-bad", "after-slow"]);
    stop.cancel();
    driver.await.unwrap();
}

#[tokio::test]
async fn a_sink_unreachable_at_start_probes_its_health_check_until_it_answers_then_delivers() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    let sink = Arc::new(Scripted::default());
    sink.down.store(true, Ordering::SeqCst);
    let stats = Arc::new(Stats::default());
    stats.pause("unreachable since start".into());
    let stop = CancellationToken::new();
    let driver = tokio::spawn(run(
        "s".into(),
        sink.clone(),
        j.clone(),
        Arc::new(Router::default()),
        Settings {
            start_paused: true,
            ..fast()
        },
        true,
        stop.clone(),
        stats.clone(),
        None,
    ));
    // Idle and unreachable: paused, with the health check's error as the reason.
    until(|| {
        stats
            .pause_reason()
            .is_some_and(|r| r.contains("connecting to scripted failed: receiver down"))
    })
    .await;
    assert_eq!(sink.calls.load(Ordering::SeqCst), 0, "no event to send yet");
    // The target answers: the health check resumes the sink with no event to probe with.
    sink.down.store(false, Ordering::SeqCst);
    until(|| !stats.paused.load(Ordering::SeqCst)).await;
    assert_eq!(stats.pause_reason(), None);
    append(&j, (0..5).map(|i| event(&format!("e{i}"), "k")).collect()).await;
    until(|| stats.delivered.load(Ordering::SeqCst) == 5).await;
    assert_eq!(*sink.taken.lock().unwrap(), ["e0", "e1", "e2", "e3", "e4"]);
    stop.cancel();
    driver.await.unwrap();
}

#[tokio::test]
async fn a_sink_unreachable_at_start_with_events_waiting_resumes_on_the_first_probe_that_passes() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    let sink = Arc::new(Scripted::default());
    sink.down.store(true, Ordering::SeqCst);
    let stats = Arc::new(Stats::default());
    let stop = CancellationToken::new();
    append(
        &j,
        (0..6)
            .map(|i| event(&format!("e{i}"), &format!("k{}", i % 2)))
            .collect(),
    )
    .await;
    let driver = tokio::spawn(run(
        "s".into(),
        sink.clone(),
        j.clone(),
        Arc::new(Router::default()),
        Settings {
            start_paused: true,
            max_attempts: Some(1),
            ..fast()
        },
        true,
        stop.clone(),
        stats.clone(),
        None,
    ));
    until(|| sink.calls.load(Ordering::SeqCst) >= 3).await;
    assert!(stats.paused.load(Ordering::SeqCst));
    let calls = sink.calls.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        sink.calls.load(Ordering::SeqCst) - calls < 15,
        "a sink paused at start is probed one event at a time, not hammered"
    );
    sink.down.store(false, Ordering::SeqCst);
    until(|| stats.delivered.load(Ordering::SeqCst) == 6).await;
    assert!(!stats.paused.load(Ordering::SeqCst));
    assert_eq!(
        stats.dead_lettered.load(Ordering::SeqCst),
        0,
        "probes of a sink paused at start use no attempts"
    );
    stop.cancel();
    driver.await.unwrap();
}

#[tokio::test]
async fn a_sink_failing_everything_is_paused_probed_and_catches_up_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    let sink = Arc::new(Scripted::default());
    sink.down.store(true, Ordering::SeqCst);
    let stats = Arc::new(Stats::default());
    let stop = CancellationToken::new();
    let settings = Settings {
        max_attempts: Some(2),
        ..fast()
    };
    let driver = tokio::spawn(run(
        "s".into(),
        sink.clone(),
        j.clone(),
        Arc::new(Router::default()),
        settings,
        true,
        stop.clone(),
        stats.clone(),
        None,
    ));
    let events: Vec<Vec<u8>> = (0..20)
        .map(|i| event(&format!("e{i}"), &format!("k{}", i % 3)))
        .collect();
    append(&j, events).await;
    until(|| stats.paused.load(Ordering::SeqCst)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        stats.dead_lettered.load(Ordering::SeqCst),
        0,
        "probes of a paused sink do not use up the budget"
    );
    let calls_while_paused = sink.calls.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        sink.calls.load(Ordering::SeqCst) - calls_while_paused < 15,
        "a paused sink is probed, not hammered"
    );
    sink.down.store(false, Ordering::SeqCst);
    until(|| stats.delivered.load(Ordering::SeqCst) == 20).await;
    assert!(!stats.paused.load(Ordering::SeqCst));
    let taken = sink.taken.lock().unwrap().clone();
    for k in 0..3 {
        let of_key: Vec<usize> = taken
            .iter()
            .filter_map(|id| id[1..].parse::<usize>().ok())
            .filter(|i| i % 3 == k)
            .collect();
        assert!(
            of_key.windows(2).all(|w| w[0] < w[1]),
            "order per key: {of_key:?}"
        );
    }
    stop.cancel();
    driver.await.unwrap();
}

#[tokio::test]
async fn one_event_the_sink_keeps_refusing_neither_pauses_the_sink_nor_holds_back_other_keys() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    let sink = Arc::new(Scripted::default());
    sink.script.lock().unwrap().insert(
        "poison".into(),
        vec![Outcome::retry(Reason::new("http_5xx", "500")); 1000],
    );
    let stats = Arc::new(Stats::default());
    let stop = CancellationToken::new();
    let settings = Settings {
        max_attempts: Some(3),
        ..fast()
    };
    let driver = tokio::spawn(run(
        "s".into(),
        sink.clone(),
        j.clone(),
        Arc::new(Router::default()),
        settings,
        true,
        stop.clone(),
        stats.clone(),
        None,
    ));
    append(&j, vec![event("poison", "p")]).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    append(
        &j,
        (0..5)
            .map(|i| event(&format!("ok{i}"), &format!("k{i}")))
            .collect(),
    )
    .await;
    until(|| {
        stats.delivered.load(Ordering::SeqCst) == 5
            && stats.dead_lettered.load(Ordering::SeqCst) == 1
    })
    .await;
    assert!(!stats.paused.load(Ordering::SeqCst));
    stop.cancel();
    driver.await.unwrap();
}

#[tokio::test]
async fn replays_queue_only_what_the_routes_send_the_sink_and_respect_since() {
    use crate::route::Route;
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    j.register_sink("s", true).unwrap();
    let ev = |id: &str, group: &str, time: &str| {
        CloudEvent::new(
            id,
            format!("k8s://c/{group}/things"),
            "dev.herald.resource.updated",
        )
        .time(time)
        .extension("k8sgroup", ExtensionValue::String(group.into()))
        .extension("k8skind", ExtensionValue::String("Thing".into()))
        .to_structured_json()
    };
    append(
        &j,
        vec![
            ev("mine-old", "a.io", "2026-01-01T00:00:00.000Z"),
            ev("other", "b.io", "2026-06-01T00:00:00.000Z"),
            ev("mine-new", "a.io", "2026-06-01T00:00:00.000Z"),
        ],
    )
    .await;
    let router = Router::new(vec![Route {
        resources: vec!["things.a.io".parse().unwrap()],
        ops: vec![],
        sinks: vec!["s".into()],
        when: None,
    }]);
    assert_eq!(
        queue_replays(&j, &router, "s", 1, None).unwrap(),
        [1, 3],
        "the other resource's event is not the sink's"
    );
    let since = "2026-03-01T00:00:00Z".parse().unwrap();
    assert_eq!(
        queue_replays(&j, &router, "s", 1, Some(since)).unwrap(),
        [3]
    );
    assert_eq!(queue_replays(&j, &router, "s", 2, None).unwrap(), [3]);
}

#[tokio::test]
async fn a_full_dead_letter_queue_holds_failing_events_until_it_is_drained() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    let sink = Arc::new(Scripted::default());
    for id in ["bad1", "bad2"] {
        sink.script.lock().unwrap().insert(
            id.into(),
            vec![Outcome::reject(Reason::new("http_4xx", "400")); 1000],
        );
    }
    let grave = Arc::new(Graveyard::default());
    let stats = Arc::new(Stats::default());
    let stop = CancellationToken::new();
    let settings = Settings {
        max_dead_letters: 1,
        dead_letter_recount: Duration::from_millis(20),
        ..fast()
    };
    let driver = tokio::spawn(run(
        "s".into(),
        sink.clone(),
        j.clone(),
        Arc::new(Router::default()),
        settings,
        true,
        stop.clone(),
        stats.clone(),
        Some(grave.clone() as Arc<dyn DeadLetters>),
    ));
    append(
        &j,
        vec![event("bad1", "a"), event("bad2", "b"), event("ok", "c")],
    )
    .await;
    until(|| {
        stats.dead_letter_queue_full.load(Ordering::SeqCst)
            && stats.retried.load(Ordering::SeqCst) >= 3
            && sink.taken.lock().unwrap().len() == 1
    })
    .await;
    // The second failing event is held, not dropped: one letter, and the cursor stops before it.
    assert_eq!(grave.0.lock().unwrap().len(), 1);
    assert_eq!(stats.dead_lettered.load(Ordering::SeqCst), 1);
    assert_eq!(j.cursor("s").unwrap(), 1);
    // An operator drains the queue: the held event is dead-lettered and the cursor moves on.
    grave.0.lock().unwrap().clear();
    until(|| stats.dead_lettered.load(Ordering::SeqCst) == 2 && j.cursor("s").unwrap() == 3).await;
    // That letter fills the one-letter queue again; once it is drained too, the next recount
    // reports room. (Asserting "not full" right after the second letter raced that recount.)
    grave.0.lock().unwrap().clear();
    until(|| !stats.dead_letter_queue_full.load(Ordering::SeqCst)).await;
    stop.cancel();
    driver.await.unwrap();
}

#[tokio::test]
async fn an_oversized_event_goes_as_its_reference_unless_its_resource_says_dead_letter() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    let sink = Arc::new(Scripted::default());
    let too_big = || {
        vec![Outcome::reject(Reason::new(
            herald_sink_core::sink::codes::OVERSIZE,
            "2 MB > 1 MB",
        ))]
    };
    sink.script.lock().unwrap().insert("big".into(), too_big());
    let grave = Arc::new(Graveyard::default());
    let stats = Arc::new(Stats::default());
    let stop = CancellationToken::new();
    let driver = tokio::spawn(run(
        "s".into(),
        sink.clone(),
        j.clone(),
        Arc::new(Router::default()),
        fast(),
        true,
        stop.clone(),
        stats.clone(),
        Some(grave.clone() as Arc<dyn DeadLetters>),
    ));
    append(&j, vec![event("big", "a"), event("small", "b")]).await;
    until(|| stats.delivered.load(Ordering::SeqCst) == 2).await;
    let mut taken = sink.taken.lock().unwrap().clone();
    taken.sort();
    assert_eq!(taken, ["big (truncated)", "small"]);
    assert_eq!(stats.truncated.load(Ordering::SeqCst), 1);
    assert!(grave.0.lock().unwrap().is_empty());
    stop.cancel();
    driver.await.unwrap();

    // `onOversize: deadLetter` for this source: the event becomes a dead letter instead.
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    sink.script.lock().unwrap().insert("big".into(), too_big());
    let stats = Arc::new(Stats::default());
    let stop = CancellationToken::new();
    let settings = Settings {
        oversize: OversizePolicy::dead_letter(vec![ResourcePattern::Named {
            group: "g".into(),
            name: "p".into(),
        }]),
        ..fast()
    };
    let driver = tokio::spawn(run(
        "s".into(),
        sink.clone(),
        j.clone(),
        Arc::new(Router::default()),
        settings,
        true,
        stop.clone(),
        stats.clone(),
        Some(grave.clone() as Arc<dyn DeadLetters>),
    ));
    append(&j, vec![event("big", "a")]).await;
    until(|| stats.dead_lettered.load(Ordering::SeqCst) == 1).await;
    assert_eq!(grave.0.lock().unwrap()[0].error.code, "oversize");
    stop.cancel();
    driver.await.unwrap();
}

/// Issue 14, item 4: names with control characters are delivered; an entry that does not read back
/// as a valid event (an empty subject, bytes that are not JSON) becomes a dead letter naming its
/// sequence number and why, with its bytes kept; nothing is skipped and the cursor passes it.
#[tokio::test]
async fn odd_names_are_delivered_and_unreadable_entries_become_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    let sink = Arc::new(Scripted::default());
    let grave = Arc::new(Graveyard::default());
    let stats = Arc::new(Stats::default());
    let stop = CancellationToken::new();
    let driver = tokio::spawn(run(
        "s".into(),
        sink.clone(),
        j.clone(),
        Arc::new(Router::default()),
        fast(),
        true,
        stop.clone(),
        stats.clone(),
        Some(grave.clone() as Arc<dyn DeadLetters>),
    ));
    let odd = |id: &str, name: &str| {
        CloudEvent::new(id, "k8s://c/g/p", "dev.herald.resource.created")
            .subject(format!("ns/{name}"))
            .extension("k8sname", name)
            .extension("partitionkey", format!("ns/{name}"))
            .to_structured_json()
    };
    let empty_subject = CloudEvent::new("u:5:created", "k8s://c/g/p", "t")
        .subject("")
        .to_structured_json();
    append(
        &j,
        vec![
            event("before", "a"),
            odd("newline", "a\nb"),
            odd("nul", "a\0b"),
            odd("del", "a\u{7f}b"),
            empty_subject.clone(),
            b"\xffnot json".to_vec(),
            event("after", "a"),
        ],
    )
    .await;
    until(|| {
        stats.delivered.load(Ordering::SeqCst) == 5
            && stats.dead_lettered.load(Ordering::SeqCst) == 2
    })
    .await;
    assert_eq!(
        *sink.taken.lock().unwrap(),
        ["before", "newline", "nul", "del", "after"]
    );
    let letters = grave.0.lock().unwrap().clone();
    let invalid = letters.iter().find(|l| l.seq == 5).unwrap();
    assert_eq!(invalid.error.code, "unreadable_entry");
    assert_eq!(invalid.error.class, "permanent");
    assert_eq!(
        invalid.error.message,
        "journal entry 5 (event \"u:5:created\") cannot be read back: decoded event is invalid: attribute `subject` is empty"
    );
    assert_eq!(invalid.event.id, "u:5:created");
    assert_eq!(
        invalid.event.data.as_ref().unwrap()["entry"]
            .as_str()
            .unwrap()
            .as_bytes(),
        empty_subject
    );
    let garbage = letters.iter().find(|l| l.seq == 6).unwrap();
    assert_eq!(garbage.event.id, "journal-entry-6");
    assert!(
        garbage
            .error
            .message
            .starts_with("journal entry 6 cannot be read back: event is not valid json"),
        "{}",
        garbage.error.message
    );
    // Every entry is finished, so the cursor reaches the head.
    until(|| j.cursor("s").unwrap_or(0) == 7).await;
    stop.cancel();
    driver.await.unwrap();
}

#[test]
fn a_paused_sink_with_an_empty_bucket_sleeps_until_its_next_token() {
    let t0 = Instant::now();
    let token = t0 + Duration::from_secs(1);
    // The probe is due, but a probe takes a token too: waking before it would spin.
    assert_eq!(wake_at(Some(t0), false, Some(t0), token), Some(token));
    assert_eq!(wake_at(Some(t0), true, None, token), Some(token));
    let later = token + Duration::from_secs(1);
    assert_eq!(wake_at(Some(later), false, Some(t0), token), Some(later));
    assert_eq!(wake_at(None, false, Some(t0), token), Some(token));
    assert_eq!(wake_at(None, true, Some(t0), token), None);
    assert_eq!(wake_at(None, false, None, token), None);
}

#[tokio::test]
async fn a_replay_is_not_starved_by_a_backlog_at_the_rate_limit() {
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    append(&j, vec![event("old", "k-old")]).await;
    // The sink starts after "old": it reaches the sink only as a replay.
    j.register_sink("s", false).unwrap();
    let backlog = 300;
    let events: Vec<Vec<u8>> = (0..backlog)
        .map(|i| event(&format!("e{i}"), &format!("k{i}")))
        .collect();
    append(&j, events).await;
    let sink = Arc::new(Scripted::default());
    let stats = Arc::new(Stats::default());
    let stop = CancellationToken::new();
    let settings = Settings {
        rate_limit: Some(RateLimit {
            per_second: 100.0,
            burst: 1,
        }),
        ..fast()
    };
    let router = Arc::new(Router::default());
    let driver = tokio::spawn(run(
        "s".into(),
        sink.clone(),
        j.clone(),
        router.clone(),
        settings,
        false,
        stop.clone(),
        stats.clone(),
        None,
    ));
    until(|| stats.delivered.load(Ordering::SeqCst) >= 10).await;
    assert_eq!(
        queue_replays(&j, &router, "s", 1, None).unwrap().first(),
        Some(&1)
    );
    until(|| stats.delivered.load(Ordering::SeqCst) >= backlog).await;
    let taken = sink.taken.lock().unwrap().clone();
    let at = taken.iter().position(|id| id == "old");
    assert!(
        at.is_some_and(|at| at < taken.len() - 100),
        "the replay waited behind the backlog: taken at {at:?} of {}",
        taken.len()
    );
    stop.cancel();
    driver.await.unwrap();
}

/// ADR 0027: a driver that falls behind the journal's tail in memory reads the store, and one
/// started after a reopen does too; either way every event arrives once, each key in order.
#[tokio::test]
async fn a_driver_behind_the_tail_in_memory_and_after_a_restart_delivers_everything_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        let mut cfg = JournalConfig::new(dir.path().join("journal"));
        cfg.flush_interval = Duration::from_millis(1);
        // About twenty of these events: the backlog below is ten times that.
        cfg.tail_bytes = 20 * (event("e-000", "k0").capacity() + 48);
        Journal::open(cfg).unwrap()
    };
    let ids = |range: std::ops::Range<usize>| -> Vec<String> {
        range.map(|i| format!("e-{i:03}")).collect()
    };
    let events = |range: std::ops::Range<usize>| -> Vec<Vec<u8>> {
        range
            .map(|i| event(&format!("e-{i:03}"), &format!("k{}", i % 7)))
            .collect()
    };
    let start = |j: &Journal, sink: &Arc<Scripted>, stop: &CancellationToken| {
        tokio::spawn(run(
            "s".into(),
            sink.clone(),
            j.clone(),
            Arc::new(Router::default()),
            // A small window: the reader stays a few pages ahead of it, far behind the head.
            Settings {
                window: 8,
                ..fast()
            },
            true,
            stop.clone(),
            Arc::new(Stats::default()),
            None,
        ))
    };
    // Per key, the order the events were appended in.
    let in_key_order = |taken: &[String]| {
        let mut by_key: HashMap<usize, Vec<usize>> = HashMap::new();
        for id in taken {
            let i: usize = id.trim_start_matches("e-").parse().unwrap();
            by_key.entry(i % 7).or_default().push(i);
        }
        by_key.values().all(|v| v.windows(2).all(|w| w[0] < w[1]))
    };

    let j = open();
    let sink = Arc::new(Scripted::default());
    let stop = CancellationToken::new();
    let driver = start(&j, &sink, &stop);
    // Two hundred at once: the driver starts behind the tail and catches up through the store.
    append(&j, events(0..200)).await;
    until(|| sink.taken.lock().unwrap().len() == 200).await;
    let (memory, store) = j.shared_reads();
    assert!(store > 0, "the driver read the store behind the tail");
    // At the head now: what comes next is handed over from memory.
    for i in 200..210 {
        append(&j, events(i..i + 1)).await;
        until(|| sink.taken.lock().unwrap().len() == i + 1).await;
    }
    assert!(
        j.shared_reads().0 > memory,
        "the driver at the head read memory"
    );
    stop.cancel();
    driver.await.unwrap();
    let mut taken = sink.taken.lock().unwrap().clone();
    assert!(in_key_order(&taken));
    taken.sort();
    assert_eq!(taken, ids(0..210), "each event once");
    until(|| j.cursor("s").unwrap_or(0) == 210).await;

    // Appended while no driver runs, then a restart: the reopened journal holds nothing in memory.
    append(&j, events(210..260)).await;
    j.clone().close().await.unwrap();
    drop(j);
    let j = open();
    let sink = Arc::new(Scripted::default());
    let stop = CancellationToken::new();
    let driver = start(&j, &sink, &stop);
    until(|| sink.taken.lock().unwrap().len() == 50).await;
    assert_eq!(j.shared_reads().0, 0, "nothing came from memory");
    stop.cancel();
    driver.await.unwrap();
    let taken = sink.taken.lock().unwrap().clone();
    assert!(in_key_order(&taken));
    let mut sorted = taken.clone();
    sorted.sort();
    assert_eq!(sorted, ids(210..260));
    j.close().await.unwrap();
}
