//! The Kafka sink: CloudEvents as Kafka records through librdkafka. Entry point: [`KafkaConfig`],
//! whose `build` returns a [`KafkaSink`].
//!
//! - **Binding** (CloudEvents Kafka binding, EVENT-FORMAT.md B4): binary mode by default, the
//!   record value is `data` and every other attribute a `ce_<name>` header, `datacontenttype` the
//!   `content-type` header; structured mode ([`KafkaMode::Structured`]) sends the JSON event with
//!   `content-type: application/cloudevents+json; charset=UTF-8`. The record key is the event's
//!   `partitionkey`, left in the event as the binding asks (an event without one goes keyless and
//!   gets no tombstone). Keys are partitioned like Java's producer (`murmur2_random`).
//! - **Topic**: a [`Template`](herald_sink_core::Template) over `{group}`, `{version}`, `{kind}`,
//!   `{plural}` and `{namespace}`, rendered per event from its `k8s*` extensions and `source`, and
//!   sanitised to a legal topic name.
//! - **Tombstones** (opt-in): after a `deleted` event, a null-value record with the same key, so a
//!   compacted topic forgets the object; the event is `Ok` only once both are acknowledged.
//! - **Outcomes** ([`classify()`], table in [`mod@classify`]): `Ok` once the delivery report is
//!   back (`acks=all`, idempotent producer); transport, leadership, timeout and unknown-topic errors
//!   are `Retry`; oversize, topic-authorization and invalid-record errors are `Reject`.
//! - **Throughput**: a batch's records are all enqueued before any delivery report is awaited, so
//!   librdkafka batches and compresses (lz4) them; the only wait inside `send` is for room in
//!   librdkafka's local queue.
//!
//! TLS and SASL (PLAIN, SCRAM-SHA-256/512) are librdkafka's own, over the system OpenSSL; set
//! them with [`KafkaConfig::properties`] (`security.protocol`, `sasl.mechanism`,
//! `ssl.ca.location` …). GSSAPI (Kerberos) is not built in, so SASL needs an explicit
//! `sasl.mechanism`.
// STYLE.md §7: library crates take clippy's pedantic set; each `allow` carries its reason.
#![warn(clippy::pedantic)]
// In tests a failed step should panic with its message, which is what unwrap and expect do.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod classify;
mod config;
mod context;
mod encode;
mod settings;
mod sink;
#[cfg(test)]
mod tests;

pub use classify::{classify, classify_code};
pub use config::{KafkaConfig, KafkaMode, KafkaTemplate};
pub use sink::KafkaSink;
