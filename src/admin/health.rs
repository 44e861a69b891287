//! `/healthz` (liveness: herald's own loops only, so an API-server outage never becomes a restart
//! loop) and `/readyz` (every resource served and its watch open). `/readyz` also names each paused
//! sink and why, without failing for it: herald keeps journaling, and a pod held unready by a
//! receiver's outage would stall a rollout for something herald rides out.
//!
//! A journal that cannot take writes (a full disk) fails both at once, with the path and the OS's
//! words: herald cannot make progress on its own then, and `herald run` exits 12 moments later.

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::AdminState;

/// `journal: cannot write to <path>: <cause>` once a journal write failed.
fn journal_line(s: &AdminState) -> Option<String> {
    s.journal.write_failure().map(|f| format!("journal: {f}"))
}

pub(super) async fn healthz(State(s): State<AdminState>) -> Response {
    if let Some(line) = journal_line(&s) {
        (StatusCode::SERVICE_UNAVAILABLE, format!("{line}\n")).into_response()
    } else if s.alive.load(Ordering::SeqCst) {
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
    let mut waiting: Vec<String> = s
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
    if let Some(line) = journal_line(&s) {
        waiting.insert(0, line);
    }
    let paused: String = s
        .registry
        .sinks()
        .iter()
        .filter_map(|(name, st)| {
            st.pause_reason()
                .map(|why| format!("sink {name}: paused, probing ({why})\n"))
        })
        .collect();
    if waiting.is_empty() {
        (StatusCode::OK, format!("ready\n{paused}")).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready:\n{}\n{paused}", waiting.join("\n")),
        )
            .into_response()
    }
}
