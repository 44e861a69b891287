//! [`NatsSink`]: connects, finds (or creates) the stream, and turns batches into publishes.

use std::error::Error as _;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::context::{
    Context, ContextBuilder, CreateStreamErrorKind, GetStreamErrorKind, RequestError,
    RequestErrorKind,
};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{Config as StreamConfig, StorageType};
use async_nats::{ConnectErrorKind, ConnectOptions, HeaderMap, ServerAddr};
use futures::stream::{FuturesUnordered, StreamExt};
use herald_sink_core::Journaled;
use herald_sink_core::sink::{Envelope, ErrorContext, Outcome, Reason, Sink, SinkError, codes};
use tokio::sync::Semaphore;
use tokio::time::{Instant, timeout};

use crate::classify::{
    self, classify_ack, classify_core_publish_error, classify_flush_error, classify_publish_error,
};
use crate::encode::{Message, render_subject};
use crate::settings::{Auth, Settings, invalid};
use crate::{NatsJetStream, NatsStorage, NatsStreamSpec};

/// How often the healthcheck looks at the connection state while waiting for a reconnect.
const HEALTHCHECK_POLL: Duration = Duration::from_millis(20);

/// Delivers CloudEvents to NATS: JetStream publishes acknowledged by the stream, or core NATS
/// publishes (see the crate documentation).
///
/// `send` never sleeps or retries: each event yields one [`Outcome`] and the driver schedules
/// what comes next. The client reconnects by itself; events sent while it is away are retried.
pub struct NatsSink {
    config: Settings,
    client: async_nats::Client,
    jetstream: Option<Context>,
    /// Slots for unacknowledged JetStream publishes, shared by concurrent `send` calls.
    window: Arc<Semaphore>,
    /// The server URLs, for messages.
    target: String,
}

impl fmt::Debug for NatsSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsSink")
            .field("target", &self.target)
            .field("config", &self.config)
            .field("state", &self.client.connection_state())
            .finish_non_exhaustive()
    }
}

impl NatsSink {
    /// Checks `config`, connects (within `connect_timeout`), and with JetStream looks the stream
    /// up, creating it from [`NatsJetStream::create`] when it is missing. An existing stream is
    /// used as it is.
    ///
    /// TLS is rustls with the process-wide provider, which herald installs at start-up (ring, its
    /// one provider, DECISIONS.md); this crate installs none. After this returns, the client
    /// reconnects by itself, forever.
    ///
    /// # Errors
    ///
    /// - [`SinkError::InvalidConfig`]: what [`Settings::check`] refuses, an unreadable CA,
    ///   client certificate, key or credentials file, or a stream spec the server refuses.
    /// - [`SinkError::AuthenticationFailed`]: the server refused the credentials.
    /// - [`SinkError::ConnectFailed`]: no server answered within `connect_timeout`, or TLS failed.
    /// - [`SinkError::DestinationMissing`]: the stream does not exist and `create` is not set;
    ///   the message names the stream and says to create it or set `create`.
    /// - [`SinkError::Unavailable`]: JetStream is not enabled, or did not answer in time.
    pub(crate) async fn connect(config: Settings) -> Result<Self, SinkError> {
        config.check()?;
        let target = config.servers.join(",");
        let servers = config
            .servers
            .iter()
            .map(|s| s.parse::<ServerAddr>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(format!("servers: {e}")))?;
        let options = connect_options(&config).await?;
        let client = match timeout(config.connect_timeout, options.connect(servers)).await {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => return Err(connect_error(target, error)),
            Err(_) => {
                return Err(SinkError::ConnectFailed {
                    target,
                    source: format!("no connection within {:?}", config.connect_timeout).into(),
                });
            }
        };
        let jetstream = match &config.jetstream {
            None => None,
            Some(settings) => {
                let context = ContextBuilder::new()
                    // Bounds both API requests and PubAcks: both are one round trip to the stream.
                    .timeout(config.ack_timeout)
                    .ack_timeout(config.ack_timeout)
                    // Our window admits no more than this, so the client's own never blocks us.
                    .max_ack_inflight(config.max_in_flight)
                    .build(client.clone());
                ensure_stream(&context, settings, config.connect_timeout).await?;
                Some(context)
            }
        };
        Ok(Self {
            window: Arc::new(Semaphore::new(config.max_in_flight)),
            config,
            client,
            jetstream,
            target,
        })
    }

