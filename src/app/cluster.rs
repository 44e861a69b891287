//! From the configuration's `cluster` section to a Kubernetes client: a kubeconfig, the in-cluster
//! service account, or the embedded simulator started beside the journal. Entry point: [`client`].

use std::time::Duration;

use herald_sim::{SimConfig, Simulator};

use super::StartError;
use crate::config::{ClusterSource, Config};

/// Reads from the API server that take longer than this fail (a hung connection otherwise hangs a
/// watcher's list or get forever); longer than the watch timeout plus bookmarks need.
const API_READ_TIMEOUT: Duration = Duration::from_secs(360);

/// A client for the configured cluster (and the embedded simulator when that is the cluster).
pub async fn client(cfg: &Config) -> Result<(kube::Client, Option<Simulator>), StartError> {
    let unreachable = StartError::ClusterUnreachable;
    match &cfg.cluster.source {
        ClusterSource::Embedded(embedded) => {
            // The embedded cluster keeps its state beside the journal: its resourceVersions must never go
            // backwards under a stored checkpoint.
            let data = cfg.journal.path.join("embedded-cluster");
            let sim = Simulator::start(SimConfig::default().data_dir(data))
                .await
                .map_err(StartError::EmbeddedFailed)?;
            if let Some(file) = &embedded.load {
                sim.load_file(file)
                    .map_err(StartError::EmbeddedLoadFailed)?;
            }
            let c = sim.client().map_err(StartError::EmbeddedFailed)?;
            Ok((c, Some(sim)))
        }
        ClusterSource::InCluster => {
            let mut kc = kube::Config::incluster()
                .map_err(|e| unreachable(format!("in-cluster configuration: {e}")))?;
            kc.read_timeout = Some(API_READ_TIMEOUT);
            Ok((
                kube::Client::try_from(kc).map_err(|e| unreachable(e.to_string()))?,
                None,
            ))
        }
        ClusterSource::Kubeconfig(source) => {
            let options = kube::config::KubeConfigOptions {
                context: source.context.clone(),
                ..Default::default()
            };
            let mut kc = match &source.path {
                Some(path) => {
                    let file = kube::config::Kubeconfig::read_from(path)
                        .map_err(|e| unreachable(format!("kubeconfig {}: {e}", path.display())))?;
                    kube::Config::from_custom_kubeconfig(file, &options).await
                }
                None => kube::Config::from_kubeconfig(&options).await,
            }
            .map_err(|e| unreachable(format!("kubeconfig: {e}")))?;
            kc.read_timeout = Some(API_READ_TIMEOUT);
            Ok((
                kube::Client::try_from(kc).map_err(|e| unreachable(e.to_string()))?,
                None,
            ))
        }
    }
}
