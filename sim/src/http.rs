//! The HTTP face of the simulator: path and query parsing as the API server does them, and the dispatch
//! of each request to discovery, list, watch or a write.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::SimConfig;
use super::auth::{self, Attributes, Identity};
use super::discovery;
use super::faults::Faults;
use super::list::{self, ListQuery, ReadAt};
use super::ops::{
    self, DeleteOptions, Deleted, FieldValidation, Part, PatchKind, Target, WriteOpts, Written,
};
use super::resource::{Behaviour, GroupResource, ResourceDef};
use super::selector::{FieldSelector, LabelSelector};
use super::status::{ApiError, ApiResult, Cause};
use super::store::Store;
use super::watch::{self, Start, WatchCtx, WatchRequest};

/// The request body limit of the real server (3 MiB); larger bodies get 413.
pub(crate) const MAX_BODY: usize = 3 * 1024 * 1024;

/// What every request handler shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) store: Arc<Store>,
    pub(crate) config: SimConfig,
    pub(crate) shutdown: CancellationToken,
    pub(crate) addr: SocketAddr,
    /// Cancelled (and replaced) to drop every open watch at once; a child of `shutdown`.
    pub(crate) watches: std::sync::Mutex<CancellationToken>,
    /// Injected faults.
    pub(crate) faults: Faults,
    /// Watches currently streaming.
    pub(crate) open_watches: Arc<AtomicUsize>,
    /// A pending restart for the serving loop (see [`super::Simulator::restart`]).
    pub(crate) restart: std::sync::Mutex<Option<super::Restart>>,
    /// Wakes the serving loop for a restart.
    pub(crate) restart_requested: tokio::sync::Notify,
    /// The certificate when serving HTTPS.
    pub(crate) tls: Option<super::tls::Tls>,
    /// The ServiceAccount tokens issued through TokenRequest.
    pub(crate) tokens: super::auth::Tokens,
}

impl Shared {
    /// What the next watch needs from the server.
    pub(crate) fn watch_ctx(&self) -> WatchCtx {
        WatchCtx {
            cancel: lock(&self.watches).clone(),
            stall: self.faults.stall_receiver(),
            open: self.open_watches.clone(),
            slow_reader_timeout: self.config.slow_reader_timeout,
        }
    }

    /// Asks the serving loop to restart.
    pub(crate) fn request_restart(&self, restart: super::Restart) {
        *lock(&self.restart) = Some(restart);
        self.restart_requested.notify_one();
    }

    /// The pending restart, if any.
    pub(crate) fn take_restart(&self) -> Option<super::Restart> {
        lock(&self.restart).take()
    }

