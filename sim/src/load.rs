//! `--load FILE.yaml`: applies a multi-document YAML of CRDs, namespaces and objects at start, CRDs first
//! so the objects that need them find their resource. Each document is a server-side apply (an upsert).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::meta;
use super::ops::{Part, Target, WriteOpts};
use super::resource::{Behaviour, GroupResource};
use super::status::ApiError;
use super::store::Store;

/// Why a load failed; every variant names the document (1-based, in file order).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {path}")]
    ReadFailed {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A document is not valid YAML.
    #[error("document {doc} is not valid YAML")]
    ParseFailed {
        /// Which document.
        doc: usize,
        /// The parser's error.
        #[source]
        source: serde_yaml_ng::Error,
    },
    /// A document names no type the simulator serves (yet).
    #[error("document {doc}: no served resource for apiVersion {api_version:?}, kind {kind:?}")]
    UnknownKind {
        /// Which document.
        doc: usize,
        /// Its apiVersion.
        api_version: String,
        /// Its kind.
        kind: String,
    },
    /// The server refused a document.
    #[error("document {doc} ({what}) was refused")]
    ApplyFailed {
        /// Which document.
        doc: usize,
        /// `Kind namespace/name`.
        what: String,
        /// The server's answer.
        #[source]
        source: ApiError,
    },
}

/// Reads and applies `path`; returns how many documents were applied.
pub(crate) fn load_file(store: &Store, path: &Path) -> Result<usize, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::ReadFailed {
        path: path.to_path_buf(),
        source,
    })?;
    load_str(store, &text)
}

/// Applies every document of `text`: CRDs, then namespaces, then everything else, each in file order.
pub(crate) fn load_str(store: &Store, text: &str) -> Result<usize, LoadError> {
    let mut docs = Vec::new();
    for (i, de) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let v = Value::deserialize(de)
            .map_err(|source| LoadError::ParseFailed { doc: i + 1, source })?;
        if !v.is_null() {
            docs.push((i + 1, v));
        }
    }
    let rank = |v: &Value| match v.get("kind").and_then(Value::as_str) {
        Some("CustomResourceDefinition") => 0,
        Some("Namespace") => 1,
        _ => 2,
    };
    docs.sort_by_key(|(i, v)| (rank(v), *i));
    let opts = WriteOpts {
        field_manager: Some("herald-sim-load".into()),
        force: true,
        ..WriteOpts::default()
    };
    for (doc, v) in &docs {
        let api_version = v
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let kind = v
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let (group, version) = match api_version.split_once('/') {
            Some((g, ver)) => (g.to_string(), ver.to_string()),
            None => (String::new(), api_version.clone()),
        };
        let unknown = || LoadError::UnknownKind {
            doc: *doc,
            api_version: api_version.clone(),
            kind: kind.clone(),
        };
        let (gr, namespaced) = {
            let state = store.read();
            let def = state
                .resources
                .values()
                .find(|d| {
                    d.gr.group == group && d.kind == kind && d.served_version(&version).is_some()
                })
                .filter(|d| d.behaviour != Behaviour::Review)
                .ok_or_else(unknown)?;
            (
                GroupResource::new(def.gr.group.clone(), def.gr.resource.clone()),
                def.namespaced,
            )
        };
        let name = meta::name(v).to_string();
        let namespace = namespaced.then(|| {
            let ns = meta::namespace(v);
            if ns.is_empty() {
                "default".to_string()
            } else {
                ns.to_string()
            }
        });
        let what = match &namespace {
            Some(ns) => format!("{kind} {ns}/{name}"),
            None => format!("{kind} {name}"),
        };
        let target = Target {
            gr,
            version,
            namespace,
        };
        store
            .write(|s| s.apply(&target, &name, Part::Main, v.clone(), &opts))
            .map_err(|source| LoadError::ApplyFailed {
                doc: *doc,
                what,
                source,
            })?;
    }
    Ok(docs.len())
}
