//! Fault: objects whose names hold control characters (`\n`, `\0`, DEL; non-conformant API data a
//! real API server refuses, but it reaches herald). Every sink delivers them with the name intact
//! after decoding, in order, and nothing is skipped (issue 14, item 4).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use herald_sim::ResourceRef;
use herald_sink_core::{CloudEvent, ExtensionValue, encode};
use serde_json::{Value, json};

use crate::support::nats::NatsServer;
use crate::support::{Herald, Raw, Receiver, free_port, id_of, sim, widget, widgets_crd};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

/// What a consumer must see of one event: its id, subject and the k8s name and namespace.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Seen {
    id: String,
    subject: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
}

impl Seen {
    fn of(event: &CloudEvent) -> Self {
        let ext = |k: &str| {
            event
                .extensions
                .get(k)
                .and_then(ExtensionValue::as_str)
                .map(str::to_owned)
        };
        Self {
            id: event.id.clone(),
            subject: event.subject.clone(),
            name: ext("k8sname"),
            namespace: ext("k8snamespace"),
        }
    }
}

/// The ids of one object's events, per `namespace/name`, in the order herald must deliver them;
/// a deletion's resourceVersion is only in the watch event, so its id is `uid:*:deleted`.
type Expected = BTreeMap<String, Vec<String>>;

fn masked(id: &str) -> String {
    match id.split(':').collect::<Vec<_>>()[..] {
        [uid, _, "deleted"] => format!("{uid}:*:deleted"),
        _ => id.to_owned(),
    }
}

/// Checks what one sink delivered: exactly the expected events (none skipped, none extra), each
/// object's in order, and names, namespaces and subjects intact.
fn check(sink: &str, delivered: &[CloudEvent], expected: &Expected) {
    let mut per_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for event in delivered {
        let seen = Seen::of(event);
        let (Some(ns), Some(name)) = (&seen.namespace, &seen.name) else {
            panic!("{sink}: event without k8snamespace or k8sname: {seen:?}");
        };
        let key = format!("{ns}/{name}");
        assert_eq!(
            seen.subject.as_deref(),
            Some(key.as_str()),
            "{sink}: subject"
        );
        assert_eq!(
            event.partition_key(),
            Some(key.as_str()),
            "{sink}: partitionkey"
        );
        per_key.entry(key).or_default().push(masked(&seen.id));
    }
    assert_eq!(&per_key, expected, "{sink}: delivered events per object");
}

async fn until(what: &str, herald: &Herald, mut f: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !f() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}\n--- herald stderr ---\n{}",
            std::fs::read_to_string(&herald.stderr).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every message the JetStream stream holds, decoded (binary mode), with its subject.
async fn nats_events(server: &NatsServer) -> Vec<(String, CloudEvent)> {
    let client = async_nats::connect(server.url()).await.unwrap();
    let context = async_nats::jetstream::new(client);
    let Ok(mut stream) = context.get_stream("HERALD").await else {
        return Vec::new();
    };
    let state = stream.info().await.unwrap().state.clone();
    let mut out = Vec::new();
    for sequence in state.first_sequence..=state.last_sequence {
        let Ok(message) = stream.get_raw_message(sequence).await else {
            continue;
        };
        let pairs: Vec<(String, String)> = message
            .headers
            .iter()
            .flat_map(|(name, values)| {
                values
                    .iter()
                    .map(move |value| (name.to_string(), value.as_str().to_owned()))
            })
            .collect();
        let event = encode::nats_binary_decode(pairs, &message.payload)
            .unwrap_or_else(|e| panic!("NATS message {sequence} does not decode: {e:?}"));
        out.push((message.subject.to_string(), event));
    }
    out
}

