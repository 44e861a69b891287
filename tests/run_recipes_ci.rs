//! Four recipes of docs/recipes/ end to end: GitLab pipeline trigger, Tekton EventListener, Slack
//! incoming webhook and Splunk HEC (the Alertmanager and Elasticsearch `_bulk` recipes are in
//! run_recipes_audit.rs; GitHub, Loki and PagerDuty in run_recipes.rs). Each runs the recipe's
//! own config fragment with `herald run` against the simulator, and a receiver that checks every
//! request against the tool's documented shape and answers as the tool does, errors and rate
//! limits included. The configuration and dead-letter helpers are run_recipes.rs's.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::run_recipes::{
    WIDGETS, assert_shapes, dead_letters, recipe_config, render_widget, rule, wait_dead_letters,
};
use crate::support::api_receiver::{ApiAnswer, ApiReceiver, ApiRequest};
use crate::support::{Herald, Raw, admin_addr, admin_get, id_of, sim, widget, widgets_crd};

/// The previous state in every event, for the recipes' transition `when`s.
const WITH_OLD_OBJECT: &str = "    payload: [object, oldObject]\n";

/// Waits until herald's watches are synced (`/readyz` 200), so objects made afterwards are live
/// changes, not its first list.
async fn ready(herald: &Herald) {
    let addr = admin_addr(&std::fs::read_to_string(&herald.config).unwrap());
    herald
        .until(30, "/readyz 200", async || {
            admin_get(&addr, "/readyz").await.0 == 200
        })
        .await;
}

/// Sets the status of Widget `name` (the status subresource: the generation stays).
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

/// Merges `patch` into Widget `name`.
async fn merge(raw: &Raw, name: &str, patch: Value) -> Value {
    let reply = raw
        .patch(
            &format!("{WIDGETS}/{name}"),
            "application/merge-patch+json",
            &patch,
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body
}

// ---------------------------------------------------------------------------------------------
// GitLab: POST /api/v4/projects/:id/trigger/pipeline (docs.gitlab.com/api/pipeline_triggers/)

/// Characters a form must escape (`&`, `+`, `=`), so a token written into the body unescaped
/// would not decode to itself.
const GITLAB_TOKEN: &str = "glptt-a1b2&c3+d4=e5";

/// `application/x-www-form-urlencoded` decoded as the WHATWG URL standard says (`+` is a space,
/// `%XX` a byte, UTF-8): the pairs in order, or what is malformed.
fn form_decode(body: &[u8]) -> Result<Vec<(String, String)>, String> {
    let decode = |part: &str| -> Result<String, String> {
        let mut bytes = Vec::new();
        let mut it = part.bytes();
        while let Some(b) = it.next() {
            match b {
                b'+' => bytes.push(b' '),
                b'%' => {
                    let hex: Vec<u8> = it.by_ref().take(2).collect();
                    let hex = std::str::from_utf8(&hex).map_err(|e| e.to_string())?;
                    bytes.push(
                        u8::from_str_radix(hex, 16).map_err(|_| format!("bad escape %{hex}"))?,
                    );
                }
                b'&' | b'=' => return Err(format!("unescaped {:?} in {part:?}", b as char)),
                _ => bytes.push(b),
            }
        }
        String::from_utf8(bytes).map_err(|e| e.to_string())
    };
    let text = std::str::from_utf8(body).map_err(|e| e.to_string())?;
    text.split('&')
        .map(|pair| {
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("{pair:?} is not name=value"))?;
            Ok((decode(name)?, decode(value)?))
        })
        .collect()
}

