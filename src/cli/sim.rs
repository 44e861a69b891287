//! `herald sim`: serve the Kubernetes API simulator until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::CliError;
use crate::sim::{SimConfig, Simulator};

/// Options of `herald sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Address to listen on (loopback by default; port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:6443", env = "HERALD_SIM_LISTEN")]
    pub listen: SocketAddr,
    /// Where to write a kubeconfig pointing at the simulator.
    #[arg(
        long,
        default_value = "herald-sim.kubeconfig",
        env = "HERALD_SIM_KUBECONFIG_OUT"
    )]
    pub kubeconfig_out: PathBuf,
    /// Changes kept in history; watches resuming from before the window get 410 Expired.
    #[arg(long, default_value_t = 100_000, env = "HERALD_SIM_HISTORY")]
    pub history: usize,
    /// Interval of BOOKMARK events on idle watches that allow them (e.g. `60s`, `500ms`).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration, env = "HERALD_SIM_BOOKMARK_INTERVAL")]
    pub bookmark_interval: Duration,
}

pub(super) async fn run(args: SimArgs) -> Result<(), CliError> {
    let config = SimConfig::default()
        .listen(args.listen)
        .history_limit(args.history)
        .bookmark_interval(args.bookmark_interval);
    let sim = Simulator::start_with_kubeconfig(config, &args.kubeconfig_out)
        .await
        .map_err(CliError::SimStartFailed)?;
    tracing::info!(
        message = "Simulator ready.",
        url = %sim.url(),
        kubeconfig = %sim.kubeconfig_path().display(),
    );
    eprintln!(
        "try: kubectl --kubeconfig {} get namespaces",
        sim.kubeconfig_path().display()
    );
    shutdown_signal().await;
    tracing::info!(message = "Simulator stopping.");
    sim.shutdown().await;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
