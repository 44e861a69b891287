//! The `sinks` section: where events go. One [`SinkKind`] variant per sink crate.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::units::{deserialize_duration, deserialize_size};

/// The `path` of a file sink that writes to standard output.
pub const STDOUT_PATH: &str = "-";

/// One sink (`sinks[]`): its name and its type-specific settings.
///
/// In YAML all keys sit side by side: `{name: archive, type: file, path: events.jsonl}`.
#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SinkConfig {
    /// Unique name: metric label `sink`, log field, dead-letter queue and journal cursor name, and
    /// what `routes[].sinks` refers to. Matches `[a-z0-9][a-z0-9-]*`, at most 63 characters.
    /// Required. Example: `archive`.
    pub name: String,
    /// The type-specific settings, selected by `type`.
    #[serde(flatten)]
    pub kind: SinkKind,
}

/// The sink type and its settings; `type` in YAML, matching the sink crate's name and `Sink::NAME`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum SinkKind {
    /// `type: file`: JSON lines (structured-mode CloudEvents) appended to a file or stdout.
    File(FileSinkConfig),
}

/// The value of `type`, without settings: for metric labels and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SinkType {
    /// `file`.
    File,
}

impl SinkType {
    /// The spelling in `type`, equal to the sink module name and `Sink::NAME`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::File => "file",
        }
    }
}

impl fmt::Display for SinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl SinkKind {
    /// Which type this is.
    #[must_use]
    pub const fn sink_type(&self) -> SinkType {
        // Exhaustive on purpose: a new variant must get a `SinkType`, and then a dispatch arm in
        // `SinkConfigVisitor`, or this does not compile.
        match self {
            Self::File(_) => SinkType::File,
        }
    }
}

/// `type: file` settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FileSinkConfig {
    /// File the events are appended to, one JSON CloudEvent per line; `-` writes to stdout.
    /// `${VAR}` is expanded; relative paths are relative to herald's working directory. Required.
    /// Example: `/var/lib/herald/events.jsonl`.
    pub path: PathBuf,
    /// When written events are fsynced: `always` (before each acknowledgement), `interval`
    /// (every `fsyncInterval`; a crash may lose that window, and the journal re-sends it) or
    /// `never` (left to the OS). Ignored for stdout. Default `interval`. Example: `always`.
    #[serde(default)]
    pub fsync: Fsync,
    /// How often `fsync: interval` syncs; a duration with a unit, greater than zero. Default
    /// `1s`. Example: `250ms`.
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
    /// Where this sink starts when it has no cursor yet (it is new, or was renamed): `head` (only
    /// events journaled from now on) or `earliest` (everything still in the journal). Default
    /// `head`. Example: `earliest`.
    #[serde(default)]
    pub start: SinkStart,
}

impl FileSinkConfig {
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
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Rotate {
    /// Size at which the file is rotated, in bytes; a size with a unit (`B`, `KB`, `MB`, `GB`,
    /// `KiB`, `MiB`, `GiB`, `Ki`, `Mi`, `Gi` …), greater than zero. Required. Example: `64MiB`.
    #[serde(deserialize_with = "deserialize_size")]
    #[schemars(with = "String")]
    pub max_size: u64,
    /// How many rotated files (`<path>.1` … `<path>.N`) are kept besides the active one; older
    /// ones are deleted. At least 1. Default `5`. Example: `10`.
    #[serde(default = "default_max_files")]
    pub max_files: usize,
}

fn default_max_files() -> usize {
    5
}

/// `start`: where a sink without a cursor begins reading the journal. Every sink type has it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SinkStart {
    /// Only events journaled after the sink first appears.
    #[default]
    Head,
    /// Everything still in the journal (see `journal.retain`).
    Earliest,
}

// ---------------------------------------------------------------------------------------------
// Deserialization.
//
// serde's internally tagged enums buffer the whole mapping before choosing the variant, and
// `serde_path_to_error` cannot see into the buffer: a typo inside a sink would be reported at
// `sinks[0]` instead of `sinks[0].fsyncIntervall`. So `SinkConfig` streams instead: once `type`
// is known, the remaining keys go straight to the variant's struct through the path-tracking
// `MapAccess`. `config::parse` moves `type` to the front of every sink first; if it is not first
// (another caller), the mapping is buffered and serde's derived tagged impl decides, with
// coarser error paths.
// ---------------------------------------------------------------------------------------------

