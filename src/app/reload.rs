//! Live reload: a new configuration applied to a running herald through the supervisor's run-time
//! changes. Entry point: [`Reloader`]; `herald run` feeds it SIGHUP, `POST /reload` and a poll of
//! the configuration file.
//!
//! A reload loads and validates the whole new file (secrets resolved) before it touches anything;
//! a file that fails, or that changes what only a restart can change ([`needs_restart`]), is
//! refused and the old configuration keeps running. Otherwise the running set is diffed against the
//! new one by identity (a watcher's label, a sink's name): what is gone stops, what changed
//! restarts under the same identity (a watcher resumes from its stream's checkpoint, a sink from
//! its cursor), what is new starts (a sink at the journal head, or at the oldest event with
//! `start: earliest`). The diff is against what actually runs, so a reload that failed halfway is
//! completed by the next one.
//!
//! The file is polled (content hash, once a second) rather than watched with inotify: a Kubernetes
//! ConfigMap volume swaps a `..data` symlink, which a watch on the file itself never sees (the
//! watched inode is not the one replaced) and a watch on the directory sees as several events;
//! reading a few kilobytes a second costs nothing and sees every way the file can change.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::{DeliveryBase, Running};
use crate::config::{self, Config, ConfigError};
use crate::journal::Journal;
use crate::route::routes_from_config;
use crate::watch::WatchSpec;

/// How often `herald run` polls the configuration file for a change.
pub const POLL_EVERY: Duration = Duration::from_secs(1);

/// The answer to a reload asked for through the admin endpoint: the generation in force, or why
/// the new configuration was refused.
pub type ReloadReply = oneshot::Sender<Result<u64, String>>;

/// Reloads asked for through the admin endpoint, for the loop that owns the [`Reloader`].
pub type ReloadRequests = mpsc::Receiver<ReloadReply>;

/// What `/status` and `/metrics` show of the configuration in force. Generation 1 is the one
/// herald started with; each applied reload adds one.
#[derive(Debug)]
pub struct ConfigStatus {
    generation: AtomicU64,
    failures: AtomicU64,
    last_ok: AtomicBool,
    last: Mutex<LastReload>,
}

#[derive(Debug, Default, Clone)]
struct LastReload {
    error: Option<String>,
    at: Option<jiff::Timestamp>,
}

impl Default for ConfigStatus {
    fn default() -> Self {
        Self {
            generation: AtomicU64::new(1),
            failures: AtomicU64::new(0),
            last_ok: AtomicBool::new(true),
            last: Mutex::default(),
        }
    }
}

impl ConfigStatus {
    /// The generation in force.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Reloads refused or applied only in part since start.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Whether the last reload (if any) was applied.
    pub fn last_ok(&self) -> bool {
        self.last_ok.load(Ordering::Relaxed)
    }

    /// Why the last reload was refused; `None` once one was applied.
    pub fn last_error(&self) -> Option<String> {
        self.lock().error.clone()
    }

    /// When the last reload was tried.
    pub fn last_at(&self) -> Option<jiff::Timestamp> {
        self.lock().at
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LastReload> {
        self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn applied(&self) -> u64 {
        *self.lock() = LastReload {
            error: None,
            at: Some(jiff::Timestamp::now()),
        };
        self.last_ok.store(true, Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn failed(&self, error: String) {
        *self.lock() = LastReload {
            error: Some(error),
            at: Some(jiff::Timestamp::now()),
        };
        self.last_ok.store(false, Ordering::Relaxed);
        self.failures.fetch_add(1, Ordering::Relaxed);
    }
}

/// Why a reload was refused (or applied only in part).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The new file cannot be read or is invalid; nothing was changed.
    #[error("configuration {} refused, the previous one keeps running: {source}", path.display())]
    Invalid {
        /// The configuration file.
        path: PathBuf,
        /// Every problem, with its field path.
        #[source]
        source: ConfigError,
    },
    /// The new file changes settings only a restart applies; nothing was changed.
    #[error(
        "configuration {} refused, the previous one keeps running: {} cannot change while herald runs; restart herald to apply {}",
        path.display(),
        fields.join(", "),
        if fields.len() == 1 { "it" } else { "them" }
    )]
    NeedsRestart {
        /// The configuration file.
        path: PathBuf,
        /// The changed fields (`journal.path`, `admin.listen` …).
        fields: Vec<String>,
    },
    /// Part of the change could not be applied (a sink failed its health check); the rest was,
    /// and the next reload tries the missing part again.
    #[error("configuration {} applied in part: {}", path.display(), errors.join("; "))]
    Partial {
        /// The configuration file.
        path: PathBuf,
        /// What failed.
        errors: Vec<String>,
    },
}

/// Applies new configurations to a running herald; see the module docs.
#[derive(Debug)]
pub struct Reloader {
    path: PathBuf,
    current: Config,
    /// The file's fingerprint when it was last read, for [`Reloader::changed`].
    seen: Option<u64>,
    /// Each running sink's secret files' content hash when it was built: a rotated secret (same
    /// reference, new content) makes the sink changed.
    secrets: Vec<(String, u64)>,
    /// Sinks removed by a reload, whose cursors are kept for `journal.retain` in case they come
    /// back.
    removed: Vec<(String, Instant)>,
    drain_timeout: Duration,
    status: Arc<ConfigStatus>,
}

impl Reloader {
    /// A reloader of the file at `path`, whose content `current` is running. Removed and changed
    /// sinks drain for at most `drain_timeout`.
    pub fn new(
        path: PathBuf,
        current: Config,
        status: Arc<ConfigStatus>,
        drain_timeout: Duration,
    ) -> Self {
        let seen = fingerprint(&path);
        let secrets = secret_fingerprints(&current);
        Self {
            path,
            current,
            seen,
            secrets,
            removed: Vec::new(),
            drain_timeout,
            status,
        }
    }

