//! The GitHub `repository_dispatch`, Loki push and PagerDuty Events recipes of docs/recipes/ end
//! to end (the others: run_recipes_ci.rs, run_recipes_audit.rs): each recipe's own config
//! fragment, `herald run` against the simulator, and a receiver in the test that checks every
//! request against that API's documented shape (method, path, headers, content type, body fields
//! and types) and answers as the API does, errors and rate limits included.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::api_receiver::{ApiAnswer, ApiReceiver, ApiRequest};
use crate::support::{Herald, Raw, free_port, id_of, sim, widget, widgets_crd};

pub(crate) const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

/// A whole configuration around the recipe `file` (docs/recipes/): the simulator's Widgets, the
/// recipe's sinks with `url` pointed at `base` and each `${VAR}` secret read from a file holding
/// its value, a journal in `dir`, and an admin endpoint with a token (DLQ reads need it).
pub(crate) fn recipe_config(
    sim: &herald_sim::Simulator,
    dir: &Path,
    file: &str,
    url: (&str, &str),
    secrets: &[(&str, &str)],
    resource_extra: &str,
) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs/recipes")
        .join(file);
    let mut fragment = std::fs::read_to_string(&path).unwrap();
    assert!(fragment.contains(url.0), "{file} names {}", url.0);
    fragment = fragment.replace(url.0, url.1);
    for (var, value) in secrets {
        let secret_file = dir.join(var);
        std::fs::write(&secret_file, value).unwrap();
        let reference = format!("${{{var}}}");
        assert!(fragment.contains(&reference), "{file} reads {reference}");
        fragment = fragment.replace(
            &reference,
            &format!("{{fromFile: {}}}", secret_file.display()),
        );
    }
    std::fs::write(dir.join("admin-token"), "t0ken\n").unwrap();
    format!(
        "cluster:\n  name: test\n  kubeconfig:\n    path: {kc}\nresources:\n  - group: example.com\n    kind: Widget\n{resource_extra}{fragment}journal:\n  path: {journal}\n  flushInterval: 2ms\nadmin:\n  listen: 127.0.0.1:{port}\n  token: {{fromFile: {token}}}\n",
        kc = sim.kubeconfig_path().display(),
        journal = dir.join("journal").display(),
        port = free_port(),
        token = dir.join("admin-token").display(),
    )
}

/// Asserts that every request has the shape `problems` checks.
pub(crate) fn assert_shapes(requests: &[ApiRequest], problems: fn(&ApiRequest) -> Vec<String>) {
    for request in requests {
        assert_eq!(problems(request), Vec::<String>::new(), "{request:?}");
    }
}

