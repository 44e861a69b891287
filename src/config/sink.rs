//! The `sinks` section: where events go. One [`SinkKind`] variant per sink crate.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::kafka::KafkaSinkConfig;
use super::nats::NatsSinkConfig;
use super::secret::SecretRef;
use super::units::{deserialize_duration, deserialize_size};

/// The `path` of a file sink that writes to standard output.
pub const STDOUT_PATH: &str = "-";

/// One sink (`sinks[]`): its name and its type-specific settings.
///
/// In YAML all keys sit side by side: `{name: archive, type: file, path: events.jsonl}`.
#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SinkConfig {
    /// Unique name: metric label `sink`, log field, dead-letter queue and journal cursor name, and
    /// what `routes[].sinks` refers to. Matches `[a-z0-9][a-z0-9-]*`, at most 63 characters.
    /// Required. Example: `archive`.
    pub name: String,
    /// The type-specific settings, selected by `type`.
    #[serde(flatten)]
    pub kind: SinkKind,
}

/// The sink type and its settings; `type` in YAML, matching the sink crate's name and `Sink::NAME`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "camelCase")]
// Read once at start-up for a handful of sinks: plain variants beat boxing for the size.
#[allow(clippy::large_enum_variant)]
pub enum SinkKind {
    /// `type: file`: JSON lines (structured-mode CloudEvents) appended to a file or stdout.
    File(FileSinkConfig),
    /// `type: webhook`: CloudEvents POSTed to an HTTP endpoint, signed per Standard Webhooks.
    Webhook(WebhookSinkConfig),
    /// `type: kafka`: one record per event, keyed by `partitionkey`.
    Kafka(KafkaSinkConfig),
    /// `type: nats`: core NATS publishes or JetStream publishes awaiting a `PubAck`.
    Nats(NatsSinkConfig),
}

/// The value of `type`, without settings: for metric labels and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SinkType {
    /// `file`.
    File,
    /// `webhook`.
    Webhook,
    /// `kafka`.
    Kafka,
    /// `nats`.
    Nats,
}

impl SinkType {
    /// The spelling in `type`, equal to the sink module name and `Sink::NAME`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::File => "file",
            Self::Webhook => "webhook",
            Self::Kafka => "kafka",
            Self::Nats => "nats",
        }
    }
}

impl fmt::Display for SinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl SinkKind {
    /// Which type this is.
    #[must_use]
    pub const fn sink_type(&self) -> SinkType {
        // Exhaustive on purpose: a new variant must get a `SinkType`, and then a dispatch arm in
        // `SinkConfigVisitor`, or this does not compile.
        match self {
            Self::File(_) => SinkType::File,
            Self::Webhook(_) => SinkType::Webhook,
            Self::Kafka(_) => SinkType::Kafka,
            Self::Nats(_) => SinkType::Nats,
        }
    }

    /// Where the sink starts without a cursor (`start`, which every type has).
    #[must_use]
    pub const fn start(&self) -> SinkStart {
        match self {
            Self::File(file) => file.start,
            Self::Webhook(webhook) => webhook.start,
            Self::Kafka(kafka) => kafka.start,
            Self::Nats(nats) => nats.start,
        }
    }

    /// The sink that receives this sink's dead letters (`deadLetterSink`), if any.
    #[must_use]
    pub fn dead_letter_sink(&self) -> Option<&str> {
        match self {
            Self::File(_) => None,
            Self::Webhook(webhook) => webhook.dead_letter_sink.as_deref(),
            Self::Kafka(kafka) => kafka.dead_letter_sink.as_deref(),
            Self::Nats(nats) => nats.dead_letter_sink.as_deref(),
        }
    }
}

/// `type: file` settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FileSinkConfig {
    /// File the events are appended to, one JSON CloudEvent per line; `-` writes to stdout.
    /// `${VAR}` is expanded; relative paths are relative to herald's working directory. Required.
    /// Example: `/var/lib/herald/events.jsonl`.
    pub path: PathBuf,
    /// When written events are fsynced: `always` (before each acknowledgement), `interval`
    /// (every `fsyncInterval`; a crash may lose that window, and the journal re-sends it) or
    /// `never` (left to the OS). Ignored for stdout. Default `interval`. Example: `always`.
    #[serde(default)]
    pub fsync: Fsync,
    /// How often `fsync: interval` syncs; a duration with a unit, greater than zero. Default
    /// `1s`. Example: `250ms`.
    #[serde(
        default = "default_fsync_interval",
        deserialize_with = "deserialize_duration"
    )]
    #[schemars(with = "String", extend("default" = "1s"))]
    pub fsync_interval: Duration,
    /// Size-based rotation. Default: none (the file grows without bound). Not allowed with
    /// stdout. Example: `{maxSize: 64MiB, maxFiles: 5}`.
    #[serde(default)]
    pub rotate: Option<Rotate>,
    /// Where this sink starts when it has no cursor yet (it is new, or was renamed): `head` (only
    /// events journaled from now on) or `earliest` (everything still in the journal). Default
    /// `head`. Example: `earliest`.
    #[serde(default)]
    pub start: SinkStart,
}

