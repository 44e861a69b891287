//! The journal directory on disk: 0700, files 0600, one process at a time.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::error::{JournalError, Result};

/// How long `open` keeps trying a held lock before it reports `AlreadyOpen`.
///
/// A lock can outlive its holder for a moment: a `flock` belongs to the open file, and a child
/// process forked by another thread shares it until its `exec` closes it (seen in tests that
/// spawn processes). So a reopen right after a close waits instead of failing; a real second
/// herald is reported after this delay.
pub(super) const LOCK_WAIT: Duration = Duration::from_secs(1);
const LOCK_RETRY: Duration = Duration::from_millis(10);

/// Our own lock file, beside sled's files (sled ignores names it does not know).
pub(super) const LOCK_FILE: &str = "herald.lock";

/// Creates `dir` (and missing parents) 0700, and restricts an existing `dir` to 0700.
pub(super) fn private_dir(dir: &Path) -> Result<()> {
    let fail = |source| JournalError::CreateDirFailed {
        path: dir.to_owned(),
        source,
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(fail)?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(fail)
    }
    #[cfg(not(unix))]
    {
        fs::create_dir_all(dir).map_err(fail)
    }
}

/// Takes the exclusive lock that keeps a second herald off this journal.
///
/// sled 0.34 locks its `db` file too, but reports contention as `io::ErrorKind::Other` with a
/// formatted message; `File::try_lock` on a file of our own tells contention apart as data.
pub(super) fn lock(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    let mut opts = OpenOptions::new();
    opts.create(true).truncate(false).write(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let file = opts
        .open(&path)
        .map_err(|source| JournalError::LockFailed {
            path: path.clone(),
            source,
        })?;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(LOCK_RETRY);
            }
            Err(fs::TryLockError::WouldBlock) => {
                return Err(JournalError::AlreadyOpen {
                    path: dir.to_owned(),
                });
            }
            Err(fs::TryLockError::Error(source)) => {
                return Err(JournalError::LockFailed { path, source });
            }
        }
    }
}

/// Whether sled failed to open because its own `db` file lock is held: the only way to tell is
/// the message sled formats ("could not acquire lock on …").
pub(super) fn is_sled_lock_error(error: &sled::Error) -> bool {
    matches!(error, sled::Error::Io(e)
        if e.kind() == io::ErrorKind::Other && e.to_string().contains("could not acquire lock"))
}

/// Sets every file under `dir` to 0600 and every directory to 0700.
///
/// sled creates its files (`db`, `conf`, `snap.*`, `blobs/*`) with the process umask, and keeps
/// creating snapshots and blobs later, so this runs at open and again at each retention pass. The
/// 0700 directory already keeps other users out in between.
pub(super) fn restrict_tree(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mut stack: Vec<PathBuf> = vec![dir.to_owned()];
        while let Some(d) = stack.pop() {
            let entries = match fs::read_dir(&d) {
                Ok(entries) => entries,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(source) => return Err(JournalError::PermissionsFailed { path: d, source }),
            };
            for entry in entries {
                let entry = entry.map_err(|source| JournalError::PermissionsFailed {
                    path: d.clone(),
                    source,
                })?;
                let path = entry.path();
                // sled renames and removes snapshot temporaries concurrently.
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                let mode = if kind.is_dir() {
                    stack.push(path.clone());
                    0o700
                } else if kind.is_file() {
                    0o600
                } else {
                    continue;
                };
                match fs::set_permissions(&path, fs::Permissions::from_mode(mode)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(source) => return Err(JournalError::PermissionsFailed { path, source }),
                }
            }
        }
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Bytes allocated on disk for one file.
pub(super) fn file_bytes(meta: &fs::Metadata) -> u64 {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        meta.blocks().saturating_mul(512)
    }
    #[cfg(not(unix))]
    meta.len()
}

/// Bytes allocated on disk under `dir` (sled's own `size_on_disk` leaves out snapshots).
pub(super) fn allocated_bytes(dir: &Path) -> io::Result<u64> {
    let mut total = 0u64;
    let mut stack: Vec<PathBuf> = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d)? {
            let entry = entry?;
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total = total.saturating_add(file_bytes(&meta));
            }
        }
    }
    Ok(total)
}
