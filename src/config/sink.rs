//! The `sinks` section: where events go. One [`SinkKind`] variant per sink crate; each crate owns
//! its keys, their docs and checks, and how it builds its sink (`herald_sink_core`'s
//! `config::SinkConfig`). What is left here is what no single sink can know: the entry's `name`,
//! the delivery keys read beside the sink's own, and the dispatch on `type`.

use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;

use herald_sink_core::config::{DeliveryKeys, DeliveryOptions, Problems, SinkConfig as Configure};
use herald_sink_file::FileConfig;
use herald_sink_kafka::KafkaConfig;
use herald_sink_nats::NatsConfig;
use herald_sink_webhook::WebhookConfig;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
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
// is known, `name` and the delivery keys the type takes are read here, and the remaining keys go
// straight to the type's configuration through the path-tracking `MapAccess`. A key neither
// takes is refused with every key the type accepts, as one struct would list them.
// `config::parse` moves `type` to the front of every sink first; if it is not first (another
// caller), the mapping is buffered, `type` moved first, and read the same way with coarser error
// paths.
// ---------------------------------------------------------------------------------------------

/// Keys every sink has, taken out before the rest reaches the type's configuration.
struct Common {
    name: Option<String>,
    /// Known once `type` has been read.
    keys: Option<DeliveryKeys>,
    delivery: DeliveryOptions,
}

impl Common {
    fn new() -> Self {
        Self {
            name: None,
            keys: None,
            delivery: DeliveryOptions::default(),
        }
    }

    /// Once `type` is known: the delivery keys it takes, at their defaults.
    fn set_type(&mut self, sink_type: SinkType) {
        let keys = sink_type.delivery_keys();
        self.keys = Some(keys);
        self.delivery = DeliveryOptions::new(keys);
    }

    /// Whether `key` is read here rather than by the type's configuration.
    fn is_common(&self, key: &str) -> bool {
        key == "name" || self.keys.is_some_and(|keys| keys.takes(key))
    }

    /// Deserializes the value of `key` if it is a common key; returns whether it was.
    fn take<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        if key == "name" {
            self.name = Some(map.next_value()?);
            return Ok(true);
        }
        match self.keys {
            Some(keys) => self.delivery.read(keys, key, map),
            None => Ok(false),
        }
    }

    fn finish<E: de::Error>(self, kind: SinkKind) -> Result<SinkConfig, E> {
        Ok(SinkConfig {
            name: self.name.ok_or_else(|| E::missing_field("name"))?,
            delivery: self.delivery,
            kind,
        })
    }
}

impl<'de> Deserialize<'de> for SinkConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(SinkConfigVisitor(Common::new()))
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
            if !common.take(&key, &mut map)? {
                return buffered(key, map, common);
            }
        }
        let sink_type: SinkType = map.next_value()?;
        common.set_type(sink_type);
        let kind = {
            let rest = Rest {
                map: &mut map,
                common: &mut common,
                fields: None,
            };
            match sink_type {
                SinkType::File => SinkKind::File(FileConfig::deserialize(rest)?),
                SinkType::Webhook => SinkKind::Webhook(WebhookConfig::deserialize(rest)?),
                SinkType::Kafka => SinkKind::Kafka(KafkaConfig::deserialize(rest)?),
                SinkType::Nats => SinkKind::Nats(NatsConfig::deserialize(rest)?),
            }
        };
        common.finish(kind)
    }
}

/// The keys after `type`, minus the common ones; a deserializer for the type's configuration.
struct Rest<'a, A> {
    map: &'a mut A,
    common: &'a mut Common,
    /// The configuration's own keys, as its derived `Deserialize` announces them.
    fields: Option<&'static [&'static str]>,
}

impl<'de, A: MapAccess<'de>> Deserializer<'de> for Rest<'_, A> {
    type Error = A::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, A::Error> {
        visitor.visit_map(self)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        mut self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.fields = Some(fields);
        visitor.visit_map(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
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
            let key_seed = CommonOr {
                seed,
                common: &*self.common,
                fields: self.fields,
            };
            match self.map.next_key_seed(key_seed)? {
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

/// A key seed that recognizes the common keys, refuses keys nobody takes, and hands every other
/// key to the configuration's seed.
struct CommonOr<'a, K> {
    seed: K,
    common: &'a Common,
    fields: Option<&'static [&'static str]>,
}

enum KeyOr<K, V> {
    Key(V),
    /// A common key, with the unused seed handed back.
    Common(String, K),
}

impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for CommonOr<'_, K> {
    type Value = KeyOr<K, K::Value>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, K: DeserializeSeed<'de>> Visitor<'de> for CommonOr<'_, K> {
    type Value = KeyOr<K, K::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        if self.common.is_common(v) {
            return Ok(KeyOr::Common(v.to_owned(), self.seed));
        }
        if let (Some(fields), Some(keys)) = (self.fields, self.common.keys)
            && !fields.contains(&v)
        {
            return Err(unknown_field(v, &keys.listed(fields)));
        }
        let key: de::value::StrDeserializer<'_, E> = de::IntoDeserializer::into_deserializer(v);
        self.seed.deserialize(key).map(KeyOr::Key)
    }
}

/// serde's unknown-field message, listing every key the type accepts (its own and the delivery
/// keys it takes), so the message reads as it would for one struct holding them all.
fn unknown_field<E: de::Error>(field: &str, expected: &[&str]) -> E {
    let quoted: Vec<String> = expected.iter().map(|key| format!("`{key}`")).collect();
    match quoted.as_slice() {
        [] => E::custom(format_args!("unknown field `{field}`, there are no fields")),
        [one] => E::custom(format_args!("unknown field `{field}`, expected {one}")),
        [a, b] => E::custom(format_args!("unknown field `{field}`, expected {a} or {b}")),
        all => E::custom(format_args!(
            "unknown field `{field}`, expected one of {}",
            all.join(", ")
        )),
    }
}

/// The slow path for a mapping whose first non-common key is not `type`: buffered, `type` moved
/// to the front, and read as above.
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
