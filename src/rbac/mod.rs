//! The Kubernetes RBAC a configuration needs (`herald rbac`): a Role or ClusterRole, its binding to
//! herald's ServiceAccount, and nothing more than the watchers use.
//!
//! Every permission comes from one function per concern ([`watched_resources`],
//! [`namespace_selector`]), joined in [`cluster_rules`] and [`namespace_rules`]: a later feature
//! that needs more (API-group wildcards, Lease leader election) adds its own function there.
//!
//! A resource configured by `kind`/`plural` needs no rule for CustomResourceDefinitions: herald
//! waits for a missing CRD by repeating API discovery (`/apis/<group>`, see
//! [`crate::watch::resolve`]), which every authenticated user may read through the built-in
//! `system:discovery` ClusterRole. A group pattern (`kinds`) follows the CRDs themselves, so it
//! needs list and watch on them ([`crd_watch`]).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::config::{Config, Namespaces};

/// One watched resource as RBAC sees it: group, plural, namespaces and scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Position in `resources`, for messages.
    pub index: usize,
    /// API group (`""` for the core group).
    pub group: String,
    /// Plural resource name, as RBAC rules name resources.
    pub plural: String,
    /// The configured `namespaces`.
    pub namespaces: Namespaces,
    /// Whether the resource is cluster-scoped: `Some` when discovery said so, `None` offline.
    pub cluster_scoped: Option<bool>,
    /// Part of a group pattern (`kinds`), which follows the group's CRDs; its `plural` is `*` for
    /// `kinds: ["*"]` (every resource of the group, also those whose CRDs come later).
    pub pattern: bool,
}

/// A plural guessed from a kind because the configuration gave none (offline only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guess {
    /// Position in `resources`.
    pub index: usize,
    /// The configured kind.
    pub kind: String,
    /// The conventional plural used.
    pub plural: String,
}

/// One RBAC policy rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rule {
    /// `apiGroups`: one group.
    pub api_group: String,
    /// `resources`, sorted.
    pub resources: BTreeSet<String>,
    /// `verbs`, in the order Kubernetes documents them.
    pub verbs: Vec<&'static str>,
}

impl Rule {
    /// The rule as a `rules[]` entry.
    pub fn to_json(&self) -> Value {
        json!({
            "apiGroups": [self.api_group],
            "resources": self.resources,
            "verbs": self.verbs,
        })
    }
}

/// Why `--namespace-scoped` cannot grant what the configuration needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RbacError {
    /// The resource is watched in every namespace: only a ClusterRole grants that.
    #[error(
        "resources[{index}].namespaces: watches all namespaces, which only a ClusterRole can grant; list the namespaces, or drop --namespace-scoped"
    )]
    AllNamespaces {
        /// Position in `resources`.
        index: usize,
    },
    /// A namespace selector needs a cluster-wide watch and the namespaces' labels.
    #[error(
        "resources[{index}].namespaces: a namespace selector needs a cluster-wide watch and the namespaces' labels, which only a ClusterRole can grant; list the namespaces, or drop --namespace-scoped"
    )]
    Selector {
        /// Position in `resources`.
        index: usize,
    },
    /// Namespace name patterns need a cluster-wide watch.
    #[error(
        "resources[{index}].namespaces: name patterns need a cluster-wide watch, which only a ClusterRole can grant; list the namespaces, or drop --namespace-scoped"
    )]
    Patterns {
        /// Position in `resources`.
        index: usize,
    },
    /// A group pattern follows CRDs, which are cluster-scoped.
    #[error(
        "resources[{index}].kinds: a group pattern follows the group's CustomResourceDefinitions, which only a ClusterRole can grant; name the kinds one by one, or drop --namespace-scoped"
    )]
    GroupPattern {
        /// Position in `resources`.
        index: usize,
    },
    /// The resource is cluster-scoped.
    #[error(
        "resources[{index}]: {plural} is cluster-scoped, which only a ClusterRole can grant; drop --namespace-scoped"
    )]
    ClusterScoped {
        /// Position in `resources`.
        index: usize,
        /// The resource.
        plural: String,
    },
}

