//! The journal's append thread: every queued append ([`Journal::append_queued`]) runs on one
//! thread, one after another, in the order they were queued; the thread ends after [`IDLE`]
//! without work and the next append starts another.
//!
//! Why not tokio's blocking pool: an append was handed to `spawn_blocking` while the thread of the
//! one before was still returning, so the pool woke another and two threads took turns. sled
//! allocates a fresh 512 KiB io buffer each time its log segment fills, and copies the leaf it
//! links into; with two threads these came from two mimalloc heaps, each reusing what it freed
//! half as often, so mimalloc had given the memory back to the kernel (10 ms after a free) before
//! it was asked for again, and the append that wrote into the new buffer took its page faults.
//! How many depended on timing: 20,695–79,382 per 60,000-change catch-up of one build
//! (docs/operations.md, "sled's two modes (round 7)").
//!
//! Why it ends when idle: mimalloc purges a thread's freed memory, and takes back what other
//! threads freed of it, only when that thread next allocates or exits; a thread parked for good
//! would keep the last burst's memory resident.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::error::JournalError;
use herald_sink_core::Layout;

use super::{Batch, FirstSync, Journal, Result, lock};

/// How long the append thread waits for work before it ends.
pub(super) const IDLE: Duration = Duration::from_secs(1);

/// What the append thread runs: one append and what to do with its outcome.
pub(super) struct Job {
    pub(super) journal: Journal,
    pub(super) batch: Batch,
    pub(super) first_sync: FirstSync,
    pub(super) layouts: Vec<Option<Layout>>,
    pub(super) done: Box<dyn FnOnce(Result<Vec<u64>>) + Send>,
}

/// The way to the append thread, when one runs.
#[derive(Default)]
pub(super) struct Queue(Arc<Mutex<Option<mpsc::Sender<Job>>>>);

impl Queue {
    /// Whether an append thread runs (or is just ending): for tests, which wait for it to end.
    #[cfg(test)]
    pub(super) fn running(&self) -> bool {
        lock(&self.0).is_some()
    }

    /// Queues `job` behind the ones before it, starting the thread if none runs; if it cannot be
    /// started, the job's `done` gets the error.
    pub(super) fn push(&self, job: Job) {
        let mut slot = lock(&self.0);
        let job = match slot.as_ref() {
            Some(tx) => match tx.send(job) {
                Ok(()) => return,
                // The thread is gone (it panicked): the job comes back and goes to a new one.
                Err(mpsc::SendError(job)) => job,
            },
            None => job,
        };
        let (tx, jobs) = mpsc::channel();
        let own = Arc::clone(&self.0);
        let started = std::thread::Builder::new()
            .name("journal-append".to_owned())
            .spawn(move || run(&jobs, &own));
        match started {
            Ok(_) => {
                // The receiver lives as long as the thread, which has not looked at it yet.
                let _ = tx.send(job);
                *slot = Some(tx);
            }
            Err(source) => {
                *slot = None;
                drop(slot);
                (job.done)(Err(JournalError::AppenderStartFailed { source }));
            }
        }
    }
}

/// Runs jobs until none came for [`IDLE`]; it then ends, unless one arrived meanwhile (checked
/// with the queue locked, so no job is left behind in a channel nobody reads).
fn run(jobs: &mpsc::Receiver<Job>, queue: &Mutex<Option<mpsc::Sender<Job>>>) {
    loop {
        let job = match jobs.recv_timeout(IDLE) {
            Ok(job) => job,
            Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {
                let mut slot = lock(queue);
                match jobs.try_recv() {
                    Ok(job) => job,
                    Err(_) => {
                        *slot = None;
                        return;
                    }
                }
            }
        };
        let Job {
            journal,
            batch,
            first_sync,
            layouts,
            done,
        } = job;
        let appended = journal.append_vouched(batch, first_sync, layouts);
        // The job's clone goes before its caller hears back, so the journal's last clone is
        // never the one this thread holds once the caller can drop its own.
        drop(journal);
        done(appended);
    }
}
