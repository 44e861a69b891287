//! [`KafkaSink`] against librdkafka's in-process mock cluster: what arrives (value, key, headers,
//! order, counts) and how injected failures come back as outcomes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use herald_sink_core::encode::kafka_binary_decode;
use herald_sink_core::sink::codes;
use herald_sink_core::{CloudEvent, Envelope, ErrorContext, Outcome, Sink, Template};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde_json::json;

use crate::settings::Settings;
use crate::{KafkaMode, KafkaSink, classify};

const TOPIC: &str = "herald.widgets";
const PARTITIONS: i32 = 3;

/// One broker (id 1) with [`TOPIC`] created.
fn cluster() -> MockCluster<'static, DefaultProducerContext> {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, PARTITIONS, 1).unwrap();
    cluster
}

/// A sink for `cluster`, writing to `topic`, that gives up on a record after 2 s and reconnects
/// quickly (librdkafka's reconnect backoff would otherwise grow to 10 s during an outage).
fn config(cluster: &MockCluster<'_, DefaultProducerContext>, topic: &str) -> Settings {
    Settings {
        message_timeout: Duration::from_secs(2),
        ..Settings::new(cluster.bootstrap_servers(), Template::parse(topic).unwrap())
    }
    .property("reconnect.backoff.max.ms", "200")
}

/// An event as herald's normalizer builds it, for object `name` in namespace `default`.
fn event(name: &str, op: &str, resource_version: u64) -> CloudEvent {
    CloudEvent::new(
        format!("uid-{name}:{resource_version}:{op}"),
        "k8s://test/example.com/widgets",
        format!("dev.herald.resource.{op}"),
    )
    .subject(format!("default/{name}"))
    .time("2026-01-02T03:04:05.678Z")
    .datacontenttype("application/json")
    .dataschema("urn:herald:change:v1")
    .extension("k8sgroup", "example.com")
    .extension("k8sversion", "v1")
    .extension("k8skind", "Widget")
    .extension("k8snamespace", "default")
    .extension("k8sname", name)
    .extension("k8suid", format!("uid-{name}"))
    .extension("resourceversion", resource_version.to_string())
    .extension("sequence", format!("{resource_version:020}"))
    .extension("partitionkey", format!("default/{name}"))
    .extension("resync", false)
    .data(json!({
        "op": op,
        "object": {"metadata": {"name": name, "resourceVersion": resource_version.to_string()}},
        "resync": false,
    }))
}

fn envelopes(events: &[CloudEvent]) -> Vec<Envelope> {
    events
        .iter()
        .enumerate()
        .map(|(seq, event)| Envelope::new(seq as u64, event.clone()))
        .collect()
}

/// A record read back from the cluster.
#[derive(Debug, Clone)]
struct Consumed {
    partition: i32,
    key: Option<String>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Vec<u8>)>,
}

impl Consumed {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| std::str::from_utf8(v).unwrap())
    }

    fn id(&self) -> &str {
        self.header("ce_id").unwrap_or("<tombstone>")
    }
}

/// Reads `topic` from the beginning with a consumer of its own until `expected` records have come
/// and no more arrive for a moment (so extra records are seen too), or 20 s pass. Records come in
/// partition order, which is per-key order.
fn consume(bootstrap: &str, topic: &str, expected: usize) -> Vec<Consumed> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "herald-test")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
        .unwrap();
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for partition in metadata.topics()[0].partitions() {
        assignment
            .add_partition_offset(topic, partition.id(), Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut quiet_since = None;
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) => {
                quiet_since = None;
                records.push(Consumed {
                    partition: message.partition(),
                    key: message
                        .key()
                        .map(|k| String::from_utf8(k.to_vec()).unwrap()),
                    value: message.payload().map(<[u8]>::to_vec),
                    headers: message
                        .headers()
                        .map(|headers| {
                            headers
                                .iter()
                                .map(|h| (h.key.to_owned(), h.value.unwrap_or_default().to_vec()))
                                .collect()
                        })
                        .unwrap_or_default(),
                });
            }
            Some(Err(error)) => panic!("consuming {topic}: {error}"),
            None if records.len() >= expected => {
                let since = *quiet_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_millis(500) {
                    break;
                }
            }
            None => {}
        }
    }
    // Stable sort: within a partition, records stay in offset order.
    records.sort_by_key(|r| r.partition);
    records
}

