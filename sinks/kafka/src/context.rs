//! [`SinkContext`]: routes librdkafka's logs and client-level errors to `tracing`.

use std::sync::{Arc, Mutex};

use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tracing::level_filters::LevelFilter;

/// librdkafka callbacks for herald's producer.
///
/// Everything here is per connection or per client, never per event. The last client-level error
/// (`1/1 brokers are down`, a failed SASL handshake …) is kept because librdkafka reports those
/// only here: a metadata request that times out during the healthcheck says nothing about why.
/// Clones share that state, so the sink keeps one while librdkafka owns another.
#[derive(Debug, Default, Clone)]
pub(crate) struct SinkContext {
    last_error: Arc<Mutex<Option<ClientError>>>,
}

/// A client-level error librdkafka reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientError {
    /// The error's code, when it has one.
    pub code: Option<RDKafkaErrorCode>,
    /// librdkafka's explanation (it names the broker).
    pub reason: String,
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for ClientError {}

impl SinkContext {
    /// The last client-level error since the client was built or [`Self::clear_last_error`].
    pub(crate) fn last_error(&self) -> Option<ClientError> {
        // A poisoned lock only means a logging call panicked; the value is still usable.
        match self.last_error.lock() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Forgets the last client-level error, so the next one read is fresh.
    pub(crate) fn clear_last_error(&self) {
        self.set_last_error(None);
    }

    fn set_last_error(&self, entry: Option<ClientError>) {
        match self.last_error.lock() {
            Ok(mut guard) => *guard = entry,
            Err(poisoned) => *poisoned.into_inner() = entry,
        }
    }
}

impl ClientContext for SinkContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", sink = "kafka", facility, "{message}");
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", sink = "kafka", facility, "{message}");
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", sink = "kafka", facility, "{message}");
            }
            RDKafkaLogLevel::Debug => {
                tracing::debug!(target: "librdkafka", sink = "kafka", facility, "{message}");
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // Warn, not error: these are connection-level and recover on their own; what matters to
        // the operator (retries, a paused sink) is reported by the driver.
        tracing::warn!(target: "librdkafka", sink = "kafka", %error, "{reason}");
        self.set_last_error(Some(ClientError {
            code: error.rdkafka_error_code(),
            reason: reason.to_owned(),
        }));
    }
}

/// The librdkafka log level that lets through what `tracing` would record anyway, so librdkafka
/// does not format lines only to have them dropped.
pub(crate) fn log_level() -> RDKafkaLogLevel {
    let current = LevelFilter::current();
    if current >= LevelFilter::DEBUG {
        RDKafkaLogLevel::Debug
    } else if current >= LevelFilter::INFO {
        RDKafkaLogLevel::Info
    } else if current >= LevelFilter::WARN {
        RDKafkaLogLevel::Warning
    } else {
        RDKafkaLogLevel::Error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_client_error() {
        let context = SinkContext::default();
        assert_eq!(context.last_error(), None);
        context.error(
            KafkaError::Global(RDKafkaErrorCode::AllBrokersDown),
            "1/1 brokers are down",
        );
        context.error(
            KafkaError::Global(RDKafkaErrorCode::Authentication),
            "SASL authentication error: invalid credentials",
        );
        let last = context.last_error().unwrap();
        assert_eq!(last.code, Some(RDKafkaErrorCode::Authentication));
        assert_eq!(
            last.to_string(),
            "SASL authentication error: invalid credentials"
        );
        // Clones share the state: librdkafka holds one, the sink another.
        let clone = context.clone();
        clone.clear_last_error();
        assert_eq!(context.last_error(), None);
    }
}
