//! NATS and JetStream results → [`Outcome`]; start at [`classify_publish_error`].
//!
//! Decided from error kinds and JetStream `err_code`s, never from text:
//!
//! | what happened | outcome | reason code |
//! |---|---|---|
//! | JetStream `PubAck`, also with `duplicate: true` (the stream already holds that `Nats-Msg-Id`) | `Ok` | |
//! | core NATS: published and flushed on the connection that was up before publishing | `Ok` | |
//! | message (headers + payload) over the server's `max_payload`, found before publishing | `Reject` | `oversize` |
//! | the client's own `MaxPayloadExceeded`; JetStream 10054 (over the stream's `max_msg_size`), 10097 (headers over 64 KiB) | `Reject` | `oversize` |
//! | subject the client refuses | `Reject` | `invalid_subject` |
//! | header name or value NATS cannot carry (line break, `:` or non-ASCII in a name) | `Reject` | `invalid_header` |
//! | JetStream 10070, 10071, 10164: wrong last message id / sequence (herald sets no such expectation, so only a server-side rule can cause it, and it fails the same way again) | `Reject` | `jetstream_rejected` |
//! | no responders (no stream captures the subject; JetStream off), JetStream 10059 stream not found | `Retry` | `no_responders` |
//! | no `PubAck` within `ack_timeout`; the client's queue stayed full for `ack_timeout`; flush not done in time | `Retry` | `timeout` |
//! | not connected before publishing; the connection was replaced before the flush completed; the reply channel closed (broken pipe); the client is closed | `Retry` | `disconnected` |
//! | the client's own ack window full (`MaxAckPending`) | `Retry` | `backpressure` |
//! | JetStream 10109 stream sealed | `Retry` | `stream_sealed` |
//! | JetStream 10077 store failed (also a full stream with `discard: new`) | `Retry` | `store_failed` |
//! | JetStream 10002, 10023, 10053, 10122: account or server resources, stream limits | `Retry` | `resources_exceeded` |
//! | JetStream 10004–10009, 10076, 10039, 10118, 10194: no leader or quorum, JetStream off, stream offline | `Retry` | `stream_unavailable` |
//! | JetStream 10167 too many requests | `Retry` | `throttled` |
//! | any other JetStream error, or an answer that is not a `PubAck` | `Retry` | `jetstream_error` |
//!
//! Why retry by default: a JetStream error that is not known to be about the one message is
//! about the stream (a counter or scheduling stream refusing plain messages, a new server rule),
//! and rejecting would dead-letter the whole stream's traffic (DECISIONS.md: never dead-letter a
//! stream). A stalled sink shows in the retry metric with its code; an emptied stream shows
//! nowhere. Retrying is safe: `Nats-Msg-Id` makes the stream drop a message it already holds.
//!
//! Codes are metric labels, so they come from [`codes`]; the error's own text goes into the
//! detail.

use std::error::Error as _;

use async_nats::ConnectErrorKind;
use async_nats::client::{FlushError, FlushErrorKind, PublishErrorKind as CorePublishErrorKind};
use async_nats::jetstream;
use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::publish::PublishAck;
use herald_sink_core::sink::{Outcome, Reason, SinkError};

use crate::encode::oversize_detail;