    /// Whether the file changed since it was last read (its content, through any symlinks).
    pub fn changed(&mut self) -> bool {
        let now = fingerprint(&self.path);
        if now == self.seen {
            return false;
        }
        self.seen = now;
        true
    }

    /// Loads the file again and applies what changed; logs the outcome and records it for `/status`
    /// and `/metrics`. Returns the generation in force.
    ///
    /// # Errors
    /// [`ReloadError`]: the old configuration keeps running (in part, for `Partial`).
    pub async fn reload(&mut self, running: &mut Running) -> Result<u64, ReloadError> {
        self.seen = fingerprint(&self.path);
        let outcome = self.apply(running).await;
        match &outcome {
            Ok(generation) => {
                tracing::info!(message = "Configuration reloaded.", path = %self.path.display(), generation);
            }
            Err(error) => {
                tracing::error!(message = "Configuration reload failed.", path = %self.path.display(), %error);
                self.status.failed(error.to_string());
            }
        }
        outcome
    }

    async fn apply(&mut self, running: &mut Running) -> Result<u64, ReloadError> {
        let invalid = |source| ReloadError::Invalid {
            path: self.path.clone(),
            source,
        };
        let new = config::load(&self.path).map_err(invalid)?;
        new.check_secrets().map_err(invalid)?;
        // As at start: valid, but probably not what was meant.
        for warning in new.warnings() {
            tracing::warn!(message = "Configuration warning.", path = %self.path.display(), %warning);
        }
        let fields = needs_restart(&self.current, &new);
        if !fields.is_empty() {
            return Err(ReloadError::NeedsRestart {
                path: self.path.clone(),
                fields,
            });
        }
        // Validation makes these parse; a failure is still a refusal, before anything changed.
        let routes = routes_from_config(&new.routes).map_err(|e| {
            invalid(ConfigError::Invalid {
                errors: vec![config::FieldError {
                    path: "routes".to_owned(),
                    message: e,
                }],
            })
        })?;
        let mut errors = Vec::new();
        let old_specs = WatchSpec::from_config(&self.current);
        let new_specs = WatchSpec::from_config(&new);
        let base = DeliveryBase::from_config(&new);
        let drain = self.drain_timeout;
        let sup = running.supervisor();

        // Watchers that are gone or changed stop first: nothing more is journaled for them.
        let mut start_watchers = Vec::new();
        let running_labels = sup.watcher_labels();
        for label in &running_labels {
            let new_spec = new_specs.iter().find(|s| s.label() == *label);
            let old_spec = old_specs.iter().find(|s| s.label() == *label);
            let same = match (old_spec, new_spec) {
                (Some(old), Some(new)) => same_watch(old, new),
                _ => false,
            };
            if !same {
                if let Err(e) = sup.remove_watcher(label).await {
                    errors.push(e.to_string());
                }
                if let Some(spec) = new_spec {
                    tracing::info!(message = "Reload: restarting a changed watcher from its checkpoint.", resource = %label);
                    start_watchers.push(spec.clone());
                } else {
                    tracing::info!(message = "Reload: watcher removed.", resource = %label);
                }
            }
        }
        for spec in &new_specs {
            if !running_labels.contains(&spec.label()) {
                tracing::info!(message = "Reload: watcher added.", resource = %spec.label());
                start_watchers.push(spec.clone());
            }
        }

        // Sinks: a changed base (dead-letter bound, oversize policy) changes every sink.
        let base_changed = base != DeliveryBase::from_config(&self.current);
        let mut start_sinks = Vec::new();
        let running_sinks = sup.sink_names();
        for name in &running_sinks {
            let new_cfg = new.sinks.iter().find(|s| s.name == *name);
            let old_cfg = self.current.sinks.iter().find(|s| s.name == *name);
            let rotated = new_cfg.is_some_and(|cfg| {
                self.secrets
                    .iter()
                    .find(|(n, _)| n == name)
                    .is_none_or(|(_, before)| *before != secret_fingerprint(cfg))
            });
            let same = !base_changed && !rotated && new_cfg.is_some() && new_cfg == old_cfg;
            if same {
                continue;
            }
            // The cursor stays: a changed sink resumes where it was, a removed one may come back.
            if let Err(e) = sup.detach_sink(name, drain).await {
                errors.push(e.to_string());
            }
            if let Some(cfg) = new_cfg {
                tracing::info!(message = "Reload: restarting a changed sink from its cursor.", sink = %name, secrets_rotated = rotated);
                start_sinks.push(cfg.clone());
            } else {
                tracing::info!(message = "Reload: sink removed; its cursor is kept for journal.retain.", sink = %name);
                self.removed.push((name.clone(), Instant::now()));
            }
        }
        for cfg in &new.sinks {
            if !running_sinks.contains(&cfg.name) {
                tracing::info!(message = "Reload: sink added.", sink = %cfg.name);
                start_sinks.push(cfg.clone());
            }
        }
        self.removed
            .retain(|(name, _)| !new.sinks.iter().any(|s| s.name == *name));

        // Routes before the new sinks start, so they deliver by the new routes from their first
        // event; sinks before watchers, so a new sink's cursor exists before a new watcher appends.
        sup.set_routes(routes);
        sup.set_base(base);
        for cfg in &start_sinks {
            if let Err(e) = sup.add_sink(cfg).await {
                errors.push(e.to_string());
            }
        }
        for spec in start_watchers {
            if let Err(e) = sup.add_watcher(spec) {
                errors.push(e.to_string());
            }
        }
        self.secrets = secret_fingerprints(&new);
        self.current = new;
        if errors.is_empty() {
            Ok(self.status.applied())
        } else {
            Err(ReloadError::Partial {
                path: self.path.clone(),
                errors,
            })
        }
    }