    /// Ends every open watch (their clients see a normal stream end and re-watch).
    pub(crate) fn drop_watches(&self) {
        let mut current = lock(&self.watches);
        current.cancel();
        *current = self.shutdown.child_token();
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Holds a token only; nothing can be left half-written by a panic.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The router: one fallback handler, because API paths are data (they appear with CRDs).
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

/// A JSON body with the `Content-Type` client-go picks its decoder by.
pub(crate) fn json_body(v: &Value) -> Response {
    json_response(StatusCode::OK, v)
}

fn json_response(code: StatusCode, v: &Value) -> Response {
    // Ended with a newline, as kube-apiserver's bodies are (Go's `json.Encoder.Encode`): a client
    // that takes the body's last byte for the closing brace is wrong against a real server.
    let mut body = serde_json::to_vec(v).unwrap_or_default();
    body.push(b'\n');
    let mut r = (code, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(_) => return ApiError::too_large(MAX_BODY).into_response(),
    };
    let query = Query::parse(parts.uri.query().unwrap_or(""));
    let path = parts.uri.path();
    if let Some(rest) = path.strip_prefix("/_herald/") {
        return super::admin::handle(&shared, &parts.method, rest, &body).await;
    }
    let identity = {
        let authorization = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let state = shared.store.read();
        let requester = match shared.tokens.identify(&state, authorization) {
            Ok(identity) => identity,
            Err(e) => return e.into_response(),
        };
        let impersonated = auth::impersonation(
            parts
                .headers
                .get("impersonate-user")
                .and_then(|v| v.to_str().ok()),
            &parts
                .headers
                .get_all("impersonate-group")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect::<Vec<_>>(),
        );
        // kubectl `--as`: the all-powerful identity may act as anyone; a token's user only as whom
        // RBAC lets it `impersonate`. The request is then authorized as the impersonated user.
        let identity = match (requester, impersonated) {
            (Identity::User(requester), Some((user, checks))) => {
                for check in &checks {
                    if let Err(reason) = auth::authorize(&state, &requester, check) {
                        return check.forbidden(&requester.name, &reason).into_response();
                    }
                }
                Identity::User(user)
            }
            (Identity::Admin, Some((user, _))) => Identity::User(user),
            (identity, None) => identity,
        };
        if let Identity::User(user) = &identity {
            let attrs = Attributes::from_request(parts.method.as_str(), path, &query);
            if let Err(reason) = auth::authorize(&state, user, &attrs) {
                return attrs.forbidden(&user.name, &reason).into_response();
            }
        }
        identity
    };
    let client = super::faults::Client {
        user_agent: parts
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok()),
        user: match &identity {
            Identity::User(user) => &user.name,
            Identity::Admin => "system:admin",
        },
    };
    if let Some(delay) = shared.faults.latency_for(path, client) {
        tokio::time::sleep(delay).await;
    }
    let is_watch = query.bool("watch").unwrap_or(false) || path.contains("/watch/");
    let current_rv = shared.store.read().rv;
    if let Some(injected) =
        shared
            .faults
            .take_failure(parts.method.as_str(), path, is_watch, current_rv, client)
    {
        return injected.into_response();
    }
    if is_watch && parts.method == Method::GET && shared.faults.watches_garbled() {
        let mut r = (StatusCode::OK, super::faults::GARBLED_WATCH_LINE).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return r;
    }
    let body = if content_type(&parts.headers) == super::protobuf::MEDIA_TYPE {
        match super::protobuf::to_json(&body) {
            Ok(v) => Bytes::from(serde_json::to_vec(&v).unwrap_or_default()),
            Err(e) => return ApiError::from(e).into_response(),
        }
    } else {
        body
    };
    let response = match dispatch(
        &shared,
        &identity,
        &parts.method,
        parts.uri.path(),
        &parts.headers,
        &query,
        body,
    )
    .await
    {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    // The request log: what a client (Helm, kubectl) asked for and got, to find protocol gaps.
    tracing::debug!(
        message = "Simulator request.",
        method = %parts.method,
        uri = %parts.uri,
        content_type = content_type(&parts.headers),
        accept = parts.headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or(""),
        status = response.status().as_u16(),
    );
    response
}

/// Decoded query parameters (`+` is a space, as kube-rs encodes with form_urlencoded).
#[derive(Debug, Default)]
pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    pub(crate) fn parse(q: &str) -> Self {
        Self(form_urlencoded::parse(q.as_bytes()).into_owned().collect())
    }

    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A boolean as Go's `strconv.ParseBool` reads it; absent is `false`.
    pub(crate) fn bool(&self, key: &str) -> ApiResult<bool> {
        match self.get(key) {
            None => Ok(false),
            Some("1" | "t" | "T" | "TRUE" | "true" | "True") => Ok(true),
            Some("0" | "f" | "F" | "FALSE" | "false" | "False" | "") => Ok(false),
            Some(other) => Err(ApiError::bad_request(format!(
                "invalid boolean value for {key}: {other:?}"
            ))),
        }
    }
}

/// A request for a resource, as parsed from its path.
#[derive(Debug, PartialEq)]
struct ResourcePath {
    group: String,
    version: String,
    watch_prefix: bool,
    namespace: Option<String>,
    resource: String,
    name: Option<String>,
    sub: Option<String>,
}

/// Subresources of a namespace, which follow its name directly (`/api/v1/namespaces/x/status`).
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

fn parse_resource_path(group: &str, version: &str, rest: &[&str]) -> Option<ResourcePath> {
    let mut rest = rest;
    let mut watch_prefix = false;
    if rest.first() == Some(&"watch") {
        watch_prefix = true;
        rest = &rest[1..];
    }
    let mut namespace = None;
    if rest.first() == Some(&"namespaces") && rest.len() > 1 {
        if rest.len() == 2 || NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
            // The namespace object itself.
        } else {
            namespace = Some(rest[1].to_string());
            rest = &rest[2..];
        }
    }
    if rest.is_empty() || rest.len() > 3 || rest.iter().any(|s| s.is_empty()) {
        return None;
    }
    Some(ResourcePath {
        group: group.to_string(),
        version: version.to_string(),
        watch_prefix,
        namespace,
        resource: rest[0].to_string(),
        name: rest.get(1).map(|s| (*s).to_string()),
        sub: rest.get(2).map(|s| (*s).to_string()),
    })
}