/// Ids per key, in the order the topic holds them.
fn ids_by_key(records: &[Consumed]) -> BTreeMap<String, Vec<String>> {
    let mut by_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for record in records {
        by_key
            .entry(record.key.clone().unwrap_or_default())
            .or_default()
            .push(record.id().to_owned());
    }
    by_key
}

fn code(outcome: &Outcome) -> &'static str {
    outcome.reason().map_or("ok", |r| r.code)
}

fn assert_send<T: Send>(value: T) -> T {
    value
}

#[tokio::test]
async fn binary_records_carry_value_key_and_every_ce_header() {
    let cluster = cluster();
    let sink = KafkaSink::new(config(&cluster, TOPIC)).unwrap();
    sink.healthcheck().await.unwrap();
    let events = [
        event("a", "created", 10),
        event("b", "updated", 11),
        event("c", "deleted", 12),
    ];
    let outcomes = assert_send(sink.send(&envelopes(&events))).await;
    assert_eq!(outcomes, vec![Outcome::Ok; 3]);

    let records = consume(&cluster.bootstrap_servers(), TOPIC, 3);
    assert_eq!(records.len(), 3, "{records:?}");
    for event in &events {
        let record = records.iter().find(|r| r.id() == event.id).unwrap();
        assert_eq!(record.key.as_deref(), event.partition_key());
        assert_eq!(record.value.as_deref(), Some(event.data_bytes().as_slice()));
        // Exactly the binding's headers, in order: content-type and every ce_ attribute.
        assert_eq!(record.headers, event.kafka_binary_headers());
        assert_eq!(record.header("content-type"), Some("application/json"));
        let decoded = kafka_binary_decode(
            record
                .headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_slice())),
            record.value.as_deref().unwrap(),
        )
        .unwrap();
        assert_eq!(decoded.id, event.id);
        assert_eq!(decoded.source, event.source);
        assert_eq!(decoded.ty, event.ty);
        assert_eq!(decoded.subject, event.subject);
        assert_eq!(decoded.data, event.data);
        assert_eq!(decoded.extensions.len(), event.extensions.len());
    }
}

#[tokio::test]
async fn structured_records_carry_the_json_event() {
    let cluster = cluster();
    let sink = KafkaSink::new(Settings {
        mode: KafkaMode::Structured,
        ..config(&cluster, TOPIC)
    })
    .unwrap();
    let events = [event("a", "created", 10), event("b", "updated", 11)];
    assert_eq!(sink.send(&envelopes(&events)).await, vec![Outcome::Ok; 2]);

    let records = consume(&cluster.bootstrap_servers(), TOPIC, 2);
    assert_eq!(records.len(), 2);
    for record in &records {
        assert_eq!(
            record.headers,
            vec![(
                "content-type".to_owned(),
                b"application/cloudevents+json; charset=UTF-8".to_vec()
            )]
        );
        let decoded = CloudEvent::from_structured_json(record.value.as_deref().unwrap()).unwrap();
        let sent = events.iter().find(|e| e.id == decoded.id).unwrap();
        // Structured mode keeps every attribute and its type (resync stays a boolean).
        assert_eq!(&decoded, sent);
        assert_eq!(record.key.as_deref(), sent.partition_key());
    }
}