    /// Drops the cursors of sinks removed by a reload more than `journal.retain` ago and not back
    /// since: past that they would only hold back retention and the backlog bound.
    pub fn expire_removed(&mut self, journal: &Journal) {
        let retain = self.current.journal.retain;
        self.removed.retain(|(name, at)| {
            if at.elapsed() < retain {
                return true;
            }
            match journal.remove_sink(name) {
                Ok(()) => {
                    tracing::info!(message = "Dropped the cursor of a sink removed by a reload.", sink = %name);
                    false
                }
                Err(error) => {
                    tracing::warn!(message = "Cannot drop the cursor of a removed sink; trying again.", sink = %name, %error);
                    true
                }
            }
        });
    }
}

/// Two specs of one label watch the same thing the same way (their place in `resources` aside).
fn same_watch(old: &WatchSpec, new: &WatchSpec) -> bool {
    WatchSpec {
        index: new.index,
        ..old.clone()
    } == *new
}

/// The settings `new` changes that a running herald cannot take: the journal is opened once (its
/// path, lock and flusher), the admin endpoint bound once, the cluster client made once.
/// `journal.maxDeadLetters` and `cluster.name` are applied live.
pub fn needs_restart(old: &Config, new: &Config) -> Vec<String> {
    let mut fields = Vec::new();
    let mut check = |changed: bool, field: &str| {
        if changed {
            fields.push(field.to_owned());
        }
    };
    check(
        old.cluster.source != new.cluster.source,
        "cluster (how herald reaches the API server)",
    );
    let (o, n) = (&old.journal, &new.journal);
    check(o.path != n.path, "journal.path");
    check(
        o.flush_interval != n.flush_interval,
        "journal.flushInterval",
    );
    check(o.flush_entries != n.flush_entries, "journal.flushEntries");
    check(o.retain != n.retain, "journal.retain");
    check(o.max_backlog != n.max_backlog, "journal.maxBacklog");
    check(old.admin.listen != new.admin.listen, "admin.listen");
    check(old.admin.token != new.admin.token, "admin.token");
    check(old.leader_election != new.leader_election, "leaderElection");
    fields
}

/// A hash of the content of every secret file `sink` reads (`{fromFile: path}`, a NATS
/// credentials file), so that a rotated secret, the reference unchanged, rebuilds the sink and it
/// reads the new value. An environment variable cannot change under a running process, so only
/// files count.
fn secret_fingerprint(sink: &config::SinkConfig) -> u64 {
    let mut h = DefaultHasher::new();
    for path in sink.secret_files() {
        path.hash(&mut h);
        std::fs::read(path).ok().hash(&mut h);
    }
    h.finish()
}

/// Each sink of `cfg` with its [`secret_fingerprint`].
fn secret_fingerprints(cfg: &Config) -> Vec<(String, u64)> {
    cfg.sinks
        .iter()
        .map(|s| (s.name.clone(), secret_fingerprint(s)))
        .collect()
}

/// The file's content hash, read through any symlinks; `None` when it cannot be read (a reload
/// then reports why).
fn fingerprint(path: &Path) -> Option<u64> {
    let bytes = std::fs::read(path).ok()?;
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    Some(h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(dir: &Path) -> config::SinkConfig {
        let text = format!(
            "resources: [{{group: example.com, kind: Widget}}]\nsinks:\n  - name: hook\n    type: webhook\n    url: http://127.0.0.1:1/\n    auth:\n      bearer: {{fromFile: {}}}\n",
            dir.join("token").display()
        );
        config::from_str(&text).unwrap().sinks.remove(0)
    }

    #[test]
    fn a_rotated_secret_file_changes_the_sinks_fingerprint() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "one\n").unwrap();
        let sink = sink(dir.path());
        let before = secret_fingerprint(&sink);
        assert_eq!(before, secret_fingerprint(&sink));
        std::fs::write(dir.path().join("token"), "two\n").unwrap();
        assert_ne!(before, secret_fingerprint(&sink));
    }

