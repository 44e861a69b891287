//! [`KafkaSink`]: builds the producer and turns batches into records.

use std::fmt;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use futures::future::join_all;
use herald_sink_core::sink::{Envelope, ErrorContext, Outcome, Reason, Sink, SinkError, codes};
use rdkafka::ClientConfig;
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer, PurgeConfig};

use crate::classify::{self, classify};
use crate::context::{self, ClientError, SinkContext};
use crate::encode::{self, Record};
use crate::settings::{DEFAULT_MESSAGE_MAX_BYTES, Settings};

/// How long `send` waits before enqueueing again while librdkafka's queue is full: long enough for
/// a produce request to come back, short enough not to stall a batch that is nearly through.
const QUEUE_FULL_PAUSE: Duration = Duration::from_millis(10);

/// Upper bound of the healthcheck's metadata request (lower when `message_timeout` is).
const HEALTHCHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Words in property names whose values are secrets: their librdkafka error text (which quotes
/// the value) is left out of [`SinkError::InvalidConfig`].
const SECRET_WORDS: [&str; 6] = ["password", "secret", "token", "jaas", "pem", "key"];

type KafkaProducer = FutureProducer<SinkContext>;

/// Delivers CloudEvents to Kafka (see the crate documentation for the binding, topics, tombstones
/// and outcomes).
///
/// One producer serves every `send` call; calls may run concurrently. `send` enqueues the whole
/// batch before it awaits any delivery report, never sleeps to retry, and only waits while
/// librdkafka's local queue is full.
pub struct KafkaSink {
    config: Settings,
    client_config: ClientConfig,
    /// The effective `message.max.bytes` (librdkafka's default or the configured property).
    max_message_bytes: usize,
    context: SinkContext,
    /// The producer and its generation. A fatal error makes an idempotent producer unusable for
    /// good, so it is replaced; the generation makes sure concurrent calls replace it once.
    producer: RwLock<(u64, KafkaProducer)>,
}

impl fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSink")
            .field("config", &self.config)
            .field("max_message_bytes", &self.max_message_bytes)
            .finish_non_exhaustive()
    }
}

impl KafkaSink {
    /// Checks `config` and builds the producer (it connects in the background; see
    /// [`Sink::healthcheck`]).
    ///
    /// # Errors
    ///
    /// [`SinkError::InvalidConfig`] for an empty broker list, a zero `message_timeout`, a topic
    /// template with characters Kafka does not allow, a librdkafka property that is unknown or has
    /// an invalid value (the error names the property), or a combination librdkafka refuses when
    /// it builds the producer (for example `enable.idempotence=true` with `acks=1`, SASL without
    /// a `sasl.mechanism` this build supports, or an unreadable `ssl.ca.location` under TLS).
    pub(crate) fn new(config: Settings) -> Result<Self, SinkError> {
        let brokers_set = !config.brokers.trim().is_empty()
            || config
                .properties
                .keys()
                .any(|name| crate::settings::same_property(name, "bootstrap.servers"));
        if !brokers_set {
            return Err(invalid("brokers must not be empty".to_owned()));
        }
        if config.message_timeout.is_zero() {
            return Err(invalid(
                "messageTimeout must be greater than zero".to_owned(),
            ));
        }
        config
            .topic
            .check_kafka_topic()
            .map_err(|error| invalid(format!("topic {:?}: {error}", config.topic.as_str())))?;
        let mut client_config = config.client_config();
        client_config.set_log_level(context::log_level());
        // Building the native configuration checks every property by itself, so the error can
        // name the one at fault; it also tells the effective message.max.bytes.
        let native = client_config
            .create_native_config()
            .map_err(|error| property_error(&error))?;
        let max_message_bytes = native
            .get("message.max.bytes")
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(DEFAULT_MESSAGE_MAX_BYTES);
        let context = SinkContext::default();
        let producer = build_producer(&client_config, &context)?;
        Ok(Self {
            config,
            client_config,
            max_message_bytes,
            context,
            producer: RwLock::new((0, producer)),
        })
    }

    /// The settings this sink was built with.
    #[cfg(test)]
    pub(crate) fn config(&self) -> &Settings {
        &self.config
    }

    /// The largest record, as librdkafka measures it, that this sink sends; larger events are
    /// rejected with code [`codes::OVERSIZE`] without being produced.
    #[must_use]
    pub fn max_message_bytes(&self) -> usize {
        self.max_message_bytes
    }

