//! `type: kafka` settings, as users write them; start at [`KafkaConfig`].

use std::collections::BTreeMap;
use std::time::Duration;

use herald_sink_core::Template;
use herald_sink_core::config::{
    DeliveryKeys, DeliveryOptions, EnvLookup, MAX_TIMEOUT, Problems, SecretRef, SinkConfig,
    check_secret, deserialize_duration, resolve_secret, setting_failed,
};
use herald_sink_core::jinja::MessageTemplate;
use herald_sink_core::sink::SinkError;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::KafkaSink;
use crate::settings::{DEFAULT_MESSAGE_TIMEOUT, Settings};

/// `type: kafka` settings. Each event is a record on `topic` with the event's `partitionkey` as
/// the key, so an object's events share a partition and keep their order. The producer is
/// idempotent with `acks=all`; an event is delivered when its delivery report says so.
///
/// ```
/// use herald_sink_core::config::{Problems, SecretRef, SinkConfig};
/// use herald_sink_kafka::{KafkaConfig, KafkaMode};
///
/// let config: KafkaConfig = serde_json::from_value(serde_json::json!({
///     "brokers": ["kafka-0:9092", "kafka-1:9092"],
///     "topic": "herald.{group}.{kind}",
///     "mode": "structured",
///     "properties": {"security.protocol": "SASL_SSL", "sasl.username": "herald"},
///     "secretProperties": {"sasl.password": "${KAFKA_PASSWORD}"},
/// }))?;
/// assert_eq!(config.mode, KafkaMode::Structured);
/// assert_eq!(
///     config.secret_properties["sasl.password"],
///     SecretRef::Env("KAFKA_PASSWORD".into())
/// );
/// let mut problems = Problems::default();
/// config.validate(&mut problems);
/// assert!(problems.is_empty());
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KafkaConfig {
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
    /// (`message.timeout.ms`); greater than zero and at most `1h`. A dead cluster thus shows up as
    /// a retrying, paused sink (soon: hence the bound). Default `30s`. Example: `2m`.
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
    /// Record key and header templates (minijinja, as the webhook's `template`): partition by
    /// something other than `partitionkey`, or add headers consumers route on; see
    /// [`KafkaTemplate`]. Default: none (key = `partitionkey`, the binding's headers only).
    /// Example: `{key: "{{ namespace }}"}`.
    #[serde(default)]
    pub template: Option<KafkaTemplate>,
}

/// `template` of a Kafka sink: the record key and extra headers, rendered per event from the same
/// context as webhook templates. A template that fails on an event dead-letters it
/// (`render_failed`).
///
/// Order: herald keeps each object's events in order, and Kafka keeps a partition's. A key at
/// least as coarse as the object (`{{ namespace }}`, `{{ kind }}`, `{{ partitionkey }}`) sends
/// all of an object's events to one partition, so consumers see them in order; a key that varies
/// per event (`{{ id }}`) spreads them over partitions, and their order is lost. With
/// `tombstones`, the tombstone carries the rendered key, which compaction then forgets: keep the key
/// per object there.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KafkaTemplate {
    /// The record key. Default: `partitionkey`. Example: `{{ namespace }}`.
    #[serde(default)]
    pub key: Option<String>,
    /// Extra headers, name to template, after the binding's. `ce_*`, `content-type` and
    /// `herald_error_*` are refused. Default: none. Example: `{tenant: "{{ object.metadata.labels.tenant }}"}`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

impl KafkaConfig {
    /// Records for `brokers` on `topic` (a name or a template) with every default: binary mode,
    /// no tombstones, a 30 s message timeout, no extra properties.
    #[must_use]
    pub fn new(brokers: Vec<String>, topic: impl Into<String>) -> Self {
        Self {
            brokers,
            topic: topic.into(),
            mode: KafkaMode::default(),
            tombstones: false,
            message_timeout: default_message_timeout(),
            properties: BTreeMap::new(),
            secret_properties: BTreeMap::new(),
            template: None,
        }
    }
}

/// `mode` of a Kafka sink: how events are laid out in records (CloudEvents Kafka binding).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum KafkaMode {
    /// Value = `data`, `content-type` and `ce_*` headers.
    #[default]
    Binary,
    /// Value = the JSON event (`application/cloudevents+json`).
    Structured,
}

fn default_message_timeout() -> Duration {
    DEFAULT_MESSAGE_TIMEOUT
}

/// `batchMaxEvents` of a Kafka sink when not given.
const DEFAULT_BATCH_MAX_EVENTS: usize = 256;

