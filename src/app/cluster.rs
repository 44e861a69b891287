//! From the configuration's `cluster` section to a Kubernetes client: a kubeconfig, the in-cluster
//! service account, or the embedded simulator started beside the journal. Entry point: [`client`].

use std::time::Duration;

use herald_sim::{SimConfig, Simulator};

use super::StartError;
use crate::config::{ClusterSource, Config};

/// Reads from the API server that take longer than this fail (a hung connection otherwise hangs a
/// watcher's list or get forever); longer than the watch timeout plus bookmarks need.
const API_READ_TIMEOUT: Duration = Duration::from_secs(360);

/// A client for the configured cluster.
pub struct Cluster {
    /// The client.
    pub client: kube::Client,
    /// The embedded simulator, when that is the cluster.
    pub sim: Option<Simulator>,
    /// The API server's URL, for messages that must say which server failed.
    pub url: String,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("url", &self.url)
            .field("embedded", &self.sim.is_some())
            .finish_non_exhaustive()
    }
}

/// A client for the configured cluster (and the embedded simulator when that is the cluster).
/// Nothing is asked of the API server yet: an unreachable server is found by the first request.
pub async fn client(cfg: &Config) -> Result<Cluster, StartError> {
    let unreachable = StartError::ClusterUnreachable;
    match &cfg.cluster.source {
        ClusterSource::Embedded(embedded) => {
            // The embedded cluster keeps its state beside the journal: its resourceVersions must never go
            // backwards under a stored checkpoint. Callers hold the journal directory's lock, so
            // no second herald runs a cluster on the same state.
            let data = cfg.journal.path.join("embedded-cluster");
            let sim = Simulator::start(SimConfig::default().data_dir(data))
                .await
                .map_err(StartError::EmbeddedFailed)?;
            if let Some(file) = &embedded.load {
                // `load` creates a new cluster's objects. On a restored state it would revert
                // every change made since and emit updates for them.
                if sim.restored() {
                    tracing::info!(
                        message = "Embedded cluster restored from the journal directory; its load file is applied to a new cluster only.",
                        load = %file.display(),
                    );
                } else {
                    sim.load_file(file)
                        .map_err(StartError::EmbeddedLoadFailed)?;
                }
            }
            // herald's own client rather than `sim.client()`: with the read timeout every other
            // cluster gets, as the embedded one shares herald's file descriptors and may be
            // unable to answer a request it could not accept.
            let url = sim
                .url()
                .parse()
                .map_err(|e| StartError::EmbeddedFailed(herald_sim::SimError::InvalidUrl(e)))?;
            let cluster = connect(kube::Config::new(url), cfg)?;
            Ok(Cluster {
                sim: Some(sim),
                ..cluster
            })
        }
        ClusterSource::InCluster => {
            let kc = kube::Config::incluster()
                .map_err(|e| unreachable(format!("in-cluster configuration: {e}")))?;
            connect(kc, cfg)
        }
        ClusterSource::Kubeconfig(source) => {
            let options = kube::config::KubeConfigOptions {
                context: source.context.clone(),
                ..Default::default()
            };
            let kc = match &source.path {
                Some(path) => {
                    let file = kube::config::Kubeconfig::read_from(path)
                        .map_err(|e| unreachable(format!("kubeconfig {}: {e}", path.display())))?;
                    kube::Config::from_custom_kubeconfig(file, &options).await
                }
                None => kube::Config::from_kubeconfig(&options).await,
            }
            .map_err(|e| unreachable(format!("kubeconfig: {e}")))?;
            connect(kc, cfg)
        }
    }
}

/// The client for `kc`, with herald's read timeout.
fn connect(mut kc: kube::Config, cfg: &Config) -> Result<Cluster, StartError> {
    kc.read_timeout = Some(API_READ_TIMEOUT);
    if cfg.leader_election.enabled {
        // With several replicas, the API server's audit log (and the simulator's fault rules)
        // tell them apart by their User-Agent.
        let agent = format!(
            "herald/{} ({})",
            env!("CARGO_PKG_VERSION"),
            crate::leader::identity(&cfg.leader_election)
        );
        if let Ok(value) = axum::http::HeaderValue::from_str(&agent) {
            kc.headers.push((axum::http::header::USER_AGENT, value));
        }
    }
    let url = kc.cluster_url.to_string();
    Ok(Cluster {
        client: kube::Client::try_from(kc)
            .map_err(|e| StartError::ClusterUnreachable(e.to_string()))?,
        sim: None,
        url: url.trim_end_matches('/').to_owned(),
    })
}
