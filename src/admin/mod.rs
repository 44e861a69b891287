//! The admin endpoint (`127.0.0.1:9464` by default): `/healthz` (herald's own loops only, so an API-server
//! outage never becomes a restart loop), `/readyz` (watches synced, CRDs present), `/metrics`
//! (Prometheus text) and `/status` (JSON). Entry point: [`serve`].

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use herald_sink_core::DeadLetter;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::delivery;
use crate::journal::Journal;
use crate::watch;

/// What the endpoint reports on.
#[derive(Clone)]
pub struct AdminState {
    /// Watchers with their labels.
    pub watchers: Vec<(String, Arc<watch::Health>)>,
    /// Sinks with their delivery counters.
    pub sinks: Vec<(String, Arc<delivery::Stats>)>,
    /// The journal.
    pub journal: Journal,
    /// Set while herald's own loops run; cleared when one of them died unexpectedly.
    pub alive: Arc<std::sync::atomic::AtomicBool>,
    /// The bearer token of the mutating calls; `None` disables them.
    pub token: Option<String>,
    /// The routes, so a replay only queues what the sink would have received.
    pub router: Arc<crate::route::Router>,
}

impl std::fmt::Debug for AdminState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminState")
            .field("watchers", &self.watchers.len())
            .field("sinks", &self.sinks.len())
            .finish()
    }
}

/// Serves the endpoint on `listener` until `stop` fires.
pub async fn serve(listener: tokio::net::TcpListener, state: AdminState, stop: CancellationToken) {
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/status", get(status))
        .route("/dlq/{sink}", get(dlq_list))
        .route("/dlq/{sink}/replay", axum::routing::post(dlq_replay))
        .route("/dlq/{sink}/purge", axum::routing::post(dlq_purge))
        .route("/replay", axum::routing::post(replay))
        .with_state(state);
    if let Err(error) = axum::serve(listener, app)
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
    {
        tracing::error!(message = "Admin endpoint failed.", %error);
    }
}

/// Binds the admin address.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

