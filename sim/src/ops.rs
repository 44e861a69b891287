//! Write semantics of the API server: create, update, patch, delete and the rules around them
//! (server-owned metadata, generation, the status subresource, finalizers, no-op writes, cascades).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::builtin;
use super::crd;
use super::fieldmanager;
use super::meta;
use super::patch;
use super::resource::{Behaviour, GroupResource, ObjectKey, ResourceDef};
use super::schema;
use super::selector::{FieldSelector, LabelSelector};
use super::status::{ApiError, ApiResult, Cause};
use super::store::State;
use super::strategic;

/// The collection a request addresses: resource, version from the URL, namespace from the URL.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) gr: GroupResource,
    pub(crate) version: String,
    /// The URL's namespace; `None` for cluster-scoped resources and cross-namespace collections.
    pub(crate) namespace: Option<String>,
}

impl Target {
    fn key(&self, name: &str) -> ObjectKey {
        ObjectKey::new(self.namespace.as_deref().unwrap_or(""), name)
    }
}

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// The main resource endpoint.
    Main,
    /// The `/status` subresource.
    Status,
}

/// The patch formats the server accepts besides apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchKind {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/strategic-merge-patch+json`: built-in kinds only (custom resources get 415).
    Strategic,
}

/// `DeleteOptions` that change what the server does.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOptions {
    pub(crate) uid: Option<String>,
    pub(crate) resource_version: Option<String>,
    pub(crate) dry_run: bool,
}

/// How a write handles fields its schema does not declare (`fieldValidation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum FieldValidation {
    /// Drop them silently.
    Ignore,
    /// Drop them and say so in `Warning` headers (the server's default).
    #[default]
    Warn,
    /// Refuse the write with 400.
    Strict,
}

/// Options every write carries.
#[derive(Debug, Clone, Default)]
pub(crate) struct WriteOpts {
    pub(crate) dry_run: bool,
    /// The field manager: `fieldManager`, else derived from the User-Agent, else `unknown`.
    pub(crate) field_manager: Option<String>,
    pub(crate) validation: FieldValidation,
    /// `force` of server-side apply.
    pub(crate) force: bool,
    /// Skip the name rules (DNS subdomain or label) on create: the test hook behind
    /// [`Simulator::create_with_any_name`](crate::Simulator::create_with_any_name), for clients'
    /// tests with non-conformant data. Never set by an HTTP request.
    pub(crate) any_name: bool,
}

impl WriteOpts {
    pub(crate) fn manager(&self) -> &str {
        self.field_manager.as_deref().unwrap_or("unknown")
    }
}

/// The answer to a write: the object and any warnings for `Warning` headers.
#[derive(Debug)]
pub(crate) struct Written {
    pub(crate) object: Value,
    pub(crate) warnings: Vec<String>,
}

impl Written {
    fn new(object: Value, warnings: Vec<String>) -> Self {
        Self { object, warnings }
    }
}

/// Who maintains `managedFields` for a write: the apply (already done) or the update bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Managed {
    Applied,
    Update,
}

fn has_status_subresource(def: &ResourceDef, version: &str) -> bool {
    match def.behaviour {
        Behaviour::Custom => def
            .served_version(version)
            .is_some_and(|v| v.status_subresource),
        Behaviour::Crd | Behaviour::Namespace => true,
        Behaviour::Builtin => def
            .served_version(version)
            .is_some_and(|v| v.status_subresource),
        Behaviour::Review => false,
    }
}

/// Whether the resource tracks `metadata.generation` (custom resources, CRDs and the reconciled
/// built-ins do; Leases, Events, Services, ConfigMaps... do not).
fn has_generation(def: &ResourceDef) -> bool {
    def.tracks_generation
}

/// Prunes unknown fields and validates against the version's schema; unknown fields are refused under
/// `Strict` and reported as warnings under `Warn`.
fn check_schema(
    def: &ResourceDef,
    version: &str,
    name: &str,
    obj: &mut Value,
    validation: FieldValidation,
) -> ApiResult<Vec<String>> {
    let Some(schema) = def.served_version(version).and_then(|v| v.schema.as_ref()) else {
        return Ok(Vec::new());
    };
    let checked = schema::validate_and_prune(schema, obj);
    if !checked.errors.is_empty() {
        return Err(ApiError::invalid(
            &def.kind,
            &def.gr.group,
            name,
            checked.errors,
        ));
    }
    let unknown: Vec<String> = checked
        .unknown
        .iter()
        .map(|p| format!("unknown field \"{}\"", p.trim_start_matches('.')))
        .collect();
    match validation {
        FieldValidation::Strict if !unknown.is_empty() => Err(ApiError::bad_request(format!(
            "{}.{} \"{name}\" is invalid: strict decoding error: {}",
            def.kind,
            def.gr.group,
            unknown.join(", ")
        ))),
        FieldValidation::Warn => Ok(unknown),
        _ => Ok(Vec::new()),
    }
}

