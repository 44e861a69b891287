//! `herald status`: per resource and per sink, where herald stands — from a running herald's admin
//! endpoint, or, when it is stopped, straight from its journal.

use std::path::PathBuf;

use clap::Args;
use serde_json::{Value, json};

use super::CliError;
use super::admin_client::Admin;
use super::table::{Align, Table};
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

pub(super) async fn run(args: StatusArgs) -> Result<(), CliError> {
    let cfg = config::load(&args.config).map_err(CliError::ConfigInvalid)?;
    let live = match Admin::running(&cfg).await? {
        Some(admin) => admin.json("GET", "/status").await.ok(),
        None => None,
    };
    let doc = match live {
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
                    json!({
                        "sink": s,
                        "cursor": cursor,
                        "lag": head.saturating_sub(cursor),
                        "deadLetterQueue": journal.dead_letter_count(&s),
                    })
                })
                .collect();
            let doc = json!({
                "source": format!("journal {} (herald is not running)", cfg.journal.path.display()),
                "sinks": sinks,
                "journal": {"head": head, "backlog": journal.backlog(), "sizeBytes": journal.size_on_disk().unwrap_or(0), "retainedEvents": journal.retained_events()},
            });
            journal.close().await.map_err(CliError::JournalFailed)?;
            doc
        }
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return Ok(());
    }
    outln!("from {}", doc["source"].as_str().unwrap_or("?"));
    // Numbers as JSON prints them; a field the source does not have (the journal knows no
    // delivery counters) is `-`.
    let field = |v: &Value, key: &str| match v.get(key) {
        None | Some(Value::Null) => "-".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    if let Some(resources) = doc["resources"].as_array() {
        let mut table = Table::new(&[
            ("RESOURCE", Align::Left),
            ("SERVED", Align::Right),
            ("SYNCED", Align::Right),
            ("EVENTS", Align::Right),
            ("RELISTS", Align::Right),
        ]);
        for r in resources {
            table.row(vec![
                field(r, "resource"),
                field(r, "served"),
                field(r, "synced"),
                field(r, "events"),
                field(r, "relists"),
            ]);
        }
        for line in table.lines() {
            outln!("{line}");
        }
    }
    let mut table = Table::new(&[
        ("SINK", Align::Left),
        ("CURSOR", Align::Right),
        ("LAG", Align::Right),
        ("PAUSED", Align::Right),
        ("DELIVERED", Align::Right),
        ("DEAD-LETTERED", Align::Right),
        ("DLQ", Align::Right),
    ]);
    for s in doc["sinks"].as_array().into_iter().flatten() {
        table.row(vec![
            field(s, "sink"),
            field(s, "cursor"),
            field(s, "lag"),
            field(s, "paused"),
            field(s, "delivered"),
            field(s, "deadLettered"),
            field(s, "deadLetterQueue"),
        ]);
    }
    for line in table.lines() {
        outln!("{line}");
    }
    for s in doc["sinks"].as_array().into_iter().flatten() {
        if let Some(why) = s["pausedReason"].as_str() {
            outln!(
                "sink {} paused, probing: {why}",
                s["sink"].as_str().unwrap_or("")
            );
        }
    }
    // Only a running herald has a configuration generation (issue 23's live reload).
    if let Some(generation) = doc["config"]["generation"].as_u64() {
        match doc["config"]["lastReloadError"].as_str() {
            Some(error) => outln!("config: generation {generation}; last reload refused: {error}"),
            None => outln!("config: generation {generation}"),
        }
    }
    // Leader election on (issue 22): which replica this is and who delivers.
    let le = &doc["leaderElection"];
    if let Some(role) = le["role"].as_str() {
        outln!(
            "leader election: {role} ({}); holder {}, lease {}",
            le["identity"].as_str().unwrap_or(""),
            le["holder"].as_str().unwrap_or("none"),
            le["lease"].as_str().unwrap_or("")
        );
    }
    let size = doc["journal"]["sizeBytes"].as_u64().unwrap_or(0);
    let retained = doc["journal"]["retainedEvents"].as_u64().unwrap_or(0);
    let per_event = size
        .checked_div(retained)
        .map_or_else(String::new, |b| format!(" ({b} bytes per retained event)"));
    outln!(
        "journal: head {}, backlog {}, {:.1} MiB on disk, {retained} retained event(s){per_event}",
        doc["journal"]["head"],
        doc["journal"]["backlog"],
        size as f64 / 1024.0 / 1024.0
    );
    Ok(())
}
