//! Delivery: moves events from the journal to one sink through that sink's cursor. Entry point:
//! [`run`]. This is the first, simple driver: one batch in flight, retried whole with backoff until the
//! sink takes it; per-key windows, dead letters and pausing come with the delivery engine.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use herald_sink_core::event::CloudEvent;
use herald_sink_core::sink::{Envelope, Outcome, Sink};
use tokio_util::sync::CancellationToken;

use crate::journal::Journal;
use crate::route::Router;

/// Events read from the journal per batch.
const BATCH: usize = 256;
/// How often an idle driver looks for new durable events.
const IDLE_POLL: Duration = Duration::from_millis(5);

/// Counters of one sink's delivery.
#[derive(Debug, Default)]
pub struct Stats {
    /// Events the sink acknowledged.
    pub delivered: AtomicU64,
    /// Events not routed to this sink (acknowledged without sending).
    pub skipped: AtomicU64,
    /// Batches retried.
    pub retried: AtomicU64,
    /// Events the sink rejected (logged; the dead-letter queue comes with the delivery engine).
    pub rejected: AtomicU64,
}

/// Delivers to `sink` until `stop` fires and everything appended has been delivered.
pub async fn run<S: Sink>(
    name: String,
    sink: Arc<S>,
    journal: Journal,
    router: Arc<Router>,
    from_start: bool,
    stop: CancellationToken,
    stats: Arc<Stats>,
) {
    let mut cursor = match journal.register_sink(&name, from_start) {
        Ok(c) => c,
        Err(error) => {
            tracing::error!(message = "Cannot register the sink's cursor.", sink = %name, %error);
            return;
        }
    };
    loop {
        let rows = match journal.read(&name, cursor, BATCH) {
            Ok(rows) => rows,
            Err(error) => {
                tracing::error!(message = "Reading the journal failed.", sink = %name, %error);
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let Some(&(last, _)) = rows.last() else {
            if stop.is_cancelled() && cursor >= journal.head() {
                return;
            }
            tokio::time::sleep(IDLE_POLL).await;
            continue;
        };
        let mut envelopes = Vec::with_capacity(rows.len());
        for (seq, bytes) in rows {
            match CloudEvent::from_structured_json(&bytes) {
                Ok(event) if router.wants(&name, &event) => {
                    envelopes.push(Envelope::new(seq, event))
                }
                Ok(_) => {
                    stats.skipped.fetch_add(1, Ordering::Relaxed);
                }
                Err(error) => {
                    tracing::error!(message = "Unreadable journal entry skipped.", sink = %name, seq, %error)
                }
            }
        }
        send_until_taken(&name, sink.as_ref(), &envelopes, &stats).await;
        if let Err(error) = journal.ack(&name, last) {
            tracing::error!(message = "Cannot advance the sink's cursor.", sink = %name, %error);
        }
        cursor = last;
    }
}

async fn send_until_taken<S: Sink>(name: &str, sink: &S, envelopes: &[Envelope], stats: &Stats) {
    if envelopes.is_empty() {
        return;
    }
    let mut pending: Vec<Envelope> = envelopes.to_vec();
    let mut attempt: u32 = 0;
    while !pending.is_empty() {
        let outcomes = sink.send(&pending).await;
        let mut retry = Vec::new();
        let mut hint = None;
        for (envelope, outcome) in
            pending
                .iter()
                .zip(outcomes.iter().chain(std::iter::repeat(&Outcome::Retry {
                    after: None,
                    reason: herald_sink_core::sink::Reason::new(
                        "missing_outcome",
                        "the sink returned fewer outcomes than events",
                    ),
                })))
        {
            match outcome {
                Outcome::Ok => {
                    stats.delivered.fetch_add(1, Ordering::Relaxed);
                }
                Outcome::Retry { after, reason } => {
                    hint = hint.max(*after);
                    if attempt == 0 {
                        tracing::warn!(message = "Retrying events.", sink = %name, code = reason.code, error = %reason.detail);
                    }
                    retry.push(envelope.clone());
                }
                Outcome::Reject { reason } => {
                    stats.rejected.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(message = "Event rejected by the sink.", sink = %name, id = %envelope.event.id, code = reason.code, error = %reason.detail);
                }
            }
        }
        if retry.is_empty() {
            return;
        }
        stats.retried.fetch_add(1, Ordering::Relaxed);
        attempt = attempt.saturating_add(1);
        tokio::time::sleep(hint.unwrap_or_else(|| backoff(attempt))).await;
        pending = retry;
    }
}

/// Full jitter over 100 ms doubling to 30 s.
fn backoff(attempt: u32) -> Duration {
    use rand::Rng;
    let cap = Duration::from_millis(100)
        .saturating_mul(1 << attempt.min(9))
        .min(Duration::from_secs(30));
    let ms = u64::try_from(cap.as_millis()).unwrap_or(30_000);
    Duration::from_millis(rand::rng().random_range(0..=ms))
}
