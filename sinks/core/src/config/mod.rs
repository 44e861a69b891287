//! What every sink's configuration shares; start at [`SinkConfig`], the trait each sink crate's
//! user-facing configuration implements.
//!
//! herald's configuration file holds a list of sinks; each entry is one sink crate's
//! configuration (its keys, their docs, its checks and how it builds the sink) beside the
//! [`DeliveryOptions`] the driver reads. Secrets are [`SecretRef`]s, durations and sizes are
//! strings with units ([`deserialize_duration`], [`deserialize_size`]).

mod delivery;
mod flat;
mod secret;
mod tls;
mod units;

use std::path::PathBuf;

pub use delivery::{DeliveryKeys, DeliveryOptions, RateLimit, SinkStart};
pub use flat::{Flat, OtherKeys, read_sink};
pub use secret::{EnvLookup, SecretError, SecretRef, is_var_name};
pub use units::{
    Bound, MAX_KEEP, MAX_TIMEOUT, deserialize_duration, deserialize_size,
    deserialize_some_duration, parse_duration, parse_size,
};

use crate::sink::{Sink, SinkError};

/// A sink type's user-facing configuration: its keys (serde, with `deny_unknown_fields`), the
/// rules serde cannot check, the delivery keys it takes, and how it becomes a running sink.
///
/// herald reads `{name, type, …}` entries, hands every key but `name` and the
/// [`DeliveryOptions`] to the `type`'s configuration, expands `${VAR}` in its
/// [`paths_mut`](Self::paths_mut), runs [`validate`](Self::validate), and at start-up calls
/// [`build`](Self::build), then the sink's healthcheck.
pub trait SinkConfig {
    /// The sink this configuration builds.
    type Sink: Sink;

    /// The delivery keys this type takes, read flat beside its own keys.
    const DELIVERY: DeliveryKeys;

    /// The keys whose values are paths, with their key path below the sink (`tls.caFile`), so
    /// that herald can expand `${VAR}` in them before checking. Default: none.
    fn paths_mut(&mut self) -> Vec<(&'static str, &mut PathBuf)> {
        Vec::new()
    }

    /// Records every rule this configuration breaks, each at its key path below the sink.
    fn validate(&self, problems: &mut Problems);

    /// Resolves every secret reference (and reads every credentials file that holds one) now,
    /// recording each that cannot be used at its key path below the sink, so `herald check`
    /// finds a missing secret before `run` does. Secrets come from `env` where they name a
    /// variable. Default: none (a sink without secrets).
    fn check_secrets(&self, env: EnvLookup<'_>, problems: &mut Problems) {
        let _ = (env, problems);
    }

    /// Every file `build` reads a secret from (`{fromFile: …}` references, credentials files),
    /// so that a configuration reload can tell a rotated secret from an unchanged one.
    /// Default: none.
    fn secret_files(&self) -> Vec<&std::path::Path> {
        Vec::new()
    }

    /// The most events the driver gives one send call: `batchMaxEvents` by default; a sink that
    /// uses it only in some modes says `None` otherwise, leaving the driver's default.
    fn batch_max_events(&self, delivery: &DeliveryOptions) -> Option<usize> {
        delivery.batch_max_events
    }

    /// The running sink named `name`: secrets resolved, files read, clients built (connected
    /// where the client needs it); no healthcheck yet. Call it on a validated configuration.
    ///
    /// # Errors
    ///
    /// [`SinkError::SettingFailed`] naming the key whose secret or file cannot be used, or the
    /// sink's own error when its client cannot be built.
    fn build(
        &self,
        name: &str,
        delivery: &DeliveryOptions,
    ) -> impl Future<Output = Result<Self::Sink, SinkError>> + Send;
}

/// One problem in a sink's settings, found after parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The key path below the sink, as written: `url`, `tls.caFile`, `headers.X-Tenant`.
    pub key: String,
    /// What is wrong, quoting the offending value (never a secret).
    pub message: String,
}

/// A sink's problems in the order they were found.
#[derive(Debug, Default)]
pub struct Problems(Vec<Problem>);

impl Problems {
    /// Records that `key` breaks a rule.
    pub fn add(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem {
            key: key.into(),
            message: message.into(),
        });
    }

    /// Whether nothing was recorded.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl IntoIterator for Problems {
    type Item = Problem;
    type IntoIter = std::vec::IntoIter<Problem>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// The [`SinkError::SettingFailed`] of `key`, for a secret or file that cannot be used.
pub fn setting_failed(
    key: impl Into<String>,
    source: impl Into<crate::sink::BoxError>,
) -> SinkError {
    SinkError::SettingFailed {
        key: key.into(),
        source: source.into(),
    }
}

/// Resolves the secret at `key` through `env`, recording why it cannot be used at `key` (never
/// the value); for [`SinkConfig::check_secrets`]. Returns the secret when it resolved, for checks
/// of its form.
pub fn check_secret(
    problems: &mut Problems,
    key: &str,
    secret: &SecretRef,
    env: EnvLookup<'_>,
) -> Option<String> {
    match secret.resolve_with(env) {
        Ok(value) => Some(value),
        Err(e) => {
            problems.add(key, crate::error_chain(&e));
            None
        }
    }
}

/// Resolves the secret at `key`, failing with the key and the cause (never the value).
///
/// # Errors
/// [`SinkError::SettingFailed`] naming `key`, caused by the [`SecretError`].
pub fn resolve_secret(key: &str, secret: &SecretRef) -> Result<String, SinkError> {
    secret.resolve().map_err(|e| setting_failed(key, e))
}

/// Reads the file at `key` whole (a PEM file), failing with the key and the path.
///
/// # Errors
/// [`SinkError::SettingFailed`] naming `key`, caused by [`FileReadFailed`].
pub fn read_file(key: &str, path: &std::path::Path) -> Result<Vec<u8>, SinkError> {
    std::fs::read(path).map_err(|source| {
        setting_failed(
            key,
            FileReadFailed {
                path: path.to_owned(),
                source,
            },
        )
    })
}

/// A file named in the configuration could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {}", path.display())]
pub struct FileReadFailed {
    /// The file.
    pub path: PathBuf,
    /// Why reading failed.
    #[source]
    pub source: std::io::Error,
}
