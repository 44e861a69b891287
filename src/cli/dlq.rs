//! `herald dlq list|show|replay|purge` and `herald replay`: the dead-letter queues and redelivery. A
//! running herald holds its journal exclusively, so when its admin endpoint answers the commands go
//! through it (with `admin.token`); otherwise they open the journal of the stopped herald.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use herald_sink_core::{DeadLetter, ErrorContext};
use serde::{Deserialize as _, Serialize};
use serde_json::{Value, json};

use super::CliError;
use super::admin_client::Admin;
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

/// Where the dead letters are: a running herald's admin endpoint or a stopped herald's journal.
enum Queue {
    Running(Admin),
    Stopped(Journal),
}

/// `a,b,c` for the admin endpoint's `seqs` parameter.
fn seq_list(seqs: &[u64]) -> String {
    seqs.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn seqs_of(v: &Value, key: &str) -> Vec<u64> {
    v[key]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .collect()
}

impl Queue {
    async fn open(config: &std::path::Path) -> Result<Self, CliError> {
        let cfg = config::load(config).map_err(CliError::ConfigInvalid)?;
        if let Some(admin) = Admin::running(&cfg).await? {
            tracing::info!(message = "herald is running; using its admin endpoint.", addr = %admin.addr());
            return Ok(Self::Running(admin));
        }
        Journal::open(JournalConfig::new(cfg.journal.path))
            .map(Self::Stopped)
            .map_err(CliError::JournalFailed)
    }

    /// The selected dead letters by sequence; `None` for a record that does not decode (shown as
    /// `null`, so an operator still sees it is there and can purge it).
    async fn selected(&self, sel: &DlqSelect) -> Result<Vec<(u64, Option<DeadLetter>)>, CliError> {
        let rows: Vec<(u64, Option<DeadLetter>)> = match self {
            Self::Stopped(journal) => journal
                .dead_letters(&sel.sink, usize::MAX)
                .map_err(CliError::JournalFailed)?
                .into_iter()
                .map(|(seq, bytes)| (seq, DeadLetter::from_bytes(&bytes).ok()))
                .collect(),
            Self::Running(admin) => admin
                .json("GET", &format!("/dlq/{}", sel.sink))
                .await?
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| {
                    let letter = DeadLetter::deserialize(r).ok();
                    (letter.as_ref().map_or(0, |l| l.seq), letter)
                })
                .collect(),
        };
        Ok(rows
            .into_iter()
            .filter(|(seq, _)| sel.seqs.is_empty() || sel.seqs.contains(seq))
            .collect())
    }

    async fn replay(&self, sel: &DlqSelect) -> Result<Vec<u64>, CliError> {
        match self {
            Self::Stopped(journal) => {
                let seqs: Option<Vec<u64>> = (!sel.seqs.is_empty()).then(|| sel.seqs.clone());
                journal
                    .dead_letters_to_replay(&sel.sink, seqs.as_deref())
                    .map_err(CliError::JournalFailed)
            }
            Self::Running(admin) => {
                let v = admin
                    .json(
                        "POST",
                        &format!("/dlq/{}/replay?seqs={}", sel.sink, seq_list(&sel.seqs)),
                    )
                    .await?;
                Ok(seqs_of(&v, "queued"))
            }
        }
    }

    async fn purge(&self, sel: &DlqSelect) -> Result<u64, CliError> {
        match self {
            Self::Stopped(journal) => {
                let seqs: Option<Vec<u64>> = (!sel.seqs.is_empty()).then(|| sel.seqs.clone());
                journal
                    .dead_letters_remove(&sel.sink, seqs.as_deref())
                    .map(|n| u64::try_from(n).unwrap_or(u64::MAX))
                    .map_err(CliError::JournalFailed)
            }
            Self::Running(admin) => {
                let v = admin
                    .json(
                        "POST",
                        &format!("/dlq/{}/purge?seqs={}", sel.sink, seq_list(&sel.seqs)),
                    )
                    .await?;
                Ok(v["purged"].as_u64().unwrap_or(0))
            }
        }
    }

    async fn close(self) -> Result<(), CliError> {
        match self {
            Self::Stopped(journal) => journal.close().await.map_err(CliError::JournalFailed),
            Self::Running(_) => Ok(()),
        }
    }
}

