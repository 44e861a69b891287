//! The NATS sink against a real `nats-server` (Debian's package), started per test on a free
//! loopback port and stopped on drop. Without the binary a test fails when `CI` is set and is
//! skipped with a line on stderr otherwise.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::message::StreamMessage;
use herald_sink_core::CloudEvent;
use herald_sink_core::config::{DeliveryOptions, SecretRef, SinkConfig};
use herald_sink_core::sink::{Envelope, ErrorContext, Outcome, Sink, SinkError};
use herald_sink_nats::{
    NatsAuth, NatsConfig, NatsJetStream, NatsMode, NatsSink, NatsStorage, NatsStreamSpec, NatsTls,
};
use serde_json::json;

use crate::support::free_port;
use crate::support::nats::NatsServer;

/// Where Debian puts the server; `NATS_SERVER` overrides it.
/// A herald-shaped event for object `namespace/name` at resourceVersion `rv`.
fn event(namespace: &str, name: &str, rv: u64, op: &str) -> CloudEvent {
    CloudEvent::new(
        format!("uid-{namespace}-{name}:{rv}:{op}"),
        "k8s://test/example.com/widgets",
        format!("dev.herald.resource.{op}"),
    )
    .subject(format!("{namespace}/{name}"))
    .time("2026-01-02T03:04:05.678Z")
    .datacontenttype("application/json")
    .dataschema("urn:herald:change:v1")
    .extension("k8sgroup", "example.com")
    .extension("k8sversion", "v1")
    .extension("k8skind", "Widget")
    .extension("k8snamespace", namespace)
    .extension("k8sname", name)
    .extension("partitionkey", format!("{namespace}/{name}"))
    .extension("sequence", format!("{rv:020}"))
    .extension("resync", false)
    .data(json!({
        "op": op,
        "object": {"metadata": {"namespace": namespace, "name": name, "resourceVersion": rv.to_string()}},
        "resync": false,
    }))
}

fn envelopes(events: impl IntoIterator<Item = CloudEvent>) -> Vec<Envelope> {
    events
        .into_iter()
        .enumerate()
        .map(|(i, e)| Envelope::new(i as u64 + 1, e))
        .collect()
}

fn core_config(server: &NatsServer, subject: &str) -> NatsConfig {
    NatsConfig::new(vec![server.url()], subject)
}

fn jetstream_config(server: &NatsServer, stream: &str) -> NatsConfig {
    NatsConfig {
        jetstream: Some(
            NatsJetStream::new(stream)
                .create(NatsStreamSpec::new(vec!["herald.>".into()]).storage(NatsStorage::Memory)),
        ),
        ack_timeout: Duration::from_secs(2),
        ..core_config(server, "herald.{namespace}.{plural}")
    }
}

/// The sink `config` builds and connects, as herald does at start-up.
async fn connect(config: NatsConfig) -> Result<NatsSink, SinkError> {
    config
        .build("it", &DeliveryOptions::new(NatsConfig::DELIVERY))
        .await
}

/// A reference to a file in `dir` holding `secret`, as a mounted Kubernetes Secret.
fn secret_file(dir: &tempfile::TempDir, name: &str, secret: &str) -> SecretRef {
    let path = dir.path().join(name);
    std::fs::write(&path, secret).unwrap();
    SecretRef::File(path)
}

async fn client(server: &NatsServer) -> async_nats::Client {
    async_nats::connect(server.url()).await.unwrap()
}

/// Every message the stream holds, in stream order.
pub(crate) async fn stream_messages(server: &NatsServer, stream: &str) -> Vec<StreamMessage> {
    let context = async_nats::jetstream::new(client(server).await);
    let mut stream = context.get_stream(stream).await.unwrap();
    let state = stream.info().await.unwrap().state.clone();
    let mut messages = Vec::new();
    for sequence in state.first_sequence..=state.last_sequence {
        if let Ok(message) = stream.get_raw_message(sequence).await {
            messages.push(message);
        }
    }
    assert_eq!(messages.len() as u64, state.messages);
    messages
}

pub(crate) fn header<'a>(
    headers: Option<&'a async_nats::HeaderMap>,
    name: &str,
) -> Option<&'a str> {
    headers?.get(name).map(async_nats::HeaderValue::as_str)
}

/// `(name, value)` pairs of a header map, for sink-core's binary decoder.
fn header_pairs(headers: &async_nats::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .flat_map(|(name, values)| {
            values
                .iter()
                .map(move |value| (name.to_string(), value.as_str().to_owned()))
        })
        .collect()
}

fn codes(outcomes: &[Outcome]) -> Vec<Option<&'static str>> {
    outcomes
        .iter()
        .map(|o| o.reason().map(|r| r.code))
        .collect()
}

