//! `herald run -c FILE`: watches, normalizes, journals and delivers until SIGTERM or SIGINT; then stops
//! the watches, drains what was journaled into the sinks, flushes and exits 0. A second signal exits at
//! once (the journal is crash-safe by design, so nothing is damaged).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::CliError;
use crate::{app, config};

/// Options of `herald run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The configuration file (YAML; see docs/configuration.md).
    #[arg(short = 'c', long, env = "HERALD_CONFIG")]
    pub config: PathBuf,
    /// How long a stop may spend delivering what was already journaled before exiting anyway.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, env = "HERALD_DRAIN_TIMEOUT")]
    pub drain_timeout: Duration,
}

/// The exit code of a second signal during shutdown (128 + SIGINT, as shells report an interrupt).
pub const INTERRUPTED: i32 = 130;

/// Waits for SIGTERM or SIGINT.
async fn signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = ctrl_c.await;
        }
    }
}

pub(super) async fn run(args: RunArgs) -> Result<(), CliError> {
    let cfg = config::load(&args.config).map_err(CliError::ConfigInvalid)?;
    // Before anything starts: a missing secret is the configuration's fault (exit 10), not a
    // sink's failed health check.
    cfg.check_secrets().map_err(CliError::ConfigInvalid)?;
    let running = app::start(&cfg, None)
        .await
        .map_err(CliError::StartFailed)?;
    signal().await;
    tracing::info!(message = "Stopping: watches first, then draining the journal into the sinks.");
    // A second signal means "now": the journal survives any stop, so exiting at once is safe.
    tokio::spawn(async {
        signal().await;
        tracing::warn!(message = "Second signal; exiting at once.");
        std::process::exit(INTERRUPTED);
    });
    running
        .stop(args.drain_timeout)
        .await
        .map_err(CliError::JournalFailed)?;
    tracing::info!(message = "Stopped.");
    Ok(())
}
