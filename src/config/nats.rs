//! `type: nats` settings: core NATS or JetStream.

use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::{self, Deserializer};

use super::secret::SecretRef;
use super::sink::{SinkStart, default_concurrency, deserialize_some_duration};
use super::units::deserialize_duration;

/// `type: nats` settings. Without `jetstream` each event is a core NATS publish (delivered once
/// the connection is flushed, which the server does not persist); with it, a JetStream publish
/// that is delivered when the stream's `PubAck` arrives, with `Nats-Msg-Id` = the event id so
/// the stream drops redeliveries inside its duplicate window.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NatsSinkConfig {
    /// Server URLs (`nats://host:4222`, `tls://host:4222`); the client fails over between them
    /// and reconnects by itself. Required. Example: `[nats://nats.messaging:4222]`.
    pub servers: Vec<String>,
    /// Subject, or a template over `{group}`, `{version}`, `{kind}`, `{plural}`, `{namespace}`,
    /// `{name}` and `{op}`; each value becomes one legal subject token (`.`, `*`, `>` and
    /// whitespace replaced). Required. Example: `herald.{plural}.{namespace}.{name}.{op}`.
    pub subject: String,
    /// CloudEvents NATS binding: `structured` (the JSON event as payload, the 1.0.2 binding) or
    /// `binary` (payload = `data`, attributes as `ce-` headers). Default `structured`.
    /// Example: `binary`.
    #[serde(default)]
    pub mode: NatsMode,
    /// Publish to JetStream and wait for each event's `PubAck`. Default: none (core NATS).
    /// Example: `{stream: HERALD}`.
    #[serde(default)]
    pub jetstream: Option<NatsJetStream>,
    /// Credentials: `{token: SECRET}`, `{user: NAME, password: SECRET}`, `{nkeySeed: SECRET}`
    /// or `{credentialsFile: PATH}`. Default: none. Example: `{credentialsFile: /etc/herald/nats.creds}`.
    #[serde(default)]
    #[schemars(with = "Option<NatsAuthKeys>")]
    pub auth: Option<NatsAuth>,
    /// TLS: a private CA, a client certificate, and whether TLS is required even on `nats://`
    /// URLs. Default: TLS only when the server asks for it, system roots. Example:
    /// `{caFile: /etc/herald/ca.pem, required: true}`.
    #[serde(default)]
    pub tls: Option<NatsTls>,
    /// How long connecting may take at start-up; greater than zero. Default `5s`. Example: `10s`.
    #[serde(
        default = "default_connect_timeout",
        deserialize_with = "deserialize_duration"
    )]
    #[schemars(with = "String", extend("default" = "5s"))]
    pub connect_timeout: Duration,
    /// How long a JetStream `PubAck` may take before the event is retried; greater than zero.
    /// Default `10s`. Example: `30s`.
    #[serde(
        default = "default_ack_timeout",
        deserialize_with = "deserialize_duration"
    )]
    #[schemars(with = "String", extend("default" = "10s"))]
    pub ack_timeout: Duration,
    /// Most JetStream publishes awaiting their `PubAck` at once; at least 1. Default `4096`.
    /// Example: `1024`.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// Concurrent send calls; at least 1. Default `8`. Example: `4`.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Most events per send call (distinct keys); at least 1. Default `256`. Example: `1000`.
    #[serde(default = "super::kafka::default_batch_max_events")]
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
    /// Name of the sink that receives this sink's dead letters; a NATS dead-letter sink adds
    /// `herald-error-*` headers. Default: none. Example: `alerts-dlq`.
    #[serde(default)]
    pub dead_letter_sink: Option<String>,
    /// Where this sink starts when it has no cursor yet: `head` or `earliest`. Default `head`.
    /// Example: `earliest`.
    #[serde(default)]
    pub start: SinkStart,
}

/// `mode` of a NATS sink.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum NatsMode {
    /// The JSON event as payload (`application/cloudevents+json`).
    #[default]
    Structured,
    /// Payload = `data`, attributes as `ce-` headers.
    Binary,
}

/// `jetstream` of a NATS sink.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NatsJetStream {
    /// The stream that captures the sink's subjects; it must exist at start-up unless `create` is
    /// given. Required. Example: `HERALD`.
    pub stream: String,
    /// Create the stream at start-up if it does not exist. Default: none (a missing stream stops
    /// start-up with a clear error). Example: `{subjects: ["herald.>"], duplicateWindow: 10m}`.
    #[serde(default)]
    pub create: Option<NatsStreamSpec>,
}

