//! Routes: which sink gets which event, by resource and op. Entry point: [`Router`]. Without routes every
//! event goes to every sink.

use herald_sink_core::event::{CloudEvent, ExtensionValue};

use crate::event::Op;

/// One route: events of these resources and ops go to these sinks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Resource patterns: `*`, `plural.group`, `Kind.group`, or for the core group `plural` / `Kind`.
    pub resources: Vec<String>,
    /// Ops; empty means all.
    pub ops: Vec<Op>,
    /// Sink names.
    pub sinks: Vec<String>,
}

/// Decides, per sink, whether an event is for it.
#[derive(Debug, Clone, Default)]
pub struct Router {
    routes: Vec<Route>,
}

fn ext<'a>(event: &'a CloudEvent, name: &str) -> &'a str {
    match event.extensions.get(name) {
        Some(ExtensionValue::String(s)) => s,
        _ => "",
    }
}

fn op_of(event: &CloudEvent) -> Option<Op> {
    match event.ty.rsplit('.').next() {
        Some("created") => Some(Op::Created),
        Some("updated") => Some(Op::Updated),
        Some("deleted") => Some(Op::Deleted),
        _ => None,
    }
}

impl Router {
    /// A router over `routes` (none: everything to every sink).
    pub fn new(routes: Vec<Route>) -> Self {
        Self { routes }
    }

    /// Whether `sink` should get `event`.
    pub fn wants(&self, sink: &str, event: &CloudEvent) -> bool {
        if self.routes.is_empty() {
            return true;
        }
        let group = ext(event, "k8sgroup");
        let kind = ext(event, "k8skind");
        let plural = event.source.rsplit('/').next().unwrap_or("");
        let op = op_of(event);
        self.routes.iter().any(|r| {
            r.sinks.iter().any(|s| s == sink)
                && (r.ops.is_empty() || op.is_some_and(|o| r.ops.contains(&o)))
                && r.resources
                    .iter()
                    .any(|p| matches_resource(p, group, kind, plural))
        })
    }
}

fn matches_resource(pattern: &str, group: &str, kind: &str, plural: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    let (name, pattern_group) = pattern.split_once('.').unwrap_or((pattern, ""));
    pattern_group == group && (name == plural || name == kind)
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
                resources: vec!["databases.example.com".into()],
                ops: vec![Op::Deleted],
                sinks: vec!["audit".into()],
            },
            Route {
                resources: vec!["Release.ci.example.com".into(), "configmaps".into()],
                ops: vec![],
                sinks: vec!["ci".into()],
            },
            Route {
                resources: vec!["*".into()],
                ops: vec![Op::Created],
                sinks: vec!["all".into()],
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
}
