//! `POST /reload`: asks the running herald to load its configuration file again (what SIGHUP does)
//! and answers with the outcome. Needs the bearer token, like every mutating call.

use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AdminState;
use super::dlq::{Call, authorize};

/// How long the call waits for the reload: removed and changed sinks drain first, so longer than
/// the default drain timeout.
const WAIT: Duration = Duration::from_secs(60);

pub(super) async fn reload(State(s): State<AdminState>, headers: HeaderMap) -> Response {
    if let Err(denied) = authorize(&s, &headers, Call::Mutating) {
        return *denied;
    }
    let unavailable =
        |why: &str| (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response();
    let Some(requests) = &s.reload else {
        return unavailable("this herald does not reload its configuration");
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    if requests.send(tx).await.is_err() {
        return unavailable("herald is stopping");
    }
    match tokio::time::timeout(WAIT, rx).await {
        Ok(Ok(Ok(generation))) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            json!({"generation": generation, "reloaded": true}).to_string(),
        )
            .into_response(),
        // 422: the file was read and refused; herald itself is fine.
        Ok(Ok(Err(error))) => {
            (StatusCode::UNPROCESSABLE_ENTITY, format!("{error}\n")).into_response()
        }
        Ok(Err(_)) => unavailable("herald is stopping"),
        Err(_) => unavailable("the reload is still running; see /status"),
    }
}
