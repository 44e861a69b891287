//! The journal's append thread: every queued append ([`Journal::append_queued`]) runs on this one
//! thread, one after another, in the order they were queued.
//!
//! Why not tokio's blocking pool: an append was handed to `spawn_blocking` while the thread of the
//! one before was still returning, so the pool woke another and two threads took turns. sled's
//! insert clones the leaf it links into (and rewrites it at every tenth link); the copies each
//! thread made in its own mimalloc heap were freed through the epoch collector by the other, so
//! neither heap reused its pages: mimalloc's slow path, page faults on fresh pages and cold
//! memcpys made the appends' sled work about twice as expensive, in runs where that happened
//! (docs/operations.md, "sled's two modes (round 7)").

use std::sync::mpsc;

use super::{Batch, FirstSync, Journal, Result};

/// What the append thread runs: one append and what to do with its outcome.
pub(super) struct Job {
    pub(super) journal: Journal,
    pub(super) batch: Batch,
    pub(super) first_sync: FirstSync,
    pub(super) done: Box<dyn FnOnce(Result<Vec<u64>>) + Send>,
}

/// Runs jobs until every sender is gone (the journal dropped).
pub(super) fn run(jobs: &mpsc::Receiver<Job>) {
    while let Ok(job) = jobs.recv() {
        let Job {
            journal,
            batch,
            first_sync,
            done,
        } = job;
        let appended = journal.append_with(batch, first_sync);
        // The job's clone goes before its caller hears back, so the journal's last clone is
        // never the one this thread holds once the caller can drop its own.
        drop(journal);
        done(appended);
    }
}
