//! Routes: which sink gets which event, by resource and op. Entry point: [`Router`]. Without routes every
//! event goes to every sink.
//!
//! The router is shared by every delivery loop and the admin endpoint, and its routes can be replaced
//! while they run ([`Router::replace`]): a reloaded configuration changes routing without restarting a
//! sink. Each delivery asks as it reads events from the journal, a window ahead of sending, so a
//! replacement applies to the events read after it; up to a window of events already read go as the
//! old routes said.
//!
//! A route's `when` is evaluated here, on the journaled event: `object` and `oldObject` are what
//! its `data` carries, so `oldObject` is `null` unless the resource's payload includes it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use herald_sink_core::Journaled;
use herald_sink_core::event::{CloudEvent, ExtensionValue};

use crate::config::{self, OnError, RouteConfig, When};
use crate::event::Op;
use crate::event::filter::Vars;

/// How many (route, object) pairs the router remembers having logged a failed `when` for.
const LOGGED_MAX: usize = 10_000;

/// One route: events of these resources and ops go to these sinks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The resources whose events this route carries.
    pub resources: Vec<ResourcePattern>,
    /// Ops; empty means all.
    pub ops: Vec<Op>,
    /// Sink names.
    pub sinks: Vec<String>,
    /// Only events this expression is true for.
    pub when: Option<When>,
}

impl Route {
    /// The route a validated `routes[]` entry describes.
    ///
    /// # Errors
    /// A resource entry that is not `*`, `plural.group` or `Kind.group` (validation refuses those
    /// first, so this only fails for a configuration that skipped it).
    pub fn from_config(route: &RouteConfig) -> Result<Self, String> {
        Ok(Self {
            resources: route
                .resources
                .iter()
                .map(|r| r.parse())
                .collect::<Result<_, _>>()?,
            ops: route.events.iter().copied().map(Op::from).collect(),
            sinks: route.sinks.clone(),
            when: route.when.clone(),
        })
    }
}

/// Which resources something applies to: `*`, or one resource by plural or kind within its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourcePattern {
    /// `*`: every resource.
    Any,
    /// `plural.group` or `Kind.group` (the core group is `""`; `pods.core` and `pods` are the same),
    /// or `*.group`: every resource of the group.
    Named {
        /// The API group, `""` for the core group.
        group: String,
        /// The plural or the kind, or `*` for any; an event matches when either equals it.
        name: String,
    },
}

impl std::str::FromStr for ResourcePattern {
    type Err = String;

    fn from_str(entry: &str) -> Result<Self, String> {
        Ok(match config::split_resource(entry)? {
            None => Self::Any,
            Some((name, group)) => Self::Named {
                group: group.to_owned(),
                name: name.to_owned(),
            },
        })
    }
}

impl ResourcePattern {
    /// The patterns naming one configured resource: by its plural and by its kind, whichever it gives.
    pub fn of_resource(resource: &config::ResourceConfig) -> Vec<Self> {
        if let Some(kinds) = &resource.kinds {
            // A group pattern's kinds are only known at run time; their plurals are not known here.
            let every = kinds.iter().any(|k| k == config::ANY_KIND);
            return if every {
                vec![Self::Named {
                    group: resource.group.clone(),
                    name: config::ANY_RESOURCE.to_owned(),
                }]
            } else {
                kinds
                    .iter()
                    .map(|k| Self::Named {
                        group: resource.group.clone(),
                        name: k.clone(),
                    })
                    .collect()
            };
        }
        [&resource.plural, &resource.kind]
            .into_iter()
            .flatten()
            .map(|name| Self::Named {
                group: resource.group.clone(),
                name: name.clone(),
            })
            .collect()
    }

    /// Whether `event` is about a resource this pattern names.
    pub fn matches(&self, event: &(impl Routed + ?Sized)) -> bool {
        match self {
            Self::Any => true,
            Self::Named { group, name } => {
                let (source_group, plural) = group_and_plural(event);
                source_group == group
                    && (name == config::ANY_RESOURCE
                        || name == plural
                        || name == ext(event, "k8skind"))
            }
        }
    }
}

/// Decides, per sink, whether an event is for it.
#[derive(Debug, Default)]
pub struct Router {
    // Read per event by every delivery loop, written only when routes are replaced; the `Arc` keeps
    // the read side to one uncontended lock and a reference-count bump.
    routes: RwLock<Arc<Vec<Route>>>,
    /// (route index, object) pairs whose failed `when` was logged: logged once, counted always.
    logged: Mutex<HashSet<(usize, String)>>,
}

/// What routing reads of an event's attributes: `type` (the op), `source` and extensions (the
/// resource). An event read from the journal answers from its stored bytes
/// ([`Journaled::read_lazily`]), so routing it decodes no attribute it does not read.
pub trait Routed {
    /// The `type` attribute.
    fn ty(&self) -> &str;
    /// The `source` attribute.
    fn source(&self) -> &str;
    /// The extension `name` when it is a string.
    fn extension(&self, name: &str) -> Option<&str>;
}