#[tokio::test]
async fn names_with_control_characters_reach_every_sink_intact_and_in_order() {
    let Some(nats) = NatsServer::start(&[]) else {
        return;
    };
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let admin = format!("127.0.0.1:{}", free_port());
    let config = format!(
        "cluster:\n  name: test\n  kubeconfig:\n    path: {kc}\n\
         resources:\n  - group: example.com\n    kind: Widget\n\
         sinks:\n  - {{name: out, type: file, path: {out}, fsync: always}}\n  \
         - {{name: hook, type: webhook, url: '{hook}', mode: binary, timeout: 2s}}\n  \
         - name: bus\n    type: nats\n    servers: ['{url}']\n    mode: binary\n    \
         subject: 'herald.{{plural}}.{{namespace}}.{{name}}'\n    \
         jetstream:\n      stream: HERALD\n      create: {{subjects: ['herald.>'], storage: memory}}\n\
         journal:\n  path: {journal}\n  flushInterval: 2ms\nadmin:\n  listen: {admin}\n",
        kc = sim.kubeconfig_path().display(),
        out = dir.path().join("events.jsonl").display(),
        hook = receiver.url,
        url = nats.url(),
        journal = dir.path().join("journal").display(),
    );
    let herald = Herald::start(dir.path(), &config);
    let ready = format!("http://{admin}/readyz");
    let started = std::time::Instant::now();
    while !reqwest::get(&ready)
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "herald never became ready:\n{}",
            std::fs::read_to_string(&herald.stderr).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let mut expected = Expected::new();
    let mut record = |obj: &Value, op: &str| {
        let key = format!(
            "{}/{}",
            obj["metadata"]["namespace"].as_str().unwrap(),
            obj["metadata"]["name"].as_str().unwrap()
        );
        expected
            .entry(key)
            .or_default()
            .push(masked(&id_of(obj, op)));
    };
    // An ordinary neighbour before and after the odd ones.
    let before = raw
        .post(WIDGETS, &widget("before", json!({}), json!({})))
        .await
        .body;
    record(&before, "created");
    let default = ResourceRef::namespaced("example.com", "v1", "widgets", "default");
    for name in [
        "line\nbreak",
        "nul\0byte",
        "del\u{7f}ete",
        "all\r\n\t\0\u{7f}\u{1b}",
    ] {
        let created = sim
            .create_with_any_name(&default, widget(name, json!({}), json!({"v": 1})))
            .unwrap();
        record(&created, "created");
        let updated = sim
            .merge_patch(&default, name, &json!({"spec": {"v": 2}}))
            .unwrap();
        record(&updated, "updated");
    }
    let gone = "gone\nsoon";
    let doomed = sim
        .create_with_any_name(&default, widget(gone, json!({}), json!({})))
        .unwrap();
    record(&doomed, "created");
    sim.delete(&default, gone).unwrap();
    record(&doomed, "deleted");
    // A namespace that breaks the rules too.
    let namespaces = ResourceRef::cluster("", "v1", "namespaces");
    let odd_ns = "odd\nns";
    sim.create_with_any_name(
        &namespaces,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": odd_ns}}),
    )
    .unwrap();
    let mut in_odd_ns = widget("w\u{0}1", json!({}), json!({}));
    in_odd_ns["metadata"]["namespace"] = json!(odd_ns);
    let in_odd_ns = sim
        .create_with_any_name(
            &ResourceRef::namespaced("example.com", "v1", "widgets", odd_ns),
            in_odd_ns,
        )
        .unwrap();
    record(&in_odd_ns, "created");
    let after = raw
        .post(WIDGETS, &widget("after", json!({}), json!({})))
        .await
        .body;
    record(&after, "created");
    let total: usize = expected.values().map(Vec::len).sum();

    // The file sink: one JSON line per event, the control characters escaped.
    until("the file sink to take every event", &herald, || {
        herald.delivered().len() >= total
    })
    .await;
    let text = std::fs::read_to_string(&herald.events).unwrap();
    assert_eq!(text.lines().count(), total, "one line per event:\n{text}");
    let from_file: Vec<CloudEvent> = text
        .lines()
        .map(|l| CloudEvent::from_structured_json(l.as_bytes()).unwrap())
        .collect();
    check("file", &from_file, &expected);

    // The webhook, binary mode: ce- headers percent-encoded, decoded back intact.
    until("the webhook to take every event", &herald, || {
        receiver.events.lock().unwrap().len() >= total
    })
    .await;
    let from_hook: Vec<CloudEvent> = receiver
        .events
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.clone().unwrap_or_else(|e| panic!("webhook request: {e}")))
        .collect();
    check("webhook", &from_hook, &expected);

    // NATS JetStream, binary mode: headers percent-encoded, subject tokens still legal.
    let started = std::time::Instant::now();
    let from_nats = loop {
        let got = nats_events(&nats).await;
        if got.len() >= total {
            break got;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "NATS has {} of {total} events\n--- herald stderr ---\n{}",
            got.len(),
            std::fs::read_to_string(&herald.stderr).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for (subject, event) in &from_nats {
        let tokens: Vec<&str> = subject.split('.').collect();
        assert_eq!(tokens.len(), 4, "{subject:?} for {}", event.id);
        assert!(
            tokens.iter().all(|t| !t.is_empty()
                && !t.contains(|c: char| c.is_whitespace()
                    || c.is_control()
                    || c == '*'
                    || c == '>')),
            "{subject:?}"
        );
    }
    let events: Vec<CloudEvent> = from_nats.into_iter().map(|(_, e)| e).collect();
    check("nats", &events, &expected);

    // Nothing was dead-lettered or skipped: every sink delivered every event.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(herald.delivered().len(), total);
    assert_eq!(receiver.events.lock().unwrap().len(), total);
    let ids: BTreeSet<String> = events.iter().map(|e| e.id.clone()).collect();
    assert_eq!(ids.len(), total);
}
