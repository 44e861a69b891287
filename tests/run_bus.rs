//! `herald run` into the message buses: the binary, the simulator and a real broker (nats-server
//! with JetStream, tansu for Kafka). What a consumer reads is checked: ids, order per object,
//! de-duplication across a restart, keys, headers and tombstones.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::kafka::{Broker, create_topic};
use crate::support::nats::NatsServer;
use crate::support::{Herald, Raw, free_port, sim, widget, widgets_crd};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

fn config(sim: &herald_sim::Simulator, dir: &std::path::Path, sink: &str) -> String {
    format!(
        "cluster:\n  name: test\n  kubeconfig:\n    path: {}\nresources:\n  - group: example.com\n    kind: Widget\nsinks:\n  - name: bus\n{sink}journal:\n  path: {}\n  flushInterval: 2ms\nadmin:\n  listen: 127.0.0.1:{}\n",
        sim.kubeconfig_path().display(),
        dir.join("journal").display(),
        free_port()
    )
}

/// Creates, updates and deletes three widgets; returns the ids herald must emit, per object in
/// order (`uid:resourceVersion:op`; `uid:*:deleted` for the deletion).
async fn workload(raw: &Raw) -> BTreeMap<String, Vec<String>> {
    let mut ids: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for name in ["a", "b", "c"] {
        let created = raw
            .post(WIDGETS, &widget(name, json!({}), json!({"size": 1})))
            .await
            .body;
        let uid = created["metadata"]["uid"].as_str().unwrap().to_owned();
        let mut rvs = vec![(
            created["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_owned(),
            "created",
        )];
        for size in 2..4 {
            let updated = raw
                .patch(
                    &format!("{WIDGETS}/{name}"),
                    "application/merge-patch+json",
                    &json!({"spec": {"size": size}}),
                )
                .await
                .body;
            rvs.push((
                updated["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
                "updated",
            ));
        }
        raw.delete(&format!("{WIDGETS}/{name}")).await;
        // The deletion's resourceVersion is only in the watch event: `*` stands for it.
        rvs.push(("*".to_owned(), "deleted"));
        ids.insert(
            format!("default/{name}"),
            rvs.into_iter()
                .map(|(rv, op)| format!("{uid}:{rv}:{op}"))
                .collect(),
        );
    }
    ids
}

/// A deleted event's id with its resourceVersion replaced by `*`.
fn masked(id: &str) -> String {
    match id.split(':').collect::<Vec<_>>()[..] {
        [uid, _, "deleted"] => format!("{uid}:*:deleted"),
        _ => id.to_owned(),
    }
}

/// Waits until herald's `/readyz` answers 200: its watch is open, so no change is missed.
async fn ready(config: &str) {
    let url = format!("http://{}/readyz", crate::support::admin_addr(config));
    until("herald ready", async || {
        reqwest::get(&url)
            .await
            .is_ok_and(|r| r.status().is_success())
    })
    .await;
}

async fn until(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let started = std::time::Instant::now();
    while !f().await {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn herald_into_jetstream_keeps_order_and_a_restart_adds_no_duplicates() {
    let Some(server) = NatsServer::start(&[]) else {
        return;
    };
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let sink = format!(
        "    type: nats\n    servers: ['{}']\n    subject: 'herald.{{plural}}.{{namespace}}.{{name}}'\n    jetstream:\n      stream: HERALD\n      create: {{subjects: ['herald.>'], storage: memory}}\n",
        server.url()
    );
    let config = config(&sim, dir.path(), &sink);
    let mut herald = Herald::start(dir.path(), &config);
    ready(&config).await;
    let mut expected = workload(&raw).await;
    // One object that stays: a restart that lost its journal emits it again, with the same id.
    let keep = raw
        .post(WIDGETS, &widget("keep", json!({}), json!({})))
        .await
        .body;
    expected.insert(
        "default/keep".into(),
        vec![format!(
            "{}:{}:created",
            keep["metadata"]["uid"].as_str().unwrap(),
            keep["metadata"]["resourceVersion"].as_str().unwrap()
        )],
    );
    let total: usize = expected.values().map(Vec::len).sum();
    until("every event in the stream", async || {
        let client = async_nats::connect(server.url()).await.unwrap();
        let context = async_nats::jetstream::new(client);
        match context.get_stream("HERALD").await {
            Ok(mut stream) => stream
                .info()
                .await
                .is_ok_and(|i| i.state.messages >= total as u64),
            Err(_) => false,
        }
    })
    .await;
    // A clean restart with a journal that was fully delivered; then the same events again from
    // a new journal (a lost journal, the worst case): JetStream drops them by Nats-Msg-Id.
    assert_eq!(herald.terminate().await, Some(0));
    std::fs::remove_dir_all(dir.path().join("journal")).unwrap();
    herald.restart();
    let metrics = format!("http://{}/metrics", crate::support::admin_addr(&config));
    until(
        "the re-emitted event acknowledged by JetStream",
        async || {
            let Ok(r) = reqwest::get(&metrics).await else {
                return false;
            };
            r.text().await.unwrap_or_default().lines().any(|l| {
                l.starts_with("herald_sink_sent_events_total{sink=\"bus\"}") && !l.ends_with(" 0")
            })
        },
    )
    .await;
    assert_eq!(herald.terminate().await, Some(0));

    let messages = crate::sink_nats::stream_messages(&server, "HERALD").await;
    let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in &messages {
        let event: Value = serde_json::from_slice(&m.payload).unwrap();
        let id = event["id"].as_str().unwrap().to_owned();
        assert_eq!(
            crate::sink_nats::header(Some(&m.headers), "Nats-Msg-Id"),
            Some(id.as_str())
        );
        assert_eq!(
            m.subject.as_str(),
            format!(
                "herald.widgets.default.{}",
                event["k8sname"].as_str().unwrap()
            )
        );
        got.entry(event["partitionkey"].as_str().unwrap().to_owned())
            .or_default()
            .push(masked(&id));
    }
    // The re-emitted `keep` was a duplicate by Nats-Msg-Id: the stream holds each event once,
    // in order per object.
    assert_eq!(got, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn herald_into_kafka_keys_headers_order_and_tombstones() {
    let Some(broker) = Broker::start() else {
        return;
    };
    let topic = format!("herald-e2e-{}", free_port());
    create_topic(&broker.bootstrap, &topic, 3).await;
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let sink = format!(
        "    type: kafka\n    brokers: ['{}']\n    topic: {topic}\n    tombstones: true\n",
        broker.bootstrap
    );
    let config = config(&sim, dir.path(), &sink);
    let mut herald = Herald::start(dir.path(), &config);
    ready(&config).await;
    let expected = workload(&raw).await;
    let total: usize = expected.values().map(|ids| ids.len() + 1).sum();
    let bootstrap = broker.bootstrap.clone();
    let records = tokio::task::spawn_blocking(move || {
        crate::sink_kafka::consume(&bootstrap, "e2e", &topic, total)
    })
    .await
    .unwrap();
    assert_eq!(herald.terminate().await, Some(0));
    assert!(
        !records.is_empty(),
        "nothing consumed; herald: {}",
        std::fs::read_to_string(dir.path().join("herald.stderr")).unwrap_or_default()
    );
    let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in &records {
        let key = r.key.clone().unwrap();
        let header = |name: &str| {
            r.headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| String::from_utf8(v.clone()).unwrap())
        };
        match &r.value {
            // The tombstone follows the object's deleted event.
            None => {
                assert!(got[&key].last().unwrap().ends_with(":deleted"));
                got.get_mut(&key).unwrap().push("tombstone".into());
            }
            Some(value) => {
                let data: Value = serde_json::from_slice(value).unwrap();
                assert_eq!(header("ce_specversion").as_deref(), Some("1.0"));
                assert_eq!(header("ce_partitionkey").as_deref(), Some(key.as_str()));
                assert_eq!(
                    header("ce_source").as_deref(),
                    Some("k8s://test/example.com/widgets")
                );
                assert_eq!(header("content-type").as_deref(), Some("application/json"));
                let id = header("ce_id").unwrap();
                assert_eq!(data["op"], id.rsplit(':').next().unwrap());
                got.entry(key).or_default().push(masked(&id));
            }
        }
    }
    let expected: BTreeMap<String, Vec<String>> = expected
        .into_iter()
        .map(|(k, mut ids)| {
            ids.push("tombstone".into());
            (k, ids)
        })
        .collect();
    assert_eq!(got, expected);
}