async fn next_message(subscriber: &mut async_nats::Subscriber) -> async_nats::Message {
    use futures::StreamExt as _;
    tokio::time::timeout(Duration::from_secs(5), subscriber.next())
        .await
        .expect("no message within 5 s")
        .expect("subscription closed")
}

#[tokio::test]
async fn structured_events_reach_core_subscribers() {
    let Some(server) = NatsServer::start(&[]) else {
        return;
    };
    let watcher = client(&server).await;
    let mut subscriber = watcher.subscribe("herald.>").await.unwrap();
    watcher.flush().await.unwrap();

    let sink = connect(core_config(&server, "herald.{namespace}.{kind}"))
        .await
        .unwrap();
    sink.healthcheck().await.unwrap();
    let events = [
        event("team-a", "w1", 10, "created"),
        event("team-b", "w2", 11, "updated"),
        event("team-a", "w3", 12, "deleted"),
    ];
    let outcomes = sink.send(&envelopes(events.clone())).await;
    assert_eq!(outcomes, vec![Outcome::Ok; 3]);

    for expected in &events {
        let message = next_message(&mut subscriber).await;
        let namespace = expected.extensions["k8snamespace"].to_string();
        assert_eq!(
            message.subject.as_str(),
            format!("herald.{namespace}.Widget")
        );
        assert_eq!(
            header(message.headers.as_ref(), "content-type"),
            Some("application/cloudevents+json; charset=UTF-8")
        );
        // Core NATS has nothing to de-duplicate with.
        assert_eq!(header(message.headers.as_ref(), "Nats-Msg-Id"), None);
        assert_eq!(
            &CloudEvent::from_structured_json(&message.payload).unwrap(),
            expected
        );
    }
}

#[tokio::test]
async fn binary_events_carry_ce_headers() {
    let Some(server) = NatsServer::start(&[]) else {
        return;
    };
    let watcher = client(&server).await;
    let mut subscriber = watcher.subscribe("herald.>").await.unwrap();
    watcher.flush().await.unwrap();

    let sink = connect(NatsConfig {
        mode: NatsMode::Binary,
        ..core_config(&server, "herald.{kind}")
    })
    .await
    .unwrap();
    let sent = event("team-a", "my widget", 42, "updated").subject("team-a/my widget");
    assert_eq!(sink.send(&envelopes([sent.clone()])).await, [Outcome::Ok]);

    let message = next_message(&mut subscriber).await;
    let headers = message.headers.as_ref();
    assert_eq!(message.subject.as_str(), "herald.Widget");
    // The id holds the object name, so its space is percent-encoded like every `ce-` value.
    assert_eq!(
        header(headers, "ce-id"),
        Some("uid-team-a-my%20widget:42:updated")
    );
    assert_eq!(header(headers, "ce-specversion"), Some("1.0"));
    assert_eq!(
        header(headers, "ce-type"),
        Some("dev.herald.resource.updated")
    );
    assert_eq!(
        header(headers, "ce-source"),
        Some("k8s://test/example.com/widgets")
    );
    assert_eq!(header(headers, "ce-subject"), Some("team-a/my%20widget"));
    assert_eq!(header(headers, "ce-k8sname"), Some("my%20widget"));
    assert_eq!(header(headers, "ce-resync"), Some("false"));
    // Issue 15, item 3: the NATS binding maps datacontenttype to `ce-datacontenttype` like every
    // other attribute; `content-type` is left to structured mode.
    assert_eq!(
        header(headers, "ce-datacontenttype"),
        Some("application/json")
    );
    assert_eq!(header(headers, "content-type"), None);
    assert_eq!(header(headers, "Nats-Msg-Id"), None);
    assert_eq!(message.payload.as_ref(), sent.data_bytes().as_slice());
    let decoded = herald_sink_core::encode::nats_binary_decode(
        header_pairs(headers.unwrap()),
        &message.payload,
    )
    .unwrap();
    assert_eq!(decoded.id, sent.id);
    assert_eq!(decoded.subject, sent.subject);
    assert_eq!(decoded.datacontenttype, sent.datacontenttype);
    assert_eq!(decoded.data, sent.data);
    assert_eq!(decoded.extensions["resync"].as_bool(), Some(false));
}

