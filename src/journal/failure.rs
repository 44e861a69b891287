//! Why the journal stopped taking writes: [`WriteFailure`], built from the first failed write
//! (a full disk, an I/O error) and kept for good.
//!
//! sled 0.34 keeps the first write error as a global error of the open store and answers every
//! later write with it, even once the disk has room again (ADR 0005); only a reopen clears it. So
//! the first failure is final for this process: the journal refuses writes from then on and
//! `herald run` exits 12 for a restart, which reopens the store and resumes from what was durable.

use std::error::Error;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// The first write the journal could not make, and what the operator should do about it.
#[derive(Debug, Clone)]
pub struct WriteFailure {
    path: PathBuf,
    op: &'static str,
    cause: String,
    kind: io::ErrorKind,
}

impl WriteFailure {
    /// A failure of `op` (`"flush"`, `"append"`…) on the store at `path`.
    pub(super) fn new(path: &Path, op: &'static str, error: &sled::Error) -> Self {
        let (cause, kind) = match error {
            sled::Error::Io(e) => (os_cause(e), e.kind()),
            other => (other.to_string(), io::ErrorKind::Other),
        };
        Self {
            path: path.to_owned(),
            op,
            cause,
            kind,
        }
    }

    /// The failure behind `error` if the volume ran out of space (or quota): what a journal that
    /// cannot even open on a full disk reports, so the message matches the one of a full disk at
    /// run time. `None` for anything else (a lock, a permission, a damaged store).
    pub fn out_of_space(path: &Path, error: &(dyn Error + 'static)) -> Option<Self> {
        let mut next = Some(error);
        while let Some(e) = next {
            let io = e
                .downcast_ref::<sled::Error>()
                .and_then(|s| match s {
                    sled::Error::Io(io) => Some(io),
                    _ => None,
                })
                .or_else(|| e.downcast_ref::<io::Error>());
            if let Some(io) = io
                && is_out_of_space(io.kind())
            {
                return Some(Self {
                    path: path.to_owned(),
                    op: "open",
                    cause: os_cause(io),
                    kind: io.kind(),
                });
            }
            next = e.source();
        }
        None
    }

    /// The journal directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The write that failed first: `open`, `flush`, `append`, `ack`, `register`, `dead-letter`,
    /// `retention`.
    pub fn op(&self) -> &'static str {
        self.op
    }

    /// What the OS (or sled) said, e.g. `No space left on device (os error 28)`.
    pub fn cause(&self) -> &str {
        &self.cause
    }

    /// What the operator can do about it.
    pub fn advice(&self) -> &'static str {
        if is_out_of_space(self.kind) {
            "free space on the volume"
        } else if self.kind == io::ErrorKind::ReadOnlyFilesystem {
            "make the volume writable again"
        } else {
            "check the volume and the kernel log (dmesg)"
        }
    }
}

impl fmt::Display for WriteFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot write to {}: {}", self.path.display(), self.cause)
    }
}

