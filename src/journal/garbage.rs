//! sled's deferred frees, handed over for collection. Entry points: [`release`] after work on the
//! store, [`drain`] when the journal is idle.
//!
//! sled 0.34 frees what it replaces through crossbeam's epoch garbage: the previous version of a
//! node at every insert, a node the cache evicts (and with it the values only that node still
//! holds), each sealed 512 KiB log buffer once it is written. Each thread gathers what it defers
//! in a bag of 64; only a full bag goes to the global queue, where it is freed once every thread
//! has moved on by two epochs, and only when some thread next pins. A thread that stops touching
//! the store (a tokio worker after a relist, the flusher at idle) keeps a part-full bag for good,
//! and a busy one holds up to 64 log buffers (32 MiB) before its bag leaves it. At 100,000 objects
//! that was 13 MiB of log buffers and most of the evicted nodes still allocated 3 s after the
//! initial sync (heaptrack, docs/operations.md "What is live at 100,000 objects").

/// Sends the calling thread's deferred frees to the global queue and frees what has expired there
/// (up to 8 bags). About a microsecond when there is nothing to free.
pub(super) fn release() {
    crossbeam_epoch::pin().flush();
}

/// Rounds of [`drain`]: each advances the epoch by one when no thread is pinned in an older one
/// and frees up to 8 expired bags, so a few rounds empty a queue that no thread collects any more.
const DRAIN_ROUNDS: usize = 32;

/// Frees what the store's threads left deferred, as far as the epoch allows (retention's pass, so
/// every few seconds, whether or not anything is appended).
pub(super) fn drain() {
    for _ in 0..DRAIN_ROUNDS {
        release();
    }
}