    /// `send` and `send_dead_letters`: `errors[i]`, when present, is added to `batch[i]` as
    /// `herald-error-*` headers.
    async fn deliver(&self, batch: &[Envelope], errors: &[ErrorContext]) -> Vec<Outcome> {
        let outcomes = match &self.jetstream {
            Some(context) => self.publish_jetstream(context, batch, errors).await,
            None => self.publish_core(batch, errors).await,
        };
        outcomes
            .into_iter()
            .map(|outcome| {
                outcome.unwrap_or_else(|| {
                    Outcome::retry(Reason::new(
                        codes::MISSING_OUTCOME,
                        "the nats sink lost track of this event",
                    ))
                })
            })
            .collect()
    }

    /// The event as a message with its client headers, or the outcome that keeps it off the wire
    /// (over `max_payload`, or a header NATS cannot carry).
    fn prepare(
        &self,
        event: &Journaled,
        error: Option<&ErrorContext>,
        jetstream: bool,
    ) -> Result<(Message, HeaderMap), Outcome> {
        let subject = render_subject(&self.config.subject, event.attributes());
        let mut message = Message::build(subject, self.config.mode, event, jetstream, error);
        if let Some(template) = &self.config.template {
            // A template may read `data`: parsed here, once for this event.
            let rendered = template.render(event.event()).map_err(|e| {
                Outcome::reject(Reason::new(herald_sink_core::jinja::RENDER_FAILED, e))
            })?;
            message.headers.extend(rendered.headers);
        }
        // The server's limit, refreshed on every (re)connect; checked here so an oversized event
        // never reaches the wire (the server would close the connection over it).
        let max_payload = self.client.max_payload();
        let size = message.wire_len();
        if size > max_payload {
            return Err(classify::oversize(size, max_payload));
        }
        let headers = message.header_map().map_err(Outcome::reject)?;
        Ok((message, headers))
    }

    /// JetStream: every event is published without waiting for the previous one's `PubAck`, and
    /// the acks are awaited concurrently, each holding a slot of the window until it settles.
    /// Acks are settled while publishing, not only at the end: a slot is freed only by awaiting
    /// its ack, so a batch larger than the window would otherwise wait forever (and the client
    /// stalls on acks nobody awaits). Pipelining keeps order only among events that succeed; it
    /// is the driver's one-event-per-`partitionkey`-per-batch rule that stops a retried event
    /// from being overtaken by its successor.
    async fn publish_jetstream(
        &self,
        context: &Context,
        batch: &[Envelope],
        errors: &[ErrorContext],
    ) -> Vec<Option<Outcome>> {
        let mut outcomes: Vec<Option<Outcome>> = vec![None; batch.len()];
        let mut acks = FuturesUnordered::new();
        for (index, envelope) in batch.iter().enumerate() {
            let (message, headers) = match self.prepare(&envelope.event, errors.get(index), true) {
                Ok(prepared) => prepared,
                Err(outcome) => {
                    outcomes[index] = Some(outcome);
                    continue;
                }
            };
            let permit = loop {
                tokio::select! {
                    biased;
                    Some((settled, outcome)) = acks.next(), if !acks.is_empty() => {
                        outcomes[settled] = Some(outcome);
                    }
                    permit = Arc::clone(&self.window).acquire_owned() => break permit,
                }
            };
            // The window is never closed; a closed one could only mean the sink is going away.
            let Ok(permit) = permit else {
                outcomes[index] = Some(classify::disconnected("the nats sink is shutting down"));
                continue;
            };
            // While the client reconnects its queue only grows; an event queued now is delivered
            // late or times out, so say Retry at once instead.
            if self.client.connection_state() != State::Connected {
                outcomes[index] = Some(classify::disconnected(
                    "not connected to NATS; the client is reconnecting",
                ));
                continue;
            }
            let publish = PublishMessage::build()
                .payload(message.payload.into())
                .headers(headers);
            match context.send_publish(message.subject, publish).await {
                Ok(ack) => acks.push(async move {
                    let result = ack.await;
                    drop(permit);
                    (index, classify_ack(&result))
                }),
                Err(error) => outcomes[index] = Some(classify_publish_error(&error)),
            }
        }
        while let Some((settled, outcome)) = acks.next().await {
            outcomes[settled] = Some(outcome);
        }
        outcomes
    }

