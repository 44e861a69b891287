//! Two recipes of docs/recipes/ end to end, Alertmanager and Elasticsearch `_bulk` (the Slack
//! and Splunk HEC recipes, alerting and audit too, are in run_recipes_ci.rs), each from its own
//! config fragment with `herald run` against the simulator: Alertmanager against a real Alertmanager (alerts read
//! back from its API, firing and then resolved), and Elasticsearch `_bulk` against a receiver that
//! parses the NDJSON exactly and answers item by item as Elasticsearch does. Helpers shared with
//! tests/run_recipes.rs come from there.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::run_recipes::{
    WIDGETS, dead_letters, label_name, recipe_config, rule, wait_dead_letters,
};
use crate::support::alertmanager::{Alertmanager, Proxy};
use crate::support::api_receiver::{ApiAnswer, ApiReceiver, ApiRequest};
use crate::support::{Herald, Raw, id_of, sim, widget, widgets_crd};

/// Sets `name`'s status through the status subresource.
async fn set_status(raw: &Raw, name: &str, status: Value) -> Value {
    let reply = raw
        .patch(
            &format!("{WIDGETS}/{name}/status"),
            "application/merge-patch+json",
            &json!({ "status": status }),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body
}

// ---------------------------------------------------------------------------------------------
// Alertmanager: POST /api/v2/alerts (prometheus.io/docs/alerting/latest/clients/), a real one.

/// The request shape Alertmanager's v2 API documents for posting alerts: a JSON array of
/// alerts, each with labels (names `[a-zA-Z_][a-zA-Z0-9_]*` in 0.25), string annotations and
/// RFC 3339 `startsAt`/`endsAt`.
fn alertmanager_problems(r: &ApiRequest) -> Vec<String> {
    let mut p = Vec::new();
    rule(&mut p, r.method == "POST", "method POST");
    rule(&mut p, r.path == "/api/v2/alerts", "path");
    rule(
        &mut p,
        r.header("content-type") == Some("application/json"),
        "Content-Type: application/json",
    );
    let body: Value = match serde_json::from_slice(&r.body) {
        Ok(body) => body,
        Err(e) => return vec![format!("body is not JSON: {e}")],
    };
    let Some(alerts) = body.as_array().filter(|a| !a.is_empty()) else {
        return vec!["a non-empty JSON array of alerts".into()];
    };
    for alert in alerts {
        match alert["labels"].as_object() {
            Some(labels) => rule(
                &mut p,
                !labels.is_empty()
                    && labels
                        .iter()
                        .all(|(k, v)| label_name(k) && v.as_str().is_some_and(|v| !v.is_empty())),
                "labels: legal names, non-empty string values",
            ),
            None => p.push("labels: an object".into()),
        }
        rule(
            &mut p,
            alert["annotations"]
                .as_object()
                .is_some_and(|a| a.values().all(Value::is_string)),
            "annotations: string values",
        );
        for key in ["startsAt", "endsAt"] {
            rule(
                &mut p,
                alert[key].is_null()
                    || alert[key]
                        .as_str()
                        .is_some_and(|t| t.parse::<jiff::Timestamp>().is_ok()),
                "startsAt/endsAt: RFC 3339",
            );
        }
    }
    p
}

/// The alert of Widget `name` among Alertmanager's current alerts, if any.
fn alert_of<'a>(alerts: &'a Value, name: &str) -> Option<&'a Value> {
    alerts
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["labels"]["name"] == name)
}

