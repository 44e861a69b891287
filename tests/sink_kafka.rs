//! herald's Kafka sink against a real Kafka-protocol broker: `tansu` started on a free loopback
//! port, or the broker named by `HERALD_TEST_KAFKA` (`host:port`, e.g. a real Apache Kafka).
//!
//! Without the `tansu` binary (on `PATH` or in `~/.cargo/bin`) the test prints a skip line, unless
//! `CI` is set: then it fails, since no test may silently skip in CI (DECISIONS.md).
//!

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use herald_sink_core::config::{DeliveryOptions, SinkConfig};
use herald_sink_core::{CloudEvent, Envelope, Outcome, Sink};
use herald_sink_kafka::{KafkaConfig, KafkaSink};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use serde_json::json;

use crate::support::kafka::{Broker, create_topic};

/// The sink `config` builds, as herald builds it at start-up.
async fn build(config: &KafkaConfig) -> KafkaSink {
    config
        .build("it", &DeliveryOptions::new(KafkaConfig::DELIVERY))
        .await
        .expect("building the sink")
}

/// An event as herald's normalizer builds it.
fn event(name: &str, op: &str, resource_version: u64) -> CloudEvent {
    CloudEvent::new(
        format!("uid-{name}:{resource_version}:{op}"),
        "k8s://it/example.com/widgets",
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
        "object": {
            "metadata": {"name": name, "namespace": "default", "resourceVersion": resource_version.to_string()},
            "spec": {"replicas": resource_version % 7},
        },
        "resync": false,
    }))
}

/// One consumed record.
#[derive(Debug)]
pub(crate) struct Consumed {
    pub(crate) key: Option<String>,
    pub(crate) value: Option<Vec<u8>>,
    pub(crate) headers: Vec<(String, Vec<u8>)>,
}

