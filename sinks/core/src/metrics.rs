//! Names of the per-sink metrics; start at [`MetricName`].

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

/// Every per-sink metric herald exports.
///
/// Only the metrics labelled by `sink` live here; herald's other metrics
/// (`herald_observed_changes_total`, `herald_errors_total`) are listed in the herald crate's
/// `telemetry` module. Names follow `herald_<noun>_<unit>[_total]`. Label values come from small
/// fixed sets (the sink's [`Sink::NAME`](crate::Sink::NAME), a [`Reason::code`](crate::Reason)),
/// never object names or raw error text. Emit once per batch with a count; a retry is not a drop,
/// only dead-lettering counts as lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricName {
    /// `herald_sink_sent_events_total{sink}`: events a sink reported [`Ok`](crate::Outcome::Ok).
    SinkSentEventsTotal,
    /// `herald_sink_sent_bytes_total{sink}`: encoded bytes of those events.
    SinkSentBytesTotal,
    /// `herald_sink_retried_events_total{sink,code}`: events that came back as
    /// [`Retry`](crate::Outcome::Retry).
    SinkRetriedEventsTotal,
    /// `herald_dead_lettered_events_total{sink,code}`: events moved to the dead-letter queue
    /// (rejected, or out of an explicit attempt/age budget).
    DeadLetteredEventsTotal,
    /// `herald_journal_lag_events{sink}`: journaled events not yet acknowledged by the sink.
    JournalLagEvents,
    /// `herald_sink_request_duration_seconds{sink}`: wall time of one `send` call.
    SinkRequestDurationSeconds,
}

impl MetricName {
    /// Every variant, for describing them all at start-up.
    pub const ALL: [MetricName; 6] = [
        Self::SinkSentEventsTotal,
        Self::SinkSentBytesTotal,
        Self::SinkRetriedEventsTotal,
        Self::DeadLetteredEventsTotal,
        Self::JournalLagEvents,
        Self::SinkRequestDurationSeconds,
    ];

    /// The exported name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::SinkSentEventsTotal => "herald_sink_sent_events_total",
            Self::SinkSentBytesTotal => "herald_sink_sent_bytes_total",
            Self::SinkRetriedEventsTotal => "herald_sink_retried_events_total",
            Self::DeadLetteredEventsTotal => "herald_dead_lettered_events_total",
            Self::JournalLagEvents => "herald_journal_lag_events",
            Self::SinkRequestDurationSeconds => "herald_sink_request_duration_seconds",
        }
    }

    /// Counter, gauge or histogram.
    #[must_use]
    pub const fn kind(self) -> MetricKind {
        match self {
            Self::SinkSentEventsTotal
            | Self::SinkSentBytesTotal
            | Self::SinkRetriedEventsTotal
            | Self::DeadLetteredEventsTotal => MetricKind::Counter,
            Self::JournalLagEvents => MetricKind::Gauge,
            Self::SinkRequestDurationSeconds => MetricKind::Histogram,
        }
    }

    /// The label names the metric carries, in this order.
    #[must_use]
    pub const fn labels(self) -> &'static [&'static str] {
        match self {
            Self::SinkSentEventsTotal
            | Self::SinkSentBytesTotal
            | Self::JournalLagEvents
            | Self::SinkRequestDurationSeconds => &["sink"],
            Self::SinkRetriedEventsTotal | Self::DeadLetteredEventsTotal => &["sink", "code"],
        }
    }

    /// One-line help text for the exporter.
    #[must_use]
    pub const fn description(self) -> &'static str {
        match self {
            Self::SinkSentEventsTotal => "Events the sink acknowledged as durable.",
            Self::SinkSentBytesTotal => "Encoded bytes of the events the sink acknowledged.",
            Self::SinkRetriedEventsTotal => "Events the sink asked to retry, by reason code.",
            Self::DeadLetteredEventsTotal => {
                "Events moved to the dead-letter queue, by reason code."
            }
            Self::JournalLagEvents => "Journaled events the sink has not acknowledged yet.",
            Self::SinkRequestDurationSeconds => {
                "Duration of one send call to the sink, in seconds."
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

    #[test]
    fn names_match_the_style_guide() {
        let names: Vec<&str> = MetricName::ALL.iter().map(|m| m.as_str()).collect();
        assert_eq!(
            names,
            [
                "herald_sink_sent_events_total",
                "herald_sink_sent_bytes_total",
                "herald_sink_retried_events_total",
                "herald_dead_lettered_events_total",
                "herald_journal_lag_events",
                "herald_sink_request_duration_seconds",
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
            assert_eq!(metric.labels().first(), Some(&"sink"), "{name}");
            assert_eq!(metric.to_string(), name);
            assert!(!metric.description().is_empty());
        }
    }
}