async fn dispatch(
    shared: &Arc<Shared>,
    identity: &Identity,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    query: &Query,
    body: Bytes,
) -> ApiResult<Response> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let get_only = |r: ApiResult<Response>| {
        if method == Method::GET {
            r
        } else {
            Err(ApiError::method_not_allowed(method.as_str()))
        }
    };
    match segments.as_slice() {
        ["version"] => get_only(Ok(json_body(&discovery::version()))),
        ["healthz" | "livez" | "readyz"] => get_only(Ok((StatusCode::OK, "ok").into_response())),
        ["api"] => get_only(Ok(match discovery::aggregated_version(accept) {
            Some(v) => {
                aggregated_response(&discovery::aggregated(&shared.store.read(), true, v), v)
            }
            None => json_body(&discovery::core_versions(&shared.addr.to_string())),
        })),
        ["apis"] => get_only(Ok(match discovery::aggregated_version(accept) {
            Some(v) => {
                aggregated_response(&discovery::aggregated(&shared.store.read(), false, v), v)
            }
            None => json_body(&discovery::group_list(&shared.store.read())),
        })),
        ["api", "v1"] => get_only(
            discovery::resource_list(&shared.store.read(), "", "v1")
                .map(|v| json_body(&v))
                .ok_or_else(ApiError::path_not_found),
        ),
        ["apis", group] => get_only(
            discovery::group(&shared.store.read(), group)
                .map(|v| json_body(&v))
                .ok_or_else(ApiError::path_not_found),
        ),
        ["apis", group, version] => get_only(
            discovery::resource_list(&shared.store.read(), group, version)
                .map(|v| json_body(&v))
                .ok_or_else(ApiError::path_not_found),
        ),
        ["openapi", "v3"] => get_only(Ok(json_body(&discovery::openapi_root(
            &shared.store.read(),
        )))),
        ["openapi", "v3", "api", version] => get_only(Ok(json_body(
            &discovery::openapi_group_version(&shared.store.read(), "", version),
        ))),
        ["openapi", "v3", "apis", group, version] => get_only(Ok(json_body(
            &discovery::openapi_group_version(&shared.store.read(), group, version),
        ))),
        ["api", "v1", rest @ ..] => match parse_resource_path("", "v1", rest) {
            Some(p) => resource(shared, identity, method, headers, query, body, p).await,
            None => Err(ApiError::path_not_found()),
        },
        ["apis", group, version, rest @ ..] => match parse_resource_path(group, version, rest) {
            Some(p) => resource(shared, identity, method, headers, query, body, p).await,
            None => Err(ApiError::path_not_found()),
        },
        _ => Err(ApiError::path_not_found()),
    }
}

fn aggregated_response(v: &Value, version: &str) -> Response {
    let mut r = json_body(v);
    if let Ok(ct) = HeaderValue::from_str(&discovery::aggregated_content_type(version)) {
        r.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    r.headers_mut()
        .insert(header::VARY, HeaderValue::from_static("Accept"));
    r
}

fn dry_run(query: &Query) -> ApiResult<bool> {
    match query.get("dryRun") {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!(
            "dryRun: Unsupported value: \"{other}\": supported values: \"All\""
        ))),
    }
}

fn field_validation(query: &Query) -> ApiResult<FieldValidation> {
    match query.get("fieldValidation") {
        None | Some("" | "Warn") => Ok(FieldValidation::Warn),
        Some("Strict") => Ok(FieldValidation::Strict),
        Some("Ignore") => Ok(FieldValidation::Ignore),
        Some(other) => Err(ApiError::bad_request(format!(
            "fieldValidation: Unsupported value: \"{other}\": supported values: \"Ignore\", \"Strict\", \"Warn\""
        ))),
    }
}

/// The options of a write request. `apply` requires an explicit `fieldManager`; other writes fall back
/// to the User-Agent's product name, as the real server does.
fn write_opts(query: &Query, headers: &HeaderMap, apply: bool) -> ApiResult<WriteOpts> {
    let explicit = query
        .get("fieldManager")
        .filter(|m| !m.is_empty())
        .map(str::to_string);
    let force = query.bool("force")?;
    if apply && explicit.is_none() {
        return Err(ApiError::invalid(
            "PatchOptions",
            "meta.k8s.io",
            "",
            vec![Cause::new(
                "FieldValueRequired",
                "fieldManager",
                "Required value: is required for apply patch",
            )],
        ));
    }
    if force && !apply {
        return Err(ApiError::invalid(
            "PatchOptions",
            "meta.k8s.io",
            "",
            vec![Cause::new(
                "FieldValueForbidden",
                "force",
                "Forbidden: may not be specified for non-apply patch",
            )],
        ));
    }
    let from_agent = || {
        headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .and_then(|ua| ua.split('/').next())
            .filter(|p| !p.is_empty())
            .map(str::to_string)
    };
    Ok(WriteOpts {
        dry_run: dry_run(query)?,
        field_manager: explicit.or_else(from_agent),
        validation: field_validation(query)?,
        force,
        any_name: false,
    })
}

