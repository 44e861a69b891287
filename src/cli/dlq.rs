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
use super::table::Align;
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
    /// Redeliver journaled events observed at or after this time: a duration back from now (`1h`,
    /// `30m`, `2h30m`) or an RFC 3339 time (`2026-01-02T15:04:05Z`).
    #[arg(long, value_name = "DURATION|TIME", value_parser = parse_since)]
    pub since: Option<jiff::Timestamp>,
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

/// The configured sinks' names, for the message about an unknown one.
fn sink_names(cfg: &config::Config) -> Vec<String> {
    cfg.sinks.iter().map(|s| s.name.clone()).collect()
}

impl Queue {
    async fn open(cfg: &config::Config) -> Result<Self, CliError> {
        if let Some(admin) = Admin::running(cfg).await? {
            tracing::info!(message = "herald is running; using its admin endpoint.", addr = %admin.addr());
            return Ok(Self::Running(admin));
        }
        Journal::open(JournalConfig::new(cfg.journal.path.clone()))
            .map(Self::Stopped)
            .map_err(CliError::JournalFailed)
    }

    /// The selected dead letters by sequence; `None` for a record that does not decode (shown as
    /// `null`, so an operator still sees it is there and can purge it).
    async fn selected(
        &self,
        sel: &DlqSelect,
        known: &[String],
    ) -> Result<Vec<(u64, Option<DeadLetter>)>, CliError> {
        let rows: Vec<(u64, Option<DeadLetter>)> = match self {
            Self::Stopped(journal) => journal
                .dead_letters(&sel.sink, usize::MAX)
                .map_err(CliError::JournalFailed)?
                .into_iter()
                .map(|(seq, bytes)| (seq, DeadLetter::from_bytes(&bytes).ok()))
                .collect(),
            Self::Running(admin) => admin
                .json_found("GET", &format!("/dlq/{}", sel.sink))
                .await?
                .ok_or_else(|| unknown_sink(&sel.sink, known))?
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

    async fn replay(&self, sel: &DlqSelect, known: &[String]) -> Result<Vec<u64>, CliError> {
        match self {
            Self::Stopped(journal) => {
                let seqs: Option<Vec<u64>> = (!sel.seqs.is_empty()).then(|| sel.seqs.clone());
                journal
                    .dead_letters_to_replay(&sel.sink, seqs.as_deref())
                    .map_err(CliError::JournalFailed)
            }
            Self::Running(admin) => {
                let v = admin
                    .json_found(
                        "POST",
                        &format!("/dlq/{}/replay?seqs={}", sel.sink, seq_list(&sel.seqs)),
                    )
                    .await?
                    .ok_or_else(|| unknown_sink(&sel.sink, known))?;
                Ok(seqs_of(&v, "queued"))
            }
        }
    }

    async fn purge(&self, sel: &DlqSelect, known: &[String]) -> Result<u64, CliError> {
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
                    .json_found(
                        "POST",
                        &format!("/dlq/{}/purge?seqs={}", sel.sink, seq_list(&sel.seqs)),
                    )
                    .await?
                    .ok_or_else(|| unknown_sink(&sel.sink, known))?;
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
    let cfg = config::load(&config).map_err(CliError::ConfigInvalid)?;
    let known = sink_names(&cfg);
    let queue = Queue::open(&cfg).await?;
    let result = act(&queue, &args.action, &known).await;
    queue.close().await?;
    result
}

/// `no sink named …`, listing the configured sinks.
fn unknown_sink(sink: &str, known: &[String]) -> CliError {
    CliError::UnknownSink {
        sink: sink.to_owned(),
        known: known.to_vec(),
    }
}

async fn act(queue: &Queue, action: &DlqAction, known: &[String]) -> Result<(), CliError> {
    let (DlqAction::List(sel)
    | DlqAction::Show(sel)
    | DlqAction::Replay(sel)
    | DlqAction::Purge(sel)) = action;
    // A stopped herald's journal answers any name with an empty queue; the running endpoint says
    // 404. A sink removed from the configuration whose dead letters are still kept stays known, so
    // they can be listed and purged (as the running endpoint allows).
    if let Queue::Stopped(journal) = queue
        && !known.contains(&sel.sink)
        && journal.dead_letter_count(&sel.sink) == 0
    {
        return Err(unknown_sink(&sel.sink, known));
    }
    // Named sequence numbers must all be there, before anything is changed.
    let rows =
        if sel.seqs.is_empty() && matches!(action, DlqAction::Replay(_) | DlqAction::Purge(_)) {
            Vec::new()
        } else {
            let rows = queue.selected(sel, known).await?;
            // The running endpoint lists a letter that does not decode as `null`, without its
            // sequence number: then a missing one may be that letter, and the endpoint decides.
            let seqs_unknown =
                matches!(queue, Queue::Running(_)) && rows.iter().any(|(_, l)| l.is_none());
            let missing: Vec<u64> = sel
                .seqs
                .iter()
                .copied()
                .filter(|seq| !seqs_unknown && !rows.iter().any(|(s, _)| s == seq))
                .collect();
            if !missing.is_empty() {
                return Err(CliError::NoSuchDeadLetter {
                    sink: sel.sink.clone(),
                    seqs: missing,
                });
            }
            rows
        };
    match action {
        DlqAction::List(_) | DlqAction::Show(_) => {
            print_letters(&rows, matches!(action, DlqAction::Show(_)), sel.json);
            Ok(())
        }
        DlqAction::Replay(_) => queue.replay(sel, known).await.map(|queued| {
            report(
                sel.json,
                "dead letter(s) queued for redelivery",
                &sel.sink,
                &queued,
            );
        }),
        DlqAction::Purge(_) => queue.purge(sel, known).await.map(|n| {
            if sel.json {
                outln!("{}", json!({"purged": n}));
            } else {
                outln!("purged {n} dead letter(s) of sink {}", sel.sink);
            }
        }),
    }
}

/// `herald dlq list|show`: a table (list), whole records (show), or JSON.
fn print_letters(rows: &[(u64, Option<DeadLetter>)], whole: bool, as_json: bool) {
    let shown = |letter: &Option<DeadLetter>| -> Value {
        let shown = match letter {
            Some(l) if whole => serde_json::to_value(l),
            Some(l) => serde_json::to_value(Listed::of(l)),
            None => Ok(Value::Null),
        };
        shown.unwrap_or_default()
    };
    if as_json {
        let items: Vec<Value> = rows.iter().map(|(_, l)| shown(l)).collect();
        outln!(
            "{}",
            serde_json::to_string_pretty(&items).unwrap_or_default()
        );
    } else if whole {
        for (_, l) in rows {
            outln!(
                "{}",
                serde_json::to_string_pretty(&shown(l)).unwrap_or_default()
            );
        }
    } else {
        let mut table = super::table::Table::new(&[
            ("SEQ", Align::Right),
            ("ID", Align::Left),
            ("CLASS", Align::Left),
            ("CODE", Align::Left),
            ("ATTEMPTS", Align::Right),
            ("ERROR", Align::Left),
        ]);
        for (seq, l) in rows {
            let (id, error) = l
                .as_ref()
                .map_or(("", None), |l| (l.event.id.as_str(), Some(&l.error)));
            // Ids and messages may hold control characters (odd object names): escaped, so one
            // letter stays one row and nothing reaches the terminal as a command.
            table.row(vec![
                seq.to_string(),
                printable(id),
                error.map_or(String::new(), |e| printable(&e.class)),
                error.map_or(String::new(), |e| printable(&e.code)),
                error.map_or(String::new(), |e| e.attempts.to_string()),
                error.map_or(String::new(), |e| printable(&e.message)),
            ]);
        }
        for line in table.lines() {
            outln!("{line}");
        }
    }
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

/// What a replay queued: with `--json` every sequence number; otherwise a summary (count, first
/// and last), since a replay from an old sequence number can queue a whole journal.
fn report(as_json: bool, what: &str, sink: &str, seqs: &[u64]) {
    let (first, last) = (seqs.iter().min(), seqs.iter().max());
    if as_json {
        outln!(
            "{}",
            json!({"action": what, "sink": sink, "count": seqs.len(), "first": first, "last": last, "seqs": seqs})
        );
        return;
    }
    match (first, last) {
        (Some(first), Some(last)) if first != last => outln!(
            "sink {sink}: {} {what} (sequence numbers {first} to {last})",
            seqs.len()
        ),
        (Some(seq), _) => outln!("sink {sink}: 1 {what} (sequence number {seq})"),
        _ => outln!("sink {sink}: 0 {what}"),
    }
}

/// `--since`: a duration back from now (humantime: `1h`, `30m`, `2h30m`) or an RFC 3339 time.
fn parse_since(text: &str) -> Result<jiff::Timestamp, String> {
    if let Ok(time) = text.parse::<jiff::Timestamp>() {
        return Ok(time);
    }
    let ago = humantime::parse_duration(text).map_err(|e| {
        format!(
            "neither a duration (1h, 30m, 2h30m: {e}) nor an RFC 3339 time (2026-01-02T15:04:05Z)"
        )
    })?;
    jiff::SignedDuration::try_from(ago)
        .ok()
        .and_then(|ago| jiff::Timestamp::now().checked_sub(ago).ok())
        .ok_or_else(|| format!("{text} reaches before the earliest time herald can represent"))
}

pub(super) async fn replay(args: ReplayArgs) -> Result<(), CliError> {
    let since = args.since;
    if args.from.is_none() && since.is_none() {
        return Err(CliError::Usage("give --from SEQ or --since TIME".into()));
    }
    let cfg = config::load(&args.config).map_err(CliError::ConfigInvalid)?;
    let known = sink_names(&cfg);
    const WHAT: &str = "event(s) queued for redelivery";
    if let Some(admin) = Admin::running(&cfg).await? {
        let mut path = format!("/replay?sink={}", args.sink);
        if let Some(from) = args.from {
            path.push_str(&format!("&from={from}"));
        }
        if let Some(since) = since {
            path.push_str(&format!("&since={since}"));
        }
        let v = admin
            .json_found("POST", &path)
            .await?
            .ok_or_else(|| unknown_sink(&args.sink, &known))?;
        report(args.json, WHAT, &args.sink, &seqs_of(&v, "queued"));
        return Ok(());
    }
    // Only a configured sink has routes to select events for; any other name would queue nothing.
    if !known.contains(&args.sink) {
        return Err(unknown_sink(&args.sink, &known));
    }
    let journal = Journal::open(JournalConfig::new(cfg.journal.path.clone()))
        .map_err(CliError::JournalFailed)?;
    let queued = crate::route::Router::from_config(&cfg.routes)
        .map_err(|e| CliError::StartFailed(crate::app::StartError::Invalid(e)))
        .and_then(|router| {
            crate::delivery::queue_replays(
                &journal,
                &router,
                &args.sink,
                args.from.unwrap_or(1),
                since,
            )
            .map_err(CliError::JournalFailed)
        });
    journal.close().await.map_err(CliError::JournalFailed)?;
    report(args.json, WHAT, &args.sink, &queued?);
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
