//! From a sink's configuration to a running sink: settings mapped (secrets resolved, files read), the
//! sink built and health-checked, and its delivery started. The one place that knows every sink type.

use std::sync::Arc;

use herald_sink_core::sink::Sink;
use tokio_util::sync::CancellationToken;

use super::error_chain;
use crate::config::{self, SinkKind};
use crate::delivery::{self, forward::Forward};
use crate::journal::Journal;
use crate::route::Router;

/// A configured sink, built and health-checked.
pub(super) enum Built {
    File(Arc<herald_sink_file::FileSink>),
    Webhook(Arc<herald_sink_webhook::WebhookSink>),
    Kafka(Arc<herald_sink_kafka::KafkaSink>),
    Nats(Arc<herald_sink_nats::NatsSink>),
}

/// Builds `sink` and runs its health check; the error names what failed (key, file, variable).
pub(super) async fn build(sink: &config::SinkConfig) -> Result<Built, String> {
    let built = match &sink.kind {
        SinkKind::File(f) => Built::File(Arc::new(
            herald_sink_file::FileSink::open(file_config(f)).map_err(|e| e.to_string())?,
        )),
        SinkKind::Webhook(w) => Built::Webhook(Arc::new(
            herald_sink_webhook::WebhookSink::new(webhook_config(w)?)
                .map_err(|e| error_chain(&e))?,
        )),
        SinkKind::Kafka(k) => Built::Kafka(Arc::new(
            herald_sink_kafka::KafkaSink::new(kafka_config(k, &sink.name)?)
                .map_err(|e| error_chain(&e))?,
        )),
        SinkKind::Nats(n) => Built::Nats(Arc::new(
            herald_sink_nats::NatsSink::connect(nats_config(n, &sink.name)?)
                .await
                .map_err(|e| error_chain(&e))?,
        )),
    };
    built.healthcheck().await?;
    Ok(built)
}

/// Opens a sink and runs its health check, as a start would (for `herald check --connect`).
pub async fn check_sink(sink: &config::SinkConfig) -> Result<(), String> {
    build(sink).await.map(drop)
}

/// The delivery settings a sink's configuration asks for.
pub(super) fn settings(kind: &SinkKind) -> delivery::Settings {
    let defaults = delivery::Settings::default();
    match kind {
        SinkKind::File(_) => defaults,
        SinkKind::Webhook(w) => delivery::Settings {
            concurrency: w.concurrency,
            batch_max: match w.mode {
                config::WebhookMode::Batched => w.batch_max_events,
                config::WebhookMode::Binary | config::WebhookMode::Structured => defaults.batch_max,
            },
            max_attempts: w.max_attempts,
            max_age: w.max_age,
            ..defaults
        },
        SinkKind::Kafka(k) => delivery::Settings {
            concurrency: k.concurrency,
            batch_max: k.batch_max_events,
            max_attempts: k.max_attempts,
            max_age: k.max_age,
            ..defaults
        },
        SinkKind::Nats(n) => delivery::Settings {
            concurrency: n.concurrency,
            batch_max: n.batch_max_events,
            max_attempts: n.max_attempts,
            max_age: n.max_age,
            ..defaults
        },
    }
}

/// Calls `$body` with `$s` bound to the concrete sink, whatever its type.
macro_rules! with_sink {
    ($built:expr, $s:ident => $body:expr) => {
        match $built {
            Built::File($s) => $body,
            Built::Webhook($s) => $body,
            Built::Kafka($s) => $body,
            Built::Nats($s) => $body,
        }
    };
}

impl Built {
    async fn healthcheck(&self) -> Result<(), String> {
        with_sink!(self, s => s.healthcheck().await.map_err(|e| error_chain(&e)))
    }

    /// Finishes what the sink holds before herald stops or drops it: the file sink syncs its file.
    pub(super) async fn close(&self) {
        if let Built::File(f) = self
            && let Err(error) = f.sync()
        {
            tracing::warn!(message = "Final sync of a file sink failed.", %error);
        }
    }

