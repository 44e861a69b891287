//! What the running sink uses, derived from [`KafkaConfig`](crate::KafkaConfig) with templates
//! parsed and secret properties resolved; start at [`Settings`].

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use herald_sink_core::Template;
use rdkafka::ClientConfig;

use crate::KafkaMode;

/// Default `message.timeout.ms`: how long librdkafka keeps trying to deliver a record before its
/// delivery report says `MessageTimedOut` (a `Retry`).
pub const DEFAULT_MESSAGE_TIMEOUT: Duration = Duration::from_secs(30);

/// Default `client.id`.
pub const DEFAULT_CLIENT_ID: &str = "herald";

/// librdkafka's default `message.max.bytes`, the largest record the producer accepts (and the
/// broker default for `message.max.bytes` is close to it).
pub const DEFAULT_MESSAGE_MAX_BYTES: usize = 1_000_000;

/// Settings of a [`KafkaSink`](crate::KafkaSink): the configuration with its topic template
/// parsed and its secret properties resolved into `properties`. `Debug` prints property names only.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    /// `bootstrap.servers`: comma-separated `host:port` list.
    pub brokers: String,
    /// The topic: a fixed name or a template over `{group}` `{version}` `{kind}` `{plural}`
    /// `{namespace}`; rendered names are sanitised to legal topic names. Its literal text must pass
    /// [`Template::check_kafka_topic`].
    pub topic: Template,
    /// Binary (default) or structured mode.
    pub mode: KafkaMode,
    /// After a `deleted` event, also write a null-value record (a tombstone) with the same key, for
    /// compacted topics. The event is `Ok` only when both records are delivered. Default off.
    pub tombstones: bool,
    /// `message.timeout.ms`: how long a record may wait for its delivery report. Default
    /// [`DEFAULT_MESSAGE_TIMEOUT`]. Bounded on purpose: against a dead cluster herald sees retries
    /// (and pauses the sink) instead of records piling up unseen in librdkafka's queue. Must be
    /// greater than zero (librdkafka's 0 would mean "forever"). `topic.metadata.propagation.max.ms`
    /// defaults to half of it (at most librdkafka's 30 s), so records to a missing topic come back
    /// as `unknown_topic` retries rather than plain timeouts.
    pub message_timeout: Duration,
    /// Any librdkafka property (`security.protocol`, `sasl.*`, `ssl.*`, `message.max.bytes` …),
    /// applied last, so it overrides herald's defaults, aliases included (`delivery.timeout.ms`
    /// overrides `message_timeout`).
    pub properties: BTreeMap<String, String>,
    /// `client.id`, seen in broker logs and quotas. Default [`DEFAULT_CLIENT_ID`].
    pub client_id: String,
    /// The record key and header templates (`template:`); `None`: key = `partitionkey`.
    pub template: Option<herald_sink_core::jinja::MessageTemplate>,
}

impl Settings {
    /// Settings for `brokers` and `topic` with every default: binary mode, no tombstones, a 30 s
    /// message timeout, no extra properties, client id `herald`.
    #[must_use]
    pub fn new(brokers: impl Into<String>, topic: Template) -> Self {
        Self {
            brokers: brokers.into(),
            topic,
            mode: KafkaMode::default(),
            tombstones: false,
            message_timeout: DEFAULT_MESSAGE_TIMEOUT,
            properties: BTreeMap::new(),
            client_id: DEFAULT_CLIENT_ID.to_owned(),
            template: None,
        }
    }

    /// Sets one librdkafka property (replacing an earlier value).
    #[must_use]
    pub fn property(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(name.into(), value.into());
        self
    }

    /// The librdkafka configuration: herald's producer defaults, then every property.
    ///
    /// A default is left out when the user sets it under any of its names: `ClientConfig` is a
    /// hash map, so setting both `linger.ms` and its alias `queue.buffering.max.ms` would leave
    /// the winner to iteration order.
    pub fn client_config(&self) -> ClientConfig {
        let timeout_ms = millis(self.message_timeout);
        // librdkafka waits this long before it calls a topic missing (default 30 s). Below the
        // message timeout, records to a missing topic fail as `unknown_topic` (an alert)
        // instead of a plain `message_timed_out`.
        let propagation_ms = (timeout_ms / 2).clamp(1, 30_000).to_string();
        let timeout_ms = timeout_ms.to_string();
        let defaults: [(&str, &str); 10] = [
            ("bootstrap.servers", &self.brokers),
            ("client.id", &self.client_id),
            // Idempotence keeps per-partition order and drops duplicates across librdkafka's own
            // retries; it requires acks=all, which is also what makes a delivery report durable.
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("compression.type", "lz4"),
            // A few milliseconds let concurrent `send` calls share produce requests.
            ("linger.ms", "5"),
            // Java's default partitioner: keyed records land on the partitions Java producers pick,
            // so other producers and Kafka Streams joins agree with herald.
            ("partitioner", "murmur2_random"),
            ("message.timeout.ms", &timeout_ms),
            ("topic.metadata.propagation.max.ms", &propagation_ms),
            // librdkafka's default, stated so it is visible: herald's journal is the real buffer,
            // and a full queue only makes `send` wait briefly (local backpressure).
            ("queue.buffering.max.messages", "100000"),
        ];
        let mut config = ClientConfig::new();
        for (name, value) in defaults {
            if !self.properties.keys().any(|key| same_property(key, name)) {
                config.set(name, value);
            }
        }
        for (name, value) in &self.properties {
            config.set(name, value);
        }
        config
    }
}

