//! `type: nats` settings, as users write them: core NATS or JetStream; start at [`NatsConfig`].

use std::path::PathBuf;
use std::time::Duration;

use herald_sink_core::Template;
use herald_sink_core::config::{
    Bound, DeliveryKeys, DeliveryOptions, EnvLookup, MAX_KEEP, MAX_TIMEOUT, Problems, SecretRef,
    SinkConfig, check_secret, deserialize_duration, deserialize_some_duration, resolve_secret,
    setting_failed,
};
use herald_sink_core::sink::SinkError;
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::{self, Deserializer};

use crate::NatsSink;
use crate::settings::{
    Auth, DEFAULT_ACK_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_DUPLICATE_WINDOW,
    DEFAULT_MAX_IN_FLIGHT, Settings,
};

/// `type: nats` settings. Without `jetstream` each event is a core NATS publish (delivered once
/// the connection is flushed, which the server does not persist); with it, a JetStream publish
/// that is delivered when the stream's `PubAck` arrives, with `Nats-Msg-Id` = the event id so
/// the stream drops redeliveries inside its duplicate window.
///
/// ```
/// use herald_sink_core::config::{Problems, SinkConfig};
/// use herald_sink_nats::{NatsConfig, NatsMode};
///
/// let config: NatsConfig = serde_json::from_value(serde_json::json!({
///     "servers": ["nats://127.0.0.1:4222"],
///     "subject": "herald.{group}.{kind}",
///     "mode": "binary",
///     "jetstream": {"stream": "HERALD", "create": {"subjects": ["herald.>"]}},
///     "auth": {"token": "${NATS_TOKEN}"},
///     "ackTimeout": "5s",
/// }))?;
/// assert_eq!(config.mode, NatsMode::Binary);
/// let mut problems = Problems::default();
/// config.validate(&mut problems);
/// assert!(problems.is_empty());
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NatsConfig {
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
    /// How long connecting may take at start-up; greater than zero and at most `1h` (a server
    /// that has not answered by then is better retried). Default `5s`. Example: `10s`.
    #[serde(
        default = "default_connect_timeout",
        deserialize_with = "deserialize_duration"
    )]
    #[schemars(with = "String", extend("default" = "5s"))]
    pub connect_timeout: Duration,
    /// How long a JetStream `PubAck` may take before the event is retried; greater than zero and
    /// at most `1h` (an unanswered publish is better retried). Default `10s`. Example: `30s`.
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
    /// Header templates (minijinja, as the webhook's `template`); see [`NatsTemplate`]. Default:
    /// none. Example: `{headers: {tenant: "{{ namespace }}"}}`.
    #[serde(default)]
    pub template: Option<NatsTemplate>,
}

/// `template` of a NATS sink: extra headers rendered per event from the same context as webhook
/// templates. A template that fails on an event dead-letters it (`render_failed`). (The subject
/// stays a `{var}` name template: subjects are names, sanitized token by token.)
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NatsTemplate {
    /// Headers, name to template, after the binding's. `ce-*`, `content-type`, `Nats-*` and
    /// `herald-error-*` are refused. Default: none. Example: `{tenant: "{{ namespace }}"}`.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
}

impl NatsConfig {
    /// Publishes to `servers` on `subject` (a subject or a template) with every default:
    /// structured mode, core NATS, no auth, TLS only where asked for, 5 s connect timeout, 10 s
    /// ack timeout, 4096 publishes in flight.
    #[must_use]
    pub fn new(servers: Vec<String>, subject: impl Into<String>) -> Self {
        Self {
            servers,
            subject: subject.into(),
            mode: NatsMode::default(),
            jetstream: None,
            auth: None,
            tls: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            ack_timeout: DEFAULT_ACK_TIMEOUT,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            template: None,
        }
    }
}

/// `mode` of a NATS sink: how an event becomes a NATS message (CloudEvents NATS binding).
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

impl NatsJetStream {
    /// Publishing to the existing stream `stream`.
    #[must_use]
    pub fn new(stream: impl Into<String>) -> Self {
        Self {
            stream: stream.into(),
            create: None,
        }
    }

    /// Creates the stream from `spec` when it is missing.
    #[must_use]
    pub fn create(mut self, spec: NatsStreamSpec) -> Self {
        self.create = Some(spec);
        self
    }
}

/// `jetstream.create` of a NATS sink: the stream herald creates when it is missing. An existing
/// stream is never changed.
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
    /// How long the stream remembers `Nats-Msg-Id`s to drop redeliveries; greater than zero and
    /// at most `7d` (the server holds every id of the window in memory). Default `2m`.
    /// Example: `1h`.
    #[serde(
        default = "default_duplicate_window",
        deserialize_with = "deserialize_duration"
    )]
    #[schemars(with = "String", extend("default" = "2m"))]
    pub duplicate_window: Duration,
    /// Messages older than this are removed; at most `3650d` (ten years: longer is a slip).
    /// Default: none (kept until other limits apply). Example: `7d`.
    #[serde(default, deserialize_with = "deserialize_some_duration")]
    #[schemars(with = "Option<String>")]
    pub max_age: Option<Duration>,
}