impl FileSinkConfig {
    /// Whether `path` is `-`, standard output.
    #[must_use]
    pub fn is_stdout(&self) -> bool {
        self.path.as_os_str() == STDOUT_PATH
    }
}

fn default_fsync_interval() -> Duration {
    Duration::from_secs(1)
}

/// `fsync` of a file sink.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Fsync {
    /// fsync before acknowledging each batch.
    Always,
    /// fsync every `fsyncInterval`.
    #[default]
    Interval,
    /// Never fsync; the OS writes back when it likes.
    Never,
}

/// `rotate` of a file sink: when the file reaches `maxSize` it is renamed to `<path>.1` (older
/// ones shift to `.2` …) and a new file is started.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Rotate {
    /// Size at which the file is rotated, in bytes; a size with a unit (`B`, `KB`, `MB`, `GB`,
    /// `KiB`, `MiB`, `GiB`, `Ki`, `Mi`, `Gi` …), greater than zero. Required. Example: `64MiB`.
    #[serde(deserialize_with = "deserialize_size")]
    #[schemars(with = "String")]
    pub max_size: u64,
    /// How many rotated files (`<path>.1` … `<path>.N`) are kept besides the active one; older
    /// ones are deleted. At least 1. Default `5`. Example: `10`.
    #[serde(default = "default_max_files")]
    pub max_files: usize,
}

fn default_max_files() -> usize {
    5
}

/// `type: webhook` settings: each event (or batch) is an HTTP POST to `url`; 2xx is delivered, 408,
/// 429 and 5xx except 501 are retried (honouring `Retry-After`), redirects are not followed, and
/// 3xx, 501 and other 4xx dead-letter the event.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookSinkConfig {
    /// The receiver: an `http` or `https` URL, without credentials (use `auth`). Required.
    /// Example: `https://events.example.com/herald`.
    pub url: String,
    /// Extra headers sent with every request, name to value. Names herald sets itself
    /// (`Content-Type`, `ce-*`, `webhook-*`, `Authorization`, `X-Hub-Signature-256`,
    /// `herald-error-*`, connection headers) are refused. Values are literal text, so never put a
    /// secret here. Default: none. Example: `{X-Tenant: payments}`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The `Authorization` header: `{bearer: SECRET}` or
    /// `{basic: {username: NAME, password: SECRET}}`, secrets as references. Default: none.
    /// Example: `{bearer: ${WEBHOOK_TOKEN}}`.
    #[serde(default)]
    pub auth: Option<WebhookAuth>,
    /// TLS for `https` URLs: a private CA and a client certificate. Default: the system's root
    /// certificates, no client certificate. Example: `{caFile: /etc/herald/ca.pem}`.
    #[serde(default)]
    pub tls: Option<WebhookTls>,
    /// Per-request timeout (connect, send, receive the answer); greater than zero. A timed-out
    /// request is retried. Default `10s`. Example: `30s`.
    #[serde(
        default = "default_webhook_timeout",
        deserialize_with = "deserialize_duration"
    )]
    #[schemars(with = "String", extend("default" = "10s"))]
    pub timeout: Duration,
    /// CloudEvents HTTP binding: `binary` (attributes as `ce-` headers, `data` as the body),
    /// `structured` (the JSON event as the body) or `batched` (a JSON array of up to
    /// `batchMaxEvents` events; only for receivers that asked for batches). Default `binary`.
    /// Example: `structured`.
    #[serde(default)]
    pub mode: WebhookMode,
    /// Most events per request in `batched` mode; at least 1. Default `100`. Example: `500`.
    #[serde(default = "default_batch_max_events")]
    pub batch_max_events: usize,
    /// Standard Webhooks signing (`webhook-id`, `webhook-timestamp`, `webhook-signature`).
    /// Default: unsigned. Example: `{secret: ${WEBHOOK_SECRET}}`.
    #[serde(default)]
    pub signing: Option<WebhookSigning>,
    /// Concurrent send calls (each a batch of events with distinct partition keys); at least 1.
    /// Default `8`. Example: `16`.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Dead-letter an event after this many failed attempts; at least 1. Default: none (retryable
    /// failures retry without limit). Example: `20`.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// Dead-letter an event still failing this long after its first failure; greater than zero.
    /// Default: none. Example: `24h`.
    #[serde(default, deserialize_with = "deserialize_some_duration")]
    #[schemars(with = "Option<String>")]
    pub max_age: Option<Duration>,
    /// Name of the sink that receives this sink's dead letters, with `herald-error-*` headers; it
    /// must exist and not be this sink. Default: none (dead letters stay in herald's dead-letter
    /// queue). Example: `audit-dlq`.
    #[serde(default)]
    pub dead_letter_sink: Option<String>,
    /// Where this sink starts when it has no cursor yet: `head` or `earliest`. Default `head`.
    /// Example: `earliest`.
    #[serde(default)]
    pub start: SinkStart,
}

