//! The contract between the delivery driver and a sink; start at [`Sink`].

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use crate::dead_letter::ErrorContext;
use crate::event::CloudEvent;
use crate::journaled::Journaled;

/// A destination herald delivers events to (Kafka, NATS, webhook, file).
///
/// The delivery driver owns everything around a send: batching, per-key ordering, backoff,
/// attempt budgets, the dead-letter queue and the send/retry/dead-letter metrics. A sink only turns
/// one batch into protocol calls and says, per event, what happened:
///
/// - [`Outcome::Ok`] means **durable**, not "written to a socket": Kafka's delivery report came
///   back, JetStream returned its `PubAck` (core NATS publish is opt-in and only flushes), the
///   webhook answered 2xx, the file sink wrote and flushed (and fsynced per its config).
/// - [`Outcome::Retry`] and [`Outcome::Reject`] are decided by the sink from protocol data (status
///   codes, error kinds), never from error text, in its `classify` function.
/// - Sinks **never sleep to retry**: they return `Retry` (with the server's hint in `after`) and
///   the driver schedules the next attempt. The one exception is local backpressure inside a
///   single call, such as rdkafka's queue being full.
///
/// The set of sinks is closed, so the driver is generic (`Driver<KafkaSink>`), wired by a `match`
/// on the config; no `dyn Sink` or `async_trait` is needed.
///
/// # Examples
///
/// ```
/// use std::sync::Mutex;
/// use herald_sink_core::{CloudEvent, Envelope, ErrorContext, Outcome, Reason, Sink, SinkError};
///
/// /// Keeps events in memory; rejects events without a partition key.
/// #[derive(Default)]
/// struct MemorySink {
///     events: Mutex<Vec<CloudEvent>>,
/// }
///
/// impl Sink for MemorySink {
///     const NAME: &'static str = "memory";
///
///     async fn healthcheck(&self) -> Result<(), SinkError> {
///         Ok(())
///     }
///
///     async fn send(&self, batch: &[Envelope]) -> Vec<Outcome> {
///         let Ok(mut events) = self.events.lock() else {
///             return Outcome::all(batch.len(), Outcome::retry(Reason::new("poisoned", "lock poisoned")));
///         };
///         batch
///             .iter()
///             .map(|envelope| match envelope.event.partition_key() {
///                 Some(_) => {
///                     events.push(CloudEvent::clone(&envelope.event));
///                     Outcome::Ok
///                 }
///                 None => Outcome::reject(Reason::new("no_partition_key", "event has no partitionkey")),
///             })
///             .collect()
///     }
///
///     async fn send_dead_letters(&self, letters: &[Envelope], _errors: &[ErrorContext]) -> Vec<Outcome> {
///         self.send(letters).await
///     }
/// }
///
/// # fn block_on<F: Future>(future: F) -> F::Output {
/// #     use std::task::{Context, Poll, Waker};
/// #     let mut future = std::pin::pin!(future);
/// #     let mut cx = Context::from_waker(Waker::noop());
/// #     loop {
/// #         if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
/// #             return output;
/// #         }
/// #     }
/// # }
/// let sink = MemorySink::default();
/// let batch = [
///     Envelope::new(1, CloudEvent::new("a", "/s", "t").extension("partitionkey", "ns/a")),
///     Envelope::new(2, CloudEvent::new("b", "/s", "t")),
/// ];
/// let outcomes = block_on(sink.send(&batch));
/// assert_eq!(outcomes.len(), batch.len());
/// assert!(outcomes[0].is_ok());
/// assert_eq!(outcomes[1].reason().map(|r| r.code), Some("no_partition_key"));
/// ```
pub trait Sink: Send + Sync + 'static {
    /// Stable name: config `type`, metric label `sink`, log field ("kafka", "nats", "webhook", "file").
    const NAME: &'static str;

    /// Whether [`Sink::send`] reads the events' attributes ([`Journaled::attributes`], what
    /// derefs to the event, the binding headers). A sink that sends only the stored JSON
    /// ([`Journaled::structured_json`]) says `false`, and delivery then reads each event with
    /// [`Journaled::read_lazily`]: validated, but with no attribute copied out of the bytes.
    /// Saying `false` and reading them anyway is correct, only slower (they are decoded then).
    const READS_ATTRIBUTES: bool = true;

    /// Checks that the destination is usable. Called at startup and by `herald check`; never per
    /// batch.
    ///
    /// # Errors
    ///
    /// A [`SinkError`] saying what is wrong; at startup it becomes herald's healthcheck exit code.
    fn healthcheck(&self) -> impl Future<Output = Result<(), SinkError>> + Send;

    /// Delivers `batch`. Returns exactly one [`Outcome`] per input, in input order.
    ///
    /// The driver guarantees at most one event per `partitionkey` in a batch and at most one batch
    /// in flight per key, so a sink may send a batch's events concurrently. An event's `id` is the
    /// same on every attempt, which lets receivers de-duplicate. If the sink returns the wrong
    /// number of outcomes, that is a sink bug: the driver `debug_assert!`s and treats missing
    /// outcomes as `Retry`.
    fn send(&self, batch: &[Envelope]) -> impl Future<Output = Vec<Outcome>> + Send;

    /// Delivers dead letters of another sink (this sink is its `deadLetterSink`): each event
    /// with its [`ErrorContext`] in the sink's own header form (`herald-error-*` for HTTP and
    /// NATS, `herald_error_*` for Kafka; the file sink writes the context beside the event).
    /// `errors[i]` belongs to `letters[i]`. Returns one [`Outcome`] per letter, in order, classified
    /// like [`Sink::send`]. The driver sends letters of distinct keys only, like `send`.
    fn send_dead_letters(
        &self,
        letters: &[Envelope],
        errors: &[ErrorContext],
    ) -> impl Future<Output = Vec<Outcome>> + Send;

    /// Makes durable what the sink still holds (the file sink syncs its file). Called once at
    /// stop, after delivery has drained and before the journal closes; the default does nothing,
    /// as a sink whose `Ok` already means durable holds nothing.
    ///
    /// # Errors
    ///
    /// A [`SinkError`] when what the sink held could not be made durable; the journal keeps
    /// nothing the driver acknowledged, so herald logs it.
    fn close(&self) -> impl Future<Output = Result<(), SinkError>> + Send {
        async { Ok(()) }
    }

    /// Drops what the sink still holds queued or in flight for sends whose futures were dropped:
    /// called when this replica stops leading (ADR 0013), after its delivery driver, and with
    /// it every pending `send`, was dropped. A sink whose sends end with their futures holds
    /// nothing (the default); the Kafka sink's producer would otherwise keep retrying its queued
    /// records for `message.timeout.ms`.
    fn abandon(&self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Whether waiting may fix `error`, returned by this sink's construction or
    /// [`Sink::healthcheck`]: the target is down, slow or not yet resolvable, rather than
    /// configured wrongly. herald starts such a sink paused (probing until the target answers)
    /// instead of refusing to start. The default is [`SinkError::is_transient`]; a sink whose
    /// client tells more (a TLS failure inside a connection error) refines it from that client's
    /// typed errors, never from message text.
    #[must_use]
    fn is_transient(error: &SinkError) -> bool {
        error.is_transient()
    }
}

