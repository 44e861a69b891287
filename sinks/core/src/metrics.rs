//! Every metric herald exports, named in one place; start at [`MetricName`].

use std::fmt;

/// How a metric is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricKind {
    /// Monotonic counter (name ends in `_total`).
    Counter,
    /// Value that goes up and down.
    Gauge,
    /// Distribution of observations.
    Histogram,
}

impl MetricKind {
    /// The Prometheus `# TYPE` word.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
        }
    }
}

/// Every metric herald exports on `/metrics`, in the order the exporter writes them.
///
/// This enum is the single list: the admin endpoint renders each family's `# HELP` and `# TYPE`
/// from it, and a test checks that it renders every variant and nothing else, so a name cannot be
/// declared without being exported or exported without being declared. It lives in the crate every
/// sink shares so that a sink crate that reports a metric uses the same names.
///
/// Names follow `herald_<noun>_<unit>[_total]`. Label values come from small fixed sets (the
/// configured resource, the sink's name), never object names or raw error text. A retry is not a
/// drop: only dead-lettering counts as lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricName {
    /// `herald_observed_changes_total{resource}`, a counter.
    ObservedChangesTotal,
    /// `herald_filtered_changes_total{resource}`, a counter.
    FilteredChangesTotal,
    /// `herald_filter_errors_total{resource}`, a counter.
    FilterErrorsTotal,
    /// `herald_watch_restarts_total{resource}`, a counter.
    WatchRestartsTotal,
    /// `herald_watch_relists_total{resource}`, a counter.
    WatchRelistsTotal,
    /// `herald_resync_events_total{resource}`, a counter.
    ResyncEventsTotal,
    /// `herald_watch_synced{resource}`, a gauge.
    WatchSynced,
    /// `herald_sink_sent_events_total{sink}`, a counter.
    SinkSentEventsTotal,
    /// `herald_route_filter_errors_total{sink}`, a counter.
    RouteFilterErrorsTotal,
    /// `herald_sink_retried_events_total{sink}`, a counter.
    SinkRetriedEventsTotal,
    /// `herald_dead_lettered_events_total{sink}`, a counter.
    DeadLetteredEventsTotal,
    /// `herald_dead_letter_queue_size{sink}`, a gauge.
    DeadLetterQueueSize,
    /// `herald_dead_letter_queue_full{sink}`, a gauge.
    DeadLetterQueueFull,
    /// `herald_dead_letters_forwarded_total{sink}`, a counter.
    DeadLettersForwardedTotal,
    /// `herald_dead_letters_forward_rejected_total{sink}`, a counter.
    DeadLettersForwardRejectedTotal,
    /// `herald_sink_truncated_events_total{sink}`, a counter.
    SinkTruncatedEventsTotal,
    /// `herald_sink_debounced_events_total{sink}`, a counter.
    SinkDebouncedEventsTotal,
    /// `herald_sink_paused{sink}`, a gauge.
    SinkPaused,
    /// `herald_journal_lag_events{sink}`, a gauge.
    JournalLagEvents,
    /// `herald_journal_oldest_undelivered_age_seconds{sink}`, a gauge.
    JournalOldestUndeliveredAgeSeconds,
    /// `herald_journal_backlog_events`, a gauge.
    JournalBacklogEvents,
    /// `herald_journal_appends_total`, a counter.
    JournalAppendsTotal,
    /// `herald_journal_size_bytes`, a gauge.
    JournalSizeBytes,
    /// `herald_journal_retained_events`, a gauge.
    JournalRetainedEvents,
    /// `herald_journal_write_errors_total`, a counter.
    JournalWriteErrorsTotal,
    /// `herald_journal_writable`, a gauge.
    JournalWritable,
    /// `herald_change_to_delivery_seconds{sink}`, a histogram.
    ChangeToDeliverySeconds,
    /// `herald_open_files_exhausted_total`, a counter.
    OpenFilesExhaustedTotal,
    /// `herald_config_reload_failures_total`, a counter.
    ConfigReloadFailuresTotal,
    /// `herald_config_last_reload_success`, a gauge.
    ConfigLastReloadSuccess,
    /// `herald_leader_election_leader{holder}`, a gauge.
    LeaderElectionLeader,
    /// `herald_leader_election_standby_stalled_sinks`, a gauge.
    LeaderElectionStandbyStalledSinks,
}

