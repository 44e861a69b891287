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
    /// `spec.scope` is `Namespaced`.
    pub namespaced: bool,
}

impl MatchedKind {
    /// The watcher's spec: the kind configured alone. A cluster-scoped kind is watched without a
    /// namespace (it has none), whatever namespace the pattern's spec is for.
    pub fn spec(&self, spec: &WatchSpec) -> WatchSpec {
        let mut s = spec.for_kind(&self.kind, &self.plural);
        if !self.namespaced {
            s.namespace = None;
        }
        s
    }

    /// The kind's journal stream, the one its watcher resolves (`<group>/<plural>/<namespace or *>`).
    pub fn stream(&self, spec: &WatchSpec) -> String {
        let ns = match (&spec.namespace, self.namespaced) {
            (Some(ns), true) => ns.as_str(),
            _ => "*",
        };
        format!("{}/{}/{ns}", spec.group, self.plural)
    }
}

/// The kinds of `crds` that `spec`, a group pattern, takes now, sorted by label: CRDs of its group,
/// of a listed kind (or any), serving the configured version (or any), established (the API server
/// serves the resource only then: a watcher started before would wait, keeping `/readyz` failing),
/// and not being deleted. With `namespaces: [a, b]`, cluster-scoped kinds are taken by the first
/// namespace's spec only (one watcher for them, not one per namespace on the same stream).
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
                && established(crd)
                && (s.scope == "Namespaced" || spec.namespace.is_none() || spec.namespace_lead)
                && s.versions
                    .iter()
                    .any(|v| v.served && spec.version.as_deref().is_none_or(|want| want == v.name))
        })
        .map(|crd| {
            let names = &crd.spec.names;
            let mut m = MatchedKind {
                kind: names.kind.clone(),
                plural: names.plural.clone(),
                label: String::new(),
                namespaced: crd.spec.scope == "Namespaced",
            };
            m.label = m.spec(spec).label();
            m
        })
        .collect();
    out.sort_by(|a, b| a.label.cmp(&b.label));
    out
}

/// Whether the CRD's `Established` condition is `True`.
fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::{self, Config};

    fn crd(
        group: &str,
        kind: &str,
        plural: &str,
        versions: &[(&str, bool)],
        deleting: bool,
    ) -> CustomResourceDefinition {
        let mut v = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural},
                     "versions": versions.iter().map(|(n, served)| json!({"name": n, "served": served, "storage": true})).collect::<Vec<_>>()}
        });
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        v["status"] = json!({"conditions": [{"type": "Established", "status": "True"}]});
        serde_json::from_value(v).unwrap()
    }

    fn pattern(extra: &str) -> WatchSpec {
        let yaml = format!(
            "resources:\n- {{group: example.com, {extra}}}\nsinks:\n- {{name: out, type: file, path: e.jsonl}}\n"
        );
        let cfg: Config = config::from_str(&yaml).unwrap();
        WatchSpec::from_config(&cfg).remove(0)
    }

    #[test]
    fn a_pattern_takes_served_kinds_of_its_group_not_being_deleted() {
        let crds = [
            crd("example.com", "Widget", "widgets", &[("v1", true)], false),
            crd(
                "example.com",
                "Gadget",
                "gadgets",
                &[("v1", false), ("v2", true)],
                false,
            ),
            crd("example.com", "Old", "olds", &[("v1", false)], false),
            crd("example.com", "Going", "goings", &[("v1", true)], true),
            crd("other.example", "Thing", "things", &[("v1", true)], false),
        ];
        let every = pattern("kinds: ['*']");
        assert_eq!(every.label(), "*.example.com");
        let labels: Vec<String> = matched_kinds(&every, &crds)
            .into_iter()
            .map(|m| m.label)
            .collect();
        assert_eq!(labels, ["gadgets.example.com", "widgets.example.com"]);

        let listed = pattern("kinds: [Widget, Thing]");
        let got = matched_kinds(&listed, &crds);
        assert_eq!(
            got,
            [MatchedKind {
                kind: "Widget".into(),
                plural: "widgets".into(),
                label: "widgets.example.com".into(),
                namespaced: true,
            }]
        );
        let v2 = pattern("kinds: ['*'], version: v2");
        let labels: Vec<String> = matched_kinds(&v2, &crds)
            .into_iter()
            .map(|m| m.label)
            .collect();
        assert_eq!(labels, ["gadgets.example.com"]);
    }

    #[test]
    fn a_matched_kind_is_the_kind_configured_alone() {
        let from_pattern =
            pattern("kinds: ['*'], namespaces: {exclude: [kube-*]}").for_kind("Widget", "widgets");
        let alone = pattern("kind: Widget, plural: widgets, namespaces: {exclude: [kube-*]}");
        assert_eq!(from_pattern, alone);
        assert_eq!(from_pattern.label(), "widgets.example.com");
        assert!(from_pattern.namespace_name_allowed("default"));
        assert!(!from_pattern.namespace_name_allowed("kube-system"));
    }

    #[test]
    fn a_crd_not_yet_established_is_not_taken() {
        let mut pending = crd("example.com", "Widget", "widgets", &[("v1", true)], false);
        let every = pattern("kinds: ['*']");
        assert_eq!(matched_kinds(&every, [&pending]).len(), 1);
        for status in [
            json!({"conditions": [{"type": "NamesAccepted", "status": "True"},
                                  {"type": "Established", "status": "False"}]}),
            json!({"conditions": [{"type": "NamesAccepted", "status": "True"}]}),
            json!({}),
        ] {
            pending.status = Some(serde_json::from_value(status).unwrap());
            assert_eq!(matched_kinds(&every, [&pending]), []);
        }
        pending.status = None;
        assert_eq!(matched_kinds(&every, [&pending]), []);
    }
}