/// One journaled event on its way to a sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// The event's journal sequence number: increasing, unique per herald instance; the driver
    /// acknowledges by it.
    pub seq: u64,
    /// The event, exactly as journaled (redactions applied, `time` frozen at observation): the
    /// stored bytes with the attributes read, `data` parsed only on first use (see
    /// [`Journaled`]). Shared, because the delivery window keeps it for retries while a send
    /// call holds it.
    pub event: Arc<Journaled>,
    /// Length in bytes of the event's structured JSON encoding, the form the journal stores. The
    /// driver sums it for `batch.maxBytes`; a sink whose binding is smaller may still rely on it as
    /// an upper-bound estimate of the wire size.
    pub encoded_len: usize,
}

impl Envelope {
    /// An envelope whose `encoded_len` is computed by encoding `event`. The journal, which already
    /// holds the encoded bytes, fills the fields directly instead.
    #[must_use]
    pub fn new(seq: u64, event: CloudEvent) -> Self {
        let encoded_len = event.to_structured_json().len();
        Self {
            seq,
            event: Arc::new(Journaled::new(event)),
            encoded_len,
        }
    }
}

/// What happened to one event of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Durable at the destination (the broker acknowledged it; see [`Sink`] for each sink's
    /// meaning). The driver acknowledges the event and may advance the sink's cursor.
    Ok,
    /// Transient failure: the driver tries again later. Retryable failures retry without limit by
    /// default; only an explicit `maxAttempts`/`maxAge` turns them into dead letters.
    Retry {
        /// The server's hint (`Retry-After`, a throttle time); `None` leaves the delay to the
        /// driver's backoff. The driver waits `max(after, backoff)`.
        after: Option<Duration>,
        /// Why; `reason.code` becomes the `code` label of the retry metric.
        reason: Reason,
    },
    /// Permanent failure for this event: straight to the dead-letter queue, never retried.
    Reject {
        /// Why; kept with the dead letter and used as the `code` metric label.
        reason: Reason,
    },
}