fn is_out_of_space(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

/// The OS's words for `e`. sled hands its global error out as a copy whose text is the `Debug` of
/// the original (`Os { code: 28, kind: StorageFull, message: "…" }`); the errno in it gives back
/// the plain `No space left on device (os error 28)`.
fn os_cause(e: &io::Error) -> String {
    if let Some(code) = e.raw_os_error() {
        return io::Error::from_raw_os_error(code).to_string();
    }
    let text = e.to_string();
    let code = text
        .split_once("code: ")
        .and_then(|(_, rest)| {
            rest.split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse::<i32>().ok())
        })
        .filter(|_| text.starts_with("Os {"));
    match code {
        Some(code) => io::Error::from_raw_os_error(code).to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cause_of_a_copied_sled_error_is_the_os_text() {
        let original = sled::Error::Io(io::Error::from_raw_os_error(28));
        // What sled's global error hands out: a clone, which re-wraps the io::Error by its Debug.
        let copy = original.clone();
        let f = WriteFailure::new(Path::new("/j"), "flush", &copy);
        assert_eq!(f.cause(), "No space left on device (os error 28)");
        assert_eq!(f.advice(), "free space on the volume");
        assert_eq!(
            f.to_string(),
            "cannot write to /j: No space left on device (os error 28)"
        );
    }

    #[test]
    fn out_of_space_is_found_in_a_chain_and_nothing_else_is() {
        let full = crate::journal::JournalError::OpenFailed {
            path: PathBuf::from("/j"),
            source: sled::Error::Io(io::Error::from_raw_os_error(28)),
        };
        let f = WriteFailure::out_of_space(Path::new("/j"), &full).unwrap();
        assert_eq!(f.op(), "open");
        assert_eq!(f.cause(), "No space left on device (os error 28)");
        let denied = crate::journal::JournalError::OpenFailed {
            path: PathBuf::from("/j"),
            source: sled::Error::Io(io::Error::from_raw_os_error(13)),
        };
        assert!(WriteFailure::out_of_space(Path::new("/j"), &denied).is_none());
    }

    /// What the rest of herald relies on once a write failed (the sled side is measured by
    /// tests/fault_disk.rs on a real full tmpfs): every later write is refused without touching
    /// the store, waiters learn it, and each refusal counts.
    #[tokio::test]
    async fn a_failed_write_is_final_and_everyone_waiting_learns_it() {
        use crate::journal::{Batch, Journal, JournalConfig, JournalError};

        let tmp = tempfile::tempdir().unwrap();
        let j = Journal::open(JournalConfig::new(tmp.path().join("journal"))).unwrap();
        let one = || Batch {
            stream: "s".into(),
            events: vec![b"{}".to_vec()],
            index: Vec::new(),
            checkpoint: Some("1".into()),
            listed: false,
        };
        j.register_sink("out", false).unwrap();
        j.append(one()).unwrap();
        j.durable(u64::MAX).await.unwrap();
        assert!(j.write_failure().is_none());
        assert_eq!(j.write_errors(), 0);
        let waiter = tokio::spawn({
            let j = j.clone();
            async move { j.write_failed().await }
        });

        // As the flusher records a failed flush.
        let full = sled::Error::Io(io::Error::from_raw_os_error(28));
        j.inner.flush.fail("flush", &full.clone());
        let failure = tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(failure.op(), "flush");
        assert_eq!(failure.path(), j.path());
        assert_eq!(j.write_errors(), 1);

        let refused = j.append(one()).unwrap_err();
        assert!(matches!(refused, JournalError::Unwritable(_)), "{refused}");
        assert_eq!(
            refused.to_string(),
            format!(
                "cannot write to {}: No space left on device (os error 28); free space on the \
                 volume; herald resumes from its last durable checkpoint on restart",
                j.path().display()
            )
        );
        assert!(matches!(j.ack("out", 1), Err(JournalError::Unwritable(_))));
        assert_eq!(j.head(), 1, "a refused append takes no sequence number");
        assert_eq!(j.write_errors(), 3);
        // A second failure keeps the first as the cause.
        j.inner.flush.fail("append", &full);
        assert_eq!(j.write_failure().unwrap().op(), "flush");
        assert!(matches!(
            j.durable(u64::MAX).await,
            Ok(()) | Err(JournalError::Unwritable(_))
        ));
        assert!(matches!(j.close().await, Err(JournalError::Unwritable(_))));
    }

    #[test]
    fn an_io_error_that_is_not_space_gets_other_advice() {
        let f = WriteFailure::new(
            Path::new("/j"),
            "flush",
            &sled::Error::Io(io::Error::from_raw_os_error(5)),
        );
        assert_eq!(f.cause(), "Input/output error (os error 5)");
        assert_eq!(f.advice(), "check the volume and the kernel log (dmesg)");
    }
}
