//! The `resources` section: which custom resources to watch and how their changes become events.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::filter::{FieldPath, When};

/// `kinds` entry that matches every kind of the group.
pub const ANY_KIND: &str = "*";

/// Default CloudEvent `type` prefix; the operation is appended (`dev.herald.resource.created`).
pub const DEFAULT_TYPE_PREFIX: &str = "dev.herald.resource";

/// One watched resource (`resources[]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResourceConfig {
    /// API group of the resource. `core` or `""` is the core group (stored as `""`, Kubernetes'
    /// spelling; events say `core`). Required. Example: `example.com`.
    pub group: String,
    /// API version to watch. Default: the group's preferred version, found by discovery. Changing
    /// it keeps event ids and sources, which carry no version. Example: `v1`.
    #[serde(default)]
    pub version: Option<String>,
    /// Kind of the resource. Give `kind`, `plural` or both; discovery fills in the other.
    /// Example: `Database`.
    #[serde(default)]
    pub kind: Option<String>,
    /// Plural resource name, as in the API path and the event `source`. Give `kind`, `plural` or
    /// both. Example: `databases`.
    #[serde(default)]
    pub plural: Option<String>,
    /// Instead of `kind`/`plural`: every custom resource of `group` (`["*"]`) or those of these
    /// kinds, as their CRDs are installed (one watcher and checkpoint each, the same as if each kind
    /// were configured alone); a deleted CRD's watcher stops once its objects' deletions are
    /// reported. Default: none. Example: `["*"]`.
    #[serde(default)]
    pub kinds: Option<Vec<String>>,
    /// Which namespaces to watch: `all`, `{selector: LABEL_SELECTOR}` (namespaces whose labels
    /// match), `{include: [GLOB], exclude: [GLOB]}` (namespace names matching the patterns, `*` and
    /// `?` wildcards; combinable with `selector`) or a list of names (one watch each, works with
    /// namespaced Roles). Ignored for cluster-scoped resources. Default `all`.
    /// Example: `{include: ["team-*"], exclude: ["kube-*"]}`.
    #[serde(default)]
    pub namespaces: Namespaces,
    /// Label selector, Kubernetes syntax; an event is emitted when the old or the new state
    /// matches. Default: none (every object). Example: `tier=gold,env in (prod,staging)`.
    #[serde(default)]
    pub label_selector: Option<String>,
    /// Field selector, Kubernetes syntax (the API server supports only a few fields, usually
    /// `metadata.name` and `metadata.namespace`). Default: none. Example: `metadata.name!=scratch`.
    #[serde(default)]
    pub field_selector: Option<String>,
    /// Which operations become events. Default: all three. Example: `[created, deleted]`.
    #[serde(default = "EventType::all")]
    pub events: Vec<EventType>,
    /// On first start without a checkpoint, whether existing objects are emitted (as `created`
    /// with `resync: true`) or skipped. Default `emit`. Example: `skip`.
    #[serde(default)]
    pub initial_state: InitialState,
    /// Drop `updated` events whose only change (against the recorded object) is under `/status`.
    /// Default `false`. Example: `true`.
    #[serde(default)]
    pub skip_status_only_updates: bool,
    /// Emit a change only when this CEL expression is true for it, evaluated before journaling
    /// with `object`, `oldObject` (the state herald recorded before; `null` on `created`), `op`,
    /// `resync`, `namespace` and `name`. A string, or `{expr: EXPR, onError: skip|emit}` (what a
    /// failed evaluation means; default `skip`). Default: none (every change).
    /// Example: `object.status.phase == 'Failed' && (oldObject == null || oldObject.status.phase != 'Failed')`.
    #[serde(default)]
    pub when: Option<When>,
    /// Emit an update only when one of these fields differs between the recorded and the new
    /// object (dotted keys, or JSON pointers for keys with dots). Created and deleted events are
    /// not affected. Default: none (any field). Example: `[spec, status.phase, metadata.labels]`.
    #[serde(default)]
    pub changed: Vec<FieldPath>,
    /// Fields whose changes alone never make an update (besides `metadata.resourceVersion` and
    /// `metadata.managedFields`, always ignored); they still appear in the event's object and
    /// patch when something else changed. Default: none. Example: `[status.lastHeartbeatTime]`.
    #[serde(default)]
    pub ignore_fields: Vec<FieldPath>,
    /// Which parts go into the event's `data`: a list of `object`, `oldObject`, `patch`, or the
    /// string `reference` (only `op` and `resync`). Default `[object, patch]`.
    /// Example: `[object, oldObject, patch]`.
    #[serde(default)]
    pub payload: PayloadParts,
    /// JSON pointers (RFC 6901) whose values are replaced by `"[redacted]"` in the recorded object,
    /// before the event (`object`, `oldObject`, `patch`) is built and before anything reaches disk.
    /// Default: none. Example: `[/spec/password, /data]`.
    #[serde(default)]
    pub redact: Vec<String>,
    /// Keep `metadata.managedFields`, which is stripped by default because it is large and
    /// rarely useful. Default `false`. Example: `true`.
    #[serde(default)]
    pub keep_managed_fields: bool,
    /// CloudEvent `type` prefix; the operation is appended. Reverse-DNS. Default
    /// `dev.herald.resource`. Example: `com.example.db` (gives `com.example.db.updated`).
    #[serde(default = "default_type_prefix")]
    pub type_prefix: String,
    /// What to do with an event larger than a sink's limit: `reference` sends the reference-only
    /// event with extension `truncated`, `deadLetter` dead-letters it. Default `reference`.
    /// Example: `deadLetter`.
    #[serde(default)]
    pub on_oversize: OnOversize,
}