/// The trigger API's documented request: POST, the project's trigger path, a form with `token`,
/// `ref` and `variables[NAME]` fields (NAME: a CI/CD variable name), each once.
fn gitlab_problems(r: &ApiRequest) -> Vec<String> {
    let mut p = Vec::new();
    rule(&mut p, r.method == "POST", "method POST");
    rule(
        &mut p,
        r.path == "/api/v4/projects/42/trigger/pipeline",
        "path",
    );
    rule(
        &mut p,
        r.header("content-type") == Some("application/x-www-form-urlencoded"),
        "Content-Type: application/x-www-form-urlencoded",
    );
    let form = match form_decode(&r.body) {
        Ok(form) => form,
        Err(e) => return vec![format!("not a form: {e}")],
    };
    let mut names: Vec<&str> = form.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    let count = names.len();
    names.dedup();
    rule(&mut p, names.len() == count, "each field once");
    rule(&mut p, names.contains(&"token"), "a token field");
    rule(
        &mut p,
        form.iter().any(|(n, v)| n == "ref" && !v.is_empty()),
        "a ref field",
    );
    for name in names {
        if name != "token" && name != "ref" {
            let variable = name
                .strip_prefix("variables[")
                .and_then(|n| n.strip_suffix(']'));
            rule(
                &mut p,
                variable.is_some_and(|v| {
                    !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                }),
                "other fields: variables[NAME]",
            );
        }
    }
    p
}

/// The form of `r` as a JSON object (field name to value), for comparisons.
fn form_of(r: &ApiRequest) -> Value {
    Value::Object(
        form_decode(&r.body)
            .unwrap()
            .into_iter()
            .map(|(n, v)| (n, Value::String(v)))
            .collect(),
    )
}