    /// Core NATS: publish every event, then one flush; the flush's result is every published
    /// event's outcome. `Ok` needs the flush to have completed on the connection that was up
    /// before publishing: after a reconnect the client drops what the old connection had not
    /// written, yet still completes the flush on the new one.
    async fn publish_core(
        &self,
        batch: &[Envelope],
        errors: &[ErrorContext],
    ) -> Vec<Option<Outcome>> {
        let mut outcomes: Vec<Option<Outcome>> = vec![None; batch.len()];
        let statistics = self.client.statistics();
        let connects = statistics.connects.load(Ordering::Acquire);
        if self.client.connection_state() != State::Connected {
            let outcome =
                classify::disconnected("not connected to NATS; the client is reconnecting");
            return vec![Some(outcome); batch.len()];
        }
        let mut published = Vec::with_capacity(batch.len());
        for (index, envelope) in batch.iter().enumerate() {
            let (message, headers) = match self.prepare(&envelope.event, errors.get(index), false) {
                Ok(prepared) => prepared,
                Err(outcome) => {
                    outcomes[index] = Some(outcome);
                    continue;
                }
            };
            let publish =
                self.client
                    .publish_with_headers(message.subject, headers, message.payload.into());
            // The client's queue is full only while it cannot write; bounded like an ack.
            outcomes[index] = match timeout(self.config.ack_timeout, publish).await {
                Ok(Ok(())) => {
                    published.push(index);
                    continue;
                }
                Ok(Err(error)) => Some(classify_core_publish_error(&error)),
                Err(_) => Some(classify::timed_out(format!(
                    "the client's queue stayed full for {:?}",
                    self.config.ack_timeout
                ))),
            };
        }
        if published.is_empty() {
            return outcomes;
        }
        let flushed = match timeout(self.config.ack_timeout, self.client.flush()).await {
            Ok(Ok(())) if statistics.connects.load(Ordering::Acquire) == connects => Outcome::Ok,
            Ok(Ok(())) => classify::disconnected(
                "the connection was replaced before the flush completed; the events may be lost",
            ),
            Ok(Err(error)) => classify_flush_error(&error),
            Err(_) => classify::timed_out(format!(
                "the flush did not complete within {:?}",
                self.config.ack_timeout
            )),
        };
        for index in published {
            outcomes[index] = Some(flushed.clone());
        }
        outcomes
    }
}

impl Sink for NatsSink {
    const NAME: &'static str = "nats";

    /// The connection is up (waiting up to `connect_timeout` for a reconnect), and with
    /// JetStream the stream exists. Nothing is created or changed.
    async fn healthcheck(&self) -> Result<(), SinkError> {
        let after = self.config.connect_timeout;
        let deadline = Instant::now() + after;
        while self.client.connection_state() != State::Connected {
            let now = Instant::now();
            if now >= deadline {
                return Err(SinkError::HealthcheckTimedOut { after });
            }
            tokio::time::sleep(HEALTHCHECK_POLL.min(deadline - now)).await;
        }
        let (Some(context), Some(settings)) = (&self.jetstream, &self.config.jetstream) else {
            return Ok(());
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        match lookup_stream(context, &settings.stream, remaining).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(missing_stream(&settings.stream)),
            Err(Lookup::TimedOut) => Err(SinkError::HealthcheckTimedOut { after }),
            Err(Lookup::Failed(reason)) => Err(SinkError::Unavailable { reason }),
        }
    }

    async fn send(&self, batch: &[Envelope]) -> Vec<Outcome> {
        self.deliver(batch, &[]).await
    }

    /// A TLS failure is permanent; see [`classify::is_transient`].
    fn is_transient(error: &SinkError) -> bool {
        classify::is_transient(error)
    }

    /// Like [`Sink::send`] (same subject, mode, `Nats-Msg-Id` and classification), each letter
    /// carrying its context as `herald-error-*` headers, percent-encoded like `ce-` values. A
    /// letter without an `errors` entry is sent without them.
    async fn send_dead_letters(
        &self,
        letters: &[Envelope],
        errors: &[ErrorContext],
    ) -> Vec<Outcome> {
        self.deliver(letters, errors).await
    }
}

