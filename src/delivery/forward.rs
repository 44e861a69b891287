//! Dead-letter forwarding: a sink's dead letters, kept durably in the journal's DLQ, are sent to its
//! `deadLetterSink` with their error context and leave the queue only once that sink took them.
//!
//! The journal stays the one place dead letters are made durable, so a forwarding target that is down
//! or rejects a letter loses nothing: the letter waits in the DLQ (visible to `herald dlq`) and is
//! retried with backoff.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::future::BoxFuture;
use herald_sink_core::sink::{Envelope, ErrorContext, Outcome, Sink};
use herald_sink_core::{CloudEvent, DeadLetter};
use tokio_util::sync::CancellationToken;

use super::Stats;
use crate::backoff::{self, Backoff};
use crate::journal::Journal;

/// A sink's `send_dead_letters`, type-erased so a forwarder can target any sink type.
pub type Forward =
    Arc<dyn Fn(Vec<Envelope>, Vec<ErrorContext>) -> BoxFuture<'static, Vec<Outcome>> + Send + Sync>;

/// `sink`'s `send_dead_letters` as a [`Forward`].
pub fn forward_to<S: Sink>(sink: Arc<S>) -> Forward {
    Arc::new(move |letters, errors| {
        let sink = sink.clone();
        Box::pin(async move { sink.send_dead_letters(&letters, &errors).await })
    })
}

/// Dead letters read per round.
const PAGE: usize = 256;
/// How often an empty queue is looked at again.
const POLL: Duration = Duration::from_millis(500);

/// A dead letter as the journal keeps it (`DeadLetters for Journal`), decoded.
fn decode(record: &[u8]) -> Option<(CloudEvent, ErrorContext)> {
    let DeadLetter { event, error, .. } = DeadLetter::from_bytes(record).ok()?;
    Some((event, error))
}

/// Forwards `source`'s dead letters to `target` until `stop` fires.
pub async fn run(
    source: String,
    target: String,
    forward: Forward,
    journal: Journal,
    stats: Arc<Stats>,
    stop: CancellationToken,
) {
    // Letters the target rejected or that cannot be decoded stay in the DLQ for an operator; they are
    // not offered again until herald restarts.
    let mut held: HashSet<u64> = HashSet::new();
    let mut backoff = Backoff::new(backoff::FORWARD);
    loop {
        let rows = match journal.dead_letters(&source, PAGE + held.len()) {
            Ok(rows) => rows,
            Err(error) => {
                tracing::error!(message = "Cannot read the dead-letter queue.", sink = %source, %error);
                Vec::new()
            }
        };
        // One letter per key per round keeps a key's letters in order at the target.
        let mut keys = HashSet::new();
        let mut letters = Vec::new();
        let mut errors = Vec::new();
        for (seq, record) in rows {
            if held.contains(&seq) {
                continue;
            }
            let Some((event, error)) = decode(&record) else {
                tracing::error!(message = "Unreadable dead letter left in the queue.", sink = %source, seq);
                held.insert(seq);
                continue;
            };
            let key = event.partition_key().unwrap_or(&event.id).to_owned();
            if !keys.insert(key) {
                break;
            }
            letters.push(Envelope::new(seq, event));
            errors.push(error);
        }
        let wait = if letters.is_empty() {
            POLL
        } else {
            let outcomes = forward(letters.clone(), errors).await;
            let mut done = Vec::new();
            for (letter, outcome) in letters.iter().zip(outcomes.iter()) {
                match outcome {
                    Outcome::Ok => done.push(letter.seq),
                    Outcome::Reject { reason } => {
                        tracing::error!(message = "The dead-letter sink rejected a dead letter; it stays in the queue.", sink = %source, dead_letter_sink = %target, id = %letter.event.id, error = %reason);
                        stats.forward_failed.fetch_add(1, Ordering::Relaxed);
                        held.insert(letter.seq);
                    }
                    Outcome::Retry { .. } => {}
                }
            }
            if !done.is_empty() {
                if let Err(error) = journal.dead_letters_remove(&source, Some(&done)) {
                    tracing::error!(message = "Cannot remove forwarded dead letters.", sink = %source, %error);
                }
                let n = u64::try_from(done.len()).unwrap_or(u64::MAX);
                stats.forwarded.fetch_add(n, Ordering::Relaxed);
                let _ = stats.dead_letter_queue.fetch_update(
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                    |q| Some(q.saturating_sub(n)),
                );
            }
            if done.len() == letters.len() {
                backoff.reset();
                Duration::ZERO
            } else {
                backoff.next_delay()
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_journal_record_shape() {
        let record = serde_json::json!({
            "seq": 7, "sink": "hook", "attempts": 3,
            "firstFailure": "2026-01-01T00:00:00Z", "lastFailure": "2026-01-01T00:01:00Z",
            "class": "permanent", "code": "http_400", "error": "bad request",
            "event": {"specversion": "1.0", "id": "u:1:created", "source": "k8s://c/g/p", "type": "t",
                      "partitionkey": "ns/a"},
        });
        let (event, error) = decode(record.to_string().as_bytes()).expect("decodes");
        assert_eq!(event.id, "u:1:created");
        assert_eq!(error.code, "http_400");
        assert_eq!(error.message, "bad request");
        assert_eq!(error.attempts, 3);
        assert_eq!(error.first_failure, "2026-01-01T00:00:00Z");
        assert!(decode(b"{}").is_none());
    }
}
