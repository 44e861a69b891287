//! The NATS sink: CloudEvents to a JetStream stream (acknowledged, de-duplicated by event id) or
//! to core NATS subjects. Entry point: [`NatsConfig`], whose `build` connects a [`NatsSink`].
//!
//! - **Subjects** ([`render_subject`]): a [`Template`](herald_sink_core::Template) over
//!   `{group}`, `{version}`, `{kind}`, `{plural}`, `{namespace}`, `{name}` and `{op}`, read from
//!   the event ([`Vars::from_event`](herald_sink_core::Vars::from_event)); every value becomes
//!   exactly one subject token.
//! - **Modes** (CloudEvents NATS binding): structured (default) sends the JSON event as the
//!   payload with `content-type: application/cloudevents+json; charset=UTF-8`; binary sends
//!   `data` as the payload with the attributes as percent-encoded `ce-` headers and
//!   `content-type`. On JetStream, `Nats-Msg-Id` is the event `id` in both modes, so a redelivery
//!   inside the stream's duplicate window is stored once.
//! - **Durability**: with JetStream an event is `Ok` once its `PubAck` arrives (a duplicate ack
//!   too). Publishes are pipelined: a batch goes out without waiting for each ack, and at most
//!   `max_in_flight` acks are outstanding per sink. Core NATS (no `jetstream`) is at most once:
//!   `Ok` after the client flushed the batch on an unbroken connection.
//! - **Outcomes** ([`mod@classify`], table there): decided from error kinds and JetStream error
//!   codes. A message over the server's `max_payload` is rejected with code `oversize` before it
//!   is sent; no responders (no stream for the subject) is retried, never dead-lettered;
//!   disconnects and timeouts are retried.
//! - **Dead letters**: [`Sink::send_dead_letters`](herald_sink_core::Sink::send_dead_letters)
//!   publishes like `send`, adding the error context as `herald-error-*` headers.
//!
//! Auth: token, user and password, NKey seed or credentials file. TLS uses rustls with herald's
//! one crypto provider, ring.
// STYLE.md §7: library crates take clippy's pedantic set; each `allow` carries its reason.
#![warn(clippy::pedantic)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod classify;
mod config;
mod encode;
mod settings;
mod sink;

pub use classify::{classify_ack, classify_api_error, classify_publish_error};
pub use config::{
    NatsAuth, NatsConfig, NatsJetStream, NatsMode, NatsStorage, NatsStreamSpec, NatsTemplate,
    NatsTls,
};
pub use encode::{MSG_ID_HEADER, render_subject};
pub use sink::NatsSink;