fn default_type_prefix() -> String {
    DEFAULT_TYPE_PREFIX.to_owned()
}

/// A change operation: the last segment of the CloudEvent `type` and of the `id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum EventType {
    /// The object appeared (also the resync events of a first start or relist).
    Created,
    /// The object changed.
    Updated,
    /// The object was deleted (also deletions found by a relist).
    Deleted,
}

impl EventType {
    /// All three, in lifecycle order.
    pub const ALL: [Self; 3] = [Self::Created, Self::Updated, Self::Deleted];

    /// The default for `events` lists.
    pub(crate) fn all() -> Vec<Self> {
        Self::ALL.to_vec()
    }

    /// The spelling in configuration, ids and types: `created`, `updated`, `deleted`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Updated => "updated",
            Self::Deleted => "deleted",
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `initialState`: what a first start without a checkpoint does with existing objects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum InitialState {
    /// Emit each existing object as `created` with `resync: true`.
    #[default]
    Emit,
    /// Record existing objects silently; only later changes become events.
    Skip,
}

/// `onOversize`: what happens to an event larger than a sink's limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum OnOversize {
    /// Send the reference-only event (`data` = `{op, resync}`) with extension `truncated: "true"`.
    #[default]
    Reference,
    /// Put the event in the sink's dead-letter queue.
    DeadLetter,
}

/// `namespaces`: which namespaces a namespaced resource is watched in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Namespaces {
    /// `all`: one cluster-wide watch.
    #[default]
    All,
    /// `{selector: "team=payments"}`: one cluster-wide watch, kept to namespaces whose labels match.
    Selector {
        /// Label selector over the namespaces' labels.
        selector: String,
    },
    /// `{include: [GLOB], exclude: [GLOB], selector: …}`: one cluster-wide watch, kept to
    /// namespaces whose names match an `include` pattern (every name when `include` is empty), match
    /// no `exclude` pattern and, with `selector`, whose labels match it: all that are given.
    Patterns {
        /// Name patterns a namespace must match one of; empty: every namespace.
        include: Vec<String>,
        /// Name patterns a namespace must match none of.
        exclude: Vec<String>,
        /// Label selector over the namespaces' labels, when given.
        selector: Option<String>,
    },
    /// `[a, b]`: one watch (and checkpoint) per listed namespace.
    List(Vec<String>),
}

impl Namespaces {
    /// The label selector a namespace must match, if any.
    #[must_use]
    pub fn selector(&self) -> Option<&str> {
        match self {
            Self::Selector { selector } => Some(selector),
            Self::Patterns { selector, .. } => selector.as_deref(),
            Self::All | Self::List(_) => None,
        }
    }
}

/// Whether `name` matches the glob `pattern`: `*` stands for any run of characters (also none),
/// `?` for exactly one, everything else for itself.
#[must_use]
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative matching with one backtrack point (the last `*`): linear in practice, never
    // exponential whatever the pattern.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

impl<'de> Deserialize<'de> for Namespaces {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NamespacesVisitor)
    }
}

struct NamespacesVisitor;