/// librdkafka property aliases among the properties herald sets (CONFIGURATION.md).
const ALIASES: [(&str, &str); 5] = [
    ("bootstrap.servers", "metadata.broker.list"),
    ("message.timeout.ms", "delivery.timeout.ms"),
    ("compression.type", "compression.codec"),
    ("linger.ms", "queue.buffering.max.ms"),
    ("acks", "request.required.acks"),
];

/// True when `a` and `b` name the same librdkafka property.
pub(crate) fn same_property(a: &str, b: &str) -> bool {
    a == b
        || ALIASES
            .iter()
            .any(|&(x, y)| (a == x && b == y) || (a == y && b == x))
}

/// Whole milliseconds, at least 1 (0 means "no timeout" to librdkafka).
pub(crate) fn millis(duration: Duration) -> u128 {
    duration.as_millis().max(1)
}

/// Property values may be secrets: only their names are printed.
impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let property_names: Vec<&str> = self.properties.keys().map(String::as_str).collect();
        f.debug_struct("Settings")
            .field("brokers", &self.brokers)
            .field("topic", &self.topic.as_str())
            .field("mode", &self.mode)
            .field("tombstones", &self.tombstones)
            .field("message_timeout", &self.message_timeout)
            .field("properties", &property_names)
            .field("client_id", &self.client_id)
            .field("template", &self.template)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Settings {
        Settings::new("k:9092", Template::parse("t").unwrap())
    }

    #[test]
    fn defaults() {
        let config = config();
        assert_eq!(config.mode, KafkaMode::Binary);
        assert!(!config.tombstones);
        assert_eq!(config.message_timeout, Duration::from_secs(30));
        assert!(config.properties.is_empty());
        assert_eq!(config.client_id, "herald");
    }

    #[test]
    fn producer_defaults_favour_correctness_and_throughput() {
        let client = Settings {
            message_timeout: Duration::from_millis(1500),
            ..config()
        }
        .client_config();
        for (name, value) in [
            ("bootstrap.servers", "k:9092"),
            ("client.id", "herald"),
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("compression.type", "lz4"),
            ("linger.ms", "5"),
            ("partitioner", "murmur2_random"),
            ("message.timeout.ms", "1500"),
            ("topic.metadata.propagation.max.ms", "750"),
            ("queue.buffering.max.messages", "100000"),
        ] {
            assert_eq!(client.get(name), Some(value), "{name}");
        }
    }

    #[test]
    fn properties_override_defaults_and_their_aliases() {
        let client = config()
            .property("acks", "1")
            .property("enable.idempotence", "false")
            .property("delivery.timeout.ms", "9000")
            .property("queue.buffering.max.ms", "50")
            .property("security.protocol", "SASL_SSL")
            .client_config();
        assert_eq!(client.get("acks"), Some("1"));
        assert_eq!(client.get("enable.idempotence"), Some("false"));
        assert_eq!(client.get("delivery.timeout.ms"), Some("9000"));
        assert_eq!(client.get("message.timeout.ms"), None);
        assert_eq!(client.get("queue.buffering.max.ms"), Some("50"));
        assert_eq!(client.get("linger.ms"), None);
        assert_eq!(client.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(client.get("compression.type"), Some("lz4"));
    }

    #[test]
    fn missing_topics_are_called_missing_before_records_time_out() {
        let propagation = |message_timeout| {
            Settings {
                message_timeout,
                ..config()
            }
            .client_config()
            .get("topic.metadata.propagation.max.ms")
            .map(str::to_owned)
        };
        assert_eq!(
            propagation(Duration::from_secs(30)).as_deref(),
            Some("15000")
        );
        assert_eq!(
            propagation(Duration::from_secs(600)).as_deref(),
            Some("30000")
        );
        assert_eq!(propagation(Duration::from_millis(1)).as_deref(), Some("1"));
    }

    #[test]
    fn aliases_match_both_ways() {
        assert!(same_property("linger.ms", "linger.ms"));
        assert!(same_property("linger.ms", "queue.buffering.max.ms"));
        assert!(same_property("metadata.broker.list", "bootstrap.servers"));
        assert!(!same_property("linger.ms", "acks"));
    }

    #[test]
    fn sub_millisecond_timeouts_do_not_become_infinite() {
        assert_eq!(millis(Duration::from_micros(10)), 1);
        assert_eq!(millis(Duration::from_secs(2)), 2000);
    }

    #[test]
    fn debug_hides_property_values() {
        let text = format!("{:?}", config().property("sasl.password", "hunter2"));
        assert!(text.contains("sasl.password"));
        assert!(!text.contains("hunter2"));
    }
}
