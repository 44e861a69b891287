//! `/status`: the JSON document `herald status` prints for a running herald; start at
//! [`status_json`].

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{AdminState, oldest_age};

/// The `/status` document.
pub fn status_json(s: &AdminState) -> Value {
    let head = s.journal.head();
    let resources: Vec<Value> = s
        .registry
        .watchers()
        .iter()
        .map(|(l, h)| {
            json!({
                "resource": l,
                "served": h.resolved.load(Ordering::Relaxed),
                "synced": h.synced.load(Ordering::Relaxed),
                "events": h.emitted.load(Ordering::Relaxed),
                "relists": h.relists.load(Ordering::Relaxed),
                "restarts": h.restarts.load(Ordering::Relaxed),
            })
        })
        .collect();
    let sinks: Vec<Value> = s
        .registry
        .sinks()
        .iter()
        .map(|(n, st)| {
            let cursor = s.journal.cursor(n).unwrap_or(0);
            json!({
                "sink": n,
                "cursor": cursor,
                "lag": head.saturating_sub(cursor),
                "paused": st.paused.load(Ordering::Relaxed),
                "pausedReason": st.pause_reason(),
                "delivered": st.delivered.load(Ordering::Relaxed),
                "retried": st.retried.load(Ordering::Relaxed),
                "deadLettered": st.dead_lettered.load(Ordering::Relaxed),
                "deadLetterQueue": st.dead_letter_queue.load(Ordering::Relaxed),
                "deadLetterQueueFull": st.dead_letter_queue_full.load(Ordering::Relaxed),
                "forwarded": st.forwarded.load(Ordering::Relaxed),
                "oldestUndeliveredAgeSeconds": oldest_age(&s.journal, n),
                "latencyP99Seconds": st.latency.quantile(0.99),
            })
        })
        .collect();
    let mut doc = json!({
        "config": {
            "generation": s.config.generation(),
            "lastReloadError": s.config.last_error(),
            "lastReloadAt": s.config.last_at().map(|t| t.to_string()),
        },
        "resources": resources,
        "sinks": sinks,
        "journal": {
            "head": head,
            "backlog": s.journal.backlog(),
            "sizeBytes": s.journal.size_on_disk().unwrap_or(0),
            "retainedEvents": s.journal.retained_events(),
            "writeError": s.journal.write_failure().map(|f| f.to_string()),
        },
    });
    if let Some(l) = &s.leadership {
        doc["leaderElection"] = json!({
            "role": l.role(),
            "identity": l.identity,
            "holder": l.holder(),
            "lease": format!("{}/{}", l.namespace, l.lease),
            "transitions": l.transitions(),
            "positionsAt": l.positions_at(),
        });
    }
    doc
}

pub(super) async fn status(State(s): State<AdminState>) -> Response {
    let body = serde_json::to_vec_pretty(&status_json(&s)).unwrap_or_default();
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    r
}
