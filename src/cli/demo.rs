//! `herald demo`: the whole pipeline on one machine, with nothing but the build. An embedded cluster
//! with a sample `Database` CRD, realistic changes (create, spec update, status update, a finalizer
//! delete), herald delivering into a file and a local webhook receiver, and the CloudEvents shown as
//! they arrive. Ends by itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use clap::Args;
use serde_json::{Value, json};

use super::CliError;
use crate::{app, config};
use herald_sim::ResourceRef;

/// Options of `herald demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// How long the demo runs at most (it ends earlier once every change has arrived).
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Pause between the simulated changes.
    #[arg(long, default_value = "700ms", value_parser = humantime::parse_duration)]
    pub pace: Duration,
}

const BUNDLE: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: databases.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: databases, kind: Database, shortNames: [db]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {engine: {type: string}, replicas: {type: integer}, password: {type: string}}}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

/// One simulated change.
type Step<'a> = Box<dyn Fn() -> Result<(), herald_sim::ApiError> + 'a>;

/// The changes the demo makes, and how many events they produce.
const EXPECTED_EVENTS: usize = 7;

fn describe(headers: &HeaderMap, body: &[u8]) -> String {
    let h = |k: &str| {
        headers
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let data: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let detail = match data["op"].as_str() {
        Some("updated") => data["patch"]
            .as_array()
            .map(|ops| {
                ops.iter()
                    .filter(|o| {
                        o["path"] != "/metadata/resourceVersion"
                            && o["path"] != "/metadata/generation"
                    })
                    .map(|o| {
                        format!(
                            "{} {} {}",
                            o["op"].as_str().unwrap_or(""),
                            o["path"].as_str().unwrap_or(""),
                            o.get("value").map(Value::to_string).unwrap_or_default()
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            })
            .unwrap_or_default(),
        Some("created") => format!("spec {}", data["object"]["spec"]),
        Some("deleted") => "last state kept in data.object".into(),
        _ => String::new(),
    };
    format!(
        "  webhook ← {:<28} {:<14} id={}  {}{}",
        h("ce-type"),
        h("ce-subject"),
        h("ce-id"),
        if h("ce-resync") == "true" {
            "[resync] "
        } else {
            ""
        },
        detail
    )
}

pub(super) async fn run(args: DemoArgs) -> Result<(), CliError> {
    let dir = tempfile::tempdir()
        .map_err(|e| CliError::Usage(format!("cannot create a temporary directory: {e}")))?;
    std::fs::write(dir.path().join("bundle.yaml"), BUNDLE)
        .map_err(|e| CliError::Usage(e.to_string()))?;
    std::fs::write(
        dir.path().join("webhook-secret"),
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n",
    )
    .map_err(|e| CliError::Usage(e.to_string()))?;

    // The local webhook receiver: prints each CloudEvent as it arrives.
    let received = Arc::new(AtomicUsize::new(0));
    let count = received.clone();
    let receiver = Router::new().route(
        "/events",
        post(move |headers: HeaderMap, body: Bytes| {
            let count = count.clone();
            async move {
                outln!("{}", describe(&headers, &body));
                count.fetch_add(1, Ordering::SeqCst);
                StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let hook = listener
        .local_addr()
        .map_err(|e| CliError::Usage(e.to_string()))?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, receiver).await;
    });

    let yaml = format!(
        r#"cluster:
  embedded:
    load: {bundle}
resources:
  - group: example.com
    kind: Database
    redact: [/spec/password]
sinks:
  - name: archive
    type: file
    path: {events}
  - name: ci-hook
    type: webhook
    url: http://{hook}/events
    signing:
      secret: {{fromFile: {secret}}}
journal:
  path: {journal}
admin:
  listen: 127.0.0.1:0
"#,
        bundle = dir.path().join("bundle.yaml").display(),
        events = dir.path().join("events.jsonl").display(),
        secret = dir.path().join("webhook-secret").display(),
        journal = dir.path().join("journal").display(),
    );
    let cfg = config::from_str(&yaml).map_err(CliError::ConfigInvalid)?;
    outln!(
        "herald demo: an embedded cluster with a Database CRD; herald delivers to a file and a webhook at http://{hook}/events\n"
    );
    let running = app::start(&cfg, None)
        .await
        .map_err(CliError::StartFailed)?;
    let Some(sim) = running.embedded() else {
        return Err(CliError::Usage(
            "the demo needs the embedded cluster".into(),
        ));
    };
    let started = Instant::now();
    while !running.synced() && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let dbs = ResourceRef::namespaced("example.com", "v1", "databases", "default");
    let step = |what: &str| outln!("cluster: {what}");
    let pace = args.pace;
    let obj = json!({"apiVersion": "example.com/v1", "kind": "Database",
                     "metadata": {"name": "orders", "labels": {"team": "shop"}},
                     "spec": {"engine": "postgres", "replicas": 1, "password": "hunter2"}});
    let mut script: Vec<(&str, Step<'_>)> = vec![
        (
            "create Database default/orders",
            Box::new(|| sim.create(&dbs, obj.clone()).map(|_| ())),
        ),
        (
            "scale orders to 3 replicas (spec update)",
            Box::new(|| {
                sim.merge_patch(&dbs, "orders", &json!({"spec": {"replicas": 3}}))
                    .map(|_| ())
            }),
        ),
        (
            "the operator reports status Ready",
            Box::new(|| {
                sim.merge_patch_status(&dbs, "orders", &json!({"status": {"phase": "Ready"}}))
                    .map(|_| ())
            }),
        ),
        (
            "add a finalizer (backup before delete)",
            Box::new(|| {
                sim.merge_patch(
                    &dbs,
                    "orders",
                    &json!({"metadata": {"finalizers": ["example.com/backup"]}}),
                )
                .map(|_| ())
            }),
        ),
        (
            "delete orders (held by the finalizer)",
            Box::new(|| sim.delete(&dbs, "orders")),
        ),
        (
            "the backup is done: remove the finalizer",
            Box::new(|| {
                sim.merge_patch(&dbs, "orders", &json!({"metadata": {"finalizers": null}}))
                    .map(|_| ())
            }),
        ),
        (
            "create Database default/billing",
            Box::new(|| {
                sim.create(&dbs, json!({"apiVersion": "example.com/v1", "kind": "Database", "metadata": {"name": "billing"}, "spec": {"engine": "mysql", "replicas": 1}})).map(|_| ())
            }),
        ),
    ];
    for (what, action) in script.drain(..) {
        if started.elapsed() >= args.duration {
            break;
        }
        step(what);
        if let Err(error) = action() {
            tracing::warn!(message = "A demo change failed.", %error);
        }
        tokio::time::sleep(pace).await;
    }
    drop(script);
    while received.load(Ordering::SeqCst) < EXPECTED_EVENTS && started.elapsed() < args.duration {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let archived = std::fs::read_to_string(dir.path().join("events.jsonl"))
        .map(|t| t.lines().count())
        .unwrap_or(0);
    running
        .stop(Duration::from_secs(5))
        .await
        .map_err(CliError::JournalFailed)?;
    outln!(
        "\n{} events reached the webhook and {archived} the file sink (one structured CloudEvent per line).",
        received.load(Ordering::SeqCst)
    );
    outln!(
        "Point herald at a real cluster: copy docs/examples/embedded.yaml, replace `embedded:` with"
    );
    outln!(
        "`kubeconfig: {{}}` (KUBECONFIG or ~/.kube/config), list your resources and sinks, then:"
    );
    outln!("  herald check -c herald.yaml --connect && herald run -c herald.yaml");
    Ok(())
}
