//! `/metrics`: the Prometheus text exposition of herald's counters; start at [`render`].

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::{AdminState, oldest_age};
use crate::{delivery, watch};

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

pub(super) async fn metrics(State(s): State<AdminState>) -> Response {
    let mut r = render(&s).into_response();
    if let Ok(v) = "text/plain; version=0.0.4; charset=utf-8".parse() {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}
