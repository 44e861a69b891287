//! The `sinks` section: where events go. One [`SinkKind`] variant per sink crate; each crate owns
//! its keys, their docs and checks, and how it builds its sink (`herald_sink_core`'s
//! `config::SinkConfig`, read flat with the delivery keys by `config::read_sink`). What is left
//! here is what no single sink can know: the entry's `name` and the dispatch on `type`.

use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;

use herald_sink_core::config::{
    DeliveryKeys, DeliveryOptions, EnvLookup, OtherKeys, Problems, SinkConfig as Configure,
    read_sink,
};
use herald_sink_file::FileConfig;
use herald_sink_kafka::KafkaConfig;
use herald_sink_nats::NatsConfig;
use herald_sink_webhook::WebhookConfig;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// One sink (`sinks[]`): its name, the delivery keys and its type's settings.
///
/// In YAML all keys sit side by side: `{name: archive, type: file, path: events.jsonl}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkConfig {
    /// Unique name: metric label `sink`, log field, dead-letter queue and journal cursor name, and
    /// what `routes[].sinks` refers to. Matches `[a-z0-9][a-z0-9-]*`, at most 63 characters.
    /// Required. Example: `archive`.
    pub name: String,
    /// The keys the delivery driver reads (`concurrency`, `maxAttempts`, `start` …), as far as
    /// the type takes them.
    pub delivery: DeliveryOptions,
    /// The type-specific settings, selected by `type`.
    pub kind: SinkKind,
}

/// The sink type and its settings; `type` in YAML, matching the sink crate's name and `Sink::NAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
// Read once at start-up for a handful of sinks: plain variants beat boxing for the size.
#[allow(clippy::large_enum_variant)]
pub enum SinkKind {
    /// `type: file`: JSON lines (structured-mode CloudEvents) appended to a file or stdout.
    File(FileConfig),
    /// `type: webhook`: CloudEvents POSTed to an HTTP endpoint, signed per Standard Webhooks.
    Webhook(WebhookConfig),
    /// `type: kafka`: one record per event, keyed by `partitionkey`.
    Kafka(KafkaConfig),
    /// `type: nats`: core NATS publishes or JetStream publishes awaiting a `PubAck`.
    Nats(NatsConfig),
}

/// The value of `type`, without settings: for metric labels and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SinkType {
    /// `file`.
    File,
    /// `webhook`.
    Webhook,
    /// `kafka`.
    Kafka,
    /// `nats`.
    Nats,
}

impl SinkType {
    /// The spelling in `type`, equal to the sink module name and `Sink::NAME`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::File => "file",
            Self::Webhook => "webhook",
            Self::Kafka => "kafka",
            Self::Nats => "nats",
        }
    }

    /// The delivery keys a sink of this type takes.
    #[must_use]
    pub const fn delivery_keys(self) -> DeliveryKeys {
        match self {
            Self::File => FileConfig::DELIVERY,
            Self::Webhook => WebhookConfig::DELIVERY,
            Self::Kafka => KafkaConfig::DELIVERY,
            Self::Nats => NatsConfig::DELIVERY,
        }
    }
}

impl fmt::Display for SinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Evaluates `$body` with `$config` bound to the sink crate's configuration, whatever the type.
macro_rules! with_config {
    ($kind:expr, $config:ident => $body:expr) => {
        match $kind {
            SinkKind::File($config) => $body,
            SinkKind::Webhook($config) => $body,
            SinkKind::Kafka($config) => $body,
            SinkKind::Nats($config) => $body,
        }
    };
}

impl SinkKind {
    /// Which type this is.
    #[must_use]
    pub const fn sink_type(&self) -> SinkType {
        // Exhaustive on purpose: a new variant must get a `SinkType`, and then a dispatch arm in
        // `SinkConfigVisitor`, or this does not compile.
        match self {
            Self::File(_) => SinkType::File,
            Self::Webhook(_) => SinkType::Webhook,
            Self::Kafka(_) => SinkType::Kafka,
            Self::Nats(_) => SinkType::Nats,
        }
    }

