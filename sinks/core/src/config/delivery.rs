//! [`DeliveryOptions`]: the keys the delivery driver reads for every sink, written flat beside
//! the sink's own keys (`{name: hook, type: webhook, url: …, maxAttempts: 20}`).

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, MapAccess};

use super::Problems;
use super::units::{MAX_KEEP, deserialize_duration};

/// Which delivery keys a sink type takes, and their defaults: the same set users could write for
/// that type before these keys had one home.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryKeys {
    /// Only `start`: a local sink (the file sink) that the driver feeds one batch at a time and
    /// never gives up on.
    Start,
    /// Every key: a network sink with concurrent sends, attempt budgets and a dead-letter sink.
    All {
        /// The default of `batchMaxEvents`.
        batch_max_events: usize,
        /// The sink's own key that `batchMaxEvents` is listed after, when it belongs beside one
        /// (the webhook's `mode`, whose `batched` requests it sizes); `None` lists it with the
        /// other delivery keys.
        batch_beside: Option<&'static str>,
    },
}

/// The delivery keys in the order they are listed after a sink's own keys.
const KEYS: [&str; 6] = [
    "concurrency",
    "batchMaxEvents",
    "maxAttempts",
    "maxAge",
    "deadLetterSink",
    "start",
];

/// `concurrency` when the sink type takes it and the user left it out.
const DEFAULT_CONCURRENCY: usize = 8;

impl DeliveryKeys {
    /// Whether a sink of this type reads `key` as a delivery key.
    #[must_use]
    pub fn takes(self, key: &str) -> bool {
        match self {
            Self::Start => key == "start",
            Self::All { .. } => KEYS.contains(&key),
        }
    }

    /// Every key a sink of this type accepts, for messages: `own` (the sink's keys, in order)
    /// with the delivery keys it takes after them, `batchMaxEvents` beside its key where given.
    #[must_use]
    pub fn listed(self, own: &[&'static str]) -> Vec<&'static str> {
        let beside = match self {
            Self::All {
                batch_beside: Some(beside),
                ..
            } if own.contains(&beside) => Some(beside),
            _ => None,
        };
        let mut out = Vec::with_capacity(own.len() + KEYS.len());
        for key in own {
            out.push(*key);
            if Some(*key) == beside {
                out.push("batchMaxEvents");
            }
        }
        out.extend(
            KEYS.iter()
                .filter(|key| self.takes(key) && !(beside.is_some() && **key == "batchMaxEvents")),
        );
        out
    }
}

/// The keys every network sink shares (`start` for every sink), read by the delivery driver.
///
/// In YAML they sit flat beside the sink's own keys; herald reads them with [`read`] while the
/// rest of the mapping goes to the sink's configuration. A key the sink type does not take (see
/// [`DeliveryKeys`]) is an unknown key for that type. `None` in `concurrency` or
/// `batchMaxEvents` means the type has no such key and the driver's default applies.
///
/// [`read`]: DeliveryOptions::read
#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryOptions {
    /// Concurrent send calls, each a batch of events with distinct partition keys; at least 1.
    /// Default `8`. Example: `16`.
    #[schemars(with = "usize")]
    pub concurrency: Option<usize>,
    /// Most events per send call (for the webhook, per `batched` request); at least 1. Default
    /// `256` (the webhook's `100`). Example: `1000`.
    #[schemars(with = "usize")]
    pub batch_max_events: Option<usize>,
    /// Dead-letter an event after this many failed attempts; at least 1. Default: none
    /// (retryable failures retry without limit). Example: `20`.
    pub max_attempts: Option<u32>,
    /// Dead-letter an event still failing this long after its first failure; greater than zero
    /// and at most `3650d` (ten years: anything longer is a slip, and would overflow clocks).
    /// Default: none. Example: `24h`.
    #[schemars(with = "Option<String>")]
    pub max_age: Option<Duration>,
    /// Name of the sink that receives this sink's dead letters, with `herald-error-*` headers
    /// (`herald_error_*` for Kafka); it must exist and not be this sink. Default: none (dead
    /// letters stay in herald's dead-letter queue). Example: `audit-dlq`.
    pub dead_letter_sink: Option<String>,
    /// Where this sink starts when it has no cursor yet (it is new, or was renamed): `head` (only
    /// events journaled from now on) or `earliest` (everything still in the journal). Default
    /// `head`. Example: `earliest`.
    pub start: SinkStart,
}

impl DeliveryOptions {
    /// The options of a sink type taking `keys`, every key at its default.
    #[must_use]
    pub fn new(keys: DeliveryKeys) -> Self {
        let (concurrency, batch_max_events) = match keys {
            DeliveryKeys::Start => (None, None),
            DeliveryKeys::All {
                batch_max_events, ..
            } => (Some(DEFAULT_CONCURRENCY), Some(batch_max_events)),
        };
        Self {
            concurrency,
            batch_max_events,
            max_attempts: None,
            max_age: None,
            dead_letter_sink: None,
            start: SinkStart::default(),
        }
    }