#[tokio::test]
async fn topics_follow_the_template() {
    let cluster = MockCluster::new(1).unwrap();
    let sink = KafkaSink::new(config(&cluster, "herald.{group}.{kind}")).unwrap();
    let widget = event("a", "created", 1);
    let gadget = event("b", "created", 2).extension("k8skind", "Gad get");
    assert_eq!(
        sink.send(&envelopes(&[widget.clone(), gadget.clone()]))
            .await,
        vec![Outcome::Ok; 2]
    );
    let bootstrap = cluster.bootstrap_servers();
    let widgets = consume(&bootstrap, "herald.example.com.Widget", 1);
    assert_eq!(widgets.len(), 1);
    assert_eq!(widgets[0].id(), widget.id);
    // The space in the kind is not legal in a topic name: sanitised to `_`.
    let gadgets = consume(&bootstrap, "herald.example.com.Gad_get", 1);
    assert_eq!(gadgets.len(), 1);
    assert_eq!(gadgets[0].id(), gadget.id);
}

#[tokio::test]
async fn tombstone_follows_a_deleted_event() {
    let cluster = cluster();
    let sink = KafkaSink::new(Settings {
        tombstones: true,
        ..config(&cluster, TOPIC)
    })
    .unwrap();
    let first = [event("a", "created", 1), event("b", "deleted", 2)];
    assert_eq!(sink.send(&envelopes(&first)).await, vec![Outcome::Ok; 2]);
    let second = [event("a", "deleted", 3)];
    assert_eq!(sink.send(&envelopes(&second)).await, vec![Outcome::Ok]);

    let records = consume(&cluster.bootstrap_servers(), TOPIC, 5);
    assert_eq!(records.len(), 5, "{records:?}");
    let by_key = ids_by_key(&records);
    assert_eq!(
        by_key["default/a"],
        ["uid-a:1:created", "uid-a:3:deleted", "<tombstone>"]
    );
    assert_eq!(by_key["default/b"], ["uid-b:2:deleted", "<tombstone>"]);
    for tombstone in records.iter().filter(|r| r.id() == "<tombstone>") {
        assert_eq!(tombstone.value, None);
        assert!(tombstone.headers.is_empty());
    }

    // Off by default: a deleted event is just the event.
    let plain = KafkaSink::new(config(&cluster, "plain")).unwrap();
    assert_eq!(
        plain.send(&envelopes(&[event("c", "deleted", 4)])).await,
        vec![Outcome::Ok]
    );
    let records = consume(&cluster.bootstrap_servers(), "plain", 1);
    assert_eq!(records.len(), 1);
    assert!(records[0].value.is_some());
}

#[tokio::test]
async fn events_sent_while_the_broker_is_down_are_retried_then_delivered_in_order() {
    let cluster = cluster();
    let sink = KafkaSink::new(config(&cluster, TOPIC)).unwrap();
    let before = [event("k1", "created", 1), event("k2", "created", 2)];
    assert_eq!(sink.send(&envelopes(&before)).await, vec![Outcome::Ok; 2]);

    cluster.broker_down(1).unwrap();
    let during = envelopes(&[
        event("k1", "updated", 3),
        event("k2", "updated", 4),
        event("k3", "created", 5),
    ]);
    let started = Instant::now();
    let outcomes = sink.send(&during).await;
    // Nothing is acknowledged while the only broker is down: each record comes back as a Retry
    // once message.timeout.ms runs out, not sooner and not never.
    assert!(
        outcomes.iter().all(|o| matches!(o, Outcome::Retry { .. })),
        "{outcomes:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    for outcome in &outcomes {
        assert!(
            [
                classify::MESSAGE_TIMED_OUT,
                classify::ALL_BROKERS_DOWN,
                classify::TRANSPORT
            ]
            .contains(&code(outcome)),
            "{outcome:?}"
        );
    }

    cluster.broker_up(1).unwrap();
    // What the driver does: send the retried events again until they are acknowledged.
    let mut left = during.clone();
    for _ in 0..10 {
        let outcomes = sink.send(&left).await;
        left = left
            .into_iter()
            .zip(outcomes)
            .filter(|(_, outcome)| !outcome.is_ok())
            .map(|(envelope, _)| envelope)
            .collect();
        if left.is_empty() {
            break;
        }
    }
    assert!(left.is_empty(), "still failing after the broker came back");
    let after = [event("k1", "updated", 6)];
    assert_eq!(sink.send(&envelopes(&after)).await, vec![Outcome::Ok]);

    let records = consume(&cluster.bootstrap_servers(), TOPIC, 6);
    // No loss, per-key order kept. A record whose report timed out may have been written anyway,
    // so duplicates (same id) are allowed; the first occurrences give the order.
    let mut by_key = ids_by_key(&records);
    for ids in by_key.values_mut() {
        let mut seen = std::collections::HashSet::new();
        ids.retain(|id| seen.insert(id.clone()));
    }
    assert_eq!(
        by_key["default/k1"],
        ["uid-k1:1:created", "uid-k1:3:updated", "uid-k1:6:updated"]
    );
    assert_eq!(
        by_key["default/k2"],
        ["uid-k2:2:created", "uid-k2:4:updated"]
    );
    assert_eq!(by_key["default/k3"], ["uid-k3:5:created"]);
}