async fn connect_options(config: &Settings) -> Result<ConnectOptions, SinkError> {
    let mut options = ConnectOptions::new()
        .name(&config.connection_name)
        .connection_timeout(config.connect_timeout)
        .request_timeout(Some(config.ack_timeout))
        // Never give up: the driver keeps retrying events, and a client that stopped
        // reconnecting would turn a long outage into a restart.
        .max_reconnects(None);
    options = match &config.auth {
        None => options,
        Some(Auth::Token(token)) => options.token(token.clone()),
        Some(Auth::UserPassword { user, password }) => {
            options.user_and_password(user.clone(), password.clone())
        }
        Some(Auth::NKey { seed }) => options.nkey(seed.clone()),
        Some(Auth::CredentialsFile(path)) => options
            .credentials_file(path)
            .await
            .map_err(|e| invalid(format!("auth.credentialsFile: {e}")))?,
    };
    if let Some(tls) = &config.tls {
        options = options.require_tls(tls.required);
        if let Some(ca) = &tls.ca_file {
            check_file("tls.caFile", ca).await?;
            options = options.add_root_certificates(ca.clone());
        }
        if let (Some(cert), Some(key)) = (&tls.client_cert_file, &tls.client_key_file) {
            check_file("tls.clientCertFile", cert).await?;
            check_file("tls.clientKeyFile", key).await?;
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
    }
    Ok(options)
}

/// The client reads TLS files only when a TLS handshake needs them; reading the metadata now
/// turns a typo into a config error instead of a connect failure.
async fn check_file(key: &str, path: &std::path::Path) -> Result<(), SinkError> {
    match tokio::fs::metadata(path).await {
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(_) => Err(invalid(format!("{key} {} is not a file", path.display()))),
        Err(e) => Err(invalid(format!("{key} {}: {e}", path.display()))),
    }
}

fn connect_error(target: String, error: async_nats::ConnectError) -> SinkError {
    match error.kind() {
        ConnectErrorKind::Authentication | ConnectErrorKind::AuthorizationViolation => {
            SinkError::AuthenticationFailed {
                target,
                source: Some(Box::new(error)),
            }
        }
        _ => SinkError::ConnectFailed {
            target,
            source: Box::new(error),
        },
    }
}

fn missing_stream(stream: &str) -> SinkError {
    SinkError::DestinationMissing {
        what: format!(
            "JetStream stream {stream} (create it, or set jetstream.create so herald creates it)"
        ),
    }
}

/// Why a stream lookup gave no answer.
enum Lookup {
    TimedOut,
    Failed(String),
}

/// Whether `stream` exists.
async fn lookup_stream(context: &Context, stream: &str, within: Duration) -> Result<bool, Lookup> {
    let error = match timeout(within, context.get_stream(stream)).await {
        Err(_) => return Err(Lookup::TimedOut),
        Ok(Ok(_)) => return Ok(true),
        Ok(Err(error)) => error,
    };
    match error.kind() {
        GetStreamErrorKind::JetStream(api) if api.error_code() == ErrorCode::STREAM_NOT_FOUND => {
            Ok(false)
        }
        GetStreamErrorKind::Request => {
            let request = error
                .source()
                .and_then(|s| s.downcast_ref::<RequestError>())
                .map(RequestError::kind);
            match request {
                Some(RequestErrorKind::TimedOut) => Err(Lookup::TimedOut),
                Some(RequestErrorKind::NoResponders) => Err(Lookup::Failed(
                    "JetStream is not enabled on the NATS server (no responders for its API)"
                        .to_owned(),
                )),
                _ => Err(Lookup::Failed(format!(
                    "looking up JetStream stream {stream} failed: {error}"
                ))),
            }
        }
        _ => Err(Lookup::Failed(format!(
            "looking up JetStream stream {stream} failed: {error}"
        ))),
    }
}

/// Finds the stream, creating it from `create` when it is missing.
async fn ensure_stream(
    context: &Context,
    settings: &NatsJetStream,
    within: Duration,
) -> Result<(), SinkError> {
    let stream = &settings.stream;
    let unavailable = |reason: Lookup| match reason {
        Lookup::TimedOut => SinkError::Unavailable {
            reason: format!("JetStream did not answer about stream {stream} within {within:?}"),
        },
        Lookup::Failed(reason) => SinkError::Unavailable { reason },
    };
    if lookup_stream(context, stream, within)
        .await
        .map_err(unavailable)?
    {
        return Ok(());
    }
    let Some(spec) = &settings.create else {
        return Err(missing_stream(stream));
    };
    let error = match timeout(within, context.create_stream(stream_config(stream, spec))).await {
        Ok(Ok(_)) => return Ok(()),
        Err(_) => return Err(unavailable(Lookup::TimedOut)),
        Ok(Err(error)) => error,
    };
    match error.kind() {
        // Another herald created it first, with other settings; an existing stream is used as
        // it is.
        CreateStreamErrorKind::JetStream(api)
            if api.error_code() == ErrorCode::STREAM_NAME_EXIST =>
        {
            Ok(())
        }
        CreateStreamErrorKind::JetStream(api) => Err(invalid(format!(
            "jetstream.create: the server refused stream {stream}: {api}"
        ))),
        CreateStreamErrorKind::TimedOut => Err(unavailable(Lookup::TimedOut)),
        _ => Err(SinkError::Unavailable {
            reason: format!("creating JetStream stream {stream} failed: {error}"),
        }),
    }
}

fn stream_config(name: &str, spec: &NatsStreamSpec) -> StreamConfig {
    StreamConfig {
        name: name.to_owned(),
        subjects: spec.subjects.clone(),
        storage: match spec.storage {
            NatsStorage::File => StorageType::File,
            NatsStorage::Memory => StorageType::Memory,
        },
        num_replicas: spec.replicas,
        duplicate_window: spec.duplicate_window,
        // Zero is the server's "no limit".
        max_age: spec.max_age.unwrap_or(Duration::ZERO),
        ..StreamConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use herald_sink_core::template::Template;

    use super::*;
    use crate::NatsTls;

    fn config() -> Settings {
        // Port 1 on loopback: nothing listens, and these tests fail before connecting anyway.
        Settings::new(
            vec!["nats://127.0.0.1:1".into()],
            Template::parse("herald.{kind}").unwrap(),
        )
    }

    fn detail(err: SinkError) -> String {
        match err {
            SinkError::InvalidConfig { detail } => detail.into_owned(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn name_is_nats() {
        assert_eq!(<NatsSink as Sink>::NAME, "nats");
    }

    #[test]
    fn stream_config_follows_the_spec() {
        let spec = NatsStreamSpec::new(vec!["herald.>".into()])
            .storage(NatsStorage::Memory)
            .replicas(3)
            .duplicate_window(Duration::from_secs(300))
            .max_age(Duration::from_secs(86_400));
        let config = stream_config("HERALD", &spec);
        assert_eq!(config.name, "HERALD");
        assert_eq!(config.subjects, ["herald.>"]);
        assert_eq!(config.storage, StorageType::Memory);
        assert_eq!(config.num_replicas, 3);
        assert_eq!(config.duplicate_window, Duration::from_secs(300));
        assert_eq!(config.max_age, Duration::from_secs(86_400));
        let unlimited = stream_config("S", &NatsStreamSpec::new(vec!["s".into()]));
        assert_eq!(unlimited.max_age, Duration::ZERO);
        assert_eq!(unlimited.storage, StorageType::File);
        assert_eq!(unlimited.duplicate_window, Duration::from_secs(120));
    }

    #[test]
    fn missing_stream_says_what_to_do() {
        assert_eq!(
            missing_stream("EVENTS").to_string(),
            "JetStream stream EVENTS (create it, or set jetstream.create so herald creates it) does not exist"
        );
    }

    #[tokio::test]
    async fn refuses_invalid_config_before_connecting() {
        let err = NatsSink::connect(Settings {
            max_in_flight: 0,
            ..config()
        })
        .await
        .unwrap_err();
        assert_eq!(detail(err), "maxInFlight must be at least 1");
    }

    #[tokio::test]
    async fn refuses_missing_tls_and_credential_files() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let err = NatsSink::connect(Settings {
            tls: Some(NatsTls {
                ca_file: Some(missing.clone()),
                ..NatsTls::default()
            }),
            ..config()
        })
        .await
        .unwrap_err();
        assert!(detail(err).starts_with("tls.caFile "), "missing CA");
        let err = NatsSink::connect(Settings {
            tls: Some(NatsTls {
                ca_file: Some(dir.path().to_owned()),
                ..NatsTls::default()
            }),
            ..config()
        })
        .await
        .unwrap_err();
        assert!(detail(err).ends_with("is not a file"));
        let err = NatsSink::connect(Settings {
            auth: Some(Auth::CredentialsFile(missing)),
            ..config()
        })
        .await
        .unwrap_err();
        assert!(detail(err).starts_with("auth.credentialsFile: "));
        let garbage = dir.path().join("garbage.creds");
        std::fs::write(&garbage, "not a creds file").unwrap();
        let err = NatsSink::connect(Settings {
            auth: Some(Auth::CredentialsFile(garbage)),
            ..config()
        })
        .await
        .unwrap_err();
        assert!(detail(err).contains("cannot parse user JWT"));
    }
}