    /// The current producer and its generation (a cheap clone; the lock is released at once).
    fn producer(&self) -> (u64, KafkaProducer) {
        let guard = match self.producer.read() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        (guard.0, guard.1.clone())
    }

    /// Replaces producer `generation` if it is still current and has hit a fatal error. Records
    /// still queued in the old one fail with `Fatal` and are retried by the driver.
    fn replace_fatal_producer(&self, generation: u64) {
        let mut guard = match self.producer.write() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        if guard.0 != generation {
            return;
        }
        let Some((code, reason)) = guard.1.client().fatal_error() else {
            return;
        };
        match build_producer(&self.client_config, &self.context) {
            Ok(producer) => {
                tracing::warn!(
                    message = "Replacing the Kafka producer after a fatal error.",
                    sink = "kafka",
                    error = %code,
                    reason
                );
                *guard = (generation + 1, producer);
            }
            Err(error) => {
                tracing::error!(
                    message = "Replacing the Kafka producer after a fatal error failed.",
                    sink = "kafka",
                    %error
                );
            }
        }
    }

    /// Enqueues a record per envelope (and tombstones), then awaits every delivery report at once.
    /// `errors` is `Some` for dead letters: their context becomes `herald_error_*` headers, and no
    /// tombstones are written (a dead-letter topic is a log of failures, not state).
    async fn produce(&self, batch: &[Envelope], errors: Option<&[ErrorContext]>) -> Vec<Outcome> {
        let (generation, producer) = self.producer();
        // Past this, librdkafka would have timed out records anyway: a queue still full is a
        // `Retry`, not an endless wait.
        let deadline = Instant::now() + self.config.message_timeout;
        let mut pending = Vec::with_capacity(batch.len());
        for (index, envelope) in batch.iter().enumerate() {
            let extra = errors
                .and_then(|errors| errors.get(index))
                .map(ErrorContext::kafka_headers)
                .unwrap_or_default();
            let record = match encode::record(
                &self.config.topic,
                self.config.mode,
                self.config.template.as_ref(),
                &*envelope.event,
                extra,
            ) {
                Ok(record) => record,
                Err(error) => {
                    pending.push(Pending::Done(Outcome::reject(Reason::new(
                        herald_sink_core::jinja::RENDER_FAILED,
                        error,
                    ))));
                    continue;
                }
            };
            let size = record.wire_size();
            if size > self.max_message_bytes {
                pending.push(Pending::Done(Outcome::reject(Reason::new(
                    codes::OVERSIZE,
                    format!(
                        "topic {}: record of {size} bytes exceeds message.max.bytes ({})",
                        record.topic, self.max_message_bytes
                    ),
                ))));
                continue;
            }
            let event = match enqueue(&producer, &record, deadline).await {
                Ok(delivery) => delivery,
                Err(outcome) => {
                    pending.push(Pending::Done(outcome));
                    continue;
                }
            };
            // A tombstone needs a key: compaction works per key, and brokers refuse keyless
            // records on compacted topics.
            let tombstone = (errors.is_none()
                && self.config.tombstones
                && record.key.is_some()
                && encode::is_deleted(envelope.event.attributes()))
            .then(|| encode::tombstone(&record));
            let tombstone = match tombstone {
                Some(tombstone) => Some(enqueue(&producer, &tombstone, deadline).await),
                None => None,
            };
            pending.push(Pending::InFlight {
                topic: record.topic,
                event,
                tombstone,
            });
        }
        let mut outcomes = join_all(pending.into_iter().map(Pending::outcome)).await;
        if outcomes.iter().any(|o| !o.is_ok())
            && let Some((code, reason)) = producer.client().fatal_error()
        {
            // The delivery reports carry the error that caused the fatal state (say
            // OutOfOrderSequenceNumber), not `Fatal`: say what really happened, and that a new
            // producer will take the retry.
            for outcome in &mut outcomes {
                if matches!(outcome, Outcome::Retry { .. }) {
                    *outcome = Outcome::retry(Reason::new(
                        classify::PRODUCER_FATAL,
                        format!("the producer failed for good ({code}: {reason}); replaced"),
                    ));
                }
            }
            self.replace_fatal_producer(generation);
        }
        outcomes
    }

