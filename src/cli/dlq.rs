//! `herald dlq list|show|replay|purge` and `herald replay`: the dead-letter queues and redelivery from
//! the journal of a stopped herald. (A running herald holds its journal exclusively.)

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::CliError;
use crate::config;
use crate::journal::{Journal, JournalConfig};

/// Options of `herald dlq`.
#[derive(Debug, Args)]
pub struct DlqArgs {
    /// The configuration file (for the journal path).
    #[arg(short = 'c', long, env = "HERALD_CONFIG", global = true)]
    pub config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub action: DlqAction,
}

/// Dead-letter queue actions.
#[derive(Debug, Subcommand)]
pub enum DlqAction {
    /// List a sink's dead letters (sequence, id, class, code, attempts, last error).
    List(DlqSelect),
    /// Show dead letters whole (with the event).
    Show(DlqSelect),
    /// Queue dead letters for redelivery on the next run, and remove them from the queue.
    Replay(DlqSelect),
    /// Delete dead letters.
    Purge(DlqSelect),
}

/// Which dead letters.
#[derive(Debug, Args)]
pub struct DlqSelect {
    /// The sink.
    #[arg(long)]
    pub sink: String,
    /// Only this sequence number (repeatable); all when absent.
    #[arg(long = "seq")]
    pub seqs: Vec<u64>,
    /// Print JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Options of `herald replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The configuration file (for the journal path).
    #[arg(short = 'c', long, env = "HERALD_CONFIG")]
    pub config: PathBuf,
    /// The sink to redeliver to.
    #[arg(long)]
    pub sink: String,
    /// Redeliver journaled events from this sequence number on (within retention).
    #[arg(long, conflicts_with = "since")]
    pub from: Option<u64>,
    /// Redeliver journaled events observed at or after this time (RFC 3339).
    #[arg(long)]
    pub since: Option<String>,
    /// Print JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

fn open(config: &std::path::Path) -> Result<Journal, CliError> {
    let cfg = config::load(config).map_err(CliError::ConfigInvalid)?;
    Journal::open(JournalConfig::new(cfg.journal.path)).map_err(CliError::JournalFailed)
}

fn selected(journal: &Journal, sel: &DlqSelect) -> Result<Vec<(u64, Value)>, CliError> {
    let rows = journal
        .dead_letters(&sel.sink, usize::MAX)
        .map_err(CliError::JournalFailed)?;
    Ok(rows
        .into_iter()
        .filter(|(seq, _)| sel.seqs.is_empty() || sel.seqs.contains(seq))
        .map(|(seq, bytes)| (seq, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
        .collect())
}

pub(super) async fn dlq(args: DlqArgs) -> Result<(), CliError> {
    let config = args
        .config
        .clone()
        .ok_or_else(|| CliError::Usage("-c/--config is required".into()))?;
    let journal = open(&config)?;
    let result = match &args.action {
        DlqAction::List(sel) | DlqAction::Show(sel) => {
            let rows = selected(&journal, sel)?;
            let whole = matches!(args.action, DlqAction::Show(_));
            if sel.json {
                let items: Vec<Value> = rows
                    .iter()
                    .map(|(_, r)| if whole { r.clone() } else { without_event(r) })
                    .collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&items).unwrap_or_default()
                );
            } else if whole {
                for (_, r) in &rows {
                    println!("{}", serde_json::to_string_pretty(r).unwrap_or_default());
                }
            } else {
                println!(
                    "{:>8}  {:<50} {:<10} {:<18} {:>8}  ERROR",
                    "SEQ", "ID", "CLASS", "CODE", "ATTEMPTS"
                );
                for (seq, r) in &rows {
                    println!(
                        "{seq:>8}  {:<50} {:<10} {:<18} {:>8}  {}",
                        r.pointer("/event/id").and_then(Value::as_str).unwrap_or(""),
                        r["class"].as_str().unwrap_or(""),
                        r["code"].as_str().unwrap_or(""),
                        r["attempts"],
                        r["error"].as_str().unwrap_or("")
                    );
                }
            }
            Ok(())
        }
        DlqAction::Replay(sel) => {
            let seqs: Option<Vec<u64>> = (!sel.seqs.is_empty()).then(|| sel.seqs.clone());
            let queued = journal
                .dead_letters_to_replay(&sel.sink, seqs.as_deref())
                .map_err(CliError::JournalFailed)?;
            report(sel.json, "queued for redelivery", &queued);
            Ok(())
        }
        DlqAction::Purge(sel) => {
            let seqs: Option<Vec<u64>> = (!sel.seqs.is_empty()).then(|| sel.seqs.clone());
            let n = journal
                .dead_letters_remove(&sel.sink, seqs.as_deref())
                .map_err(CliError::JournalFailed)?;
            if sel.json {
                println!("{}", json!({"purged": n}));
            } else {
                println!("purged {n} dead letter(s) of sink {}", sel.sink);
            }
            Ok(())
        }
    };
    journal.close().await.map_err(CliError::JournalFailed)?;
    result
}

fn without_event(r: &Value) -> Value {
    let mut r = r.clone();
    if let Some(m) = r.as_object_mut() {
        let id = m
            .get("event")
            .and_then(|e| e.get("id"))
            .cloned()
            .unwrap_or(Value::Null);
        m.remove("event");
        m.insert("id".into(), id);
    }
    r
}

fn report(as_json: bool, what: &str, seqs: &[u64]) {
    if as_json {
        println!("{}", json!({"action": what, "seqs": seqs}));
    } else {
        println!("{} event(s) {what}: {seqs:?}", seqs.len());
    }
}

pub(super) async fn replay(args: ReplayArgs) -> Result<(), CliError> {
    let since =
        match &args.since {
            Some(t) => Some(t.parse::<jiff::Timestamp>().map_err(|e| {
                CliError::Usage(format!("--since {t:?} is not an RFC 3339 time: {e}"))
            })?),
            None => None,
        };
    if args.from.is_none() && since.is_none() {
        return Err(CliError::Usage("give --from SEQ or --since TIME".into()));
    }
    let cfg = config::load(&args.config).map_err(CliError::ConfigInvalid)?;
    let journal = Journal::open(JournalConfig::new(cfg.journal.path.clone()))
        .map_err(CliError::JournalFailed)?;
    let queued = crate::delivery::queue_replays(
        &journal,
        &crate::app::router(&cfg),
        &args.sink,
        args.from.unwrap_or(1),
        since,
    )
    .map_err(CliError::JournalFailed)?;
    journal.close().await.map_err(CliError::JournalFailed)?;
    report(args.json, "queued for redelivery", &queued);
    Ok(())
}
