//! What the simulator serves: resource definitions (built-in and from CRDs) and object keys.

use serde_json::{Value, json};

/// A resource by group and plural (`widgets.example.com`; the core group is `""`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupResource {
    /// API group, `""` for the core group.
    pub group: String,
    /// Plural resource name.
    pub resource: String,
}

impl GroupResource {
    /// A resource of `group` named `resource`.
    pub fn new(group: impl Into<String>, resource: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            resource: resource.into(),
        }
    }

    /// `widgets.example.com`, or `namespaces` for the core group (as in error messages).
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    pub(crate) fn namespaces() -> Self {
        Self::new("", "namespaces")
    }

    pub(crate) fn crds() -> Self {
        Self::new(CRD_GROUP, "customresourcedefinitions")
    }
}

/// The group of CustomResourceDefinitions.
pub(crate) const CRD_GROUP: &str = "apiextensions.k8s.io";

/// Which server behaviour a resource gets on top of the generic object store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Behaviour {
    /// `v1` Namespace: deleting one deletes its contents.
    Namespace,
    /// A CustomResourceDefinition: validated, given status, and serves its resource.
    Crd,
    /// A custom resource served from a CRD.
    Custom,
    /// A built-in type with no special behaviour (Leases, Events).
    Builtin,
    /// A review that is answered, never stored (SelfSubjectAccessReview, SelfSubjectRulesReview, SelfSubjectReview).
    Review,
}

/// One served version of a resource.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct VersionDef {
    pub(crate) name: String,
    pub(crate) served: bool,
    pub(crate) storage: bool,
    pub(crate) status_subresource: bool,
    /// The version's `openAPIV3Schema`, served through OpenAPI for kubectl.
    pub(crate) schema: Option<Value>,
}

/// A resource the simulator serves.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResourceDef {
    pub(crate) gr: GroupResource,
    pub(crate) kind: String,
    pub(crate) list_kind: String,
    pub(crate) singular: String,
    pub(crate) namespaced: bool,
    pub(crate) short_names: Vec<String>,
    pub(crate) categories: Vec<String>,
    pub(crate) versions: Vec<VersionDef>,
    pub(crate) behaviour: Behaviour,
    /// Set while a CRD is being deleted: creates are forbidden.
    pub(crate) terminating: bool,
    /// Serves `/scale` (`autoscaling/v1` Scale over `spec.replicas`), as Deployments and StatefulSets do.
    pub(crate) scale_subresource: bool,
    /// Writes to the spec bump `metadata.generation` (custom resources, CRDs and the built-ins a
    /// controller reconciles: Deployments, StatefulSets, PodDisruptionBudgets).
    pub(crate) tracks_generation: bool,
}

impl ResourceDef {
    pub(crate) fn builtin_namespaces() -> Self {
        Self {
            gr: GroupResource::namespaces(),
            kind: "Namespace".into(),
            list_kind: "NamespaceList".into(),
            singular: "namespace".into(),
            namespaced: false,
            short_names: vec!["ns".into()],
            categories: vec![],
            versions: vec![VersionDef {
                name: "v1".into(),
                served: true,
                storage: true,
                status_subresource: true,
                schema: None,
            }],
            behaviour: Behaviour::Namespace,
            terminating: false,
            scale_subresource: false,
            tracks_generation: false,
        }
    }

    fn builtin(
        group: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
        behaviour: Behaviour,
    ) -> Self {
        Self {
            gr: GroupResource::new(group, plural),
            kind: kind.into(),
            list_kind: format!("{kind}List"),
            singular: kind.to_lowercase(),
            namespaced,
            short_names: vec![],
            categories: vec![],
            versions: vec![VersionDef {
                name: "v1".into(),
                served: true,
                storage: true,
                status_subresource: false,
                schema: None,
            }],
            behaviour,
            terminating: false,
            scale_subresource: false,
            tracks_generation: false,
        }
    }