#[tokio::test]
async fn jetstream_publishes_carry_the_event_id_in_both_modes() {
    let Some(server) = NatsServer::start(&[]) else {
        return;
    };
    let structured = connect(jetstream_config(&server, "HERALD")).await.unwrap();
    let binary = connect(NatsConfig {
        mode: NatsMode::Binary,
        ..jetstream_config(&server, "HERALD")
    })
    .await
    .unwrap();
    let first = event("team-a", "w1", 1, "created");
    let second = event("team-a", "w1", 2, "updated");
    assert_eq!(
        structured.send(&envelopes([first.clone()])).await,
        [Outcome::Ok]
    );
    assert_eq!(
        binary.send(&envelopes([second.clone()])).await,
        [Outcome::Ok]
    );

    let messages = stream_messages(&server, "HERALD").await;
    assert_eq!(messages.len(), 2);
    let (a, b) = (&messages[0], &messages[1]);
    assert_eq!(a.subject.as_str(), "herald.team-a.widgets");
    assert_eq!(
        header(Some(&a.headers), "Nats-Msg-Id"),
        Some(first.id.as_str())
    );
    assert_eq!(
        header(Some(&a.headers), "content-type"),
        Some("application/cloudevents+json; charset=UTF-8")
    );
    assert_eq!(CloudEvent::from_structured_json(&a.payload).unwrap(), first);
    assert_eq!(
        header(Some(&b.headers), "Nats-Msg-Id"),
        Some(second.id.as_str())
    );
    assert_eq!(header(Some(&b.headers), "ce-id"), Some(second.id.as_str()));
    assert_eq!(
        header(Some(&b.headers), "ce-datacontenttype"),
        Some("application/json")
    );
    assert_eq!(header(Some(&b.headers), "content-type"), None);
    assert_eq!(b.payload.as_ref(), second.data_bytes().as_slice());
}

#[tokio::test]
async fn jetstream_stores_a_redelivered_event_once() {
    let Some(server) = NatsServer::start(&[]) else {
        return;
    };
    let sink = connect(jetstream_config(&server, "HERALD")).await.unwrap();
    let batch = envelopes([event("team-a", "w1", 7, "updated")]);
    assert_eq!(sink.send(&batch).await, [Outcome::Ok]);
    // The driver sends the same envelope again (its Ok was lost, say): the PubAck says
    // duplicate, which is still Ok.
    assert_eq!(sink.send(&batch).await, [Outcome::Ok]);
    let messages = stream_messages(&server, "HERALD").await;
    assert_eq!(messages.len(), 1);
    assert_eq!(
        header(Some(&messages[0].headers), "Nats-Msg-Id"),
        Some(batch[0].event.id.as_str())
    );
}

#[tokio::test]
async fn creates_a_missing_stream_from_its_spec() {
    let Some(server) = NatsServer::start(&[]) else {
        return;
    };
    let config = NatsConfig {
        jetstream: Some(
            NatsJetStream::new("EVENTS").create(
                NatsStreamSpec::new(vec!["events.>".into()])
                    .duplicate_window(Duration::from_secs(600))
                    .max_age(Duration::from_secs(3600)),
            ),
        ),
        ..core_config(&server, "events.{kind}")
    };
    let sink = connect(config.clone()).await.unwrap();
    sink.healthcheck().await.unwrap();
    let context = async_nats::jetstream::new(client(&server).await);
    let mut stream = context.get_stream("EVENTS").await.unwrap();
    let info = stream.info().await.unwrap();
    assert_eq!(info.config.subjects, ["events.>"]);
    assert_eq!(
        info.config.storage,
        async_nats::jetstream::stream::StorageType::File
    );
    assert_eq!(info.config.num_replicas, 1);
    assert_eq!(info.config.duplicate_window, Duration::from_secs(600));
    assert_eq!(info.config.max_age, Duration::from_secs(3600));
    assert_eq!(
        sink.send(&envelopes([event("a", "b", 1, "created")])).await,
        [Outcome::Ok]
    );
    // A second herald finds the stream and leaves it as it is.
    let again = connect(config).await.unwrap();
    again.healthcheck().await.unwrap();
    assert_eq!(stream_messages(&server, "EVENTS").await.len(), 1);
}

