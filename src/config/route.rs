//! The `routes` section: which events go to which sinks.

use schemars::JsonSchema;
use serde::Deserialize;

use super::filter::When;
use super::resource::EventType;

/// `routes[].resources` entry that matches every resource.
pub const ANY_RESOURCE: &str = "*";

/// One route (`routes[]`). An event goes to every sink of every route it matches; without a
/// `routes` section, everything goes to every sink.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RouteConfig {
    /// Resources this route takes: `plural.group`, `Kind.group`, `plural` or `Kind` alone (or with
    /// `.core`) for the core group, `*.group` for every resource of a group, or `*` for all. Each must name a configured resource. After
    /// loading, core-group entries are written without a group (`configmaps`). Default `["*"]`.
    /// Example: `[databases.example.com, Backup.example.com]`.
    #[serde(default = "any_resource")]
    pub resources: Vec<String>,
    /// Operations this route takes. Default: all three. Example: `[deleted]`.
    #[serde(default = "EventType::all")]
    pub events: Vec<EventType>,
    /// Names of the sinks that receive the matching events. Required, not empty.
    /// Example: `[archive, audit]`.
    pub sinks: Vec<String>,
    /// Send an event to these sinks only when this CEL expression is true for it, evaluated on the
    /// journaled event: `object` and `oldObject` are the event's `data.object` and
    /// `data.oldObject`, so `oldObject` is `null` unless the resource's `payload` includes it.
    /// A string or `{expr: EXPR, onError: skip|emit}` (default `skip`). Default: none (every event).
    /// Example: `object.spec.tier == 'gold'`.
    #[serde(default)]
    pub when: Option<When>,
}

fn any_resource() -> Vec<String> {
    vec![ANY_RESOURCE.to_owned()]
}

/// Splits a `routes[].resources` entry into name and group (`""` for the core group); `None` for `*`.
pub(crate) fn split_resource(entry: &str) -> Result<Option<(&str, &str)>, String> {
    if entry == ANY_RESOURCE {
        return Ok(None);
    }
    let (name, group) = entry.split_once('.').unwrap_or((entry, ""));
    let group = if group == "core" { "" } else { group };
    // `*.example.com`: every resource of the group (a `kinds` pattern's, or any other's).
    let name_ok = (name == ANY_RESOURCE && !group.is_empty())
        || (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    let group_ok = group.is_empty() || super::validate::is_dns_subdomain(group);
    if !name_ok || !group_ok {
        return Err(format!(
            "invalid resource {entry:?}: expected plural.group (databases.example.com), \
             Kind.group (Database.example.com) or *"
        ));
    }
    Ok(Some((name, group)))
}
