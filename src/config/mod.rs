//! herald's configuration file: the model starts at [`Config`], read with [`load`] or [`from_str`].
//!
//! Parsing happens in three steps. serde reads the YAML into the typed model (the first type error
//! or unknown key stops it, reported with its exact path; `${VAR}` in `admin.listen` is expanded
//! just before); then `${VAR}` references in path fields are expanded and defaults that depend on other fields are applied; then every semantic rule is
//! checked and all problems are reported together. `docs/configuration.md` is the user reference;
//! a unit test keeps it in step with this model.

mod cluster;
mod filter;
mod interpolate;
mod journal;
mod leader;
mod resource;
mod route;
mod sink;
mod validate;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};

pub use cluster::{
    ClusterConfig, ClusterSource, DEFAULT_CLUSTER_NAME, EMBEDDED_CLUSTER_NAME, EmbeddedSource,
    KubeconfigSource,
};
pub use filter::{FieldPath, OnError, When};
pub use herald_sink_core::config::{SecretError, SecretRef, SinkStart};
pub use journal::{AdminConfig, DEFAULT_ADMIN_LISTEN, JournalSettings};
pub use leader::LeaderElectionConfig;
pub use resource::{
    ANY_KIND, DEFAULT_TYPE_PREFIX, EventType, InitialState, Namespaces, OnOversize, PayloadPart,
    PayloadParts, ResourceConfig, glob_match,
};
pub(crate) use route::split_resource;
pub use route::{ANY_RESOURCE, RouteConfig};
pub use sink::{SinkConfig, SinkKind, SinkType};

use interpolate::EnvLookup;
use validate::Problems;

/// `Result` with [`ConfigError`].
pub type Result<T, E = ConfigError> = std::result::Result<T, E>;

/// herald's whole configuration, defaults applied and validated.
///
/// Only [`load`] and [`from_str`] validate, expand `${VAR}` in paths and fill in the default
/// route; deserializing this type directly does none of that.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Which Kubernetes cluster to watch and the name events carry for it. Default: the current
    /// context of the default kubeconfig, named `default`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub cluster: ClusterConfig,
    /// The custom resources to watch; at least one. Example: `[{group: example.com, kind: Database}]`.
    #[serde(default)]
    pub resources: Vec<ResourceConfig>,
    /// Where events are delivered; at least one, names unique.
    /// Example: `[{name: archive, type: file, path: events.jsonl}]`.
    #[serde(default)]
    pub sinks: Vec<SinkConfig>,
    /// Which events go to which sinks. Default (key absent): every event to every sink; after
    /// loading this list is never empty. Example: `[{events: [deleted], sinks: [archive]}]`.
    #[serde(default, deserialize_with = "non_empty_routes")]
    pub routes: Vec<RouteConfig>,
    /// The on-disk journal between watches and sinks. Default: `./herald-journal` with the
    /// defaults of each key.
    #[serde(default, deserialize_with = "null_as_default")]
    pub journal: JournalSettings,
    /// The admin HTTP endpoint. Default: `127.0.0.1:9464`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub admin: AdminConfig,
    /// Several replicas, one delivering: Lease leader election, hot standbys (ADR 0013). Default:
    /// off. Example: `{enabled: true}`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub leader_election: LeaderElectionConfig,
}

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read configuration file {}", path.display())]
    ReadFailed {
        /// The file.
        path: PathBuf,
        /// Why reading failed.
        #[source]
        source: std::io::Error,
    },
    /// The configuration is malformed or breaks a rule; `errors` lists every problem found.
    #[error("invalid configuration:{}", validate::render(errors))]
    Invalid {
        /// The problems, in document order (a parse error stops parsing, so it comes alone).
        errors: Vec<FieldError>,
    },
}

/// One problem, located by its path in the document: `resources[1].initialState`,
/// `sinks[0].fsyncIntervall`, or `.` for the document itself. Displays as `path: message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct FieldError {
    /// Dotted path with `[i]` for list items, keys spelled as in the file.
    pub path: String,
    /// What is wrong, quoting the offending value.
    pub message: String,
}

impl FieldError {
    fn root(message: impl fmt::Display) -> Self {
        Self {
            path: ".".to_owned(),
            message: message.to_string(),
        }
    }
}

/// Reads and validates the configuration file at `path`.
///
/// # Errors
/// [`ConfigError::ReadFailed`] when the file cannot be read, [`ConfigError::Invalid`] with every
/// problem otherwise.
pub fn load(path: &Path) -> Result<Config> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFailed {
        path: path.to_owned(),
        source,
    })?;
    from_str(&text)
}

/// Parses and validates a configuration from YAML text.
///
/// # Errors
/// [`ConfigError::Invalid`] listing every problem.
pub fn from_str(text: &str) -> Result<Config> {
    from_str_with_env(text, &|name| std::env::var(name))
}

impl std::str::FromStr for Config {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Self> {
        from_str(text)
    }
}

impl Config {
    /// Valid settings that probably do not do what their author meant, one sentence each with
    /// its path (`herald check` prints them; `herald run` logs them).
    pub fn warnings(&self) -> Vec<String> {
        validate::warnings(self)
    }

    /// Resolves every secret reference now (sinks' credentials, `admin.token`), as `herald check`
    /// and `herald run` do before anything starts, so a missing one is a configuration error
    /// with its path (`sinks[1].auth.bearer: environment variable "X" is not set`).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] listing every secret that cannot be used (never its value).
    pub fn check_secrets(&self) -> Result<()> {
        self.check_secrets_with(&|name| std::env::var(name))
    }

    /// [`Config::check_secrets`] with `env` in place of the process environment.
    pub(crate) fn check_secrets_with(&self, env: EnvLookup<'_>) -> Result<()> {
        let mut problems = Problems::default();
        validate::check_secrets(self, env, &mut problems);
        if problems.0.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid { errors: problems.0 })
        }
    }
}

