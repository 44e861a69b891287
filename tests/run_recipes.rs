//! The recipes of docs/recipes/ end to end: each recipe's own config fragment, `herald run` against
//! the simulator, and a receiver in the test that checks every request against that API's
//! documented shape (method, path, headers, content type, body fields and types) and answers as the
//! API does, errors and rate limits included.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::api_receiver::{ApiAnswer, ApiReceiver, ApiRequest};
use crate::support::{Herald, Raw, free_port, id_of, sim, widget, widgets_crd};

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

/// A whole configuration around the recipe `file` (docs/recipes/): the simulator's Widgets, the
/// recipe's sinks with `url` pointed at `base` and each `${VAR}` secret read from a file holding
/// its value, a journal in `dir`, and an admin endpoint with a token (DLQ reads need it).
fn recipe_config(
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

/// `herald dlq list --json` of `sink` through the running herald.
fn dead_letters(config: &Path, sink: &str) -> Value {
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
async fn wait_dead_letters(herald: &Herald, sink: &str, n: usize) -> Value {
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
fn rule(problems: &mut Vec<String>, ok: bool, what: &str) {
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

/// Answers as GitHub does: 204, or 422 for an `event_type` over 100 characters; a request of
/// another shape gets 400 and fails the test.
fn github_answer(r: &ApiRequest) -> ApiAnswer {
    if !github_problems(r).is_empty() {
        return ApiAnswer::json(400, json!({"message": "Problems parsing JSON"}));
    }
    let body = r.json();
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
    let github = ApiReceiver::start(|r, _| github_answer(r)).await;
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
    let got = github.wait_for(3, "frontend.updated").await;
    let last = got.last().unwrap().json();
    assert_eq!(last["event_type"], "frontend.updated");
    assert_eq!(last["client_payload"]["id"], id_of(&updated, "updated"));
    assert_eq!(last["client_payload"]["generation"], 2);
    for request in &got {
        assert_eq!(
            github_problems(request),
            Vec::<String>::new(),
            "{request:?}"
        );
    }
    assert_eq!(herald.terminate().await, Some(0));
}
