//! herald into NATS JetStream with the durable journal: events/s from simulator changes to
//! `PubAck`s (herald's own `delivered` counter), and in the same run the ceiling — a bare
//! async-nats JetStream client publishing as many messages with the same payload and headers (one
//! of herald's messages, read back from the stream; a fresh `Nats-Msg-Id` each) to the same stream,
//! with as many acks outstanding as herald allows (`maxInFlight`), settling acks as it goes.
//! Printed, not asserted; only that the stream holds every message is checked.
//!
//! The server is a `nats-server -js` child on a free loopback port (file storage in a temporary
//! directory). `HERALD_BENCH_CHANGES` (default 50,000) and `HERALD_BENCH_OBJECTS` (default 1,000)
//! size it.

// A benchmark binary: a failed setup step should stop it loudly, so expect() is the right tool.
#![allow(clippy::expect_used)]

#[path = "support/nats.rs"]
mod nats;
#[path = "../sim/benches/support/mod.rs"]
mod support;
#[path = "support/workload.rs"]
mod workload;

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use async_nats::jetstream::context::{ContextBuilder, PublishAckFuture};
use async_nats::jetstream::message::PublishMessage;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use nats::NatsServer;
use support::cpu_seconds;
use workload::{Ceiling, env};

const STREAM: &str = "BENCH";
/// herald's default `maxInFlight`: JetStream publishes awaiting their `PubAck`.
const MAX_IN_FLIGHT: usize = 4096;
const ACK_TIMEOUT: Duration = Duration::from_secs(10);

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

/// The bare JetStream publisher: `n` messages round-robin over `subjects`, at most `window` acks
/// outstanding; each ack is awaited as soon as the window is full (the client stalls on acks
/// nobody awaits).
async fn ceiling(
    url: &str,
    subjects: &[String],
    n: u64,
    window: usize,
    server: &NatsServer,
) -> (Ceiling, usize, usize) {
    let client = async_nats::connect(url).await.expect("connect");
    let js = ContextBuilder::new()
        .timeout(ACK_TIMEOUT)
        .ack_timeout(ACK_TIMEOUT)
        .max_ack_inflight(window)
        .build(client);
    let sample = js
        .get_stream(STREAM)
        .await
        .expect("stream")
        .get_raw_message(1)
        .await
        .expect("herald's first message");
    let header_bytes: usize = sample
        .headers
        .iter()
        .map(|(name, values)| {
            AsRef::<str>::as_ref(name).len()
                + values.iter().map(|v| v.as_str().len()).sum::<usize>()
        })
        .sum();
    let publish = |subject: &str, id: String| {
        let mut headers = sample.headers.clone();
        headers.insert("Nats-Msg-Id", id.as_str());
        js.send_publish(
            subject.to_owned(),
            PublishMessage::build()
                .payload(sample.payload.clone())
                .headers(headers),
        )
    };
    // Warm up outside the clock, as herald was connected and had checked its stream.
    publish(&subjects[0], "ceiling-warm-up".to_owned())
        .await
        .expect("publish")
        .await
        .expect("ack");

    let broker0 = server.cpu_seconds();
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let mut acks: FuturesUnordered<<PublishAckFuture as IntoFuture>::IntoFuture> =
        FuturesUnordered::new();
    let mut failed = 0u64;
    for i in 0..n {
        while acks.len() >= window {
            failed += u64::from(!matches!(acks.next().await, Some(Ok(ref a)) if !a.duplicate));
        }
        let subject = &subjects[usize::try_from(i).expect("fits") % subjects.len()];
        let ack = publish(subject, format!("ceiling-{i}"))
            .await
            .expect("publish");
        acks.push(ack.into_future());
    }
    while let Some(ack) = acks.next().await {
        failed += u64::from(!matches!(ack, Ok(ref a) if !a.duplicate));
    }
    let wall = t0.elapsed();
    let cpu = cpu_seconds() - cpu0;
    assert_eq!(failed, 0, "the bare publisher lost messages");
    // The stream holds herald's messages, the warm-up and the ceiling's: nothing was dropped.
    let stored = js
        .get_stream(STREAM)
        .await
        .expect("stream")
        .info()
        .await
        .expect("stream info")
        .state
        .messages;
    assert_eq!(stored, 2 * n + 1, "messages in stream {STREAM}");
    (
        Ceiling {
            sent: n,
            wall,
            cpu,
            broker_cpu: Some(server.cpu_seconds() - broker0),
        },
        sample.payload.len(),
        header_bytes,
    )
}

async fn run() {
    let changes = env("HERALD_BENCH_CHANGES", 50_000);
    let objects = env("HERALD_BENCH_OBJECTS", 1_000);
    let Some(server) = NatsServer::start() else {
        println!(
            "SKIPPED herald_nats: nats-server not found at /usr/sbin/nats-server, $NATS_SERVER or on PATH (apt-get install nats-server)"
        );
        return;
    };
    let server_cpu = || Some(server.cpu_seconds());

    let work = workload::preload(objects, changes).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = format!(
        "{head}sinks:\n  - name: nats\n    type: nats\n    servers: [{url}]\n    subject: herald.{{plural}}.{{namespace}}.{{name}}\n    maxInFlight: {MAX_IN_FLIGHT}\n    jetstream:\n      stream: {STREAM}\n      create:\n        subjects: [\"herald.>\"]\n",
        head = workload::config_head(&work.sim, dir.path()),
        url = server.url(),
    );
    let cfg = herald::config::from_str(&config).expect("config");
    let running = herald::app::start(&cfg, None).await.expect("herald starts");
    workload::wait_synced(&running).await;
    let measured = workload::stream(&running, &work, changes, &server_cpu).await;
    running
        .stop(Duration::from_secs(30))
        .await
        .expect("clean stop");

    // The sink stage alone: the same journal, delivered again by a new sink into a stream of its
    // own (the first stream's duplicate window would drop the same ids without storing them).
    let stage = workload::backlog(
        &format!(
            "{head}sinks:\n  - name: nats-backlog\n    type: nats\n    start: earliest\n    servers: [{url}]\n    subject: backlog.{{plural}}.{{namespace}}.{{name}}\n    maxInFlight: {MAX_IN_FLIGHT}\n    jetstream:\n      stream: BACKLOG\n      create:\n        subjects: [\"backlog.>\"]\n",
            head = workload::config_head(&work.sim, dir.path()),
            url = server.url(),
        ),
        changes,
        &server_cpu,
    )
    .await;

    // The same stream and subject shape as herald's, under a token of their own.
    let subjects: Vec<String> = work
        .names
        .iter()
        .map(|n| format!("herald.ceiling.default.{n}"))
        .collect();
    let (bare, payload, header_bytes) =
        ceiling(&server.url(), &subjects, changes, MAX_IN_FLIGHT, &server).await;

    workload::report(
        &format!(
            "herald → NATS JetStream, durable journal ({objects} objects, {changes} changes, stream {STREAM} with file storage, structured mode, payload {payload} B + {header_bytes} B of headers, 2-core machine)"
        ),
        "herald: watch → journal → jetstream (PubAcks)",
        ("herald sink stage: journal backlog → jetstream", &stage),
        &format!("ceiling: bare async-nats JetStream, {MAX_IN_FLIGHT} acks in flight"),
        &measured,
        &bare,
    );
    drop(server);
    work.sim.shutdown().await;
}