/// Whether waiting may fix a connection or health-check error ([`Sink::is_transient`]): as
/// [`SinkError::is_transient`] (refused, unreachable, DNS, timed out), except a connection
/// failure of kind `Tls` (TLS set-up, or TLS required by one end only), `ServerParse` (what
/// answered is not a NATS server) or with a `rustls::Error` among its causes (a certificate that
/// does not verify, a handshake the server refused): the two ends disagree, and waiting does not
/// change that.
///
/// [`Sink::is_transient`]: herald_sink_core::sink::Sink::is_transient
#[must_use]
pub fn is_transient(error: &SinkError) -> bool {
    if !error.is_transient() {
        return false;
    }
    let mut next = error.source();
    while let Some(e) = next {
        if let Some(connect) = e.downcast_ref::<async_nats::ConnectError>()
            && matches!(
                connect.kind(),
                ConnectErrorKind::Tls
                    | ConnectErrorKind::ServerParse
                    | ConnectErrorKind::Authentication
                    | ConnectErrorKind::AuthorizationViolation
            )
        {
            return false;
        }
        // `std::io::Error::source` skips the error it wraps: look at that one too.
        let wrapped = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .map(|inner| inner as &(dyn std::error::Error + 'static));
        if e.is::<async_nats::rustls::Error>() {
            return false;
        }
        next = wrapped.or_else(|| e.source());
    }
    true
}

/// The reason codes of this sink (metric labels).
pub mod codes {
    /// The message exceeds a size limit; herald's driver applies its oversize policy.
    pub use herald_sink_core::sink::codes::OVERSIZE;
    /// The client refused the subject.
    pub const INVALID_SUBJECT: &str = "invalid_subject";
    /// A header NATS cannot carry.
    pub const INVALID_HEADER: &str = "invalid_header";
    /// JetStream refused this message permanently.
    pub const JETSTREAM_REJECTED: &str = "jetstream_rejected";
    /// No stream (or no JetStream) answered the publish.
    pub const NO_RESPONDERS: &str = "no_responders";
    /// No answer in time.
    pub const TIMEOUT: &str = "timeout";
    /// The connection was down or lost.
    pub const DISCONNECTED: &str = "disconnected";
    /// The client's window of unacknowledged publishes was full.
    pub const BACKPRESSURE: &str = "backpressure";
    /// The stream is sealed.
    pub const STREAM_SEALED: &str = "stream_sealed";
    /// The stream could not store the message (full with `discard: new`, or a storage error).
    pub const STORE_FAILED: &str = "store_failed";
    /// Account, server or stream resource limits.
    pub const RESOURCES_EXCEEDED: &str = "resources_exceeded";
    /// The stream has no leader, is offline, or JetStream is off.
    pub const STREAM_UNAVAILABLE: &str = "stream_unavailable";
    /// The server asked to slow down.
    pub const THROTTLED: &str = "throttled";
    /// Any other JetStream failure.
    pub const JETSTREAM_ERROR: &str = "jetstream_error";
}

/// The outcome of a JetStream publish: its `PubAck`, or the error of the publish or of the wait
/// for the ack (both have this type). A duplicate `PubAck` is `Ok`.
#[must_use]
pub fn classify_ack(result: &Result<PublishAck, jetstream::context::PublishError>) -> Outcome {
    match result {
        // `duplicate: true` means the stream already holds this event id: it is durable, which
        // is what `Ok` promises, and what deterministic ids are for.
        Ok(_) => Outcome::Ok,
        Err(error) => classify_publish_error(error),
    }
}

/// The outcome of a failed JetStream publish or ack (see the module table).
#[must_use]
pub fn classify_publish_error(error: &jetstream::context::PublishError) -> Outcome {
    let detail = error.to_string();
    match error.kind() {
        PublishErrorKind::StreamNotFound => retry(codes::NO_RESPONDERS, detail),
        PublishErrorKind::TimedOut => retry(codes::TIMEOUT, detail),
        PublishErrorKind::BrokenPipe => retry(codes::DISCONNECTED, detail),
        PublishErrorKind::MaxAckPending => retry(codes::BACKPRESSURE, detail),
        PublishErrorKind::MaxPayloadExceeded => reject(codes::OVERSIZE, detail),
        PublishErrorKind::WrongLastMessageId | PublishErrorKind::WrongLastSequence => {
            reject(codes::JETSTREAM_REJECTED, detail)
        }
        PublishErrorKind::Other => {
            let source = error.source();
            if let Some(api) = source.and_then(|s| s.downcast_ref::<jetstream::Error>()) {
                classify_api_error(api)
            } else if source.is_some_and(<dyn std::error::Error>::is::<async_nats::SubjectError>) {
                reject(codes::INVALID_SUBJECT, detail)
            } else {
                // An answer that is not a PubAck, or the client shutting down: nothing says the
                // next attempt fails the same way.
                retry(codes::JETSTREAM_ERROR, detail)
            }
        }
    }
}

/// The outcome of a JetStream API error answering a publish (see the module table).
#[must_use]
pub fn classify_api_error(error: &jetstream::Error) -> Outcome {
    let detail = format!("jetstream: {error}");
    match error.error_code() {
        ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM | ErrorCode::STREAM_HEADER_EXCEEDS_MAXIMUM => {
            reject(codes::OVERSIZE, detail)
        }
        ErrorCode::STREAM_WRONG_LAST_MESSAGE_ID
        | ErrorCode::STREAM_WRONG_LAST_SEQUENCE
        | ErrorCode::STREAM_WRONG_LAST_SEQUENCE_CONSTANT => {
            reject(codes::JETSTREAM_REJECTED, detail)
        }
        // Deleted between lookup and publish: the same condition as no responders.
        ErrorCode::STREAM_NOT_FOUND => retry(codes::NO_RESPONDERS, detail),
        ErrorCode::STREAM_SEALED => retry(codes::STREAM_SEALED, detail),
        ErrorCode::STREAM_STORE_FAILED => retry(codes::STORE_FAILED, detail),
        ErrorCode::ACCOUNT_RESOURCES_EXCEEDED
        | ErrorCode::INSUFFICIENT_RESOURCES
        | ErrorCode::STREAM_LIMITS
        | ErrorCode::STREAM_MAX_STREAM_BYTES_EXCEEDED => retry(codes::RESOURCES_EXCEEDED, detail),
        ErrorCode::CLUSTER_INCOMPLETE
        | ErrorCode::CLUSTER_NO_PEERS
        | ErrorCode::CLUSTER_NOT_ACTIVE
        | ErrorCode::CLUSTER_NOT_ASSIGNED
        | ErrorCode::CLUSTER_NOT_AVAILABLE
        | ErrorCode::CLUSTER_NOT_LEADER
        | ErrorCode::JETSTREAM_NOT_ENABLED
        | ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT
        | ErrorCode::STREAM_OFFLINE
        | ErrorCode::STREAM_OFFLINE_REASON => retry(codes::STREAM_UNAVAILABLE, detail),
        ErrorCode::STREAM_TOO_MANY_REQUESTS => retry(codes::THROTTLED, detail),
        // Deliberate default: see the module documentation.
        _ => retry(codes::JETSTREAM_ERROR, detail),
    }
}

/// The outcome of a failed core NATS publish.
#[must_use]
pub fn classify_core_publish_error(error: &async_nats::PublishError) -> Outcome {
    let detail = error.to_string();
    match error.kind() {
        CorePublishErrorKind::MaxPayloadExceeded => reject(codes::OVERSIZE, detail),
        CorePublishErrorKind::InvalidSubject => reject(codes::INVALID_SUBJECT, detail),
        // The client's command channel is closed: the connection task has ended.
        CorePublishErrorKind::Send => retry(codes::DISCONNECTED, detail),
    }
}

/// The outcome of a failed core NATS flush: the events may not have left the client.
#[must_use]
pub fn classify_flush_error(error: &FlushError) -> Outcome {
    match error.kind() {
        FlushErrorKind::SendError | FlushErrorKind::FlushError => {
            retry(codes::DISCONNECTED, error.to_string())
        }
    }
}

/// `Reject` with code `oversize`: a message of `size` wire bytes over the server's `max_payload`.
#[must_use]
pub fn oversize(size: usize, max_payload: usize) -> Outcome {
    reject(codes::OVERSIZE, oversize_detail(size, max_payload))
}

/// `Retry` with code `disconnected`.
pub(crate) fn disconnected(detail: &'static str) -> Outcome {
    retry(codes::DISCONNECTED, detail)
}

/// `Retry` with code `timeout`.
pub(crate) fn timed_out(detail: String) -> Outcome {
    retry(codes::TIMEOUT, detail)
}

fn retry(code: &'static str, detail: impl Into<std::borrow::Cow<'static, str>>) -> Outcome {
    Outcome::retry(Reason::new(code, detail))
}

fn reject(code: &'static str, detail: impl Into<std::borrow::Cow<'static, str>>) -> Outcome {
    Outcome::reject(Reason::new(code, detail))
}

#[cfg(test)]
mod tests {
    use super::*;

    enum Class {
        Ok,
        Retry(&'static str),
        Reject(&'static str),
    }

    fn check(outcome: &Outcome, class: &Class, what: &str) {
        match (class, outcome) {
            (Class::Ok, Outcome::Ok) => {}
            (
                Class::Retry(code),
                Outcome::Retry {
                    after: None,
                    reason,
                },
            )
            | (Class::Reject(code), Outcome::Reject { reason })
                if reason.code == *code => {}
            _ => panic!("{what}: {outcome:?}"),
        }
    }

    fn api_error(code: usize, err_code: u64) -> jetstream::Error {
        serde_json::from_value(serde_json::json!({
            "code": code,
            "err_code": err_code,
            "description": "from the server",
        }))
        .unwrap()
    }

    fn publish_error(kind: PublishErrorKind) -> jetstream::context::PublishError {
        jetstream::context::PublishError::new(kind)
    }

    #[test]
    fn acks_are_ok_duplicates_included() {
        for duplicate in [false, true] {
            let ack = PublishAck {
                stream: "HERALD".into(),
                sequence: 7,
                duplicate,
                ..PublishAck::default()
            };
            check(&classify_ack(&Ok(ack)), &Class::Ok, "ack");
        }
    }

    /// Every kind of JetStream publish error.
    #[test]
    fn publish_error_kinds() {
        use Class::{Reject, Retry};
        let table = [
            (PublishErrorKind::StreamNotFound, Retry("no_responders")),
            (PublishErrorKind::TimedOut, Retry("timeout")),
            (PublishErrorKind::BrokenPipe, Retry("disconnected")),
            (PublishErrorKind::MaxAckPending, Retry("backpressure")),
            (PublishErrorKind::MaxPayloadExceeded, Reject("oversize")),
            (
                PublishErrorKind::WrongLastMessageId,
                Reject("jetstream_rejected"),
            ),
            (
                PublishErrorKind::WrongLastSequence,
                Reject("jetstream_rejected"),
            ),
            (PublishErrorKind::Other, Retry("jetstream_error")),
        ];
        for (kind, class) in table {
            let error = publish_error(kind);
            check(
                &classify_publish_error(&error),
                &class,
                &format!("{kind:?}"),
            );
            check(&classify_ack(&Err(error)), &class, &format!("ack {kind:?}"));
        }
    }

    /// Every row of the module table that is a JetStream `err_code`, plus an unknown one.
    #[test]
    fn api_error_codes() {
        use Class::{Reject, Retry};
        let table: &[(u64, Class)] = &[
            (10054, Reject("oversize")),
            (10097, Reject("oversize")),
            (10070, Reject("jetstream_rejected")),
            (10071, Reject("jetstream_rejected")),
            (10164, Reject("jetstream_rejected")),
            (10059, Retry("no_responders")),
            (10109, Retry("stream_sealed")),
            (10077, Retry("store_failed")),
            (10002, Retry("resources_exceeded")),
            (10023, Retry("resources_exceeded")),
            (10053, Retry("resources_exceeded")),
            (10122, Retry("resources_exceeded")),
            (10004, Retry("stream_unavailable")),
            (10005, Retry("stream_unavailable")),
            (10006, Retry("stream_unavailable")),
            (10007, Retry("stream_unavailable")),
            (10008, Retry("stream_unavailable")),
            (10009, Retry("stream_unavailable")),
            (10039, Retry("stream_unavailable")),
            (10076, Retry("stream_unavailable")),
            (10118, Retry("stream_unavailable")),
            (10194, Retry("stream_unavailable")),
            (10167, Retry("throttled")),
            (10168, Retry("jetstream_error")),
            (10003, Retry("jetstream_error")),
            (99999, Retry("jetstream_error")),
        ];
        for (err_code, class) in table {
            let api = api_error(400, *err_code);
            check(&classify_api_error(&api), class, &format!("{err_code}"));
            // The client wraps API errors answering a publish in `Other` with the error as source.
            let wrapped =
                jetstream::context::PublishError::with_source(PublishErrorKind::Other, api);
            check(
                &classify_publish_error(&wrapped),
                class,
                &format!("wrapped {err_code}"),
            );
        }
    }

    #[test]
    fn api_error_details_keep_the_servers_words() {
        let outcome = classify_api_error(&api_error(503, 10077));
        assert_eq!(
            outcome.reason().unwrap().detail,
            "jetstream: from the server (code 503, error code 10077)"
        );
    }

    #[test]
    fn invalid_subjects_are_rejected() {
        let error = jetstream::context::PublishError::with_source(
            PublishErrorKind::Other,
            async_nats::SubjectError::InvalidFormat,
        );
        check(
            &classify_publish_error(&error),
            &Class::Reject("invalid_subject"),
            "jetstream",
        );
        let core = async_nats::PublishError::new(CorePublishErrorKind::InvalidSubject);
        check(
            &classify_core_publish_error(&core),
            &Class::Reject("invalid_subject"),
            "core",
        );
    }

    #[test]
    fn core_publish_and_flush_errors() {
        for (kind, class) in [
            (
                CorePublishErrorKind::MaxPayloadExceeded,
                Class::Reject("oversize"),
            ),
            (
                CorePublishErrorKind::InvalidSubject,
                Class::Reject("invalid_subject"),
            ),
            (CorePublishErrorKind::Send, Class::Retry("disconnected")),
        ] {
            let error = async_nats::PublishError::new(kind);
            check(
                &classify_core_publish_error(&error),
                &class,
                &format!("{kind:?}"),
            );
        }
        for kind in [FlushErrorKind::SendError, FlushErrorKind::FlushError] {
            check(
                &classify_flush_error(&FlushError::new(kind)),
                &Class::Retry("disconnected"),
                &format!("{kind:?}"),
            );
        }
    }

    #[test]
    fn oversize_rejects_with_the_drivers_code() {
        let outcome = oversize(1_048_577, 1_048_576);
        check(
            &outcome,
            &Class::Reject(herald_sink_core::sink::codes::OVERSIZE),
            "oversize",
        );
        assert_eq!(
            outcome.reason().unwrap().detail,
            "the NATS message (headers and payload) of 1048577 bytes exceeds the server's max_payload of 1048576 bytes"
        );
    }

    #[test]
    fn connection_helpers() {
        check(
            &disconnected("down"),
            &Class::Retry("disconnected"),
            "disconnected",
        );
        check(
            &timed_out("slow".into()),
            &Class::Retry("timeout"),
            "timeout",
        );
    }
}