    /// Which error the healthcheck reports for a failed metadata request.
    fn healthcheck_error(&self, error: KafkaError, after: Duration) -> SinkError {
        let last = self.context.last_error();
        let is_auth = |code: Option<RDKafkaErrorCode>| {
            matches!(
                code,
                Some(
                    RDKafkaErrorCode::Authentication
                        | RDKafkaErrorCode::SaslAuthenticationFailed
                        | RDKafkaErrorCode::ClusterAuthorizationFailed
                        | RDKafkaErrorCode::TopicAuthorizationFailed
                )
            )
        };
        let target = self.config.brokers.clone();
        if is_auth(error.rdkafka_error_code()) || last.as_ref().is_some_and(|l| is_auth(l.code)) {
            return SinkError::AuthenticationFailed {
                target,
                source: Some(Box::new(NoAnswer { error, after, last })),
            };
        }
        SinkError::ConnectFailed {
            target,
            source: Box::new(NoAnswer { error, after, last }),
        }
    }
}

/// One event of a batch on its way: already decided, or waiting for delivery reports.
enum Pending {
    Done(Outcome),
    InFlight {
        topic: String,
        event: DeliveryFuture,
        tombstone: Option<Result<DeliveryFuture, Outcome>>,
    },
}

impl Pending {
    /// The event's outcome: `Ok` only when the event and its tombstone (if any) are delivered.
    async fn outcome(self) -> Outcome {
        match self {
            Self::Done(outcome) => outcome,
            Self::InFlight {
                topic,
                event,
                tombstone,
            } => {
                let event = delivered(event, &topic).await;
                let tombstone = match tombstone {
                    None => Outcome::Ok,
                    Some(Err(outcome)) => outcome,
                    Some(Ok(delivery)) => delivered(delivery, &topic).await,
                };
                match (event, tombstone) {
                    (Outcome::Ok, tombstone) => tombstone,
                    (event, _) => event,
                }
            }
        }
    }
}

/// The outcome of one delivery report.
async fn delivered(delivery: DeliveryFuture, topic: &str) -> Outcome {
    match delivery.await {
        Ok(Ok(_)) => Outcome::Ok,
        Ok(Err((error, _message))) => classify(&error, topic),
        Err(_canceled) => Outcome::retry(Reason::new(
            classify::PRODUCER_GONE,
            format!("topic {topic}: the producer closed before the delivery report came back"),
        )),
    }
}

/// Hands `record` to librdkafka. While its queue is full, waits [`QUEUE_FULL_PAUSE`] and tries
/// again until `deadline` (the one wait a sink may do: local backpressure).
async fn enqueue(
    producer: &KafkaProducer,
    record: &Record,
    deadline: Instant,
) -> Result<DeliveryFuture, Outcome> {
    let mut future_record = FutureRecord::<str, [u8]>::to(&record.topic);
    if let Some(key) = &record.key {
        future_record = future_record.key(key.as_str());
    }
    if let Some(value) = &record.value {
        future_record = future_record.payload(value.as_slice());
    }
    if !record.headers.is_empty() {
        future_record = future_record.headers(record.owned_headers());
    }
    loop {
        match producer.send_result(future_record) {
            Ok(delivery) => return Ok(delivery),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned))
                if Instant::now() < deadline =>
            {
                future_record = returned;
                tokio::time::sleep(QUEUE_FULL_PAUSE).await;
            }
            Err((error, _)) => return Err(classify(&error, &record.topic)),
        }
    }
}

impl Sink for KafkaSink {
    const NAME: &'static str = "kafka";

    /// Purges the producer's queued and in-flight records: dropping a `DeliveryFuture` does not
    /// take its record out of librdkafka, which would go on sending it for `message.timeout.ms`
    /// after this replica stopped leading. A request already written to a broker may still be
    /// appended there (its delivery report is voided); ids make that a duplicate at worst. The
    /// purge waits for librdkafka's threads, so it runs on a blocking thread.
    async fn abandon(&self) {
        let (_, producer) = self.producer();
        let purged = tokio::task::spawn_blocking(move || {
            // `rd_kafka_purge` fails only for flags it does not know or a client that is not a
            // producer; neither can happen here.
            producer.purge(PurgeConfig::default().queue().inflight());
        })
        .await;
        if let Err(error) = purged {
            tracing::warn!(message = "Purging the Kafka producer's queue failed.", %error);
        }
    }

