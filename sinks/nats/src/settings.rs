//! What the running sink uses, derived from [`NatsConfig`](crate::NatsConfig) with the subject
//! template parsed and secrets resolved; start at [`Settings`].

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use herald_sink_core::sink::SinkError;
use herald_sink_core::template::Template;

use crate::{NatsJetStream, NatsMode, NatsStreamSpec, NatsTls};

/// Default bound on connecting (and on waiting for a connection in the healthcheck).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Default bound on the wait for one JetStream `PubAck` (and on a core NATS flush).
pub const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// Default cap on unacknowledged JetStream publishes of one sink, across concurrent `send` calls.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 4096;

/// Default JetStream de-duplication window of a stream herald creates.
pub const DEFAULT_DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// Most replicas a JetStream stream can have.
const MAX_REPLICAS: usize = 5;

/// Settings of a [`NatsSink`](crate::NatsSink): the configuration with its subject template
/// parsed and its credentials resolved. `Debug` never prints a secret.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    /// Server URLs, tried in random order: `nats://host:port`, or `tls://host:port` to require
    /// TLS. No credentials in them: use `auth`.
    pub servers: Vec<String>,
    /// The subject each event is published to, from `{group}`, `{version}`, `{kind}`,
    /// `{plural}`, `{namespace}`, `{name}` and `{op}`; each value becomes exactly one subject
    /// token (see [`render_subject`](crate::render_subject)).
    pub subject: Template,
    /// How an event becomes a NATS message. Default [`NatsMode::Structured`].
    pub mode: NatsMode,
    /// Publish to JetStream and wait for its `PubAck`; `None` publishes with core NATS and counts
    /// an event delivered once the client has flushed it (no acknowledgement: at most once).
    pub jetstream: Option<NatsJetStream>,
    /// How herald authenticates; `None` connects anonymously.
    pub auth: Option<Auth>,
    /// TLS settings; `None` uses TLS only where the server or a `tls://` URL asks for it, verified
    /// against the system's roots.
    pub tls: Option<NatsTls>,
    /// Bound on connecting, and on the healthcheck's wait for a connection. Default
    /// [`DEFAULT_CONNECT_TIMEOUT`].
    pub connect_timeout: Duration,
    /// How long a JetStream `PubAck` (or a core NATS flush, or a JetStream API request) may take
    /// before the event is retried with code `timeout`. Default [`DEFAULT_ACK_TIMEOUT`].
    pub ack_timeout: Duration,
    /// Most unacknowledged JetStream publishes of this sink at once, across concurrent `send`
    /// calls. Default [`DEFAULT_MAX_IN_FLIGHT`].
    pub max_in_flight: usize,
    /// The client name the server shows for herald's connection: `herald-<sink name>`.
    pub connection_name: String,
    /// Header templates (`template:`), compiled when the sink is built.
    pub template: Option<herald_sink_core::jinja::MessageTemplate>,
}

impl Settings {
    /// Settings for `servers` and `subject` with every default of [`NatsConfig::new`](crate::NatsConfig::new) and
    /// connection name `herald`.
    #[cfg(test)]
    // The tests hand over templates they built for the purpose.
    #[allow(clippy::needless_pass_by_value)]
    pub fn new(servers: Vec<String>, subject: Template) -> Self {
        crate::NatsConfig::new(servers, subject.as_str())
            .settings("herald".to_owned())
            .expect("defaults hold no secret to resolve")
    }

    /// Checks the settings without connecting or reading any file; [`NatsSink::connect`]
    /// calls it first, and herald's config loading can call it to report errors early.
    ///
    /// # Errors
    ///
    /// [`SinkError::InvalidConfig`] naming the setting: no servers, a server URL that does not
    /// parse, uses another scheme than `nats`/`tls` or carries credentials, a subject template
    /// whose literal text is not a legal subject, a zero timeout or `max_in_flight`, a connection
    /// name with control characters, an invalid stream name, a stream spec without subjects or
    /// with an invalid one, replicas outside 1–5, a zero duplicate window or `max_age`, empty
    /// credentials, or a client certificate without its key (or the reverse).
    ///
    /// [`NatsSink::connect`]: crate::NatsSink::connect
    pub fn check(&self) -> Result<(), SinkError> {
        if self.servers.is_empty() {
            return Err(invalid("servers must name at least one NATS server"));
        }
        for server in &self.servers {
            check_server(server)?;
        }
        self.subject
            .check_nats_subject()
            .map_err(|e| invalid(format!("subject: {e}")))?;
        if self.connect_timeout.is_zero() {
            return Err(invalid("connectTimeout must be greater than zero"));
        }
        if self.ack_timeout.is_zero() {
            return Err(invalid("ackTimeout must be greater than zero"));
        }
        if self.max_in_flight == 0 {
            return Err(invalid("maxInFlight must be at least 1"));
        }
        // The name travels in the CONNECT line as JSON: a control character there is a typo.
        if self.connection_name.chars().any(char::is_control) {
            return Err(invalid(
                "connectionName must not contain control characters",
            ));
        }
        if let Some(jetstream) = &self.jetstream {
            jetstream.check()?;
        }
        if let Some(auth) = &self.auth {
            auth.check()?;
        }
        if let Some(tls) = &self.tls {
            tls.check()?;
        }
        Ok(())
    }
}

