//! `herald sim`: serve the Kubernetes API simulator until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::CliError;
use herald_sim::{FailRule, LatencyRule, SimConfig, Simulator};

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
    /// Keep the state in this directory (created 0700): it survives restarts and the resourceVersion
    /// never goes backwards.
    #[arg(long, env = "HERALD_SIM_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Apply this multi-document YAML of CRDs and objects at start (repeatable).
    #[arg(long, value_name = "FILE.yaml")]
    pub load: Vec<PathBuf>,
    /// Serve HTTPS with a self-signed certificate generated at start; the kubeconfig carries it.
    #[arg(long, env = "HERALD_SIM_TLS")]
    pub tls: bool,
    /// Drop a watch whose reader accepts nothing for this long (e.g. `5s`).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration, env = "HERALD_SIM_SLOW_READER_TIMEOUT")]
    pub slow_reader_timeout: Duration,
    /// Fail the next COUNT requests under PATH_PREFIX with STATUS: `STATUS:COUNT:PATH_PREFIX`, e.g.
    /// `503:3:/apis/example.com` (429, 500, 503 and 504 get the real server's bodies). Repeatable.
    #[arg(long, value_parser = parse_fail)]
    pub fail: Vec<FailRule>,
    /// Delay every request under PATH_PREFIX: `DURATION:PATH_PREFIX`, e.g. `200ms:/apis`. Repeatable.
    #[arg(long, value_parser = parse_latency)]
    pub latency: Vec<LatencyRule>,
}

fn parse_fail(s: &str) -> Result<FailRule, String> {
    let mut parts = s.splitn(3, ':');
    let (Some(status), Some(count), Some(prefix)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("expected STATUS:COUNT:PATH_PREFIX, got {s:?}"));
    };
    let status: u16 = status
        .parse()
        .map_err(|_| format!("invalid status {status:?} in {s:?}"))?;
    let count: u32 = count
        .parse()
        .map_err(|_| format!("invalid count {count:?} in {s:?}"))?;
    if !prefix.starts_with('/') {
        return Err(format!(
            "the path prefix must start with '/', got {prefix:?}"
        ));
    }
    Ok(FailRule {
        path_prefix: prefix.to_string(),
        method: None,
        watch: None,
        status,
        count,
        retry_after_seconds: matches!(status, 429 | 503 | 504).then_some(1),
        client: None,
    })
}

fn parse_latency(s: &str) -> Result<LatencyRule, String> {
    let Some((delay, prefix)) = s.split_once(':') else {
        return Err(format!("expected DURATION:PATH_PREFIX, got {s:?}"));
    };
    let delay =
        humantime::parse_duration(delay).map_err(|e| format!("invalid duration {delay:?}: {e}"))?;
    if !prefix.starts_with('/') {
        return Err(format!(
            "the path prefix must start with '/', got {prefix:?}"
        ));
    }
    Ok(LatencyRule {
        path_prefix: prefix.to_string(),
        delay,
        client: None,
    })
}

pub(super) async fn run(args: SimArgs) -> Result<(), CliError> {
    let config = SimConfig::default()
        .listen(args.listen)
        .history_limit(args.history)
        .bookmark_interval(args.bookmark_interval)
        .slow_reader_timeout(args.slow_reader_timeout)
        .tls(args.tls);
    let config = match args.data_dir {
        Some(dir) => config.data_dir(dir),
        None => config,
    };
    let sim = Simulator::start_with_kubeconfig(config, &args.kubeconfig_out)
        .await
        .map_err(CliError::SimStartFailed)?;
    for file in &args.load {
        let n = sim.load_file(file).map_err(CliError::SimLoadFailed)?;
        tracing::info!(message = "Loaded.", file = %file.display(), documents = n);
    }
    for rule in args.fail {
        sim.fail(rule);
    }
    for rule in args.latency {
        sim.add_latency(rule);
    }
    tracing::info!(
        message = "Simulator ready.",
        url = %sim.url(),
        kubeconfig = %sim.kubeconfig_path().display(),
    );
    errln!(
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