/// A write's response: the object, plus a `Warning` header per warning (RFC 7234 form, code 299).
fn written(code: StatusCode, w: &Written) -> Response {
    let mut r = json_response(code, &w.object);
    for warning in &w.warnings {
        let text = format!("299 - {}", serde_json::Value::String(warning.clone()));
        if let Ok(v) = HeaderValue::from_str(&text) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
    r
}

fn selectors(
    def: &ResourceDef,
    query: &Query,
    path_name: Option<&str>,
) -> ApiResult<(LabelSelector, FieldSelector)> {
    let labels = LabelSelector::parse(query.get("labelSelector").unwrap_or(""))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let mut fields = FieldSelector::parse(query.get("fieldSelector").unwrap_or(""))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    if let Some(name) = path_name {
        // The deprecated /watch/.../{name} form means a name field selector.
        // Only an empty selector or exactly this name's selector is allowed with a name in the path.
        let clash = fields
            .requirements()
            .iter()
            .any(|r| r.field != "metadata.name" || r.negated || r.value != name);
        if clash {
            return Err(ApiError::bad_request(
                "fieldSelector metadata.name doesn't match requested name",
            ));
        }
        let combined = match query.get("fieldSelector").filter(|s| !s.is_empty()) {
            Some(s) => format!("{s},metadata.name={name}"),
            None => format!("metadata.name={name}"),
        };
        fields =
            FieldSelector::parse(&combined).map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    list::check_fields(def, &fields)?;
    Ok((labels, fields))
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

#[allow(clippy::too_many_arguments)]
async fn resource(
    shared: &Arc<Shared>,
    identity: &Identity,
    method: &Method,
    headers: &HeaderMap,
    query: &Query,
    body: Bytes,
    p: ResourcePath,
) -> ApiResult<Response> {
    let gr = GroupResource::new(p.group.clone(), p.resource.clone());
    let def = {
        let state = shared.store.read();
        let def = state.def(&gr)?;
        if def.served_version(&p.version).is_none() {
            return Err(ApiError::path_not_found());
        }
        def.clone()
    };
    // Scope rules: cluster-scoped resources under a namespace path, and single namespaced objects without
    // one, fall through to the default handler's 404.
    // Scope rules: cluster-scoped resources under a namespace path fall through to the default
    // handler's 404, and so does every verb but list and watch on a namespaced resource without one.
    let across_namespaces_ok = p.name.is_none() && *method == Method::GET;
    if (!def.namespaced && p.namespace.is_some())
        || (def.namespaced && p.namespace.is_none() && !across_namespaces_ok && !p.watch_prefix)
    {
        return Err(ApiError::path_not_found());
    }
    let target = Target {
        gr: gr.clone(),
        version: p.version.clone(),
        namespace: p.namespace.clone(),
    };
    let part = match p.sub.as_deref() {
        None => Part::Main,
        Some("status") => Part::Status,
        Some("scale") if def.scale_subresource => Part::Main,
        Some("token") if gr == GroupResource::new("", "serviceaccounts") => Part::Main,
        Some(_) => return Err(ApiError::path_not_found()),
    };

    if p.watch_prefix {
        if method != Method::GET || p.sub.is_some() {
            return Err(ApiError::method_not_allowed(method.as_str()));
        }
        return start_watch(shared, def, &target, query, p.name.as_deref());
    }

    let verb = match (method.clone(), p.name.is_some()) {
        (Method::GET, true) => "get",
        (Method::GET, false) if p.watch_prefix || query.bool("watch").unwrap_or(false) => "watch",
        (Method::GET, false) => "list",
        (Method::POST, _) => "create",
        (Method::PUT, _) => "update",
        (Method::PATCH, _) => "patch",
        (Method::DELETE, true) => "delete",
        (Method::DELETE, false) => "deletecollection",
        _ => "unknown",
    };
    let rbac_resource = match p.sub.as_deref() {
        Some(sub) => format!("{}/{sub}", gr.resource),
        None => gr.resource.clone(),
    };
    let namespace = p.namespace.as_deref().unwrap_or("");
    if shared
        .faults
        .denied(verb, &gr.group, &rbac_resource, namespace)
    {
        let scope = if namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace \"{namespace}\"")
        };
        return Err(ApiError::forbidden_verb(
            &gr,
            p.name.as_deref().unwrap_or(""),
            &format!(
                "User \"{}\" cannot {verb} resource \"{rbac_resource}\" in API group \"{}\" {scope}",
                user_name(identity),
                gr.group
            ),
        ));
    }
    if def.behaviour == Behaviour::Review {
        return match (method.clone(), p.name.as_deref()) {
            (Method::POST, None) if gr.resource == "selfsubjectreviews" => {
                who_am_i(identity, &body)
            }
            (Method::POST, None) if gr.resource == "selfsubjectrulesreviews" => {
                rules_review(shared, identity, &body)
            }
            (Method::POST, None) => access_review(shared, identity, &body),
            (m, _) => Err(ApiError::method_not_allowed(m.as_str())),
        };
    }

    if p.sub.as_deref() == Some("token") {
        return match (method.clone(), p.name.as_deref()) {
            (Method::POST, Some(name)) => token_request(shared, &target, name, &body),
            (m, _) => Err(ApiError::method_not_allowed(m.as_str())),
        };
    }

    if p.sub.as_deref() == Some("scale") {
        return scale(
            shared,
            &def,
            &target,
            method,
            p.name.as_deref(),
            headers,
            query,
            &body,
        );
    }

    let store = &shared.store;
    match (method.clone(), p.name.as_deref()) {
        (Method::GET, None) => {
            if query.bool("watch")? {
                start_watch(shared, def, &target, query, None)
            } else {
                list(shared, &def, &target, query).await
            }
        }
        (Method::GET, Some(name)) => {
            let state = store.read();
            if part == Part::Status && !has_status(&def, &target.version) {
                return Err(ApiError::path_not_found());
            }
            Ok(json_body(&state.get_object(&target, name)?))
        }
        (Method::POST, None) => {
            let opts = write_opts(query, headers, false)?;
            let obj = ops::decode_object(&body, "the request body")?;
            let created = store.write(|s| s.create(&target, obj, &opts))?;
            Ok(written(StatusCode::CREATED, &created))
        }
        (Method::PUT, Some(name)) => {
            let opts = write_opts(query, headers, false)?;
            let obj = ops::decode_object(&body, "the request body")?;
            let updated = store.write(|s| s.update(&target, name, part, obj, &opts))?;
            Ok(written(StatusCode::OK, &updated))
        }
        (Method::PATCH, Some(name)) => {
            let kind = match content_type(headers).as_str() {
                "application/merge-patch+json" => PatchKind::Merge,
                "application/json-patch+json" => PatchKind::Json,
                "application/strategic-merge-patch+json" if def.behaviour != Behaviour::Custom => {
                    PatchKind::Strategic
                }
                "application/apply-patch+yaml" | "application/apply-patch+json" => {
                    let opts = write_opts(query, headers, true)?;
                    let applied: Value = serde_yaml_ng::from_slice(&body)
                        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
                    let (w, created) =
                        store.write(|s| s.apply(&target, name, part, applied, &opts))?;
                    let code = if created {
                        StatusCode::CREATED
                    } else {
                        StatusCode::OK
                    };
                    return Ok(written(code, &w));
                }
                other => return Err(ApiError::unsupported_media_type(other)),
            };
            let opts = write_opts(query, headers, false)?;
            let patch: Value = serde_json::from_slice(&body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            let patched = store.write(|s| s.patch(&target, name, part, kind, &patch, &opts))?;
            Ok(written(StatusCode::OK, &patched))
        }
        (Method::DELETE, Some(name)) if part == Part::Main => {
            let opts = delete_options(query, &body)?;
            match store.write(|s| s.delete(&target, name, &opts))? {
                Deleted::Gone(status) => Ok(json_body(&status)),
                Deleted::Pending(obj) => Ok(json_body(&obj)),
            }
        }
        (Method::DELETE, None) => {
            let (labels, fields) = selectors(&def, query, None)?;
            let dry = dry_run(query)? || delete_options(query, &body)?.dry_run;
            let list = store.write(|s| s.delete_collection(&target, &labels, &fields, dry))?;
            Ok(json_body(&list))
        }
        (m, _) => Err(ApiError::method_not_allowed(m.as_str())),
    }
}

/// The `/scale` subresource of a workload: an `autoscaling/v1` Scale read from and written to
/// `spec.replicas` (GET, PUT, and merge or JSON patches of the Scale).
#[allow(clippy::too_many_arguments)]
fn scale(
    shared: &Arc<Shared>,
    def: &ResourceDef,
    target: &Target,
    method: &Method,
    name: Option<&str>,
    headers: &HeaderMap,
    query: &Query,
    body: &[u8],
) -> ApiResult<Response> {
    let Some(name) = name else {
        return Err(ApiError::path_not_found());
    };
    let current = super::builtin::scale_of(&shared.store.read().get_object(target, name)?);
    let wanted = match method.clone() {
        Method::GET => return Ok(json_body(&current)),
        Method::PUT => {
            let scale = ops::decode_object(body, "the request body")?;
            let rv = scale
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or("");
            if !rv.is_empty() && Some(rv) != current["metadata"]["resourceVersion"].as_str() {
                return Err(ApiError::conflict(&target.gr, name));
            }
            scale
        }
        Method::PATCH => {
            let patch: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            match content_type(headers).as_str() {
                "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
                    let mut doc = current.clone();
                    super::patch::merge_patch(&mut doc, &patch);
                    doc
                }
                "application/json-patch+json" => super::patch::json_patch(&current, &patch)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?,
                other => return Err(ApiError::unsupported_media_type(other)),
            }
        }
        m => return Err(ApiError::method_not_allowed(m.as_str())),
    };
    let replicas = super::builtin::requested_replicas(def, name, &wanted)?;
    let opts = write_opts(query, headers, false)?;
    let patch = serde_json::json!({"spec": {"replicas": replicas}});
    let written = shared
        .store
        .write(|s| s.patch(target, name, Part::Main, PatchKind::Merge, &patch, &opts))?;
    Ok(json_body(&super::builtin::scale_of(&written.object)))
}

/// The user name a deny rule's refusal names: the token's user, or `system:anonymous` without one.
fn user_name(identity: &Identity) -> &str {
    match identity {
        Identity::Admin => "system:anonymous",
        Identity::User(u) => &u.name,
    }
}

/// `POST .../serviceaccounts/<name>/token`: a TokenRequest answered with a new bearer token for an
/// existing ServiceAccount, good for `spec.expirationSeconds` (default one hour, at least ten minutes,
/// as kube-apiserver validates it).
fn token_request(
    shared: &Arc<Shared>,
    target: &Target,
    name: &str,
    body: &[u8],
) -> ApiResult<Response> {
    let mut request = ops::decode_object(body, "the request body")?;
    let sa = shared.store.read().get_object(target, name)?;
    let uid = sa
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let expiration = match request.pointer("/spec/expirationSeconds") {
        None | Some(Value::Null) => auth::DEFAULT_EXPIRATION,
        Some(v) => match v.as_i64() {
            Some(n) if n >= auth::MIN_EXPIRATION as i64 => n as u64,
            _ => {
                return Err(ApiError::invalid(
                    "TokenRequest",
                    "authentication.k8s.io",
                    name,
                    vec![Cause::new(
                        "FieldValueInvalid",
                        "spec.expirationSeconds",
                        format!(
                            "Invalid value: {v}: may not specify a duration less than 10 minutes"
                        ),
                    )],
                ));
            }
        },
    };
    let namespace = target.namespace.as_deref().unwrap_or("");
    let ttl = Duration::from_secs(expiration);
    let token = shared.tokens.issue(namespace, name, &uid, ttl);
    let expires = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(expiration as i64))
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    let audiences = match request.pointer("/spec/audiences").and_then(Value::as_array) {
        Some(a) if !a.is_empty() => Value::Array(a.clone()),
        _ => serde_json::json!(["https://kubernetes.default.svc.cluster.local"]),
    };
    if let Some(map) = request.as_object_mut() {
        map.insert("apiVersion".into(), "authentication.k8s.io/v1".into());
        map.insert("kind".into(), "TokenRequest".into());
        map.insert(
            "metadata".into(),
            serde_json::json!({"name": name, "namespace": namespace, "creationTimestamp": null}),
        );
        let mut spec = map
            .get("spec")
            .cloned()
            .unwrap_or_else(|| serde_json::json!({}));
        spec["audiences"] = audiences;
        spec["expirationSeconds"] = serde_json::json!(expiration);
        if spec.get("boundObjectRef").is_none() {
            spec["boundObjectRef"] = Value::Null;
        }
        map.insert("spec".into(), spec);
        map.insert(
            "status".into(),
            serde_json::json!({"token": token, "expirationTimestamp": expires}),
        );
    }
    Ok(json_response(StatusCode::CREATED, &request))
}

