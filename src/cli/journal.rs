//! `herald journal verify|salvage|compact`: check a stopped herald's journal, rebuild a damaged one
//! from what can still be read (see docs/operations.md, "Faults: a damaged journal"), and give
//! back the disk space sled keeps after retention ("Reclaiming disk space").

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::json;

use super::CliError;
use crate::config;
use crate::journal::{self, Report};

/// Options of `herald journal`.
#[derive(Debug, Args)]
pub struct JournalArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: JournalAction,
}

/// Journal actions.
#[derive(Debug, Subcommand)]
pub enum JournalAction {
    /// Check the journal of a stopped herald: every entry is read and checked, and the head is
    /// compared with the head record. Exit 0 when intact, 12 when damaged (with what is wrong).
    Verify(Target),
    /// Move a damaged journal aside (to `<dir>.damaged-<UTC time>`) and build a new one from what
    /// can still be read: undelivered events, sink cursors, dead letters, the object index, and
    /// the watch checkpoints when nothing a sink needed was lost (otherwise the next start relists
    /// and delivers the differences as resync events). An intact journal is left alone.
    Salvage(SalvageArgs),
    /// Give back the disk space a stopped herald's journal keeps after retention dropped events
    /// (sled never shrinks its files): every entry is copied into a fresh store, the copy is
    /// checked, then swapped in, crash-safely. Progress on stderr. Exit 0 when done, 12 when the
    /// journal is damaged, held by a running herald, or the copy failed (the journal is then
    /// unchanged).
    Compact(Target),
}

/// Which journal.
#[derive(Debug, Args)]
pub struct Target {
    /// The configuration file (for `journal.path`).
    #[arg(short = 'c', long, env = "HERALD_CONFIG", conflicts_with = "journal")]
    pub config: Option<PathBuf>,
    /// The journal directory itself (no configuration needed).
    #[arg(long, value_name = "DIR")]
    pub journal: Option<PathBuf>,
    /// Print JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// How long sled may make no progress reading the store before it is called damaged.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// Options of `herald journal salvage`.
#[derive(Debug, Args)]
pub struct SalvageArgs {
    /// Which journal.
    #[command(flatten)]
    pub target: Target,
    /// Rebuild even when the journal is intact.
    #[arg(long)]
    pub force: bool,
}

impl Target {
    fn dir(&self) -> Result<PathBuf, CliError> {
        match (&self.journal, &self.config) {
            (Some(dir), _) => Ok(dir.clone()),
            (None, Some(cfg)) => Ok(config::load(cfg)
                .map_err(CliError::ConfigInvalid)?
                .journal
                .path),
            (None, None) => Err(CliError::Usage(
                "give -c/--config FILE or --journal DIR".into(),
            )),
        }
    }
}

pub(super) async fn run(args: JournalArgs) -> Result<(), CliError> {
    match args.action {
        JournalAction::Verify(target) => verify(target).await,
        JournalAction::Salvage(args) => salvage(args).await,
        JournalAction::Compact(target) => compact(target).await,
    }
}

fn print_report(report: &Report) {
    outln!("journal {}", report.path.display());
    outln!(
        "  schema version: {}",
        report.schema_version.as_deref().unwrap_or("none")
    );
    outln!(
        "  head: {}   head record: {}",
        report.head,
        report
            .head_record
            .map_or_else(|| "none".to_owned(), |h| h.to_string())
    );
    let range = match (report.first_event, report.last_event) {
        (Some(a), Some(b)) => format!(" ({a}..={b})"),
        _ => String::new(),
    };
    outln!("  events: {}{range}", report.events);
    for (sink, cursor) in &report.cursors {
        outln!("  cursor {sink}: {cursor}");
    }
    for (stream, rv) in &report.checkpoints {
        outln!("  checkpoint {stream}: {rv}");
    }
    for stream in &report.skipping_first_syncs {
        outln!("  first sync under way, skipping the initial state: {stream}");
    }
    outln!(
        "  index entries: {}   dead letters: {}   replays: {}",
        report.index_entries,
        report.dead_letters,
        report.replays
    );
    if report.index_updates > 0 {
        outln!(
            "  index updates not yet folded into the index: {} (the next open folds them)",
            report.index_updates
        );
    }
    if let Some(disk) = report.disk_bytes {
        let per_event = disk
            .checked_div(report.events)
            .map_or_else(String::new, |b| format!("   {b} bytes per retained event"));
        outln!(
            "  on disk: {disk} bytes   live entries: {} bytes{per_event}",
            report.live_bytes
        );
    }
    if report.intact() {
        outln!("  intact");
    } else {
        outln!("  problems:");
        for p in &report.problems {
            outln!("    - {p}");
        }
    }
}

fn damaged(report: &Report, dir: &std::path::Path) -> CliError {
    CliError::JournalDamaged(format!(
        "the journal at {} is damaged ({} problem(s)); `herald journal salvage --journal {}` moves it aside and rebuilds it from what can be read",
        dir.display(),
        report.problems.len(),
        dir.display()
    ))
}

async fn verify(target: Target) -> Result<(), CliError> {
    let dir = target.dir()?;
    let timeout = target.timeout;
    let report = {
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || journal::verify(&dir, timeout))
            .await
            .map_err(|e| CliError::AdminFailed(e.to_string()))?
            .map_err(CliError::JournalFailed)?
    };
    if target.json {
        let doc = json!({"intact": report.intact(), "report": report});
        outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        print_report(&report);
    }
    if report.intact() {
        Ok(())
    } else {
        Err(damaged(&report, &dir))
    }
}