impl Outcome {
    /// `n` copies of `outcome`, for a failure that hit the whole batch (connection lost, 503).
    #[must_use]
    pub fn all(n: usize, outcome: Outcome) -> Vec<Outcome> {
        vec![outcome; n]
    }

    /// [`Outcome::Retry`] with no server hint.
    #[must_use]
    pub fn retry(reason: Reason) -> Self {
        Self::Retry {
            after: None,
            reason,
        }
    }

    /// [`Outcome::Retry`] with the server's hint of when to try again.
    #[must_use]
    pub fn retry_after(after: Duration, reason: Reason) -> Self {
        Self::Retry {
            after: Some(after),
            reason,
        }
    }

    /// [`Outcome::Reject`].
    #[must_use]
    pub fn reject(reason: Reason) -> Self {
        Self::Reject { reason }
    }

    /// True for [`Outcome::Ok`].
    #[must_use]
    pub fn is_ok(&self) -> bool {
        matches!(self, Self::Ok)
    }

    /// The reason of a `Retry` or `Reject`.
    #[must_use]
    pub fn reason(&self) -> Option<&Reason> {
        match self {
            Self::Ok => None,
            Self::Retry { reason, .. } | Self::Reject { reason } => Some(reason),
        }
    }
}

/// Why an event was retried or rejected.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reason {
    /// Short `snake_case` class used as a metric label, so it must come from a small fixed set
    /// (`http_503`, `timeout`, `message_too_large`, [`codes::RETRIES_EXHAUSTED`]): never object
    /// names or raw error text.
    pub code: &'static str,
    /// Human-readable detail for logs and dead letters (may hold the server's message).
    pub detail: Cow<'static, str>,
}

impl Reason {
    /// A reason with `code` (low-cardinality label) and free-form `detail`.
    #[must_use]
    pub fn new(code: &'static str, detail: impl Into<Cow<'static, str>>) -> Self {
        Self {
            code,
            detail: detail.into(),
        }
    }
}

/// `code: detail`.
impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.detail)
    }
}

/// Reason codes that herald's driver sets itself, shared so sinks do not reuse them with another
/// meaning. Sink-specific codes live in each sink's `classify`.
pub mod codes {
    /// An explicit `maxAttempts` or `maxAge` ran out; the event was dead-lettered.
    pub const RETRIES_EXHAUSTED: &str = "retries_exhausted";
    /// The sink returned fewer outcomes than events; the missing ones are retried.
    pub const MISSING_OUTCOME: &str = "missing_outcome";
    /// The event is larger than the sink's limit and `onOversize: deadLetter` is set.
    pub const OVERSIZE: &str = "oversize";
}

