//! The `/_herald/` admin API: fault injection and state over HTTP, for tests in other languages and for
//! poking a running `herald sim` with curl. Never a Kubernetes path, so no client confuses the two.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Restart;
use super::faults::{DenyRule, FailRule, LatencyRule};
use super::http::{Shared, json_body};
use super::status::ApiError;

/// Body of `POST /_herald/restart`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RestartBody {
    #[serde(default = "yes")]
    keep_state: bool,
    #[serde(default)]
    reset_revision: bool,
    #[serde(default)]
    down_for: Option<String>,
}

fn yes() -> bool {
    true
}

fn parse<T: for<'de> Deserialize<'de>>(body: &[u8], what: &str) -> Result<T, ApiError> {
    let text = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        body
    };
    serde_json::from_slice(text).map_err(|e| ApiError::bad_request(format!("invalid {what}: {e}")))
}

fn ok(extra: Value) -> Response {
    let mut body = json!({"ok": true});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    json_body(&body)
}

/// Answers one admin request; `rest` is the path after `/_herald/`.
pub(crate) async fn handle(
    shared: &Arc<Shared>,
    method: &Method,
    rest: &str,
    body: &[u8],
) -> Response {
    match route(shared, method, rest, body) {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

fn route(
    shared: &Arc<Shared>,
    method: &Method,
    rest: &str,
    body: &[u8],
) -> Result<Response, ApiError> {
    let post = *method == Method::POST;
    match (rest.trim_end_matches('/'), post) {
        ("state", false) if *method == Method::GET => {
            let state = shared.store.read();
            Ok(json_body(&json!({
                "resourceVersion": state.rv,
                "compacted": state.compacted,
                "historyLength": state.history.len(),
                "openWatches": shared.open_watches.load(std::sync::atomic::Ordering::SeqCst),
                "faults": shared.faults.describe(),
            })))
        }
        ("compact", true) => {
            let rv = shared.store.write(|s| {
                s.compact();
                s.rv
            });
            Ok(ok(json!({"compacted": rv})))
        }
        ("drop-watches", true) => {
            shared.drop_watches();
            Ok(ok(json!({})))
        }
        ("stall-watches", true) => {
            shared.faults.stall_watches(true);
            Ok(ok(json!({})))
        }
        ("resume-watches", true) => {
            shared.faults.stall_watches(false);
            Ok(ok(json!({})))
        }
        ("garble-watches", true) => {
            shared.faults.garble_watches(true);
            Ok(ok(json!({})))
        }
        ("mend-watches", true) => {
            shared.faults.garble_watches(false);
            Ok(ok(json!({})))
        }
        ("fail", true) => {
            let rule: FailRule = parse(body, "fail rule")?;
            shared.faults.add_fail(rule);
            Ok(ok(json!({})))
        }
        ("deny", true) => {
            let rule: DenyRule = parse(body, "deny rule")?;
            shared.faults.add_deny(rule);
            Ok(ok(json!({})))
        }
        ("latency", true) => {
            let rule: LatencyRule = parse(body, "latency rule")?;
            shared.faults.add_latency(rule);
            Ok(ok(json!({})))
        }
        ("faults", false) if *method == Method::DELETE => {
            shared.faults.clear();
            Ok(ok(json!({})))
        }
        ("faults", false) if *method == Method::GET => Ok(json_body(&shared.faults.describe())),
        ("restart", true) => {
            let b: RestartBody = parse(body, "restart request")?;
            let down_for = match b.down_for.as_deref() {
                None => Duration::ZERO,
                Some(d) => humantime::parse_duration(d)
                    .map_err(|e| ApiError::bad_request(format!("invalid downFor {d:?}: {e}")))?,
            };
            shared.request_restart(Restart {
                keep_state: b.keep_state,
                reset_revision: b.reset_revision,
                down_for,
                done: None,
            });
            Ok((
                StatusCode::ACCEPTED,
                json_body(&json!({"ok": true, "restarting": true})),
            )
                .into_response())
        }
        _ => Err(ApiError::path_not_found()),
    }
}