impl MetricName {
    /// Every variant, in the exporter's order.
    pub const ALL: [MetricName; 32] = [
        Self::ObservedChangesTotal,
        Self::FilteredChangesTotal,
        Self::FilterErrorsTotal,
        Self::WatchRestartsTotal,
        Self::WatchRelistsTotal,
        Self::ResyncEventsTotal,
        Self::WatchSynced,
        Self::SinkSentEventsTotal,
        Self::RouteFilterErrorsTotal,
        Self::SinkRetriedEventsTotal,
        Self::DeadLetteredEventsTotal,
        Self::DeadLetterQueueSize,
        Self::DeadLetterQueueFull,
        Self::DeadLettersForwardedTotal,
        Self::DeadLettersForwardRejectedTotal,
        Self::SinkTruncatedEventsTotal,
        Self::SinkDebouncedEventsTotal,
        Self::SinkPaused,
        Self::JournalLagEvents,
        Self::JournalOldestUndeliveredAgeSeconds,
        Self::JournalBacklogEvents,
        Self::JournalAppendsTotal,
        Self::JournalSizeBytes,
        Self::JournalRetainedEvents,
        Self::JournalWriteErrorsTotal,
        Self::JournalWritable,
        Self::ChangeToDeliverySeconds,
        Self::OpenFilesExhaustedTotal,
        Self::ConfigReloadFailuresTotal,
        Self::ConfigLastReloadSuccess,
        Self::LeaderElectionLeader,
        Self::LeaderElectionStandbyStalledSinks,
    ];