impl Routed for CloudEvent {
    fn ty(&self) -> &str {
        &self.ty
    }
    fn source(&self) -> &str {
        &self.source
    }
    fn extension(&self, name: &str) -> Option<&str> {
        self.extensions.get(name).and_then(ExtensionValue::as_str)
    }
}

impl Routed for Journaled {
    fn ty(&self) -> &str {
        Journaled::ty(self)
    }
    fn source(&self) -> &str {
        Journaled::source(self)
    }
    fn extension(&self, name: &str) -> Option<&str> {
        // Only a pattern that names a kind gets here (after the plural did not match).
        self.attributes().extension(name)
    }
}

fn ext<'a>(event: &'a (impl Routed + ?Sized), name: &str) -> &'a str {
    event.extension(name).unwrap_or("")
}

/// The group (`""` for core) and plural of the event's resource, from its `source`
/// (`k8s://cluster/group/plural`), which every event carries by contract.
fn group_and_plural(event: &(impl Routed + ?Sized)) -> (&str, &str) {
    let mut segments = event.source().rsplit('/');
    let plural = segments.next().unwrap_or("");
    let group = match segments.next() {
        Some("core") | None => "",
        Some(group) => group,
    };
    (group, plural)
}

fn op_of(event: &(impl Routed + ?Sized)) -> Option<Op> {
    match event.ty().rsplit('.').next() {
        Some("created") => Some(Op::Created),
        Some("updated") => Some(Op::Updated),
        Some("deleted") => Some(Op::Deleted),
        _ => None,
    }
}

impl Router {
    /// A router over `routes` (none: everything to every sink).
    pub fn new(routes: Vec<Route>) -> Self {
        Self {
            routes: RwLock::new(Arc::new(routes)),
            logged: Mutex::default(),
        }
    }

    /// The router of a configuration's validated `routes`.
    ///
    /// # Errors
    /// The first route whose resources do not parse, named by its index.
    pub fn from_config(routes: &[RouteConfig]) -> Result<Self, String> {
        Ok(Self::new(routes_from_config(routes)?))
    }

    /// Replaces every route; deliveries apply them to the events they read from now on.
    pub fn replace(&self, routes: Vec<Route>) {
        *self.routes.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(routes);
    }

    /// The routes in force.
    pub fn routes(&self) -> Arc<Vec<Route>> {
        self.routes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether `sink` should get `event`.
    pub fn wants(&self, sink: &str, event: &CloudEvent) -> bool {
        self.wants_counting(sink, event, None)
    }

    /// [`Router::wants`], counting the route `when` evaluations that fail in `errors`.
    pub fn wants_counting(
        &self,
        sink: &str,
        event: &CloudEvent,
        errors: Option<&AtomicU64>,
    ) -> bool {
        self.wants_lazily(sink, event, || event, errors)
    }

    /// [`Router::wants_counting`] for an event whose `data` may still be unparsed (and whose
    /// attributes may still be in its stored bytes): `attributes` decide resource and op, and `whole` (the event with `data`) is asked for only when a `when`
    /// of a route for this sink, op and resource is evaluated. One snapshot of the routes decides,
    /// so a replacement cannot land between reading the attributes and reading `data`.
    pub fn wants_lazily<'a>(
        &self,
        sink: &str,
        attributes: &(impl Routed + ?Sized),
        whole: impl Fn() -> &'a CloudEvent,
        errors: Option<&AtomicU64>,
    ) -> bool {
        let routes = self.routes();
        if routes.is_empty() {
            return true;
        }
        let op = op_of(attributes);
        routes.iter().enumerate().any(|(i, r)| {
            r.sinks.iter().any(|s| s == sink)
                && (r.ops.is_empty() || op.is_some_and(|o| r.ops.contains(&o)))
                && r.resources.iter().any(|p| p.matches(attributes))
                && r.when
                    .as_ref()
                    .is_none_or(|w| self.passes(i, w, op, whole(), errors))
        })
    }

