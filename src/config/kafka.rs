//! `type: kafka` settings: one record per event, keyed by `partitionkey`.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::secret::SecretRef;
use super::sink::{SinkStart, default_concurrency, deserialize_some_duration};
use super::units::deserialize_duration;

/// `type: kafka` settings. Each event is a record on `topic` with the event's `partitionkey` as
/// the key, so an object's events share a partition and keep their order. The producer is
/// idempotent with `acks=all`; an event is delivered when its delivery report says so.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KafkaSinkConfig {
    /// Bootstrap brokers, `host:port` each (librdkafka's `bootstrap.servers`). Required.
    /// Example: `[kafka-0.kafka:9092, kafka-1.kafka:9092]`.
    pub brokers: Vec<String>,
    /// Topic name, or a template over `{group}`, `{version}`, `{kind}`, `{plural}` and
    /// `{namespace}`; each value is made a legal topic name (`[a-zA-Z0-9._-]`, at most 249
    /// characters). Required. Example: `herald.{group}.{plural}`.
    pub topic: String,
    /// CloudEvents Kafka binding: `binary` (value = `data`, attributes as `ce_*` headers) or
    /// `structured` (value = the JSON event). Default `binary`. Example: `structured`.
    #[serde(default)]
    pub mode: KafkaMode,
    /// After a `deleted` event, also write a tombstone (same key, null value) so a compacted
    /// topic forgets the object. Default `false`. Example: `true`.
    #[serde(default)]
    pub tombstones: bool,
    /// How long librdkafka may try one record before herald sees it fail and retries it
    /// (`message.timeout.ms`); greater than zero. A dead cluster thus shows up as a retrying,
    /// paused sink. Default `30s`. Example: `2m`.
    #[serde(
        default = "default_message_timeout",
        deserialize_with = "deserialize_duration"
    )]
    #[schemars(with = "String", extend("default" = "30s"))]
    pub message_timeout: Duration,
    /// librdkafka properties, passed through as given and applied after herald's defaults, so
    /// they win. Secret-bearing ones (`sasl.password`, `ssl.key.password` …) are refused here;
    /// put them in `secretProperties`. Default: none. Example:
    /// `{security.protocol: SASL_SSL, sasl.mechanism: SCRAM-SHA-512, sasl.username: herald}`.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// librdkafka properties whose values are secrets, as secret references. Default: none.
    /// Example: `{sasl.password: ${KAFKA_PASSWORD}}`.
    #[serde(default)]
    pub secret_properties: BTreeMap<String, SecretRef>,
    /// Concurrent send calls; at least 1. Each call produces a batch of records at once, so
    /// `concurrency` × `batchMaxEvents` records may be in flight. Default `8`. Example: `4`.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Most events per send call (distinct keys); at least 1. Default `256`. Example: `1000`.
    #[serde(default = "default_batch_max_events")]
    pub batch_max_events: usize,
    /// Dead-letter an event after this many failed attempts; at least 1. Default: none.
    /// Example: `20`.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// Dead-letter an event still failing this long after its first failure. Default: none.
    /// Example: `24h`.
    #[serde(default, deserialize_with = "deserialize_some_duration")]
    #[schemars(with = "Option<String>")]
    pub max_age: Option<Duration>,
    /// Name of the sink that receives this sink's dead letters; a Kafka dead-letter sink adds
    /// `herald_error_*` headers. Default: none. Example: `audit-dlq`.
    #[serde(default)]
    pub dead_letter_sink: Option<String>,
    /// Where this sink starts when it has no cursor yet: `head` or `earliest`. Default `head`.
    /// Example: `earliest`.
    #[serde(default)]
    pub start: SinkStart,
}

/// `mode` of a Kafka sink.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum KafkaMode {
    /// Value = `data`, `content-type` and `ce_*` headers.
    #[default]
    Binary,
    /// Value = the JSON event (`application/cloudevents+json`).
    Structured,
}

fn default_message_timeout() -> Duration {
    Duration::from_secs(30)
}

pub(super) fn default_batch_max_events() -> usize {
    256
}

/// librdkafka properties that carry secrets: they must come from `secretProperties`.
pub const SECRET_PROPERTIES: [&str; 8] = [
    "sasl.password",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.config",
    "ssl.key.password",
    "ssl.key.pem",
    "ssl.keystore.password",
    "ssl_key",
    "ssl.certificate.pem",
];