    /// This sink as another sink's `deadLetterSink`.
    pub(super) fn forward(&self) -> Forward {
        with_sink!(self, s => delivery::forward::forward_to(s.clone()))
    }

    /// The sink's delivery loop.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn deliver(
        &self,
        name: String,
        journal: Journal,
        router: Arc<Router>,
        settings: delivery::Settings,
        from_start: bool,
        stop: CancellationToken,
        stats: Arc<delivery::Stats>,
    ) -> futures::future::BoxFuture<'static, ()> {
        let dead = Some(Arc::new(journal.clone()) as Arc<dyn delivery::DeadLetters>);
        with_sink!(self, s => Box::pin(delivery::run(
            name,
            s.clone(),
            journal,
            router,
            settings,
            from_start,
            stop,
            stats,
            dead,
        )))
    }
}

/// The file sink's settings from its configuration (`-` is stdout).
fn file_config(f: &config::FileSinkConfig) -> herald_sink_file::FileConfig {
    herald_sink_file::FileConfig {
        path: (f.path.as_os_str() != config::STDOUT_PATH).then(|| f.path.clone()),
        fsync: match f.fsync {
            config::Fsync::Always => herald_sink_file::Fsync::Always,
            config::Fsync::Interval => herald_sink_file::Fsync::Interval(f.fsync_interval),
            config::Fsync::Never => herald_sink_file::Fsync::Never,
        },
        rotate: f.rotate.as_ref().map(|r| herald_sink_file::Rotate {
            max_size: r.max_size,
            max_files: r.max_files,
        }),
    }
}

/// The webhook sink's settings from its configuration: secrets resolved, PEM files read. Messages
/// name the key and the file or variable, never a secret.
fn webhook_config(
    w: &config::WebhookSinkConfig,
) -> Result<herald_sink_webhook::WebhookConfig, String> {
    use herald_sink_webhook as webhook;
    let secret = |key: &str, secret: &config::SecretRef| {
        secret
            .resolve()
            .map_err(|e| format!("{key}: {}", error_chain(&e)))
    };
    let read = |key: &str, path: &std::path::Path| {
        std::fs::read(path).map_err(|e| format!("{key}: cannot read {}: {e}", path.display()))
    };
    let mut out = webhook::WebhookConfig::new(w.url.clone())
        .timeout(w.timeout)
        .mode(match w.mode {
            config::WebhookMode::Binary => webhook::Mode::Binary,
            config::WebhookMode::Structured => webhook::Mode::Structured,
            config::WebhookMode::Batched => webhook::Mode::Batched {
                max_events: w.batch_max_events,
            },
        });
    for (name, value) in &w.headers {
        out = out.header(name.clone(), value.clone());
    }
    match &w.auth {
        None => {}
        Some(config::WebhookAuth::Bearer(token)) => {
            out = out.auth(webhook::Auth::Bearer(secret("auth.bearer", token)?));
        }
        Some(config::WebhookAuth::Basic(basic)) => {
            out = out.auth(webhook::Auth::Basic {
                user: basic.username.clone(),
                password: secret("auth.basic.password", &basic.password)?,
            });
        }
    }
    if let Some(tls) = &w.tls {
        let mut t = webhook::TlsConfig::default();
        if let Some(ca) = &tls.ca_file {
            t.ca_pem = Some(read("tls.caFile", ca)?);
        }
        if let (Some(cert), Some(key)) = (&tls.client_cert_file, &tls.client_key_file) {
            t.client_identity = Some(webhook::ClientIdentity {
                cert_pem: read("tls.clientCertFile", cert)?,
                key_pem: read("tls.clientKeyFile", key)?,
            });
        }
        out = out.tls(t);
    }
    if let Some(signing) = &w.signing {
        let text = secret("signing.secret", &signing.secret)?;
        let mut s = webhook::SigningConfig::standard(&text)
            .map_err(|e| format!("signing.secret: {}", error_chain(&e)))?;
        if signing.hub_signature_256 {
            s = s.with_hub_signature_256(text.into_bytes());
        }
        out = out.signing(s);
    }
    Ok(out)
}

