//! herald into Kafka with the durable journal: events/s from simulator changes to delivery reports
//! (herald's own `delivered` counter), and in the same run the ceiling — a bare rdkafka
//! `FutureProducer` with herald's producer settings sending as many records of the same key, value
//! and headers (one of herald's records, read back from the topic) with as many in flight as
//! herald allows (`concurrency` × `batchMaxEvents`). Printed, not asserted; only that both topics
//! hold every record is checked (by consuming them, after the clock).
//!
//! The broker is a `tansu` child on a free loopback port (in-memory storage), or the broker named
//! by `HERALD_TEST_KAFKA`. `HERALD_BENCH_CHANGES` (default 50,000) and `HERALD_BENCH_OBJECTS`
//! (default 1,000) size it.

// A benchmark binary: a failed setup step should stop it loudly, so expect() is the right tool.
#![allow(clippy::expect_used)]

#[path = "support/kafka.rs"]
mod kafka;
#[path = "../sim/benches/support/mod.rs"]
mod support;
#[path = "support/workload.rs"]
mod workload;

use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use kafka::Broker;
use rdkafka::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use support::cpu_seconds;
use workload::{Ceiling, env};

const PARTITIONS: i32 = 3;
/// herald's defaults: `concurrency` 8 send calls of up to `batchMaxEvents` 256 records.
const CONCURRENCY: usize = 8;
const BATCH: usize = 256;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

/// One of herald's records, read back from the topic: what the ceiling sends.
struct Sample {
    value: Vec<u8>,
    headers: OwnedHeaders,
    header_bytes: usize,
}

async fn sample(bootstrap: &str, topic: &str) -> Sample {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "herald-bench")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .expect("partition");
    }
    consumer.assign(&assignment).expect("assign");
    let message = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
        .await
        .expect("a record within 30 s")
        .expect("consume");
    let headers = message
        .headers()
        .map_or_else(OwnedHeaders::new, rdkafka::message::BorrowedHeaders::detach);
    let header_bytes = message.headers().map_or(0, |h| {
        h.iter()
            .map(|h| h.key.len() + h.value.map_or(0, <[u8]>::len))
            .sum()
    });
    Sample {
        value: message.payload().unwrap_or_default().to_vec(),
        headers,
        header_bytes,
    }
}

/// Records on `topic`, read back until `expected` arrived or none came for 3 s. Consumed rather
/// than taken from the watermarks: tansu's high watermarks trail what it stores.
async fn count_records(bootstrap: &str, topic: &str, expected: u64) -> u64 {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "herald-bench-count")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .expect("partition");
    }
    consumer.assign(&assignment).expect("assign");
    let mut count = 0;
    while count < expected {
        match tokio::time::timeout(Duration::from_secs(3), consumer.recv()).await {
            Ok(Ok(_)) => count += 1,
            Ok(Err(error)) => panic!("consuming {topic}: {error}"),
            Err(_) => break,
        }
    }
    count
}

/// herald's producer defaults (`sinks/kafka/src/config.rs`), nothing else.
fn producer(bootstrap: &str) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("client.id", "herald-bench-ceiling")
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("compression.type", "lz4")
        .set("linger.ms", "5")
        .set("partitioner", "murmur2_random")
        .set("message.timeout.ms", "30000")
        .set("queue.buffering.max.messages", "100000")
        .create()
        .expect("producer")
}

/// The bare producer: `n` records round-robin over `keys`, at most `window` awaiting their
/// delivery reports.
async fn ceiling(
    bootstrap: &str,
    topic: &str,
    keys: &[String],
    sample: &Sample,
    n: u64,
    window: usize,
    broker_cpu: &dyn Fn() -> Option<f64>,
) -> Ceiling {
    let producer = producer(bootstrap);
    // Warm up outside the clock: connection, metadata and producer id, as herald had before its run.
    let warm = FutureRecord::to(topic)
        .key(&keys[0])
        .payload(&sample.value)
        .headers(sample.headers.clone());
    producer
        .send(warm, Duration::from_secs(30))
        .await
        .expect("warm-up record");

    let broker0 = broker_cpu();
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let mut in_flight = FuturesUnordered::new();
    let mut failed = 0u64;
    for i in 0..n {
        while in_flight.len() >= window {
            failed += u64::from(!matches!(in_flight.next().await, Some(Ok(Ok(_)))));
        }
        let key = &keys[usize::try_from(i).expect("fits") % keys.len()];
        let mut record = FutureRecord::to(topic)
            .key(key)
            .payload(&sample.value)
            .headers(sample.headers.clone());
        loop {
            match producer.send_result(record) {
                Ok(report) => {
                    in_flight.push(report);
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    match in_flight.next().await {
                        Some(report) => failed += u64::from(!matches!(report, Ok(Ok(_)))),
                        None => tokio::time::sleep(Duration::from_millis(1)).await,
                    }
                }
                Err((error, _)) => panic!("producing: {error}"),
            }
        }
    }
    while let Some(report) = in_flight.next().await {
        failed += u64::from(!matches!(report, Ok(Ok(_))));
    }
    let wall = t0.elapsed();
    let cpu = cpu_seconds() - cpu0;
    assert_eq!(failed, 0, "the bare producer lost records");
    Ceiling {
        sent: n,
        wall,
        cpu,
        broker_cpu: broker0.zip(broker_cpu()).map(|(a, b)| b - a),
    }
}