    /// Whether route `index`'s `when` is true for `event`; a failed evaluation follows `onError`.
    fn passes(
        &self,
        index: usize,
        when: &When,
        op: Option<Op>,
        event: &CloudEvent,
        errors: Option<&AtomicU64>,
    ) -> bool {
        let data = event.data.as_ref();
        let part = |name: &str| data.and_then(|d| d.get(name)).filter(|v| !v.is_null());
        let result = match op {
            Some(op) => when.evaluate(&Vars {
                object: part("object"),
                old_object: part("oldObject"),
                op,
                resync: matches!(
                    event.extensions.get("resync"),
                    Some(ExtensionValue::Bool(true))
                ),
                namespace: ext(event, "k8snamespace"),
                name: ext(event, "k8sname"),
            }),
            None => Err(crate::event::filter::EvalError::new(format!(
                "the event type {:?} names no operation",
                event.ty
            ))),
        };
        match result {
            Ok(pass) => pass,
            Err(error) => {
                if let Some(errors) = errors {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                let object = event.partition_key().unwrap_or(&event.id).to_owned();
                let first = {
                    let mut logged = self.logged.lock().unwrap_or_else(PoisonError::into_inner);
                    if logged.len() >= LOGGED_MAX {
                        logged.clear();
                    }
                    logged.insert((index, object.clone()))
                };
                if first {
                    tracing::warn!(
                        message = "A route's `when` expression failed on an event; onError decides (logged once per object).",
                        route = index,
                        id = %event.id,
                        %object,
                        on_error = ?when.on_error,
                        %error,
                    );
                }
                when.on_error == OnError::Emit
            }
        }
    }
}

/// The routes of a configuration's validated `routes`.
///
/// # Errors
/// The first route whose resources do not parse, named by its index.
pub fn routes_from_config(routes: &[RouteConfig]) -> Result<Vec<Route>, String> {
    routes
        .iter()
        .enumerate()
        .map(|(i, r)| Route::from_config(r).map_err(|e| format!("routes[{i}].resources: {e}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(group: &str, kind: &str, plural: &str, op: &str) -> CloudEvent {
        CloudEvent::new(
            "id",
            format!(
                "k8s://c/{}/{plural}",
                if group.is_empty() { "core" } else { group }
            ),
            format!("dev.herald.resource.{op}"),
        )
        .extension("k8sgroup", ExtensionValue::String(group.into()))
        .extension("k8skind", ExtensionValue::String(kind.into()))
    }

    #[test]
    fn no_routes_means_everything_everywhere() {
        assert!(Router::default().wants(
            "any",
            &event("example.com", "Database", "databases", "created")
        ));
    }

    #[test]
    fn routes_match_by_plural_or_kind_group_and_op() {
        let r = Router::new(vec![
            Route {
                resources: vec!["databases.example.com".parse().unwrap()],
                ops: vec![Op::Deleted],
                sinks: vec!["audit".into()],
                when: None,
            },
            Route {
                resources: vec![
                    "Release.ci.example.com".parse().unwrap(),
                    "configmaps".parse().unwrap(),
                ],
                ops: vec![],
                sinks: vec!["ci".into()],
                when: None,
            },
            Route {
                resources: vec![ResourcePattern::Any],
                ops: vec![Op::Created],
                sinks: vec!["all".into()],
                when: None,
            },
        ]);
        let db_deleted = event("example.com", "Database", "databases", "deleted");
        assert!(r.wants("audit", &db_deleted));
        assert!(!r.wants(
            "audit",
            &event("example.com", "Database", "databases", "updated")
        ));
        assert!(!r.wants("ci", &db_deleted));
        assert!(r.wants(
            "ci",
            &event("ci.example.com", "Release", "releases", "updated")
        ));
        assert!(r.wants("ci", &event("", "ConfigMap", "configmaps", "created")));
        assert!(r.wants("all", &event("x.io", "Thing", "things", "created")));
        assert!(!r.wants("all", &db_deleted));
        assert!(!r.wants("nobody", &db_deleted));
    }

    #[test]
    fn the_core_group_may_be_spelled_core() {
        let r = Router::new(vec![Route {
            resources: vec!["configmaps.core".parse().unwrap()],
            ops: vec![],
            sinks: vec!["s".into()],
            when: None,
        }]);
        assert!(r.wants("s", &event("", "ConfigMap", "configmaps", "created")));
        assert!(!r.wants("s", &event("x.io", "ConfigMap", "configmaps", "created")));
    }

    #[test]
    fn replaced_routes_apply_to_the_next_question() {
        let r = Router::default();
        let db = event("example.com", "Database", "databases", "created");
        assert!(r.wants("archive", &db));
        r.replace(vec![Route {
            resources: vec![ResourcePattern::Any],
            ops: vec![Op::Deleted],
            sinks: vec!["archive".into()],
            when: None,
        }]);
        assert!(!r.wants("archive", &db));
        r.replace(Vec::new());
        assert!(r.wants("archive", &db));
    }
    #[test]
    fn data_is_read_only_for_a_when_of_this_sink_op_and_resource() {
        let r = Router::new(vec![
            Route {
                resources: vec![ResourcePattern::Any],
                ops: vec![],
                sinks: vec!["plain".into()],
                when: None,
            },
            Route {
                resources: vec!["things.x.io".parse().unwrap()],
                ops: vec![Op::Created],
                sinks: vec!["picky".into()],
                when: Some(When::new("object.spec.on == true", OnError::Skip)),
            },
        ]);
        let attributes = event("x.io", "Thing", "things", "created");
        let whole = attributes
            .clone()
            .data(serde_json::json!({"object": {"spec": {"on": true}}}));
        let reads = std::cell::Cell::new(0);
        let lazily = |sink: &str, attributes: &CloudEvent| {
            r.wants_lazily(
                sink,
                attributes,
                || {
                    reads.set(reads.get() + 1);
                    &whole
                },
                None,
            )
        };
        assert!(lazily("plain", &attributes));
        assert!(!lazily(
            "picky",
            &event("x.io", "Thing", "things", "deleted")
        ));
        assert!(!lazily(
            "picky",
            &event("y.io", "Thing", "things", "created")
        ));
        assert_eq!(
            reads.get(),
            0,
            "no `when` of these sinks, ops or resources ran"
        );
        assert!(lazily("picky", &attributes), "`when` sees the data");
        assert_eq!(reads.get(), 1);
    }
}