/// Polls Alertmanager (up to 30 s) until `ok` holds for the alert of `name` (`None`: none is
/// listed), and returns it.
async fn until_alert(
    am: &Alertmanager,
    herald: &Herald,
    name: &str,
    what: &str,
    ok: impl Fn(Option<&Value>) -> bool,
) -> Option<Value> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let alerts = am.alerts("").await;
        let alert = alert_of(&alerts, name);
        if ok(alert) {
            return alert.cloned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: Alertmanager lists {alerts:#}; herald: {}",
            herald.stderr_text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

fn active(alert: Option<&Value>, description: &str) -> bool {
    alert.is_some_and(|a| {
        a["status"]["state"] == "active" && a["annotations"]["description"] == description
    })
}

// Two workers: the proxy forwards to Alertmanager while `herald dlq list` blocks the test's task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alertmanager_recipe() {
    let Some(am) = Alertmanager::start().await else {
        return;
    };
    // Between herald and Alertmanager: keeps each request as Alertmanager got it, and its answer.
    let proxy = Proxy::start(&am.base).await;
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = recipe_config(
        &sim,
        dir.path(),
        "alertmanager.yaml",
        ("http://alertmanager.monitoring.svc:9093", &proxy.base),
        &[],
        "    payload: [object, oldObject]\n",
    );
    let mut herald = Herald::start(dir.path(), &config);
    // Created without a status: healthy, nothing is sent (the route's `when`).
    for name in ["w1", "w2"] {
        raw.post(WIDGETS, &widget(name, json!({}), json!({"size": 1})))
            .await;
    }
    let before = jiff::Timestamp::now();
    set_status(
        &raw,
        "w1",
        json!({"phase": "Failed", "message": "image pull back-off"}),
    )
    .await;
    // Firing: the alert is active in Alertmanager with the recipe's labels and annotations.
    let alert = until_alert(&am, &herald, "w1", "w1 firing", |a| {
        active(a, "image pull back-off")
    })
    .await
    .unwrap();
    assert_eq!(
        alert["labels"],
        json!({"alertname": "WidgetFailed", "severity": "critical", "namespace": "default",
               "name": "w1", "kind": "Widget", "source": "k8s://test/example.com/widgets"})
    );
    assert_eq!(
        alert["annotations"]["summary"],
        "Widget default/w1 is failed"
    );
    let starts: jiff::Timestamp = alert["startsAt"].as_str().unwrap().parse().unwrap();
    let ends: jiff::Timestamp = alert["endsAt"].as_str().unwrap().parse().unwrap();
    // startsAt is herald's observation time (after the write, not in the future); endsAt the
    // recipe's horizon, a day later, rather than Alertmanager's resolve_timeout (5 m).
    assert!(
        starts
            >= before
                .checked_sub(jiff::SignedDuration::from_secs(1))
                .unwrap()
            && starts <= jiff::Timestamp::now(),
        "{alert:#}"
    );
    assert_eq!(
        ends.as_second() - starts.as_second(),
        86_400,
        "the horizon: {alert:#}"
    );
    // Recovered: resolved, so Alertmanager (0.25) no longer lists it, active or not.
    set_status(&raw, "w1", json!({"phase": "Running", "message": ""})).await;
    until_alert(&am, &herald, "w1", "w1 resolved", |a| a.is_none()).await;
    assert_eq!(am.alerts("?active=false").await, json!([]));
    // A healthy object's change sends nothing.
    set_status(&raw, "w1", json!({"phase": "Running", "message": "steady"})).await;
    // w2 fails; a change while failed sends the alert again (same alert: startsAt kept, the new
    // description); deleted while failed, it is resolved.
    set_status(
        &raw,
        "w2",
        json!({"phase": "Failed", "message": "out of memory"}),
    )
    .await;
    let first = until_alert(&am, &herald, "w2", "w2 firing", |a| {
        active(a, "out of memory")
    })
    .await
    .unwrap();
    set_status(
        &raw,
        "w2",
        json!({"phase": "Failed", "message": "out of memory (2)"}),
    )
    .await;
    let again = until_alert(&am, &herald, "w2", "w2 firing again", |a| {
        active(a, "out of memory (2)")
    })
    .await
    .unwrap();
    assert_eq!(again["startsAt"], first["startsAt"]);
    assert_eq!(again["fingerprint"], first["fingerprint"]);
    assert_eq!(am.alerts("").await.as_array().map(Vec::len), Some(1));
    let reply = raw.delete(&format!("{WIDGETS}/w2")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    until_alert(&am, &herald, "w2", "w2 resolved by its deletion", |a| {
        a.is_none()
    })
    .await;
    // Five requests: w1 fired and resolved (its healthy change sent nothing), w2 fired twice
    // and resolved; each a valid alert array Alertmanager took (200).
    let exchanges = proxy.wait_for(5, "five alert posts").await;
    assert_eq!(exchanges.len(), 5, "{exchanges:#?}");
    for exchange in &exchanges {
        assert_eq!(
            alertmanager_problems(&exchange.request),
            Vec::<String>::new(),
            "{exchange:?}"
        );
        assert_eq!(
            exchange.status, 200,
            "Alertmanager answered {}",
            exchange.answer
        );
    }
    let bodies: Vec<Value> = exchanges.iter().map(|e| e.request.json()).collect();
    // A resolve is the firing alert's labels with endsAt and no horizon: when herald saw the
    // change, in the past.
    for (fired, resolved) in [(0, 1), (3, 4)] {
        assert_eq!(bodies[resolved][0]["labels"], bodies[fired][0]["labels"]);
        let ends: jiff::Timestamp = bodies[resolved][0]["endsAt"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(ends <= jiff::Timestamp::now(), "{:#}", bodies[resolved]);
        assert!(bodies[resolved][0].get("startsAt").is_none());
    }
    assert_eq!(
        bodies[4][0]["annotations"]["description"],
        "Widget default/w2 was deleted"
    );
    assert_eq!(dead_letters(&herald.config, "alertmanager"), json!([]));
    assert_eq!(herald.terminate().await, Some(0));
}

// ---------------------------------------------------------------------------------------------
// Elasticsearch: POST /_bulk (elastic.co/docs/api/doc/elasticsearch/operation/operation-bulk)

const ES_PASSWORD: &str = "es-s3cret";

/// An index as the receiver keeps it: `_id` → (document, times indexed).
type Index = Arc<Mutex<BTreeMap<String, (Value, usize)>>>;

/// A `_bulk` body parsed exactly: NDJSON, every line (the last one too) ending with `\n`, no
/// empty line, pairs of an `index` action (into `herald-audit`, with `_id`) and a document whose
/// `id` is that `_id`. The pairs, or what is wrong.
fn bulk_pairs(r: &ApiRequest) -> Result<Vec<(String, Value)>, Vec<String>> {
    let mut p = Vec::new();
    rule(&mut p, r.method == "POST", "method POST");
    rule(&mut p, r.path == "/_bulk", "path /_bulk");
    rule(
        &mut p,
        r.header("content-type") == Some("application/x-ndjson"),
        "Content-Type: application/x-ndjson",
    );
    let basic = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        format!("herald:{ES_PASSWORD}"),
    );
    rule(
        &mut p,
        r.header("authorization") == Some(&format!("Basic {basic}")),
        "Authorization: Basic",
    );
    let Ok(text) = std::str::from_utf8(&r.body) else {
        p.push("body is not UTF-8".into());
        return Err(p);
    };
    let Some(text) = text.strip_suffix('\n') else {
        p.push("the body ends with a newline".into());
        return Err(p);
    };
    let lines: Vec<&str> = text.split('\n').collect();
    rule(
        &mut p,
        lines.len().is_multiple_of(2),
        "action and document lines in pairs",
    );
    let mut pairs = Vec::new();
    for pair in lines.chunks(2) {
        let [action, doc] = pair else { break };
        let (Ok(action), Ok(doc)) = (
            serde_json::from_str::<Value>(action),
            serde_json::from_str::<Value>(doc),
        ) else {
            p.push(format!("lines are not JSON: {action:?} {doc:?}"));
            continue;
        };
        let meta = action
            .as_object()
            .filter(|a| a.len() == 1)
            .and_then(|a| a.get("index"));
        let Some(id) = meta.and_then(|m| m["_id"].as_str()) else {
            p.push(format!("an index action with _id: {action}"));
            continue;
        };
        rule(
            &mut p,
            meta.is_some_and(|m| m["_index"] == "herald-audit"),
            "_index herald-audit",
        );
        rule(&mut p, doc["id"] == id, "_id is the event id");
        rule(&mut p, doc.is_object(), "the document is an object");
        pairs.push((id.to_owned(), doc));
    }
    if p.is_empty() { Ok(pairs) } else { Err(p) }
}

/// Answers a `_bulk` request as Elasticsearch does: a request of the wrong shape gets 400 with
/// a `parse_exception` (failing the test); otherwise 200 with one item per action, in order:
/// `w-busy` is refused once with 429 (a full write queue), a document whose `object.spec.size`
/// is not a number with 400 (the index maps it `long`: `mapper_parsing_exception`), every other
/// document is indexed by `_id` (201 created, 200 when it replaces one).
fn es_answer(r: &ApiRequest, index: &Index, busy: &std::sync::atomic::AtomicBool) -> ApiAnswer {
    let pairs = match bulk_pairs(r) {
        Ok(pairs) => pairs,
        Err(problems) => {
            return ApiAnswer::json(
                400,
                json!({"error": {"type": "parse_exception", "reason": problems.join("; ")}, "status": 400}),
            );
        }
    };
    let mut errors = false;
    let items: Vec<Value> = pairs
        .into_iter()
        .map(|(id, doc)| {
            let size = doc.pointer("/object/spec/size");
            let item = if doc["name"] == "w-busy"
                && !busy.swap(true, std::sync::atomic::Ordering::SeqCst)
            {
                errors = true;
                json!({"_index": "herald-audit", "_id": id, "status": 429, "error": {
                    "type": "es_rejected_execution_exception",
                    "reason": "rejected execution of coordinating operation [coordinating_and_primary_bytes=104759862, replica_bytes=0, all_bytes=104759862, coordinating_operation_bytes=20862272, max_coordinating_and_primary_bytes=107374182]"}})
            } else if size.is_some_and(|s| !s.is_i64()) {
                errors = true;
                json!({"_index": "herald-audit", "_id": id, "status": 400, "error": {
                    "type": "mapper_parsing_exception",
                    "reason": format!("failed to parse field [object.spec.size] of type [long] in document with id '{id}'. Preview of field's value: '{}'", size.unwrap().as_str().unwrap_or_default()),
                    "caused_by": {"type": "illegal_argument_exception", "reason": "For input string: \"big\""}}})
            } else {
                let mut index = index.lock().unwrap();
                let entry = index.entry(id.clone()).or_insert((Value::Null, 0));
                entry.0 = doc;
                entry.1 += 1;
                let (status, result) = if entry.1 == 1 {
                    (201, "created")
                } else {
                    (200, "updated")
                };
                json!({"_index": "herald-audit", "_id": id, "_version": entry.1,
                       "result": result, "_shards": {"total": 2, "successful": 1, "failed": 0},
                       "_seq_no": 0, "_primary_term": 1, "status": status})
            };
            json!({ "index": item })
        })
        .collect();
    ApiAnswer::json(200, json!({"took": 3, "errors": errors, "items": items}))
}

// Two workers: `herald dlq list` runs as a blocking child process on the test's task, and the
// receiver must answer herald meanwhile (its start-up check included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elasticsearch_bulk_recipe() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let index: Index = Arc::default();
    let busy = std::sync::atomic::AtomicBool::new(false);
    let kept = index.clone();
    let es = ApiReceiver::start(move |r, _| es_answer(r, &kept, &busy)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = recipe_config(
        &sim,
        dir.path(),
        "elasticsearch-bulk.yaml",
        ("https://elasticsearch.logging.svc:9200", &es.base),
        &[("ELASTICSEARCH_PASSWORD", ES_PASSWORD)],
        "",
    );
    // Made before herald starts: herald's first list sends them in one batch.
    let mut created = BTreeMap::new();
    for (name, size) in [
        ("w1", json!(1)),
        ("w-busy", json!(2)),
        ("w-bad", json!("big")),
    ] {
        let object = raw
            .post(WIDGETS, &widget(name, json!({}), json!({ "size": size })))
            .await
            .body;
        created.insert(name, object);
    }
    let mut herald = Herald::start(dir.path(), &config);
    // herald is up (its admin endpoint answers `herald dlq list`) once it sends.
    es.wait_for(1, "the first _bulk request").await;
    // The mapping conflict is dead-lettered with Elasticsearch's error for that item.
    let letters = wait_dead_letters(&herald, "elasticsearch", 1).await;
    assert_eq!(letters[0]["id"], id_of(&created["w-bad"], "created"));
    assert_eq!(letters[0]["code"], "http_4xx");
    let error = letters[0]["error"].as_str().unwrap();
    assert!(
        error.contains("mapper_parsing_exception")
            && error.contains("failed to parse field [object.spec.size] of type [long]"),
        "{error}"
    );
    // Later changes: an update and a deletion.
    let mut changed = created["w1"].clone();
    changed["spec"]["size"] = json!(3);
    let updated = raw.put(&format!("{WIDGETS}/w1"), &changed).await.body;
    let reply = raw.delete(&format!("{WIDGETS}/w1")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    // Every other change is indexed under its event id, w-busy's after its 429.
    let mut expected = vec![
        id_of(&created["w1"], "created"),
        id_of(&created["w-busy"], "created"),
        id_of(&updated, "updated"),
    ];
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let deleted_prefix = format!("{}:", created["w1"]["metadata"]["uid"].as_str().unwrap());
    let indexed = loop {
        let indexed = index.lock().unwrap().clone();
        let deleted = indexed
            .keys()
            .find(|id| id.starts_with(&deleted_prefix) && id.ends_with(":deleted"))
            .cloned();
        if let Some(deleted) = deleted
            && expected.iter().all(|id| indexed.contains_key(id))
        {
            expected.push(deleted);
            break indexed;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "indexed {:?}; requests {:#?}",
            indexed.keys(),
            es.received()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    expected.sort();
    assert_eq!(indexed.keys().cloned().collect::<Vec<_>>(), expected);
    // Each once: the retry after the 429 carried w-busy's item alone, not the items Elasticsearch
    // had already taken.
    for (id, (doc, times)) in &indexed {
        assert_eq!(*times, 1, "{id} indexed {times} times");
        assert_eq!(doc["id"], *id);
        assert_eq!(doc["kind"], "Widget");
        assert_eq!(doc["namespace"], "default");
        assert_eq!(doc["source"], "k8s://test/example.com/widgets");
        assert!(
            doc["@timestamp"]
                .as_str()
                .unwrap()
                .parse::<jiff::Timestamp>()
                .is_ok()
        );
        assert_eq!(doc["op"], id.rsplit(':').next().unwrap());
    }
    let w1_updated = &indexed[&id_of(&updated, "updated")].0;
    assert_eq!(w1_updated["object"]["spec"]["size"], 3);
    assert!(w1_updated["patch"].is_array(), "{w1_updated:#}");
    let received = es.received();
    let busy_id = id_of(&created["w-busy"], "created");
    let busy_sent = received
        .iter()
        .filter(|r| String::from_utf8_lossy(&r.body).contains(&busy_id))
        .count();
    assert_eq!(
        busy_sent, 2,
        "w-busy refused once, then indexed: {received:#?}"
    );
    for request in &received {
        assert!(bulk_pairs(request).is_ok(), "{:?}", bulk_pairs(request));
    }
    // Still one dead letter: nothing else was refused, nothing lost behind a 200.
    assert_eq!(
        dead_letters(&herald.config, "elasticsearch")
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    assert_eq!(herald.terminate().await, Some(0));
}