/// Keys every sink has, taken out before the rest reaches the variant's struct.
#[derive(Default)]
struct Common {
    name: Option<String>,
}

impl Common {
    /// Deserializes the value of `key` if it is a common key; returns whether it was.
    fn take<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        if !Self::is_common(key) {
            return Ok(false);
        }
        self.name = Some(map.next_value()?);
        Ok(true)
    }

    fn is_common(key: &str) -> bool {
        key == "name"
    }

    fn finish<E: de::Error>(self, kind: SinkKind) -> Result<SinkConfig, E> {
        Ok(SinkConfig {
            name: self.name.ok_or_else(|| E::missing_field("name"))?,
            kind,
        })
    }
}

impl<'de> Deserialize<'de> for SinkConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(SinkConfigVisitor)
    }
}

struct SinkConfigVisitor;

impl<'de> Visitor<'de> for SinkConfigVisitor {
    type Value = SinkConfig;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sink: a mapping with name, type and the type's settings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SinkConfig, A::Error> {
        let mut common = Common::default();
        loop {
            let Some(key) = map.next_key::<String>()? else {
                return Err(de::Error::missing_field("type"));
            };
            if key == "type" {
                break;
            }
            if !common.take(&key, &mut map)? {
                return buffered(key, map, common);
            }
        }
        let sink_type: SinkType = map.next_value()?;
        let rest = de::value::MapAccessDeserializer::new(Rest {
            map: &mut map,
            common: &mut common,
        });
        let kind = match sink_type {
            SinkType::File => SinkKind::File(FileSinkConfig::deserialize(rest)?),
        };
        common.finish(kind)
    }
}

/// The keys after `type`, minus the common ones.
struct Rest<'a, A> {
    map: &'a mut A,
    common: &'a mut Common,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Rest<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let mut seed = seed;
        loop {
            // The key goes through the tracking `MapAccess`, so an unknown field is reported with
            // the key in the path.
            match self.map.next_key_seed(CommonOr(seed))? {
                None => return Ok(None),
                Some(KeyOr::Key(value)) => return Ok(Some(value)),
                Some(KeyOr::Common(key, returned)) => {
                    self.common.take(&key, self.map)?;
                    seed = returned;
                }
            }
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// A key seed that recognizes the common keys and hands every other key to the variant's seed.
struct CommonOr<K>(K);

enum KeyOr<K, V> {
    Key(V),
    /// A common key, with the unused seed handed back.
    Common(String, K),
}

impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for CommonOr<K> {
    type Value = KeyOr<K, K::Value>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(CommonOrVisitor(self.0))
    }
}

struct CommonOrVisitor<K>(K);

impl<'de, K: DeserializeSeed<'de>> Visitor<'de> for CommonOrVisitor<K> {
    type Value = KeyOr<K, K::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        if Common::is_common(v) {
            return Ok(KeyOr::Common(v.to_owned(), self.0));
        }
        let key: de::value::StrDeserializer<'_, E> = de::IntoDeserializer::into_deserializer(v);
        self.0.deserialize(key).map(KeyOr::Key)
    }
}

/// The slow path for a mapping whose first non-common key is not `type`.
fn buffered<'de, A: MapAccess<'de>>(
    first: String,
    mut map: A,
    mut common: Common,
) -> Result<SinkConfig, A::Error> {
    let mut rest = serde_yaml_ng::Mapping::new();
    rest.insert(first.into(), map.next_value()?);
    while let Some(key) = map.next_key::<String>()? {
        if !common.take(&key, &mut map)? {
            rest.insert(key.into(), map.next_value()?);
        }
    }
    let kind =
        SinkKind::deserialize(serde_yaml_ng::Value::Mapping(rest)).map_err(de::Error::custom)?;
    common.finish(kind)
}