#[tokio::test]
async fn retryable_produce_errors_are_retried_inside_librdkafka() {
    let cluster = cluster();
    let sink = KafkaSink::new(config(&cluster, TOPIC)).unwrap();
    // Warm up so the next produce request is the one that fails.
    assert_eq!(
        sink.send(&envelopes(&[event("a", "created", 1)])).await,
        vec![Outcome::Ok]
    );
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
        ],
    );
    let events = [event("a", "updated", 2), event("b", "created", 3)];
    assert_eq!(sink.send(&envelopes(&events)).await, vec![Outcome::Ok; 2]);

    // The idempotent producer retried without duplicating anything.
    let records = consume(&cluster.bootstrap_servers(), TOPIC, 3);
    let by_key = ids_by_key(&records);
    assert_eq!(by_key["default/a"], ["uid-a:1:created", "uid-a:2:updated"]);
    assert_eq!(by_key["default/b"], ["uid-b:3:created"]);
}

#[tokio::test]
async fn permanent_produce_errors_are_rejected() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("herald.Widget", 3, 1).unwrap();
    cluster.create_topic("herald.Other", 1, 1).unwrap();
    let sink = KafkaSink::new(config(&cluster, "herald.{kind}")).unwrap();
    assert_eq!(
        sink.send(&envelopes(&[event("a", "created", 1)])).await,
        vec![Outcome::Ok]
    );
    // Topic authorization last: librdkafka then marks the topic failed until its next metadata
    // refresh, so later records to it are refused without a request.
    for (seq, (error, expected)) in [
        (
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_RECORD,
            classify::INVALID_RECORD,
        ),
        (
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE,
            codes::OVERSIZE,
        ),
        (
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE,
            codes::OVERSIZE,
        ),
        (
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
            classify::TOPIC_AUTHORIZATION_FAILED,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        cluster.request_errors(RDKafkaApiKey::Produce, &[error]);
        let rejected = event("b", "updated", 10 + seq as u64);
        let outcomes = sink.send(&envelopes(&[rejected])).await;
        let [Outcome::Reject { reason }] = outcomes.as_slice() else {
            panic!("{error:?}: {outcomes:?}");
        };
        assert_eq!(reason.code, expected, "{error:?}");
        assert!(
            reason.detail.starts_with("topic herald.Widget: "),
            "{reason}"
        );
        if expected != classify::TOPIC_AUTHORIZATION_FAILED {
            // The producer (and its idempotence state) is still usable afterwards.
            let next = event("c", "updated", 20 + seq as u64);
            assert_eq!(sink.send(&envelopes(&[next])).await, vec![Outcome::Ok]);
        }
    }
    let records = consume(&cluster.bootstrap_servers(), "herald.Widget", 4);
    let ids: Vec<&str> = records.iter().map(Consumed::id).collect();
    assert_eq!(
        ids_by_key(&records),
        BTreeMap::from([
            ("default/a".to_owned(), vec!["uid-a:1:created".to_owned()]),
            (
                "default/c".to_owned(),
                ["uid-c:20:updated", "uid-c:21:updated", "uid-c:22:updated"]
                    .map(str::to_owned)
                    .to_vec()
            ),
        ]),
        "{ids:?}"
    );
    // The same producer still writes to other topics.
    let other = event("d", "created", 30).extension("k8skind", "Other");
    assert_eq!(sink.send(&envelopes(&[other])).await, vec![Outcome::Ok]);
}

