//! `/metrics`: the Prometheus text exposition of herald's counters; start at [`render`].

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use herald_sink_core::MetricName;

use super::{AdminState, oldest_age};
use crate::{delivery, watch};

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// [`delivery::Histogram::snapshot`]: cumulative buckets, count, sum.
type Snapshot = (Vec<(f64, u64)>, u64, f64);

/// The samples of one metric family.
enum Samples {
    /// One value per row, with the value of the metric's one label (none for an unlabelled metric).
    Values(Vec<(Option<String>, String)>),
    /// A histogram per row: cumulative buckets, count and sum (Prometheus semantics).
    Histograms(Vec<(String, Snapshot)>),
}

fn load(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

fn flag(flag: &AtomicBool) -> u64 {
    u64::from(flag.load(Ordering::Relaxed))
}

/// Where each metric's values come from: one arm per [`MetricName`], so a new name does not
/// compile until it is exported.
fn samples(s: &AdminState, metric: MetricName) -> Samples {
    let per_watch = |f: fn(&watch::Health) -> u64| {
        Samples::Values(
            s.registry
                .watchers()
                .iter()
                .map(|(l, h)| (Some(l.clone()), f(h).to_string()))
                .collect(),
        )
    };
    let per_sink = |f: &dyn Fn(&str, &delivery::Stats) -> String| {
        Samples::Values(
            s.registry
                .sinks()
                .iter()
                .map(|(n, st)| (Some(n.clone()), f(n, st)))
                .collect(),
        )
    };
    let count =
        |f: fn(&delivery::Stats) -> u64| move |_: &str, st: &delivery::Stats| f(st).to_string();
    let one = |value: u64| Samples::Values(vec![(None, value.to_string())]);
    match metric {
        MetricName::ObservedChangesTotal => per_watch(|h| load(&h.emitted)),
        MetricName::FilteredChangesTotal => per_watch(|h| load(&h.filtered)),
        MetricName::FilterErrorsTotal => per_watch(|h| load(&h.filter_errors)),
        MetricName::WatchRestartsTotal => per_watch(|h| load(&h.restarts)),
        MetricName::WatchRelistsTotal => per_watch(|h| load(&h.relists)),
        MetricName::ResyncEventsTotal => per_watch(|h| load(&h.resync_events)),
        MetricName::WatchSynced => per_watch(|h| {
            u64::from(h.resolved.load(Ordering::Relaxed) && h.synced.load(Ordering::Relaxed))
        }),
        MetricName::SinkSentEventsTotal => per_sink(&count(|st| load(&st.delivered))),
        MetricName::RouteFilterErrorsTotal => per_sink(&count(|st| load(&st.route_filter_errors))),
        MetricName::SinkRetriedEventsTotal => per_sink(&count(|st| load(&st.retried))),
        MetricName::DeadLetteredEventsTotal => per_sink(&count(|st| load(&st.dead_lettered))),
        MetricName::DeadLetterQueueSize => per_sink(&count(|st| load(&st.dead_letter_queue))),
        MetricName::DeadLetterQueueFull => per_sink(&count(|st| flag(&st.dead_letter_queue_full))),
        MetricName::DeadLettersForwardedTotal => per_sink(&count(|st| load(&st.forwarded))),
        MetricName::DeadLettersForwardRejectedTotal => {
            per_sink(&count(|st| load(&st.forward_failed)))
        }
        MetricName::SinkTruncatedEventsTotal => per_sink(&count(|st| load(&st.truncated))),
        MetricName::SinkDebouncedEventsTotal => per_sink(&count(|st| load(&st.debounced))),
        MetricName::SinkPaused => per_sink(&count(|st| flag(&st.paused))),
        MetricName::JournalLagEvents => {
            let head = s.journal.head();
            per_sink(&|n, _| {
                head.saturating_sub(s.journal.cursor(n).unwrap_or(head))
                    .to_string()
            })
        }
        MetricName::JournalOldestUndeliveredAgeSeconds => {
            per_sink(&|n, _| format!("{:.3}", oldest_age(&s.journal, n)))
        }
        MetricName::JournalBacklogEvents => one(s.journal.backlog()),
        MetricName::JournalAppendsTotal => one(s.journal.appends()),
        MetricName::JournalSizeBytes => one(s.journal.size_on_disk().unwrap_or(0)),
        MetricName::JournalRetainedEvents => one(s.journal.retained_events()),
        MetricName::JournalWriteErrorsTotal => one(s.journal.write_errors()),
        MetricName::JournalWritable => one(u64::from(s.journal.write_failure().is_none())),
        MetricName::OpenFilesExhaustedTotal => one(crate::telemetry::fds::exhausted_total()),
        MetricName::ConfigReloadFailuresTotal => one(s.config.failures()),
        MetricName::ConfigLastReloadSuccess => one(u64::from(s.config.last_ok())),
        MetricName::LeaderElectionLeader => Samples::Values(
            s.leadership
                .iter()
                .map(|l| {
                    (
                        Some(l.holder().unwrap_or_default()),
                        u64::from(l.is_leader()).to_string(),
                    )
                })
                .collect(),
        ),
        MetricName::LeaderElectionStandbyStalledSinks => Samples::Values(
            s.leadership
                .iter()
                .map(|l| (None, l.stalled_sinks().to_string()))
                .collect(),
        ),
        MetricName::ChangeToDeliverySeconds => Samples::Histograms(
            s.registry
                .sinks()
                .iter()
                .map(|(n, st)| (n.clone(), st.latency.snapshot()))
                .collect(),
        ),
    }
}

/// The Prometheus text exposition of every metric, in [`MetricName::ALL`]'s order.
pub fn render(s: &AdminState) -> String {
    let mut out = String::new();
    for metric in MetricName::ALL {
        let name = metric.as_str();
        let _ = writeln!(out, "# HELP {name} {}", metric.description());
        let _ = writeln!(out, "# TYPE {name} {}", metric.kind().as_str());
        // Every family has at most one label of its own (`MetricName::labels`).
        let label = |value: &str| match metric.labels().first() {
            Some(label) => format!("{label}=\"{}\"", escape(value)),
            None => String::new(),
        };
        match samples(s, metric) {
            Samples::Values(rows) => {
                for (value_of_label, value) in rows {
                    let labels = value_of_label
                        .map(|v| format!("{{{}}}", label(&v)))
                        .unwrap_or_default();
                    let _ = writeln!(out, "{name}{labels} {value}");
                }
            }
            Samples::Histograms(rows) => {
                for (value_of_label, (buckets, count, sum)) in rows {
                    let l = label(&value_of_label);
                    for (bound, c) in buckets {
                        let _ = writeln!(out, "{name}_bucket{{{l},le=\"{bound}\"}} {c}");
                    }
                    let _ = writeln!(out, "{name}_bucket{{{l},le=\"+Inf\"}} {count}");
                    let _ = writeln!(out, "{name}_sum{{{l}}} {sum}");
                    let _ = writeln!(out, "{name}_count{{{l}}} {count}");
                }
            }
        }
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::journal::{Journal, JournalConfig};

    /// One watcher and two sinks with distinct counts, so every family has samples to show.
    fn state(dir: &std::path::Path) -> AdminState {
        let journal = Journal::open(JournalConfig::new(dir.join("journal"))).unwrap();
        let health = Arc::new(watch::Health::default());
        health.emitted.store(3, Ordering::Relaxed);
        health.filtered.store(1, Ordering::Relaxed);
        health.restarts.store(2, Ordering::Relaxed);
        health.relists.store(1, Ordering::Relaxed);
        health.resync_events.store(5, Ordering::Relaxed);
        health.resolved.store(true, Ordering::Relaxed);
        health.synced.store(true, Ordering::Relaxed);
        let out = Arc::new(delivery::Stats::default());
        out.delivered.store(3, Ordering::Relaxed);
        out.retried.store(4, Ordering::Relaxed);
        out.dead_lettered.store(1, Ordering::Relaxed);
        out.dead_letter_queue.store(1, Ordering::Relaxed);
        out.forwarded.store(6, Ordering::Relaxed);
        out.forward_failed.store(7, Ordering::Relaxed);
        out.truncated.store(8, Ordering::Relaxed);
        out.debounced.store(9, Ordering::Relaxed);
        out.latency.observe(Duration::from_millis(3));
        out.latency.observe(Duration::from_millis(40));
        out.latency.observe(Duration::from_secs(60));
        let hook = Arc::new(delivery::Stats::default());
        hook.paused.store(true, Ordering::Relaxed);
        hook.dead_letter_queue_full.store(true, Ordering::Relaxed);
        AdminState {
            registry: Arc::new(crate::app::Registry::new(
                vec![("Widget.example.com".into(), health)],
                vec![("out".into(), out), ("hook\"x".into(), hook)],
            )),
            journal,
            alive: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            token: None,
            router: Arc::new(crate::route::Router::new(Vec::new())),
            config: Arc::default(),
            reload: None,
            leadership: Some(Arc::new(crate::leader::Leadership::new(
                "herald-1".into(),
                "herald".into(),
                "default".into(),
            ))),
        }
    }

    /// The family a sample line belongs to, and its label names in order.
    fn parse_sample(line: &str) -> (&str, Vec<&str>) {
        let name_end = line.find(['{', ' ']).unwrap();
        let name = &line[..name_end];
        let labels = match line[name_end..].strip_prefix('{') {
            Some(rest) => rest[..rest.find('}').unwrap()]
                .split("\",")
                .map(|pair| pair.split_once('=').unwrap().0)
                .collect(),
            None => Vec::new(),
        };
        (name, labels)
    }

    /// Every `MetricName` is rendered with its HELP, TYPE and labels, in order, and every line
    /// `/metrics` writes belongs to one of them: nothing is declared and not exported, nothing is
    /// exported and not declared.
    #[tokio::test]
    async fn renders_every_metric_name_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let text = render(&state(dir.path()));
        let mut families: Vec<(String, String, String)> = Vec::new();
        let mut samples: Vec<(String, usize)> = Vec::new();
        let mut help = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, text) = rest.split_once(' ').unwrap();
                help = Some((name.to_owned(), text.to_owned()));
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                let (help_name, help_text) = help.take().expect("HELP before TYPE");
                assert_eq!(help_name, name);
                families.push((name.to_owned(), kind.to_owned(), help_text));
                samples.push((name.to_owned(), 0));
            } else {
                let (family, kind, _) = families.last().expect("a sample after its TYPE");
                let metric = MetricName::ALL
                    .into_iter()
                    .find(|m| m.as_str() == family)
                    .unwrap_or_else(|| panic!("{family} is not a MetricName"));
                let (name, labels) = parse_sample(line);
                let mut want: Vec<&str> = metric.labels().to_vec();
                if kind == "histogram" {
                    let suffix = name.strip_prefix(family.as_str()).unwrap();
                    assert!(["_bucket", "_sum", "_count"].contains(&suffix), "{line}");
                    if suffix == "_bucket" {
                        want.push("le");
                    }
                } else {
                    assert_eq!(name, family, "{line}");
                }
                assert_eq!(labels, want, "{line}");
                samples.last_mut().unwrap().1 += 1;
            }
        }
        let declared: Vec<(String, String, String)> = MetricName::ALL
            .iter()
            .map(|m| {
                (
                    m.as_str().to_owned(),
                    m.kind().as_str().to_owned(),
                    m.description().to_owned(),
                )
            })
            .collect();
        assert_eq!(families, declared);
        for (family, n) in samples {
            assert!(n > 0, "{family} has no samples");
        }
    }

    #[tokio::test]
    async fn label_values_are_escaped() {
        let dir = tempfile::tempdir().unwrap();
        let text = render(&state(dir.path()));
        assert!(
            text.contains("herald_sink_paused{sink=\"hook\\\"x\"} 1\n"),
            "{text}"
        );
    }

    /// docs/operations.md's metrics table lists exactly the exported metrics, with their labels
    /// and types.
    #[test]
    fn the_operations_guide_lists_every_metric() {
        const DOCS: &str = include_str!("../../docs/operations.md");
        let mut documented: Vec<(String, String, String)> = Vec::new();
        let table = DOCS
            .lines()
            .skip_while(|l| !l.starts_with("| metric | type |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'));
        for row in table {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let (metrics, kind) = (cells[1], cells[2]);
            for name in metrics.split('`').skip(1).step_by(2) {
                let (name, labels) = match name.split_once('{') {
                    Some((name, labels)) => (name, labels.trim_end_matches('}')),
                    None => (name, ""),
                };
                documented.push((name.to_owned(), labels.to_owned(), kind.to_owned()));
            }
        }
        let mut declared: Vec<(String, String, String)> = MetricName::ALL
            .iter()
            .map(|m| {
                (
                    m.as_str().to_owned(),
                    m.labels().join(","),
                    m.kind().as_str().to_owned(),
                )
            })
            .collect();
        documented.sort();
        declared.sort();
        assert_eq!(documented, declared);
    }

    /// The exposition, byte for byte, as herald wrote it before the names moved into
    /// `MetricName` (only the store's size varies from run to run).
    const RENDERED: &str = r#"# HELP herald_observed_changes_total Changes that became events, per resource.
# TYPE herald_observed_changes_total counter
herald_observed_changes_total{resource="Widget.example.com"} 3
# HELP herald_filtered_changes_total Changes observed but filtered out (event types, status-only updates, ignored fields, changed, when).
# TYPE herald_filtered_changes_total counter
herald_filtered_changes_total{resource="Widget.example.com"} 1
# HELP herald_filter_errors_total Evaluations of a resource's `when` that failed (handled by its onError).
# TYPE herald_filter_errors_total counter
herald_filter_errors_total{resource="Widget.example.com"} 0
# HELP herald_watch_restarts_total Watch streams restarted (ends, errors, stalls).
# TYPE herald_watch_restarts_total counter
herald_watch_restarts_total{resource="Widget.example.com"} 2
# HELP herald_watch_relists_total Relists (first start and after 410 Gone).
# TYPE herald_watch_relists_total counter
herald_watch_relists_total{resource="Widget.example.com"} 1
# HELP herald_resync_events_total Events synthesized by relists.
# TYPE herald_resync_events_total counter
herald_resync_events_total{resource="Widget.example.com"} 5
# HELP herald_watch_synced 1 when the resource is served and its watch is open.
# TYPE herald_watch_synced gauge
herald_watch_synced{resource="Widget.example.com"} 1
# HELP herald_sink_sent_events_total Events a sink acknowledged.
# TYPE herald_sink_sent_events_total counter
herald_sink_sent_events_total{sink="out"} 3
herald_sink_sent_events_total{sink="hook\"x"} 0
# HELP herald_route_filter_errors_total Evaluations of a route's `when` that failed for this sink (handled by its onError).
# TYPE herald_route_filter_errors_total counter
herald_route_filter_errors_total{sink="out"} 0
herald_route_filter_errors_total{sink="hook\"x"} 0
# HELP herald_sink_retried_events_total Retries scheduled per sink.
# TYPE herald_sink_retried_events_total counter
herald_sink_retried_events_total{sink="out"} 4
herald_sink_retried_events_total{sink="hook\"x"} 0
# HELP herald_dead_lettered_events_total Events dead-lettered per sink.
# TYPE herald_dead_lettered_events_total counter
herald_dead_lettered_events_total{sink="out"} 1
herald_dead_lettered_events_total{sink="hook\"x"} 0
# HELP herald_dead_letter_queue_size Dead letters waiting in a sink's queue (recounted every few seconds).
# TYPE herald_dead_letter_queue_size gauge
herald_dead_letter_queue_size{sink="out"} 1
herald_dead_letter_queue_size{sink="hook\"x"} 0
# HELP herald_dead_letter_queue_full 1 while a sink's dead-letter queue is at journal.maxDeadLetters: failing events are held and retried.
# TYPE herald_dead_letter_queue_full gauge
herald_dead_letter_queue_full{sink="out"} 0
herald_dead_letter_queue_full{sink="hook\"x"} 1
# HELP herald_dead_letters_forwarded_total Dead letters forwarded to the sink's deadLetterSink.
# TYPE herald_dead_letters_forwarded_total counter
herald_dead_letters_forwarded_total{sink="out"} 6
herald_dead_letters_forwarded_total{sink="hook\"x"} 0
# HELP herald_dead_letters_forward_rejected_total Dead letters the deadLetterSink rejected; they stay in the queue.
# TYPE herald_dead_letters_forward_rejected_total counter
herald_dead_letters_forward_rejected_total{sink="out"} 7
herald_dead_letters_forward_rejected_total{sink="hook\"x"} 0
# HELP herald_sink_truncated_events_total Oversized events sent in their reference-only form (onOversize: reference).
# TYPE herald_sink_truncated_events_total counter
herald_sink_truncated_events_total{sink="out"} 8
herald_sink_truncated_events_total{sink="hook\"x"} 0
# HELP herald_sink_debounced_events_total Events replaced by a newer event of their object within the sink's debounce: acknowledged, not sent.
# TYPE herald_sink_debounced_events_total counter
herald_sink_debounced_events_total{sink="out"} 9
herald_sink_debounced_events_total{sink="hook\"x"} 0
# HELP herald_sink_paused 1 while a sink fails everything and is being probed.
# TYPE herald_sink_paused gauge
herald_sink_paused{sink="out"} 0
herald_sink_paused{sink="hook\"x"} 1
# HELP herald_journal_lag_events Journaled events a sink has not finished yet.
# TYPE herald_journal_lag_events gauge
herald_journal_lag_events{sink="out"} 0
herald_journal_lag_events{sink="hook\"x"} 0
# HELP herald_journal_oldest_undelivered_age_seconds Age of the oldest event a sink has not finished (0 when caught up).
# TYPE herald_journal_oldest_undelivered_age_seconds gauge
herald_journal_oldest_undelivered_age_seconds{sink="out"} 0.000
herald_journal_oldest_undelivered_age_seconds{sink="hook\"x"} 0.000
# HELP herald_journal_backlog_events Undelivered events of the slowest sink.
# TYPE herald_journal_backlog_events gauge
herald_journal_backlog_events 0
# HELP herald_journal_appends_total Journal appends that carried events (events journaled per append shows how well watch batches fill).
# TYPE herald_journal_appends_total counter
herald_journal_appends_total 0
# HELP herald_journal_size_bytes The journal's size on disk.
# TYPE herald_journal_size_bytes gauge
herald_journal_size_bytes SIZE
# HELP herald_journal_retained_events Events the journal holds (not yet delivered everywhere, or kept by retain); the size on disk divided by it is the bytes per retained event.
# TYPE herald_journal_retained_events gauge
herald_journal_retained_events 0
# HELP herald_journal_write_errors_total Journal writes that failed (full disk, I/O error) or were refused after such a failure.
# TYPE herald_journal_write_errors_total counter
herald_journal_write_errors_total 0
# HELP herald_journal_writable 1 while the journal takes writes; 0 once a write failed (herald run then exits 12).
# TYPE herald_journal_writable gauge
herald_journal_writable 1
# HELP herald_change_to_delivery_seconds From herald's observation of a change to the sink's acknowledgement.
# TYPE herald_change_to_delivery_seconds histogram
herald_change_to_delivery_seconds_bucket{sink="out",le="0.001"} 0
herald_change_to_delivery_seconds_bucket{sink="out",le="0.0025"} 0
herald_change_to_delivery_seconds_bucket{sink="out",le="0.005"} 1
herald_change_to_delivery_seconds_bucket{sink="out",le="0.01"} 1
herald_change_to_delivery_seconds_bucket{sink="out",le="0.025"} 1
herald_change_to_delivery_seconds_bucket{sink="out",le="0.05"} 2
herald_change_to_delivery_seconds_bucket{sink="out",le="0.1"} 2
herald_change_to_delivery_seconds_bucket{sink="out",le="0.25"} 2
herald_change_to_delivery_seconds_bucket{sink="out",le="0.5"} 2
herald_change_to_delivery_seconds_bucket{sink="out",le="1"} 2
herald_change_to_delivery_seconds_bucket{sink="out",le="2.5"} 2
herald_change_to_delivery_seconds_bucket{sink="out",le="10"} 2
herald_change_to_delivery_seconds_bucket{sink="out",le="+Inf"} 3
herald_change_to_delivery_seconds_sum{sink="out"} 60.043
herald_change_to_delivery_seconds_count{sink="out"} 3
herald_change_to_delivery_seconds_bucket{sink="hook\"x",le="0.001"} 0
herald_change_to_delivery_seconds_bucket{sink="hook\"x",le="0.0025"} 0
herald_change_to_delivery_seconds_bucket{sink="hook\"x",le="0.005"} 0
herald_change_to_delivery_seconds_bucket{sink="hook\"x",le="0.01"} 0
herald_change_to_delivery_seconds_bucket{sink="hook\"x",le="0.025"} 0
herald_change_to_delivery_seconds_bucket{sink="hook\"x",le="0.05"} 0
herald_change_to_delivery_seconds_bucket{sink="hook\"x",le="0.1"} 0
herald_change_to_delivery_seconds_bucket{sink="hook\"x",le="0.25"} 0
herald_change_to_delivery_seconds_bucket{sink="hook\"x",le="0.5"} 0
herald_change_to_delivery_seconds_bucket{sink="hook\"x",le="1"} 0
herald_change_to_delivery_seconds_bucket{sink="hook\"x",le="2.5"} 0
herald_change_to_delivery_seconds_bucket{sink="hook\"x",le="10"} 0
herald_change_to_delivery_seconds_bucket{sink="hook\"x",le="+Inf"} 0
herald_change_to_delivery_seconds_sum{sink="hook\"x"} 0
herald_change_to_delivery_seconds_count{sink="hook\"x"} 0
# HELP herald_open_files_exhausted_total Connections, files and accepts that failed for want of a file descriptor (EMFILE, ENFILE).
# TYPE herald_open_files_exhausted_total counter
herald_open_files_exhausted_total N
# HELP herald_config_reload_failures_total Configuration reloads refused (invalid file, a change that needs a restart) or applied only in part.
# TYPE herald_config_reload_failures_total counter
herald_config_reload_failures_total 0
# HELP herald_config_last_reload_success 1 while the last configuration reload was applied (or none was tried); 0 after a refused one.
# TYPE herald_config_last_reload_success gauge
herald_config_last_reload_success 1
# HELP herald_leader_election_leader 1 while this replica holds the leader election Lease and delivers, 0 while it stands by; holder is the Lease's holder as last read.
# TYPE herald_leader_election_leader gauge
herald_leader_election_leader{holder=""} 0
# HELP herald_leader_election_standby_stalled_sinks On a standby, the sinks whose cursor the leader's published positions have not moved for ten publish intervals while events wait above it.
# TYPE herald_leader_election_standby_stalled_sinks gauge
herald_leader_election_standby_stalled_sinks 0
"#;

    #[tokio::test]
    async fn renders_the_exposition_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let rendered: String = render(&state(dir.path()))
            .split_inclusive('\n')
            .map(|line| {
                if line.starts_with("herald_journal_size_bytes ") {
                    "herald_journal_size_bytes SIZE\n"
                } else if line.starts_with("herald_open_files_exhausted_total ") {
                    // Process-wide: other tests in this binary may have counted some.
                    "herald_open_files_exhausted_total N\n"
                } else {
                    line
                }
            })
            .collect();
        assert_eq!(rendered, RENDERED);
    }
}
