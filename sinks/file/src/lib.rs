//! The file sink: each CloudEvent as one line of structured JSON (`application/cloudevents+json`), to a
//! file or stdout, with an fsync policy and size-based rotation. Entry point: [`FileConfig`], whose
//! `build` opens a [`FileSink`].
//!
//! `Ok` means written and flushed to the OS, and with `fsync: always` also synced to disk.
//!
//! `fsync: interval` syncs on a short-lived thread of its own, so a slow `fdatasync` (tens of
//! milliseconds on a disk busy with other writers) holds up neither the next batch nor the runtime
//! worker that wrote this one: inline, it was a once-a-second stall of every event behind it
//! (docs/operations.md, "Latency tail at 500 changes/s"). A sync that fails is reported by the
//! next batch, which is refused unwritten (retried), and the sync at close runs whatever the
//! background one did.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use herald_sink_core::sink::{Envelope, ErrorContext, Outcome, Reason, Sink, SinkError};

mod config;

pub use config::{FileConfig, Fsync, Rotate, STDOUT_PATH};

enum Output {
    Stdout,
    File {
        path: PathBuf,
        file: File,
        size: u64,
        synced_at: Instant,
        dirty: bool,
    },
}

/// The file sink.
pub struct FileSink {
    config: FileConfig,
    out: Mutex<Output>,
    /// The background sync of `fsync: interval` (see the module doc).
    background: Arc<Background>,
}

/// The state of `fsync: interval`'s background sync.
#[derive(Debug, Default)]
struct Background {
    /// The last background sync failed: the next batch reports it.
    failed: Mutex<Option<io::Error>>,
    /// The running (or last) sync's thread: at most one runs at a time, and the final sync waits
    /// for it, since both handles share one open file and a writeback error is reported to only
    /// one of them.
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Background {
    /// Syncs `file` (a handle on the sink's open file) on a thread of its own, unless a sync is
    /// running already (it is then the next due batch's turn).
    fn start(self: &Arc<Self>, file: &File) -> io::Result<bool> {
        let mut thread = self.thread.lock().unwrap_or_else(PoisonError::into_inner);
        if thread.as_ref().is_some_and(|t| !t.is_finished()) {
            return Ok(false);
        }
        let file = file.try_clone()?;
        let me = Arc::clone(self);
        *thread = Some(
            std::thread::Builder::new()
                .name("file-sink-sync".to_owned())
                .spawn(move || {
                    if let Err(e) = file.sync_data() {
                        *me.failed.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
                    }
                })?,
        );
        Ok(true)
    }

    /// Waits for a background sync still running, so its outcome is in `failed`.
    fn wait(&self) {
        let handle = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            // A panicking sync thread has stored nothing; the final sync below covers its data.
            let _ = handle.join();
        }
    }

    fn take_failure(&self) -> Option<io::Error> {
        self.failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

impl std::fmt::Debug for FileSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSink")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn open_append(path: &Path) -> io::Result<(File, u64)> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let size = file.metadata()?.len();
    Ok((file, size))
}

fn rotated(path: &Path, n: usize) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

impl FileSink {
    /// Opens (creating) the file, or takes stdout.
    fn open(config: FileConfig) -> Result<Self, SinkError> {
        let out = if config.is_stdout() {
            Output::Stdout
        } else {
            let path = &config.path;
            let (file, size) = open_append(path).map_err(|e| SinkError::Unavailable {
                reason: format!("cannot open {}: {e}", path.display()),
            })?;
            Output::File {
                path: path.clone(),
                file,
                size,
                synced_at: Instant::now(),
                dirty: false,
            }
        };
        Ok(Self {
            config,
            out: Mutex::new(out),
            background: Arc::default(),
        })
    }