impl NatsStreamSpec {
    /// A file-backed, single-replica stream over `subjects` with a 2-minute duplicate window and
    /// no age limit.
    #[must_use]
    pub fn new(subjects: Vec<String>) -> Self {
        Self {
            subjects,
            storage: NatsStorage::default(),
            replicas: default_replicas(),
            duplicate_window: DEFAULT_DUPLICATE_WINDOW,
            max_age: None,
        }
    }

    /// Sets the storage.
    #[must_use]
    pub fn storage(mut self, storage: NatsStorage) -> Self {
        self.storage = storage;
        self
    }

    /// Sets the number of replicas.
    #[must_use]
    pub fn replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas;
        self
    }

    /// Sets the duplicate window.
    #[must_use]
    pub fn duplicate_window(mut self, window: Duration) -> Self {
        self.duplicate_window = window;
        self
    }

    /// Sets the age limit.
    #[must_use]
    pub fn max_age(mut self, max_age: Duration) -> Self {
        self.max_age = Some(max_age);
        self
    }
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

// serde's externally tagged enums want a YAML tag (`!token`) once the document has gone through
// `serde_yaml_ng::Value`, so the one-key mapping is read as a struct.
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

herald_sink_core::tls_config! {
    /// `tls` of a NATS sink. Paths are PEM files, read when connecting; `${VAR}` is expanded.
    pub struct NatsTls {
        /// Require TLS even on `nats://` URLs. Default `false`. Example: `true`.
        #[serde(default)]
        pub required: bool,
    }
}

fn default_connect_timeout() -> Duration {
    DEFAULT_CONNECT_TIMEOUT
}

fn default_ack_timeout() -> Duration {
    DEFAULT_ACK_TIMEOUT
}

fn default_max_in_flight() -> usize {
    DEFAULT_MAX_IN_FLIGHT
}

fn default_replicas() -> usize {
    1
}

fn default_duplicate_window() -> Duration {
    DEFAULT_DUPLICATE_WINDOW
}

/// The longest `jetstream.create.duplicateWindow`: a week.
const MAX_DUPLICATE_WINDOW: Bound = Bound::new(Duration::from_secs(7 * 24 * 3600), "7d");

/// `batchMaxEvents` of a NATS sink when not given.
const DEFAULT_BATCH_MAX_EVENTS: usize = 256;

impl SinkConfig for NatsConfig {
    type Sink = NatsSink;

    const DELIVERY: DeliveryKeys = DeliveryKeys::All {
        batch_max_events: DEFAULT_BATCH_MAX_EVENTS,
        batch_beside: None,
    };

    fn paths_mut(&mut self) -> Vec<(&'static str, &mut PathBuf)> {
        let mut out = self
            .tls
            .as_mut()
            .map(NatsTls::paths_mut)
            .unwrap_or_default();
        if let Some(NatsAuth::CredentialsFile(path)) = &mut self.auth {
            out.push(("auth.credentialsFile", path));
        }
        out
    }

    fn validate(&self, problems: &mut Problems) {
        if self.servers.is_empty() {
            problems.add("servers", "at least one server URL is required");
        }
        for (i, server) in self.servers.iter().enumerate() {
            let ok = ["nats://", "tls://", "ws://", "wss://"]
                .iter()
                .find_map(|scheme| server.strip_prefix(scheme))
                .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'));
            if !ok {
                problems.add(
                    format!("servers[{i}]"),
                    format!("{server:?} is not a NATS URL (nats://host:4222 or tls://host:4222)"),
                );
            }
        }
        if let Some(template) = &self.template {
            herald_sink_core::jinja::MessageTemplate::validate(
                None,
                &template.headers,
                nats_header_problem,
                problems,
            );
        }
        if let Err(error) = Template::parse(&self.subject).and_then(|t| t.check_nats_subject()) {
            problems.add("subject", error.to_string());
        }
        if let Some(js) = &self.jetstream {
            js.validate(problems);
        }
        if let Some(NatsAuth::UserPassword { user, .. }) = &self.auth
            && user.is_empty()
        {
            problems.add("auth.user", "must not be empty");
        }
        if let Some(tls) = &self.tls {
            tls.check_client_pair(problems);
        }
        for (value, key) in [
            (self.connect_timeout, "connectTimeout"),
            (self.ack_timeout, "ackTimeout"),
        ] {
            if value.is_zero() {
                problems.add(key, "must be greater than 0s");
            }
            MAX_TIMEOUT.check(
                problems,
                key,
                value,
                "an unanswered server is better retried",
            );
        }
        if self.max_in_flight == 0 {
            problems.add("maxInFlight", "must be at least 1");
        }
    }

    /// The credential's secret, or its credentials file (read whole, as connecting will).
    fn secret_files(&self) -> Vec<&std::path::Path> {
        match &self.auth {
            None => vec![],
            Some(
                NatsAuth::Token(secret)
                | NatsAuth::UserPassword {
                    password: secret, ..
                }
                | NatsAuth::NkeySeed(secret),
            ) => secret.file().into_iter().collect(),
            Some(NatsAuth::CredentialsFile(path)) => vec![path.as_path()],
        }
    }

