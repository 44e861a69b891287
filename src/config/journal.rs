//! The `journal` and `admin` sections.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use herald_sink_core::config::deserialize_duration;

/// The `journal` section: herald's on-disk store of events between the watch and the sinks.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JournalSettings {
    /// Directory of the journal (created 0700, files 0600). `${VAR}` is expanded; relative paths
    /// are relative to herald's working directory. Default `./herald-journal`.
    /// Example: `/var/lib/herald/journal`.
    #[serde(default = "default_journal_path")]
    pub path: PathBuf,
    /// Group commit: how long appended events may wait before the journal is flushed to disk (and
    /// only then checkpointed). The commit is adaptive: under light load appended events are
    /// flushed as soon as the previous flush is done; after a flush of more than 32 events they
    /// wait up to this long again, as does delivery progress. A duration with a unit,
    /// at most `10s`; `0s` flushes every write. Default `10ms`. Example: `5ms`.
    #[serde(
        default = "default_flush_interval",
        deserialize_with = "deserialize_duration"
    )]
    #[schemars(with = "String", extend("default" = "10ms"))]
    pub flush_interval: Duration,
    /// Group commit: flush as soon as this many events are waiting, before `flushInterval` ends.
    /// At least 1. Default `1000`. Example: `500`.
    #[serde(default = "default_flush_entries")]
    pub flush_entries: u32,
    /// Keep events this long after every sink has delivered them, for `herald replay`. A duration
    /// with a unit, at most `3650d` (ten years: longer is a slip, and would overflow clocks).
    /// Default `0s` (remove once delivered). Example: `24h`.
    #[serde(default, deserialize_with = "deserialize_duration")]
    #[schemars(with = "String", extend("default" = "0s"))]
    pub retain: Duration,
    /// Undelivered events (for the slowest sink) above which herald stops reading watches until
    /// sinks catch up; readiness and metrics report it first. At least 1. Default `1000000`.
    /// Example: `5000000`.
    #[serde(default = "default_max_backlog")]
    pub max_backlog: u64,
    /// Dead letters kept per sink at most. A sink whose dead-letter queue is full stops
    /// dead-lettering: the event is retried instead and holds back the sink's cursor (nothing is
    /// dropped), `herald_dead_letter_queue_full` turns 1, and the backlog grows until the queue
    /// is replayed or purged. At least 1. Default `100000`. Example: `10000`.
    #[serde(default = "default_max_dead_letters")]
    pub max_dead_letters: usize,
}

impl Default for JournalSettings {
    fn default() -> Self {
        Self {
            path: default_journal_path(),
            flush_interval: default_flush_interval(),
            flush_entries: default_flush_entries(),
            retain: Duration::ZERO,
            max_backlog: default_max_backlog(),
            max_dead_letters: default_max_dead_letters(),
        }
    }
}

fn default_journal_path() -> PathBuf {
    PathBuf::from("./herald-journal")
}

fn default_flush_interval() -> Duration {
    Duration::from_millis(10)
}

fn default_flush_entries() -> u32 {
    1000
}

fn default_max_backlog() -> u64 {
    1_000_000
}

fn default_max_dead_letters() -> usize {
    100_000
}

/// Default admin address: loopback only, because mutating calls are behind it.
pub const DEFAULT_ADMIN_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 9464);

/// The `admin` section: the HTTP endpoint for metrics, health and operations.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AdminConfig {
    /// Address and port of `/metrics`, `/healthz`, `/readyz` and `/status`; an IP address, not a
    /// host name. `${VAR}` is expanded, and a variable holding a bare IPv6 address is bracketed
    /// before its port, so a pod binds its own IP from the downward API whatever its family.
    /// Default `127.0.0.1:9464`. Example: `"${POD_IP}:9464"` (in a pod).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Bearer token the mutating calls (`POST /dlq/<sink>/replay`, `/dlq/<sink>/purge`, `/replay`)
    /// require, from the environment or a file; without one they are disabled. Default none.
    /// Example: `{fromFile: /var/run/secrets/herald/admin-token}`.
    #[serde(default)]
    pub token: Option<super::SecretRef>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: DEFAULT_ADMIN_LISTEN,
            token: None,
        }
    }
}

fn default_listen() -> SocketAddr {
    DEFAULT_ADMIN_LISTEN
}