pub(crate) fn from_str_with_env(text: &str, env: EnvLookup<'_>) -> Result<Config> {
    let mut problems = Problems::default();
    let mut config =
        parse(text, env, &mut problems).map_err(|e| ConfigError::Invalid { errors: vec![e] })?;
    resolve(&mut config, env, &mut problems);
    validate::check(&config, &mut problems);
    if problems.0.is_empty() {
        Ok(config)
    } else {
        Err(ConfigError::Invalid { errors: problems.0 })
    }
}

/// YAML text → model. Going through a `Value` first keeps serde_yaml_ng's own path and position
/// out of the messages (the path comes from `serde_path_to_error`), lets `type` be moved first and
/// lets `admin.listen` be expanded before it becomes a `SocketAddr`.
fn parse(text: &str, env: EnvLookup<'_>, problems: &mut Problems) -> Result<Config, FieldError> {
    let mut value: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(text).map_err(FieldError::root)?;
    value.apply_merge().map_err(FieldError::root)?;
    if value.is_null() {
        return Err(FieldError::root("the configuration is empty"));
    }
    put_sink_type_first(&mut value);
    expand_admin_listen(&mut value, env, problems);
    serde_path_to_error::deserialize(value).map_err(|e| FieldError {
        path: e.path().to_string(),
        message: e.inner().to_string(),
    })
}

/// Expands `${VAR}` in `admin.listen` in the YAML itself: the model's field is a `SocketAddr`,
/// which a template cannot be. A value that does not expand to an address is reported with the
/// field path and removed, so the rest of the file is still parsed and checked.
fn expand_admin_listen(
    root: &mut serde_yaml_ng::Value,
    env: EnvLookup<'_>,
    problems: &mut Problems,
) {
    let Some(serde_yaml_ng::Value::Mapping(admin)) = root.get_mut("admin") else {
        return;
    };
    let Some(serde_yaml_ng::Value::String(text)) = admin.get("listen") else {
        return;
    };
    if !text.contains('$') {
        return;
    }
    match interpolate::expand_socket_addr(text, env) {
        Ok(addr) => {
            admin.insert("listen".into(), addr.to_string().into());
        }
        Err(message) => {
            problems.add("admin.listen".to_owned(), message);
            admin.shift_remove("listen");
        }
    }
}

/// Moves `type` to the front of every sink so `SinkConfig` can stream with exact error paths.
fn put_sink_type_first(root: &mut serde_yaml_ng::Value) {
    let Some(serde_yaml_ng::Value::Sequence(sinks)) = root.get_mut("sinks") else {
        return;
    };
    for sink in sinks {
        if let serde_yaml_ng::Value::Mapping(map) = sink
            && let Some(kind) = map.shift_remove("type")
        {
            let mut reordered = serde_yaml_ng::Mapping::with_capacity(map.len() + 1);
            reordered.insert("type".into(), kind);
            reordered.extend(std::mem::take(map));
            *map = reordered;
        }
    }
}

/// The steps between parsing and checking: `${VAR}` in paths, the core group's spelling, the
/// default route.
fn resolve(config: &mut Config, env: EnvLookup<'_>, problems: &mut Problems) {
    let mut expand = |path: &mut PathBuf, at: String| {
        if let Err(message) = interpolate::expand_path(path, env) {
            problems.add(at, message);
        }
    };
    match &mut config.cluster.source {
        ClusterSource::Kubeconfig(KubeconfigSource {
            path: Some(path), ..
        }) => expand(path, "cluster.kubeconfig.path".into()),
        ClusterSource::Embedded(EmbeddedSource { load: Some(path) }) => {
            expand(path, "cluster.embedded.load".into());
        }
        _ => {}
    }
    for (i, sink) in config.sinks.iter_mut().enumerate() {
        for (key, path) in sink.kind.paths_mut() {
            expand(path, format!("sinks[{i}].{key}"));
        }
    }
    expand(&mut config.journal.path, "journal.path".into());

    // One spelling of the core group downstream: Kubernetes' `""`.
    for resource in &mut config.resources {
        if resource.group == "core" {
            resource.group.clear();
        }
    }
    for route in &mut config.routes {
        for entry in &mut route.resources {
            if let Some(name) = entry.strip_suffix(".core") {
                *entry = name.to_owned();
            }
        }
    }
    // Without sinks there is nothing to route to; that is reported once, as `sinks`.
    if config.routes.is_empty() && !config.sinks.is_empty() {
        config.routes.push(RouteConfig {
            resources: vec![ANY_RESOURCE.to_owned()],
            events: EventType::all(),
            sinks: config.sinks.iter().map(|s| s.name.clone()).collect(),
            when: None,
        });
    }
}

/// For sections written as a bare key (`embedded:`), which YAML reads as null: the user meant
/// "on, with defaults", not "off".
fn null_as_default<'de, D, T>(d: D) -> std::result::Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The `Option` counterpart of [`null_as_default`]: a present-but-null key is `Some(default)`
/// (serde calls this only when the key is present).
fn null_as_some_default<'de, D, T>(d: D) -> std::result::Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Some(Option::<T>::deserialize(d)?.unwrap_or_default()))
}

/// `routes: []` would silently deliver nothing, while an absent `routes` means "everything
/// everywhere"; refuse the empty list rather than guess.
fn non_empty_routes<'de, D: Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<RouteConfig>, D::Error> {
    let routes = Vec::<RouteConfig>::deserialize(d)?;
    if routes.is_empty() {
        return Err(serde::de::Error::custom(
            "an empty list routes nothing; omit the key to send every event to every sink",
        ));
    }
    Ok(routes)
}