async fn healthz(State(s): State<AdminState>) -> Response {
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

async fn readyz(State(s): State<AdminState>) -> Response {
    let waiting: Vec<String> = s
        .watchers
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

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The Prometheus text exposition of every metric.
pub fn render(s: &AdminState) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, rows: Vec<(String, String)>| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in rows {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    let per_watch = |f: &dyn Fn(&watch::Health) -> u64| -> Vec<(String, String)> {
        s.watchers
            .iter()
            .map(|(l, h)| (format!("{{resource=\"{}\"}}", escape(l)), f(h).to_string()))
            .collect()
    };
    let per_sink = |f: &dyn Fn(&delivery::Stats) -> u64| -> Vec<(String, String)> {
        s.sinks
            .iter()
            .map(|(n, st)| (format!("{{sink=\"{}\"}}", escape(n)), f(st).to_string()))
            .collect()
    };
    family(
        "herald_observed_changes_total",
        "counter",
        "Changes that became events, per resource.",
        per_watch(&|h| h.emitted.load(Ordering::Relaxed)),
    );
    family(
        "herald_filtered_changes_total",
        "counter",
        "Changes observed but filtered out (event types, status-only updates).",
        per_watch(&|h| h.filtered.load(Ordering::Relaxed)),
    );
    family(
        "herald_watch_restarts_total",
        "counter",
        "Watch streams restarted (ends, errors, stalls).",
        per_watch(&|h| h.restarts.load(Ordering::Relaxed)),
    );
    family(
        "herald_watch_relists_total",
        "counter",
        "Relists (first start and after 410 Gone).",
        per_watch(&|h| h.relists.load(Ordering::Relaxed)),
    );
    family(
        "herald_resync_events_total",
        "counter",
        "Events synthesized by relists.",
        per_watch(&|h| h.resync_events.load(Ordering::Relaxed)),
    );
    family(
        "herald_watch_synced",
        "gauge",
        "1 when the resource is served and its watch is open.",
        per_watch(&|h| {
            u64::from(h.resolved.load(Ordering::Relaxed) && h.synced.load(Ordering::Relaxed))
        }),
    );
    family(
        "herald_sink_sent_events_total",
        "counter",
        "Events a sink acknowledged.",
        per_sink(&|st| st.delivered.load(Ordering::Relaxed)),
    );
    family(
        "herald_sink_retried_events_total",
        "counter",
        "Retries scheduled per sink.",
        per_sink(&|st| st.retried.load(Ordering::Relaxed)),
    );
    family(
        "herald_dead_lettered_events_total",
        "counter",
        "Events dead-lettered per sink.",
        per_sink(&|st| st.dead_lettered.load(Ordering::Relaxed)),
    );
    family(
        "herald_dead_letter_queue_size",
        "gauge",
        "Dead letters waiting in a sink's queue (recounted every few seconds).",
        per_sink(&|st| st.dead_letter_queue.load(Ordering::Relaxed)),
    );
    family(
        "herald_dead_letter_queue_full",
        "gauge",
        "1 while a sink's dead-letter queue is at journal.maxDeadLetters: failing events are held and retried.",
        per_sink(&|st| u64::from(st.dead_letter_queue_full.load(Ordering::Relaxed))),
    );
    family(
        "herald_dead_letters_forwarded_total",
        "counter",
        "Dead letters forwarded to the sink's deadLetterSink.",
        per_sink(&|st| st.forwarded.load(Ordering::Relaxed)),
    );
    family(
        "herald_dead_letters_forward_rejected_total",
        "counter",
        "Dead letters the deadLetterSink rejected; they stay in the queue.",
        per_sink(&|st| st.forward_failed.load(Ordering::Relaxed)),
    );
    family(
        "herald_sink_truncated_events_total",
        "counter",
        "Oversized events sent in their reference-only form (onOversize: reference).",
        per_sink(&|st| st.truncated.load(Ordering::Relaxed)),
    );
    family(
        "herald_sink_paused",
        "gauge",
        "1 while a sink fails everything and is being probed.",
        per_sink(&|st| u64::from(st.paused.load(Ordering::Relaxed))),
    );
    let head = s.journal.head();
    family(
        "herald_journal_lag_events",
        "gauge",
        "Journaled events a sink has not finished yet.",
        s.sinks
            .iter()
            .map(|(n, _)| {
                (
                    format!("{{sink=\"{}\"}}", escape(n)),
                    head.saturating_sub(s.journal.cursor(n).unwrap_or(head))
                        .to_string(),
                )
            })
            .collect(),
    );
    family(
        "herald_journal_oldest_undelivered_age_seconds",
        "gauge",
        "Age of the oldest event a sink has not finished (0 when caught up).",
        s.sinks
            .iter()
            .map(|(n, _)| {
                (
                    format!("{{sink=\"{}\"}}", escape(n)),
                    format!("{:.3}", oldest_age(&s.journal, n)),
                )
            })
            .collect(),
    );
    family(
        "herald_journal_backlog_events",
        "gauge",
        "Undelivered events of the slowest sink.",
        vec![(String::new(), s.journal.backlog().to_string())],
    );
    family(
        "herald_journal_appends_total",
        "counter",
        "Journal appends that carried events (events journaled per append shows how well watch batches fill).",
        vec![(String::new(), s.journal.appends().to_string())],
    );
    family(
        "herald_journal_size_bytes",
        "gauge",
        "The journal's size on disk.",
        vec![(
            String::new(),
            s.journal.size_on_disk().unwrap_or(0).to_string(),
        )],
    );
    let _ = writeln!(
        out,
        "# HELP herald_change_to_delivery_seconds From herald's observation of a change to the sink's acknowledgement."
    );
    let _ = writeln!(out, "# TYPE herald_change_to_delivery_seconds histogram");
    for (n, st) in &s.sinks {
        let (buckets, count, sum) = st.latency.snapshot();
        let sink = escape(n);
        for (bound, c) in buckets {
            let _ = writeln!(
                out,
                "herald_change_to_delivery_seconds_bucket{{sink=\"{sink}\",le=\"{bound}\"}} {c}"
            );
        }
        let _ = writeln!(
            out,
            "herald_change_to_delivery_seconds_bucket{{sink=\"{sink}\",le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            out,
            "herald_change_to_delivery_seconds_sum{{sink=\"{sink}\"}} {sum}"
        );
        let _ = writeln!(
            out,
            "herald_change_to_delivery_seconds_count{{sink=\"{sink}\"}} {count}"
        );
    }
    out
}

/// Seconds since herald observed the oldest event `sink` has not finished.
fn oldest_age(journal: &Journal, sink: &str) -> f64 {
    let Ok(cursor) = journal.cursor(sink) else {
        return 0.0;
    };
    let Ok(rows) = journal.read(sink, cursor, 1) else {
        return 0.0;
    };
    let Some((_, bytes)) = rows.first() else {
        return 0.0;
    };
    let time = serde_json::from_slice::<Value>(bytes).ok().and_then(|v| {
        v.get("time")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    });
    time.map_or(0.0, |t| {
        jiff::Timestamp::now()
            .duration_since(t)
            .as_secs_f64()
            .max(0.0)
    })
}

async fn metrics(State(s): State<AdminState>) -> Response {
    let mut r = render(&s).into_response();
    if let Ok(v) = "text/plain; version=0.0.4; charset=utf-8".parse() {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}

/// The `/status` document.
pub fn status_json(s: &AdminState) -> Value {
    let head = s.journal.head();
    let resources: Vec<Value> = s
        .watchers
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
        .sinks
        .iter()
        .map(|(n, st)| {
            let cursor = s.journal.cursor(n).unwrap_or(0);
            json!({
                "sink": n,
                "cursor": cursor,
                "lag": head.saturating_sub(cursor),
                "paused": st.paused.load(Ordering::Relaxed),
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
    json!({
        "resources": resources,
        "sinks": sinks,
        "journal": {"head": head, "backlog": s.journal.backlog(), "sizeBytes": s.journal.size_on_disk().unwrap_or(0)},
    })
}

async fn status(State(s): State<AdminState>) -> Response {
    let body = serde_json::to_vec_pretty(&status_json(&s)).unwrap_or_default();
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    r
}

/// Checks the bearer token of a mutating call: 403 when none is configured, 401 when it is wrong.
fn authorize(s: &AdminState, headers: &axum::http::HeaderMap) -> Result<(), Box<Response>> {
    let Some(token) = &s.token else {
        let r = (
            StatusCode::FORBIDDEN,
            "mutating calls are disabled: set admin.token\n",
        )
            .into_response();
        return Err(Box::new(r));
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

fn json_response(code: StatusCode, v: &Value) -> Response {
    let mut r = (code, serde_json::to_vec_pretty(v).unwrap_or_default()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    r
}

fn known_sink(s: &AdminState, sink: &str) -> Result<(), Box<Response>> {
    if s.sinks.iter().any(|(n, _)| n == sink) {
        Ok(())
    } else {
        Err(Box::new(
            (StatusCode::NOT_FOUND, format!("no sink named {sink:?}\n")).into_response(),
        ))
    }
}

async fn dlq_list(
    State(s): State<AdminState>,
    headers: axum::http::HeaderMap,
    axum::extract::Path(sink): axum::extract::Path<String>,
) -> Response {
    // Dead letters carry whole events: reading them needs the token too.
    if let Err(r) = authorize(&s, &headers).and_then(|()| known_sink(&s, &sink)) {
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
    authorize(s, headers)?;
    known_sink(s, sink)?;
    seqs_param(q)
}

async fn dlq_replay(
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

async fn dlq_purge(
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
async fn replay(
    State(s): State<AdminState>,
    headers: axum::http::HeaderMap,
    axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Response {
    let sink = q.get("sink").cloned().unwrap_or_default();
    if let Err(r) = authorize(&s, &headers).and_then(|()| known_sink(&s, &sink)) {
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
