//! `herald rbac -c FILE [--namespace-scoped] [--connect]`: prints the Role or ClusterRole and the
//! binding a configuration needs (see [`crate::rbac`]), as multi-document YAML or a JSON `List`.

use std::path::PathBuf;

use clap::Args;
use serde_json::{Value, json};

use super::CliError;
use crate::rbac::{self, Subject, Target};
use crate::{app, config, watch};

/// Options of `herald rbac`.
#[derive(Debug, Args)]
pub struct RbacArgs {
    /// The configuration file.
    #[arg(short = 'c', long, env = "HERALD_CONFIG")]
    pub config: PathBuf,
    /// A Role and RoleBinding in each watched namespace instead of a ClusterRole (refused when a
    /// resource is watched in all namespaces or through a namespace selector).
    #[arg(long)]
    pub namespace_scoped: bool,
    /// Ask the cluster (discovery) for plurals and scopes instead of taking them from the
    /// configuration or guessing them.
    #[arg(long)]
    pub connect: bool,
    /// The namespace of herald's ServiceAccount.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// herald's ServiceAccount; also the name of the roles and bindings.
    #[arg(long, default_value = "herald")]
    pub service_account: String,
    /// Print a JSON `List` instead of YAML documents.
    #[arg(long)]
    pub json: bool,
}

pub(super) async fn run(args: RbacArgs) -> Result<(), CliError> {
    let cfg = config::load(&args.config).map_err(CliError::ConfigInvalid)?;
    let targets = if args.connect {
        discovered(&cfg).await?
    } else {
        let (targets, guesses) = rbac::offline_targets(&cfg);
        for g in guesses {
            errln!(
                "warning: resources[{}]: no plural configured; assuming {:?} for kind {:?} (set `plural`, or use --connect to ask the cluster)",
                g.index,
                g.plural,
                g.kind
            );
        }
        targets
    };
    let subject = Subject {
        name: args.service_account,
        namespace: args.namespace,
    };
    let objects = if args.namespace_scoped {
        let per_ns = rbac::namespace_rules(&targets).map_err(CliError::RbacRefused)?;
        rbac::namespace_objects(&per_ns, &subject)
    } else {
        rbac::cluster_objects(&rbac::cluster_rules(&targets), &subject)
    };
    if args.json {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
        outln!(
            "{}",
            serde_json::to_string_pretty(&list).unwrap_or_default()
        );
    } else {
        let docs: Vec<String> = objects.iter().map(yaml).collect();
        outln!("{}", docs.join("---\n").trim_end());
    }
    Ok(())
}

fn yaml(object: &Value) -> String {
    // A `Value` always serializes.
    serde_yaml_ng::to_string(object).unwrap_or_default()
}

/// Plurals and scopes as the cluster serves them, through the watchers' own discovery.
async fn discovered(cfg: &config::Config) -> Result<Vec<Target>, CliError> {
    // As `herald check --connect`: never a second embedded cluster on a running herald's journal.
    let _lock = match &cfg.cluster.source {
        config::ClusterSource::Embedded(_) => Some(super::check::lock_embedded(cfg)?),
        _ => None,
    };
    let app::Cluster { client, sim, url } =
        app::client(cfg).await.map_err(CliError::StartFailed)?;
    let mut targets = Vec::new();
    let mut problems = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for spec in watch::WatchSpec::from_config(cfg) {
        // One spec per listed namespace; the resource is the same for all of them.
        if !seen.insert(spec.index) {
            continue;
        }
        if let Some(kinds) = &spec.kinds {
            // A pattern's rule must cover kinds whose CRDs come later: the same as offline.
            if let Some(r) = cfg.resources.get(spec.index) {
                targets.extend(rbac::pattern_targets(spec.index, r, kinds).0);
            }
            continue;
        }
        match watch::resolve(&client, &spec).await {
            Ok(Some(r)) => targets.push(Target {
                index: spec.index,
                group: r.api_resource.group.clone(),
                plural: r.api_resource.plural.clone(),
                namespaces: cfg
                    .resources
                    .get(spec.index)
                    .map(|c| c.namespaces.clone())
                    .unwrap_or_default(),
                cluster_scoped: Some(!r.namespaced),
                pattern: false,
            }),
            Ok(None) => problems.push(watch::resolve::unserved(&spec)),
            Err(e) => {
                return Err(CliError::StartFailed(app::StartError::ClusterUnreachable(
                    format!("{url}: {}", watch::ApiProblem::of(&e)),
                )));
            }
        }
    }
    if let Some(sim) = sim {
        sim.shutdown().await;
    }
    if problems.is_empty() {
        Ok(targets)
    } else {
        Err(CliError::CheckFailed(problems))
    }
}