async fn salvage(args: SalvageArgs) -> Result<(), CliError> {
    let dir = args.target.dir()?;
    let (timeout, force) = (args.target.timeout, args.force);
    let out = {
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || journal::salvage(&dir, timeout, force))
            .await
            .map_err(|e| CliError::AdminFailed(e.to_string()))?
            .map_err(CliError::JournalFailed)?
    };
    if args.target.json {
        outln!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return Ok(());
    }
    let Some(moved) = &out.moved_to else {
        outln!(
            "the journal at {} is intact; nothing to salvage (--force rebuilds it anyway)",
            dir.display()
        );
        return Ok(());
    };
    outln!("damaged journal moved to {}", moved.display());
    for p in &out.report.problems {
        outln!("  was: {p}");
    }
    outln!("new journal at {} (head {}):", dir.display(), out.head);
    outln!(
        "  kept: {} undelivered event(s), {} cursor(s), {} checkpoint(s), {} index entries, {} dead letter(s), {} replay(s)",
        out.events_kept,
        out.cursors.len(),
        out.checkpoints_kept.len(),
        out.index_entries_kept,
        out.dead_letters_kept,
        out.replays_kept
    );
    for (sink, cursor) in &out.cursors {
        outln!("  cursor {sink}: {cursor}");
    }
    if out.first_syncs_kept > 0 {
        outln!(
            "  kept: {} first-sync marker(s) (those first syncs continue without reporting what they find)",
            out.first_syncs_kept
        );
    }
    outln!(
        "  dropped: {} event(s) (unreadable or already delivered everywhere), {} other unreadable entries",
        out.events_dropped,
        out.other_dropped
    );
    if !out.checkpoints_kept.is_empty() {
        outln!("  watches resume from their checkpoints");
    }
    if out.checkpoints_kept.is_empty() && out.checkpoints_dropped.is_empty() {
        outln!("  no checkpoint could be read: the next start relists every resource");
    } else if !out.checkpoints_dropped.is_empty() {
        outln!(
            "  checkpoints dropped ({}): the next start relists these resources and delivers the differences as resync events",
            out.checkpoints_dropped.join(", ")
        );
    }
    Ok(())
}

async fn compact(target: Target) -> Result<(), CliError> {
    let dir = target.dir()?;
    let timeout = target.timeout;
    let out = {
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || {
            errln!("compacting the journal at {}", dir.display());
            journal::compact(&dir, timeout, &mut |line| errln!("  {line}"))
        })
        .await
        .map_err(|e| CliError::AdminFailed(e.to_string()))?
        .map_err(CliError::JournalFailed)?
    };
    if target.json {
        outln!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return Ok(());
    }
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    outln!(
        "journal {} compacted in {:.2} s",
        dir.display(),
        out.seconds
    );
    outln!(
        "  on disk: {} bytes ({:.1} MiB) -> {} bytes ({:.1} MiB)",
        out.bytes_before,
        mib(out.bytes_before),
        out.bytes_after,
        mib(out.bytes_after)
    );
    let per_event = out
        .bytes_per_event
        .map_or_else(String::new, |b| format!(", {b} bytes on disk per event"));
    outln!(
        "  kept: {} event(s) (head {}), {} entries, {} live bytes{per_event}",
        out.events_kept,
        out.head,
        out.entries,
        out.live_bytes
    );
    Ok(())
}
