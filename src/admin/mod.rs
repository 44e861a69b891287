//! The admin endpoint, herald's HTTP control plane (`127.0.0.1:9464` by default). Entry point:
//! [`serve`].
//!
//! - `health`: `/healthz` (herald's own loops only, so an API-server outage never becomes a restart
//!   loop) and `/readyz` (watches synced, CRDs present, the API server reachable, descriptors left);
//! - `listener`: accepts that survive running out of file descriptors;
//! - `metrics`: `/metrics`, Prometheus text rendered from
//!   [`MetricName`](herald_sink_core::MetricName);
//! - `status`: `/status` (JSON);
//! - `dlq`: the dead-letter and replay calls, which need the bearer token;
//! - `reload`: `POST /reload`, which needs the bearer token too.

mod dlq;
mod health;
mod listener;
mod metrics;
mod reload;
mod status;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::journal::Journal;

pub use listener::Headroom;
pub use metrics::render;
pub use status::status_json;

/// What the endpoint reports on.
#[derive(Clone)]
pub struct AdminState {
    /// The running watchers and sinks, as the supervisor changes them.
    pub registry: Arc<crate::app::Registry>,
    /// The journal.
    pub journal: Journal,
    /// Set while herald's own loops run; cleared when one of them died unexpectedly.
    pub alive: Arc<std::sync::atomic::AtomicBool>,
    /// The bearer token of the mutating calls; `None` disables them.
    pub token: Option<String>,
    /// The routes, so a replay only queues what the sink would have received.
    pub router: Arc<crate::route::Router>,
    /// The configuration generation in force and the last reload's outcome.
    pub config: Arc<crate::app::ConfigStatus>,
    /// Where `POST /reload` asks for a reload; `None` where nothing reloads (tests).
    pub reload: Option<tokio::sync::mpsc::Sender<crate::app::ReloadReply>>,
    /// Leader election's role and holder; `None` when it is off.
    pub leadership: Option<Arc<crate::leader::Leadership>>,
}

impl std::fmt::Debug for AdminState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminState")
            .field("watchers", &self.registry.watchers().len())
            .field("sinks", &self.registry.sinks().len())
            .finish()
    }
}

/// Serves the endpoint on `listener` until `stop` fires. Accept errors never end it (see
/// [`Headroom`]).
pub async fn serve(listener: Headroom, state: AdminState, stop: CancellationToken) {
    let app = Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(metrics::metrics))
        .route("/status", get(status::status))
        .route("/dlq/{sink}", get(dlq::dlq_list))
        .route("/dlq/{sink}/replay", post(dlq::dlq_replay))
        .route("/dlq/{sink}/purge", post(dlq::dlq_purge))
        .route("/replay", post(dlq::replay))
        .route("/reload", post(reload::reload))
        .with_state(state);
    if let Err(error) = axum::serve(listener, app)
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
    {
        tracing::error!(message = "Admin endpoint failed.", %error);
    }
}

/// Binds the admin address and takes the endpoint's reserve of file descriptors, before the
/// watchers start and can take them all.
pub async fn bind(addr: SocketAddr) -> std::io::Result<Headroom> {
    tokio::net::TcpListener::bind(addr).await.map(Headroom::new)
}

/// Seconds since herald observed the oldest event `sink` has not finished.
fn oldest_age(journal: &Journal, sink: &str) -> f64 {
    let Ok(cursor) = journal.cursor(sink) else {
        return 0.0;
    };
    let Ok(rows) = journal.read(sink, cursor, 1) else {
        return 0.0;
    };
    let Some((_, bytes)) = rows.first() else {
        return 0.0;
    };
    let time = serde_json::from_slice::<Value>(bytes).ok().and_then(|v| {
        v.get("time")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    });
    time.map_or(0.0, |t| {
        jiff::Timestamp::now()
            .duration_since(t)
            .as_secs_f64()
            .max(0.0)
    })
}