    /// Reads the value of `key` from `map` when it is a delivery key that `keys` takes; returns
    /// whether it was. The value goes through `map`, so an error carries the key in its path.
    ///
    /// # Errors
    /// The map's error for a value of the wrong type or form.
    pub fn read<'de, A: MapAccess<'de>>(
        &mut self,
        keys: DeliveryKeys,
        key: &str,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        if !keys.takes(key) {
            return Ok(false);
        }
        match key {
            "concurrency" => self.concurrency = Some(map.next_value()?),
            "batchMaxEvents" => self.batch_max_events = Some(map.next_value()?),
            "maxAttempts" => self.max_attempts = map.next_value()?,
            "maxAge" => self.max_age = Some(map.next_value_seed(DurationSeed)?),
            "deadLetterSink" => self.dead_letter_sink = map.next_value()?,
            "start" => self.start = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Checks the rules serde cannot, in the order users see them: each problem's key is the
    /// delivery key.
    pub fn validate(&self, problems: &mut Problems) {
        if self.batch_max_events == Some(0) {
            problems.add("batchMaxEvents", "must be at least 1");
        }
        if self.concurrency == Some(0) {
            problems.add("concurrency", "must be at least 1");
        }
        if self.max_attempts == Some(0) {
            problems.add(
                "maxAttempts",
                "must be at least 1; omit it to retry without limit",
            );
        }
        if self.max_age.is_some_and(|age| age.is_zero()) {
            problems.add(
                "maxAge",
                "must be greater than 0s; omit it to retry without limit",
            );
        }
        if let Some(age) = self.max_age {
            MAX_KEEP.check(problems, "maxAge", age, "omit it to retry without limit");
        }
    }
}

impl Default for DeliveryOptions {
    /// The options of a sink type that takes only `start`.
    fn default() -> Self {
        Self::new(DeliveryKeys::Start)
    }
}

/// `maxAge`'s value: a duration with a unit.
struct DurationSeed;

impl<'de> DeserializeSeed<'de> for DurationSeed {
    type Value = Duration;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Duration, D::Error> {
        deserialize_duration(d)
    }
}

/// `start`: where a sink without a cursor begins reading the journal. Every sink type has it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SinkStart {
    /// Only events journaled after the sink first appears.
    #[default]
    Head,
    /// Everything still in the journal (see `journal.retain`).
    Earliest,
}

#[cfg(test)]
mod tests {
    use super::*;

    const WEBHOOK: DeliveryKeys = DeliveryKeys::All {
        batch_max_events: 100,
        batch_beside: Some("mode"),
    };
    const KAFKA: DeliveryKeys = DeliveryKeys::All {
        batch_max_events: 256,
        batch_beside: None,
    };

    #[test]
    fn each_type_takes_its_keys_with_its_defaults() {
        assert!(DeliveryKeys::Start.takes("start"));
        assert!(!DeliveryKeys::Start.takes("concurrency"));
        assert!(KAFKA.takes("batchMaxEvents") && !KAFKA.takes("name"));
        assert_eq!(
            DeliveryOptions::new(WEBHOOK),
            DeliveryOptions {
                concurrency: Some(8),
                batch_max_events: Some(100),
                max_attempts: None,
                max_age: None,
                dead_letter_sink: None,
                start: SinkStart::Head,
            }
        );
        assert_eq!(DeliveryOptions::default().concurrency, None);
        assert_eq!(DeliveryOptions::default().batch_max_events, None);
    }

    #[test]
    fn keys_are_listed_after_the_sinks_own() {
        assert_eq!(
            DeliveryKeys::Start.listed(&["path", "fsync"]),
            ["path", "fsync", "start"]
        );
        assert_eq!(
            KAFKA.listed(&["brokers", "topic"]),
            [
                "brokers",
                "topic",
                "concurrency",
                "batchMaxEvents",
                "maxAttempts",
                "maxAge",
                "deadLetterSink",
                "start"
            ]
        );
        assert_eq!(
            WEBHOOK.listed(&["url", "mode", "signing"]),
            [
                "url",
                "mode",
                "batchMaxEvents",
                "signing",
                "concurrency",
                "maxAttempts",
                "maxAge",
                "deadLetterSink",
                "start"
            ]
        );
    }

    #[test]
    fn zero_counts_and_durations_are_problems() {
        let options = DeliveryOptions {
            concurrency: Some(0),
            batch_max_events: Some(0),
            max_attempts: Some(0),
            max_age: Some(Duration::ZERO),
            ..DeliveryOptions::new(KAFKA)
        };
        let mut problems = Problems::default();
        options.validate(&mut problems);
        let keys: Vec<String> = problems.into_iter().map(|p| p.key).collect();
        assert_eq!(
            keys,
            ["batchMaxEvents", "concurrency", "maxAttempts", "maxAge"]
        );
        let mut none = Problems::default();
        DeliveryOptions::new(KAFKA).validate(&mut none);
        assert!(none.is_empty());
        let mut long = Problems::default();
        DeliveryOptions {
            max_age: Some(MAX_KEEP.max + Duration::from_secs(1)),
            ..DeliveryOptions::new(KAFKA)
        }
        .validate(&mut long);
        let found: Vec<(String, String)> = long.into_iter().map(|p| (p.key, p.message)).collect();
        assert_eq!(
            found,
            [(
                "maxAge".to_owned(),
                "must be at most 3650d: omit it to retry without limit".to_owned()
            )]
        );
    }
}