/// librdkafka properties that carry secrets: they must come from `secretProperties`.
const SECRET_PROPERTIES: [&str; 8] = [
    "sasl.password",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.config",
    "ssl.key.password",
    "ssl.key.pem",
    "ssl.keystore.password",
    "ssl_key",
    "ssl.certificate.pem",
];

impl SinkConfig for KafkaConfig {
    type Sink = KafkaSink;

    const DELIVERY: DeliveryKeys = DeliveryKeys::All {
        batch_max_events: DEFAULT_BATCH_MAX_EVENTS,
        batch_beside: None,
    };

    fn validate(&self, problems: &mut Problems) {
        if self.brokers.is_empty() {
            problems.add("brokers", "at least one broker is required");
        }
        for (i, broker) in self.brokers.iter().enumerate() {
            if !is_host_port(broker) {
                problems.add(
                    format!("brokers[{i}]"),
                    format!("{broker:?} is not host:port (like kafka-0.kafka:9092)"),
                );
            }
        }
        if let Err(error) = Template::parse(&self.topic).and_then(|t| t.check_kafka_topic()) {
            problems.add("topic", error.to_string());
        }
        if self.message_timeout.is_zero() {
            problems.add("messageTimeout", "must be greater than 0s");
        }
        MAX_TIMEOUT.check(
            problems,
            "messageTimeout",
            self.message_timeout,
            "a dead cluster must show up as a retrying sink",
        );
        for name in self.properties.keys() {
            if SECRET_PROPERTIES.contains(&name.as_str()) {
                problems.add(
                    format!("properties.{name}"),
                    "holds a secret: put it in secretProperties as ${VAR} or {fromFile: PATH}",
                );
            } else if name.trim().is_empty() {
                problems.add("properties", "a property name must not be empty");
            }
        }
        for name in self.secret_properties.keys() {
            if self.properties.contains_key(name) {
                problems.add(
                    format!("secretProperties.{name}"),
                    "is also set in properties; set it once",
                );
            }
        }
        if let Some(template) = &self.template {
            MessageTemplate::validate(
                template.key.as_deref(),
                &template.headers,
                kafka_header_problem,
                problems,
            );
        }
    }

    /// Every secret property.
    fn secret_files(&self) -> Vec<&std::path::Path> {
        self.secret_properties
            .values()
            .filter_map(SecretRef::file)
            .collect()
    }

    fn check_secrets(&self, env: EnvLookup<'_>, problems: &mut Problems) {
        for (key, secret) in &self.secret_properties {
            check_secret(problems, &format!("secretProperties.{key}"), secret, env);
        }
    }

    /// Parses the topic, resolves the secret properties (errors name the property and the
    /// variable or file) and builds the producer, whose `client.id` is `herald-<name>`.
    async fn build(&self, name: &str, _delivery: &DeliveryOptions) -> Result<KafkaSink, SinkError> {
        KafkaSink::new(self.settings(name)?)
    }
}

impl KafkaConfig {
    fn settings(&self, name: &str) -> Result<Settings, SinkError> {
        let topic = Template::parse(&self.topic).map_err(|e| setting_failed("topic", e))?;
        let mut out = Settings {
            mode: self.mode,
            tombstones: self.tombstones,
            message_timeout: self.message_timeout,
            client_id: format!("herald-{name}"),
            template: match &self.template {
                Some(t) => Some(
                    MessageTemplate::compile(name, t.key.as_deref(), &t.headers)
                        .map_err(|e| setting_failed(e.name.clone(), e.message))?,
                ),
                None => None,
            },
            ..Settings::new(self.brokers.join(","), topic)
        };
        for (key, value) in &self.properties {
            out = out.property(key.clone(), value.clone());
        }
        for (key, secret) in &self.secret_properties {
            let value = resolve_secret(&format!("secretProperties.{key}"), secret)?;
            out = out.property(key.clone(), value);
        }
        Ok(out)
    }
}

/// Why a templated header name cannot be used: empty, or one the binding or dead-lettering sets.
fn kafka_header_problem(name: &str) -> Option<String> {
    let lower = name.to_ascii_lowercase();
    if name.is_empty() {
        Some("a header name must not be empty".to_owned())
    } else if lower == "content-type"
        || lower.starts_with("ce_")
        || lower.starts_with("herald_error_")
    {
        Some(format!(
            "{name:?} is set by herald and cannot be configured"
        ))
    } else {
        None
    }
}

/// `host:port` with a non-empty host and a numeric port (IPv6 in brackets).
fn is_host_port(s: &str) -> bool {
    s.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok_and(|p| p > 0)
    })
}
