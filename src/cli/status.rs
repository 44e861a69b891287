//! `herald status`: per resource and per sink, where herald stands — from a running herald's admin
//! endpoint, or, when it is stopped, straight from its journal.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::CliError;
use crate::config;
use crate::journal::{Journal, JournalConfig};

/// Options of `herald status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The configuration file (for the admin address and the journal path).
    #[arg(short = 'c', long, env = "HERALD_CONFIG")]
    pub config: PathBuf,
    /// Print JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// A plain HTTP GET to a loopback admin endpoint (no client library needed for one request).
async fn get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut s = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut buf = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut buf))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "read timed out"))??;
    Ok(buf
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default())
}

pub(super) async fn run(args: StatusArgs) -> Result<(), CliError> {
    let cfg = config::load(&args.config).map_err(CliError::ConfigInvalid)?;
    let doc = match get(cfg.admin.listen, "/status")
        .await
        .ok()
        .and_then(|b| serde_json::from_str::<Value>(&b).ok())
    {
        Some(mut live) => {
            live["source"] = json!(format!("admin endpoint {}", cfg.admin.listen));
            live
        }
        None => {
            let journal = Journal::open(JournalConfig::new(cfg.journal.path.clone()))
                .map_err(CliError::JournalFailed)?;
            let head = journal.head();
            let sinks: Vec<Value> = journal
                .sinks()
                .into_iter()
                .map(|s| {
                    let cursor = journal.cursor(&s).unwrap_or(0);
                    json!({"sink": s, "cursor": cursor, "lag": head.saturating_sub(cursor)})
                })
                .collect();
            let doc = json!({
                "source": format!("journal {} (herald is not running)", cfg.journal.path.display()),
                "sinks": sinks,
                "journal": {"head": head, "backlog": journal.backlog(), "sizeBytes": journal.size_on_disk().unwrap_or(0)},
            });
            journal.close().await.map_err(CliError::JournalFailed)?;
            doc
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return Ok(());
    }
    println!("from {}", doc["source"].as_str().unwrap_or("?"));
    if let Some(resources) = doc["resources"].as_array() {
        println!(
            "{:<40} {:>7} {:>7} {:>9} {:>8}",
            "RESOURCE", "SERVED", "SYNCED", "EVENTS", "RELISTS"
        );
        for r in resources {
            println!(
                "{:<40} {:>7} {:>7} {:>9} {:>8}",
                r["resource"].as_str().unwrap_or(""),
                r["served"],
                r["synced"],
                r["events"],
                r["relists"]
            );
        }
    }
    println!(
        "{:<20} {:>10} {:>8} {:>7} {:>10} {:>13}",
        "SINK", "CURSOR", "LAG", "PAUSED", "DELIVERED", "DEAD-LETTERED"
    );
    for s in doc["sinks"].as_array().into_iter().flatten() {
        println!(
            "{:<20} {:>10} {:>8} {:>7} {:>10} {:>13}",
            s["sink"].as_str().unwrap_or(""),
            s["cursor"],
            s["lag"],
            s.get("paused").map_or("-".to_string(), ToString::to_string),
            s.get("delivered")
                .map_or("-".to_string(), ToString::to_string),
            s.get("deadLettered")
                .map_or("-".to_string(), ToString::to_string)
        );
    }
    println!(
        "journal: head {}, backlog {}, {:.1} MiB",
        doc["journal"]["head"],
        doc["journal"]["backlog"],
        doc["journal"]["sizeBytes"].as_f64().unwrap_or(0.0) / 1024.0 / 1024.0
    );
    Ok(())
}
