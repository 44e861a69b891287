//! `/healthz` (liveness: herald's own loops only, so an API-server outage never becomes a restart
//! loop) and `/readyz` (every resource served and its watch open).

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::AdminState;

pub(super) async fn healthz(State(s): State<AdminState>) -> Response {
    if s.alive.load(Ordering::SeqCst) {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "a herald loop stopped unexpectedly\n",
        )
            .into_response()
    }
}

pub(super) async fn readyz(State(s): State<AdminState>) -> Response {
    let waiting: Vec<String> = s
        .registry
        .watchers()
        .iter()
        .filter(|(_, h)| !h.resolved.load(Ordering::SeqCst) || !h.synced.load(Ordering::SeqCst))
        .map(|(label, h)| {
            if h.resolved.load(Ordering::SeqCst) {
                format!("{label}: not synced")
            } else {
                format!("{label}: not served (CRD missing?)")
            }
        })
        .collect();
    if waiting.is_empty() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready:\n{}\n", waiting.join("\n")),
        )
            .into_response()
    }
}