    #[test]
    fn every_sink_type_names_the_secret_files_it_reads() {
        let dir = tempfile::tempdir().unwrap();
        let f = |name: &str| dir.path().join(name).display().to_string();
        let text = format!(
            "resources: [{{group: example.com, kind: Widget}}]\nsinks:\n\
             - {{name: w, type: webhook, url: 'http://127.0.0.1:1/', auth: {{basic: {{username: u, password: {{fromFile: {a}}}}}}}, signing: {{secret: {{fromFile: {b}}}}}}}\n\
             - {{name: k, type: kafka, brokers: ['127.0.0.1:1'], topic: t, secretProperties: {{sasl.password: {{fromFile: {c}}}, sasl.username: '${{USER}}'}}}}\n\
             - {{name: n, type: nats, servers: ['nats://127.0.0.1:1'], subject: s, auth: {{credentialsFile: {d}}}}}\n\
             - {{name: m, type: nats, servers: ['nats://127.0.0.1:1'], subject: s, auth: {{nkeySeed: {{fromFile: {e}}}}}}}\n\
             - {{name: o, type: file, path: {g}}}\n",
            a = f("a"),
            b = f("b"),
            c = f("c"),
            d = f("d"),
            e = f("e"),
            g = f("out"),
        );
        let config = config::from_str(&text).unwrap();
        let files: Vec<Vec<String>> = config
            .sinks
            .iter()
            .map(|s| {
                s.secret_files()
                    .iter()
                    .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                    .collect()
            })
            .collect();
        assert_eq!(
            files,
            [vec!["a", "b"], vec!["c"], vec!["d"], vec!["e"], vec![]]
        );
    }

    #[test]
    fn journal_admin_and_cluster_source_changes_need_a_restart() {
        let base = "resources: [{group: example.com, kind: Widget}]\nsinks: [{name: out, type: file, path: /tmp/o}]\n";
        let old = config::from_str(base).unwrap();
        let same = config::from_str(&format!(
            "{base}journal: {{maxDeadLetters: 5}}\ncluster: {{name: other}}\n"
        ))
        .unwrap();
        assert_eq!(needs_restart(&old, &same), Vec::<String>::new());
        let moved = config::from_str(&format!(
            "{base}journal: {{path: /elsewhere, retain: 1h}}\nadmin: {{listen: 127.0.0.1:1}}\ncluster: {{embedded: }}\n"
        ))
        .unwrap();
        assert_eq!(
            needs_restart(&old, &moved),
            [
                "cluster (how herald reaches the API server)",
                "journal.path",
                "journal.retain",
                "admin.listen"
            ]
        );
    }
}