#[tokio::test]
async fn oversized_events_are_rejected_while_the_rest_is_delivered() {
    let cluster = cluster();
    let sink =
        KafkaSink::new(config(&cluster, TOPIC).property("message.max.bytes", "10000")).unwrap();
    let big = event("big", "created", 2).data(json!({"op": "created", "blob": "x".repeat(20_000)}));
    let events = [event("a", "created", 1), big, event("c", "created", 3)];
    let outcomes = sink.send(&envelopes(&events)).await;
    assert!(outcomes[0].is_ok() && outcomes[2].is_ok(), "{outcomes:?}");
    let Outcome::Reject { reason } = &outcomes[1] else {
        panic!("{outcomes:?}");
    };
    assert_eq!(reason.code, codes::OVERSIZE);
    assert!(
        reason.detail.contains("exceeds message.max.bytes (10000)"),
        "{reason}"
    );

    let records = consume(&cluster.bootstrap_servers(), TOPIC, 2);
    let mut ids: Vec<&str> = records.iter().map(Consumed::id).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["uid-a:1:created", "uid-c:3:created"]);
}

#[tokio::test]
async fn dead_letters_carry_herald_error_headers() {
    let cluster = cluster();
    // Tombstones are on, but a dead-letter topic gets none.
    let sink = KafkaSink::new(Settings {
        tombstones: true,
        ..config(&cluster, TOPIC)
    })
    .unwrap();
    let letters = envelopes(&[event("a", "deleted", 7), event("b", "updated", 8)]);
    let errors = [
        ErrorContext {
            sink: "webhook".into(),
            class: "permanent".into(),
            code: "http_4xx".into(),
            message: "HTTP 404 Not Found: no such hook".into(),
            attempts: 1,
            first_failure: "2026-01-02T03:04:05.678Z".into(),
            last_failure: "2026-01-02T03:04:05.678Z".into(),
        },
        ErrorContext {
            sink: "nats".into(),
            class: "retryable".into(),
            code: "retries_exhausted".into(),
            message: "no responders".into(),
            attempts: 12,
            first_failure: "2026-01-02T03:04:05.678Z".into(),
            last_failure: "2026-01-02T04:04:05.678Z".into(),
        },
    ];
    assert_eq!(
        sink.send_dead_letters(&letters, &errors).await,
        vec![Outcome::Ok; 2]
    );

    let records = consume(&cluster.bootstrap_servers(), TOPIC, 2);
    assert_eq!(records.len(), 2, "{records:?}");
    for (letter, error) in letters.iter().zip(&errors) {
        let record = records.iter().find(|r| r.id() == letter.event.id).unwrap();
        assert_eq!(record.key.as_deref(), letter.event.partition_key());
        let mut expected = letter.event.kafka_binary_headers();
        expected.extend(error.kafka_headers());
        assert_eq!(record.headers, expected);
        assert_eq!(
            record.header("herald_error_code"),
            Some(error.code.as_str())
        );
        assert_eq!(
            record.header("herald_error_attempts"),
            Some(error.attempts.to_string().as_str())
        );
        assert_eq!(
            record.header("herald_error_last_failure"),
            Some(error.last_failure.as_str())
        );
    }
}