#[tokio::test]
async fn a_missing_stream_is_an_error_or_a_retry_never_a_rejection() {
    let Some(server) = NatsServer::start(&[]) else {
        return;
    };
    let without_create = NatsConfig {
        jetstream: Some(NatsJetStream::new("ABSENT")),
        ack_timeout: Duration::from_secs(2),
        ..core_config(&server, "herald.{kind}")
    };
    let err = connect(without_create).await.unwrap_err();
    assert!(
        matches!(&err, SinkError::DestinationMissing { what } if what.contains("ABSENT")),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "JetStream stream ABSENT (create it, or set jetstream.create so herald creates it) does not exist"
    );

    // The stream disappears after connect: publishes get no responders and are retried.
    let sink = connect(jetstream_config(&server, "HERALD")).await.unwrap();
    let context = async_nats::jetstream::new(client(&server).await);
    context.delete_stream("HERALD").await.unwrap();
    let outcomes = sink
        .send(&envelopes([
            event("a", "b", 1, "created"),
            event("a", "c", 2, "created"),
        ]))
        .await;
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Outcome::Retry { reason, .. } if reason.code == "no_responders")),
        "{outcomes:?}"
    );
    let err = sink.healthcheck().await.unwrap_err();
    assert!(
        matches!(err, SinkError::DestinationMissing { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn jetstream_needs_jetstream_enabled() {
    let Some(server) = NatsServer::start_without_jetstream() else {
        return;
    };
    let config = NatsConfig {
        jetstream: Some(NatsJetStream::new("HERALD")),
        ..core_config(&server, "herald.{kind}")
    };
    let err = connect(config).await.unwrap_err();
    assert!(
        matches!(&err, SinkError::Unavailable { reason } if reason.contains("JetStream is not enabled")),
        "{err:?}"
    );
}

/// The test plays the driver: per object one event in flight, Retry means "send it again after
/// a pause". The server is stopped while a batch is in flight and started again on the same
/// port and store.
#[tokio::test]
async fn every_event_arrives_once_and_in_order_across_a_server_restart() {
    let Some(mut server) = NatsServer::start(&[]) else {
        return;
    };
    let config = NatsConfig {
        jetstream: Some(
            NatsJetStream::new("HERALD").create(NatsStreamSpec::new(vec!["herald.>".into()])),
        ),
        ack_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(1),
        ..core_config(&server, "herald.{namespace}.{plural}.{name}")
    };
    let sink = connect(config).await.unwrap();

    const NAMESPACES: usize = 4;
    const NAMES: usize = 10;
    const EVENTS_PER_OBJECT: u64 = 12;
    // One subject per object, so each subject is one object's ordered history.
    let mut queues: Vec<VecDeque<Envelope>> = (0..NAMESPACES * NAMES)
        .map(|o| {
            let (namespace, name) = (format!("ns{}", o / NAMES), format!("w{}", o % NAMES));
            (1..=EVENTS_PER_OBJECT)
                .map(|rv| {
                    let op = if rv == 1 { "created" } else { "updated" };
                    Envelope::new(rv, event(&namespace, &name, rv, op))
                })
                .collect()
        })
        .collect();
    let expected: BTreeMap<String, Vec<String>> = queues
        .iter()
        .enumerate()
        .map(|(o, q)| {
            (
                format!("herald.ns{}.widgets.w{}", o / NAMES, o % NAMES),
                q.iter().map(|e| e.event.id.clone()).collect(),
            )
        })
        .collect();

    let deadline = Instant::now() + Duration::from_secs(120);
    let mut round = 0;
    let mut retried: BTreeSet<&'static str> = BTreeSet::new();
    let mut stopped_at = None;
    let mut restarted = false;
    loop {
        let batch: Vec<Envelope> = queues.iter().filter_map(|q| q.front().cloned()).collect();
        if batch.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not delivered in time; retried {retried:?}"
        );
        round += 1;
        let outcomes = if round == 4 {
            // Stop the server while this batch is on the wire.
            let stop = async {
                tokio::time::sleep(Duration::from_millis(1)).await;
                server.signal_stop();
            };
            let (outcomes, ()) = tokio::join!(sink.send(&batch), stop);
            stopped_at = Some(Instant::now());
            outcomes
        } else {
            sink.send(&batch).await
        };
        assert_eq!(outcomes.len(), batch.len());
        let mut any_retry = false;
        for (envelope, outcome) in batch.iter().zip(&outcomes) {
            match outcome {
                Outcome::Ok => {
                    let queue = queues
                        .iter_mut()
                        .find(|q| q.front().is_some_and(|e| e.event.id == envelope.event.id))
                        .unwrap();
                    queue.pop_front();
                }
                Outcome::Retry { reason, .. } => {
                    retried.insert(reason.code);
                    any_retry = true;
                }
                Outcome::Reject { reason } => panic!("rejected {}: {reason}", envelope.event.id),
            }
        }
        if let Some(at) = stopped_at
            && !restarted
            && at.elapsed() > Duration::from_millis(1500)
        {
            let err = sink.healthcheck().await.unwrap_err();
            assert!(
                matches!(err, SinkError::HealthcheckTimedOut { .. }),
                "{err:?}"
            );
            server.restart();
            restarted = true;
        }
        if any_retry {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    eprintln!("restart: {round} rounds, retried with {retried:?}");
    assert!(restarted, "the server was never restarted");
    assert!(
        retried.contains("disconnected") || retried.contains("timeout"),
        "the outage was not noticed: {retried:?}"
    );
    sink.healthcheck().await.unwrap();

    let mut stored: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for message in stream_messages(&server, "HERALD").await {
        let id = header(Some(&message.headers), "Nats-Msg-Id")
            .unwrap()
            .to_owned();
        stored
            .entry(message.subject.to_string())
            .or_default()
            .push(id);
    }
    assert_eq!(stored, expected, "each id once, in order per subject");
}

#[tokio::test]
async fn core_publishes_while_disconnected_are_retried() {
    let Some(mut server) = NatsServer::start(&[]) else {
        return;
    };
    let sink = connect(NatsConfig {
        connect_timeout: Duration::from_millis(500),
        ..core_config(&server, "herald.{kind}")
    })
    .await
    .unwrap();
    assert_eq!(
        sink.send(&envelopes([event("a", "b", 1, "created")])).await,
        [Outcome::Ok]
    );
    server.stop();
    // The client notices the closed socket at once; give it a moment to say so.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let outcomes = sink
        .send(&envelopes([
            event("a", "b", 2, "updated"),
            event("a", "c", 3, "created"),
        ]))
        .await;
    assert_eq!(
        codes(&outcomes),
        [Some("disconnected"), Some("disconnected")]
    );
    assert!(matches!(
        sink.healthcheck().await,
        Err(SinkError::HealthcheckTimedOut { .. })
    ));
}

#[tokio::test]
async fn an_oversized_event_is_rejected_and_the_rest_of_its_batch_delivered() {
    const MAX_PAYLOAD: usize = 4096;
    let Some(server) = NatsServer::start_with_config(&[], &format!("max_payload: {MAX_PAYLOAD}\n"))
    else {
        return;
    };
    let sink = connect(jetstream_config(&server, "HERALD")).await.unwrap();
    let big = event("a", "big", 2, "updated").data(json!({"blob": "x".repeat(MAX_PAYLOAD)}));
    let batch = envelopes([
        event("a", "small1", 1, "created"),
        big.clone(),
        event("a", "small2", 3, "created"),
    ]);
    let outcomes = sink.send(&batch).await;
    assert!(outcomes[0].is_ok() && outcomes[2].is_ok(), "{outcomes:?}");
    let Outcome::Reject { reason } = &outcomes[1] else {
        panic!("{outcomes:?}");
    };
    assert_eq!(reason.code, herald_sink_core::sink::codes::OVERSIZE);
    assert!(
        reason.detail.ends_with(&format!(
            "exceeds the server's max_payload of {MAX_PAYLOAD} bytes"
        )),
        "{}",
        reason.detail
    );

    // The limit counts headers and payload exactly as the server does: a message of exactly
    // max_payload bytes is accepted, one byte more is not.
    let wire_len = |event: &CloudEvent| {
        let headers = [
            (
                "content-type",
                "application/cloudevents+json; charset=UTF-8",
            ),
            ("Nats-Msg-Id", event.id.as_str()),
        ];
        let block: usize = headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
        10 + block + 2 + event.to_structured_json().len()
    };
    let sized = |id: &str, target: usize| {
        let base = event("a", id, 9, "updated").data(json!({"pad": ""}));
        let pad = target - wire_len(&base);
        base.data(json!({"pad": "p".repeat(pad)}))
    };
    let exact = sized("exact", MAX_PAYLOAD);
    let over = sized("over", MAX_PAYLOAD + 1);
    assert_eq!(wire_len(&exact), MAX_PAYLOAD);
    let outcomes = sink.send(&envelopes([exact, over])).await;
    assert_eq!(codes(&outcomes), [None, Some("oversize")]);

    let ids: Vec<String> = stream_messages(&server, "HERALD")
        .await
        .iter()
        .map(|m| header(Some(&m.headers), "Nats-Msg-Id").unwrap().to_owned())
        .collect();
    assert_eq!(
        ids,
        [
            batch[0].event.id.clone(),
            batch[2].event.id.clone(),
            "uid-a-exact:9:updated".to_owned()
        ]
    );
    // The oversized events never reached the server, so the connection is still fine.
    sink.healthcheck().await.unwrap();
}

#[tokio::test]
async fn awkward_names_become_single_subject_tokens() {
    let Some(server) = NatsServer::start(&[]) else {
        return;
    };
    let watcher = client(&server).await;
    let mut subscriber = watcher.subscribe("herald.*.*.*.*.*.*").await.unwrap();
    watcher.flush().await.unwrap();
    let sink = connect(core_config(
        &server,
        "herald.{group}.{kind}.{namespace}.{version}.{name}.{op}",
    ))
    .await
    .unwrap();

    let long_namespace = "s".repeat(63);
    let long_name = format!("{}.x", "n".repeat(250));
    let long_group = format!("{}.example.com", "g".repeat(200));
    let cases = [
        (
            event("team-a", "web.v2", 1, "created").extension("k8skind", "Weird*Kind>"),
            "herald.example_com.Weird_Kind_.team-a.v1.web_v2.created".to_owned(),
        ),
        (
            event(&long_namespace, &long_name, 2, "updated")
                .extension("k8sgroup", long_group.as_str())
                .extension("k8sversion", "v1 beta.1"),
            format!(
                "herald.{}_example_com.Widget.{long_namespace}.v1_beta_1.{}_x.updated",
                "g".repeat(200),
                "n".repeat(250)
            ),
        ),
        (
            // A cluster-scoped object of the core group: no k8snamespace, empty k8sgroup.
            {
                let mut e = event("x", "Node>1", 3, "deleted").extension("k8sgroup", "");
                e.extensions.remove("k8snamespace");
                e.extension("k8skind", "UPPER.CASE")
            },
            "herald.core.UPPER_CASE._cluster.v1.Node_1.deleted".to_owned(),
        ),
    ];
    let outcomes = sink
        .send(&envelopes(cases.iter().map(|(e, _)| e.clone())))
        .await;
    assert_eq!(outcomes, vec![Outcome::Ok; cases.len()]);
    for (sent, subject) in &cases {
        let message = next_message(&mut subscriber).await;
        assert_eq!(message.subject.as_str(), subject);
        assert_eq!(message.subject.split('.').count(), 7);
        assert_eq!(
            CloudEvent::from_structured_json(&message.payload)
                .unwrap()
                .id,
            sent.id
        );
    }
}

#[tokio::test]
async fn token_auth() {
    let Some(server) = NatsServer::start(&["--auth", "s3cret-token"]) else {
        return;
    };
    let secrets = tempfile::tempdir().unwrap();
    let config = core_config(&server, "herald.{kind}");
    let sink = connect(NatsConfig {
        auth: Some(NatsAuth::Token(secret_file(
            &secrets,
            "token",
            "s3cret-token",
        ))),
        ..config.clone()
    })
    .await
    .unwrap();
    assert_eq!(
        sink.send(&envelopes([event("a", "b", 1, "created")])).await,
        [Outcome::Ok]
    );
    let wrong_token = secret_file(&secrets, "wrong", "wrong");
    for wrong in [None, Some(NatsAuth::Token(wrong_token))] {
        let config = NatsConfig {
            auth: wrong,
            ..config.clone()
        };
        let err = connect(config).await.unwrap_err();
        assert!(
            matches!(err, SinkError::AuthenticationFailed { .. }),
            "{err:?}"
        );
        assert!(!format!("{err:?}").contains("s3cret-token"));
    }
}

#[tokio::test]
async fn user_password_auth() {
    let Some(server) = NatsServer::start(&["--user", "herald", "--pass", "pa55word"]) else {
        return;
    };
    let secrets = tempfile::tempdir().unwrap();
    let config = NatsConfig {
        jetstream: Some(
            NatsJetStream::new("HERALD").create(NatsStreamSpec::new(vec!["herald.>".into()])),
        ),
        ..core_config(&server, "herald.{kind}")
    };
    let sink = connect(NatsConfig {
        auth: Some(NatsAuth::UserPassword {
            user: "herald".into(),
            password: secret_file(&secrets, "password", "pa55word"),
        }),
        ..config.clone()
    })
    .await
    .unwrap();
    assert_eq!(
        sink.send(&envelopes([event("a", "b", 1, "created")])).await,
        [Outcome::Ok]
    );
    let err = connect(NatsConfig {
        auth: Some(NatsAuth::UserPassword {
            user: "herald".into(),
            password: secret_file(&secrets, "wrong", "wrong"),
        }),
        ..config
    })
    .await
    .unwrap_err();
    assert!(
        matches!(err, SinkError::AuthenticationFailed { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn dead_letters_carry_their_error_context() {
    let Some(server) = NatsServer::start(&[]) else {
        return;
    };
    let sink = connect(jetstream_config(&server, "DLQ")).await.unwrap();
    let letters = envelopes([event("a", "b", 1, "created"), event("a", "c", 2, "updated")]);
    let errors = [
        ErrorContext {
            sink: "webhook".into(),
            class: "permanent".into(),
            code: "http_4xx".into(),
            message: "HTTP 422 Unprocessable Entity: bad\nfield".into(),
            attempts: 1,
            first_failure: "2026-01-02T03:04:05.678Z".into(),
            last_failure: "2026-01-02T03:04:05.678Z".into(),
        },
        ErrorContext {
            sink: "kafka".into(),
            class: "retryable".into(),
            code: "retries_exhausted".into(),
            message: "broker down".into(),
            attempts: 12,
            first_failure: "2026-01-02T03:00:00.000Z".into(),
            last_failure: "2026-01-02T04:00:00.000Z".into(),
        },
    ];
    let outcomes = sink.send_dead_letters(&letters, &errors).await;
    assert_eq!(outcomes, [Outcome::Ok, Outcome::Ok]);

    let messages = stream_messages(&server, "DLQ").await;
    assert_eq!(messages.len(), 2);
    for ((message, letter), error) in messages.iter().zip(&letters).zip(&errors) {
        let headers = Some(&message.headers);
        assert_eq!(message.subject.as_str(), "herald.a.widgets");
        assert_eq!(
            header(headers, "Nats-Msg-Id"),
            Some(letter.event.id.as_str())
        );
        assert_eq!(
            header(headers, "herald-error-sink"),
            Some(error.sink.as_str())
        );
        assert_eq!(
            header(headers, "herald-error-class"),
            Some(error.class.as_str())
        );
        assert_eq!(
            header(headers, "herald-error-code"),
            Some(error.code.as_str())
        );
        assert_eq!(
            header(headers, "herald-error-attempts"),
            Some(error.attempts.to_string().as_str())
        );
        assert_eq!(
            header(headers, "herald-error-first-failure"),
            Some(error.first_failure.as_str())
        );
        assert_eq!(
            header(headers, "herald-error-last-failure"),
            Some(error.last_failure.as_str())
        );
        assert_eq!(
            CloudEvent::from_structured_json(&message.payload).unwrap(),
            *letter.event
        );
    }
    assert_eq!(
        header(Some(&messages[0].headers), "herald-error-message"),
        Some("HTTP%20422%20Unprocessable%20Entity:%20bad%0Afield")
    );
    assert_eq!(
        header(Some(&messages[1].headers), "herald-error-message"),
        Some("broker%20down")
    );
}

/// Batches far larger than the window, from concurrent `send` calls: acks are drained as the
/// sink goes, so nothing stalls and every event is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_concurrent_batches_flow_through_a_small_window() {
    let Some(server) = NatsServer::start(&[]) else {
        return;
    };
    let sink = Arc::new(
        connect(NatsConfig {
            max_in_flight: 64,
            ..jetstream_config(&server, "HERALD")
        })
        .await
        .unwrap(),
    );
    let started = Instant::now();
    let tasks: Vec<_> = (0..3)
        .map(|task| {
            let sink = Arc::clone(&sink);
            tokio::spawn(async move {
                let batch = envelopes(
                    (0..3000).map(|i| event(&format!("t{task}"), &format!("w{i}"), 1, "created")),
                );
                sink.send(&batch).await
            })
        })
        .collect();
    let mut oks = 0;
    for task in tasks {
        let outcomes = tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("a send stalled")
            .unwrap();
        assert_eq!(outcomes.len(), 3000);
        oks += outcomes.iter().filter(|o| o.is_ok()).count();
    }
    assert_eq!(oks, 9000, "after {:?}", started.elapsed());
    let context = async_nats::jetstream::new(client(&server).await);
    let mut stream = context.get_stream("HERALD").await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 9000);
}

#[tokio::test]
async fn an_unreachable_server_fails_to_connect() {
    // Nothing listens on a port just freed; only loopback is used.
    let config = NatsConfig {
        connect_timeout: Duration::from_millis(500),
        ..NatsConfig::new(
            vec![format!("nats://127.0.0.1:{}", free_port())],
            "herald.{kind}",
        )
    };
    let err = connect(config).await.unwrap_err();
    assert!(matches!(err, SinkError::ConnectFailed { .. }), "{err:?}");
    // A server that is down may come up: `herald run` starts the sink paused instead.
    assert!(NatsSink::is_transient(&err), "{err:?}");
}

/// A private CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Self {
        use rcgen::{
            BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
            KeyUsagePurpose,
        };
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, pem: String| std::fs::write(dir.path().join(name), pem).unwrap();

        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate().unwrap();
        write("ca.pem", ca_params.self_signed(&ca_key).unwrap().pem());
        let issuer = Issuer::new(ca_params, ca_key);

        let leaf = |name: &str, san: &str, usage: ExtendedKeyUsagePurpose| {
            let mut params = CertificateParams::new(vec![san.to_owned()]).unwrap();
            params.extended_key_usages = vec![usage];
            params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            params.use_authority_key_identifier_extension = true;
            let key = KeyPair::generate().unwrap();
            write(
                &format!("{name}.pem"),
                params.signed_by(&key, &issuer).unwrap().pem(),
            );
            write(&format!("{name}-key.pem"), key.serialize_pem());
        };
        leaf("server", "127.0.0.1", ExtendedKeyUsagePurpose::ServerAuth);
        leaf("client", "herald", ExtendedKeyUsagePurpose::ClientAuth);
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// nats-server's `tls` block: this server certificate, client certificates required.
    fn server_config(&self) -> String {
        format!(
            "tls {{\n  cert_file: {:?}\n  key_file: {:?}\n  ca_file: {:?}\n  verify: true\n  timeout: 2\n}}\n",
            self.path("server.pem"),
            self.path("server-key.pem"),
            self.path("ca.pem"),
        )
    }

    fn client_tls(&self) -> NatsTls {
        NatsTls {
            ca_file: Some(self.path("ca.pem")),
            client_cert_file: Some(self.path("client.pem")),
            client_key_file: Some(self.path("client-key.pem")),
            required: true,
        }
    }
}

#[tokio::test]
async fn tls_with_a_private_ca_and_a_client_certificate() {
    let pki = Pki::new();
    let Some(server) = NatsServer::start_with_config(&[], &pki.server_config()) else {
        return;
    };
    let url = format!("tls://127.0.0.1:{}", server.port);
    let config = NatsConfig {
        jetstream: Some(
            NatsJetStream::new("HERALD")
                .create(NatsStreamSpec::new(vec!["herald.>".into()]).storage(NatsStorage::Memory)),
        ),
        connect_timeout: Duration::from_secs(3),
        ..NatsConfig::new(vec![url], "herald.{namespace}.{plural}")
    };
    let sink = connect(NatsConfig {
        tls: Some(pki.client_tls()),
        ..config.clone()
    })
    .await
    .unwrap();
    sink.healthcheck().await.unwrap();
    assert_eq!(
        sink.send(&envelopes([event("a", "b", 1, "created")])).await,
        [Outcome::Ok]
    );

    // Without the client certificate the server refuses the handshake; without the private CA
    // herald refuses the server.
    let without_client_cert = NatsTls {
        client_cert_file: None,
        client_key_file: None,
        ..pki.client_tls()
    };
    let without_ca = NatsTls {
        ca_file: None,
        ..pki.client_tls()
    };
    for tls in [without_client_cert, without_ca] {
        let err = connect(NatsConfig {
            tls: Some(tls.clone()),
            ..config.clone()
        })
        .await
        .unwrap_err();
        assert!(
            matches!(err, SinkError::ConnectFailed { .. }),
            "{tls:?}: {err:?}"
        );
        // Waiting does not fix a handshake: `herald run` refuses to start rather than wait.
        assert!(!NatsSink::is_transient(&err), "{tls:?}: {err:?}");
    }
}

#[tokio::test]
async fn required_tls_refuses_a_plain_server() {
    let Some(server) = NatsServer::start(&[]) else {
        return;
    };
    let config = NatsConfig {
        tls: Some(NatsTls {
            required: true,
            ..NatsTls::default()
        }),
        connect_timeout: Duration::from_secs(2),
        ..core_config(&server, "herald.{kind}")
    };
    let err = connect(config).await.unwrap_err();
    assert!(matches!(err, SinkError::ConnectFailed { .. }), "{err:?}");
    assert!(!NatsSink::is_transient(&err), "{err:?}");
}

/// `template.headers` add headers rendered from the event (here the namespace, for a consumer that
/// routes on it); an event the template fails on is rejected (`render_failed`), never published.
#[tokio::test]
async fn header_templates_add_headers_and_a_failing_one_rejects_the_event() {
    let Some(server) = NatsServer::start(&[]) else {
        return;
    };
    let watcher = client(&server).await;
    let mut subscriber = watcher.subscribe("herald.>").await.unwrap();
    watcher.flush().await.unwrap();
    let mut config = core_config(&server, "herald.{kind}");
    config.template = Some(
        serde_json::from_value(json!({"headers": {
            "tenant": "{{ namespace }}",
            "x-version": "{{ object.metadata.resourceVersion }}"
        }}))
        .unwrap(),
    );
    let sink = connect(config).await.unwrap();
    let sent = event("team-a", "w1", 42, "updated");
    assert_eq!(sink.send(&envelopes([sent])).await, [Outcome::Ok]);
    let message = next_message(&mut subscriber).await;
    let headers = message.headers.as_ref();
    assert_eq!(header(headers, "tenant"), Some("team-a"));
    assert_eq!(header(headers, "x-version"), Some("42"));
    assert_eq!(
        header(headers, "content-type"),
        Some("application/cloudevents+json; charset=UTF-8")
    );

    let mut broken = event("team-a", "w2", 43, "updated");
    broken.data = Some(json!({"op": "updated", "resync": false}));
    let outcomes = sink.send(&envelopes([broken])).await;
    assert!(
        matches!(outcomes[0], Outcome::Reject { .. }),
        "{outcomes:?}"
    );
    let reason = outcomes[0].reason().unwrap();
    assert_eq!(reason.code, "render_failed");
    assert!(
        reason
            .detail
            .starts_with("template.headers.x-version: line 1: undefined value"),
        "{reason}"
    );
    // Nothing else was published.
    assert!(
        tokio::time::timeout(
            std::time::Duration::from_millis(300),
            futures::StreamExt::next(&mut subscriber)
        )
        .await
        .is_err()
    );
}