    /// Writes `parts` one after the other, as one write where the OS takes it whole.
    fn write_batch(&self, parts: &mut [IoSlice<'_>]) -> io::Result<()> {
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        let mut out = self
            .out
            .lock()
            .map_err(|_| io::Error::other("file sink lock poisoned"))?;
        match &mut *out {
            Output::Stdout => {
                let mut stdout = io::stdout().lock();
                write_all_vectored(&mut stdout, parts)?;
                stdout.flush()
            }
            Output::File {
                path,
                file,
                size,
                synced_at,
                dirty,
            } => {
                if let Some(e) = self.background.take_failure() {
                    // The failed sync's data may be gone: the retried batch syncs at once.
                    if let Some(due) = Instant::now().checked_sub(self.config.fsync_interval) {
                        *synced_at = due;
                    }
                    return Err(e);
                }
                if let Some(r) = &self.config.rotate
                    && *size > 0
                    && *size + len > r.max_size
                {
                    file.sync_all()?;
                    rotate(path, r.max_files)?;
                    let (f, s) = open_append(path)?;
                    *file = f;
                    *size = s;
                }
                write_all_vectored(file, parts)?;
                *size += len;
                *dirty = true;
                match self.config.fsync {
                    Fsync::Always => {
                        file.sync_data()?;
                        *synced_at = Instant::now();
                        *dirty = false;
                    }
                    Fsync::Interval if synced_at.elapsed() >= self.config.fsync_interval => {
                        if self.background.start(file)? {
                            *synced_at = Instant::now();
                        }
                    }
                    Fsync::Interval | Fsync::Never => {}
                }
                Ok(())
            }
        }
    }

    /// Syncs pending writes (at stop, through [`Sink::close`]).
    pub fn sync(&self) -> io::Result<()> {
        let mut out = self
            .out
            .lock()
            .map_err(|_| io::Error::other("file sink lock poisoned"))?;
        if let Output::File {
            file,
            synced_at,
            dirty,
            ..
        } = &mut *out
            // `dirty` stays set for `fsync: interval`: a background sync may still be running or
            // may have failed, and this one must cover everything written.
            && *dirty
        {
            self.background.wait();
            let earlier = self.background.take_failure();
            file.sync_data()?;
            *synced_at = Instant::now();
            *dirty = false;
            if let Some(e) = earlier {
                return Err(e);
            }
        }
        Ok(())
    }
}

/// `Write::write_all_vectored`, which is not stable yet: writes every part, in order, resuming
/// after a short write.
fn write_all_vectored(out: &mut impl Write, mut parts: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut parts, 0);
    while !parts.is_empty() {
        match out.write_vectored(parts) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut parts, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Shifts `path.(n-1)` → `path.n` … `path` → `path.1`, dropping what falls off the end.
fn rotate(path: &Path, max_files: usize) -> io::Result<()> {
    if max_files == 0 {
        return std::fs::remove_file(path);
    }
    let last = rotated(path, max_files);
    if last.exists() {
        std::fs::remove_file(&last)?;
    }
    for n in (1..max_files).rev() {
        let from = rotated(path, n);
        if from.exists() {
            std::fs::rename(&from, rotated(path, n + 1))?;
        }
    }
    std::fs::rename(path, rotated(path, 1))
}

impl Sink for FileSink {
    const NAME: &'static str = "file";
    // `send` writes the stored bytes as they are; dead letters and anything else that reads
    // attributes has them decoded on first use.
    const READS_ATTRIBUTES: bool = false;

    async fn healthcheck(&self) -> Result<(), SinkError> {
        self.write_batch(&mut [])
            .map_err(|e| SinkError::Unavailable {
                reason: e.to_string(),
            })
    }

    async fn send(&self, batch: &[Envelope]) -> Vec<Outcome> {
        // The journaled bytes as they are, the file holds what the journal stored, handed to
        // the OS where they lie: copying a batch into one buffer first was a fresh allocation
        // of a few hundred KiB (page faults included) per call.
        let lines: Vec<_> = batch.iter().map(|e| e.event.structured_json()).collect();
        let mut parts = Vec::with_capacity(lines.len() * 2);
        for line in &lines {
            parts.push(IoSlice::new(line));
            parts.push(IoSlice::new(b"\n"));
        }
        self.write_outcomes(&mut parts, batch.len())
    }

    /// One JSON line per letter, `{"error": {...}, "event": {...}}`; `error` is the
    /// [`ErrorContext`]'s serde form, the keys of the journal's own dead-letter records.
    async fn send_dead_letters(
        &self,
        letters: &[Envelope],
        errors: &[ErrorContext],
    ) -> Vec<Outcome> {
        let mut bytes = Vec::with_capacity(letters.len() * 768);
        for (i, envelope) in letters.iter().enumerate() {
            let event: serde_json::Value =
                serde_json::from_slice(&envelope.event.to_structured_json())
                    .unwrap_or(serde_json::Value::Null);
            let error = errors.get(i).map(ErrorContext::to_json);
            let line = serde_json::json!({ "error": error, "event": event });
            bytes.extend_from_slice(line.to_string().as_bytes());
            bytes.push(b'\n');
        }
        self.write_outcomes(&mut [IoSlice::new(&bytes)], letters.len())
    }

    /// Syncs what `fsync: interval` or `never` left unsynced.
    async fn close(&self) -> Result<(), SinkError> {
        self.sync().map_err(|e| SinkError::Unavailable {
            reason: format!("final sync failed: {e}"),
        })
    }
}

impl FileSink {
    fn write_outcomes(&self, parts: &mut [IoSlice<'_>], n: usize) -> Vec<Outcome> {
        match self.write_batch(parts) {
            Ok(()) => vec![Outcome::Ok; n],
            // A full disk or a vanished directory may heal: retry, never drop.
            Err(e) => Outcome::all(
                n,
                Outcome::Retry {
                    after: None,
                    reason: Reason::new("io", e.to_string()),
                },
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_sink_core::event::CloudEvent;

    fn envelope(seq: u64) -> Envelope {
        let event = CloudEvent::new(
            format!("u:{seq}:created"),
            "k8s://c/g/p",
            "dev.herald.resource.created",
        )
        .data(serde_json::json!({"op": "created", "pad": "x".repeat(100)}));
        Envelope::new(seq, event)
    }

    #[tokio::test]
    async fn writes_one_structured_json_line_per_event() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/events.jsonl");
        let sink = FileSink::open(FileConfig {
            fsync: Fsync::Always,
            ..FileConfig::new(&path)
        })
        .unwrap();
        sink.healthcheck().await.unwrap();
        let outcomes = sink.send(&[envelope(1), envelope(2)]).await;
        assert!(outcomes.iter().all(|o| matches!(o, Outcome::Ok)));
        let text = std::fs::read_to_string(&path).unwrap();
        let ids: Vec<String> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(ids, ["u:1:created", "u:2:created"]);
    }

    #[tokio::test]
    async fn a_batch_larger_than_one_vectored_write_is_written_whole_and_in_order() {
        // Two parts per event: 700 events are more parts than Linux takes in one `writev`
        // (1,024), so the write resumes where the first one stopped.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let sink = FileSink::open(FileConfig {
            fsync: Fsync::Never,
            ..FileConfig::new(&path)
        })
        .unwrap();
        let batch: Vec<Envelope> = (1..=700).map(envelope).collect();
        let outcomes = sink.send(&batch).await;
        assert!(outcomes.iter().all(|o| matches!(o, Outcome::Ok)));
        let text = std::fs::read_to_string(&path).unwrap();
        let ids: Vec<String> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].to_string())
            .collect();
        let want: Vec<String> = (1..=700)
            .map(|seq| format!("\"u:{seq}:created\""))
            .collect();
        assert_eq!(ids, want);
    }

    #[tokio::test]
    async fn rotates_by_size_and_keeps_max_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let rotate = Rotate {
            max_size: 600,
            max_files: 2,
        };
        let sink = FileSink::open(FileConfig {
            fsync: Fsync::Never,
            rotate: Some(rotate),
            ..FileConfig::new(&path)
        })
        .unwrap();
        for seq in 0..10 {
            sink.send(&[envelope(seq), envelope(seq + 100)]).await;
        }
        sink.sync().unwrap();
        assert!(path.exists() && rotated(&path, 1).exists() && rotated(&path, 2).exists());
        assert!(
            !rotated(&path, 3).exists(),
            "only max_files rotated files are kept"
        );
        assert!(std::fs::metadata(&path).unwrap().len() <= 600);
    }

    #[tokio::test]
    async fn a_write_failure_asks_for_a_retry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let sink = FileSink::open(FileConfig {
            fsync: Fsync::Never,
            rotate: Some(Rotate {
                max_size: 1,
                max_files: 1,
            }),
            ..FileConfig::new(&path)
        })
        .unwrap();
        sink.send(&[envelope(1)]).await;
        // The directory disappears: rotation cannot rename, the batch must come back as Retry.
        std::fs::remove_dir_all(dir.path()).unwrap();
        let outcomes = sink.send(&[envelope(2)]).await;
        assert!(matches!(outcomes[0], Outcome::Retry { .. }), "{outcomes:?}");
    }
}