    /// Fetches cluster metadata (in a blocking task, within `min(message_timeout, 10s)`): any
    /// broker answering is healthy. Topics are not checked, since brokers may create them on
    /// first use; an unknown topic shows as `unknown_topic` retries.
    async fn healthcheck(&self) -> Result<(), SinkError> {
        let (_, producer) = self.producer();
        let after = self.config.message_timeout.min(HEALTHCHECK_TIMEOUT);
        // Only errors from this attempt explain its failure.
        self.context.clear_last_error();
        let fetched = tokio::task::spawn_blocking(move || {
            producer
                .client()
                .fetch_metadata(None, after)
                .map(|metadata| metadata.brokers().len())
        })
        .await;
        match fetched {
            Ok(Ok(0)) => Err(SinkError::Unavailable {
                reason: format!("{} answered with no brokers", self.config.brokers),
            }),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => Err(self.healthcheck_error(error, after)),
            Err(join_error) => Err(SinkError::Unavailable {
                reason: format!("the metadata request did not complete: {join_error}"),
            }),
        }
    }

    async fn send(&self, batch: &[Envelope]) -> Vec<Outcome> {
        self.produce(batch, None).await
    }

    /// As [`SinkError::is_transient`], except that no broker answering because librdkafka's
    /// last client error was a TLS failure (`_SSL`: a certificate that does not verify, a
    /// handshake refused) is permanent: waiting does not change it.
    fn is_transient(error: &SinkError) -> bool {
        let tls_failed = std::error::Error::source(error)
            .and_then(|e| e.downcast_ref::<NoAnswer>())
            .and_then(|answer| answer.last.as_ref())
            .is_some_and(|last| last.code == Some(RDKafkaErrorCode::SSL));
        error.is_transient() && !tls_failed
    }

    /// Like [`Sink::send`] (no tombstones), each record also carrying `errors[i]` as
    /// `herald_error_*` headers (`herald_error_code`, `herald_error_first_failure` …, values as
    /// UTF-8). A missing entry of `errors` means no extra headers.
    async fn send_dead_letters(
        &self,
        letters: &[Envelope],
        errors: &[ErrorContext],
    ) -> Vec<Outcome> {
        self.produce(letters, Some(errors)).await
    }
}

fn build_producer(
    client_config: &ClientConfig,
    context: &SinkContext,
) -> Result<KafkaProducer, SinkError> {
    KafkaProducer::from_config_and_context(client_config, context.clone()).map_err(|error| {
        match error {
            KafkaError::ClientConfig(..) => property_error(&error),
            // librdkafka's own checks of the whole configuration; its message names the
            // properties involved.
            KafkaError::ClientCreation(message) => invalid(format!("kafka producer: {message}")),
            other => invalid(format!("kafka producer: {other}")),
        }
    })
}

/// [`SinkError::InvalidConfig`] naming the property librdkafka refused (and why, unless its value
/// may be a secret: librdkafka quotes the value).
fn property_error(error: &KafkaError) -> SinkError {
    let KafkaError::ClientConfig(_, description, name, _value) = error else {
        return invalid(format!("kafka producer: {error}"));
    };
    let lower = name.to_ascii_lowercase();
    if SECRET_WORDS.iter().any(|word| lower.contains(word)) {
        invalid(format!("kafka property `{name}` is invalid"))
    } else {
        invalid(format!("kafka property `{name}`: {description}"))
    }
}

fn invalid(detail: String) -> SinkError {
    SinkError::InvalidConfig {
        detail: detail.into(),
    }
}

/// No broker answered the healthcheck's metadata request.
#[derive(Debug)]
struct NoAnswer {
    error: KafkaError,
    after: Duration,
    /// What librdkafka last reported about its connections, which says why.
    last: Option<ClientError>,
}

impl fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no broker answered a metadata request within {:?} ({})",
            self.after, self.error
        )?;
        if let Some(last) = &self.last {
            write!(f, "; last client error: {last}")?;
        }
        Ok(())
    }
}

impl std::error::Error for NoAnswer {}

#[cfg(test)]
mod tests {
    use herald_sink_core::Template;

    use super::*;

    fn config() -> Settings {
        Settings::new("127.0.0.1:1", Template::parse("herald.{kind}").unwrap())
    }