/// Credentials and certificate paths are secrets or lead to them: only what kind is used is
/// printed.
impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("servers", &self.servers)
            .field("subject", &self.subject.as_str())
            .field("mode", &self.mode)
            .field("jetstream", &self.jetstream)
            .field("auth", &self.auth)
            .field("tls", &self.tls)
            .field("connect_timeout", &self.connect_timeout)
            .field("ack_timeout", &self.ack_timeout)
            .field("max_in_flight", &self.max_in_flight)
            .field("connection_name", &self.connection_name)
            .field("template", &self.template)
            .finish()
    }
}

impl NatsJetStream {
    fn check(&self) -> Result<(), SinkError> {
        if let Some(problem) = stream_name_problem(&self.stream) {
            return Err(invalid(format!("jetstream.stream {problem}")));
        }
        if let Some(spec) = &self.create {
            spec.check()?;
        }
        Ok(())
    }
}

impl NatsStreamSpec {
    fn check(&self) -> Result<(), SinkError> {
        if self.subjects.is_empty() {
            return Err(invalid(
                "jetstream.create.subjects must name at least one subject",
            ));
        }
        for subject in &self.subjects {
            if !is_valid_filter_subject(subject) {
                return Err(invalid(format!(
                    "jetstream.create.subjects: {subject:?} is not a valid NATS subject"
                )));
            }
        }
        if !(1..=MAX_REPLICAS).contains(&self.replicas) {
            return Err(invalid(format!(
                "jetstream.create.replicas must be between 1 and {MAX_REPLICAS}"
            )));
        }
        if self.duplicate_window.is_zero() {
            return Err(invalid(
                "jetstream.create.duplicateWindow must be greater than zero",
            ));
        }
        if self.max_age.is_some_and(|age| age.is_zero()) {
            return Err(invalid(
                "jetstream.create.maxAge must be greater than zero (leave it unset for no limit)",
            ));
        }
        Ok(())
    }
}

/// How herald authenticates to the server. Values are already resolved from secret references.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// A token (`authorization { token: … }`).
    Token(String),
    /// A user name and password.
    UserPassword {
        /// The user name.
        user: String,
        /// The password.
        password: String,
    },
    /// An NKey: the user's seed (`SU…`), which signs the server's nonce.
    NKey {
        /// The seed; never sent to the server.
        seed: String,
    },
    /// A `.creds` file holding a user JWT and its NKey seed (decentralized auth).
    CredentialsFile(PathBuf),
}

impl Auth {
    fn check(&self) -> Result<(), SinkError> {
        let empty = match self {
            Self::Token(token) => token.is_empty(),
            Self::UserPassword { user, .. } => user.is_empty(),
            Self::NKey { seed } => seed.is_empty(),
            Self::CredentialsFile(path) => path.as_os_str().is_empty(),
        };
        if empty {
            return Err(invalid("auth: the credential is empty"));
        }
        Ok(())
    }
}

/// Prints the kind and the user, never a token, password or seed.
impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Token(_) => f.write_str("Token(<redacted>)"),
            Self::UserPassword { user, .. } => f
                .debug_struct("UserPassword")
                .field("user", user)
                .field("password", &"<redacted>")
                .finish(),
            Self::NKey { .. } => f.write_str("NKey(<redacted>)"),
            Self::CredentialsFile(path) => f.debug_tuple("CredentialsFile").field(path).finish(),
        }
    }
}