/// What a delete request did.
#[derive(Debug)]
pub(crate) enum Deleted {
    /// The object is gone; the body is a success `Status` with details.
    Gone(Value),
    /// Finalizers keep the object; the body is the object with its deletionTimestamp.
    Pending(Value),
}

/// Sets `apiVersion`/`kind` as the requested version presents them (CRD conversion strategy `None`).
pub(crate) fn present(def: &ResourceDef, version: &str, obj: &Value) -> Value {
    let mut out = obj.clone();
    let map = meta::object_mut(&mut out);
    map.insert("apiVersion".into(), Value::String(def.api_version(version)));
    map.insert("kind".into(), Value::String(def.kind.clone()));
    out
}

fn describe_body(obj: &Value) -> String {
    let mut s = obj.to_string();
    if s.len() > 256 {
        let mut cut = 256;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

impl State {
    /// The definition of `gr`, or the 404 for an unserved path.
    pub(crate) fn def(&self, gr: &GroupResource) -> ApiResult<&ResourceDef> {
        self.resources.get(gr).ok_or_else(ApiError::path_not_found)
    }

    /// Checks `apiVersion`/`kind` of a request body against the URL, filling a missing `apiVersion`.
    fn check_type(def: &ResourceDef, version: &str, obj: &mut Value) -> ApiResult<()> {
        let Some(map) = obj.as_object_mut() else {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        };
        let expected = def.api_version(version);
        let kind = map
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if kind.is_empty() {
            return Err(ApiError::bad_request(format!(
                "Object 'Kind' is missing in '{}'",
                describe_body(obj)
            )));
        }
        match map.get("apiVersion").and_then(Value::as_str) {
            None | Some("") => {
                map.insert("apiVersion".into(), Value::String(expected.clone()));
            }
            Some(av) if av != expected => {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({av}) does not match the expected API version ({expected})"
                )));
            }
            Some(_) => {}
        }
        if kind != def.kind {
            let name = meta::name(obj).to_string();
            return Err(ApiError::invalid(
                &def.kind,
                &def.gr.group,
                &name,
                vec![Cause::new(
                    "FieldValueInvalid",
                    "kind",
                    format!("Invalid value: \"{kind}\": must be {}", def.kind),
                )],
            ));
        }
        if map
            .get("metadata")
            .is_some_and(|m| !m.is_object() && !m.is_null())
        {
            return Err(ApiError::bad_request("metadata: must be an object"));
        }
        Ok(())
    }

    /// Fills a missing body name from the URL and refuses a different one, as PUT and apply do.
    fn check_name(obj: &mut Value, name: &str) -> ApiResult<()> {
        let body_name = meta::name(obj).to_string();
        if body_name.is_empty() {
            meta::meta_mut(obj).insert("name".into(), Value::String(name.to_string()));
        } else if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        Ok(())
    }

    /// Checks the body's namespace against the URL and sets it (clears it for cluster-scoped resources).
    fn place(def: &ResourceDef, target: &Target, obj: &mut Value) -> ApiResult<()> {
        let m = meta::meta_mut(obj);
        if def.namespaced {
            let url_ns = target.namespace.clone().unwrap_or_default();
            match m.get("namespace").and_then(Value::as_str) {
                Some(ns) if !ns.is_empty() && ns != url_ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {
                    m.insert("namespace".into(), Value::String(url_ns));
                }
            }
        } else {
            m.remove("namespace");
        }
        Ok(())
    }

    fn check_namespace_open(&self, def: &ResourceDef, target: &Target) -> ApiResult<()> {
        let Some(ns) = target.namespace.as_deref().filter(|_| def.namespaced) else {
            return Ok(());
        };
        let Some(nsobj) = self.get(&GroupResource::namespaces(), &ObjectKey::new("", ns)) else {
            return Err(ApiError::not_found(&GroupResource::namespaces(), ns));
        };
        if meta::is_deleting(nsobj) {
            return Err(ApiError::forbidden(
                &def.gr,
                "",
                &format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            ));
        }
        Ok(())
    }

    /// POST to a collection.
    pub(crate) fn create(
        &mut self,
        target: &Target,
        obj: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Written> {
        self.create_inner(target, obj, opts, Managed::Update)
    }

    fn create_inner(
        &mut self,
        target: &Target,
        mut obj: Value,
        opts: &WriteOpts,
        managed: Managed,
    ) -> ApiResult<Written> {
        let def = self.def(&target.gr)?.clone();
        Self::check_type(&def, &target.version, &mut obj)?;
        Self::place(&def, target, &mut obj)?;
        if def.terminating {
            return Err(ApiError::method_not_allowed(
                "create not allowed while custom resource definition is terminating",
            ));
        }
        meta::check_types(&def, &obj)?;

        let m = meta::meta_mut(&mut obj);
        if m.get("resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|rv| !rv.is_empty())
        {
            return Err(ApiError::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let mut name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if name.is_empty() {
            let prefix = m.get("generateName").and_then(Value::as_str).unwrap_or("");
            if prefix.is_empty() {
                return Err(ApiError::invalid(
                    &def.kind,
                    &def.gr.group,
                    "",
                    vec![Cause::new(
                        "FieldValueRequired",
                        "metadata.name",
                        "Required value: name or generateName is required",
                    )],
                ));
            }
            name = format!("{prefix}{}", meta::random_suffix());
            m.insert("name".into(), Value::String(name.clone()));
        }
        let valid = if opts.any_name {
            Ok(())
        } else if def.behaviour == Behaviour::Namespace {
            meta::validate_label(&name)
        } else {
            meta::validate_subdomain(&name)
        };
        if let Err(e) = valid {
            return Err(ApiError::invalid(
                &def.kind,
                &def.gr.group,
                &name,
                vec![Cause::new(
                    "FieldValueInvalid",
                    "metadata.name",
                    format!("Invalid value: \"{name}\": {e}"),
                )],
            ));
        }
        for server_owned in [
            "uid",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            m.remove(server_owned);
        }
        if managed == Managed::Update {
            m.remove("managedFields");
        }
        m.insert(
            "uid".into(),
            Value::String(uuid::Uuid::new_v4().to_string()),
        );
        m.insert("creationTimestamp".into(), Value::String(meta::now()));
        if has_generation(&def) {
            m.insert("generation".into(), json!(1));
        }
        meta::check_labels(&def, &name, &obj)?;

        self.check_namespace_open(&def, target)?;
        let key = target.key(&name);
        if self.get(&def.gr, &key).is_some() {
            return Err(ApiError::already_exists(&def.gr, &name));
        }

        let mut warnings = Vec::new();
        match def.behaviour {
            Behaviour::Custom => {
                if def
                    .served_version(&target.version)
                    .is_some_and(|v| v.status_subresource)
                {
                    meta::object_mut(&mut obj).remove("status");
                }
                warnings = check_schema(&def, &target.version, &name, &mut obj, opts.validation)?;
            }
            Behaviour::Crd => {
                crd::validate_and_default(&mut obj, None)
                    .map_err(|causes| ApiError::invalid(&def.kind, &def.gr.group, &name, causes))?;
                let new_def = crd::resource_def(&obj);
                if self.resources.contains_key(&new_def.gr) {
                    return Err(ApiError::already_exists(&def.gr, &name));
                }
                let st = crd::status(&obj, None, false);
                meta::object_mut(&mut obj).insert("status".into(), st);
            }
            Behaviour::Namespace => {
                meta::object_mut(&mut obj).insert("status".into(), json!({"phase": "Active"}));
            }
            Behaviour::Builtin => {
                if let Some(status) = builtin::initial_status(&def) {
                    meta::object_mut(&mut obj).insert("status".into(), status);
                }
                builtin::prepare(self, &def, None, &mut obj)?;
            }
            Behaviour::Review => {}
        }
        meta::normalize(&mut obj);
        if managed == Managed::Update {
            let api_version = def.api_version(&target.version);
            fieldmanager::record_update(None, &mut obj, opts.manager(), &api_version, &meta::now());
        }
        if opts.dry_run {
            return Ok(Written::new(present(&def, &target.version, &obj), warnings));
        }
        let stored = self.put(&def.gr, key, obj);
        if def.behaviour == Behaviour::Crd {
            let new_def = crd::resource_def(&stored);
            self.resources.insert(new_def.gr.clone(), new_def);
        }
        Ok(Written::new(
            present(&def, &target.version, &stored),
            warnings,
        ))
    }

    /// GET of one object.
    pub(crate) fn get_object(&self, target: &Target, name: &str) -> ApiResult<Value> {
        let def = self.def(&target.gr)?;
        let obj = self
            .get(&def.gr, &target.key(name))
            .ok_or_else(|| ApiError::not_found(&def.gr, name))?;
        Ok(present(def, &target.version, obj))
    }

    /// PUT of a whole object or its status.
    pub(crate) fn update(
        &mut self,
        target: &Target,
        name: &str,
        part: Part,
        mut obj: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Written> {
        let def = self.def(&target.gr)?.clone();
        Self::check_type(&def, &target.version, &mut obj)?;
        Self::check_name(&mut obj, name)?;
        Self::place(&def, target, &mut obj)?;
        let key = target.key(name);
        let old = self
            .get(&def.gr, &key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&def.gr, name))?;
        // A uid in the body is a precondition (the object may have been deleted and re-created).
        if let Some(uid) = meta::meta_str(&obj, "uid").filter(|u| !u.is_empty()) {
            let actual = meta::meta_str(&old, "uid").unwrap_or("");
            if uid != actual {
                return Err(ApiError::conflict_with(
                    &def.gr,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
                    ),
                ));
            }
        }
        let rv = meta::resource_version(&obj);
        if rv.is_empty() {
            // Built-in types allow unconditional updates; custom resources and CRDs do not.
            if has_generation(&def) {
                return Err(ApiError::invalid(
                    &def.kind,
                    &def.gr.group,
                    name,
                    vec![Cause::new(
                        "FieldValueInvalid",
                        "metadata.resourceVersion",
                        "Invalid value: 0x0: must be specified for an update",
                    )],
                ));
            }
        } else if rv != meta::resource_version(&old) {
            return Err(ApiError::conflict(&def.gr, name));
        }
        self.write_update(&def, target, key, &old, obj, part, opts, Managed::Update)
    }

    /// PATCH (merge or JSON patch) of a whole object or its status.
    pub(crate) fn patch(
        &mut self,
        target: &Target,
        name: &str,
        part: Part,
        kind: PatchKind,
        body: &Value,
        opts: &WriteOpts,
    ) -> ApiResult<Written> {
        let def = self.def(&target.gr)?.clone();
        let key = target.key(name);
        let old = self
            .get(&def.gr, &key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&def.gr, name))?;
        let current = present(&def, &target.version, &old);
        let mut patched = match kind {
            PatchKind::Merge => {
                if !body.is_object() {
                    return Err(ApiError::bad_request("merge patch must be a JSON object"));
                }
                let mut doc = current.clone();
                patch::merge_patch(&mut doc, body);
                doc
            }
            PatchKind::Strategic => {
                if !body.is_object() {
                    return Err(ApiError::bad_request(
                        "strategic merge patch must be a JSON object",
                    ));
                }
                let mut doc = current.clone();
                strategic::apply(&mut doc, body).map_err(ApiError::bad_request)?;
                doc
            }
            PatchKind::Json => patch::json_patch(&current, body).map_err(|e| {
                if e.is_malformed() {
                    ApiError::bad_request(e.to_string())
                } else {
                    ApiError::invalid(
                        &def.kind,
                        &def.gr.group,
                        name,
                        vec![Cause::new("FieldValueInvalid", "", e.to_string())],
                    )
                }
            })?,
        };
        if !patched.is_object() {
            return Err(ApiError::bad_request(
                "the patched object must be a JSON object",
            ));
        }
        Self::check_type(&def, &target.version, &mut patched)?;
        let patched_name = meta::name(&patched).to_string();
        if patched_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({patched_name}) does not match the name on the URL ({name})"
            )));
        }
        if meta::meta_str(&patched, "uid") != meta::meta_str(&old, "uid") {
            return Err(ApiError::invalid(
                &def.kind,
                &def.gr.group,
                name,
                vec![Cause::new(
                    "FieldValueInvalid",
                    "metadata.uid",
                    "Invalid value: field is immutable",
                )],
            ));
        }
        Self::place(&def, target, &mut patched)?;
        // A resourceVersion the patch sets is a precondition; none means unconditional.
        let rv = meta::resource_version(&patched).to_string();
        if !rv.is_empty() && rv != meta::resource_version(&old) {
            return Err(ApiError::conflict(&def.gr, name));
        }
        self.write_update(
            &def,
            target,
            key,
            &old,
            patched,
            part,
            opts,
            Managed::Update,
        )
    }

    /// Server-side apply (`application/apply-patch+yaml`): an upsert with field ownership.
    pub(crate) fn apply(
        &mut self,
        target: &Target,
        name: &str,
        part: Part,
        mut body: Value,
        opts: &WriteOpts,
    ) -> ApiResult<(Written, bool)> {
        let def = self.def(&target.gr)?.clone();
        if !body.is_object() {
            return Err(ApiError::bad_request("the apply body must be an object"));
        }
        Self::check_type(&def, &target.version, &mut body)?;
        Self::check_name(&mut body, name)?;
        Self::place(&def, target, &mut body)?;
        if meta::meta(&body).is_some_and(|m| m.contains_key("managedFields")) {
            return Err(ApiError::bad_request("metadata.managedFields must be nil"));
        }
        let has_status_sub = has_status_subresource(&def, &target.version);
        // Each endpoint applies only its part: status on /status, everything else on the main one.
        match part {
            Part::Main if has_status_sub => {
                meta::object_mut(&mut body).remove("status");
            }
            Part::Status => {
                let map = meta::object_mut(&mut body);
                map.retain(|k, _| {
                    matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status")
                });
                meta::meta_mut(&mut body).retain(|k, _| matches!(k.as_str(), "name" | "namespace"));
            }
            Part::Main => {}
        }
        let manager = opts.manager().to_string();
        let api_version = def.api_version(&target.version);
        let key = target.key(name);
        let conflict = |conflicts: Vec<fieldmanager::Conflict>| {
            let causes = conflicts
                .iter()
                .map(|c| {
                    Cause::new(
                        "FieldManagerConflict",
                        c.field.clone(),
                        format!("conflict with \"{}\" using {api_version}", c.manager),
                    )
                })
                .collect();
            ApiError::apply_conflict(
                &def.gr,
                name,
                fieldmanager::conflict_message(&conflicts, &api_version),
                causes,
            )
        };
        match self.get(&def.gr, &key).cloned() {
            None if part == Part::Status => Err(ApiError::not_found(&def.gr, name)),
            None => {
                let obj = fieldmanager::apply(
                    None,
                    &body,
                    &manager,
                    opts.force,
                    &api_version,
                    &meta::now(),
                )
                .map_err(conflict)?;
                Ok((
                    self.create_inner(target, obj, opts, Managed::Applied)?,
                    true,
                ))
            }
            Some(old) => {
                let current = present(&def, &target.version, &old);
                let new = fieldmanager::apply(
                    Some(&current),
                    &body,
                    &manager,
                    opts.force,
                    &api_version,
                    &meta::now(),
                )
                .map_err(conflict)?;
                let mut new = new;
                if def.behaviour == Behaviour::Builtin && part == Part::Main {
                    // The field manager compares before the kind's defaults are applied; a re-apply
                    // that only drops defaulted values (a Service port's `targetPort`) changes
                    // nothing once they are back, so it must not move the manager's `time` either.
                    builtin::prepare(self, &def, Some(&old), &mut new)?;
                    keep_times_if_unchanged(&current, &mut new);
                }
                Ok((
                    self.write_update(&def, target, key, &old, new, part, opts, Managed::Applied)?,
                    false,
                ))
            }
        }
    }

    /// The shared tail of PUT, PATCH and apply: server-owned fields, generation, status rules, schema,
    /// field ownership, no-op detection, and the finalizer-emptied deletion.
    #[allow(clippy::too_many_arguments)]
    fn write_update(
        &mut self,
        def: &ResourceDef,
        target: &Target,
        key: ObjectKey,
        old: &Arc<Value>,
        new: Value,
        part: Part,
        opts: &WriteOpts,
        managed: Managed,
    ) -> ApiResult<Written> {
        let name = key.name.clone();
        let has_status_sub = has_status_subresource(def, &target.version);
        if part == Part::Status && !has_status_sub {
            return Err(ApiError::path_not_found());
        }
        meta::check_types(def, &new)?;
        let request_fields = meta::meta(&new)
            .and_then(|m| m.get("managedFields"))
            .cloned();
        let mut candidate = match part {
            Part::Status => {
                // The status endpoint takes only `status` from the request; everything else stays.
                let mut c = (**old).clone();
                let map = meta::object_mut(&mut c);
                match new.get("status") {
                    Some(s) => map.insert("status".into(), s.clone()),
                    None => map.remove("status"),
                };
                c
            }
            Part::Main => {
                let mut c = new;
                let old_meta = meta::meta(old).cloned().unwrap_or_default();
                let m = meta::meta_mut(&mut c);
                for owned in [
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "generation",
                    "selfLink",
                ] {
                    match old_meta.get(owned) {
                        Some(v) => m.insert(owned.into(), v.clone()),
                        None => m.remove(owned),
                    };
                }
                let map = meta::object_mut(&mut c);
                if has_status_sub {
                    match old.get("status") {
                        Some(s) => map.insert("status".into(), s.clone()),
                        None => map.remove("status"),
                    };
                }
                c
            }
        };
        // Ownership: an apply brings its own; other writes start from the request's list (clients may
        // reset it) or the stored one, and then take the fields they changed.
        let fields = match (managed, request_fields) {
            (Managed::Applied, Some(f)) => Some(f),
            (Managed::Update, Some(f)) if f.as_array().is_some_and(|a| !a.is_empty()) => Some(f),
            _ => meta::meta(old)
                .and_then(|m| m.get("managedFields"))
                .cloned(),
        };
        match fields {
            Some(f) => meta::meta_mut(&mut candidate).insert("managedFields".into(), f),
            None => meta::meta_mut(&mut candidate).remove("managedFields"),
        };
        // Stored objects keep the apiVersion they were written with; compare in one version.
        let api_version = def.api_version(&target.version);
        meta::object_mut(&mut candidate)
            .insert("apiVersion".into(), Value::String(api_version.clone()));
        meta::meta_mut(&mut candidate).insert(
            "resourceVersion".into(),
            Value::String(meta::resource_version(old).to_string()),
        );
        meta::check_labels(def, &name, &candidate)?;

        if def.behaviour == Behaviour::Crd && part == Part::Main {
            crd::validate_and_default(&mut candidate, Some(old))
                .map_err(|causes| ApiError::invalid(&def.kind, &def.gr.group, &name, causes))?;
            let st = crd::status(&candidate, Some(old), meta::is_deleting(&candidate));
            meta::object_mut(&mut candidate).insert("status".into(), st);
        }

        if meta::is_deleting(old) {
            let before = meta::finalizers(old);
            let added: Vec<String> = meta::finalizers(&candidate)
                .into_iter()
                .filter(|f| !before.contains(f))
                .collect();
            if !added.is_empty() {
                return Err(ApiError::invalid(
                    &def.kind,
                    &def.gr.group,
                    &name,
                    vec![Cause::new(
                        "FieldValueForbidden",
                        "metadata.finalizers",
                        format!(
                            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                        ),
                    )],
                ));
            }
        }

        if def.behaviour == Behaviour::Builtin && part == Part::Main {
            builtin::prepare(self, def, Some(old), &mut candidate)?;
        }
        let warnings = if def.behaviour == Behaviour::Custom {
            check_schema(def, &target.version, &name, &mut candidate, opts.validation)?
        } else {
            Vec::new()
        };
        meta::normalize(&mut candidate);
        if has_generation(def) && part == Part::Main && changed_outside_metadata(old, &candidate) {
            let generation = meta::generation(old) + 1;
            meta::meta_mut(&mut candidate).insert("generation".into(), json!(generation));
        }
        if managed == Managed::Update {
            let previous = present(def, &target.version, old);
            fieldmanager::record_update(
                Some(&previous),
                &mut candidate,
                opts.manager(),
                &api_version,
                &meta::now(),
            );
        }

        let stored_form = {
            let mut o = (**old).clone();
            meta::object_mut(&mut o).insert("apiVersion".into(), Value::String(api_version));
            o
        };
        if candidate == stored_form {
            // Byte-identical result: etcd skips the write, so no new revision and no event.
            return Ok(Written::new(present(def, &target.version, old), warnings));
        }
        if opts.dry_run {
            return Ok(Written::new(
                present(def, &target.version, &candidate),
                warnings,
            ));
        }
        if meta::is_deleting(&candidate) && meta::finalizers(&candidate).is_empty() {
            // The emptied version is never stored: the object is deleted instead.
            let last = self.remove_object(&def.gr, &key);
            let rv = last
                .as_deref()
                .map(meta::resource_version)
                .unwrap_or("")
                .to_string();
            meta::meta_mut(&mut candidate).insert("resourceVersion".into(), Value::String(rv));
            return Ok(Written::new(
                present(def, &target.version, &candidate),
                warnings,
            ));
        }
        let stored = self.put(&def.gr, key, candidate);
        if def.behaviour == Behaviour::Crd {
            let new_def = crd::resource_def(&stored);
            self.resources.insert(new_def.gr.clone(), new_def);
        }
        Ok(Written::new(
            present(def, &target.version, &stored),
            warnings,
        ))
    }

    /// One load-generator change: `spec.churn = value`. Once the object's churn field is owned (after the
    /// first full patch) the result of a merge patch is known: the value, generation + 1, nothing else.
    pub(crate) fn churn_one(
        &mut self,
        target: &Target,
        name: &str,
        value: u64,
        opts: &WriteOpts,
    ) -> ApiResult<()> {
        let key = target.key(name);
        let current = self.get(&target.gr, &key).cloned();
        let fast = current.as_deref().is_some_and(|o| {
            o.pointer("/spec/churn").is_some()
                && !meta::is_deleting(o)
                && o.pointer("/spec/churn") != Some(&json!(value))
        });
        if !fast {
            let patch = json!({"spec": {"churn": value}});
            return self
                .patch(target, name, Part::Main, PatchKind::Merge, &patch, opts)
                .map(|_| ());
        }
        let Some(old) = current else {
            return Err(ApiError::not_found(&target.gr, name));
        };
        let mut next = (*old).clone();
        if let Some(spec) = next.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("churn".into(), json!(value));
        }
        let generation = meta::generation(&old) + 1;
        meta::meta_mut(&mut next).insert("generation".into(), json!(generation));
        self.put(&target.gr, key, next);
        Ok(())
    }

    /// DELETE of one object.
    pub(crate) fn delete(
        &mut self,
        target: &Target,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<Deleted> {
        let def = self.def(&target.gr)?.clone();
        let key = target.key(name);
        let current = self
            .get(&def.gr, &key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&def.gr, name))?;
        if let Some(uid) = &opts.uid {
            let actual = meta::meta_str(&current, "uid").unwrap_or("");
            if uid != actual {
                return Err(ApiError::conflict_with(
                    &def.gr,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
                    ),
                ));
            }
        }
        if let Some(rv) = &opts.resource_version {
            let actual = meta::resource_version(&current);
            if rv != actual {
                return Err(ApiError::conflict_with(
                    &def.gr,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {actual}"
                    ),
                ));
            }
        }
        if def.behaviour == Behaviour::Namespace && PROTECTED_NAMESPACES.contains(&name) {
            return Err(ApiError::forbidden(
                &def.gr,
                name,
                "this namespace may not be deleted",
            ));
        }
        let removes_at_once = matches!(def.behaviour, Behaviour::Custom | Behaviour::Builtin)
            && meta::finalizers(&current).is_empty();
        if opts.dry_run && !removes_at_once {
            return Ok(Deleted::Pending(present(&def, &target.version, &current)));
        }
        let outcome = if opts.dry_run {
            None
        } else {
            self.delete_object(&def, &key)
        };
        Ok(match outcome {
            Some(pending) => Deleted::Pending(present(&def, &target.version, &pending)),
            None => Deleted::Gone(json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": def.gr.group, "kind": def.gr.resource,
                            "uid": meta::meta_str(&current, "uid").unwrap_or("")}
            })),
        })
    }

    /// DELETE of a collection: deletes every matching object, answers with the list of them.
    pub(crate) fn delete_collection(
        &mut self,
        target: &Target,
        labels: &LabelSelector,
        fields: &FieldSelector,
        dry_run: bool,
    ) -> ApiResult<Value> {
        let def = self.def(&target.gr)?.clone();
        let keys: Vec<ObjectKey> = self
            .objects
            .get(&def.gr)
            .map(|objs| {
                objs.iter()
                    .filter(|(k, o)| {
                        target
                            .namespace
                            .as_deref()
                            .is_none_or(|ns| k.namespace == ns)
                            && super::list::matches(&def, o, labels, fields)
                    })
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
        let mut items = Vec::new();
        for key in keys {
            if dry_run {
                if let Some(o) = self.get(&def.gr, &key) {
                    items.push(present(&def, &target.version, o));
                }
                continue;
            }
            let before = self.get(&def.gr, &key).cloned();
            match self.delete_object(&def, &key) {
                Some(pending) => items.push(present(&def, &target.version, &pending)),
                None => {
                    if let Some(b) = before {
                        items.push(present(&def, &target.version, &b));
                    }
                }
            }
        }
        Ok(json!({
            "apiVersion": def.api_version(&target.version),
            "kind": def.list_kind,
            "metadata": {"resourceVersion": self.rv.to_string()},
            "items": items,
        }))
    }

    /// Deletes an object as the server's finalizer flow does: with finalizers it is only marked;
    /// without, it is removed. CRDs and namespaces first delete their contents. Returns the object if
    /// it is still there, else the marked state it went through (if any).
    fn delete_object(&mut self, def: &ResourceDef, key: &ObjectKey) -> Option<Value> {
        let current = self.get(&def.gr, key).cloned()?;
        let cascade = matches!(def.behaviour, Behaviour::Crd | Behaviour::Namespace);
        if meta::finalizers(&current).is_empty() && !cascade {
            self.remove_object(&def.gr, key);
            return None;
        }
        let mut marked = (*current).clone();
        if !meta::is_deleting(&marked) {
            let generation = meta::generation(&marked);
            let m = meta::meta_mut(&mut marked);
            m.insert("deletionTimestamp".into(), Value::String(meta::now()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            if has_generation(def) {
                m.insert("generation".into(), json!(generation + 1));
            }
            match def.behaviour {
                Behaviour::Crd => {
                    let mut fins = meta::finalizers(&marked);
                    fins.push("customresourcecleanup.apiextensions.k8s.io".into());
                    meta::meta_mut(&mut marked).insert("finalizers".into(), json!(fins));
                    let st = crd::status(&marked, Some(&current), true);
                    meta::object_mut(&mut marked).insert("status".into(), st);
                }
                Behaviour::Namespace => {
                    meta::object_mut(&mut marked)
                        .insert("status".into(), json!({"phase": "Terminating"}));
                }
                Behaviour::Custom | Behaviour::Builtin | Behaviour::Review => {}
            }
            let stored = self.put(&def.gr, key.clone(), marked);
            marked = (*stored).clone();
        }
        match def.behaviour {
            Behaviour::Crd => {
                let served = crd::resource_def(&marked).gr;
                if let Some(d) = self.resources.get_mut(&served) {
                    d.terminating = true;
                }
                let contents: Vec<ObjectKey> = self
                    .objects
                    .get(&served)
                    .map(|o| o.keys().cloned().collect())
                    .unwrap_or_default();
                if let Some(served_def) = self.resources.get(&served).cloned() {
                    for k in contents {
                        self.delete_object(&served_def, &k);
                    }
                }
                self.finish_terminations(&served, "");
            }
            Behaviour::Namespace => {
                let ns = key.name.clone();
                let namespaced: Vec<ResourceDef> = self
                    .resources
                    .values()
                    .filter(|d| d.namespaced)
                    .cloned()
                    .collect();
                for d in namespaced {
                    let contents: Vec<ObjectKey> = self
                        .objects
                        .get(&d.gr)
                        .map(|o| o.keys().filter(|k| k.namespace == ns).cloned().collect())
                        .unwrap_or_default();
                    for k in contents {
                        self.delete_object(&d, &k);
                    }
                }
                self.finish_terminations(&GroupResource::namespaces(), &ns);
            }
            Behaviour::Custom | Behaviour::Builtin | Behaviour::Review => {}
        }
        match self.get(&def.gr, key) {
            Some(o) => Some((**o).clone()),
            // A namespace answers with its Terminating state even when its contents went at once.
            None if def.behaviour == Behaviour::Namespace => Some(marked),
            None => None,
        }
    }

    /// Removes an object, then completes any CRD or namespace deletion that was waiting for it. A removed
    /// CRD takes its resource with it.
    fn remove_object(&mut self, gr: &GroupResource, key: &ObjectKey) -> Option<Arc<Value>> {
        let last = self.remove(gr, key)?;
        if *gr == GroupResource::crds() {
            let served = crd::resource_def(&last).gr;
            self.resources.remove(&served);
            self.objects.remove(&served);
        }
        self.finish_terminations(gr, &key.namespace);
        Some(last)
    }

    /// Removes a terminating CRD once its resource is empty, and a terminating namespace once it is.
    fn finish_terminations(&mut self, gr: &GroupResource, namespace: &str) {
        let crd_waiting = self
            .resources
            .get(gr)
            .is_some_and(|d| d.terminating && d.behaviour == Behaviour::Custom);
        if crd_waiting && self.objects.get(gr).is_none_or(BTreeMap::is_empty) {
            // The cleanup finalizer's work is done: drop it; the CRD goes unless users' finalizers remain.
            let crd_key = ObjectKey::new("", &gr.qualified());
            if let Some(crd_obj) = self.get(&GroupResource::crds(), &crd_key).cloned() {
                let remaining: Vec<String> = meta::finalizers(&crd_obj)
                    .into_iter()
                    .filter(|f| f != "customresourcecleanup.apiextensions.k8s.io")
                    .collect();
                if remaining.is_empty() {
                    self.remove_object(&GroupResource::crds(), &crd_key);
                } else {
                    let mut held = (*crd_obj).clone();
                    meta::meta_mut(&mut held).insert("finalizers".into(), json!(remaining));
                    self.put(&GroupResource::crds(), crd_key, held);
                }
            }
        }
        if namespace.is_empty() {
            return;
        }
        let ns_key = ObjectKey::new("", namespace);
        let deleting = self
            .get(&GroupResource::namespaces(), &ns_key)
            .is_some_and(|o| meta::is_deleting(o));
        if deleting
            && self
                .objects
                .values()
                .all(|objs| objs.keys().all(|k| k.namespace != namespace))
        {
            self.remove(&GroupResource::namespaces(), &ns_key);
        }
    }
}

/// Namespaces the NamespaceLifecycle admission plugin never lets go.
const PROTECTED_NAMESPACES: [&str; 3] = ["default", "kube-system", "kube-public"];

/// When `new` differs from `current` in nothing but managedFields times, keeps the times of the
/// entries that are otherwise the same: an apply that changes nothing writes nothing.
fn keep_times_if_unchanged(current: &Value, new: &mut Value) {
    let without_fields = |v: &Value| {
        let mut v = v.clone();
        meta::meta_mut(&mut v).remove("managedFields");
        v
    };
    if without_fields(current) != without_fields(new) {
        return;
    }
    let entries = |v: &Value| {
        v.pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let before = entries(current);
    let untimed = |e: &Value| {
        let mut e = e.clone();
        if let Some(m) = e.as_object_mut() {
            m.remove("time");
        }
        e
    };
    let mut after = entries(new);
    for entry in &mut after {
        if let Some(old) = before.iter().find(|b| untimed(b) == untimed(entry))
            && let (Some(m), Some(t)) = (entry.as_object_mut(), old.get("time"))
        {
            m.insert("time".into(), t.clone());
        }
    }
    if !after.is_empty() {
        meta::meta_mut(new).insert("managedFields".into(), Value::Array(after));
    }
}

/// Whether anything outside `metadata` differs: what bumps `generation` for custom resources.
fn changed_outside_metadata(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| -> Map<String, Value> {
        let mut m = v.as_object().cloned().unwrap_or_default();
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
        m
    };
    strip(a) != strip(b)
}

/// Decodes a JSON request body into an object, with the server's 400 for anything else.
pub(crate) fn decode_object(body: &[u8], what: &str) -> ApiResult<Value> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding {what}: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request(format!(
            "error decoding {what}: the body must be a JSON object"
        )));
    }
    Ok(v)
}