    /// The exported name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ObservedChangesTotal => "herald_observed_changes_total",
            Self::FilteredChangesTotal => "herald_filtered_changes_total",
            Self::FilterErrorsTotal => "herald_filter_errors_total",
            Self::WatchRestartsTotal => "herald_watch_restarts_total",
            Self::WatchRelistsTotal => "herald_watch_relists_total",
            Self::ResyncEventsTotal => "herald_resync_events_total",
            Self::WatchSynced => "herald_watch_synced",
            Self::SinkSentEventsTotal => "herald_sink_sent_events_total",
            Self::RouteFilterErrorsTotal => "herald_route_filter_errors_total",
            Self::SinkRetriedEventsTotal => "herald_sink_retried_events_total",
            Self::DeadLetteredEventsTotal => "herald_dead_lettered_events_total",
            Self::DeadLetterQueueSize => "herald_dead_letter_queue_size",
            Self::DeadLetterQueueFull => "herald_dead_letter_queue_full",
            Self::DeadLettersForwardedTotal => "herald_dead_letters_forwarded_total",
            Self::DeadLettersForwardRejectedTotal => "herald_dead_letters_forward_rejected_total",
            Self::SinkTruncatedEventsTotal => "herald_sink_truncated_events_total",
            Self::SinkDebouncedEventsTotal => "herald_sink_debounced_events_total",
            Self::SinkPaused => "herald_sink_paused",
            Self::JournalLagEvents => "herald_journal_lag_events",
            Self::JournalOldestUndeliveredAgeSeconds => {
                "herald_journal_oldest_undelivered_age_seconds"
            }
            Self::JournalBacklogEvents => "herald_journal_backlog_events",
            Self::JournalAppendsTotal => "herald_journal_appends_total",
            Self::JournalSizeBytes => "herald_journal_size_bytes",
            Self::JournalRetainedEvents => "herald_journal_retained_events",
            Self::JournalWriteErrorsTotal => "herald_journal_write_errors_total",
            Self::JournalWritable => "herald_journal_writable",
            Self::ChangeToDeliverySeconds => "herald_change_to_delivery_seconds",
            Self::OpenFilesExhaustedTotal => "herald_open_files_exhausted_total",
            Self::ConfigReloadFailuresTotal => "herald_config_reload_failures_total",
            Self::ConfigLastReloadSuccess => "herald_config_last_reload_success",
            Self::LeaderElectionLeader => "herald_leader_election_leader",
            Self::LeaderElectionStandbyStalledSinks => {
                "herald_leader_election_standby_stalled_sinks"
            }
        }
    }

    /// Counter, gauge or histogram.
    #[must_use]
    pub const fn kind(self) -> MetricKind {
        match self {
            Self::ObservedChangesTotal
            | Self::FilteredChangesTotal
            | Self::FilterErrorsTotal
            | Self::WatchRestartsTotal
            | Self::WatchRelistsTotal
            | Self::ResyncEventsTotal
            | Self::SinkSentEventsTotal
            | Self::RouteFilterErrorsTotal
            | Self::SinkRetriedEventsTotal
            | Self::DeadLetteredEventsTotal
            | Self::DeadLettersForwardedTotal
            | Self::DeadLettersForwardRejectedTotal
            | Self::SinkTruncatedEventsTotal
            | Self::SinkDebouncedEventsTotal
            | Self::JournalAppendsTotal
            | Self::JournalWriteErrorsTotal
            | Self::OpenFilesExhaustedTotal
            | Self::ConfigReloadFailuresTotal => MetricKind::Counter,
            Self::WatchSynced
            | Self::DeadLetterQueueSize
            | Self::DeadLetterQueueFull
            | Self::SinkPaused
            | Self::JournalLagEvents
            | Self::JournalOldestUndeliveredAgeSeconds
            | Self::JournalBacklogEvents
            | Self::JournalSizeBytes
            | Self::JournalRetainedEvents
            | Self::JournalWritable
            | Self::ConfigLastReloadSuccess
            | Self::LeaderElectionLeader
            | Self::LeaderElectionStandbyStalledSinks => MetricKind::Gauge,
            Self::ChangeToDeliverySeconds => MetricKind::Histogram,
        }
    }

    /// The label names the metric carries, in this order (a histogram's `le` is not listed).
    #[must_use]
    pub const fn labels(self) -> &'static [&'static str] {
        match self {
            Self::ObservedChangesTotal
            | Self::FilteredChangesTotal
            | Self::FilterErrorsTotal
            | Self::WatchRestartsTotal
            | Self::WatchRelistsTotal
            | Self::ResyncEventsTotal
            | Self::WatchSynced => &["resource"],
            Self::SinkSentEventsTotal
            | Self::RouteFilterErrorsTotal
            | Self::SinkRetriedEventsTotal
            | Self::DeadLetteredEventsTotal
            | Self::DeadLetterQueueSize
            | Self::DeadLetterQueueFull
            | Self::DeadLettersForwardedTotal
            | Self::DeadLettersForwardRejectedTotal
            | Self::SinkTruncatedEventsTotal
            | Self::SinkDebouncedEventsTotal
            | Self::SinkPaused
            | Self::JournalLagEvents
            | Self::JournalOldestUndeliveredAgeSeconds
            | Self::ChangeToDeliverySeconds => &["sink"],
            Self::JournalBacklogEvents
            | Self::JournalAppendsTotal
            | Self::JournalSizeBytes
            | Self::JournalRetainedEvents
            | Self::JournalWriteErrorsTotal
            | Self::JournalWritable
            | Self::OpenFilesExhaustedTotal
            | Self::ConfigReloadFailuresTotal
            | Self::ConfigLastReloadSuccess
            | Self::LeaderElectionStandbyStalledSinks => &[],
            Self::LeaderElectionLeader => &["holder"],
        }
    }

    /// One-line help text, the exporter's `# HELP`.
    #[must_use]
    pub const fn description(self) -> &'static str {
        match self {
            Self::ObservedChangesTotal => "Changes that became events, per resource.",
            Self::FilteredChangesTotal => {
                "Changes observed but filtered out (event types, status-only updates, ignored fields, changed, when)."
            }
            Self::FilterErrorsTotal => {
                "Evaluations of a resource's `when` that failed (handled by its onError)."
            }
            Self::WatchRestartsTotal => "Watch streams restarted (ends, errors, stalls).",
            Self::WatchRelistsTotal => "Relists (first start and after 410 Gone).",
            Self::ResyncEventsTotal => "Events synthesized by relists.",
            Self::WatchSynced => "1 when the resource is served and its watch is open.",
            Self::SinkSentEventsTotal => "Events a sink acknowledged.",
            Self::RouteFilterErrorsTotal => {
                "Evaluations of a route's `when` that failed for this sink (handled by its onError)."
            }
            Self::SinkRetriedEventsTotal => "Retries scheduled per sink.",
            Self::DeadLetteredEventsTotal => "Events dead-lettered per sink.",
            Self::DeadLetterQueueSize => {
                "Dead letters waiting in a sink's queue (recounted every few seconds)."
            }
            Self::DeadLetterQueueFull => {
                "1 while a sink's dead-letter queue is at journal.maxDeadLetters: failing events are held and retried."
            }
            Self::DeadLettersForwardedTotal => {
                "Dead letters forwarded to the sink's deadLetterSink."
            }
            Self::DeadLettersForwardRejectedTotal => {
                "Dead letters the deadLetterSink rejected; they stay in the queue."
            }
            Self::SinkTruncatedEventsTotal => {
                "Oversized events sent in their reference-only form (onOversize: reference)."
            }
            Self::SinkDebouncedEventsTotal => {
                "Events replaced by a newer event of their object within the sink's debounce: acknowledged, not sent."
            }
            Self::SinkPaused => "1 while a sink fails everything and is being probed.",
            Self::JournalLagEvents => "Journaled events a sink has not finished yet.",
            Self::JournalOldestUndeliveredAgeSeconds => {
                "Age of the oldest event a sink has not finished (0 when caught up)."
            }
            Self::JournalBacklogEvents => "Undelivered events of the slowest sink.",
            Self::JournalAppendsTotal => {
                "Journal appends that carried events (events journaled per append shows how well watch batches fill)."
            }
            Self::JournalSizeBytes => "The journal's size on disk.",
            Self::JournalRetainedEvents => {
                "Events the journal holds (not yet delivered everywhere, or kept by retain); the size on disk divided by it is the bytes per retained event."
            }
            Self::JournalWriteErrorsTotal => {
                "Journal writes that failed (full disk, I/O error) or were refused after such a failure."
            }
            Self::JournalWritable => {
                "1 while the journal takes writes; 0 once a write failed (herald run then exits 12)."
            }
            Self::ChangeToDeliverySeconds => {
                "From herald's observation of a change to the sink's acknowledgement."
            }
            Self::OpenFilesExhaustedTotal => {
                "Connections, files and accepts that failed for want of a file descriptor (EMFILE, ENFILE)."
            }
            Self::ConfigReloadFailuresTotal => {
                "Configuration reloads refused (invalid file, a change that needs a restart) or applied only in part."
            }
            Self::ConfigLastReloadSuccess => {
                "1 while the last configuration reload was applied (or none was tried); 0 after a refused one."
            }
            Self::LeaderElectionLeader => {
                "1 while this replica holds the leader election Lease and delivers, 0 while it stands by; holder is the Lease's holder as last read."
            }
            Self::LeaderElectionStandbyStalledSinks => {
                "On a standby, the sinks whose cursor the leader's published positions have not moved for ten publish intervals while events wait above it."
            }
        }
    }
}

