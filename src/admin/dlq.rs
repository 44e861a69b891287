//! The dead-letter and replay calls: `GET /dlq/<sink>`, `POST /dlq/<sink>/replay`,
//! `POST /dlq/<sink>/purge` and `POST /replay`. Every one needs the bearer token (DLQ reads too: dead
//! letters carry whole events).

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use herald_sink_core::DeadLetter;
use serde_json::{Value, json};

use super::AdminState;

/// What a call that needs the token does, for the 403 that says why it is disabled.
#[derive(Debug, Clone, Copy)]
pub(super) enum Call {
    /// `GET /dlq/<sink>`: dead letters carry whole events, payloads included.
    Read,
    /// Replays and purges.
    Mutating,
}

/// Checks the bearer token of a DLQ read or a mutating call: 403 when none is configured, 401 when
/// it is wrong.
pub(super) fn authorize(
    s: &AdminState,
    headers: &axum::http::HeaderMap,
    call: Call,
) -> Result<(), Box<Response>> {
    let Some(token) = &s.token else {
        let why = match call {
            Call::Read => {
                "reading dead letters needs the bearer token (they carry whole events, payloads included), and none is configured: set admin.token\n"
            }
            Call::Mutating => "mutating calls are disabled: set admin.token\n",
        };
        return Err(Box::new((StatusCode::FORBIDDEN, why).into_response()));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    // Compare without an early exit, so timing does not tell how much of a guess was right.
    let ok = given.is_some_and(|g| {
        g.len() == token.len()
            && g.bytes()
                .zip(token.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    });
    if ok {
        Ok(())
    } else {
        Err(Box::new(
            (
                StatusCode::UNAUTHORIZED,
                "a valid bearer token is required\n",
            )
                .into_response(),
        ))
    }
}

/// With leader election on, only the leader replays and purges (409 on a standby, naming the
/// holder): a standby delivers nothing, and its dead letters are not the leader's (ADR 0013).
fn leading(s: &AdminState) -> Result<(), Box<Response>> {
    match &s.leadership {
        Some(l) if !l.is_leader() => {
            let holder = l
                .holder()
                .map_or_else(|| "none yet".to_owned(), |h| format!("{h:?}"));
            Err(Box::new(
                (
                    StatusCode::CONFLICT,
                    format!(
                        "this replica ({:?}) stands by and delivers nothing: send replays and dead-letter calls to the leader (the Lease's holder: {holder})\n",
                        l.identity
                    ),
                )
                    .into_response(),
            ))
        }
        _ => Ok(()),
    }
}

fn json_response(code: StatusCode, v: &Value) -> Response {
    let mut r = (code, serde_json::to_vec_pretty(v).unwrap_or_default()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    r
}

/// A running sink, or one removed while herald runs whose dead letters are still kept (they stay
/// until purged, so they can still be listed and purged).
fn known_sink(s: &AdminState, sink: &str) -> Result<(), Box<Response>> {
    if s.registry.has_sink(sink) || s.journal.dead_letter_count(sink) > 0 {
        Ok(())
    } else {
        let names: Vec<String> = s.registry.sinks().into_iter().map(|(n, _)| n).collect();
        Err(Box::new(
            (
                StatusCode::NOT_FOUND,
                format!(
                    "no sink named {sink:?} (the sinks: {})\n",
                    if names.is_empty() {
                        "none".to_owned()
                    } else {
                        names.join(", ")
                    }
                ),
            )
                .into_response(),
        ))
    }
}

pub(super) async fn dlq_list(
    State(s): State<AdminState>,
    headers: axum::http::HeaderMap,
    axum::extract::Path(sink): axum::extract::Path<String>,
) -> Response {
    // Dead letters carry whole events: reading them needs the token too.
    if let Err(r) = authorize(&s, &headers, Call::Read).and_then(|()| known_sink(&s, &sink)) {
        return *r;
    }
    match s.journal.dead_letters(&sink, usize::MAX) {
        Ok(rows) => {
            // A record that does not decode is listed as `null`: it is there, and purging removes it.
            let items: Vec<Option<DeadLetter>> = rows
                .into_iter()
                .map(|(_, b)| DeadLetter::from_bytes(&b).ok())
                .collect();
            json_response(
                StatusCode::OK,
                &serde_json::to_value(items).unwrap_or_default(),
            )
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

type Query = axum::extract::Query<std::collections::HashMap<String, String>>;

/// `seqs=1,2,3`: only these dead letters (`None`: all); a malformed list is a 400.
fn seqs_param(
    q: &std::collections::HashMap<String, String>,
) -> Result<Option<Vec<u64>>, Box<Response>> {
    let Some(list) = q.get("seqs").filter(|l| !l.is_empty()) else {
        return Ok(None);
    };
    list.split(',')
        .map(|n| n.trim().parse::<u64>())
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
        .map_err(|_| {
            Box::new(
                (
                    StatusCode::BAD_REQUEST,
                    format!("seqs={list:?} is not a comma-separated list of sequence numbers\n"),
                )
                    .into_response(),
            )
        })
}

/// The checks every DLQ mutation makes (token, sink, `seqs`), and the selected dead letters.
fn dlq_selection(
    s: &AdminState,
    headers: &axum::http::HeaderMap,
    sink: &str,
    q: &std::collections::HashMap<String, String>,
) -> Result<Option<Vec<u64>>, Box<Response>> {
    authorize(s, headers, Call::Mutating)?;
    leading(s)?;
    known_sink(s, sink)?;
    seqs_param(q)
}

pub(super) async fn dlq_replay(
    State(s): State<AdminState>,
    headers: axum::http::HeaderMap,
    axum::extract::Path(sink): axum::extract::Path<String>,
    axum::extract::Query(q): Query,
) -> Response {
    let seqs = match dlq_selection(&s, &headers, &sink, &q) {
        Ok(seqs) => seqs,
        Err(r) => return *r,
    };
    match s.journal.dead_letters_to_replay(&sink, seqs.as_deref()) {
        Ok(queued) => json_response(StatusCode::OK, &json!({"queued": queued})),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

pub(super) async fn dlq_purge(
    State(s): State<AdminState>,
    headers: axum::http::HeaderMap,
    axum::extract::Path(sink): axum::extract::Path<String>,
    axum::extract::Query(q): Query,
) -> Response {
    let seqs = match dlq_selection(&s, &headers, &sink, &q) {
        Ok(seqs) => seqs,
        Err(r) => return *r,
    };
    match s.journal.dead_letters_remove(&sink, seqs.as_deref()) {
        Ok(n) => json_response(StatusCode::OK, &json!({"purged": n})),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// `POST /replay?sink=S&from=SEQ&since=TIME` (either or both): queues journaled events (within retention) for redelivery.
pub(super) async fn replay(
    State(s): State<AdminState>,
    headers: axum::http::HeaderMap,
    axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Response {
    let sink = q.get("sink").cloned().unwrap_or_default();
    if let Err(r) = authorize(&s, &headers, Call::Mutating)
        .and_then(|()| leading(&s))
        .and_then(|()| known_sink(&s, &sink))
    {
        return *r;
    }
    let from = match q.get("from").map(|f| f.parse::<u64>()) {
        None => None,
        Some(Ok(from)) => Some(from),
        Some(Err(_)) => {
            return (StatusCode::BAD_REQUEST, "from must be a sequence number\n").into_response();
        }
    };
    let since = match q.get("since").map(|t| t.parse::<jiff::Timestamp>()) {
        None => None,
        Some(Ok(since)) => Some(since),
        Some(Err(e)) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("since is not an RFC 3339 time: {e}\n"),
            )
                .into_response();
        }
    };
    if from.is_none() && since.is_none() {
        return (
            StatusCode::BAD_REQUEST,
            "from=SEQ or since=TIME is required\n",
        )
            .into_response();
    }
    let queued = match crate::delivery::queue_replays(
        &s.journal,
        &s.router,
        &sink,
        from.unwrap_or(1),
        since,
    ) {
        Ok(queued) => queued,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    };
    json_response(StatusCode::OK, &json!({"queued": queued}))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::to_bytes;

    use super::*;
    use crate::journal::{Journal, JournalConfig};

    /// A standby answers replays and dead-letter changes with 409 naming the leader; the same
    /// call on the leader goes through.
    #[tokio::test]
    async fn a_standby_refuses_replays_and_dead_letter_calls_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(JournalConfig::new(dir.path().join("journal"))).unwrap();
        journal.register_sink("out", true).unwrap();
        let leadership = Arc::new(crate::leader::Leadership::new(
            "herald-b".into(),
            "herald".into(),
            "default".into(),
        ));
        let state = AdminState {
            registry: Arc::new(crate::app::Registry::new(
                vec![],
                vec![("out".into(), Arc::default())],
            )),
            journal,
            alive: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            token: Some("t".into()),
            router: Arc::new(crate::route::Router::new(Vec::new())),
            config: Arc::default(),
            reload: None,
            leadership: Some(leadership.clone()),
        };
        let mut headers = axum::http::HeaderMap::new();
        headers.insert(header::AUTHORIZATION, "Bearer t".parse().unwrap());
        let query = |pairs: &[(&str, &str)]| {
            axum::extract::Query(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<std::collections::HashMap<_, _>>(),
            )
        };
        let calls = || async {
            vec![
                replay(
                    State(state.clone()),
                    headers.clone(),
                    query(&[("sink", "out"), ("from", "1")]),
                )
                .await,
                dlq_replay(
                    State(state.clone()),
                    headers.clone(),
                    axum::extract::Path("out".into()),
                    query(&[]),
                )
                .await,
                dlq_purge(
                    State(state.clone()),
                    headers.clone(),
                    axum::extract::Path("out".into()),
                    query(&[]),
                )
                .await,
            ]
        };
        leadership.role_for_test(false, "herald-a");
        for answer in calls().await {
            assert_eq!(answer.status(), StatusCode::CONFLICT);
            let body = to_bytes(answer.into_body(), 4096).await.unwrap();
            let body = String::from_utf8_lossy(&body);
            assert!(
                body.contains("(\"herald-b\") stands by")
                    && body.contains("the Lease's holder: \"herald-a\""),
                "{body}"
            );
        }
        leadership.role_for_test(true, "herald-b");
        for answer in calls().await {
            assert_eq!(answer.status(), StatusCode::OK);
        }
    }
}