pub(super) async fn dlq(args: DlqArgs) -> Result<(), CliError> {
    let config = args
        .config
        .clone()
        .ok_or_else(|| CliError::Usage("-c/--config is required".into()))?;
    let queue = Queue::open(&config).await?;
    let result = match &args.action {
        DlqAction::List(sel) | DlqAction::Show(sel) => {
            let rows = match queue.selected(sel).await {
                Ok(rows) => rows,
                Err(e) => {
                    queue.close().await?;
                    return Err(e);
                }
            };
            let whole = matches!(args.action, DlqAction::Show(_));
            let shown = |letter: &Option<DeadLetter>| -> Value {
                let shown = match letter {
                    Some(l) if whole => serde_json::to_value(l),
                    Some(l) => serde_json::to_value(Listed::of(l)),
                    None => Ok(Value::Null),
                };
                shown.unwrap_or_default()
            };
            if sel.json {
                let items: Vec<Value> = rows.iter().map(|(_, l)| shown(l)).collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&items).unwrap_or_default()
                );
            } else if whole {
                for (_, l) in &rows {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&shown(l)).unwrap_or_default()
                    );
                }
            } else {
                println!(
                    "{:>8}  {:<50} {:<10} {:<18} {:>8}  ERROR",
                    "SEQ", "ID", "CLASS", "CODE", "ATTEMPTS"
                );
                for (seq, l) in &rows {
                    let (id, error) = l
                        .as_ref()
                        .map_or(("", None), |l| (l.event.id.as_str(), Some(&l.error)));
                    // Ids and messages may hold control characters (odd object names): escaped,
                    // so one letter stays one row and nothing reaches the terminal as a command.
                    let id = printable(id);
                    println!(
                        "{seq:>8}  {id:<50} {:<10} {:<18} {:>8}  {}",
                        error.map_or("", |e| e.class.as_str()),
                        error.map_or("", |e| e.code.as_str()),
                        error.map_or(String::new(), |e| e.attempts.to_string()),
                        error.map_or(String::new(), |e| printable(&e.message)),
                    );
                }
            }
            Ok(())
        }
        DlqAction::Replay(sel) => queue.replay(sel).await.map(|queued| {
            report(sel.json, "queued for redelivery", &queued);
        }),
        DlqAction::Purge(sel) => queue.purge(sel).await.map(|n| {
            if sel.json {
                println!("{}", json!({"purged": n}));
            } else {
                println!("purged {n} dead letter(s) of sink {}", sel.sink);
            }
        }),
    };
    queue.close().await?;
    result
}

/// A dead letter as `herald dlq list --json` prints it: the record without its event, plus the
/// event's id.
#[derive(Serialize)]
struct Listed<'a> {
    seq: u64,
    #[serde(flatten)]
    error: &'a ErrorContext,
    id: &'a str,
}

impl<'a> Listed<'a> {
    fn of(letter: &'a DeadLetter) -> Self {
        Self {
            seq: letter.seq,
            error: &letter.error,
            id: &letter.event.id,
        }
    }
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
    if let Some(admin) = Admin::running(&cfg).await? {
        let mut path = format!("/replay?sink={}", args.sink);
        if let Some(from) = args.from {
            path.push_str(&format!("&from={from}"));
        }
        if let Some(since) = since {
            path.push_str(&format!("&since={since}"));
        }
        let v = admin.json("POST", &path).await?;
        report(args.json, "queued for redelivery", &seqs_of(&v, "queued"));
        return Ok(());
    }
    let journal = Journal::open(JournalConfig::new(cfg.journal.path.clone()))
        .map_err(CliError::JournalFailed)?;
    let queued = crate::delivery::queue_replays(
        &journal,
        &crate::route::Router::from_config(&cfg.routes)
            .map_err(|e| CliError::StartFailed(crate::app::StartError::Invalid(e)))?,
        &args.sink,
        args.from.unwrap_or(1),
        since,
    )
    .map_err(CliError::JournalFailed)?;
    journal.close().await.map_err(CliError::JournalFailed)?;
    report(args.json, "queued for redelivery", &queued);
    Ok(())
}

/// `text` with its control characters escaped (`\n`, `\u{7f}`), everything else as it is.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn printable_escapes_control_characters_only() {
        assert_eq!(
            super::printable("ns/a\nb\0c\u{7f} \"é\""),
            "ns/a\\nb\\0c\\u{7f} \"é\""
        );
    }
}