    fn invalid_detail(config: Settings) -> String {
        match KafkaSink::new(config) {
            Err(SinkError::InvalidConfig { detail }) => detail.into_owned(),
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn builds_without_contacting_brokers() {
        let sink = KafkaSink::new(config()).unwrap();
        assert_eq!(sink.max_message_bytes(), DEFAULT_MESSAGE_MAX_BYTES);
        assert_eq!(sink.config().client_id, "herald");
        assert_eq!(KafkaSink::NAME, "kafka");
    }

    #[test]
    fn reads_the_configured_message_max_bytes() {
        let sink = KafkaSink::new(config().property("message.max.bytes", "20000")).unwrap();
        assert_eq!(sink.max_message_bytes(), 20_000);
    }

    #[test]
    fn unknown_properties_are_named() {
        let detail = invalid_detail(config().property("no.such.property", "1"));
        assert!(detail.contains("`no.such.property`"), "{detail}");
    }

    #[test]
    fn invalid_values_are_named() {
        let detail = invalid_detail(config().property("compression.type", "brotli"));
        assert!(detail.contains("`compression.type`"), "{detail}");
        assert!(detail.contains("brotli"), "{detail}");
    }

    #[test]
    fn secret_values_stay_out_of_errors() {
        let detail = invalid_detail(config().property("ssl.key.password.bogus", "hunter2"));
        assert!(detail.contains("`ssl.key.password.bogus`"), "{detail}");
        assert!(!detail.contains("hunter2"), "{detail}");
    }

    #[test]
    fn conflicting_properties_are_invalid() {
        let detail = invalid_detail(config().property("acks", "1"));
        assert!(detail.contains("acks"), "{detail}");
    }

    #[test]
    fn tls_and_sasl_scram_are_built_in() {
        for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
            KafkaSink::new(
                config()
                    .property("security.protocol", "SASL_SSL")
                    .property("sasl.mechanism", mechanism)
                    .property("sasl.username", "herald")
                    .property("sasl.password", "secret"),
            )
            .unwrap();
        }
        // GSSAPI (Kerberos) needs cyrus-sasl, which this build leaves out on purpose.
        let detail = invalid_detail(config().property("security.protocol", "SASL_PLAINTEXT"));
        assert!(detail.contains("GSSAPI"), "{detail}");
        let detail = invalid_detail(
            config()
                .property("security.protocol", "SSL")
                .property("ssl.ca.location", "/nonexistent/ca.pem"),
        );
        assert!(detail.contains("ssl.ca.location"), "{detail}");
    }

    #[test]
    fn refuses_empty_brokers_zero_timeouts_and_bad_topics() {
        let detail = invalid_detail(Settings::new(" ", Template::parse("t").unwrap()));
        assert!(detail.contains("brokers"), "{detail}");
        assert!(
            KafkaSink::new(
                Settings::new("", Template::parse("t").unwrap())
                    .property("bootstrap.servers", "k:9092")
            )
            .is_ok()
        );
        let detail = invalid_detail(Settings {
            message_timeout: Duration::ZERO,
            ..config()
        });
        assert!(detail.contains("messageTimeout"), "{detail}");
        let detail = invalid_detail(Settings::new(
            "k:9092",
            Template::parse("herald/{kind}").unwrap(),
        ));
        assert!(detail.contains("herald/{kind}"), "{detail}");
    }

    #[test]
    fn debug_hides_property_values() {
        let sink = KafkaSink::new(config().property("sasl.password", "hunter2")).unwrap();
        let text = format!("{sink:?}");
        assert!(text.contains("sasl.password"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }

    #[tokio::test]
    async fn healthcheck_fails_when_no_broker_answers() {
        // Port 1 on loopback refuses connections.
        let sink = KafkaSink::new(Settings {
            message_timeout: Duration::from_millis(1500),
            ..config()
        })
        .unwrap();
        let error = sink.healthcheck().await.unwrap_err();
        assert!(
            matches!(error, SinkError::ConnectFailed { ref target, .. } if target == "127.0.0.1:1"),
            "{error:?}"
        );
        let source = std::error::Error::source(&error).unwrap().to_string();
        assert!(source.contains("no broker answered"), "{source}");
        // A broker that is down may come up: herald starts the sink paused instead of exiting.
        assert!(KafkaSink::is_transient(&error));
    }
}
