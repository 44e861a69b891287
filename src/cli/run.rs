//! `herald run -c FILE`: watches, normalizes, journals and delivers until SIGTERM or SIGINT; then stops
//! the watches, drains what was journaled into the sinks, flushes and exits 0. A second signal exits at
//! once (the journal is crash-safe by design, so nothing is damaged). SIGHUP, `POST /reload` and a
//! change of the file reload the configuration ([`app::Reloader`]).
//!
//! A journal write that fails (a full disk) ends it too, with exit 12: sled cannot write again in
//! this process, a restart reopens the store and resumes from its last durable checkpoint (ADR 0005).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tokio::signal::unix::{Signal, SignalKind, signal};

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
    /// How long a watch may deliver nothing, not even a bookmark, before herald takes it for stalled
    /// and reconnects from its last resourceVersion. API servers send a bookmark about once a
    /// minute; keep this well above that (and above 5 s, or every reconnection counts as a failure
    /// and backs off).
    #[arg(long, default_value = "330s", value_parser = stall_timeout, env = "HERALD_WATCH_STALL_TIMEOUT")]
    pub watch_stall_timeout: Duration,
}

/// A duration of at least a second: shorter, and every watch would be taken for stalled.
fn stall_timeout(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_secs(1) {
        return Err("must be at least 1s".into());
    }
    Ok(d)
}

/// The exit code of a second signal during shutdown (128 + SIGINT, as shells report an interrupt).
pub const INTERRUPTED: i32 = 130;

/// How long herald stays up after its journal failed, watches and deliveries stopped, answering
/// `/healthz` (503), `/readyz` and `/metrics` with the cause before it exits 12: long enough for a
/// probe or a scrape in flight, short enough that the restart comes within seconds.
const FAILED_HOLD: Duration = Duration::from_secs(2);

/// SIGTERM and SIGINT, listened for from the moment this is made. Made before start-up, so a signal
/// that arrives while herald is still starting becomes a stop once it has started instead of the
/// default action (death without a drain: an orchestrator stopping a pod that is starting).
struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    fn listen() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Waits for the next SIGTERM or SIGINT (one that came earlier counts).
    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// The next reload asked for through the admin endpoint; never, once the endpoint is gone.
async fn next_request(requests: &mut Option<app::ReloadRequests>) -> Option<app::ReloadReply> {
    match requests {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

pub(super) async fn run(args: RunArgs) -> Result<(), CliError> {
    let mut signals = Signals::listen().map_err(CliError::RuntimeFailed)?;
    // SIGHUP reloads the configuration; listened for from here, as by default it ends the process.
    let mut hup = signal(SignalKind::hangup()).map_err(CliError::RuntimeFailed)?;
    let cfg = config::load(&args.config).map_err(CliError::ConfigInvalid)?;
    // Before anything starts: a missing secret is the configuration's fault (exit 10), not a
    // sink's failed health check.
    cfg.check_secrets().map_err(CliError::ConfigInvalid)?;
    for warning in cfg.warnings() {
        tracing::warn!(message = "Configuration warning.", %warning);
    }
    let tuning = crate::watch::Tuning {
        stall_timeout: args.watch_stall_timeout,
        ..crate::watch::Tuning::default()
    };
    let mut running = app::start(&cfg, Some(tuning))
        .await
        .map_err(CliError::StartFailed)?;
    let mut reloader = app::Reloader::new(
        args.config.clone(),
        cfg,
        running.config_status().clone(),
        args.drain_timeout,
    );
    let mut requests = running.take_reload_requests();
    let mut poll = tokio::time::interval(app::POLL_EVERY);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // One loop owns the running set, so reloads (SIGHUP, `POST /reload`, a changed file) happen
    // one at a time; the outcome is logged and shown on /status and /metrics by the reloader.
    let failed = loop {
        tokio::select! {
            () = signals.next() => break None,
            failure = running.journal_failed() => break Some(failure),
            _ = hup.recv() => {
                tracing::info!(message = "SIGHUP: reloading the configuration.");
                let _ = reloader.reload(&mut running).await;
            }
            Some(reply) = next_request(&mut requests) => {
                let outcome = reloader.reload(&mut running).await;
                // The caller may have given up waiting; the outcome is on /status anyway.
                let _ = reply.send(outcome.map_err(|e| e.to_string()));
            }
            _ = poll.tick() => {
                if reloader.changed() {
                    tracing::info!(message = "Configuration file changed: reloading.", path = %args.config.display());
                    let _ = reloader.reload(&mut running).await;
                }
                reloader.expire_removed(running.journal());
            }
        }
    };
    if let Some(failure) = failed {
        tracing::error!(
            message = "Stopping: the journal cannot take writes; exiting 12 so that a restart resumes from the last durable checkpoint.",
            path = %failure.path().display(),
            cause = failure.cause(),
            advice = failure.advice(),
        );
        // A signal during the hold cuts it short: the exit is the same.
        running
            .stop_after_journal_failure(async {
                tokio::select! {
                    () = tokio::time::sleep(FAILED_HOLD) => {}
                    () = signals.next() => {}
                }
            })
            .await;
        return Err(CliError::JournalFailed(
            crate::journal::JournalError::Unwritable(failure),
        ));
    }
    tracing::info!(message = "Stopping: watches first, then draining the journal into the sinks.");
    // A second signal means "now": the journal survives any stop, so exiting at once is safe.
    tokio::spawn(async move {
        signals.next().await;
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