/// Answers as GitLab does: 201 with the new pipeline; 404 for a token it does not know; 400
/// `Reference not found` for a branch or tag the project lacks (`main` and `release-1.x` exist).
fn gitlab_answer(r: &ApiRequest, n: usize) -> ApiAnswer {
    if !gitlab_problems(r).is_empty() {
        return ApiAnswer::json(400, json!({"error": "token is missing"}));
    }
    let form = form_of(r);
    if form["token"] != GITLAB_TOKEN {
        return ApiAnswer::json(404, json!({"message": "404 Not Found"}));
    }
    let git_ref = form["ref"].as_str().unwrap();
    if !["main", "release-1.x"].contains(&git_ref) {
        return ApiAnswer::json(400, json!({"message": {"base": ["Reference not found"]}}));
    }
    ApiAnswer::json(
        201,
        json!({"id": 1000 + n, "iid": n + 1, "project_id": 42, "ref": git_ref,
               "sha": "a91957a858320c0e17f3a0eca7cfacbff50ea29a", "status": "created",
               "source": "trigger",
               "web_url": format!("https://gitlab.example.com/acme/deploy/-/pipelines/{}", 1000 + n)}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_pipeline_trigger_recipe() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    let gitlab = ApiReceiver::start(gitlab_answer).await;
    let dir = tempfile::tempdir().unwrap();
    let config = recipe_config(
        &sim,
        dir.path(),
        "gitlab-pipeline.yaml",
        ("https://gitlab.example.com", &gitlab.base),
        &[("GITLAB_TRIGGER_TOKEN", GITLAB_TOKEN)],
        &format!("{WITH_OLD_OBJECT}    initialState: skip\n"),
    );
    let mut herald = Herald::start(dir.path(), &config);
    ready(&herald).await;
    let created = raw
        .post(
            WIDGETS,
            &widget("w1", json!({}), json!({"ref": "main", "version": "1.0.0"})),
        )
        .await
        .body;
    let got = gitlab.wait_for(1, "the pipeline of w1's creation").await;
    assert_eq!(
        form_of(&got[0]),
        json!({"token": GITLAB_TOKEN, "ref": "main",
               "variables[HERALD_EVENT_ID]": id_of(&created, "created"),
               "variables[HERALD_OP]": "created", "variables[WIDGET_NAMESPACE]": "default",
               "variables[WIDGET_NAME]": "w1", "variables[WIDGET_GENERATION]": "1",
               "variables[WIDGET_VERSION]": "1.0.0"})
    );
    // A controller reporting progress and a label change: no spec change, no pipeline. The spec
    // change after them is the next request only if they sent nothing.
    set_status(&raw, "w1", json!({"phase": "Deploying"})).await;
    merge(&raw, "w1", json!({"metadata": {"labels": {"team": "web"}}})).await;
    let changed = merge(
        &raw,
        "w1",
        json!({"spec": {"ref": "release-1.x", "version": "1.1.0 & beta+1"}}),
    )
    .await;
    let got = gitlab.wait_for(2, "the pipeline of w1's spec change").await;
    let form = form_of(&got[1]);
    assert_eq!(form["ref"], "release-1.x");
    assert_eq!(
        form["variables[HERALD_EVENT_ID]"],
        id_of(&changed, "updated")
    );
    assert_eq!(form["variables[WIDGET_GENERATION]"], "2");
    assert_eq!(form["variables[WIDGET_VERSION]"], "1.1.0 & beta+1");
    // Deleted: no pipeline. A ref GitLab does not know: 400, dead-lettered with GitLab's answer,
    // and the third request only if the deletion sent nothing.
    let reply = raw.delete(&format!("{WIDGETS}/w1")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let refused = raw
        .post(
            WIDGETS,
            &widget("w2", json!({}), json!({"ref": "no-such-branch"})),
        )
        .await
        .body;
    let letters = wait_dead_letters(&herald, "gitlab", 1).await;
    assert_eq!(letters[0]["id"], id_of(&refused, "created"));
    assert_eq!(letters[0]["code"], "http_4xx");
    let error = letters[0]["error"].as_str().unwrap();
    assert!(
        error.starts_with("HTTP 400") && error.contains("Reference not found"),
        "{error}"
    );
    let got = gitlab.received();
    assert_eq!(got.len(), 3, "{got:#?}");
    assert_eq!(form_of(&got[2])["variables[WIDGET_NAME]"], "w2");
    // Later objects go on.
    raw.post(WIDGETS, &widget("w3", json!({}), json!({"ref": "main"})))
        .await;
    let got = gitlab.wait_for(4, "w3's pipeline").await;
    let last = form_of(&got[3]);
    assert_eq!(last["variables[WIDGET_NAME]"], "w3");
    assert!(last.get("variables[WIDGET_VERSION]").is_none(), "{last}");
    // One pipeline per object generation.
    let mut generations: Vec<(Value, Value)> = got
        .iter()
        .map(|r| {
            let f = form_of(r);
            (
                f["variables[WIDGET_NAME]"].clone(),
                f["variables[WIDGET_GENERATION]"].clone(),
            )
        })
        .collect();
    let all = generations.len();
    generations.sort_by_key(|g| g.0.to_string() + &g.1.to_string());
    generations.dedup();
    assert_eq!(generations.len(), all, "{generations:?}");
    assert_shapes(&got, gitlab_problems);
    assert_eq!(
        dead_letters(&herald.config, "gitlab")
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    assert_eq!(herald.terminate().await, Some(0));
    // `herald render` shows the form with the token masked, however the form spells it.
    let (code, stdout) = render_widget(&herald.config, dir.path(), "gitlab", "{ref: main}");
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("token=***&"), "{stdout}");
    assert!(!stdout.contains("a1b2"), "{stdout}");
}

// ---------------------------------------------------------------------------------------------
// Tekton Triggers: an EventListener (tekton.dev/docs/triggers/eventlisteners/)

/// What an EventListener takes: a JSON body (TriggerBindings read `$(body.…)`) and here the
/// `X-Herald-Event` header a CEL interceptor matches (`header.match('X-Herald-Event', …)`),
/// which must agree with the body.
fn tekton_problems(r: &ApiRequest) -> Vec<String> {
    let mut p = Vec::new();
    rule(&mut p, r.method == "POST", "method POST");
    rule(&mut p, r.path == "/", "path /");
    rule(
        &mut p,
        r.header("content-type") == Some("application/json"),
        "Content-Type: application/json",
    );
    let body: Value = match serde_json::from_slice(&r.body) {
        Ok(body) => body,
        Err(e) => return vec![format!("body is not JSON: {e}")],
    };
    rule(&mut p, body.is_object(), "body: an object");
    let event = r.header("x-herald-event").unwrap_or_default();
    rule(
        &mut p,
        [
            "dev.herald.resource.created",
            "dev.herald.resource.updated",
            "dev.herald.resource.deleted",
        ]
        .contains(&event),
        "X-Herald-Event: a herald event type",
    );
    rule(&mut p, body["type"] == event, "X-Herald-Event = body.type");
    rule(
        &mut p,
        r.header("x-herald-subject").is_some_and(|s| {
            body["namespace"].as_str().zip(body["name"].as_str()) == s.split_once('/')
        }),
        "X-Herald-Subject = body namespace/name",
    );
    for key in ["id", "op", "source", "kind", "name", "uid"] {
        rule(
            &mut p,
            body[key].is_string(),
            "id, op, source, kind, name, uid",
        );
    }
    rule(&mut p, body["spec"].is_object(), "spec: an object");
    rule(&mut p, body["resync"].is_boolean(), "resync: a boolean");
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tekton_eventlistener_recipe() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    // Answers as an EventListener does (202 with its name and an event id), and records what
    // a trigger with the CEL interceptor `header.match('X-Herald-Event',
    // 'dev.herald.resource.updated')` would have run.
    let fired: Arc<Mutex<Vec<Value>>> = Arc::default();
    let runs = fired.clone();
    let tekton = ApiReceiver::start(move |r, n| {
        if !tekton_problems(r).is_empty() {
            return ApiAnswer::json(400, json!({"error": "invalid event body"}));
        }
        if r.header("x-herald-event") == Some("dev.herald.resource.updated") {
            runs.lock().unwrap().push(r.json());
        }
        ApiAnswer::json(
            202,
            json!({"eventListener": "herald", "namespace": "ci",
                   "eventListenerUID": "ea71a6e4-9531-43a1-94fe-6136515d938c",
                   "eventID": format!("14a657c3-6816-45bf-b214-{n:012}")}),
        )
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = recipe_config(
        &sim,
        dir.path(),
        "tekton-eventlistener.yaml",
        ("http://el-herald.ci.svc.cluster.local:8080", &tekton.base),
        &[],
        WITH_OLD_OBJECT,
    );
    let mut herald = Herald::start(dir.path(), &config);
    ready(&herald).await;
    let created = raw
        .post(
            WIDGETS,
            &widget("w1", json!({}), json!({"version": "1.0.0"})),
        )
        .await
        .body;
    let got = tekton.wait_for(1, "w1 created").await;
    assert_eq!(
        got[0].header("x-herald-event"),
        Some("dev.herald.resource.created")
    );
    assert_eq!(got[0].header("x-herald-subject"), Some("default/w1"));
    let uid = created["metadata"]["uid"].as_str().unwrap();
    assert_eq!(
        got[0].json(),
        json!({"id": id_of(&created, "created"), "type": "dev.herald.resource.created",
               "op": "created", "resync": false, "source": "k8s://test/example.com/widgets",
               "time": got[0].json()["time"], "kind": "Widget", "namespace": "default",
               "name": "w1", "uid": uid, "generation": 1, "spec": {"version": "1.0.0"}})
    );
    // A status update: nothing (the spec change after it is the second request).
    set_status(&raw, "w1", json!({"phase": "Running"})).await;
    let updated = merge(&raw, "w1", json!({"spec": {"version": "1.1.0"}})).await;
    let got = tekton.wait_for(2, "w1 updated").await;
    assert_eq!(
        got[1].header("x-herald-event"),
        Some("dev.herald.resource.updated")
    );
    assert_eq!(got[1].json()["id"], id_of(&updated, "updated"));
    assert_eq!(got[1].json()["generation"], 2);
    let reply = raw.delete(&format!("{WIDGETS}/w1")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let got = tekton.wait_for(3, "w1 deleted").await;
    assert_eq!(
        got[2].header("x-herald-event"),
        Some("dev.herald.resource.deleted")
    );
    assert_eq!(got[2].json()["op"], "deleted");
    assert_eq!(got.len(), 3, "{got:#?}");
    assert_shapes(&got, tekton_problems);
    // The header alone picked the one update for the interceptor's trigger.
    let runs = fired.lock().unwrap().clone();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["spec"]["version"], "1.1.0");
    assert_eq!(dead_letters(&herald.config, "tekton"), json!([]));
    assert_eq!(herald.terminate().await, Some(0));
}

// ---------------------------------------------------------------------------------------------
// Slack: an incoming webhook (docs.slack.dev/messaging/sending-messages-using-incoming-webhooks)

const SLACK_PATH: &str = "/services/T0HERALD1/B0HERALD2/Xq3fJk9LmN0pQr5sTu7vWx8y";

/// What an incoming webhook takes: JSON with a `text` (the notification's fallback) and `blocks`
/// (at most 50): sections with mrkdwn or plain text of at most 3000 characters, context blocks
/// with at most 10 elements. A `<` in mrkdwn opens a link or a mention (`<!channel>`), so text
/// from an object must arrive escaped.
fn slack_problems(r: &ApiRequest) -> Vec<String> {
    let mut p = Vec::new();
    rule(&mut p, r.method == "POST", "method POST");
    rule(&mut p, r.path == SLACK_PATH, "the webhook's path");
    rule(
        &mut p,
        r.header("content-type") == Some("application/json"),
        "Content-Type: application/json",
    );
    let body: Value = match serde_json::from_slice(&r.body) {
        Ok(body) => body,
        Err(e) => return vec![format!("body is not JSON: {e}")],
    };
    rule(
        &mut p,
        body["text"].as_str().is_some_and(|t| !t.is_empty()),
        "text: a non-empty string",
    );
    // The fallback text is mrkdwn too: a `<!channel>` there pings as well.
    rule(
        &mut p,
        body["text"].as_str().is_some_and(|t| !t.contains('<')),
        "text: mrkdwn escaped",
    );
    let Some(blocks) = body["blocks"]
        .as_array()
        .filter(|b| !b.is_empty() && b.len() <= 50)
    else {
        return vec!["blocks: 1 to 50 blocks".into()];
    };
    let text_ok = |t: &Value| {
        ["mrkdwn", "plain_text"].contains(&t["type"].as_str().unwrap_or_default())
            && t["text"].as_str().is_some_and(|s| {
                !s.is_empty()
                    && s.chars().count() <= 3000
                    && (t["type"] != "mrkdwn" || !s.contains('<'))
            })
    };
    for block in blocks {
        match block["type"].as_str() {
            Some("section") => rule(
                &mut p,
                text_ok(&block["text"]),
                "section: a text object of at most 3000 characters, mrkdwn escaped",
            ),
            Some("context") => rule(
                &mut p,
                block["elements"]
                    .as_array()
                    .is_some_and(|e| !e.is_empty() && e.len() <= 10 && e.iter().all(text_ok)),
                "context: 1 to 10 text elements",
            ),
            other => p.push(format!("unexpected block type {other:?}")),
        }
    }
    p
}

/// An answer with a text body, as Slack's webhooks answer.
fn text(status: u16, body: &str) -> ApiAnswer {
    ApiAnswer {
        status,
        headers: vec![("content-type".into(), "text/plain".into())],
        body: body.into(),
    }
}

/// Seconds Slack's first answer asks herald to wait (`Retry-After`).
const SLACK_RETRY_AFTER: u64 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_incoming_webhook_recipe() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    // Answers as Slack does: "ok"; the first message meets a rate limit (429, Retry-After: 3);
    // once the webhook is removed from its app, 404 no_service. Arrival instants are kept.
    let revoked = Arc::new(AtomicBool::new(false));
    let arrivals: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let (gone, at) = (revoked.clone(), arrivals.clone());
    let slack = ApiReceiver::start(move |r, n| {
        at.lock().unwrap().push(Instant::now());
        if !slack_problems(r).is_empty() {
            text(400, "invalid_payload")
        } else if gone.load(Ordering::SeqCst) {
            text(404, "no_service")
        } else if n == 0 {
            let mut answer = text(429, "rate_limited");
            answer
                .headers
                .push(("retry-after".into(), SLACK_RETRY_AFTER.to_string()));
            answer
        } else {
            text(200, "ok")
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = recipe_config(
        &sim,
        dir.path(),
        "slack-webhook.yaml",
        ("https://hooks.slack.com", &slack.base),
        &[("SLACK_WEBHOOK_PATH", SLACK_PATH)],
        WITH_OLD_OBJECT,
    );
    let mut herald = Herald::start(dir.path(), &config);
    ready(&herald).await;
    for name in ["w1", "w2", "w3"] {
        raw.post(WIDGETS, &widget(name, json!({}), json!({"size": 1})))
            .await;
    }
    // Three fail at once: three messages, paced to one a second, the first refused once.
    set_status(
        &raw,
        "w1",
        json!({"phase": "Failed", "message": "<!channel> disk full & <https://x.example|click>"}),
    )
    .await;
    set_status(
        &raw,
        "w2",
        json!({"phase": "Failed", "message": "OOMKilled"}),
    )
    .await;
    set_status(
        &raw,
        "w3",
        json!({"phase": "Failed", "message": "crash loop"}),
    )
    .await;
    let got = slack.wait_for(4, "three alerts, one retried").await;
    let at = arrivals.lock().unwrap().clone();
    let retried = got[1..]
        .iter()
        .position(|r| r.body == got[0].body)
        .map(|i| i + 1)
        .expect("the refused message is sent again, unchanged");
    let gap = at[retried].duration_since(at[0]);
    assert!(
        gap >= Duration::from_secs(SLACK_RETRY_AFTER),
        "retried after {gap:?}, before Retry-After: {SLACK_RETRY_AFTER}"
    );
    // rateLimit 1/s: the three first sends span at least 2 s at herald; arrivals may bunch by
    // up to a second on a loaded machine.
    let firsts: Vec<Instant> = (0..4).filter(|&i| i != retried).map(|i| at[i]).collect();
    let span = firsts[2].duration_since(firsts[0]);
    assert!(span >= Duration::from_secs(1), "3 messages within {span:?}");
    let mut texts: Vec<String> = got
        .iter()
        .skip(1)
        .map(|r| r.json()["text"].as_str().unwrap().to_owned())
        .collect();
    texts.sort();
    assert_eq!(
        texts,
        [
            "Widget default/w1 failed: &lt;!channel&gt; disk full &amp; &lt;https://x.example|click&gt;",
            "Widget default/w2 failed: OOMKilled",
            "Widget default/w3 failed: crash loop",
        ]
    );
    let w1 = got[0].json();
    assert_eq!(
        w1["blocks"][0]["text"]["text"],
        ":red_circle: *Widget* `default/w1` is *Failed*\n>&lt;!channel&gt; disk full &amp; &lt;https://x.example|click&gt;"
    );
    // Still failed with a new message, and a recovery: nothing. Failed again: a message, the
    // next request only if the two updates before it sent nothing.
    set_status(
        &raw,
        "w1",
        json!({"phase": "Failed", "message": "disk still full"}),
    )
    .await;
    set_status(&raw, "w2", json!({"phase": "Running", "message": ""})).await;
    let again = set_status(
        &raw,
        "w2",
        json!({"phase": "Failed", "message": "OOMKilled again"}),
    )
    .await;
    let got = slack.wait_for(5, "w2 failed again").await;
    assert_eq!(
        got[4].json()["text"],
        "Widget default/w2 failed: OOMKilled again"
    );
    assert!(
        got[4].json()["blocks"][1]["elements"][0]["text"]
            .as_str()
            .unwrap()
            .contains(&id_of(&again, "updated")),
        "{:?}",
        got[4].json()
    );
    // A message that escaping makes five times longer: the section keeps to Slack's 3000
    // characters, cut between two `&amp;`, not inside one.
    set_status(&raw, "w1", json!({"phase": "Running", "message": ""})).await;
    set_status(
        &raw,
        "w1",
        json!({"phase": "Failed", "message": "&".repeat(2000)}),
    )
    .await;
    let got = slack.wait_for(6, "w1 failed with a long message").await;
    let section = got[5].json()["blocks"][0]["text"]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(section.chars().count() <= 3000, "{}", section.len());
    let (head, message) = section.split_once('>').unwrap();
    assert_eq!(head, ":red_circle: *Widget* `default/w1` is *Failed*\n");
    let cut = message.strip_suffix('…').unwrap();
    assert!(
        cut.len() > 2000 && cut.len() % 5 == 0 && cut == "&amp;".repeat(cut.len() / 5),
        "{message}"
    );
    // The webhook removed: 404 no_service dead-letters the message with Slack's answer.
    revoked.store(true, Ordering::SeqCst);
    set_status(&raw, "w3", json!({"phase": "Running", "message": ""})).await;
    let refused = set_status(&raw, "w3", json!({"phase": "Failed", "message": "gone"})).await;
    let letters = wait_dead_letters(&herald, "slack", 1).await;
    assert_eq!(letters[0]["id"], id_of(&refused, "updated"));
    assert_eq!(letters[0]["code"], "http_4xx");
    let error = letters[0]["error"].as_str().unwrap();
    assert!(
        error.starts_with("HTTP 404") && error.contains("no_service"),
        "{error}"
    );
    let got = slack.received();
    assert_eq!(got.len(), 7, "{got:#?}");
    assert_shapes(&got, slack_problems);
    assert_eq!(herald.terminate().await, Some(0));
}

// ---------------------------------------------------------------------------------------------
// Splunk: POST /services/collector/event (help.splunk.com, "Format events for HTTP Event
// Collector")

const HEC_TOKEN: &str = "8a2f6b1c-3d4e-4f50-9a6b-7c8d9e0f1a2b";

/// The event objects of a HEC request: JSON objects one after another (whitespace between them
/// allowed, no array), or what is wrong.
fn hec_events(body: &[u8]) -> Result<Vec<Value>, String> {
    let events = serde_json::Deserializer::from_slice(body)
        .into_iter::<Value>()
        .collect::<Result<Vec<Value>, _>>()
        .map_err(|e| format!("not concatenated JSON: {e}"))?;
    if events.is_empty() || events.iter().any(|e| !e.is_object()) {
        return Err("not a series of event objects".into());
    }
    Ok(events)
}

/// HEC's documented request: POST to the event endpoint, `Authorization: Splunk <token>`, each
/// event object with `time` (epoch seconds), `source`, `sourcetype`, `index` strings, an `event`,
/// and no other keys than HEC's (`host`, `fields`).
fn splunk_problems(r: &ApiRequest) -> Vec<String> {
    let mut p = Vec::new();
    rule(&mut p, r.method == "POST", "method POST");
    rule(&mut p, r.path == "/services/collector/event", "path");
    rule(
        &mut p,
        r.header("authorization") == Some(&format!("Splunk {HEC_TOKEN}")),
        "Authorization: Splunk <token>",
    );
    let events = match hec_events(&r.body) {
        Ok(events) => events,
        Err(e) => return vec![e],
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    for event in events {
        rule(
            &mut p,
            event["time"]
                .as_f64()
                .is_some_and(|t| t <= now && now - t < 600.0),
            "time: epoch seconds",
        );
        for key in ["source", "sourcetype", "index"] {
            rule(
                &mut p,
                event[key].as_str().is_some_and(|s| !s.is_empty()),
                "source, sourcetype, index: strings",
            );
        }
        rule(
            &mut p,
            event["event"].as_object().is_some_and(|e| !e.is_empty()),
            "event: an object",
        );
        rule(
            &mut p,
            event.as_object().unwrap().keys().all(|k| {
                [
                    "time",
                    "host",
                    "source",
                    "sourcetype",
                    "index",
                    "event",
                    "fields",
                ]
                .contains(&k.as_str())
            }),
            "only HEC's keys",
        );
    }
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn splunk_hec_recipe() {
    let sim = sim().await;
    let raw = Raw::new(&sim);
    raw.install_crd(&widgets_crd()).await;
    // Answers as HEC does: the first request carrying the update finds the indexers busy (503,
    // code 9), then Success; a malformed request gets 400 "Invalid data format" and fails the
    // test. Not the first request: a refused batch's events come back each on its own retry
    // schedule, so refusing the creations' batch would leave nothing to show batching with.
    let refused_at = Arc::new(AtomicUsize::new(usize::MAX));
    let refused = refused_at.clone();
    let splunk = ApiReceiver::start(move |r, n| {
        if !splunk_problems(r).is_empty() {
            ApiAnswer::json(400, json!({"text": "Invalid data format", "code": 6}))
        } else if String::from_utf8_lossy(&r.body).contains("\"op\":\"updated\"")
            && refused
                .compare_exchange(usize::MAX, n, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            ApiAnswer::json(503, json!({"text": "Server is busy", "code": 9}))
        } else {
            ApiAnswer::json(200, json!({"text": "Success", "code": 0}))
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = recipe_config(
        &sim,
        dir.path(),
        "splunk-hec.yaml",
        ("https://splunk.example.com:8088", &splunk.base),
        &[("SPLUNK_HEC_TOKEN", HEC_TOKEN)],
        "",
    );
    // One request at a time, so what is sent while a request is out waits and goes as a batch: with
    // the recipe's concurrency of 8 and a journal that hands events over as they become durable,
    // eight objects can leave as eight one-event batches, which would prove nothing about batching.
    assert!(config.contains("    batchMaxEvents: 100\n"), "{config}");
    let config = config.replace(
        "    batchMaxEvents: 100\n",
        "    batchMaxEvents: 100\n    concurrency: 1\n",
    );
    // Objects made before herald starts come in one burst (its first list): batches.
    let mut expected = Vec::new();
    for i in 1..=8 {
        let created = raw
            .post(
                WIDGETS,
                &widget(&format!("w{i}"), json!({}), json!({"size": i})),
            )
            .await
            .body;
        expected.push(id_of(&created, "created"));
    }
    let mut herald = Herald::start(dir.path(), &config);
    splunk.wait_for(1, "the first batch").await;
    let updated = merge(&raw, "w1", json!({"spec": {"size": 10}})).await;
    expected.push(id_of(&updated, "updated"));
    let reply = raw.delete(&format!("{WIDGETS}/w2")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let w2 = expected[1].split(':').next().unwrap().to_owned();
    // Every event in the accepted requests, the refused batch's again after the 503.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let (taken, events) = loop {
        let got = splunk.received();
        let refused = refused_at.load(Ordering::SeqCst);
        let taken: Vec<&ApiRequest> = got
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != refused)
            .map(|(_, r)| r)
            .collect();
        let events: Vec<Value> = taken
            .iter()
            .flat_map(|r| hec_events(&r.body).unwrap_or_else(|e| panic!("{e}: {r:?}")))
            .collect();
        if events.len() > expected.len() {
            break (taken.len(), events);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {} events: {got:#?}",
            events.len(),
            expected.len() + 1
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_shapes(&splunk.received(), splunk_problems);
    let ids: Vec<String> = events
        .iter()
        .map(|e| e["event"]["id"].as_str().unwrap().to_owned())
        .collect();
    // The deletion's resourceVersion is the API server's: checked by uid and op.
    let deleted: Vec<&String> = ids
        .iter()
        .filter(|id| id.starts_with(&format!("{w2}:")) && id.ends_with(":deleted"))
        .collect();
    assert_eq!(deleted.len(), 1, "{ids:?}");
    let mut sorted = ids.clone();
    sorted.retain(|id| !id.ends_with(":deleted"));
    sorted.sort();
    let mut want = expected.clone();
    want.sort();
    assert_eq!(sorted, want, "each change once");
    assert!(
        taken < ids.len(),
        "{taken} requests for {} events",
        ids.len()
    );
    // Per object, in order: w1 created before updated, w2 created before deleted.
    let position = |id: &str| ids.iter().position(|i| i == id).unwrap();
    assert!(position(&expected[0]) < position(&expected[8]), "{ids:?}");
    assert!(position(&expected[1]) < position(deleted[0]), "{ids:?}");
    // The refused batch came again, the same events to the byte.
    let refused = refused_at.load(Ordering::SeqCst);
    assert_ne!(refused, usize::MAX, "the update's batch was refused once");
    let refused = hec_events(&splunk.received()[refused].body).unwrap();
    for event in &refused {
        assert!(events.contains(event), "{event} retried as it was");
    }
    let first = &events[position(&expected[0])];
    assert_eq!(first["source"], "k8s://test/example.com/widgets");
    assert_eq!(first["sourcetype"], "herald:change");
    assert_eq!(first["index"], "k8s_audit");
    assert_eq!(first["event"]["subject"], "default/w1");
    assert_eq!(first["event"]["object"]["spec"]["size"], 1);
    let patch = events[position(&expected[8])]["event"]["patch"].clone();
    assert!(
        patch
            .as_array()
            .unwrap()
            .iter()
            .any(|op| op["path"] == "/spec/size" && op["value"] == 10),
        "{patch}"
    );
    assert_eq!(dead_letters(&herald.config, "splunk"), json!([]));
    assert_eq!(herald.terminate().await, Some(0));
    // `herald render` keeps the scheme and masks the token.
    let (code, stdout) = render_widget(&herald.config, dir.path(), "splunk", "{size: 9}");
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("authorization: Splunk ***"), "{stdout}");
    assert!(!stdout.contains(HEC_TOKEN), "{stdout}");
}