/// The verbs a watcher uses on the objects it watches: a paginated list, a watch from its revision,
/// and a get to tell an object that left a selector from one that was deleted.
pub const WATCH_VERBS: [&str; 3] = ["get", "list", "watch"];

/// The conventional plural of a kind, as Kubernetes code generators (gengo, used by kubebuilder)
/// form it: lowercased, `-s`/`-x`/`-z`/`-ch`/`-sh` take `es`, a consonant and `y` take `ies`,
/// everything else `s`. Irregular plurals need the `plural` key or `--connect`.
pub fn conventional_plural(kind: &str) -> String {
    let lower = kind.to_lowercase();
    let consonant_y = lower.strip_suffix('y').is_some_and(|stem| {
        stem.chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphabetic() && !"aeiou".contains(c))
    });
    if consonant_y {
        format!("{}ies", &lower[..lower.len() - 1])
    } else if ["s", "x", "z", "ch", "sh"]
        .iter()
        .any(|end| lower.ends_with(end))
    {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    }
}

/// The targets of a configuration without a cluster: the configured `plural`, or the conventional
/// plural of `kind` (returned as a [`Guess`] so the caller can warn).
pub fn offline_targets(cfg: &Config) -> (Vec<Target>, Vec<Guess>) {
    let mut targets = Vec::new();
    let mut guesses = Vec::new();
    for (index, r) in cfg.resources.iter().enumerate() {
        if let Some(kinds) = &r.kinds {
            let (t, g) = pattern_targets(index, r, kinds);
            targets.extend(t);
            guesses.extend(g);
            continue;
        }
        let plural = match (&r.plural, &r.kind) {
            (Some(p), _) => p.clone(),
            (None, Some(kind)) => {
                let plural = conventional_plural(kind);
                guesses.push(Guess {
                    index,
                    kind: kind.clone(),
                    plural: plural.clone(),
                });
                plural
            }
            // Validation requires kind or plural; nothing to grant without either.
            (None, None) => continue,
        };
        targets.push(Target {
            index,
            group: r.group.clone(),
            plural,
            namespaces: r.namespaces.clone(),
            cluster_scoped: None,
            pattern: false,
        });
    }
    (targets, guesses)
}

/// The targets of a group pattern without a cluster: `*` (every resource of the group, present
/// and future) for `kinds: ["*"]`, else the conventional plural of each listed kind (as guesses).
pub fn pattern_targets(
    index: usize,
    r: &crate::config::ResourceConfig,
    kinds: &[String],
) -> (Vec<Target>, Vec<Guess>) {
    let target = |plural: String| Target {
        index,
        group: r.group.clone(),
        plural,
        namespaces: r.namespaces.clone(),
        cluster_scoped: None,
        pattern: true,
    };
    if kinds.iter().any(|k| k == crate::config::ANY_KIND) {
        return (vec![target(crate::config::ANY_KIND.to_owned())], Vec::new());
    }
    let mut targets = Vec::new();
    let mut guesses = Vec::new();
    for kind in kinds {
        let plural = conventional_plural(kind);
        guesses.push(Guess {
            index,
            kind: kind.clone(),
            plural: plural.clone(),
        });
        targets.push(target(plural));
    }
    (targets, guesses)
}

/// list and watch on CustomResourceDefinitions when a group pattern follows them.
pub fn crd_watch(targets: &[Target]) -> Vec<Rule> {
    if targets.iter().any(|t| t.pattern) {
        vec![Rule {
            api_group: "apiextensions.k8s.io".to_owned(),
            resources: BTreeSet::from(["customresourcedefinitions".to_owned()]),
            verbs: vec!["list", "watch"],
        }]
    } else {
        Vec::new()
    }
}

