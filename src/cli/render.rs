//! `herald render -c FILE --sink NAME [--object FILE.yaml --old FILE.yaml --op updated] [--json]`:
//! prints the request a webhook sink would send for an object's change (method, URL, headers with
//! secrets masked, body), so a template can be checked without a cluster.
//!
//! The event is the one `herald run` would make: the object (and the old one) in recorded form
//! (managedFields stripped, redactions applied) and normalized with the settings of the
//! `resources[]` entry that watches its group and kind, so `payload` decides whether `oldObject`
//! is there. Without `--object`, a small example object of the first resource stands in.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use herald_sink_core::config::SinkConfig as _;
use herald_sink_core::event::CloudEvent;
use serde_json::{Value, json};

use super::CliError;
use crate::config::{self, SinkKind};
use crate::event::{self, Op};

/// Options of `herald render`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// The configuration file.
    #[arg(short = 'c', long, env = "HERALD_CONFIG")]
    pub config: PathBuf,
    /// The webhook sink whose request to print.
    #[arg(long)]
    pub sink: String,
    /// The object (YAML or JSON, as `kubectl get -o yaml` prints it). Default: an example object
    /// of the first resource.
    #[arg(long)]
    pub object: Option<PathBuf>,
    /// The previous state of the object, for `updated` (its `patch`, and `oldObject` when the
    /// resource's payload includes it).
    #[arg(long)]
    pub old: Option<PathBuf>,
    /// The change. Default: `updated` with `--old`, else `created`.
    #[arg(long, value_enum)]
    pub op: Option<OpArg>,
    /// Print the request as JSON: `{method, url, headers: [{name, value}], body}` (`bodyBase64`
    /// instead of `body` when it is not UTF-8).
    #[arg(long)]
    pub json: bool,
}

/// `--op`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OpArg {
    /// The object was created.
    Created,
    /// The object changed.
    Updated,
    /// The object was deleted.
    Deleted,
}

pub(super) async fn run(args: RenderArgs) -> Result<(), CliError> {
    let cfg = config::load(&args.config).map_err(CliError::ConfigInvalid)?;
    let Some(sink) = cfg.sinks.iter().find(|s| s.name == args.sink) else {
        return Err(CliError::UnknownSink {
            sink: args.sink.clone(),
            known: cfg.sinks.iter().map(|s| s.name.clone()).collect(),
        });
    };
    let SinkKind::Webhook(webhook) = &sink.kind else {
        return Err(CliError::Usage(format!(
            "herald render prints HTTP requests: sink {:?} is not a webhook",
            sink.name
        )));
    };
    let object = match &args.object {
        Some(path) => read_object(path)?,
        None => example_object(&cfg)?,
    };
    let old = args.old.as_deref().map(read_object).transpose()?;
    let op = match args.op {
        Some(OpArg::Created) => Op::Created,
        Some(OpArg::Updated) => Op::Updated,
        Some(OpArg::Deleted) => Op::Deleted,
        None if old.is_some() => Op::Updated,
        None => Op::Created,
    };
    let event = event_of(&cfg, &object, old.as_ref(), op);
    let built = webhook
        .build(&sink.name, &sink.delivery)
        .await
        .map_err(|e| CliError::Render(herald_sink_core::error_chain(&e)))?;
    let request = built
        .preview(&[&event])
        .map_err(|reason| CliError::Render(format!("{}: {}", reason.code, reason.detail)))?;
    if args.json {
        let mut doc = json!({
            "sink": sink.name,
            "method": request.method,
            "url": request.url,
            "headers": request.headers.iter().map(|(name, value)| json!({"name": name, "value": value})).collect::<Vec<_>>(),
        });
        match String::from_utf8(request.body) {
            Ok(text) => doc["body"] = json!(text),
            Err(e) => {
                use base64::Engine as _;
                doc["bodyBase64"] =
                    json!(base64::engine::general_purpose::STANDARD.encode(e.into_bytes()));
            }
        }
        outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        outln!("{} {}", request.method, request.url);
        for (name, value) in &request.headers {
            outln!("{name}: {value}");
        }
        outln!("");
        outln!("{}", String::from_utf8_lossy(&request.body));
    }
    Ok(())
}

fn read_object(path: &Path) -> Result<Value, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Usage(format!("cannot read {}: {e}", path.display())))?;
    let value: Value = serde_yaml_ng::from_str(&text).map_err(|e| {
        CliError::Usage(format!(
            "{} is not a YAML or JSON object: {e}",
            path.display()
        ))
    })?;
    if !value.is_object() {
        return Err(CliError::Usage(format!(
            "{} is not a YAML or JSON object",
            path.display()
        )));
    }
    Ok(value)
}

/// A small object of the first resource, for a first look at a template.
fn example_object(cfg: &config::Config) -> Result<Value, CliError> {
    let Some(resource) = cfg.resources.first() else {
        return Err(CliError::Usage(
            "the configuration watches no resource: give --object".into(),
        ));
    };
    let version = resource.version.clone().unwrap_or_else(|| "v1".into());
    let api_version = if resource.group.is_empty() {
        version
    } else {
        format!("{}/{version}", resource.group)
    };
    let kind = resource.kind.clone().unwrap_or_else(|| "Example".into());
    Ok(json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": "example",
            "namespace": "default",
            "uid": "00000000-0000-0000-0000-000000000001",
            "resourceVersion": "1",
            "generation": 1,
            "labels": {"app": "example"}
        },
        "spec": {},
        "status": {}
    }))
}

/// The event `herald run` would make for this change.
fn event_of(cfg: &config::Config, object: &Value, old: Option<&Value>, op: Op) -> CloudEvent {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = match api_version.rsplit_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    };
    let kind = object["kind"].as_str().unwrap_or_default();
    let spec = crate::watch::WatchSpec::from_config(cfg)
        .into_iter()
        .find(|s| s.group == group && s.kind.as_deref().is_none_or(|k| k == kind));
    let (template, plural) = match spec {
        Some(spec) => {
            let plural = spec.plural.clone();
            (spec.template, plural)
        }
        None => (
            event::Resource {
                cluster: cfg.cluster.name.clone(),
                group: String::new(),
                version: String::new(),
                kind: String::new(),
                plural: String::new(),
                namespaced: true,
                type_prefix: event::DEFAULT_TYPE_PREFIX.to_owned(),
                payload: event::Payload::DEFAULT,
                redact: Vec::new(),
                keep_managed_fields: false,
            },
            None,
        ),
    };
    let resource = event::Resource {
        group: group.to_owned(),
        version: version.to_owned(),
        kind: kind.to_owned(),
        // Discovery would tell; the usual English plural is what most CRDs declare.
        plural: plural.unwrap_or_else(|| format!("{}s", kind.to_ascii_lowercase())),
        namespaced: object["metadata"]["namespace"].is_string(),
        ..template
    };
    let object = event::prepare(&resource, object.clone());
    let old = old.map(|o| event::prepare(&resource, o.clone()));
    event::normalize(
        &resource,
        event::Observed {
            op,
            object: &object,
            old: old.as_ref(),
            resync: false,
            resource_version: None,
            observed_at: jiff::Timestamp::now(),
        },
    )
}