/// Writes [`MetricName::as_str`].
impl fmt::Display for MetricName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// A renamed metric breaks every dashboard and alert built on it: the names are pinned here,
    /// in the exporter's order, so a rename is a deliberate change of this list.
    #[test]
    fn exported_names_are_pinned() {
        let names: Vec<&str> = MetricName::ALL.iter().map(|m| m.as_str()).collect();
        assert_eq!(
            names,
            [
                "herald_observed_changes_total",
                "herald_filtered_changes_total",
                "herald_filter_errors_total",
                "herald_watch_restarts_total",
                "herald_watch_relists_total",
                "herald_resync_events_total",
                "herald_watch_synced",
                "herald_sink_sent_events_total",
                "herald_route_filter_errors_total",
                "herald_sink_retried_events_total",
                "herald_dead_lettered_events_total",
                "herald_dead_letter_queue_size",
                "herald_dead_letter_queue_full",
                "herald_dead_letters_forwarded_total",
                "herald_dead_letters_forward_rejected_total",
                "herald_sink_truncated_events_total",
                "herald_sink_debounced_events_total",
                "herald_sink_paused",
                "herald_journal_lag_events",
                "herald_journal_oldest_undelivered_age_seconds",
                "herald_journal_backlog_events",
                "herald_journal_appends_total",
                "herald_journal_size_bytes",
                "herald_journal_retained_events",
                "herald_journal_write_errors_total",
                "herald_journal_writable",
                "herald_change_to_delivery_seconds",
                "herald_open_files_exhausted_total",
                "herald_config_reload_failures_total",
                "herald_config_last_reload_success",
                "herald_leader_election_leader",
                "herald_leader_election_standby_stalled_sinks",
            ]
        );
    }

    #[test]
    fn names_are_unique_and_well_formed() {
        let unique: HashSet<&str> = MetricName::ALL.iter().map(|m| m.as_str()).collect();
        assert_eq!(unique.len(), MetricName::ALL.len());
        for metric in MetricName::ALL {
            let name = metric.as_str();
            assert!(name.starts_with("herald_"), "{name}");
            assert!(
                name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{name}"
            );
            assert_eq!(
                name.ends_with("_total"),
                metric.kind() == MetricKind::Counter,
                "only counters end in _total: {name}"
            );
            assert!(
                metric
                    .labels()
                    .iter()
                    .all(|l| ["resource", "sink", "holder"].contains(l)),
                "labels come from the fixed set: {name}"
            );
            assert_eq!(metric.to_string(), name);
            assert!(!metric.description().is_empty());
        }
    }
}
