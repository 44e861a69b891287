//! `herald check -c FILE [--connect]`: validates a configuration offline and resolves every secret
//! it references; with `--connect` also asks the cluster whether every resource is served and
//! whether herald may list and watch it (SelfSubjectAccessReview), and health-checks the sinks.

use std::path::PathBuf;

use clap::Args;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
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
            if spec.kinds.is_some() {
                let checked = check_pattern(&client, &spec, &mut problems)
                    .await
                    .map_err(|e| {
                        CliError::StartFailed(app::StartError::ClusterUnreachable(format!(
                            "{url}: {}",
                            watch::ApiProblem::of(&e)
                        )))
                    })?;
                if !args.json {
                    let kinds: Vec<String> = checked
                        .iter()
                        .map(|m| format!("{} ({})", m.kind, m.label))
                        .collect();
                    outln!(
                        "resources[{}] ({}): {}",
                        spec.index,
                        spec.label(),
                        if kinds.is_empty() {
                            "matches no kind yet".to_owned()
                        } else {
                            format!("matches {}", kinds.join(", "))
                        }
                    );
                }
                resources.push(json!({
                    "index": spec.index,
                    "pattern": spec.label(),
                    "kinds": checked
                        .iter()
                        .map(|m| json!({"kind": m.kind, "resource": m.label}))
                        .collect::<Vec<_>>(),
                    "served": true,
                }));
                continue;
            }
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

/// The kinds a group pattern matches now (its CRDs listed), each checked as a configured resource
/// is; problems are added for what herald may not do. Zero kinds is no problem: CRDs may come later.
async fn check_pattern(
    client: &kube::Client,
    spec: &watch::WatchSpec,
    problems: &mut Vec<String>,
) -> Result<Vec<watch::pattern::MatchedKind>, kube::Error> {
    for verb in ["list", "watch"] {
        match review(client, verb, "apiextensions.k8s.io", "customresourcedefinitions", None).await
        {
            Ok(true) => {}
            Ok(false) => problems.push(format!(
                "resources[{}].kinds: herald may not {verb} customresourcedefinitions (RBAC), which a group pattern follows",
                spec.index
            )),
            Err(e) => problems.push(format!(
                "resources[{}]: access review failed: {e}",
                spec.index
            )),
        }
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let list = match crds.list(&ListParams::default()).await {
        Ok(list) => list,
        Err(kube::Error::Api(s)) if s.code == 403 => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let matched = watch::pattern::matched_kinds(spec, &list.items);
    for m in &matched {
        let kind_spec = m.spec(spec);
        // Defined but not served yet (a CRD not yet established): the watcher waits for it.
        let Some(r) = watch::resolve(client, &kind_spec).await? else {
            continue;
        };
        for verb in ["list", "watch", "get"] {
            match allowed(client, &r, verb).await {
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
    }
    Ok(matched)
}

async fn allowed(
    client: &kube::Client,
    r: &watch::Resolved,
    verb: &str,
) -> Result<bool, kube::Error> {
    review(
        client,
        verb,
        &r.api_resource.group,
        &r.api_resource.plural,
        r.namespace.clone(),
    )
    .await
}

async fn review(
    client: &kube::Client,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<String>,
) -> Result<bool, kube::Error> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let ssar = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.to_owned()),
                resource: Some(resource.to_owned()),
                namespace,
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let answer = reviews.create(&PostParams::default(), &ssar).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}