/// Reads `topic` as consumer group `group` until `expected` records arrived and no more come for
/// a moment (so duplicates would show), or 60 s pass. Records come in partition order, which is
/// per-key order.
pub(crate) fn consume(bootstrap: &str, group: &str, topic: &str, expected: usize) -> Vec<Consumed> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .expect("building the consumer");
    consumer.subscribe(&[topic]).expect("subscribing");
    let mut by_partition: BTreeMap<i32, Vec<(i64, Consumed)>> = BTreeMap::new();
    let mut count = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut quiet_since: Option<Instant> = None;
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => {
                quiet_since = None;
                count += 1;
                let headers = message
                    .headers()
                    .map(|headers| {
                        headers
                            .iter()
                            .map(|h| (h.key.to_owned(), h.value.unwrap_or_default().to_vec()))
                            .collect()
                    })
                    .unwrap_or_default();
                by_partition.entry(message.partition()).or_default().push((
                    message.offset(),
                    Consumed {
                        key: message
                            .key()
                            .map(|k| String::from_utf8_lossy(k).into_owned()),
                        value: message.payload().map(<[u8]>::to_vec),
                        headers,
                    },
                ));
            }
            Some(Err(error)) => panic!("consuming {topic}: {error}"),
            // Past the expected count, wait a second more so extra records would show.
            None if count >= expected
                && quiet_since.get_or_insert_with(Instant::now).elapsed()
                    > Duration::from_secs(1) =>
            {
                break;
            }
            None => {}
        }
    }
    by_partition
        .into_values()
        .flat_map(|mut records| {
            records.sort_by_key(|(offset, _)| *offset);
            records.into_iter().map(|(_, record)| record)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_updates_and_deletes_arrive_with_key_headers_and_per_key_order() {
    let Some(broker) = Broker::start() else {
        return;
    };
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let prefix = format!("herald-it-{}-{nonce}", std::process::id());
    let topic = format!("{prefix}.Widget");
    create_topic(&broker.bootstrap, &topic, 3).await;

    let config = KafkaConfig {
        tombstones: true,
        message_timeout: Duration::from_secs(20),
        ..KafkaConfig::new(vec![broker.bootstrap.clone()], format!("{prefix}.{{kind}}"))
    };
    let sink = build(&config).await;
    sink.healthcheck()
        .await
        .unwrap_or_else(|error| panic!("healthcheck: {error:?}; {}", broker.log_tail()));

    // Five objects, each created, updated three times and deleted. Batches hold one event per
    // key, like the driver's: batch i carries step i of every object.
    let objects: Vec<String> = (0..5).map(|i| format!("w{i}")).collect();
    let ops = ["created", "updated", "updated", "updated", "deleted"];
    let mut expected: BTreeMap<String, Vec<CloudEvent>> = BTreeMap::new();
    let mut seq = 0;
    for (step, op) in ops.iter().enumerate() {
        let batch: Vec<Envelope> = objects
            .iter()
            .enumerate()
            .map(|(i, name)| {
                seq += 1;
                let resource_version = 1000 + (step * objects.len() + i) as u64;
                let event = event(name, op, resource_version);
                expected
                    .entry(format!("default/{name}"))
                    .or_default()
                    .push(event.clone());
                Envelope::new(seq, event)
            })
            .collect();
        let outcomes = sink.send(&batch).await;
        assert_eq!(
            outcomes,
            vec![Outcome::Ok; batch.len()],
            "step {step}; {}",
            broker.log_tail()
        );
    }

    // Every event, plus one tombstone per deleted object.
    let total = objects.len() * ops.len() + objects.len();
    let records = consume(
        &broker.bootstrap,
        &format!("{prefix}-reader"),
        &topic,
        total,
    );
    assert_eq!(records.len(), total, "{records:#?}");

    let mut by_key: BTreeMap<String, Vec<&Consumed>> = BTreeMap::new();
    for record in &records {
        let key = record.key.clone().expect("every record has a key");
        by_key.entry(key).or_default().push(record);
    }
    assert_eq!(
        by_key.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (key, events) in &expected {
        let got = &by_key[key];
        assert_eq!(got.len(), events.len() + 1, "{key}: {got:#?}");
        // Same events, same order (per-key order), each with its value and every ce_ header.
        for (record, event) in got.iter().zip(events) {
            assert_eq!(record.key.as_deref(), event.partition_key());
            assert_eq!(
                record.value.as_deref(),
                Some(event.data_bytes().as_slice()),
                "{key}: value of {}",
                event.id
            );
            assert_eq!(
                record.headers,
                event.kafka_binary_headers(),
                "{key}: headers of {}",
                event.id
            );
            let decoded = herald_sink_core::encode::kafka_binary_decode(
                record
                    .headers
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.as_slice())),
                record.value.as_deref().unwrap_or_default(),
            )
            .expect("decoding the record as a binary-mode CloudEvent");
            assert_eq!(decoded.id, event.id);
            assert_eq!(decoded.data, event.data);
        }
        // The delete is followed by its tombstone: null value, no headers.
        let tombstone = got.last().expect("records for the key");
        assert_eq!(tombstone.value, None, "{key}: tombstone value");
        assert!(tombstone.headers.is_empty(), "{key}: tombstone headers");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_topic_is_an_unknown_topic_retry() {
    let Some(broker) = Broker::start() else {
        return;
    };
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let topic = format!("herald-it-missing-{}-{nonce}", std::process::id());
    let config = KafkaConfig {
        message_timeout: Duration::from_secs(4),
        ..KafkaConfig::new(vec![broker.bootstrap.clone()], topic)
    };
    let sink = build(&config).await;
    let outcomes = sink
        .send(&[Envelope::new(1, event("m", "created", 1))])
        .await;
    match outcomes.as_slice() {
        // tansu creates no topic on first use: the record is retried with the alerting code.
        [Outcome::Retry { reason, .. }] => assert_eq!(reason.code, "unknown_topic", "{reason}"),
        // A broker with auto.create.topics.enable (Apache Kafka's default) creates it.
        [Outcome::Ok] if broker.child.is_none() => {}
        other => panic!("{other:?}; {}", broker.log_tail()),
    }
}

/// `template.key` partitions by namespace: every object's events land on one partition, in the
/// order sent; `template.headers` add headers; an event the template fails on is rejected
/// (`render_failed`), never produced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_template_partitions_by_namespace_and_header_templates_add_headers() {
    let Some(broker) = Broker::start() else {
        return;
    };
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let topic = format!("herald-it-{}-{nonce}-keyed", std::process::id());
    create_topic(&broker.bootstrap, &topic, 3).await;
    let config: KafkaConfig = serde_json::from_value(json!({
        "brokers": [broker.bootstrap],
        "topic": topic,
        "messageTimeout": "20s",
        "template": {
            "key": "{{ namespace }}",
            "headers": {"x-kind": "{{ kind }}", "x-replicas": "{{ object.spec.replicas }}"}
        }
    }))
    .unwrap();
    let sink = build(&config).await;
    let mut sent = Vec::new();
    let mut seq = 0;
    for step in 0..3u64 {
        let batch: Vec<Envelope> = ["w0", "w1", "w2"]
            .iter()
            .map(|name| {
                seq += 1;
                let event = event(
                    name,
                    if step == 0 { "created" } else { "updated" },
                    2000 + seq,
                );
                sent.push(event.id.clone());
                Envelope::new(seq, event)
            })
            .collect();
        // One key for all: the driver would send them one at a time; so does this test.
        for envelope in batch {
            assert_eq!(
                sink.send(std::slice::from_ref(&envelope)).await,
                [Outcome::Ok],
                "{}",
                broker.log_tail()
            );
        }
    }
    let mut broken = event("w9", "updated", 3000);
    broken.data = Some(json!({"op": "updated", "resync": false}));
    let outcomes = sink.send(&[Envelope::new(99, broken)]).await;
    let reason = outcomes[0].reason().expect("a reason");
    assert!(
        matches!(outcomes[0], Outcome::Reject { .. }),
        "{outcomes:?}"
    );
    assert_eq!(reason.code, "render_failed");
    assert!(
        reason
            .detail
            .starts_with("template.headers.x-replicas: line 1: undefined value"),
        "{reason}"
    );

    let records = consume(
        &broker.bootstrap,
        &format!("{topic}-reader"),
        &topic,
        sent.len(),
    );
    assert_eq!(records.len(), sent.len(), "{records:#?}");
    let ids: Vec<String> = records
        .iter()
        .map(|r| {
            let id = r.headers.iter().find(|(n, _)| n == "ce_id").unwrap();
            String::from_utf8(id.1.clone()).unwrap()
        })
        .collect();
    assert_eq!(ids, sent, "one key, one partition: the order sent");
    for record in &records {
        assert_eq!(record.key.as_deref(), Some("default"));
        let header = |name: &str| {
            record
                .headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| String::from_utf8(v.clone()).unwrap())
        };
        assert_eq!(header("x-kind").as_deref(), Some("Widget"));
        assert!(header("x-replicas").is_some_and(|r| r.parse::<u64>().is_ok()));
    }
}
