//! The `cluster` section: which API server herald watches and what it calls that cluster.

use std::borrow::Cow;
use std::path::PathBuf;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Deserialize;

use super::null_as_some_default;

/// Cluster name used when none is given and the source is not `embedded`.
pub const DEFAULT_CLUSTER_NAME: &str = "default";
/// Cluster name used when none is given and the source is `embedded`.
pub const EMBEDDED_CLUSTER_NAME: &str = "herald-sim";

/// The `cluster` section, with the name default applied and the source decided.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawClusterConfig")]
pub struct ClusterConfig {
    /// The cluster's name in every event's `source` (`k8s://<name>/<group>/<plural>`); matches
    /// `[a-z0-9][a-z0-9.-]*`. Default `default`, or `herald-sim` for `embedded`.
    pub name: String,
    /// How herald reaches the API server.
    pub source: ClusterSource,
}

/// How herald reaches the API server: exactly one of these, a kubeconfig when none is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterSource {
    /// A kubeconfig file (`cluster.kubeconfig`), or the default one when the section has no source.
    Kubeconfig(KubeconfigSource),
    /// The pod's service account (`cluster.inCluster: true`).
    InCluster,
    /// herald's built-in simulator, run in-process (`cluster.embedded`): demos and tests.
    Embedded(EmbeddedSource),
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            name: DEFAULT_CLUSTER_NAME.to_owned(),
            source: ClusterSource::Kubeconfig(KubeconfigSource::default()),
        }
    }
}

/// `cluster.kubeconfig`: which kubeconfig file and context to use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeconfigSource {
    /// Path of the kubeconfig file; `${VAR}` is expanded. Default: `$KUBECONFIG`, else
    /// `~/.kube/config`. Example: `/etc/herald/kubeconfig`.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Context to use from that file. Default: the file's `current-context`. Example: `prod-eu`.
    #[serde(default)]
    pub context: Option<String>,
}

/// `cluster.embedded`: the in-process simulator.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EmbeddedSource {
    /// A multi-document YAML file of CRDs and objects to create when the embedded cluster is new
    /// (as `herald sim --load`); a restart restores the cluster's state from the journal directory
    /// and does not apply it again. `${VAR}` is expanded. Default: none, the simulator starts
    /// empty. Example: `demo/objects.yaml`.
    #[serde(default)]
    pub load: Option<PathBuf>,
}

/// `cluster` as written: the three sources are sibling keys, so exclusivity is checked after parsing.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawClusterConfig {
    /// The cluster's name, used in every event's `source` (`k8s://<name>/<group>/<plural>`) so
    /// several clusters can feed one topic. Must match `[a-z0-9][a-z0-9.-]*`. Default `default`,
    /// or `herald-sim` with `embedded`. Example: `prod-eu`.
    #[serde(default)]
    name: Option<String>,
    /// Use this kubeconfig file and context. This is the default source (with `$KUBECONFIG` or
    /// `~/.kube/config` and its current context) when neither `inCluster` nor `embedded` is given.
    /// Example: `{path: /etc/herald/kubeconfig, context: prod}`.
    #[serde(default, deserialize_with = "null_as_some_default")]
    kubeconfig: Option<KubeconfigSource>,
    /// Use the pod's service account (the in-cluster config). Default `false`. Example: `true`.
    #[serde(default)]
    in_cluster: bool,
    /// Run herald's Kubernetes API simulator in-process and watch it (demos, tests).
    /// Default: off. Example: `{}` or `{load: demo/objects.yaml}`.
    #[serde(default, deserialize_with = "null_as_some_default")]
    embedded: Option<EmbeddedSource>,
}

// The schema describes the file, so it is the raw form's.
impl JsonSchema for ClusterConfig {
    fn schema_name() -> Cow<'static, str> {
        "ClusterConfig".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        RawClusterConfig::json_schema(generator)
    }
}

impl TryFrom<RawClusterConfig> for ClusterConfig {
    type Error = String;

    fn try_from(raw: RawClusterConfig) -> Result<Self, String> {
        let source = match (raw.kubeconfig, raw.in_cluster, raw.embedded) {
            (kubeconfig, false, None) => ClusterSource::Kubeconfig(kubeconfig.unwrap_or_default()),
            (None, true, None) => ClusterSource::InCluster,
            (None, false, Some(embedded)) => ClusterSource::Embedded(embedded),
            (kubeconfig, in_cluster, embedded) => {
                let given: Vec<&str> = [
                    kubeconfig.map(|_| "kubeconfig"),
                    in_cluster.then_some("inCluster"),
                    embedded.map(|_| "embedded"),
                ]
                .into_iter()
                .flatten()
                .collect();
                return Err(format!(
                    "give at most one of kubeconfig, inCluster and embedded, not {}",
                    given.join(" and ")
                ));
            }
        };
        let name = raw.name.unwrap_or_else(|| {
            match source {
                ClusterSource::Embedded(_) => EMBEDDED_CLUSTER_NAME,
                _ => DEFAULT_CLUSTER_NAME,
            }
            .to_owned()
        });
        Ok(Self { name, source })
    }
}
