//! File descriptors: the open-files limit raised at start ([`raise_limit`]), and running out of
//! them noticed wherever it happens ([`note`]) so one rate-limited log line, `/readyz` and
//! `herald_open_files_exhausted_total` say so instead of every loop failing with its own vague error.
//!
//! Every watch holds a connection, so a limit below what the configured resources need starves
//! herald: connections, journal files and the admin endpoint's own accepts all fail with `EMFILE`.
//! Nothing here frees descriptors; the loops that fail retry with backoff and succeed once some
//! are closed or the limit is raised, and the admin endpoint keeps a reserve of its own
//! ([`crate::admin`]).

use std::io;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// `/readyz` reports the exhaustion while the last one is at most this old: long enough to be seen
/// between two probes, short enough that a healed herald turns ready again soon.
pub const RECENT: Duration = Duration::from_secs(10);

/// At most one log line per this long: every connection attempt of every watcher fails at once.
const LOG_EVERY: Duration = Duration::from_secs(30);

/// Operations that failed for want of a descriptor since start.
static EXHAUSTED: AtomicU64 = AtomicU64::new(0);

/// The last exhaustion: when, what was being done, the OS error; and when it was last logged.
static LAST: Mutex<Option<Last>> = Mutex::new(None);

struct Last {
    at: Instant,
    what: &'static str,
    error: String,
    logged: Option<Instant>,
}

/// Raises the soft open-files limit to the hard one, as most servers do: the soft default (often
/// 1,024) is far below what a herald watching hundreds of namespaces needs, and the hard limit is
/// what the operator allowed. Logs both figures at debug; a failure is logged and ignored.
pub fn raise_limit() {
    let Rlimit {
        current: soft,
        maximum: hard,
    } = getrlimit(Resource::Nofile);
    // An unlimited hard limit is not raised to: the kernel caps descriptors at `nr_open` anyway.
    if let (Some(soft), Some(hard)) = (soft, hard)
        && soft < hard
    {
        let new = Rlimit {
            current: Some(hard),
            maximum: Some(hard),
        };
        if let Err(error) = setrlimit(Resource::Nofile, new) {
            tracing::warn!(message = "Could not raise the open-files limit.", soft, hard, %error);
        }
    }
    tracing::debug!(
        message = "Open-files limit.",
        soft = limit().unwrap_or(u64::MAX),
        hard = hard.unwrap_or(u64::MAX),
        raised_from = soft.unwrap_or(u64::MAX),
    );
}

/// The current soft open-files limit (`None`: unlimited). Read each time: an operator may raise a
/// running process's limit (`prlimit --pid`).
pub fn limit() -> Option<u64> {
    getrlimit(Resource::Nofile).current
}

/// Whether `error` means no descriptor was available: `EMFILE` (this process's limit) or `ENFILE`
/// (the system's).
pub fn is_exhaustion(error: &io::Error) -> bool {
    Errno::from_io_error(error).is_some_and(|e| e == Errno::MFILE || e == Errno::NFILE)
}

/// The exhaustion among `error`'s causes, if it has one (a connect error several layers down).
pub fn exhaustion_in<'e>(error: &'e (dyn std::error::Error + 'static)) -> Option<&'e io::Error> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<io::Error>().filter(|io| is_exhaustion(io)) {
            return Some(io);
        }
        next = e.source();
    }
    None
}

/// Records that `what` failed for want of a descriptor: counted, shown by `/readyz` for a while,
/// and logged with its cause and the limit at most once per 30 s.
pub fn note(what: &'static str, error: &io::Error) {
    EXHAUSTED.fetch_add(1, Ordering::Relaxed);
    let now = Instant::now();
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let logged = last.as_ref().and_then(|l| l.logged);
    let log = logged.is_none_or(|at| now.duration_since(at) >= LOG_EVERY);
    if log {
        tracing::error!(
            message = "Out of file descriptors: herald cannot open connections or files until some close. \
                       Raise the open-files limit (ulimit -n, LimitNOFILE, the container runtime's nofile) \
                       or watch fewer namespaces; herald retries and recovers by itself.",
            limit = limit().map_or_else(|| "unlimited".to_owned(), |l| l.to_string()),
            during = what,
            %error,
            failures = EXHAUSTED.load(Ordering::Relaxed),
        );
    }
    *last = Some(Last {
        at: now,
        what,
        error: error.to_string(),
        logged: if log { Some(now) } else { logged },
    });
}

/// How many operations failed for want of a descriptor since start.
pub fn exhausted_total() -> u64 {
    EXHAUSTED.load(Ordering::Relaxed)
}

/// What `/readyz` says while descriptors ran out within [`RECENT`]:
/// `file descriptors exhausted (limit 64): too many open files, last while connecting 1s ago`.
pub fn recent_exhaustion() -> Option<String> {
    let last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let l = last.as_ref()?;
    let ago = l.at.elapsed();
    (ago <= RECENT).then(|| {
        format!(
            "file descriptors exhausted (limit {}): {}, last while {} {}s ago; raise the \
             open-files limit or watch fewer namespaces",
            limit().map_or_else(|| "unlimited".to_owned(), |l| l.to_string()),
            l.error,
            l.what,
            ago.as_secs()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emfile_and_enfile_are_exhaustion_and_other_errors_are_not() {
        assert!(is_exhaustion(&io::Error::from_raw_os_error(
            Errno::MFILE.raw_os_error()
        )));
        assert!(is_exhaustion(&io::Error::from_raw_os_error(
            Errno::NFILE.raw_os_error()
        )));
        assert!(!is_exhaustion(&io::Error::from(
            io::ErrorKind::ConnectionRefused
        )));
        assert!(!is_exhaustion(&io::Error::other("too many open files")));
    }

    #[test]
    fn an_exhaustion_is_found_among_the_causes() {
        #[derive(Debug, thiserror::Error)]
        #[error("connecting failed")]
        struct Outer(#[source] io::Error);
        let outer = Outer(io::Error::from_raw_os_error(Errno::MFILE.raw_os_error()));
        assert!(exhaustion_in(&outer).is_some());
        let other = Outer(io::Error::from(io::ErrorKind::ConnectionRefused));
        assert!(exhaustion_in(&other).is_none());
    }

    #[test]
    fn a_noted_exhaustion_is_counted_and_reported_with_the_limit() {
        let before = exhausted_total();
        note(
            "testing",
            &io::Error::from_raw_os_error(Errno::MFILE.raw_os_error()),
        );
        assert_eq!(exhausted_total(), before + 1);
        let said = recent_exhaustion().unwrap();
        assert!(
            said.starts_with("file descriptors exhausted (limit "),
            "{said}"
        );
        assert!(said.contains("while testing"), "{said}");
    }
}
