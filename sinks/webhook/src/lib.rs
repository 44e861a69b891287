//! The webhook sink: CloudEvents as HTTP requests (POST, or PUT with `method`), in binary (default),
//! structured or batched mode, signed per Standard Webhooks. Entry point: [`WebhookConfig`], whose `build` returns a
//! [`WebhookSink`].
//!
//! - **Modes** (CloudEvents HTTP binding): binary sends one request per event with the attributes as
//!   percent-encoded `ce-` headers and `data` as the body; structured sends one request per event
//!   with the whole event as `application/cloudevents+json`; batched sends one
//!   `application/cloudevents-batch+json` array per request, at most `batchMaxEvents` events each.
//! - **Outcomes** ([`classify()`], table in [`mod@classify`]): 2xx is `Ok`; 408, 429 and 5xx except 501 are `Retry`, with the
//!   `Retry-After` header as the hint; redirects are never followed, so 3xx, 501 and every other
//!   status are `Reject`. Connection failures and timeouts are `Retry`. A sink's `replies`
//!   ([`WebhookReplies`]) change that for its receiver: more statuses to retry or reject, GitHub's
//!   403 rate limit, `X-RateLimit-Reset`, and an Elasticsearch `_bulk` body check that retries or
//!   dead-letters only the failed items of a 200.
//! - **Signing** ([`WebhookSigning`]): `webhook-id`, `webhook-timestamp` and
//!   `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, and optionally GitHub's
//!   `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of body>`. The timestamp and signatures are
//!   computed per attempt; `webhook-id` is the event's `id`, the same on every attempt.
//!
//! TLS uses rustls with herald's one crypto provider, ring.
// STYLE.md §7: library crates take clippy's pedantic set; each `allow` carries its reason.
#![warn(clippy::pedantic)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod classify;
mod config;
mod encode;
mod replies;
mod settings;
mod sign;
mod sink;
mod template;

pub use classify::{classify, classify_error, classify_reply, parse_retry_after};
pub use config::{
    WebhookAuth, WebhookBasicAuth, WebhookConfig, WebhookMethod, WebhookMode, WebhookSigning,
    WebhookTls, WebhookTokenAuth,
};
pub use replies::{RateLimitHeader, ReplyBody, WebhookReplies};
pub use sink::{RequestPreview, WebhookSink};
pub use template::WebhookTemplate;
