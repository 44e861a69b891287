//! `/healthz` (liveness: herald's own loops only, so an API-server outage never becomes a restart
//! loop) and `/readyz` (every resource served and its watch open; otherwise why: the API server
//! unreachable or answering garbage, the CRD missing, file descriptors exhausted). `/readyz` also names each paused
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
use crate::telemetry::fds;
use crate::watch;

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
    let mut waiting: Vec<String> = fds::recent_exhaustion().into_iter().collect();
    waiting.extend(
        s.registry
            .watchers()
            .iter()
            .filter_map(|(label, h)| watcher_line(label, h)),
    );
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

/// Why a watcher is not ready, `None` when it is: what the API server's last failure was when
/// there is one (unreachable, unreadable answers, an error status, no descriptors), the missing
/// CRD only when the server answered that it does not serve the resource.
fn watcher_line(label: &str, h: &watch::Health) -> Option<String> {
    let resolved = h.resolved.load(Ordering::SeqCst);
    if resolved && h.synced.load(Ordering::SeqCst) {
        return None;
    }
    Some(match (resolved, h.problem()) {
        (false, Some(problem)) => format!("{label}: {problem}"),
        (false, None) if h.unserved.load(Ordering::SeqCst) => {
            format!("{label}: not served (CRD missing?)")
        }
        (false, None) => format!("{label}: waiting for the API server's answer"),
        (true, Some(problem)) => format!("{label}: not synced: {problem}"),
        (true, None) => format!("{label}: not synced"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watcher_is_reported_as_missing_its_crd_only_once_the_server_said_so() {
        let h = watch::Health::default();
        assert_eq!(
            watcher_line("w", &h).unwrap(),
            "w: waiting for the API server's answer"
        );
        h.unserved.store(true, Ordering::SeqCst);
        assert_eq!(
            watcher_line("w", &h).unwrap(),
            "w: not served (CRD missing?)"
        );
        h.unserved.store(false, Ordering::SeqCst);
        h.resolved.store(true, Ordering::SeqCst);
        assert_eq!(watcher_line("w", &h).unwrap(), "w: not synced");
        h.synced.store(true, Ordering::SeqCst);
        assert_eq!(watcher_line("w", &h), None);
    }
}
