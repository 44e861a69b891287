//! From a sink's configuration to a running sink: each sink crate builds its own (secrets resolved,
//! files read) and this module health-checks it, starts its delivery and closes it at stop. The one
//! place that matches on every sink type.

use std::sync::Arc;

use herald_sink_core::config::SinkConfig;
use herald_sink_core::error_chain;
use herald_sink_core::sink::Sink;
use tokio_util::sync::CancellationToken;

use super::deferred::Deferred;
use crate::config::{self, SinkKind};
use crate::delivery::{self, forward::Forward};
use crate::journal::Journal;
use crate::route::Router;

/// A configured sink, built and health-checked.
#[derive(Clone)]
pub(super) enum Built {
    File(Arc<herald_sink_file::FileSink>),
    Webhook(Arc<herald_sink_webhook::WebhookSink>),
    Kafka(Arc<herald_sink_kafka::KafkaSink>),
    Nats(Arc<herald_sink_nats::NatsSink>),
    /// A NATS sink whose server was down at start: it connects on a later probe.
    NatsDeferred(Arc<Deferred<herald_sink_nats::NatsConfig>>),
}

/// A health check that failed: why, and whether waiting may fix it ([`Sink::is_transient`]).
pub(super) struct Unhealthy {
    /// The target is unreachable rather than misconfigured.
    pub(super) transient: bool,
    /// What failed, with its causes.
    pub(super) reason: String,
}

/// Builds `sink` and runs its health check; the error names what failed (key, file, variable).
/// A target that is only unreachable (refused, timed out, DNS) is not an error: the sink comes
/// back with the reason, to start paused and probing.
pub(super) async fn build(sink: &config::SinkConfig) -> Result<(Built, Option<String>), String> {
    // NATS connects in its build: a server that is down fails the build itself, so the sink is
    // built later, by its probes.
    if let SinkKind::Nats(c) = &sink.kind {
        match c.build(&sink.name, &sink.delivery).await {
            Ok(built) => return checked(Built::Nats(Arc::new(built))).await,
            Err(e) if herald_sink_nats::NatsSink::is_transient(&e) => {
                let later = Deferred::new(c.clone(), sink.name.clone(), sink.delivery.clone());
                return Ok((Built::NatsDeferred(Arc::new(later)), Some(error_chain(&e))));
            }
            Err(e) => return Err(error_chain(&e)),
        }
    }
    checked(open_kind(sink).await?).await
}

/// `built` once health-checked: with the reason when its target is only unreachable.
async fn checked(built: Built) -> Result<(Built, Option<String>), String> {
    match built.healthcheck().await {
        Ok(()) => Ok((built, None)),
        Err(Unhealthy {
            transient: true,
            reason,
        }) => Ok((built, Some(reason))),
        Err(Unhealthy { reason, .. }) => Err(reason),
    }
}

/// The sink crate's `build` for `sink`'s type.
async fn open_kind(sink: &config::SinkConfig) -> Result<Built, String> {
    Ok(match &sink.kind {
        SinkKind::File(c) => Built::File(open(c, sink).await?),
        SinkKind::Webhook(c) => match crate::leader::instance() {
            // Leader election: the receiver can tell which replica sent a request.
            Some(identity) => {
                let mut c = c.clone();
                c.headers.insert(
                    crate::leader::INSTANCE_HEADER.to_owned(),
                    identity.to_owned(),
                );
                Built::Webhook(open(&c, sink).await?)
            }
            None => Built::Webhook(open(c, sink).await?),
        },
        SinkKind::Kafka(c) => Built::Kafka(open(c, sink).await?),
        SinkKind::Nats(c) => Built::Nats(open(c, sink).await?),
    })
}

/// The sink crate's `build`, for `sink`'s name and delivery keys.
async fn open<C: SinkConfig>(c: &C, sink: &config::SinkConfig) -> Result<Arc<C::Sink>, String> {
    c.build(&sink.name, &sink.delivery)
        .await
        .map(Arc::new)
        .map_err(|e| error_chain(&e))
}

/// Opens a sink and runs its health check (for `herald check --connect`). Unlike a start, an
/// unreachable target fails it: the check is asked for explicitly.
pub async fn check_sink(sink: &config::SinkConfig) -> Result<(), String> {
    open_kind(sink)
        .await?
        .healthcheck()
        .await
        .map_err(|u| u.reason)
}

/// `sink`'s health check, its error classified by the sink's type.
async fn check<S: Sink>(sink: &S) -> Result<(), Unhealthy> {
    sink.healthcheck().await.map_err(|e| Unhealthy {
        transient: S::is_transient(&e),
        reason: error_chain(&e),
    })
}

/// The delivery settings a sink's configuration asks for.
pub(super) fn settings(sink: &config::SinkConfig) -> delivery::Settings {
    delivery::Settings {
        // `rateLimit` counts requests: a `batched` webhook sends one per call.
        one_request_per_call: matches!(
            &sink.kind,
            SinkKind::Webhook(c) if c.mode == herald_sink_webhook::WebhookMode::Batched
        ),
        ..delivery::Settings::from_options(
            &sink.delivery,
            sink.kind.batch_max_events(&sink.delivery),
        )
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
            Built::NatsDeferred($s) => $body,
        }
    };
}

impl Built {
    async fn healthcheck(&self) -> Result<(), Unhealthy> {
        with_sink!(self, s => check(s.as_ref()).await)
    }

    /// Makes durable what the sink still holds before herald stops or drops it (the file sink
    /// syncs its file); a failure is logged, as nothing is left to retry it.
    pub(super) async fn close(&self) {
        if let Err(error) = with_sink!(self, s => s.close().await) {
            tracing::warn!(message = "Closing a sink failed.", %error);
        }
    }

    /// Drops what the sink still holds for sends whose futures were dropped (leadership lost).
    pub(super) async fn abandon(&self) {
        with_sink!(self, s => s.abandon().await);
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
