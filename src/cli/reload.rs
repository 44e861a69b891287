//! `herald reload -c FILE`: asks the herald running with this configuration to load it again, as
//! SIGHUP does, through its admin endpoint (`POST /reload`, bearer token from `admin.token`), and
//! reports the outcome: the generation now in force, or why the file was refused.

use std::path::PathBuf;

use clap::Args;
use serde_json::Value;

use super::CliError;
use super::admin_client::Admin;
use crate::config;

/// Options of `herald reload`.
#[derive(Debug, Args)]
pub struct ReloadArgs {
    /// The configuration file (for the admin address and the token); the running herald reloads
    /// the file it was started with.
    #[arg(short = 'c', long, env = "HERALD_CONFIG")]
    pub config: PathBuf,
    /// Print JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub(super) async fn run(args: ReloadArgs) -> Result<(), CliError> {
    let cfg = config::load(&args.config).map_err(CliError::ConfigInvalid)?;
    let Some(admin) = Admin::running(&cfg).await? else {
        return Err(CliError::AdminFailed(format!(
            "no herald answers on {}: nothing to reload",
            cfg.admin.listen
        )));
    };
    let (status, body) = admin
        .request("POST", "/reload")
        .await
        .map_err(|e| CliError::AdminFailed(format!("POST /reload on {}: {e}", admin.addr())))?;
    if status == 422 {
        return Err(CliError::ReloadRefused(body.trim().to_owned()));
    }
    if status != 200 {
        // 401/403 say what is wrong with the token; 503 that herald is stopping or still busy.
        return Err(CliError::AdminFailed(format!(
            "POST /reload on {}: HTTP {status}: {}",
            admin.addr(),
            body.trim()
        )));
    }
    let doc: Value = serde_json::from_str(&body).map_err(|e| {
        CliError::AdminFailed(format!("POST /reload on {}: not JSON: {e}", admin.addr()))
    })?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        outln!("reloaded: configuration generation {}", doc["generation"]);
    }
    Ok(())
}