/// Answers a SelfSubjectReview (`kubectl auth whoami`): a token's user and groups; without a token,
/// the all-powerful `herald-sim` in `system:masters`, which is what it amounts to.
fn who_am_i(identity: &Identity, body: &[u8]) -> ApiResult<Response> {
    let mut review = ops::decode_object(body, "the request body")?;
    let info = match identity {
        Identity::Admin => serde_json::json!({"username": auth::ADMIN_TOKEN,
            "groups": ["system:masters", "system:authenticated"]}),
        Identity::User(u) => serde_json::json!({"username": u.name, "groups": u.groups}),
    };
    if let Some(map) = review.as_object_mut() {
        map.insert("apiVersion".into(), "authentication.k8s.io/v1".into());
        map.insert("kind".into(), "SelfSubjectReview".into());
        map.insert("status".into(), serde_json::json!({"userInfo": info}));
    }
    Ok(json_response(StatusCode::CREATED, &review))
}

/// Answers a SelfSubjectRulesReview from the rules the requester holds in `spec.namespace`.
fn rules_review(shared: &Arc<Shared>, identity: &Identity, body: &[u8]) -> ApiResult<Response> {
    let mut review = ops::decode_object(body, "the request body")?;
    let namespace = review
        .pointer("/spec/namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let status = auth::rules_review(&shared.store.read(), identity, &namespace);
    if let Some(map) = review.as_object_mut() {
        map.insert("apiVersion".into(), "authorization.k8s.io/v1".into());
        map.insert("kind".into(), "SelfSubjectRulesReview".into());
        map.insert("status".into(), status);
    }
    Ok(json_response(StatusCode::CREATED, &review))
}

/// Answers a SelfSubjectAccessReview: a deny rule refuses first; then a token's user is decided by the
/// RBAC rules, and a request without a token is allowed everything.
fn access_review(shared: &Arc<Shared>, identity: &Identity, body: &[u8]) -> ApiResult<Response> {
    let mut review = ops::decode_object(body, "the request body")?;
    let attrs = review
        .pointer("/spec/resourceAttributes")
        .cloned()
        .unwrap_or(Value::Null);
    let attr = |k: &str| {
        attrs
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let mut resource = attr("resource");
    let sub = attr("subresource");
    if !sub.is_empty() {
        resource = format!("{resource}/{sub}");
    }
    let denied = !attrs.is_null()
        && shared
            .faults
            .denied(&attr("verb"), &attr("group"), &resource, &attr("namespace"));
    let status = if denied {
        serde_json::json!({"allowed": false, "reason": "denied by a herald sim deny rule"})
    } else if let Identity::User(user) = identity {
        match auth::Attributes::from_review_spec(review.get("spec").unwrap_or(&Value::Null)) {
            None => serde_json::json!({"allowed": false}),
            Some(attrs) => match auth::authorize(&shared.store.read(), user, &attrs) {
                Ok(reason) => serde_json::json!({"allowed": true, "reason": reason}),
                Err(reason) if reason.is_empty() => serde_json::json!({"allowed": false}),
                Err(reason) => serde_json::json!({"allowed": false, "reason": reason}),
            },
        }
    } else {
        serde_json::json!({"allowed": true})
    };
    if let Some(map) = review.as_object_mut() {
        map.insert("apiVersion".into(), "authorization.k8s.io/v1".into());
        map.insert("kind".into(), "SelfSubjectAccessReview".into());
        map.insert("status".into(), status);
    }
    Ok(json_response(StatusCode::CREATED, &review))
}

fn has_status(def: &ResourceDef, version: &str) -> bool {
    def.served_version(version)
        .is_some_and(|v| v.status_subresource)
}

fn delete_options(query: &Query, body: &[u8]) -> ApiResult<DeleteOptions> {
    let mut opts = DeleteOptions {
        dry_run: dry_run(query)?,
        ..DeleteOptions::default()
    };
    if body.iter().any(|b| !b.is_ascii_whitespace()) {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?;
        let s = |p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
        opts.uid = s("/preconditions/uid");
        opts.resource_version = s("/preconditions/resourceVersion");
        if let Some(dr) = v.get("dryRun").and_then(Value::as_array) {
            opts.dry_run |= dr.iter().any(|x| x == "All");
        }
    }
    Ok(opts)
}

async fn list(
    shared: &Arc<Shared>,
    def: &ResourceDef,
    target: &Target,
    query: &Query,
) -> ApiResult<Response> {
    if query.get("sendInitialEvents").is_some() {
        return Err(ApiError::invalid(
            "ListOptions",
            "meta.k8s.io",
            "",
            vec![Cause::new(
                "FieldValueForbidden",
                "sendInitialEvents",
                "Forbidden: sendInitialEvents is forbidden for list",
            )],
        ));
    }
    let (labels, fields) = selectors(def, query, None)?;
    let limit = match query.get("limit").filter(|s| !s.is_empty()) {
        None => None,
        Some(l) => {
            let n: i64 = l
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid limit: {l:?}")))?;
            usize::try_from(n).ok().filter(|n| *n > 0)
        }
    };
    let q = ListQuery {
        labels,
        fields,
        limit,
        continue_token: query
            .get("continue")
            .filter(|s| !s.is_empty())
            .map(str::to_string),
        resource_version: query.get("resourceVersion").map(str::to_string),
        resource_version_match: query.get("resourceVersionMatch").map(str::to_string),
    };
    let (at, after) = list::read_at(&q)?;
    if let ReadAt::NotOlderThan(n) | ReadAt::Exact(n) = at {
        // A revision ahead of the server: wait a little for it, as the watch cache does, then 504.
        let mut revisions = shared.store.subscribe();
        let _ =
            tokio::time::timeout(Duration::from_secs(3), revisions.wait_for(|rv| *rv >= n)).await;
    }
    let state = shared.store.read();
    let body = state.list(
        def,
        &target.version,
        target.namespace.as_deref(),
        &q,
        at,
        after.as_ref(),
    )?;
    Ok(json_body(&body))
}

fn start_watch(
    shared: &Arc<Shared>,
    def: ResourceDef,
    target: &Target,
    query: &Query,
    name: Option<&str>,
) -> ApiResult<Response> {
    let (labels, fields) = selectors(&def, query, name)?;
    let send_initial_events = match query.get("sendInitialEvents") {
        None => None,
        Some(_) => Some(query.bool("sendInitialEvents")?),
    };
    let rv_match = query.get("resourceVersionMatch").filter(|s| !s.is_empty());
    if send_initial_events.is_some() && rv_match != Some("NotOlderThan") {
        return Err(ApiError::invalid(
            "ListOptions",
            "meta.k8s.io",
            "",
            vec![Cause::new(
                "FieldValueForbidden",
                "resourceVersionMatch",
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            )],
        ));
    }
    if send_initial_events.is_none() && rv_match.is_some() {
        return Err(ApiError::invalid(
            "ListOptions",
            "meta.k8s.io",
            "",
            vec![Cause::new(
                "FieldValueForbidden",
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            )],
        ));
    }
    let rv = query.get("resourceVersion").unwrap_or("");
    let parse = |rv: &str| list::parse_rv(rv);
    let (start, initial_events_end) = match (send_initial_events, rv) {
        (Some(true), "" | "0") => (Start::Initial { at_least: 0 }, true),
        (Some(true), n) => (
            Start::Initial {
                at_least: parse(n)?,
            },
            true,
        ),
        (Some(false), "" | "0") => (Start::After(shared.store.read().rv), false),
        (Some(false), n) => (Start::After(parse(n)?), false),
        // The WatchList defaulting: a fresh watch behaves as a streaming list, so it ends its initial
        // events with the marker bookmark when bookmarks are allowed.
        (None, "" | "0") => (Start::Initial { at_least: 0 }, true),
        (None, n) => (Start::After(parse(n)?), false),
    };
    // 0 means "unset", as the real server reads it: kube-runtime sends it to disable its idle timeout.
    let timeout = match query.get("timeoutSeconds").filter(|s| !s.is_empty()) {
        Some(t) => match t.parse::<u64>() {
            Ok(0) => shared.config.default_watch_timeout(),
            Ok(secs) => Duration::from_secs(secs),
            Err(_) => {
                return Err(ApiError::bad_request(format!(
                    "invalid timeoutSeconds: {t:?}"
                )));
            }
        },
        None => shared.config.default_watch_timeout(),
    };
    let req = WatchRequest {
        def,
        version: target.version.clone(),
        namespace: target.namespace.clone(),
        labels,
        fields,
        start,
        bookmarks: query.bool("allowWatchBookmarks")?,
        timeout,
        bookmark_interval: shared.config.bookmark_interval,
        initial_events_end,
    };
    let body: Body = watch::serve(shared.store.clone(), req, shared.watch_ctx());
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_resource_paths_like_the_request_info_factory() {
        let p = |rest: &[&str]| parse_resource_path("example.com", "v1", rest);
        let ns_obj = p(&["namespaces", "default", "widgets", "a", "status"]).unwrap();
        assert_eq!(ns_obj.namespace.as_deref(), Some("default"));
        assert_eq!(
            (
                ns_obj.resource.as_str(),
                ns_obj.name.as_deref(),
                ns_obj.sub.as_deref()
            ),
            ("widgets", Some("a"), Some("status"))
        );
        let namespace_itself = parse_resource_path("", "v1", &["namespaces", "default"]).unwrap();
        assert_eq!(
            (
                namespace_itself.resource.as_str(),
                namespace_itself.name.as_deref()
            ),
            ("namespaces", Some("default"))
        );
        let ns_status =
            parse_resource_path("", "v1", &["namespaces", "default", "status"]).unwrap();
        assert_eq!(ns_status.sub.as_deref(), Some("status"));
        let watch = p(&["watch", "namespaces", "x", "widgets", "a"]).unwrap();
        assert!(watch.watch_prefix);
        assert_eq!(watch.name.as_deref(), Some("a"));
        assert!(p(&["widgets", "a", "status", "extra"]).is_none());
    }

    #[test]
    fn booleans_parse_like_go() {
        let q = Query::parse("a=True&b=1&c=F&d=yes&e=t");
        assert_eq!(q.bool("a"), Ok(true));
        assert_eq!(q.bool("b"), Ok(true));
        assert_eq!(q.bool("c"), Ok(false));
        assert!(q.bool("d").is_err());
        assert_eq!(q.bool("e"), Ok(true));
        assert_eq!(q.bool("missing"), Ok(false));
    }

    #[test]
    fn plus_decodes_as_space() {
        let q = Query::parse("labelSelector=app+in+%28a%2Cb%29");
        assert_eq!(q.get("labelSelector"), Some("app in (a,b)"));
    }
}