fn default_webhook_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_batch_max_events() -> usize {
    100
}

pub(super) fn default_concurrency() -> usize {
    8
}

/// `deserialize_with` for an optional duration key (serde calls it only when the key is present).
pub(super) fn deserialize_some_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    deserialize_duration(d).map(Some)
}

/// `auth` of a webhook sink: a mapping with exactly one key.
#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub enum WebhookAuth {
    /// `{bearer: SECRET}`: `Authorization: Bearer <token>`.
    Bearer(SecretRef),
    /// `{basic: {username: NAME, password: SECRET}}`: HTTP Basic authentication.
    Basic(WebhookBasicAuth),
}

/// `auth` as written: serde's externally tagged enums want a YAML tag (`!bearer`) once the
/// document has gone through `serde_yaml_ng::Value`, so the one-key mapping is read as a struct.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WebhookAuthKeys {
    #[serde(default)]
    bearer: Option<SecretRef>,
    #[serde(default)]
    basic: Option<WebhookBasicAuth>,
}

impl<'de> Deserialize<'de> for WebhookAuth {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match WebhookAuthKeys::deserialize(d)? {
            WebhookAuthKeys {
                bearer: Some(token),
                basic: None,
            } => Ok(Self::Bearer(token)),
            WebhookAuthKeys {
                bearer: None,
                basic: Some(basic),
            } => Ok(Self::Basic(basic)),
            _ => Err(de::Error::custom("give exactly one of bearer and basic")),
        }
    }
}

/// `auth.basic` of a webhook sink.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookBasicAuth {
    /// The user name, literal text without `:`. Required. Example: `herald`.
    pub username: String,
    /// The password, as a secret reference. Required. Example: `{fromFile: /run/secrets/pw}`.
    pub password: SecretRef,
}

/// `tls` of a webhook sink. Paths are PEM files, read at start-up; `${VAR}` is expanded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookTls {
    /// CA certificates (PEM) that verify the receiver, instead of the system's roots. Default:
    /// the system's roots. Example: `/etc/herald/ca.pem`.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Client certificate chain (PEM) for mutual TLS; needs `clientKeyFile`. Default: none.
    /// Example: `/etc/herald/client.pem`.
    #[serde(default)]
    pub client_cert_file: Option<PathBuf>,
    /// Private key (PEM) of `clientCertFile`. Default: none. Example: `/etc/herald/client-key.pem`.
    #[serde(default)]
    pub client_key_file: Option<PathBuf>,
}

/// `mode` of a webhook sink: the CloudEvents HTTP binding mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum WebhookMode {
    /// One request per event: `ce-` headers, `data` as the body.
    #[default]
    Binary,
    /// One request per event: `application/cloudevents+json`.
    Structured,
    /// One request per `batchMaxEvents` events: `application/cloudevents-batch+json`.
    Batched,
}

/// `signing` of a webhook sink.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookSigning {
    /// The Standard Webhooks secret, `whsec_` followed by base64 (the form receivers' libraries
    /// take), as a secret reference; checked at start-up. Required.
    /// Example: `${WEBHOOK_SECRET}`.
    pub secret: SecretRef,
    /// Also send GitHub-style `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`, keyed
    /// with the same secret's text as written. Default `false`. Example: `true`.
    #[serde(default)]
    pub hub_signature_256: bool,
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