#[tokio::test]
async fn many_records_and_concurrent_sends_all_arrive() {
    let cluster = cluster();
    // A queue far smaller than a batch: enqueueing waits for room instead of failing.
    let sink =
        KafkaSink::new(config(&cluster, TOPIC).property("queue.buffering.max.messages", "10"))
            .unwrap();
    let batch = |start: u64| {
        envelopes(
            &(start..start + 200)
                .map(|i| event(&format!("o{i}"), "created", i))
                .collect::<Vec<_>>(),
        )
    };
    let (first, second, third) = (batch(0), batch(200), batch(400));
    let (a, b, c) = tokio::join!(sink.send(&first), sink.send(&second), sink.send(&third));
    for outcomes in [a, b, c] {
        assert_eq!(outcomes.len(), 200);
        assert!(outcomes.iter().all(Outcome::is_ok), "{outcomes:?}");
    }
    let records = consume(&cluster.bootstrap_servers(), TOPIC, 600);
    assert_eq!(records.len(), 600);
    let mut keys: Vec<_> = records.iter().filter_map(|r| r.key.clone()).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), 600);
}

#[tokio::test]
async fn unknown_topics_are_retried_with_their_own_code() {
    let cluster = MockCluster::new(1).unwrap();
    cluster
        .topic_error(
            "missing",
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART,
        )
        .unwrap();
    // No property needed: by default librdkafka calls a topic missing after half the message
    // timeout, so the records fail as unknown_topic rather than time out.
    let sink = KafkaSink::new(config(&cluster, "missing")).unwrap();
    let outcomes = sink.send(&envelopes(&[event("a", "created", 1)])).await;
    let [Outcome::Retry { reason, .. }] = outcomes.as_slice() else {
        panic!("{outcomes:?}");
    };
    assert_eq!(reason.code, classify::UNKNOWN_TOPIC, "{reason}");
}

#[tokio::test]
async fn a_fatal_producer_error_is_retried_with_a_new_producer() {
    let cluster = cluster();
    let sink = KafkaSink::new(config(&cluster, TOPIC)).unwrap();
    assert_eq!(
        sink.send(&envelopes(&[event("a", "created", 1)])).await,
        vec![Outcome::Ok]
    );
    // A sequence error on the head-of-line request: librdkafka can no longer vouch for order or
    // once-ness and makes the idempotent producer unusable for good.
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER],
    );
    let failed = envelopes(&[event("a", "updated", 2)]);
    let outcomes = sink.send(&failed).await;
    let [Outcome::Retry { reason, .. }] = outcomes.as_slice() else {
        panic!("{outcomes:?}");
    };
    assert_eq!(reason.code, classify::PRODUCER_FATAL, "{reason}");
    // The sink replaced its producer: the retry goes through.
    assert_eq!(sink.send(&failed).await, vec![Outcome::Ok]);
    let records = consume(&cluster.bootstrap_servers(), TOPIC, 2);
    assert_eq!(
        ids_by_key(&records)["default/a"],
        ["uid-a:1:created", "uid-a:2:updated"]
    );
}

/// A deposed leader drops its sends (ADR 0013): without [`Sink::abandon`] librdkafka would keep
/// the dropped sends' records queued and write them once the broker answers, up to
/// `message.timeout.ms` later, while another replica delivers. After it, nothing of them is
/// written, and the producer still delivers what comes next.
#[tokio::test]
async fn abandon_purges_the_records_of_dropped_sends() {
    let cluster = cluster();
    let sink = KafkaSink::new(Settings {
        message_timeout: Duration::from_secs(60),
        ..config(&cluster, TOPIC)
    })
    .unwrap();
    let first = [event("k0", "created", 1)];
    assert_eq!(sink.send(&envelopes(&first)).await, vec![Outcome::Ok]);

    cluster.broker_down(1).unwrap();
    let dropped = envelopes(&[event("k1", "updated", 2), event("k2", "updated", 3)]);
    assert!(
        tokio::time::timeout(Duration::from_millis(500), sink.send(&dropped))
            .await
            .is_err(),
        "nothing is acknowledged while the broker is down"
    );
    sink.abandon().await;
    cluster.broker_up(1).unwrap();

    let after = [event("k3", "created", 4)];
    assert_eq!(sink.send(&envelopes(&after)).await, vec![Outcome::Ok]);
    let records = consume(&cluster.bootstrap_servers(), TOPIC, 2);
    let mut ids: Vec<&str> = records.iter().map(Consumed::id).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["uid-k0:1:created", "uid-k3:4:created"]);
}