impl<'de> Visitor<'de> for NamespacesVisitor {
    type Value = Namespaces;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The map form also takes `include`/`exclude` (see the docs); the short form keeps the
        // message users know.
        f.write_str("`all`, a list of namespaces, or {selector: LABEL_SELECTOR}")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Namespaces, E> {
        if v == "all" {
            Ok(Namespaces::All)
        } else {
            Err(E::invalid_value(de::Unexpected::Str(v), &self))
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Namespaces, A::Error> {
        let mut names = Vec::new();
        while let Some(name) = seq.next_element::<String>()? {
            names.push(name);
        }
        Ok(Namespaces::List(names))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Namespaces, A::Error> {
        let s = NamespaceFilter::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(match (s.selector, s.include, s.exclude) {
            (Some(selector), None, None) => Namespaces::Selector { selector },
            (None, None, None) => {
                return Err(de::Error::custom(
                    "give selector, include or exclude; write `all` for every namespace",
                ));
            }
            (selector, include, exclude) => Namespaces::Patterns {
                include: include.unwrap_or_default(),
                exclude: exclude.unwrap_or_default(),
                selector,
            },
        })
    }
}

/// The map form of `namespaces`: `{selector, include, exclude}`, each optional.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NamespaceFilter {
    #[serde(default)]
    selector: Option<String>,
    #[serde(default)]
    include: Option<Vec<String>>,
    #[serde(default)]
    exclude: Option<Vec<String>>,
}

impl JsonSchema for Namespaces {
    fn schema_name() -> Cow<'static, str> {
        "Namespaces".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "`all`, a list of namespace names, or {selector: LABEL_SELECTOR, include: [GLOB], exclude: [GLOB]}.",
            "oneOf": [
                { "const": "all" },
                { "type": "array", "items": { "type": "string" } },
                {
                    "type": "object",
                    "properties": {
                        "selector": {
                            "type": "string",
                            "description": "Label selector over namespace labels. Example: `team=payments`."
                        },
                        "include": {
                            "type": "array",
                            "items": { "type": "string" },
                            "description": "Namespace name patterns (`*`, `?`) to watch; omitted: every namespace. Example: `[team-*]`."
                        },
                        "exclude": {
                            "type": "array",
                            "items": { "type": "string" },
                            "description": "Namespace name patterns (`*`, `?`) never watched. Example: `[kube-*, herald]`."
                        }
                    },
                    "minProperties": 1,
                    "additionalProperties": false
                }
            ]
        })
    }
}

/// `payload`: which parts the event's `data` carries besides `op` and `resync`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadParts {
    /// `payload: reference`: no object parts, only `{op, resync}` and the extensions.
    Reference,
    /// `payload: [object, patch]`: these parts, in the order written, without repeats; never empty.
    Parts(Vec<PayloadPart>),
}

/// One entry of a `payload` list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PayloadPart {
    /// `object`: the new state (the last known state for `deleted`).
    Object,
    /// `oldObject`: the previous state herald recorded (opt-in: it doubles the size).
    OldObject,
    /// `patch`: the JSON Patch from the old to the new state (never on `created`).
    Patch,
}

impl PayloadParts {
    /// Whether this is the reference-only mode.
    #[must_use]
    pub fn is_reference(&self) -> bool {
        matches!(self, Self::Reference)
    }

    /// Whether `part` is included.
    #[must_use]
    pub fn includes(&self, part: PayloadPart) -> bool {
        match self {
            Self::Reference => false,
            Self::Parts(parts) => parts.contains(&part),
        }
    }
}

impl Default for PayloadParts {
    fn default() -> Self {
        Self::Parts(vec![PayloadPart::Object, PayloadPart::Patch])
    }
}

impl<'de> Deserialize<'de> for PayloadParts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PayloadVisitor)
    }
}

struct PayloadVisitor;

impl<'de> Visitor<'de> for PayloadVisitor {
    type Value = PayloadParts;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of object, oldObject, patch, or `reference`")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<PayloadParts, E> {
        if v == "reference" {
            Ok(PayloadParts::Reference)
        } else {
            Err(E::invalid_value(de::Unexpected::Str(v), &self))
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PayloadParts, A::Error> {
        let mut parts = Vec::new();
        while let Some(part) = seq.next_element::<PayloadPart>()? {
            if !parts.contains(&part) {
                parts.push(part);
            }
        }
        if parts.is_empty() {
            // `[]` reads like "nothing", which is not what reference-only events are; make it explicit.
            return Err(de::Error::custom(
                "empty list; write `reference` for reference-only events",
            ));
        }
        Ok(PayloadParts::Parts(parts))
    }
}

impl JsonSchema for PayloadParts {
    fn schema_name() -> Cow<'static, str> {
        "PayloadParts".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A list of object, oldObject, patch; or `reference`.",
            "oneOf": [
                { "const": "reference" },
                {
                    "type": "array",
                    "minItems": 1,
                    "items": { "enum": ["object", "oldObject", "patch"] }
                }
            ]
        })
    }
}
