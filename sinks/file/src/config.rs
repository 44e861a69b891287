//! `type: file` settings, as users write them; start at [`FileConfig`].

use std::path::PathBuf;
use std::time::Duration;

use herald_sink_core::config::{
    DeliveryKeys, DeliveryOptions, MAX_TIMEOUT, Problems, SinkConfig, deserialize_duration,
    deserialize_size,
};
use herald_sink_core::sink::SinkError;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::FileSink;

/// The `path` of a file sink that writes to standard output.
pub const STDOUT_PATH: &str = "-";

/// `type: file` settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FileConfig {
    /// File the events are appended to, one JSON CloudEvent per line; `-` writes to stdout.
    /// `${VAR}` is expanded; relative paths are relative to herald's working directory. Required.
    /// Example: `/var/lib/herald/events.jsonl`.
    pub path: PathBuf,
    /// When written events are fsynced: `always` (before each acknowledgement), `interval`
    /// (every `fsyncInterval`; a crash may lose that window, and the journal re-sends it) or
    /// `never` (left to the OS). Ignored for stdout. Default `interval`. Example: `always`.
    #[serde(default)]
    pub fsync: Fsync,
    /// How often `fsync: interval` syncs; a duration with a unit, greater than zero and at most
    /// `1h` (a crash may lose, and the journal re-send, up to this window). Default `1s`.
    /// Example: `250ms`.
    #[serde(
        default = "default_fsync_interval",
        deserialize_with = "deserialize_duration"
    )]
    #[schemars(with = "String", extend("default" = "1s"))]
    pub fsync_interval: Duration,
    /// Size-based rotation. Default: none (the file grows without bound). Not allowed with
    /// stdout. Example: `{maxSize: 64MiB, maxFiles: 5}`.
    #[serde(default)]
    pub rotate: Option<Rotate>,
}

impl FileConfig {
    /// Appending to `path` (`-` for stdout) with every default: `fsync: interval` every second,
    /// no rotation.
    #[must_use]
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            fsync: Fsync::default(),
            fsync_interval: default_fsync_interval(),
            rotate: None,
        }
    }

    /// Whether `path` is `-`, standard output.
    #[must_use]
    pub fn is_stdout(&self) -> bool {
        self.path.as_os_str() == STDOUT_PATH
    }
}

fn default_fsync_interval() -> Duration {
    Duration::from_secs(1)
}

/// `fsync` of a file sink.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Fsync {
    /// fsync before acknowledging each batch.
    Always,
    /// fsync every `fsyncInterval`.
    #[default]
    Interval,
    /// Never fsync; the OS writes back when it likes.
    Never,
}

/// `rotate` of a file sink: when the file reaches `maxSize` it is renamed to `<path>.1` (older
/// ones shift to `.2` …) and a new file is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Rotate {
    /// Size at which the file is rotated, in bytes; a size with a unit (`B`, `KB`, `MB`, `GB`,
    /// `KiB`, `MiB`, `GiB`, `Ki`, `Mi`, `Gi` …), greater than zero and at most `1TiB` (a larger
    /// file is never rotated in practice; omit `rotate` for that). Required. Example: `64MiB`.
    #[serde(deserialize_with = "deserialize_size")]
    #[schemars(with = "String")]
    pub max_size: u64,
    /// How many rotated files (`<path>.1` … `<path>.N`) are kept besides the active one; older
    /// ones are deleted. At least 1. Default `5`. Example: `10`.
    #[serde(default = "default_max_files")]
    pub max_files: usize,
}

/// The largest `rotate.maxSize`: 1 TiB.
const MAX_ROTATE_SIZE: u64 = 1 << 40;

fn default_max_files() -> usize {
    5
}

impl SinkConfig for FileConfig {
    type Sink = FileSink;

    const DELIVERY: DeliveryKeys = DeliveryKeys::Start;

    fn paths_mut(&mut self) -> Vec<(&'static str, &mut PathBuf)> {
        vec![("path", &mut self.path)]
    }

    fn validate(&self, problems: &mut Problems) {
        if self.path.as_os_str().is_empty() {
            problems.add("path", "must not be empty; use - for stdout");
        }
        if self.fsync == Fsync::Interval && self.fsync_interval.is_zero() {
            problems.add(
                "fsyncInterval",
                "must be greater than 0s; use fsync: always to sync every batch",
            );
        }
        MAX_TIMEOUT.check(
            problems,
            "fsyncInterval",
            self.fsync_interval,
            "a crash may lose, and the journal re-send, up to this window",
        );
        if let Some(rotate) = &self.rotate {
            if self.is_stdout() {
                problems.add("rotate", "stdout (path: -) cannot be rotated");
            }
            if rotate.max_size == 0 {
                problems.add("rotate.maxSize", "must be greater than 0B");
            } else if rotate.max_size > MAX_ROTATE_SIZE {
                problems.add(
                    "rotate.maxSize",
                    "must be at most 1TiB; omit rotate to never rotate",
                );
            }
            if rotate.max_files == 0 {
                problems.add("rotate.maxFiles", "must be at least 1");
            }
        }
    }

    /// Opens (creating) the file, or takes stdout.
    async fn build(&self, _name: &str, _delivery: &DeliveryOptions) -> Result<FileSink, SinkError> {
        FileSink::open(self.clone())
    }
}
