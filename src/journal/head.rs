//! The head record: `herald.head`, a small file beside sled's, holding the last sequence number
//! known to be durable, so that a store that lost committed entries (its data file truncated or
//! damaged, and sled's recovery silently rolling back to an earlier state) is told apart from an
//! intact one at open.
//!
//! One fixed-width line, `herald-head 1 <seq, 20 digits> <crc32 of what precedes, 8 hex>\n`,
//! rewritten in place at offset 0 after each group-commit flush that moved the durable head. It is
//! a lower bound: written only after sled's `flush` (write + `fsync`) returned, so it may lag the
//! store (its own `fdatasync` runs at most once per [`SYNC_EVERY`] and at close) but never lead it.
//! The line is shorter than any disk sector, and overwriting blocks that are already allocated needs
//! no new space, so a write is neither torn nor refused by a full disk in practice; a record that
//! does not check out is reported, never trusted.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The record's file name in the journal directory (sled ignores names it does not know).
pub(super) const FILE: &str = "herald.head";

/// How often at most the record is `fdatasync`ed on the group-commit path. Losing the last second
/// of record updates in a power cut only makes the record lag (fewer losses detected), never lie.
pub(super) const SYNC_EVERY: Duration = Duration::from_secs(1);

const MAGIC: &str = "herald-head 1 ";

/// What the record file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Stored {
    /// No record file.
    Missing,
    /// A valid record: every event up to this sequence number was durable when it was written.
    Head(u64),
    /// The file exists but does not check out (wrong length, format or checksum).
    Unreadable(String),
}

pub(super) fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

fn encode(seq: u64) -> String {
    let body = format!("{MAGIC}{seq:020} ");
    let crc = crc32fast::hash(body.as_bytes());
    format!("{body}{crc:08x}\n")
}

fn decode(text: &str) -> Result<u64, String> {
    let line = text
        .strip_suffix('\n')
        .ok_or_else(|| "the line is incomplete".to_owned())?;
    let (body, crc) = line
        .rsplit_once(' ')
        .ok_or_else(|| "no checksum".to_owned())?;
    let body = format!("{body} ");
    let crc = u32::from_str_radix(crc, 16).map_err(|_| "the checksum is not hexadecimal")?;
    if crc32fast::hash(body.as_bytes()) != crc {
        return Err("the checksum does not match".to_owned());
    }
    body.strip_prefix(MAGIC)
        .and_then(|rest| rest.trim_end().parse::<u64>().ok())
        .ok_or_else(|| "not a herald head record".to_owned())
}

/// Reads the record of the journal in `dir`.
pub(super) fn read(dir: &Path) -> io::Result<Stored> {
    match std::fs::read(path(dir)) {
        Ok(bytes) => Ok(match std::str::from_utf8(&bytes) {
            Ok(text) => match decode(text) {
                Ok(seq) => Stored::Head(seq),
                Err(why) => Stored::Unreadable(why),
            },
            Err(_) => Stored::Unreadable("not text".to_owned()),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Stored::Missing),
        Err(e) => Err(e),
    }
}

/// Writes `seq` as the record, durably (file and directory synced): for a new journal, the
/// upgrade of an old one, and salvage.
pub(super) fn create(dir: &Path, seq: u64) -> io::Result<()> {
    let mut record = Record::open(dir, 0)?;
    record.write(seq)?;
    record.sync()?;
    // The file may be new: its directory entry must be durable too.
    File::open(dir)?.sync_all()
}

/// The open record file, kept by the flusher.
#[derive(Debug)]
pub(super) struct Record {
    file: File,
    written: u64,
    synced: Option<Instant>,
    dirty: bool,
    failing: bool,
}

impl Record {
    /// Opens the record of the journal in `dir`, which says `written` now.
    pub(super) fn open(dir: &Path, written: u64) -> io::Result<Self> {
        let mut opts = OpenOptions::new();
        opts.create(true).truncate(false).read(true).write(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let file = opts.open(path(dir))?;
        Ok(Self {
            file,
            written,
            synced: None,
            dirty: false,
            failing: false,
        })
    }

    /// Overwrites the record with `seq` (in place, one `pwrite`).
    pub(super) fn write(&mut self, seq: u64) -> io::Result<()> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt;
            self.file.write_all_at(encode(seq).as_bytes(), 0)?;
        }
        #[cfg(not(unix))]
        {
            use std::io::{Seek, Write};
            self.file.seek(io::SeekFrom::Start(0))?;
            self.file.write_all(encode(seq).as_bytes())?;
        }
        self.written = seq;
        self.dirty = true;
        Ok(())
    }

    pub(super) fn sync(&mut self) -> io::Result<()> {
        if self.dirty {
            self.file.sync_data()?;
            self.dirty = false;
        }
        self.synced = Some(Instant::now());
        Ok(())
    }

    /// After a flush made everything up to `seq` durable: records it when it moved, and syncs the
    /// record when the last sync is older than [`SYNC_EVERY`] (or `force`, at close). A failure
    /// only leaves the record behind (still a lower bound): it is logged once per streak, and
    /// the next flush tries again.
    pub(super) fn advance(&mut self, seq: u64, force: bool) {
        match self.try_advance(seq, force) {
            Ok(()) => self.failing = false,
            Err(error) => {
                if !self.failing {
                    tracing::warn!(
                        message = "Could not update the journal head record; it lags until a later flush succeeds.",
                        path = %FILE,
                        %error
                    );
                }
                self.failing = true;
            }
        }
    }

    fn try_advance(&mut self, seq: u64, force: bool) -> io::Result<()> {
        if seq > self.written {
            self.write(seq)?;
        }
        if force || self.synced.is_none_or(|at| at.elapsed() >= SYNC_EVERY) {
            self.sync()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_a_damaged_one_is_unreadable() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(read(tmp.path()).unwrap(), Stored::Missing);
        create(tmp.path(), 1_050).unwrap();
        assert_eq!(read(tmp.path()).unwrap(), Stored::Head(1_050));
        let mut r = Record::open(tmp.path(), 0).unwrap();
        r.advance(7, true);
        assert_eq!(read(tmp.path()).unwrap(), Stored::Head(7));
        // It never goes back.
        r.advance(3, true);
        assert_eq!(read(tmp.path()).unwrap(), Stored::Head(7));
        // Fixed width: a smaller number overwrites a larger one completely.
        assert_eq!(encode(7).len(), encode(u64::MAX).len());

        let text = std::fs::read_to_string(path(tmp.path())).unwrap();
        std::fs::write(path(tmp.path()), text.replace("07 ", "08 ")).unwrap();
        assert!(matches!(read(tmp.path()).unwrap(), Stored::Unreadable(_)));
        std::fs::write(path(tmp.path()), &text[..10]).unwrap();
        assert!(matches!(read(tmp.path()).unwrap(), Stored::Unreadable(_)));
    }
}