    fn short_names(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| (*s).to_string()).collect();
        self
    }

    /// In the `all` category, as `kubectl get all` reads it.
    fn in_all(mut self) -> Self {
        self.categories = vec!["all".into()];
        self
    }

    fn with_status(mut self) -> Self {
        for v in &mut self.versions {
            v.status_subresource = true;
        }
        self
    }

    /// The workload shape: status and scale subresources, and a generation a controller would observe.
    fn workload(mut self) -> Self {
        self.scale_subresource = true;
        self.tracks_generation = true;
        self.with_status()
    }

    /// The built-in resources besides namespaces and CRDs: `coordination.k8s.io/v1` Leases, `v1` Events
    /// and `authorization.k8s.io/v1` SelfSubjectAccessReviews, and the kinds a chart installs (`v1`
    /// ServiceAccounts, ConfigMaps, Secrets, Services; `apps/v1` Deployments, StatefulSets; RBAC;
    /// `networking.k8s.io/v1` NetworkPolicies; `policy/v1` PodDisruptionBudgets). Short names, categories, scope and subresources are those
    /// kube-apiserver 1.33's discovery gives.
    pub(crate) fn other_builtins() -> Vec<Self> {
        use Behaviour::Builtin;
        const RBAC: &str = "rbac.authorization.k8s.io";
        vec![
            Self::builtin("coordination.k8s.io", "leases", "Lease", true, Builtin),
            Self::builtin("", "events", "Event", true, Builtin).short_names(&["ev"]),
            Self::builtin(
                "authorization.k8s.io",
                "selfsubjectaccessreviews",
                "SelfSubjectAccessReview",
                false,
                Behaviour::Review,
            ),
            Self::builtin(
                "authorization.k8s.io",
                "selfsubjectrulesreviews",
                "SelfSubjectRulesReview",
                false,
                Behaviour::Review,
            ),
            Self::builtin(
                "authentication.k8s.io",
                "selfsubjectreviews",
                "SelfSubjectReview",
                false,
                Behaviour::Review,
            ),
            Self::builtin("", "serviceaccounts", "ServiceAccount", true, Builtin)
                .short_names(&["sa"]),
            Self::builtin("", "configmaps", "ConfigMap", true, Builtin).short_names(&["cm"]),
            Self::builtin("", "secrets", "Secret", true, Builtin),
            Self::builtin("", "services", "Service", true, Builtin)
                .short_names(&["svc"])
                .in_all()
                .with_status(),
            Self::builtin("apps", "deployments", "Deployment", true, Builtin)
                .short_names(&["deploy"])
                .in_all()
                .workload(),
            Self::builtin("apps", "statefulsets", "StatefulSet", true, Builtin)
                .short_names(&["sts"])
                .in_all()
                .workload(),
            Self::builtin(
                "networking.k8s.io",
                "networkpolicies",
                "NetworkPolicy",
                true,
                Builtin,
            )
            .short_names(&["netpol"]),
            Self::builtin(RBAC, "roles", "Role", true, Builtin),
            Self::builtin(RBAC, "clusterroles", "ClusterRole", false, Builtin),
            Self::builtin(RBAC, "rolebindings", "RoleBinding", true, Builtin),
            Self::builtin(
                RBAC,
                "clusterrolebindings",
                "ClusterRoleBinding",
                false,
                Builtin,
            ),
            {
                let mut pdb = Self::builtin(
                    "policy",
                    "poddisruptionbudgets",
                    "PodDisruptionBudget",
                    true,
                    Builtin,
                )
                .short_names(&["pdb"])
                .with_status();
                pdb.tracks_generation = true;
                pdb
            },
        ]
    }

    pub(crate) fn builtin_crds() -> Self {
        Self {
            gr: GroupResource::crds(),
            kind: "CustomResourceDefinition".into(),
            list_kind: "CustomResourceDefinitionList".into(),
            singular: "customresourcedefinition".into(),
            namespaced: false,
            short_names: vec!["crd".into(), "crds".into()],
            categories: vec!["api-extensions".into()],
            versions: vec![VersionDef {
                name: "v1".into(),
                served: true,
                storage: true,
                status_subresource: true,
                schema: None,
            }],
            behaviour: Behaviour::Crd,
            terminating: false,
            scale_subresource: false,
            tracks_generation: true,
        }
    }

    /// The served version named `v`.
    pub(crate) fn served_version(&self, v: &str) -> Option<&VersionDef> {
        self.versions.iter().find(|x| x.name == v && x.served)
    }

    /// `group/version`, or `version` for the core group.
    pub(crate) fn api_version(&self, version: &str) -> String {
        api_version(&self.gr.group, version)
    }

    /// Serves the `token` subresource (TokenRequest), as ServiceAccounts do.
    pub(crate) fn serves_token(&self) -> bool {
        self.gr.group.is_empty() && self.gr.resource == "serviceaccounts"
    }

    /// Built-in lists leave `apiVersion`/`kind` out of their items; custom resource lists keep them.
    pub(crate) fn items_carry_type(&self) -> bool {
        self.behaviour == Behaviour::Custom
    }

    pub(crate) fn verbs(&self) -> Value {
        if self.behaviour == Behaviour::Review {
            return json!(["create"]);
        }
        json!([
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch"
        ])
    }
}

/// `group/version`, or `version` for the core group.
pub(crate) fn api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// Where an object lives: namespace (`""` when cluster-scoped) and name. Ordered as etcd keys are.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ObjectKey {
    pub(crate) namespace: String,
    pub(crate) name: String,
}

impl ObjectKey {
    pub(crate) fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

/// Orders versions as Kubernetes does: GA before beta before alpha, higher numbers first, others last.
pub(crate) fn version_priority(a: &str, b: &str) -> std::cmp::Ordering {
    fn parse(v: &str) -> Option<(u64, u8, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let major: u64 = digits.parse().ok()?;
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return Some((major, 2, 0));
        }
        let (level, n) = if let Some(n) = tail.strip_prefix("beta") {
            (1, n)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (0, n)
        } else {
            return None;
        };
        Some((major, level, n.parse().ok()?))
    }
    match (parse(a), parse(b)) {
        // Higher stability, then higher major, then higher minor come first.
        (Some((ma, la, na)), Some((mb, lb, nb))) => lb.cmp(&la).then(mb.cmp(&ma)).then(nb.cmp(&na)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_like_kubernetes() {
        let mut v = vec![
            "v1alpha1",
            "foo",
            "v2beta1",
            "v1",
            "v1beta2",
            "v2",
            "v11alpha2",
            "v1beta1",
            "bar",
        ];
        v.sort_by(|a, b| version_priority(a, b));
        assert_eq!(
            v,
            [
                "v2",
                "v1",
                "v2beta1",
                "v1beta2",
                "v1beta1",
                "v11alpha2",
                "v1alpha1",
                "bar",
                "foo"
            ]
        );
    }
}