    fn check_secrets(&self, env: EnvLookup<'_>, problems: &mut Problems) {
        match &self.auth {
            None => {}
            Some(NatsAuth::Token(token)) => {
                check_secret(problems, "auth.token", token, env);
            }
            Some(NatsAuth::UserPassword { password, .. }) => {
                check_secret(problems, "auth.password", password, env);
            }
            Some(NatsAuth::NkeySeed(seed)) => {
                check_secret(problems, "auth.nkeySeed", seed, env);
            }
            Some(NatsAuth::CredentialsFile(path)) => {
                if let Err(e) = std::fs::read(path) {
                    problems.add(
                        "auth.credentialsFile",
                        format!("cannot read credentials file {}: {e}", path.display()),
                    );
                }
            }
        }
    }

    /// Parses the subject, resolves the credentials (errors name the key and the variable or
    /// file) and connects as `herald-<name>`; with JetStream, looks the stream up (creating it
    /// from `jetstream.create` when missing).
    async fn build(&self, name: &str, _delivery: &DeliveryOptions) -> Result<NatsSink, SinkError> {
        let mut settings = self.settings(format!("herald-{name}"))?;
        if let Some(template) = &self.template {
            settings.template = Some(
                herald_sink_core::jinja::MessageTemplate::compile(name, None, &template.headers)
                    .map_err(|e| setting_failed(e.name.clone(), e.message))?,
            );
        }
        NatsSink::connect(settings).await
    }
}

impl NatsJetStream {
    fn validate(&self, problems: &mut Problems) {
        if self.stream.is_empty()
            || self
                .stream
                .chars()
                .any(|c| c.is_whitespace() || matches!(c, '.' | '*' | '>' | '/' | '\\'))
        {
            problems.add(
                "jetstream.stream",
                format!(
                    "{:?} is not a stream name (no '.', '*', '>', '/', '\\' or whitespace)",
                    self.stream
                ),
            );
        }
        if let Some(create) = &self.create {
            if create.subjects.is_empty() {
                problems.add(
                    "jetstream.create.subjects",
                    "at least one subject is required",
                );
            }
            if !(1..=5).contains(&create.replicas) {
                problems.add("jetstream.create.replicas", "must be 1 to 5");
            }
            if create.duplicate_window.is_zero() {
                problems.add(
                    "jetstream.create.duplicateWindow",
                    "must be greater than 0s",
                );
            }
            MAX_DUPLICATE_WINDOW.check(
                problems,
                "jetstream.create.duplicateWindow",
                create.duplicate_window,
                "the server holds every id of the window in memory",
            );
            if let Some(age) = create.max_age {
                MAX_KEEP.check(
                    problems,
                    "jetstream.create.maxAge",
                    age,
                    "omit it to keep messages until other limits apply",
                );
            }
        }
    }
}

impl NatsConfig {
    /// What the sink uses: subject parsed, credentials resolved, connecting as `connection_name`.
    pub(crate) fn settings(&self, connection_name: String) -> Result<Settings, SinkError> {
        let subject = Template::parse(&self.subject).map_err(|e| setting_failed("subject", e))?;
        let auth = match &self.auth {
            None => None,
            Some(NatsAuth::Token(token)) => Some(Auth::Token(resolve_secret("auth.token", token)?)),
            Some(NatsAuth::UserPassword { user, password }) => Some(Auth::UserPassword {
                user: user.clone(),
                password: resolve_secret("auth.password", password)?,
            }),
            Some(NatsAuth::NkeySeed(seed)) => Some(Auth::NKey {
                seed: resolve_secret("auth.nkeySeed", seed)?,
            }),
            Some(NatsAuth::CredentialsFile(path)) => Some(Auth::CredentialsFile(path.clone())),
        };
        Ok(Settings {
            mode: self.mode,
            jetstream: self.jetstream.clone(),
            auth,
            tls: self.tls.clone(),
            connect_timeout: self.connect_timeout,
            ack_timeout: self.ack_timeout,
            max_in_flight: self.max_in_flight,
            connection_name,
            servers: self.servers.clone(),
            subject,
            template: None,
        })
    }
}

/// Why a templated header name cannot be used: not a NATS header name, or one the binding,
/// JetStream or dead-lettering sets.
fn nats_header_problem(name: &str) -> Option<String> {
    let lower = name.to_ascii_lowercase();
    if name.is_empty() || name.bytes().any(|b| b <= b' ' || b == b':' || b == 0x7F) {
        Some(format!("{name:?} is not a NATS header name"))
    } else if lower == "content-type"
        || lower.starts_with("ce-")
        || lower.starts_with("nats-")
        || lower.starts_with("herald-error-")
    {
        Some(format!(
            "{name:?} is set by herald or NATS and cannot be configured"
        ))
    } else {
        None
    }
}