/// `jetstream.create` of a NATS sink: the stream herald creates when it is missing.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NatsStreamSpec {
    /// Subjects the stream captures; they must cover the sink's subjects. Required.
    /// Example: `["herald.>"]`.
    pub subjects: Vec<String>,
    /// `file` or `memory`. Default `file`. Example: `memory`.
    #[serde(default)]
    pub storage: NatsStorage,
    /// Replicas, 1 to 5. Default `1`. Example: `3`.
    #[serde(default = "default_replicas")]
    pub replicas: usize,
    /// How long the stream remembers `Nats-Msg-Id`s to drop redeliveries; greater than zero.
    /// Default `2m`. Example: `1h`.
    #[serde(
        default = "default_duplicate_window",
        deserialize_with = "deserialize_duration"
    )]
    #[schemars(with = "String", extend("default" = "2m"))]
    pub duplicate_window: Duration,
    /// Messages older than this are removed. Default: none (kept until other limits apply).
    /// Example: `7d`.
    #[serde(default, deserialize_with = "deserialize_some_duration")]
    #[schemars(with = "Option<String>")]
    pub max_age: Option<Duration>,
}

/// `jetstream.create.storage`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum NatsStorage {
    /// On disk.
    #[default]
    File,
    /// In memory.
    Memory,
}

/// `auth` of a NATS sink: a mapping with one credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NatsAuth {
    /// `{token: SECRET}`.
    Token(SecretRef),
    /// `{user: NAME, password: SECRET}`.
    UserPassword {
        /// User name, literal text.
        user: String,
        /// Password, a secret reference.
        password: SecretRef,
    },
    /// `{nkeySeed: SECRET}`: the NKey seed (`SU…`), a secret reference.
    NkeySeed(SecretRef),
    /// `{credentialsFile: PATH}`: a `.creds` file with the user JWT and NKey seed.
    CredentialsFile(PathBuf),
}

/// `auth` as written (and documented in the schema): one credential's keys.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct NatsAuthKeys {
    /// A token, as a secret reference.
    #[serde(default)]
    token: Option<SecretRef>,
    /// A user name, with `password`.
    #[serde(default)]
    user: Option<String>,
    /// The password of `user`, as a secret reference.
    #[serde(default)]
    password: Option<SecretRef>,
    /// An NKey seed, as a secret reference.
    #[serde(default)]
    nkey_seed: Option<SecretRef>,
    /// A `.creds` file.
    #[serde(default)]
    credentials_file: Option<PathBuf>,
}

// The one-key mapping is read as a struct for the same reason as the webhook's `auth`.
impl<'de> Deserialize<'de> for NatsAuth {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let keys = NatsAuthKeys::deserialize(d)?;
        match keys {
            NatsAuthKeys {
                token: Some(token),
                user: None,
                password: None,
                nkey_seed: None,
                credentials_file: None,
            } => Ok(Self::Token(token)),
            NatsAuthKeys {
                token: None,
                user: Some(user),
                password: Some(password),
                nkey_seed: None,
                credentials_file: None,
            } => Ok(Self::UserPassword { user, password }),
            NatsAuthKeys {
                token: None,
                user: None,
                password: None,
                nkey_seed: Some(seed),
                credentials_file: None,
            } => Ok(Self::NkeySeed(seed)),
            NatsAuthKeys {
                token: None,
                user: None,
                password: None,
                nkey_seed: None,
                credentials_file: Some(path),
            } => Ok(Self::CredentialsFile(path)),
            _ => Err(de::Error::custom(
                "give exactly one of token, user with password, nkeySeed and credentialsFile",
            )),
        }
    }
}

/// `tls` of a NATS sink. Paths are PEM files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NatsTls {
    /// CA certificates (PEM) that verify the server. Default: the system's roots.
    /// Example: `/etc/herald/ca.pem`.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Client certificate chain (PEM) for mutual TLS; needs `clientKeyFile`. Default: none.
    /// Example: `/etc/herald/client.pem`.
    #[serde(default)]
    pub client_cert_file: Option<PathBuf>,
    /// Private key (PEM) of `clientCertFile`. Default: none. Example: `/etc/herald/client-key.pem`.
    #[serde(default)]
    pub client_key_file: Option<PathBuf>,
    /// Require TLS even on `nats://` URLs. Default `false`. Example: `true`.
    #[serde(default)]
    pub required: bool,
}

fn default_connect_timeout() -> Duration {
    Duration::from_secs(5)
}

fn default_ack_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_max_in_flight() -> usize {
    4096
}

fn default_replicas() -> usize {
    1
}

fn default_duplicate_window() -> Duration {
    Duration::from_secs(120)
}