async fn run() {
    let changes = env("HERALD_BENCH_CHANGES", 50_000);
    let objects = env("HERALD_BENCH_OBJECTS", 1_000);
    let Some(broker) = Broker::start() else {
        println!(
            "SKIPPED herald_kafka: tansu is not installed (cargo install tansu --locked --features dynostore) and HERALD_TEST_KAFKA is not set"
        );
        return;
    };
    let broker_cpu = || broker.cpu_seconds();
    // Fresh topic names, so a run against a long-lived HERALD_TEST_KAFKA broker starts empty.
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let topic = format!("herald-bench-{stamp}");
    let ceiling_topic = format!("herald-bench-ceiling-{stamp}");
    kafka::create_topic(&broker.bootstrap, &topic, PARTITIONS).await;
    kafka::create_topic(&broker.bootstrap, &ceiling_topic, PARTITIONS).await;

    let work = workload::preload(objects, changes).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = format!(
        "{head}sinks:\n  - name: kafka\n    type: kafka\n    brokers: [{bootstrap}]\n    topic: {topic}\n    concurrency: {CONCURRENCY}\n    batchMaxEvents: {BATCH}\n",
        head = workload::config_head(&work.sim, dir.path()),
        bootstrap = broker.bootstrap,
    );
    let cfg = herald::config::from_str(&config).expect("config");
    let running = herald::app::start(&cfg, None).await.expect("herald starts");
    workload::wait_synced(&running).await;
    let measured = workload::stream(&running, &work, changes, &broker_cpu).await;
    running
        .stop(Duration::from_secs(30))
        .await
        .expect("clean stop");

    // The sink stage alone: the same journal, delivered again by a new sink to a topic of its own.
    let backlog_topic = format!("herald-bench-backlog-{stamp}");
    kafka::create_topic(&broker.bootstrap, &backlog_topic, PARTITIONS).await;
    let stage = workload::backlog(
        &format!(
            "{head}sinks:\n  - name: kafka-backlog\n    type: kafka\n    start: earliest\n    brokers: [{bootstrap}]\n    topic: {backlog_topic}\n    concurrency: {CONCURRENCY}\n    batchMaxEvents: {BATCH}\n",
            head = workload::config_head(&work.sim, dir.path()),
            bootstrap = broker.bootstrap,
        ),
        changes,
        &broker_cpu,
    )
    .await;

    let sample = sample(&broker.bootstrap, &topic).await;
    let keys: Vec<String> = work.names.iter().map(|n| format!("default/{n}")).collect();
    let bare = ceiling(
        &broker.bootstrap,
        &ceiling_topic,
        &keys,
        &sample,
        changes,
        CONCURRENCY * BATCH,
        &broker_cpu,
    )
    .await;

    // Both topics hold what was counted as delivered: neither figure is a local illusion.
    assert_eq!(
        count_records(&broker.bootstrap, &topic, changes).await,
        changes,
        "records on herald's topic"
    );
    assert_eq!(
        count_records(&broker.bootstrap, &backlog_topic, changes).await,
        changes,
        "records on the backlog topic"
    );
    assert_eq!(
        count_records(&broker.bootstrap, &ceiling_topic, changes + 1).await,
        changes + 1,
        "records on the ceiling topic (with the warm-up record)"
    );

    let where_ = if std::env::var_os("HERALD_TEST_KAFKA").is_some() {
        format!("broker {}", broker.bootstrap)
    } else {
        "tansu, in-memory storage".to_owned()
    };
    workload::report(
        &format!(
            "herald → Kafka, durable journal ({objects} objects, {changes} changes, {PARTITIONS} partitions, {where_}, record value {} B + {} B of headers, 2-core machine)",
            sample.value.len(),
            sample.header_bytes
        ),
        "herald: watch → journal → kafka (delivery reports)",
        ("herald sink stage: journal backlog → kafka", &stage),
        &format!(
            "ceiling: bare FutureProducer, {} in flight",
            CONCURRENCY * BATCH
        ),
        &measured,
        &bare,
    );
    drop(broker);
    work.sim.shutdown().await;
}