    /// The path-valued keys, for `${VAR}` expansion, with their key path below the sink.
    pub(crate) fn paths_mut(&mut self) -> Vec<(&'static str, &mut PathBuf)> {
        with_config!(self, config => config.paths_mut())
    }

    /// The most events the driver gives one send call, when the sink says.
    #[must_use]
    pub fn batch_max_events(&self, delivery: &DeliveryOptions) -> Option<usize> {
        with_config!(self, config => config.batch_max_events(delivery))
    }
}

impl SinkConfig {
    /// The secrets (and credentials files) this sink references that cannot be used now; keys
    /// below the sink.
    /// Every file this sink reads a secret from when it is built (see
    /// [`herald_sink_core::config::SinkConfig::secret_files`]).
    pub(crate) fn secret_files(&self) -> Vec<&std::path::Path> {
        with_config!(&self.kind, config => config.secret_files())
    }

    pub(crate) fn secret_problems(&self, env: EnvLookup<'_>) -> Problems {
        let mut problems = Problems::default();
        with_config!(&self.kind, config => config.check_secrets(env, &mut problems));
        problems
    }

    /// The rules this sink breaks: its type's, then the delivery keys'; keys below the sink.
    pub(crate) fn problems(&self) -> Problems {
        let mut problems = Problems::default();
        with_config!(&self.kind, config => config.validate(&mut problems));
        self.delivery.validate(&mut problems);
        problems
    }
}

// ---------------------------------------------------------------------------------------------
// Schema: `name`, then one branch per type with its own keys, `type` and the delivery keys it
// takes, as users write them side by side.
// ---------------------------------------------------------------------------------------------

impl JsonSchema for SinkConfig {
    fn schema_name() -> Cow<'static, str> {
        "SinkConfig".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let delivery = DeliveryOptions::json_schema(generator);
        let branches = [
            branch::<FileConfig>(generator, SinkType::File, &delivery),
            branch::<WebhookConfig>(generator, SinkType::Webhook, &delivery),
            branch::<KafkaConfig>(generator, SinkType::Kafka, &delivery),
            branch::<NatsConfig>(generator, SinkType::Nats, &delivery),
        ];
        json_schema!({
            "description": "One sink: its name, its type and the type's settings, side by side.",
            "type": "object",
            "properties": {
                "name": {
                    "type": "string",
                    "description": "Unique name: metric label `sink`, log field, dead-letter queue and journal cursor name, and what `routes[].sinks` refers to. Matches `[a-z0-9][a-z0-9-]*`, at most 63 characters. Required. Example: `archive`."
                }
            },
            "required": ["name"],
            "oneOf": branches,
        })
    }
}

/// One type's branch: its configuration's schema, with `type` and the delivery keys it takes.
fn branch<C: Configure + JsonSchema>(
    generator: &mut SchemaGenerator,
    sink_type: SinkType,
    delivery: &Schema,
) -> Schema {
    let mut schema = C::json_schema(generator);
    let keys = sink_type.delivery_keys();
    if let Some(properties) = schema
        .ensure_object()
        .entry("properties")
        .or_insert_with(|| serde_json::json!({}))
        .as_object_mut()
    {
        properties.insert(
            "type".to_owned(),
            serde_json::json!({ "type": "string", "const": sink_type.as_str() }),
        );
        let shared = delivery
            .get("properties")
            .and_then(serde_json::Value::as_object);
        for (key, value) in shared.into_iter().flatten() {
            if keys.takes(key) {
                properties.insert(key.clone(), value.clone());
            }
        }
    }
    if let Some(required) = schema
        .ensure_object()
        .entry("required")
        .or_insert_with(|| serde_json::json!([]))
        .as_array_mut()
    {
        required.push("type".into());
    }
    schema
}