/// A Prometheus label name (`[a-zA-Z_][a-zA-Z0-9_]*`), as Loki and Alertmanager take them.
pub(crate) fn label_name(k: &str) -> bool {
    let mut chars = k.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `herald render -c CONFIG --sink SINK --object` of a Widget `w9` with `spec` (YAML flow), the
/// object file written in `dir`: the exit code and stdout.
pub(crate) fn render_widget(
    config: &Path,
    dir: &Path,
    sink: &str,
    spec: &str,
) -> (Option<i32>, String) {
    let object = dir.join("w.yaml");
    std::fs::write(
        &object,
        format!("apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: w9, namespace: default, uid: u9, resourceVersion: '9', generation: 1}}\nspec: {spec}\n"),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["render", "-c", config.to_str().unwrap()])
        .args(["--sink", sink, "--object", object.to_str().unwrap()])
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// `herald dlq list --json` of `sink` through the running herald.
pub(crate) fn dead_letters(config: &Path, sink: &str) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args([
            "dlq",
            "list",
            "-c",
            config.to_str().unwrap(),
            "--sink",
            sink,
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Waits (up to 30 s) until `sink` holds `n` dead letters.
pub(crate) async fn wait_dead_letters(herald: &Herald, sink: &str, n: usize) -> Value {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let letters = dead_letters(&herald.config, sink);
        if letters.as_array().is_some_and(|a| a.len() == n) {
            return letters;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{sink}: {letters}; {}",
            herald.stderr_text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// What is wrong with `request` by the API's documented shape; `check` adds each failed rule.
pub(crate) fn rule(problems: &mut Vec<String>, ok: bool, what: &str) {
    if !ok {
        problems.push(what.to_owned());
    }
}

// ---------------------------------------------------------------------------------------------
// GitHub: POST /repos/{owner}/{repo}/dispatches
// (docs.github.com/rest/repos/repos#create-a-repository-dispatch-event)

const GITHUB_TOKEN: &str = "github_pat_11TEST";

/// GitHub's documented request shape for a repository dispatch.
fn github_problems(r: &ApiRequest) -> Vec<String> {
    let mut p = Vec::new();
    rule(&mut p, r.method == "POST", "method POST");
    rule(&mut p, r.path == "/repos/acme/deploy/dispatches", "path");
    rule(
        &mut p,
        r.header("authorization") == Some(&format!("Bearer {GITHUB_TOKEN}")),
        "Authorization: Bearer <token>",
    );
    rule(
        &mut p,
        r.header("accept") == Some("application/vnd.github+json"),
        "Accept: application/vnd.github+json",
    );
    rule(
        &mut p,
        r.header("x-github-api-version") == Some("2022-11-28"),
        "X-GitHub-Api-Version",
    );
    rule(
        &mut p,
        r.header("content-type")
            .is_some_and(|c| c.starts_with("application/json")),
        "Content-Type: application/json",
    );
    rule(
        &mut p,
        r.header("user-agent").is_some(),
        "a User-Agent (GitHub requires one)",
    );
    match serde_json::from_slice::<Value>(&r.body) {
        Ok(body) => {
            rule(
                &mut p,
                body["event_type"].as_str().is_some_and(|t| !t.is_empty()),
                "event_type: a non-empty string",
            );
            match body["client_payload"].as_object() {
                Some(payload) => rule(
                    &mut p,
                    payload.len() <= 10,
                    "client_payload: at most 10 top-level properties",
                ),
                None => p.push("client_payload: an object".into()),
            }
            rule(
                &mut p,
                body.as_object()
                    .is_some_and(|o| o.keys().all(|k| k == "event_type" || k == "client_payload")),
                "no other body fields",
            );
        }
        Err(e) => p.push(format!("body is not JSON: {e}")),
    }
    p
}

/// Answers as GitHub does: 204, or 422 for an `event_type` over 100 characters, and the first
/// `frontend.updated` meets the secondary rate limit (403 with `Retry-After`); a request of another
/// shape gets 400 and fails the test.
fn github_answer(r: &ApiRequest, limited: &std::sync::atomic::AtomicBool) -> ApiAnswer {
    if !github_problems(r).is_empty() {
        return ApiAnswer::json(400, json!({"message": "Problems parsing JSON"}));
    }
    let body = r.json();
    if body["event_type"] == "frontend.updated"
        && !limited.swap(true, std::sync::atomic::Ordering::SeqCst)
    {
        let mut answer = ApiAnswer::json(
            403,
            json!({
                "message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
                "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"
            }),
        );
        answer.headers.push(("retry-after".into(), "1".into()));
        return answer;
    }
    if body["event_type"].as_str().unwrap().chars().count() > 100 {
        return ApiAnswer::json(
            422,
            json!({
                "message": "Invalid request.\n\nevent_type is too long (maximum is 100 characters).",
                "documentation_url": "https://docs.github.com/rest/repos/repos#create-a-repository-dispatch-event",
                "status": "422"
            }),
        );
    }
    ApiAnswer::empty(204)
}

#[tokio::test]
async fn github_repository_dispatch_recipe() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let limited = std::sync::atomic::AtomicBool::new(false);
    let github = ApiReceiver::start(move |r, _| github_answer(r, &limited)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = recipe_config(
        &sim,
        dir.path(),
        "github-dispatch.yaml",
        ("https://api.github.com", &github.base),
        &[("GITHUB_TOKEN", GITHUB_TOKEN)],
        "",
    );
    let mut herald = Herald::start(dir.path(), &config);
    let created = raw
        .post(WIDGETS, &widget("frontend", json!({}), json!({"size": 1})))
        .await
        .body;
    let got = github.wait_for(1, "frontend.created").await;
    assert_eq!(
        got[0].json(),
        json!({"event_type": "frontend.created", "client_payload": {
            "id": id_of(&created, "created"), "op": "created", "namespace": "default",
            "name": "frontend", "generation": 1, "spec": {"size": 1}}})
    );
    // A name too long for event_type: GitHub's 422 dead-letters the event with its answer.
    // A DNS subdomain: labels of at most 63 characters.
    let long = format!("{}.{}", "a".repeat(60), "b".repeat(34));
    let refused = raw
        .post(WIDGETS, &widget(&long, json!({}), json!({})))
        .await;
    assert_eq!(refused.status, 201, "{}", refused.body);
    let refused = refused.body;
    let letters = wait_dead_letters(&herald, "github-ci", 1).await;
    assert_eq!(letters[0]["id"], id_of(&refused, "created"));
    assert_eq!(letters[0]["code"], "http_4xx");
    let error = letters[0]["error"].as_str().unwrap();
    assert!(
        error.starts_with("HTTP 422") && error.contains("event_type is too long"),
        "{error}"
    );
    // Later changes go on.
    let mut changed = created.clone();
    changed["spec"]["size"] = json!(2);
    let updated = raw.put(&format!("{WIDGETS}/frontend"), &changed).await.body;
    // Refused once by the secondary rate limit (403, Retry-After: 1), then sent again and taken.
    let got = github
        .wait_for(4, "frontend.updated, retried after the 403")
        .await;
    assert_eq!(got[2].body, got[3].body, "the same request again");
    let last = got.last().unwrap().json();
    assert_eq!(last["event_type"], "frontend.updated");
    assert_eq!(last["client_payload"]["id"], id_of(&updated, "updated"));
    assert_eq!(last["client_payload"]["generation"], 2);
    assert_shapes(&got, github_problems);
    // The 422 alone is a dead letter; the rate-limited request was retried.
    assert_eq!(
        dead_letters(&herald.config, "github-ci")
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    assert_eq!(herald.terminate().await, Some(0));
}

// ---------------------------------------------------------------------------------------------
// Loki: POST /loki/api/v1/push (grafana.com/docs/loki/latest/reference/loki-http-api/#ingest-logs)

/// Loki's documented push shape (JSON): `{"streams": [{"stream": {label: string}, "values":
/// [["<ns>", "<line>"]]}]}`.
fn loki_problems(r: &ApiRequest) -> Vec<String> {
    let mut p = Vec::new();
    rule(&mut p, r.method == "POST", "method POST");
    rule(&mut p, r.path == "/loki/api/v1/push", "path");
    rule(
        &mut p,
        r.header("content-type") == Some("application/json"),
        "Content-Type: application/json",
    );
    rule(
        &mut p,
        r.header("x-scope-orgid") == Some("platform"),
        "X-Scope-OrgID",
    );
    let body: Value = match serde_json::from_slice(&r.body) {
        Ok(body) => body,
        Err(e) => return vec![format!("body is not JSON: {e}")],
    };
    let Some(streams) = body["streams"].as_array().filter(|s| !s.is_empty()) else {
        return vec!["streams: a non-empty array".into()];
    };
    for stream in streams {
        match stream["stream"].as_object() {
            Some(labels) => rule(
                &mut p,
                !labels.is_empty() && labels.iter().all(|(k, v)| label_name(k) && v.is_string()),
                "stream: labels with legal names and string values",
            ),
            None => p.push("stream: an object".into()),
        }
        let Some(values) = stream["values"].as_array().filter(|v| !v.is_empty()) else {
            p.push("values: a non-empty array".into());
            continue;
        };
        for value in values {
            let pair = value.as_array().map(Vec::as_slice);
            rule(
                &mut p,
                matches!(pair, Some([ts, line]) if ts.as_str().is_some_and(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())) && line.is_string()),
                "values[]: [\"<unix ns as a string>\", \"<line>\"]",
            );
        }
    }
    p
}

#[tokio::test]
async fn loki_push_recipe() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    // The first push meets Loki's ingestion limit (429, as Loki words it); then 204s.
    let loki = ApiReceiver::start(|r, n| {
        if !loki_problems(r).is_empty() {
            ApiAnswer::empty(400)
        } else if n == 0 {
            ApiAnswer {
                status: 429,
                headers: vec![("content-type".into(), "text/plain".into())],
                body: "Ingestion rate limit exceeded for user platform (limit: 4194304 bytes/sec)"
                    .into(),
            }
        } else {
            ApiAnswer::empty(204)
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = recipe_config(
        &sim,
        dir.path(),
        "loki-push.yaml",
        ("http://loki.monitoring.svc:3100", &loki.base),
        &[],
        "",
    );
    // Objects made before herald starts come in one burst (its first list): batches.
    let mut expected = Vec::new();
    let mut w2_uid = String::new();
    for name in ["w1", "w2", "w3"] {
        let created = raw
            .post(WIDGETS, &widget(name, json!({}), json!({"size": 1})))
            .await
            .body;
        expected.push(id_of(&created, "created"));
        if name == "w2" {
            w2_uid = created["metadata"]["uid"].as_str().unwrap().to_owned();
        }
    }
    let mut herald = Herald::start(dir.path(), &config);
    // Seen first, then deleted: a `deleted` entry whose id herald takes from the watch.
    loki.wait_for(1, "the first push").await;
    let reply = raw.delete(&format!("{WIDGETS}/w2")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    expected.push(format!("{w2_uid}:<rv>:deleted"));
    // Every entry arrives, the refused batch again after the 429.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let entries = loop {
        let got = loki.received();
        let mut entries: Vec<(String, Value, Value)> = Vec::new();
        for request in got.iter().skip(1) {
            for stream in request.json()["streams"].as_array().unwrap() {
                for value in stream["values"].as_array().unwrap() {
                    let line: Value = serde_json::from_str(value[1].as_str().unwrap()).unwrap();
                    entries.push((
                        value[0].as_str().unwrap().to_owned(),
                        stream["stream"].clone(),
                        line,
                    ));
                }
            }
        }
        if entries.len() >= expected.len() {
            break entries;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {} entries: {got:#?}",
            entries.len(),
            expected.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let mut ids: Vec<String> = entries
        .iter()
        .map(|(_, _, line)| {
            let id = line["id"].as_str().unwrap();
            match id.strip_suffix(":deleted") {
                // The deletion's resourceVersion is the API server's; the rest is checked.
                Some(rest) => format!("{}:<rv>:deleted", rest.rsplit_once(':').unwrap().0),
                None => id.to_owned(),
            }
        })
        .collect();
    ids.sort();
    expected.sort();
    assert_eq!(ids, expected, "each change once, after the retry");
    assert_shapes(&loki.received(), loki_problems);
    // The refused push's entries came again, the same to the byte (time frozen in the journal).
    let received = loki.received();
    let later: Vec<Value> = received[1..]
        .iter()
        .flat_map(|r| r.json()["streams"].as_array().unwrap().clone())
        .collect();
    for stream in received[0].json()["streams"].as_array().unwrap() {
        assert!(later.contains(stream), "{stream} retried as it was");
    }
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    for (ts, labels, line) in &entries {
        let ts: u128 = ts.parse().unwrap();
        assert!(ts <= now_ns && now_ns - ts < 600_000_000_000, "{ts}");
        assert_eq!(labels["job"], "herald");
        assert_eq!(labels["namespace"], "default");
        assert_eq!(labels["kind"], "Widget");
        assert_eq!(labels["op"], line["op"]);
        assert_eq!(
            line["subject"].as_str().unwrap().split('/').next(),
            Some("default")
        );
    }
    assert_eq!(dead_letters(&herald.config, "loki"), json!([]));
    assert_eq!(herald.terminate().await, Some(0));
}

// ---------------------------------------------------------------------------------------------
// PagerDuty: POST /v2/enqueue (developer.pagerduty.com/api-reference/368ae3d938c9e-send-an-event-to-pager-duty)

const ROUTING_KEY: &str = "R0123456789abcdef0123456789abcde";

/// The Events API v2 shape: routing_key, event_action, dedup_key, and for a trigger a payload
/// with summary, source and severity.
fn pagerduty_problems(r: &ApiRequest) -> Vec<String> {
    let mut p = Vec::new();
    rule(&mut p, r.method == "POST", "method POST");
    rule(&mut p, r.path == "/v2/enqueue", "path");
    rule(
        &mut p,
        r.header("content-type") == Some("application/json"),
        "Content-Type: application/json",
    );
    let body: Value = match serde_json::from_slice(&r.body) {
        Ok(body) => body,
        Err(e) => return vec![format!("body is not JSON: {e}")],
    };
    rule(&mut p, body["routing_key"] == ROUTING_KEY, "routing_key");
    let action = body["event_action"].as_str().unwrap_or_default();
    rule(
        &mut p,
        ["trigger", "acknowledge", "resolve"].contains(&action),
        "event_action: trigger, acknowledge or resolve",
    );
    rule(
        &mut p,
        body["dedup_key"]
            .as_str()
            .is_some_and(|k| !k.is_empty() && k.chars().count() <= 255),
        "dedup_key: a string of at most 255 characters",
    );
    if action == "trigger" {
        let payload = &body["payload"];
        rule(
            &mut p,
            payload["summary"]
                .as_str()
                .is_some_and(|s| !s.is_empty() && s.chars().count() <= 1024),
            "payload.summary: at most 1024 characters",
        );
        rule(&mut p, payload["source"].is_string(), "payload.source");
        rule(
            &mut p,
            ["critical", "error", "warning", "info"]
                .contains(&payload["severity"].as_str().unwrap_or_default()),
            "payload.severity",
        );
        rule(
            &mut p,
            payload["timestamp"]
                .as_str()
                .is_none_or(|t| t.parse::<jiff::Timestamp>().is_ok()),
            "payload.timestamp: ISO 8601",
        );
        for key in ["component", "group", "class"] {
            rule(
                &mut p,
                payload[key].is_null() || payload[key].is_string(),
                "payload component/group/class: strings",
            );
        }
        rule(
            &mut p,
            payload["custom_details"].is_null() || payload["custom_details"].is_object(),
            "payload.custom_details: an object",
        );
    }
    p
}

#[tokio::test]
async fn pagerduty_events_recipe() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    // The first trigger meets PagerDuty's rate limit (429); everything else is accepted (202).
    let triggers = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = triggers.clone();
    let pagerduty = ApiReceiver::start(move |r, _| {
        let problems = pagerduty_problems(r);
        if !problems.is_empty() {
            return ApiAnswer::json(
                400,
                json!({"status": "invalid event", "message": "Event object is invalid", "errors": problems}),
            );
        }
        let body = r.json();
        if body["event_action"] == "trigger"
            && seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0
        {
            return ApiAnswer::json(
                429,
                json!({"status": "throttle event", "message": "Requests for this service are arriving too quickly. Please retry later."}),
            );
        }
        ApiAnswer::json(
            202,
            json!({"status": "success", "message": "Event processed", "dedup_key": body["dedup_key"]}),
        )
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = recipe_config(
        &sim,
        dir.path(),
        "pagerduty-events.yaml",
        ("https://events.pagerduty.com", &pagerduty.base),
        &[("PAGERDUTY_ROUTING_KEY", ROUTING_KEY)],
        "    payload: [object, oldObject]\n",
    );
    let mut herald = Herald::start(dir.path(), &config);
    // Created without a status (the status subresource sets it): not failed, no transition, so
    // nothing is sent (the route's `when`).
    raw.post(WIDGETS, &widget("w1", json!({}), json!({"size": 1})))
        .await;
    let actions = |n: usize| {
        let pagerduty = &pagerduty;
        async move {
            pagerduty
                .wait_for(n, "PagerDuty events")
                .await
                .iter()
                .map(|r| r.json())
                .collect::<Vec<Value>>()
        }
    };
    // Failed: a trigger, refused once with 429 and retried.
    let set_phase = |phase: &'static str, message: &'static str| {
        let raw = &raw;
        async move {
            let reply = raw
                .patch(
                    &format!("{WIDGETS}/w1/status"),
                    "application/merge-patch+json",
                    &json!({"status": {"phase": phase, "message": message}}),
                )
                .await;
            assert_eq!(reply.status, 200, "{}", reply.body);
            reply.body
        }
    };
    let failed = set_phase("Failed", "image pull back-off").await;
    let got = actions(2).await;
    assert_eq!(
        got[0], got[1],
        "the trigger refused with 429 is sent again, unchanged"
    );
    let trigger = &got[1];
    assert_eq!(trigger["event_action"], "trigger");
    assert_eq!(
        trigger["dedup_key"],
        "herald/k8s://test/example.com/widgets/default/w1"
    );
    assert_eq!(
        trigger["payload"]["summary"],
        "Widget default/w1 failed: image pull back-off"
    );
    assert_eq!(
        trigger["payload"]["source"],
        "k8s://test/example.com/widgets"
    );
    assert_eq!(trigger["payload"]["severity"], "critical");
    // The failed state, as an update, or as the creation when herald's first list came after the
    // status was set (herald starts beside the writes: either is that state's event).
    let id = trigger["payload"]["custom_details"]["id"]
        .as_str()
        .unwrap_or_default();
    assert!(
        [id_of(&failed, "updated"), id_of(&failed, "created")].contains(&id.to_owned()),
        "{trigger:#}"
    );
    assert_eq!(
        trigger["payload"]["custom_details"]["status"]["phase"],
        "Failed"
    );
    // Recovered: a resolve of the same incident, after its trigger.
    set_phase("Running", "").await;
    let got = actions(3).await;
    assert_eq!(got[2]["event_action"], "resolve");
    assert_eq!(got[2]["dedup_key"], trigger["dedup_key"]);
    assert!(got[2].get("payload").is_none());
    // No transition (still running, a new message): nothing. Failed again: a trigger, which is
    // the 4th request only if the update before it sent nothing.
    set_phase("Running", "steady").await;
    set_phase("Failed", "out of memory").await;
    let got = actions(4).await;
    assert_eq!(got[3]["event_action"], "trigger", "{got:#?}");
    assert_eq!(
        got[3]["payload"]["summary"],
        "Widget default/w1 failed: out of memory"
    );
    // Deleted while failed: the incident is resolved.
    let reply = raw.delete(&format!("{WIDGETS}/w1")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let got = actions(5).await;
    assert_eq!(got[4]["event_action"], "resolve", "{got:#?}");
    assert_eq!(got[4]["dedup_key"], trigger["dedup_key"]);
    assert_eq!(got.len(), 5, "{got:#?}");
    assert_shapes(&pagerduty.received(), pagerduty_problems);
    assert_eq!(dead_letters(&herald.config, "pagerduty"), json!([]));
    assert_eq!(herald.terminate().await, Some(0));
}
