//! The alerting and audit recipes of docs/recipes/ end to end, each from its own config fragment
//! with `herald run` against the simulator: Alertmanager against a real Alertmanager (alerts read
//! back from its API, firing and then resolved). Helpers shared with tests/run_recipes.rs come
//! from there.

use serde_json::{Value, json};

use crate::run_recipes::{WIDGETS, dead_letters, recipe_config, rule};
use crate::support::alertmanager::{Alertmanager, Proxy};
use crate::support::api_receiver::ApiRequest;
use crate::support::{Herald, Raw, sim, widget, widgets_crd};

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
    let label_name = |k: &str| {
        let mut chars = k.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
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
