//! The journal's error type: one variant per operation that can fail.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use super::WriteFailure;

/// `Result` with [`JournalError`] as the default error.
pub type Result<T, E = JournalError> = std::result::Result<T, E>;

/// Why a journal operation failed.
///
/// Startup failures (`CreateDirFailed`, `AlreadyOpen`, `OpenFailed`, `UnsupportedSchema`…) are
/// meant to reach `main` and become an exit code; failures of `append`, `ack` or `durable` inside a
/// running loop become an internal event and a retry.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// An appended event too large for a segment's 32-bit length (4 GiB).
    #[error("an event of {bytes} bytes is too large for the journal (at most 4 GiB)")]
    EventTooLarge {
        /// The event's size.
        bytes: usize,
    },
    /// Storing, reading or removing a dead letter or a replay entry failed.
    #[error("dead-letter queue operation for sink {sink:?} failed")]
    DeadLetterFailed {
        /// The sink.
        sink: String,
        /// The store's error.
        #[source]
        source: sled::Error,
    },
    /// The journal directory could not be created or restricted to 0700.
    #[error("failed to create the journal directory {path}")]
    CreateDirFailed {
        /// The journal directory.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: io::Error,
    },
    /// Another `Journal` (in this process or another one) holds the directory.
    #[error(
        "the journal at {path} is already open in this or another process (only one herald per journal directory)"
    )]
    AlreadyOpen {
        /// The journal directory.
        path: PathBuf,
    },
    /// The lock file could not be created or locked for a reason other than contention.
    #[error("failed to lock the journal at {path}")]
    LockFailed {
        /// The lock file.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: io::Error,
    },
    /// sled could not open (or recover) the store.
    #[error("failed to open the journal store at {path}")]
    OpenFailed {
        /// The journal directory.
        path: PathBuf,
        /// What sled said.
        #[source]
        source: sled::Error,
    },
    /// The store was written by a herald with another journal layout (a newer one, or not herald).
    #[error(
        "the journal at {path} has schema version {found:?}; this herald reads versions 1 to {supported} (older ones are upgraded when opened): run the herald that wrote it, or give this one another journal directory"
    )]
    UnsupportedSchema {
        /// The journal directory.
        path: PathBuf,
        /// The stored `meta/schema_version` (`None` when a non-empty store has none).
        found: Option<String>,
        /// The version this build understands.
        supported: u32,
    },
    /// The integrity check at open found the store damaged: sled panicked or stalled reading it,
    /// entries do not decode, or committed entries are gone (the head record is ahead of the store).
    #[error(
        "the journal at {path} is damaged: {problems}. `herald journal verify --journal {path}` reports what is readable; `herald journal salvage --journal {path}` moves it aside and rebuilds it from what can be read"
    )]
    Damaged {
        /// The journal directory.
        path: PathBuf,
        /// What is wrong (the first problems of the report).
        problems: String,
    },
    /// There is no journal directory at the path.
    #[error("there is no journal at {path}")]
    NotFound {
        /// The journal directory.
        path: PathBuf,
    },
    /// Writing the head record (`herald.head`) failed.
    #[error("failed to write the journal head record {path}")]
    HeadRecordFailed {
        /// The record file.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: io::Error,
    },
    /// Moving a damaged journal aside or building its replacement failed.
    #[error("failed to salvage the journal at {path}: {reason}")]
    SalvageFailed {
        /// The journal directory.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// Compacting the journal failed; see the reason for whether it is unchanged.
    #[error("failed to compact the journal at {path}: {reason}")]
    CompactFailed {
        /// The journal directory.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// Folding the index updates a crash left (`u/` keys) into the object index at open failed.
    #[error("failed to fold the object index's pending updates into the journal at {path}")]
    IndexFoldFailed {
        /// The journal directory.
        path: PathBuf,
        /// What sled said.
        #[source]
        source: sled::Error,
    },
    /// Reading or writing the journal's own metadata (schema version, head, cursors) at open failed.
    #[error("failed to read or write the journal metadata at {path}")]
    MetaFailed {
        /// The journal directory.
        path: PathBuf,
        /// What sled said.
        #[source]
        source: sled::Error,
    },
    /// Restricting the permissions of the journal files to 0600 failed.
    #[error("failed to restrict the permissions of {path}")]
    PermissionsFailed {
        /// The file or directory.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: io::Error,
    },
    /// The background flusher thread could not be started.
    #[error("failed to start the journal flusher")]
    FlusherStartFailed {
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// The journal's append thread could not be started.
    #[error("failed to start the journal's append thread")]
    AppenderStartFailed {
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// The thread that opens and checks the store could not be started.
    #[error("failed to start the journal reader thread")]
    ReaderStartFailed {
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// A stream or sink name is empty or contains a NUL byte (the key separator).
    #[error("invalid {what} name {name:?}: it must be non-empty and contain no NUL byte")]
    InvalidName {
        /// `"stream"` or `"sink"`.
        what: &'static str,
        /// The rejected name.
        name: String,
    },
    /// The journal was closed; nothing more can be written.
    #[error("the journal is closed")]
    Closed,
    /// The final flush of [`close`](super::Journal::close) failed; the events appended since the
    /// last good flush are not durable.
    #[error("failed to flush the journal to disk")]
    FlushFailed {
        /// What sled said.
        #[source]
        source: sled::Error,
    },
    /// The flusher thread ended abnormally.
    #[error("the journal flusher thread panicked")]
    FlusherPanicked,
    /// Reading whether a stream's first sync is under way (its `f/` marker) failed.
    #[error("failed to read the first-sync marker of stream {stream}")]
    FirstSyncReadFailed {
        /// The watch stream.
        stream: String,
        /// What sled said.
        #[source]
        source: sled::Error,
    },
    /// Reading a stream's checkpoint failed.
    #[error("failed to read the checkpoint of stream {stream}")]
    CheckpointReadFailed {
        /// The watch stream.
        stream: String,
        /// What sled said.
        #[source]
        source: sled::Error,
    },
    /// Reading the object index of a stream failed.
    #[error("failed to read the object index of stream {stream}")]
    IndexReadFailed {
        /// The watch stream.
        stream: String,
        /// What sled said.
        #[source]
        source: sled::Error,
    },
    /// Creating or removing a sink cursor failed.
    #[error("failed to register or remove the cursor of sink {sink}")]
    SinkRegisterFailed {
        /// The sink.
        sink: String,
        /// What sled said.
        #[source]
        source: sled::Error,
    },
    /// The sink has no cursor: `register_sink` was not called (or the sink was removed).
    #[error("sink {sink} is not registered with the journal")]
    UnknownSink {
        /// The sink.
        sink: String,
    },
    /// Reading events for a sink failed.
    #[error("failed to read journal events for sink {sink}")]
    ReadFailed {
        /// The sink.
        sink: String,
        /// What sled said.
        #[source]
        source: sled::Error,
    },
    /// A sink acknowledged an event it cannot have read: a bug in the delivery driver.
    #[error(
        "sink {sink} acknowledged up to {upto} but only events up to {durable} are durable and readable"
    )]
    AckBeyondDurable {
        /// The sink.
        sink: String,
        /// The acknowledged sequence number.
        upto: u64,
        /// The durable sequence number at the time.
        durable: u64,
    },
    /// Deleting events during retention failed.
    #[error("failed to apply journal retention")]
    RetentionFailed {
        /// What sled said.
        #[source]
        source: sled::Error,
    },
    /// sled could not report its size on disk.
    #[error("failed to measure the journal size on disk")]
    SizeFailed {
        /// What the file system said.
        #[source]
        source: io::Error,
    },
    /// A write failed (a full disk, an I/O error) and sled refuses every write after it until the
    /// store is reopened: nothing more is journaled or acknowledged in this process. What was
    /// durable is kept; a restart resumes from it.
    #[error(
        "{0}; {advice}; herald resumes from its last durable checkpoint on restart",
        advice = .0.advice()
    )]
    Unwritable(Arc<WriteFailure>),
    /// A stored entry does not have the shape this schema version writes.
    #[error("corrupt journal entry {key}: {reason}")]
    CorruptEntry {
        /// The key, printable.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}
