//! [`DeliveryOptions`]: the keys the delivery driver reads for every sink, written flat beside
//! the sink's own keys (`{name: hook, type: webhook, url: …, maxAttempts: 20}`).
//!
//! `rateLimit` and `debounce` pace what the driver sends, so every sink type takes them, as it
//! takes `start`.

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
    /// Only `start`, `rateLimit` and `debounce`: a local sink (the file sink) that the driver feeds one batch at a time and
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
const KEYS: [&str; 8] = [
    "concurrency",
    "batchMaxEvents",
    "maxAttempts",
    "maxAge",
    "deadLetterSink",
    "rateLimit",
    "debounce",
    "start",
];

/// The delivery keys every sink type takes.
const EVERY_TYPE: [&str; 3] = ["rateLimit", "debounce", "start"];

/// The longest `debounce`: events of an object wait this long before one is sent.
const MAX_DEBOUNCE: super::Bound = super::Bound::new(std::time::Duration::from_secs(3600), "1h");

/// `concurrency` when the sink type takes it and the user left it out.
const DEFAULT_CONCURRENCY: usize = 8;

impl DeliveryKeys {
    /// Whether a sink of this type reads `key` as a delivery key.
    #[must_use]
    pub fn takes(self, key: &str) -> bool {
        match self {
            Self::Start => EVERY_TYPE.contains(&key),
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
    /// Most requests per second this sink sends (each event of a send call is one, a `batched`
    /// webhook request is one), retries and replays included: `{perSecond: N, burst: M}`. Every
    /// sink type takes it. Default: none (as fast as the sink takes them).
    /// Example: `{perSecond: 10, burst: 20}`.
    pub rate_limit: Option<RateLimit>,
    /// Per object (`partitionkey`): an event waits this long before it is sent, and a newer event
    /// of the same object arriving meanwhile replaces it, so only the latest state within the
    /// window is sent; the replaced ones are counted and acknowledged. Greater than zero, at most
    /// `1h`. Every sink type takes it. Not for audit sinks, which need every change. Default:
    /// none. Example: `30s`.
    #[schemars(with = "Option<String>")]
    pub debounce: Option<Duration>,
}

/// `rateLimit` of a sink: a token bucket of `burst` requests, refilled at `perSecond`.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RateLimit {
    /// Requests per second on average; greater than 0, fractions allowed (`0.5`: one every two
    /// seconds). Required. Example: `10`.
    pub per_second: f64,
    /// Requests that may go at once after a quiet spell; at least 1. Default `1`: evenly spaced.
    /// Example: `20`.
    #[serde(default = "one")]
    pub burst: u32,
}

fn one() -> u32 {
    1
}

/// Equal when both numbers are (`perSecond` compared bit for bit: it is read from text, never
/// computed, so equal text gives equal bits).
impl PartialEq for RateLimit {
    fn eq(&self, other: &Self) -> bool {
        self.per_second.to_bits() == other.per_second.to_bits() && self.burst == other.burst
    }
}

impl Eq for RateLimit {}

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
            rate_limit: None,
            debounce: None,
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
            "rateLimit" => self.rate_limit = Some(map.next_value()?),
            "debounce" => self.debounce = Some(map.next_value_seed(DurationSeed)?),
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
        if let Some(limit) = self.rate_limit {
            if !(limit.per_second.is_finite() && limit.per_second > 0.0) {
                problems.add(
                    "rateLimit.perSecond",
                    "must be greater than 0; omit rateLimit to send without a limit",
                );
            }
            if limit.burst == 0 {
                problems.add("rateLimit.burst", "must be at least 1");
            }
        }
        if self.debounce.is_some_and(|d| d.is_zero()) {
            problems.add(
                "debounce",
                "must be greater than 0s; omit it to send every event",
            );
        }
        if let Some(debounce) = self.debounce {
            MAX_DEBOUNCE.check(
                problems,
                "debounce",
                debounce,
                "an object's events wait this long before one is sent",
            );
        }
    }
}

impl Default for DeliveryOptions {
    /// The options of a sink type that takes only `start`.
    fn default() -> Self {
        Self::new(DeliveryKeys::Start)
    }
}

/// `maxAge`'s and `debounce`'s value: a duration with a unit.
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
#[allow(clippy::unwrap_used)]
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
                rate_limit: None,
                debounce: None,
            }
        );
        assert_eq!(DeliveryOptions::default().concurrency, None);
        assert_eq!(DeliveryOptions::default().batch_max_events, None);
    }

    #[test]
    fn keys_are_listed_after_the_sinks_own() {
        assert_eq!(
            DeliveryKeys::Start.listed(&["path", "fsync"]),
            ["path", "fsync", "rateLimit", "debounce", "start"]
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
                "rateLimit",
                "debounce",
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
                "rateLimit",
                "debounce",
                "start"
            ]
        );
    }

    #[test]
    fn every_type_takes_rate_limit_and_debounce() {
        for keys in [DeliveryKeys::Start, KAFKA, WEBHOOK] {
            assert!(
                keys.takes("rateLimit") && keys.takes("debounce"),
                "{keys:?}"
            );
        }
        let limit: RateLimit =
            serde_json::from_value(serde_json::json!({"perSecond": 2.5})).unwrap();
        assert_eq!(
            limit,
            RateLimit {
                per_second: 2.5,
                burst: 1
            }
        );
        let err =
            serde_json::from_value::<RateLimit>(serde_json::json!({"perSecond": 1, "rate": 2}))
                .unwrap_err()
                .to_string();
        assert!(err.starts_with("unknown field `rate`"), "{err}");
    }

    #[test]
    fn rate_limits_and_debounces_must_be_positive() {
        let mut problems = Problems::default();
        DeliveryOptions {
            rate_limit: Some(RateLimit {
                per_second: 0.0,
                burst: 0,
            }),
            debounce: Some(Duration::ZERO),
            ..DeliveryOptions::new(KAFKA)
        }
        .validate(&mut problems);
        let found: Vec<(String, String)> =
            problems.into_iter().map(|p| (p.key, p.message)).collect();
        assert_eq!(
            found,
            [
                (
                    "rateLimit.perSecond".to_owned(),
                    "must be greater than 0; omit rateLimit to send without a limit".to_owned()
                ),
                (
                    "rateLimit.burst".to_owned(),
                    "must be at least 1".to_owned()
                ),
                (
                    "debounce".to_owned(),
                    "must be greater than 0s; omit it to send every event".to_owned()
                ),
            ]
        );
        let mut long = Problems::default();
        DeliveryOptions {
            rate_limit: Some(RateLimit {
                per_second: f64::NAN,
                burst: 1,
            }),
            debounce: Some(Duration::from_secs(3601)),
            ..DeliveryOptions::default()
        }
        .validate(&mut long);
        let keys: Vec<String> = long.into_iter().map(|p| p.key).collect();
        assert_eq!(keys, ["rateLimit.perSecond", "debounce"]);
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