impl NatsTls {
    fn check(&self) -> Result<(), SinkError> {
        match (&self.client_cert_file, &self.client_key_file) {
            (Some(_), None) => Err(invalid(
                "tls.clientCertFile is set but tls.clientKeyFile is not",
            )),
            (None, Some(_)) => Err(invalid(
                "tls.clientKeyFile is set but tls.clientCertFile is not",
            )),
            _ => Ok(()),
        }
    }
}

pub(crate) fn invalid(detail: impl Into<String>) -> SinkError {
    SinkError::InvalidConfig {
        detail: detail.into().into(),
    }
}

/// A `nats://` or `tls://` URL (or a bare `host:port`) without credentials.
fn check_server(server: &str) -> Result<(), SinkError> {
    let addr: async_nats::ServerAddr = server
        .parse()
        .map_err(|_| invalid(format!("servers: {server:?} is not a valid NATS URL")))?;
    if !matches!(addr.scheme(), "nats" | "tls") {
        return Err(invalid(format!(
            "servers: {server:?} must use nats:// or tls://"
        )));
    }
    if addr.has_user_pass() {
        // The URL is printed in messages and logs; the credentials belong in `auth`, whose
        // values come from secret references.
        return Err(invalid(
            "servers must not contain credentials; use auth, whose secrets are references",
        ));
    }
    Ok(())
}

/// Why `name` cannot name a JetStream stream, or `None`. The server refuses `.`, `*`, `>`,
/// whitespace and path separators (the name becomes a directory and a subject token).
fn stream_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".to_owned());
    }
    name.chars()
        .find(|c| matches!(c, '.' | '*' | '>' | '/' | '\\') || c.is_whitespace() || c.is_control())
        .map(|c| format!("{name:?} must not contain {c:?}"))
}

