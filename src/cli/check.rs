//! `herald check -c FILE [--connect]`: validates a configuration offline and resolves every secret
//! it references; with `--connect` also asks the cluster whether every resource is served and
//! whether herald may list and watch it (SelfSubjectAccessReview), and health-checks the sinks.

use std::path::PathBuf;

use clap::Args;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use serde_json::json;

use super::CliError;
use crate::{app, config, watch};

/// Options of `herald check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The configuration file.
    #[arg(short = 'c', long, env = "HERALD_CONFIG")]
    pub config: PathBuf,
    /// Also connect: discovery of every resource, RBAC for list/watch/get, sink health checks.
    #[arg(long)]
    pub connect: bool,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub(super) async fn run(args: CheckArgs) -> Result<(), CliError> {
    let cfg = config::load(&args.config).map_err(CliError::ConfigInvalid)?;
    cfg.check_secrets().map_err(CliError::ConfigInvalid)?;
    let mut problems: Vec<String> = Vec::new();
    // Valid, so they fail nothing; said on stderr (and in the JSON) so that the author sees them.
    let warnings = cfg.warnings();
    let mut resources = Vec::new();
    if args.connect {
        // An embedded cluster's state lives in the journal directory: never start a second
        // cluster on it under a running herald.
        let _lock = match &cfg.cluster.source {
            config::ClusterSource::Embedded(_) => Some(lock_embedded(&cfg)?),
            _ => None,
        };
        let app::Cluster { client, sim, url } =
            app::client(&cfg).await.map_err(CliError::StartFailed)?;
        for spec in crate::watch::WatchSpec::from_config(&cfg) {
            match watch::resolve(&client, &spec).await {
                Ok(Some(r)) => {
                    for verb in ["list", "watch", "get"] {
                        match allowed(&client, &r, verb).await {
                            Ok(true) => {}
                            Ok(false) => problems.push(format!(
                                "resources[{}]: herald may not {verb} {} (RBAC)",
                                spec.index,
                                r.display()
                            )),
                            Err(e) => problems.push(format!(
                                "resources[{}]: access review failed: {e}",
                                spec.index
                            )),
                        }
                    }
                    resources.push(
                        json!({"index": spec.index, "resource": r.display(), "served": true}),
                    );
                }
                Ok(None) => {
                    problems.push(watch::resolve::unserved(&spec));
                    resources.push(json!({"index": spec.index, "served": false}));
                }
                Err(e) => {
                    // The server named, and what it did: refused, timed out, answered garbage.
                    return Err(CliError::StartFailed(app::StartError::ClusterUnreachable(
                        format!("{url}: {}", watch::ApiProblem::of(&e)),
                    )));
                }
            }
        }
        for sink in &cfg.sinks {
            if let Err(reason) = app::check_sink(sink).await {
                problems.push(format!(
                    "sinks[{}] ({}): {reason}",
                    cfg.sinks
                        .iter()
                        .position(|s| s.name == sink.name)
                        .unwrap_or(0),
                    sink.name
                ));
            }
        }
        if let Some(sim) = sim {
            sim.shutdown().await;
        }
    }
    if !args.json {
        for warning in &warnings {
            errln!("warning: {warning}");
        }
    }
    if args.json {
        let doc = json!({
            "config": args.config.display().to_string(),
            "resources": cfg.resources.len(),
            "sinks": cfg.sinks.len(),
            "connected": args.connect,
            "checked": resources,
            "problems": problems,
            "warnings": warnings,
            "ok": problems.is_empty(),
        });
        outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else if problems.is_empty() {
        outln!(
            "{}: OK ({} resources, {} sinks{})",
            args.config.display(),
            cfg.resources.len(),
            cfg.sinks.len(),
            if args.connect {
                "; served, readable and healthy"
            } else {
                ""
            }
        );
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CliError::CheckFailed(problems))
    }
}

/// The journal directory's lock, held while the embedded cluster runs for the check.
pub(super) fn lock_embedded(cfg: &config::Config) -> Result<crate::journal::DirLock, CliError> {
    let path = &cfg.journal.path;
    crate::journal::Journal::lock_dir(path).map_err(|e| {
        CliError::StartFailed(match e {
            crate::journal::JournalError::AlreadyOpen { .. } => {
                app::StartError::EmbeddedInUse { path: path.clone() }
            }
            other => app::StartError::JournalFailed(other),
        })
    })
}

async fn allowed(
    client: &kube::Client,
    r: &watch::Resolved,
    verb: &str,
) -> Result<bool, kube::Error> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let ssar = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(r.api_resource.group.clone()),
                resource: Some(r.api_resource.plural.clone()),
                namespace: r.namespace.clone(),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let answer = reviews.create(&PostParams::default(), &ssar).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}