/// Boxed error from a sink's client library, kept as the `source` of a [`SinkError`] so this
/// crate need not know every client's error type.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a sink cannot work: returned by [`Sink::healthcheck`] and by sink construction.
///
/// Per-event failures are never `SinkError`s; they are [`Outcome`]s.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SinkError {
    /// The sink's configuration cannot work (bad URL, unreadable credentials, invalid template).
    #[error("invalid sink configuration: {detail}")]
    InvalidConfig {
        /// What is wrong, naming the config key.
        detail: Cow<'static, str>,
    },
    /// A configuration key's value could not be turned into what the sink uses: a secret that
    /// does not resolve, a file that cannot be read, a secret of the wrong form. Displays as the
    /// key (`auth.bearer`), followed by the cause in an error chain.
    #[error("{key}")]
    SettingFailed {
        /// The key's path below the sink, as written in the configuration.
        key: String,
        /// Why its value cannot be used; never the secret itself.
        #[source]
        source: BoxError,
    },
    /// The destination could not be reached.
    #[error("connecting to {target} failed")]
    ConnectFailed {
        /// Address or URL tried.
        target: String,
        /// The client's error.
        #[source]
        source: BoxError,
    },
    /// The destination refused herald's credentials or permissions.
    #[error("authentication to {target} failed")]
    AuthenticationFailed {
        /// Address or URL tried.
        target: String,
        /// The client's error, when it gave one.
        #[source]
        source: Option<BoxError>,
    },
    /// Something the sink writes to does not exist (topic, stream, directory).
    #[error("{what} does not exist")]
    DestinationMissing {
        /// What is missing, e.g. `stream HERALD`.
        what: String,
    },
    /// The healthcheck did not finish in time.
    #[error("healthcheck timed out after {after:?}")]
    HealthcheckTimedOut {
        /// How long it waited.
        after: Duration,
    },
    /// The destination cannot be used (a file that cannot be opened, a broker that answers with an
    /// error), when all the sink has to say is text.
    #[error("destination unavailable: {reason}")]
    Unavailable {
        /// What failed, for the operator.
        reason: String,
    },
}