/// A subject a stream may capture: non-empty tokens, `*` as a whole token, `>` only as the last
/// token, no whitespace.
fn is_valid_filter_subject(subject: &str) -> bool {
    let tokens: Vec<&str> = subject.split('.').collect();
    tokens.iter().enumerate().all(|(i, token)| {
        !token.is_empty()
            && !token.chars().any(|c| c.is_whitespace() || c.is_control())
            && (!token.contains('*') || *token == "*")
            && (!token.contains('>') || (*token == ">" && i + 1 == tokens.len()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NatsStorage;

    fn config() -> Settings {
        Settings::new(
            vec!["nats://127.0.0.1:4222".into()],
            Template::parse("herald.{group}.{kind}").unwrap(),
        )
    }

    fn detail(err: SinkError) -> String {
        match err {
            SinkError::InvalidConfig { detail } => detail.into_owned(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn defaults() {
        let config = config();
        assert_eq!(config.mode, NatsMode::Structured);
        assert_eq!(config.jetstream, None);
        assert_eq!(config.connect_timeout, Duration::from_secs(5));
        assert_eq!(config.ack_timeout, Duration::from_secs(10));
        assert_eq!(config.max_in_flight, 4096);
        assert_eq!(config.connection_name, "herald");
        let spec = NatsStreamSpec::new(vec!["herald.>".into()]);
        assert_eq!(spec.storage, NatsStorage::File);
        assert_eq!(spec.replicas, 1);
        assert_eq!(spec.duplicate_window, Duration::from_secs(120));
        assert_eq!(spec.max_age, None);
        config.check().unwrap();
    }

    #[test]
    fn accepts_usual_settings() {
        for server in [
            "nats://127.0.0.1:4222",
            "tls://nats.example:4222",
            "127.0.0.1:4222",
            "nats://[::1]:4222",
        ] {
            Settings::new(vec![server.into()], config().subject)
                .check()
                .unwrap();
        }
        Settings {
            jetstream: Some(
                NatsJetStream::new("HERALD_EVENTS-1").create(
                    NatsStreamSpec::new(vec!["herald.>".into(), "x.*.y".into()])
                        .replicas(3)
                        .max_age(Duration::from_secs(3600)),
                ),
            ),
            auth: Some(Auth::UserPassword {
                user: "herald".into(),
                password: String::new(),
            }),
            tls: Some(NatsTls {
                client_cert_file: Some("c.pem".into()),
                client_key_file: Some("k.pem".into()),
                ..NatsTls::default()
            }),
            ..config()
        }
        .check()
        .unwrap();
    }

    #[test]
    // One table of cases, read best as a whole.
    #[allow(clippy::too_many_lines)]
    fn refuses_bad_settings() {
        let with = |change: fn(&mut Settings)| {
            let mut settings = config();
            change(&mut settings);
            settings
        };
        let cases = [
            (
                Settings::new(vec![], config().subject),
                "servers must name at least one NATS server",
            ),
            (
                Settings::new(vec!["ws://h:80".into()], config().subject),
                "servers: \"ws://h:80\" must use nats:// or tls://",
            ),
            (
                Settings::new(vec!["http://h:80".into()], config().subject),
                "servers: \"http://h:80\" is not a valid NATS URL",
            ),
            (
                Settings::new(vec!["nats://u:pw@h:4222".into()], config().subject),
                "servers must not contain credentials; use auth, whose secrets are references",
            ),
            (
                Settings::new(
                    vec!["nats://h:4222".into()],
                    Template::parse("herald.>").unwrap(),
                ),
                "subject: character '>' at byte 7 is not allowed in a nats subject name",
            ),
            (
                with(|s| s.ack_timeout = Duration::ZERO),
                "ackTimeout must be greater than zero",
            ),
            (
                with(|s| s.connect_timeout = Duration::ZERO),
                "connectTimeout must be greater than zero",
            ),
            (
                with(|s| s.max_in_flight = 0),
                "maxInFlight must be at least 1",
            ),
            (
                with(|s| s.connection_name = "a\nb".into()),
                "connectionName must not contain control characters",
            ),
            (
                with(|s| s.jetstream = Some(NatsJetStream::new("a.b"))),
                "jetstream.stream \"a.b\" must not contain '.'",
            ),
            (
                with(|s| s.jetstream = Some(NatsJetStream::new(""))),
                "jetstream.stream must not be empty",
            ),
            (
                with(|s| {
                    s.jetstream = Some(NatsJetStream::new("S").create(NatsStreamSpec::new(vec![])));
                }),
                "jetstream.create.subjects must name at least one subject",
            ),
            (
                with(|s| {
                    s.jetstream = Some(
                        NatsJetStream::new("S").create(NatsStreamSpec::new(vec!["a.>.b".into()])),
                    );
                }),
                "jetstream.create.subjects: \"a.>.b\" is not a valid NATS subject",
            ),
            (
                with(|s| {
                    s.jetstream = Some(
                        NatsJetStream::new("S")
                            .create(NatsStreamSpec::new(vec!["a".into()]).replicas(0)),
                    );
                }),
                "jetstream.create.replicas must be between 1 and 5",
            ),
            (
                with(|s| {
                    s.jetstream = Some(NatsJetStream::new("S").create(
                        NatsStreamSpec::new(vec!["a".into()]).duplicate_window(Duration::ZERO),
                    ));
                }),
                "jetstream.create.duplicateWindow must be greater than zero",
            ),
            (
                with(|s| s.auth = Some(Auth::Token(String::new()))),
                "auth: the credential is empty",
            ),
            (
                with(|s| {
                    s.tls = Some(NatsTls {
                        client_cert_file: Some("c.pem".into()),
                        ..NatsTls::default()
                    });
                }),
                "tls.clientCertFile is set but tls.clientKeyFile is not",
            ),
        ];
        for (config, expected) in cases {
            assert_eq!(detail(config.check().unwrap_err()), expected);
        }
    }

    #[test]
    fn filter_subjects() {
        for good in ["a", "a.b", "a.*.c", ">", "a.>", "*.*", "Ünïcode.x"] {
            assert!(is_valid_filter_subject(good), "{good}");
        }
        for bad in [
            "", "a..b", ".a", "a.", "a.>.b", "a*.b", "a.b>", "a b", "a\tb",
        ] {
            assert!(!is_valid_filter_subject(bad), "{bad}");
        }
    }

    #[test]
    fn debug_never_prints_secrets() {
        for auth in [
            Auth::Token("t0ken".into()),
            Auth::UserPassword {
                user: "herald".into(),
                password: "pa55".into(),
            },
            Auth::NKey {
                seed: "SUAKEYSEED".into(),
            },
        ] {
            let text = format!(
                "{:?}",
                Settings {
                    auth: Some(auth),
                    ..config()
                }
            );
            for secret in ["t0ken", "pa55", "SUAKEYSEED"] {
                assert!(!text.contains(secret), "{secret} in {text}");
            }
        }
        assert_eq!(
            format!(
                "{:?}",
                Auth::UserPassword {
                    user: "u".into(),
                    password: "p".into()
                }
            ),
            "UserPassword { user: \"u\", password: \"<redacted>\" }"
        );
    }
}