/// get/list/watch on every watched resource, one rule per API group.
pub fn watched_resources<'a>(targets: impl IntoIterator<Item = &'a Target>) -> Vec<Rule> {
    let mut by_group: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for t in targets {
        by_group
            .entry(t.group.as_str())
            .or_default()
            .insert(t.plural.clone());
    }
    by_group
        .into_iter()
        .map(|(group, resources)| Rule {
            api_group: group.to_owned(),
            resources,
            verbs: WATCH_VERBS.to_vec(),
        })
        .collect()
}

/// list on namespaces when a namespaced resource is watched through `namespaces: {selector: …}`
/// (alone or with name patterns, which need nothing by themselves):
/// herald lists the namespaces (all, and those matching the selector, and a new one by name) to
/// decide which objects pass. It never gets or watches them. Cluster-scoped resources ignore
/// `namespaces`, so they need nothing here.
pub fn namespace_selector(targets: &[Target]) -> Vec<Rule> {
    let needed = targets
        .iter()
        .any(|t| t.namespaces.selector().is_some() && t.cluster_scoped != Some(true));
    if needed {
        vec![Rule {
            api_group: String::new(),
            resources: BTreeSet::from(["namespaces".to_owned()]),
            verbs: vec!["list"],
        }]
    } else {
        Vec::new()
    }
}

/// The rules of the ClusterRole for the targets.
pub fn cluster_rules(targets: &[Target]) -> Vec<Rule> {
    let mut rules = watched_resources(targets);
    rules.extend(namespace_selector(targets));
    rules.extend(crd_watch(targets));
    rules
}

/// The rules of one Role per namespace, for `--namespace-scoped`; refused when a target needs
/// more than namespaces it lists.
pub fn namespace_rules(targets: &[Target]) -> Result<BTreeMap<String, Vec<Rule>>, RbacError> {
    let mut per_ns: BTreeMap<String, Vec<&Target>> = BTreeMap::new();
    for t in targets {
        if t.pattern {
            return Err(RbacError::GroupPattern { index: t.index });
        }
        if t.cluster_scoped == Some(true) {
            return Err(RbacError::ClusterScoped {
                index: t.index,
                plural: t.plural.clone(),
            });
        }
        match &t.namespaces {
            Namespaces::All => return Err(RbacError::AllNamespaces { index: t.index }),
            Namespaces::Selector { .. } => return Err(RbacError::Selector { index: t.index }),
            Namespaces::Patterns { .. } => return Err(RbacError::Patterns { index: t.index }),
            Namespaces::List(names) => {
                for ns in names {
                    per_ns.entry(ns.clone()).or_default().push(t);
                }
            }
        }
    }
    Ok(per_ns
        .into_iter()
        .map(|(ns, ts)| (ns, watched_resources(ts)))
        .collect())
}

/// Who the bindings bind: a ServiceAccount, whose name also names the roles and bindings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// The ServiceAccount's name.
    pub name: String,
    /// The ServiceAccount's namespace.
    pub namespace: String,
}

impl Subject {
    fn to_json(&self) -> Value {
        json!([{"kind": "ServiceAccount", "name": self.name, "namespace": self.namespace}])
    }
}

/// A ClusterRole and its ClusterRoleBinding.
pub fn cluster_objects(rules: &[Rule], subject: &Subject) -> Vec<Value> {
    vec![
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": subject.name},
            "rules": rules.iter().map(Rule::to_json).collect::<Vec<_>>(),
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": subject.name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": subject.name},
            "subjects": subject.to_json(),
        }),
    ]
}

/// A Role and a RoleBinding in each namespace.
pub fn namespace_objects(per_ns: &BTreeMap<String, Vec<Rule>>, subject: &Subject) -> Vec<Value> {
    let mut out = Vec::new();
    for (ns, rules) in per_ns {
        out.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": subject.name, "namespace": ns},
            "rules": rules.iter().map(Rule::to_json).collect::<Vec<_>>(),
        }));
        out.push(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": subject.name, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": subject.name},
            "subjects": subject.to_json(),
        }));
    }
    out
}

#[cfg(test)]
mod tests;