/// The Kafka sink's settings: templates parsed (already validated), secret properties resolved.
fn kafka_config(
    k: &config::KafkaSinkConfig,
    name: &str,
) -> Result<herald_sink_kafka::KafkaConfig, String> {
    use herald_sink_kafka as kafka;
    let topic = herald_sink_core::Template::parse(&k.topic).map_err(|e| format!("topic: {e}"))?;
    let mut out = kafka::KafkaConfig::new(k.brokers.join(","), topic)
        .mode(match k.mode {
            config::KafkaMode::Binary => kafka::Mode::Binary,
            config::KafkaMode::Structured => kafka::Mode::Structured,
        })
        .tombstones(k.tombstones)
        .message_timeout(k.message_timeout)
        .client_id(format!("herald-{name}"));
    for (key, value) in &k.properties {
        out = out.property(key.clone(), value.clone());
    }
    for (key, secret) in &k.secret_properties {
        let value = secret
            .resolve()
            .map_err(|e| format!("secretProperties.{key}: {}", error_chain(&e)))?;
        out = out.property(key.clone(), value);
    }
    Ok(out)
}

/// The NATS sink's settings: subject parsed, secrets resolved.
fn nats_config(
    n: &config::NatsSinkConfig,
    name: &str,
) -> Result<herald_sink_nats::NatsConfig, String> {
    use herald_sink_nats as nats;
    let secret = |key: &str, secret: &config::SecretRef| {
        secret
            .resolve()
            .map_err(|e| format!("{key}: {}", error_chain(&e)))
    };
    let subject =
        herald_sink_core::Template::parse(&n.subject).map_err(|e| format!("subject: {e}"))?;
    let mut out = nats::NatsConfig::new(n.servers.clone(), subject)
        .mode(match n.mode {
            config::NatsMode::Structured => nats::Mode::Structured,
            config::NatsMode::Binary => nats::Mode::Binary,
        })
        .connect_timeout(n.connect_timeout)
        .ack_timeout(n.ack_timeout)
        .max_in_flight(n.max_in_flight)
        .connection_name(format!("herald-{name}"));
    if let Some(js) = &n.jetstream {
        let mut j = nats::JetStreamConfig::new(js.stream.clone());
        if let Some(c) = &js.create {
            let mut spec = nats::StreamSpec::new(c.subjects.clone())
                .storage(match c.storage {
                    config::NatsStorage::File => nats::Storage::File,
                    config::NatsStorage::Memory => nats::Storage::Memory,
                })
                .replicas(c.replicas)
                .duplicate_window(c.duplicate_window);
            if let Some(age) = c.max_age {
                spec = spec.max_age(age);
            }
            j = j.create(spec);
        }
        out = out.jetstream(j);
    }
    match &n.auth {
        None => {}
        Some(config::NatsAuth::Token(token)) => {
            out = out.auth(nats::Auth::Token(secret("auth.token", token)?));
        }
        Some(config::NatsAuth::UserPassword { user, password }) => {
            out = out.auth(nats::Auth::UserPassword {
                user: user.clone(),
                password: secret("auth.password", password)?,
            });
        }
        Some(config::NatsAuth::NkeySeed(seed)) => {
            out = out.auth(nats::Auth::NKey {
                seed: secret("auth.nkeySeed", seed)?,
            });
        }
        Some(config::NatsAuth::CredentialsFile(path)) => {
            out = out.auth(nats::Auth::CredentialsFile(path.clone()));
        }
    }
    if let Some(tls) = &n.tls {
        out = out.tls(nats::TlsConfig {
            ca_file: tls.ca_file.clone(),
            client_cert_file: tls.client_cert_file.clone(),
            client_key_file: tls.client_key_file.clone(),
            required: tls.required,
        });
    }
    Ok(out)
}
