//! [`Deferred`]: a sink whose client connects when it is built (NATS) and whose target was down at
//! start. Building it again is what each probe does, so herald starts without it and the sink comes
//! into being, with everything its build does (the JetStream stream looked up or created), once
//! the target answers.

use herald_sink_core::config::{DeliveryOptions, SinkConfig};
use herald_sink_core::error_chain;
use herald_sink_core::sink::{Envelope, ErrorContext, Outcome, Reason, Sink, SinkError};
use tokio::sync::OnceCell;

/// Reason code of events not sent because the sink could not be built yet.
const UNREACHABLE: &str = "unreachable";

/// A sink built on first use: every call until a build succeeds tries one (one at a time) and,
/// when it fails, answers as an unreachable target does: `Retry` for events, the build's error for
/// the health check.
pub(super) struct Deferred<C: SinkConfig> {
    config: C,
    name: String,
    delivery: DeliveryOptions,
    sink: OnceCell<C::Sink>,
}

impl<C: SinkConfig> Deferred<C> {
    /// The sink `config` describes, to be built by the first call that needs it.
    pub(super) fn new(config: C, name: String, delivery: DeliveryOptions) -> Self {
        Self {
            config,
            name,
            delivery,
            sink: OnceCell::new(),
        }
    }

    async fn sink(&self) -> Result<&C::Sink, SinkError> {
        self.sink
            .get_or_try_init(|| self.config.build(&self.name, &self.delivery))
            .await
    }
}

impl<C> Sink for Deferred<C>
where
    C: SinkConfig + Send + Sync + 'static,
{
    const NAME: &'static str = <C::Sink as Sink>::NAME;
    const READS_ATTRIBUTES: bool = <C::Sink as Sink>::READS_ATTRIBUTES;

    async fn healthcheck(&self) -> Result<(), SinkError> {
        self.sink().await?.healthcheck().await
    }

    async fn send(&self, batch: &[Envelope]) -> Vec<Outcome> {
        match self.sink().await {
            Ok(sink) => sink.send(batch).await,
            Err(error) => unsent(batch.len(), &error),
        }
    }

    async fn send_dead_letters(
        &self,
        letters: &[Envelope],
        errors: &[ErrorContext],
    ) -> Vec<Outcome> {
        match self.sink().await {
            Ok(sink) => sink.send_dead_letters(letters, errors).await,
            Err(error) => unsent(letters.len(), &error),
        }
    }

    async fn close(&self) -> Result<(), SinkError> {
        match self.sink.get() {
            Some(sink) => sink.close().await,
            None => Ok(()),
        }
    }

    async fn abandon(&self) {
        if let Some(sink) = self.sink.get() {
            sink.abandon().await;
        }
    }

    fn is_transient(error: &SinkError) -> bool {
        <C::Sink as Sink>::is_transient(error)
    }
}

/// `n` retries for a build that failed. A failure waiting cannot fix (the server, once up,
/// refuses the credentials) is retried too: herald is running by then, and the sink stays paused
/// with that reason in `/readyz` and `/status` until the configuration is fixed.
fn unsent(n: usize, error: &SinkError) -> Vec<Outcome> {
    Outcome::all(
        n,
        Outcome::retry(Reason::new(UNREACHABLE, error_chain(error))),
    )
}