// ---------------------------------------------------------------------------------------------
// Deserialization.
//
// serde's internally tagged enums buffer the whole mapping before choosing the variant, and
// `serde_path_to_error` cannot see into the buffer: a typo inside a sink would be reported at
// `sinks[0]` instead of `sinks[0].fsyncIntervall`. So `SinkConfig` streams instead: once `type`
// is known, the type's crate reads the remaining keys (`config::read_sink`: its own, the delivery
// keys it takes, and `name` handed back here) through the path-tracking `MapAccess`.
// `config::parse` moves `type` to the front of every sink first; if it is not first (another
// caller), the mapping is buffered, `type` moved first, and read the same way with coarser error
// paths.
// ---------------------------------------------------------------------------------------------

/// `name`, the one key of a sink that is herald's rather than the sink's.
#[derive(Default)]
struct Common {
    name: Option<String>,
}

impl<'de> OtherKeys<'de> for Common {
    fn claims(&self, key: &str) -> bool {
        key == "name"
    }

    fn read<A: MapAccess<'de>>(&mut self, _key: &str, map: &mut A) -> Result<(), A::Error> {
        self.name = Some(map.next_value()?);
        Ok(())
    }
}

impl Common {
    fn finish<E: de::Error>(
        self,
        kind: SinkKind,
        delivery: DeliveryOptions,
    ) -> Result<SinkConfig, E> {
        Ok(SinkConfig {
            name: self.name.ok_or_else(|| E::missing_field("name"))?,
            delivery,
            kind,
        })
    }
}

impl<'de> Deserialize<'de> for SinkConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(SinkConfigVisitor(Common::default()))
    }
}

struct SinkConfigVisitor(Common);

impl<'de> Visitor<'de> for SinkConfigVisitor {
    type Value = SinkConfig;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sink: a mapping with name, type and the type's settings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SinkConfig, A::Error> {
        let mut common = self.0;
        loop {
            let Some(key) = map.next_key::<String>()? else {
                return Err(de::Error::missing_field("type"));
            };
            if key == "type" {
                break;
            }
            if !common.claims(&key) {
                return buffered(key, map, common);
            }
            common.read(&key, &mut map)?;
        }
        let (kind, delivery) = match map.next_value::<SinkType>()? {
            SinkType::File => read(&mut map, &mut common, SinkKind::File)?,
            SinkType::Webhook => read(&mut map, &mut common, SinkKind::Webhook)?,
            SinkType::Kafka => read(&mut map, &mut common, SinkKind::Kafka)?,
            SinkType::Nats => read(&mut map, &mut common, SinkKind::Nats)?,
        };
        common.finish(kind, delivery)
    }
}

/// The rest of the mapping as a sink of type `C`, wrapped in its variant.
fn read<'de, C, A>(
    map: &mut A,
    common: &mut Common,
    variant: fn(C) -> SinkKind,
) -> Result<(SinkKind, DeliveryOptions), A::Error>
where
    C: Configure + Deserialize<'de>,
    A: MapAccess<'de>,
{
    let (config, delivery) = read_sink(map, common)?;
    Ok((variant(config), delivery))
}

/// The slow path for a mapping whose first key other than `name` is not `type`: buffered, `type`
/// moved to the front, and read as above.
fn buffered<'de, A: MapAccess<'de>>(
    first: String,
    mut map: A,
    mut common: Common,
) -> Result<SinkConfig, A::Error> {
    let mut rest = serde_yaml_ng::Mapping::new();
    rest.insert(first.into(), map.next_value()?);
    while let Some(key) = map.next_key::<String>()? {
        if common.claims(&key) {
            common.read(&key, &mut map)?;
        } else {
            rest.insert(key.into(), map.next_value()?);
        }
    }
    let Some(sink_type) = rest.shift_remove("type") else {
        return Err(de::Error::missing_field("type"));
    };
    let mut reordered = serde_yaml_ng::Mapping::with_capacity(rest.len() + 1);
    reordered.insert("type".into(), sink_type);
    reordered.extend(rest);
    serde_yaml_ng::Value::Mapping(reordered)
        .deserialize_map(SinkConfigVisitor(common))
        .map_err(de::Error::custom)
}
