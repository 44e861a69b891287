//! The `leaderElection` section: several herald replicas on one cluster, one delivering (ADR 0013).

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use herald_sink_core::config::deserialize_duration;

/// The `leaderElection` section: replicas elect a leader through a `coordination.k8s.io/v1` Lease,
/// with client-go's semantics; only the leader delivers, the others watch and journal (hot
/// standby) and apply the positions the leader publishes (docs/operations.md, "Leadership").
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LeaderElectionConfig {
    /// Elect a leader; off, every herald delivers. Default `false`. Example: `true`.
    #[serde(default)]
    pub enabled: bool,
    /// The Lease's name; the published positions go to the ConfigMap `<leaseName>-positions`
    /// beside it. Default `herald`. Example: `herald-payments`.
    #[serde(default = "default_lease_name")]
    pub lease_name: String,
    /// The namespace of the Lease and the ConfigMap. Default: `POD_NAMESPACE`, else the
    /// service account's namespace in a pod, else `default`. Example: `herald`.
    #[serde(default)]
    pub namespace: Option<String>,
    /// This replica's identity, the Lease's `holderIdentity` and the webhook `herald-instance`
    /// header. Default: `POD_NAME`, else the host name. Example: `herald-0`.
    #[serde(default)]
    pub identity: Option<String>,
    /// How long a Lease another replica holds is respected after its last renewal was seen.
    /// Whole seconds (the Lease records seconds), more than `retryPeriod` above
    /// `renewDeadline`, at most `1h`. Default `15s`. Example: `30s`.
    #[serde(
        default = "default_lease_duration",
        deserialize_with = "deserialize_duration"
    )]
    #[schemars(with = "String", extend("default" = "15s"))]
    pub lease_duration: Duration,
    /// How long the leader keeps delivering without a successful renewal; then it stops (in-flight
    /// sends aborted). Less than `leaseDuration`. Default `10s`. Example: `20s`.
    #[serde(
        default = "default_renew_deadline",
        deserialize_with = "deserialize_duration"
    )]
    #[schemars(with = "String", extend("default" = "10s"))]
    pub renew_deadline: Duration,
    /// How often the leader renews and a standby tries to acquire. Default `2s`. Example: `4s`.
    #[serde(
        default = "default_retry_period",
        deserialize_with = "deserialize_duration"
    )]
    #[schemars(with = "String", extend("default" = "2s"))]
    pub retry_period: Duration,
    /// How often the leader publishes its acknowledged positions and standbys apply them.
    /// Default `2s`. Example: `1s`.
    #[serde(
        default = "default_publish_interval",
        deserialize_with = "deserialize_duration"
    )]
    #[schemars(with = "String", extend("default" = "2s"))]
    pub publish_interval: Duration,
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            lease_name: default_lease_name(),
            namespace: None,
            identity: None,
            lease_duration: default_lease_duration(),
            renew_deadline: default_renew_deadline(),
            retry_period: default_retry_period(),
            publish_interval: default_publish_interval(),
        }
    }
}

fn default_lease_name() -> String {
    "herald".to_owned()
}

fn default_lease_duration() -> Duration {
    Duration::from_secs(15)
}

fn default_renew_deadline() -> Duration {
    Duration::from_secs(10)
}

fn default_retry_period() -> Duration {
    Duration::from_secs(2)
}

fn default_publish_interval() -> Duration {
    Duration::from_secs(2)
}
