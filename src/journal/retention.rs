//! The retention loop: removes delivered events every few seconds. Entry point: [`run`]; what is
//! deletable is decided by [`Journal::apply_retention`].

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Journal;

/// How often delivered events are removed: often enough that a busy journal's delivered prefix
/// stays small, rarely enough that the range scan costs nothing next to appends.
pub const EVERY: Duration = Duration::from_secs(5);

/// Applies retention every `every` until `stop` fires. A failed pass is logged and tried again on
/// the next tick: retention only reclaims space, it never holds up watching or delivery.
pub async fn run(journal: Journal, every: Duration, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        match journal.apply_retention() {
            Ok(0) => {}
            Ok(n) => tracing::debug!(message = "Retention removed delivered events.", removed = n),
            Err(error) => tracing::warn!(message = "Journal retention failed.", %error),
        }
    }
}
