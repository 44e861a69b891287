//! What one watcher watches ([`WatchSpec`]), and how a configuration's `resources` become them:
//! [`WatchSpec::from_config`]. One `resources[i]` entry becomes one spec, or one per listed namespace.

use crate::config::{self, Config, Namespaces, ResourceConfig};
use crate::event::{self, Op};

/// What to watch, resolved from one `resources[i]` entry (and one namespace of its list).
#[derive(Debug, Clone, PartialEq)]
pub struct WatchSpec {
    /// Position in `resources`, for messages (`resources[1]`).
    pub index: usize,
    /// API group.
    pub group: String,
    /// Version; `None` for the group's preferred version.
    pub version: Option<String>,
    /// Kind, if configured.
    pub kind: Option<String>,
    /// Plural, if configured.
    pub plural: Option<String>,
    /// Watch only this namespace (`namespaces: [a, b]` gives one watcher each); `None` for all.
    pub namespace: Option<String>,
    /// The first (or only) spec of its `resources` entry: with `namespaces: [a, b]`, the one of `a`.
    /// A group pattern starts the cluster-scoped kinds it finds from this spec only (they live in
    /// no namespace: one watcher, not one per listed namespace on the same stream).
    pub namespace_lead: bool,
    /// Only namespaces whose labels match (one cluster-wide watch, filtered here).
    pub namespace_selector: Option<String>,
    /// Only namespaces whose names match one of these globs (empty: every name).
    pub namespace_include: Vec<String>,
    /// Never namespaces whose names match one of these globs.
    pub namespace_exclude: Vec<String>,
    /// `kinds` of a group pattern (`["*"]` or kind names): this spec stands for a set of watchers,
    /// one per matching CRD, which the group watcher starts and stops ([`WatchSpec::for_kind`]).
    pub kinds: Option<Vec<String>>,
    /// Server-side label selector.
    pub label_selector: Option<String>,
    /// Server-side field selector.
    pub field_selector: Option<String>,
    /// Which ops become events (the index is kept for all of them).
    pub ops: Vec<Op>,
    /// First start without a checkpoint: emit the current state as `created` with `resync`, or not.
    pub initial_emit: bool,
    /// Skip updates whose only change is `status`.
    pub skip_status_only_updates: bool,
    /// Emit only the changes this expression is true for.
    pub when: Option<config::When>,
    /// Emit only updates that change one of these fields (none: any field).
    pub changed: Vec<config::FieldPath>,
    /// Fields whose changes alone are no update (besides resourceVersion and managedFields).
    pub ignore_fields: Vec<config::FieldPath>,
    /// Everything the normalizer needs but the resolved names.
    pub template: event::Resource,
}

impl WatchSpec {
    /// The watchers a configuration's `resources` need: one per entry, or one per listed namespace.
    pub fn from_config(cfg: &Config) -> Vec<Self> {
        let mut out = Vec::new();
        for (index, r) in cfg.resources.iter().enumerate() {
            let base = Self {
                index,
                group: r.group.clone(),
                version: r.version.clone(),
                kind: r.kind.clone(),
                plural: r.plural.clone(),
                namespace: None,
                namespace_lead: true,
                namespace_selector: None,
                namespace_include: Vec::new(),
                namespace_exclude: Vec::new(),
                kinds: r.kinds.clone(),
                label_selector: r.label_selector.clone().filter(|s| !s.is_empty()),
                field_selector: r.field_selector.clone().filter(|s| !s.is_empty()),
                ops: r.events.iter().copied().map(Op::from).collect(),
                initial_emit: r.initial_state == config::InitialState::Emit,
                skip_status_only_updates: r.skip_status_only_updates,
                when: r.when.clone(),
                changed: r.changed.clone(),
                ignore_fields: r.ignore_fields.clone(),
                template: template(&cfg.cluster.name, r),
            };
            match &r.namespaces {
                Namespaces::All => out.push(base),
                Namespaces::Selector { selector } => out.push(Self {
                    namespace_selector: Some(selector.clone()),
                    ..base
                }),
                Namespaces::Patterns {
                    include,
                    exclude,
                    selector,
                } => out.push(Self {
                    namespace_selector: selector.clone(),
                    namespace_include: include.clone(),
                    namespace_exclude: exclude.clone(),
                    ..base
                }),
                Namespaces::List(list) => out.extend(list.iter().enumerate().map(|(i, ns)| Self {
                    namespace: Some(ns.clone()),
                    namespace_lead: i == 0,
                    ..base.clone()
                })),
            }
        }
        out
    }

    /// Whether a namespace's name passes `namespaces.include`/`exclude` (the selector, over its
    /// labels, is asked separately).
    pub fn namespace_name_allowed(&self, namespace: &str) -> bool {
        let included = self.namespace_include.is_empty()
            || self
                .namespace_include
                .iter()
                .any(|p| config::glob_match(p, namespace));
        included
            && !self
                .namespace_exclude
                .iter()
                .any(|p| config::glob_match(p, namespace))
    }

    /// The spec of one kind a group pattern matched: the same as if that kind had been configured
    /// alone, so its label, journal stream and checkpoint are that resource's own.
    pub fn for_kind(&self, kind: &str, plural: &str) -> Self {
        let mut template = self.template.clone();
        kind.clone_into(&mut template.kind);
        plural.clone_into(&mut template.plural);
        Self {
            kind: Some(kind.to_owned()),
            plural: Some(plural.to_owned()),
            kinds: None,
            template,
            ..self.clone()
        }
    }

    /// Whether the group pattern takes this kind.
    pub fn takes_kind(&self, kind: &str) -> bool {
        self.kinds
            .as_ref()
            .is_some_and(|ks| ks.iter().any(|k| k == config::ANY_KIND || k == kind))
    }

    /// The watcher's name in metrics, `/status` and the supervisor: `plural.group` (or `Kind.group`),
    /// plus `/namespace` when limited to one; `*.group` for a group pattern.
    pub fn label(&self) -> String {
        let name = if self.kinds.is_some() {
            config::ANY_KIND
        } else {
            self.plural
                .as_deref()
                .or(self.kind.as_deref())
                .unwrap_or("")
        };
        let base = if self.group.is_empty() {
            name.to_string()
        } else {
            format!("{name}.{}", self.group)
        };
        match &self.namespace {
            Some(ns) => format!("{base}/{ns}"),
            None => base,
        }
    }
}

/// Everything the normalizer needs of a resource but the names discovery resolves.
fn template(cluster: &str, r: &ResourceConfig) -> event::Resource {
    let payload = match &r.payload {
        config::PayloadParts::Reference => event::Payload::REFERENCE,
        config::PayloadParts::Parts(parts) => event::Payload {
            object: parts.contains(&config::PayloadPart::Object),
            old_object: parts.contains(&config::PayloadPart::OldObject),
            patch: parts.contains(&config::PayloadPart::Patch),
        },
    };
    event::Resource {
        cluster: cluster.to_owned(),
        group: r.group.clone(),
        version: r.version.clone().unwrap_or_default(),
        kind: r.kind.clone().unwrap_or_default(),
        plural: r.plural.clone().unwrap_or_default(),
        namespaced: true,
        type_prefix: r.type_prefix.clone(),
        payload,
        redact: r.redact.clone(),
        keep_managed_fields: r.keep_managed_fields,
    }
}