impl SinkError {
    /// Whether waiting may fix this error, judged by its variant alone:
    ///
    /// | variant | transient |
    /// |---|---|
    /// | [`SinkError::ConnectFailed`] (refused, unreachable, DNS, no answer) | yes |
    /// | [`SinkError::HealthcheckTimedOut`] | yes |
    /// | [`SinkError::InvalidConfig`], [`SinkError::SettingFailed`] | no |
    /// | [`SinkError::AuthenticationFailed`] (credentials or permissions refused) | no |
    /// | [`SinkError::DestinationMissing`] (stream or directory to create) | no |
    /// | [`SinkError::Unavailable`] (a file that cannot be opened, a broker's error) | no |
    ///
    /// A sink refines it with [`Sink::is_transient`] (a TLS handshake failure reported as a
    /// connection failure is not transient).
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::ConnectFailed { .. } | Self::HealthcheckTimedOut { .. }
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::error::Error as _;
    use std::pin::pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll, Waker};

    use super::*;

    fn block_on<F: Future>(future: F) -> F::Output {
        let mut future = pin!(future);
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
                return output;
            }
        }
    }

    /// Fails every batch the first time, succeeds afterwards.
    #[derive(Default)]
    struct FlakySink {
        calls: AtomicUsize,
    }

    impl Sink for FlakySink {
        const NAME: &'static str = "flaky";

        async fn healthcheck(&self) -> Result<(), SinkError> {
            Err(SinkError::DestinationMissing {
                what: "topic herald.widgets".into(),
            })
        }

        async fn send(&self, batch: &[Envelope]) -> Vec<Outcome> {
            if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
                return Outcome::all(
                    batch.len(),
                    Outcome::retry_after(
                        Duration::from_secs(2),
                        Reason::new("http_503", "unavailable"),
                    ),
                );
            }
            vec![Outcome::Ok; batch.len()]
        }

        async fn send_dead_letters(
            &self,
            letters: &[Envelope],
            _errors: &[ErrorContext],
        ) -> Vec<Outcome> {
            self.send(letters).await
        }
    }

    /// What the driver will do: hold a generic sink and spawn its futures on a multi-threaded runtime.
    fn assert_send<T: Send>(value: T) -> T {
        value
    }

    fn drive<S: Sink>(sink: &S, batch: &[Envelope]) -> Vec<Outcome> {
        block_on(assert_send(sink.send(batch)))
    }

    fn batch() -> Vec<Envelope> {
        vec![
            Envelope::new(1, CloudEvent::new("a", "/s", "t")),
            Envelope::new(2, CloudEvent::new("b", "/s", "t")),
        ]
    }

    #[test]
    fn generic_sink_futures_are_send() {
        let sink = FlakySink::default();
        let first = drive(&sink, &batch());
        assert_eq!(first.len(), 2);
        assert!(first.iter().all(|o| matches!(
            o,
            Outcome::Retry { after: Some(d), reason } if *d == Duration::from_secs(2) && reason.code == "http_503"
        )));
        assert!(drive(&sink, &batch()).iter().all(Outcome::is_ok));
        assert_eq!(FlakySink::NAME, "flaky");
    }

    #[test]
    fn healthcheck_reports_sink_errors() {
        let err = block_on(FlakySink::default().healthcheck()).unwrap_err();
        assert_eq!(err.to_string(), "topic herald.widgets does not exist");
    }

    #[test]
    fn all_repeats_one_outcome() {
        let reject = Outcome::reject(Reason::new("http_400", "bad request"));
        assert_eq!(Outcome::all(3, reject.clone()), vec![reject.clone(); 3]);
        assert!(Outcome::all(0, reject).is_empty());
    }

    #[test]
    fn outcome_accessors() {
        assert!(Outcome::Ok.is_ok());
        assert_eq!(Outcome::Ok.reason(), None);
        let retry = Outcome::retry(Reason::new("timeout", "no answer in 10s"));
        assert_eq!(
            retry,
            Outcome::Retry {
                after: None,
                reason: Reason::new("timeout", "no answer in 10s")
            }
        );
        assert_eq!(retry.reason().unwrap().code, "timeout");
        assert_eq!(
            retry.reason().unwrap().to_string(),
            "timeout: no answer in 10s"
        );
    }

    #[test]
    fn envelope_measures_structured_json() {
        let event = CloudEvent::new("a", "/s", "t");
        let envelope = Envelope::new(7, event.clone());
        assert_eq!(envelope.seq, 7);
        assert_eq!(envelope.encoded_len, event.to_structured_json().len());
    }

    #[test]
    fn only_unreachable_targets_are_transient() {
        let connect = SinkError::ConnectFailed {
            target: "127.0.0.1:1".into(),
            source: "refused".into(),
        };
        assert!(connect.is_transient());
        assert!(FlakySink::is_transient(&connect));
        assert!(
            SinkError::HealthcheckTimedOut {
                after: Duration::from_secs(1)
            }
            .is_transient()
        );
        for permanent in [
            SinkError::InvalidConfig {
                detail: "url".into(),
            },
            SinkError::AuthenticationFailed {
                target: "k:9092".into(),
                source: None,
            },
            SinkError::DestinationMissing {
                what: "stream HERALD".into(),
            },
            SinkError::Unavailable {
                reason: "cannot open".into(),
            },
        ] {
            assert!(!permanent.is_transient(), "{permanent:?}");
        }
    }

    #[test]
    fn sink_errors_keep_their_source_out_of_the_message() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let err = SinkError::ConnectFailed {
            target: "127.0.0.1:4222".into(),
            source: Box::new(io),
        };
        assert_eq!(err.to_string(), "connecting to 127.0.0.1:4222 failed");
        assert_eq!(err.source().unwrap().to_string(), "refused");
        let err = SinkError::Unavailable {
            reason: "stream HERALD has no subjects".into(),
        };
        assert!(err.source().is_none());
        assert_eq!(
            err.to_string(),
            "destination unavailable: stream HERALD has no subjects"
        );
    }
}
