//! Kubernetes `Status` error bodies: every failure the simulator answers with (WATCH-PROTOCOL.md §A7).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::resource::GroupResource;

/// An API error as the real server reports it: HTTP code, machine-readable reason, message, details.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code, repeated in the body's `code`.
    pub code: u16,
    /// `reason` (`NotFound`, `Conflict`, `Expired`, …); empty for reasonless errors.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// `details` object (`name`, `group`, `kind`, `causes`, `retryAfterSeconds`), or `None`.
    pub details: Option<Box<Value>>,
    /// Extra `metadata` members (`continue` on an expired list token).
    pub metadata: Option<Box<Value>>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

/// One entry of `details.causes`.
pub(crate) struct Cause {
    pub(crate) reason: &'static str,
    pub(crate) message: String,
    pub(crate) field: String,
}

impl Cause {
    pub(crate) fn new(
        reason: &'static str,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            reason,
            message: message.into(),
            field: field.into(),
        }
    }

    /// The apimachinery `field.Error` text, e.g. `spec.scope: Unsupported value: "x"`.
    fn full_message(&self) -> String {
        if self.field.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.field, self.message)
        }
    }
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            metadata: None,
        }
    }

    pub(crate) fn with_details(mut self, details: Value) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    /// An error with any code and reason (injected faults).
    pub(crate) fn custom(code: u16, reason: &'static str, message: &str) -> Self {
        Self::new(code, reason, message)
    }

    /// Adds `details.retryAfterSeconds` (and so a `Retry-After` header).
    pub(crate) fn retry_after(mut self, secs: u64) -> Self {
        let mut details = self.details.map_or_else(|| json!({}), |d| *d);
        details["retryAfterSeconds"] = json!(secs);
        self.details = Some(Box::new(details));
        self
    }

    /// 404 for a missing object: `widgets.example.com "foo" not found`.
    pub(crate) fn not_found(gr: &GroupResource, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", gr.qualified()),
        )
        .with_details(json!({"name": name, "group": gr.group, "kind": gr.resource}))
    }

    /// 404 for a path the server does not serve.
    pub(crate) fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// 409 on create of an existing name.
    pub(crate) fn already_exists(gr: &GroupResource, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", gr.qualified()),
        )
        .with_details(json!({"name": name, "group": gr.group, "kind": gr.resource}))
    }

    /// 409 on a stale resourceVersion.
    pub(crate) fn conflict(gr: &GroupResource, name: &str) -> Self {
        Self::conflict_with(
            gr,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 with a custom explanation (failed delete preconditions, deletion in progress).
    pub(crate) fn conflict_with(gr: &GroupResource, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                gr.qualified()
            ),
        )
        .with_details(json!({"name": name, "group": gr.group, "kind": gr.resource}))
    }

    /// 409 for a server-side apply that conflicts with other field managers.
    pub(crate) fn apply_conflict(
        gr: &GroupResource,
        name: &str,
        message: String,
        causes: Vec<Cause>,
    ) -> Self {
        let causes: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        Self::new(409, "Conflict", message).with_details(
            json!({"name": name, "group": gr.group, "kind": gr.resource, "causes": causes}),
        )
    }

    /// 422 with field causes: `Kind.group "name" is invalid: [cause, cause]`.
    pub(crate) fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let joined: Vec<String> = causes.iter().map(Cause::full_message).collect();
        let list = if joined.len() == 1 {
            joined[0].clone()
        } else {
            format!("[{}]", joined.join(", "))
        };
        let causes_json: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        Self::new(
            422,
            "Invalid",
            format!("{qualified} \"{name}\" is invalid: {list}"),
        )
        .with_details(json!({"name": name, "group": group, "kind": kind, "causes": causes_json}))
    }

    /// 400 for a malformed request.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 405 for a verb the path does not support.
    pub(crate) fn method_not_allowed(method: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
        .with_details(json!({}))
    }

    /// 410 for a list resourceVersion older than the retained history.
    pub(crate) fn list_expired() -> Self {
        Self::new(
            410,
            "Expired",
            "The resourceVersion for the provided list is too old.",
        )
    }

    /// 410 for a continue token whose snapshot has been compacted away.
    pub(crate) fn continue_expired(inconsistent_token: String) -> Self {
        let mut e = Self::new(
            410,
            "Expired",
            "The provided continue parameter is too old to display a consistent list result. You can start a new \
             list without the continue parameter, or use the continue token in this response to retrieve the \
             remainder of the results. Continuing with the provided token results in an inconsistent list - objects \
             that were created, modified, or deleted between the time the first chunk was returned and now may show \
             up in the list.",
        );
        e.metadata = Some(Box::new(json!({"continue": inconsistent_token})));
        e
    }

    /// The in-stream error of a watch whose resourceVersion is compacted.
    pub(crate) fn watch_expired(requested: u64, oldest_minus_one: u64) -> Self {
        Self::new(
            410,
            "Expired",
            format!("too old resource version: {requested} ({oldest_minus_one})"),
        )
    }

    /// 504 for a resourceVersion ahead of the server, with the cause client-go looks for.
    pub(crate) fn too_large_resource_version(requested: u64, current: u64) -> Self {
        Self::new(504, "Timeout", format!("Timeout: Too large resource version: {requested}, current: {current}"))
            .with_details(json!({
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": 1
            }))
    }

    /// 415 for a patch type custom resources do not support.
    pub(crate) fn unsupported_media_type(_content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: \
             application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        )
        .with_details(json!({}))
    }

    /// 413 for a body over the server's request size limit.
    pub(crate) fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// 403 for a forbidden operation (creates in a terminating namespace or for a terminating CRD).
    pub(crate) fn forbidden(gr: &GroupResource, name: &str, why: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!("{} \"{name}\" is forbidden: {why}", gr.qualified()),
        )
        .with_details(json!({"name": name, "group": gr.group, "kind": gr.resource}))
    }

    /// 403 for a request an RBAC rule denies: `widgets.example.com is forbidden: User … cannot …`.
    pub(crate) fn forbidden_verb(gr: &GroupResource, name: &str, why: &str) -> Self {
        let subject = if name.is_empty() {
            gr.qualified()
        } else {
            format!("{} \"{name}\"", gr.qualified())
        };
        // StatusDetails' fields are all `omitempty`: the core group and a list's name are left out.
        let mut details = json!({"kind": gr.resource});
        if !gr.group.is_empty() {
            details["group"] = json!(gr.group);
        }
        if !name.is_empty() {
            details["name"] = json!(name);
        }
        Self::new(403, "Forbidden", format!("{subject} is forbidden: {why}")).with_details(details)
    }

    /// 500 for states the server refuses without a better class.
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The `Status` object, as sent in a body or an `ERROR` watch event.
    pub(crate) fn to_status(&self) -> Value {
        let mut status = Map::new();
        status.insert("kind".into(), "Status".into());
        status.insert("apiVersion".into(), "v1".into());
        status.insert(
            "metadata".into(),
            self.metadata
                .as_deref()
                .cloned()
                .unwrap_or_else(|| json!({})),
        );
        status.insert("status".into(), "Failure".into());
        status.insert("message".into(), self.message.clone().into());
        if !self.reason.is_empty() {
            status.insert("reason".into(), self.reason.into());
        }
        if let Some(details) = &self.details {
            status.insert("details".into(), (**details).clone());
        }
        status.insert("code".into(), self.code.into());
        Value::Object(status)
    }

    fn retry_after_seconds(&self) -> Option<u64> {
        self.details
            .as_ref()?
            .get("retryAfterSeconds")?
            .as_u64()
            .filter(|s| *s > 0)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (code, super::http::json_body(&self.to_status())).into_response();
        if let Some(secs) = self.retry_after_seconds()
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        response
    }
}

/// Result of a simulator API operation.
pub(crate) type ApiResult<T> = Result<T, ApiError>;
