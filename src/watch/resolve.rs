//! Discovery of what a configured resource is: plural, kind, scope and version.

use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{Discovery, Scope};

use super::WatchSpec;
use crate::event;

/// A configured resource as the API server serves it.
#[derive(Clone)]
pub struct Resolved {
    /// The client the watcher uses.
    pub client: kube::Client,
    /// Group, version, kind and plural as served.
    pub api_resource: ApiResource,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// The namespace this watcher is limited to (`None`: all, or cluster-scoped).
    pub namespace: Option<String>,
    /// The journal stream: `<group>/<plural>/<namespace or *>`. No version, so a version change keeps
    /// the checkpoint and the index.
    pub stream: String,
    /// The normalizer's view, names filled in.
    pub resource: event::Resource,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved")
            .field("resource", &self.display())
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl Resolved {
    /// `databases.example.com/v1` plus the namespace when limited, for logs.
    pub fn display(&self) -> String {
        let ar = &self.api_resource;
        let base = if ar.group.is_empty() {
            format!("{}/{}", ar.plural, ar.version)
        } else {
            format!("{}.{}/{}", ar.plural, ar.group, ar.version)
        };
        match &self.namespace {
            Some(ns) => format!("{base} in {ns}"),
            None => base,
        }
    }

    /// The API for this watcher's scope.
    pub fn api(&self, client: kube::Client) -> Api<DynamicObject> {
        match (&self.namespace, self.namespaced) {
            (Some(ns), true) => Api::namespaced_with(client, ns, &self.api_resource),
            _ => Api::all_with(client, &self.api_resource),
        }
    }
}

/// Finds the resource; `Ok(None)` while no API serves it (its CRD is not installed yet).
pub async fn resolve(
    client: &kube::Client,
    spec: &WatchSpec,
) -> Result<Option<Resolved>, kube::Error> {
    let discovery = Discovery::new(client.clone())
        .filter(&[spec.group.as_str()])
        .run()
        .await?;
    let Some(group) = discovery.groups().find(|g| g.name() == spec.group) else {
        return Ok(None);
    };
    let versions: Vec<String> = match &spec.version {
        Some(v) => vec![v.clone()],
        None => {
            let preferred = group.preferred_version_or_latest().to_string();
            let mut all: Vec<String> = group.versions().map(str::to_string).collect();
            all.retain(|v| *v != preferred);
            all.insert(0, preferred);
            all
        }
    };
    for version in versions {
        for (ar, caps) in group.versioned_resources(&version) {
            let kind_ok = spec.kind.as_deref().is_none_or(|k| k == ar.kind);
            let plural_ok = spec.plural.as_deref().is_none_or(|p| p == ar.plural);
            if !(kind_ok && plural_ok) || ar.plural.contains('/') {
                continue;
            }
            let namespaced = caps.scope == Scope::Namespaced;
            let namespace = if namespaced {
                spec.namespace.clone()
            } else {
                None
            };
            let group_name = if ar.group.is_empty() {
                "core".to_string()
            } else {
                ar.group.clone()
            };
            let stream = format!(
                "{group_name}/{}/{}",
                ar.plural,
                namespace.as_deref().unwrap_or("*")
            );
            let resource = event::Resource {
                group: ar.group.clone(),
                version: ar.version.clone(),
                kind: ar.kind.clone(),
                plural: ar.plural.clone(),
                namespaced,
                ..spec.template.clone()
            };
            let api_resource = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(&ar.group, &ar.version, &ar.kind),
                &ar.plural,
            );
            return Ok(Some(Resolved {
                client: client.clone(),
                api_resource,
                namespaced,
                namespace,
                stream,
                resource,
            }));
        }
    }
    Ok(None)
}

/// Why a configured resource is not served, naming the configuration path: `resources[1].kind: unknown
/// kind "Databse" in group example.com`.
pub fn unserved(spec: &WatchSpec) -> String {
    let group = if spec.group.is_empty() {
        "core"
    } else {
        spec.group.as_str()
    };
    let at = format!("resources[{}]", spec.index);
    let what = match (&spec.kind, &spec.plural) {
        (Some(kind), _) => format!("{at}.kind: unknown kind {kind:?} in group {group}"),
        (None, Some(plural)) => {
            format!("{at}.plural: unknown resource {plural:?} in group {group}")
        }
        (None, None) => format!("{at}: no kind or plural"),
    };
    match &spec.version {
        Some(v) => format!("{what}, version {v}"),
        None => what,
    }
}
