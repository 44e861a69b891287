//! Which kinds a group pattern (`group` with `kinds`) takes, given the cluster's
//! CustomResourceDefinitions: used by the running pattern and by `herald check --connect`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use super::WatchSpec;

/// One kind a group pattern takes, as its CRD names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchedKind {
    /// `spec.names.kind`.
    pub kind: String,
    /// `spec.names.plural`.
    pub plural: String,
    /// The watcher's label, the same as if the kind were configured alone.
    pub label: String,
}

/// The kinds of `crds` that `spec`, a group pattern, takes now, sorted by label: CRDs of its group,
/// of a listed kind (or any), serving the configured version (or any), and not being deleted.
pub fn matched_kinds<'a>(
    spec: &WatchSpec,
    crds: impl IntoIterator<Item = &'a CustomResourceDefinition>,
) -> Vec<MatchedKind> {
    let mut out: Vec<MatchedKind> = crds
        .into_iter()
        .filter(|crd| {
            let s = &crd.spec;
            s.group == spec.group
                && spec.takes_kind(&s.names.kind)
                && crd.metadata.deletion_timestamp.is_none()
                && s.versions
                    .iter()
                    .any(|v| v.served && spec.version.as_deref().is_none_or(|want| want == v.name))
        })
        .map(|crd| {
            let names = &crd.spec.names;
            MatchedKind {
                kind: names.kind.clone(),
                plural: names.plural.clone(),
                label: spec.for_kind(&names.kind, &names.plural).label(),
            }
        })
        .collect();
    out.sort_by(|a, b| a.label.cmp(&b.label));
    out
}