// ---------------------------------------------------------------------------------------------
// Deserialization.
//
// serde's internally tagged enums buffer the whole mapping before choosing the variant, and
// `serde_path_to_error` cannot see into the buffer: a typo inside a sink would be reported at
// `sinks[0]` instead of `sinks[0].fsyncIntervall`. So `SinkConfig` streams instead: once `type`
// is known, the remaining keys go straight to the variant's struct through the path-tracking
// `MapAccess`. `config::parse` moves `type` to the front of every sink first; if it is not first
// (another caller), the mapping is buffered and serde's derived tagged impl decides, with
// coarser error paths.
// ---------------------------------------------------------------------------------------------

/// Keys every sink has, taken out before the rest reaches the variant's struct.
#[derive(Default)]
struct Common {
    name: Option<String>,
}

impl Common {
    /// Deserializes the value of `key` if it is a common key; returns whether it was.
    fn take<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        if !Self::is_common(key) {
            return Ok(false);
        }
        self.name = Some(map.next_value()?);
        Ok(true)
    }

    fn is_common(key: &str) -> bool {
        key == "name"
    }

    fn finish<E: de::Error>(self, kind: SinkKind) -> Result<SinkConfig, E> {
        Ok(SinkConfig {
            name: self.name.ok_or_else(|| E::missing_field("name"))?,
            kind,
        })
    }
}

impl<'de> Deserialize<'de> for SinkConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(SinkConfigVisitor)
    }
}

struct SinkConfigVisitor;

impl<'de> Visitor<'de> for SinkConfigVisitor {
    type Value = SinkConfig;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sink: a mapping with name, type and the type's settings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SinkConfig, A::Error> {
        let mut common = Common::default();
        loop {
            let Some(key) = map.next_key::<String>()? else {
                return Err(de::Error::missing_field("type"));
            };
            if key == "type" {
                break;
            }
            if !common.take(&key, &mut map)? {
                return buffered(key, map, common);
            }
        }
        let sink_type: SinkType = map.next_value()?;
        let rest = de::value::MapAccessDeserializer::new(Rest {
            map: &mut map,
            common: &mut common,
        });
        let kind = match sink_type {
            SinkType::File => SinkKind::File(FileSinkConfig::deserialize(rest)?),
            SinkType::Webhook => SinkKind::Webhook(WebhookSinkConfig::deserialize(rest)?),
            SinkType::Kafka => SinkKind::Kafka(KafkaSinkConfig::deserialize(rest)?),
            SinkType::Nats => SinkKind::Nats(NatsSinkConfig::deserialize(rest)?),
        };
        common.finish(kind)
    }
}

/// The keys after `type`, minus the common ones.
struct Rest<'a, A> {
    map: &'a mut A,
    common: &'a mut Common,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Rest<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let mut seed = seed;
        loop {
            // The key goes through the tracking `MapAccess`, so an unknown field is reported with
            // the key in the path.
            match self.map.next_key_seed(CommonOr(seed))? {
                None => return Ok(None),
                Some(KeyOr::Key(value)) => return Ok(Some(value)),
                Some(KeyOr::Common(key, returned)) => {
                    self.common.take(&key, self.map)?;
                    seed = returned;
                }
            }
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// A key seed that recognizes the common keys and hands every other key to the variant's seed.
struct CommonOr<K>(K);

enum KeyOr<K, V> {
    Key(V),
    /// A common key, with the unused seed handed back.
    Common(String, K),
}

impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for CommonOr<K> {
    type Value = KeyOr<K, K::Value>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(CommonOrVisitor(self.0))
    }
}

struct CommonOrVisitor<K>(K);

impl<'de, K: DeserializeSeed<'de>> Visitor<'de> for CommonOrVisitor<K> {
    type Value = KeyOr<K, K::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        if Common::is_common(v) {
            return Ok(KeyOr::Common(v.to_owned(), self.0));
        }
        let key: de::value::StrDeserializer<'_, E> = de::IntoDeserializer::into_deserializer(v);
        self.0.deserialize(key).map(KeyOr::Key)
    }
}

/// The slow path for a mapping whose first non-common key is not `type`.
fn buffered<'de, A: MapAccess<'de>>(
    first: String,
    mut map: A,
    mut common: Common,
) -> Result<SinkConfig, A::Error> {
    let mut rest = serde_yaml_ng::Mapping::new();
    rest.insert(first.into(), map.next_value()?);
    while let Some(key) = map.next_key::<String>()? {
        if !common.take(&key, &mut map)? {
            rest.insert(key.into(), map.next_value()?);
        }
    }
    let kind =
        SinkKind::deserialize(serde_yaml_ng::Value::Mapping(rest)).map_err(de::Error::custom)?;
    common.finish(kind)
}
