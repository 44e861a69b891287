//! Dead letters: what herald keeps when a sink gives up on an event, and the error context that goes
//! with it to a `deadLetterSink`; start at [`DeadLetter`].
//!
//! One type serves every reader and writer: the delivery driver writes a [`DeadLetter`] into the
//! journal's dead-letter queue, the forwarder reads it back and hands its [`ErrorContext`] to the
//! target sink (which turns it into `herald-error-*` or `herald_error_*` headers), and `herald dlq`
//! and the admin endpoint print it. It lives here, beside the [`Sink`](crate::Sink) trait, because
//! the sink crates build their forwarding headers from the context and the herald crate's journal
//! side must read the same record: this crate is the one both reach without a cycle.
//!
//! The record's JSON is the journal's stored format, so its shape is a compatibility promise: a
//! flat object `{"seq", "sink", "attempts", "firstFailure", "lastFailure", "class", "code",
//! "error", "event"}` with the event in the CloudEvents JSON format. Changing it means bumping the
//! journal's schema version (DECISIONS.md, "Journal and delivery").

use serde::{Deserialize, Serialize};

use crate::event::CloudEvent;

/// Why an event became a dead letter (EVENT-FORMAT.md: sink, attempts, first and last failure,
/// error class, code and message), forwarded with it to a `deadLetterSink`.
///
/// Its serde form is the error part of a [`DeadLetter`] record: camelCase keys, with the message
/// under `error` as the journal has always stored it. The fields are declared in the record's key
/// order.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorContext {
    /// The sink that gave up on the event.
    pub sink: String,
    /// Attempts made.
    pub attempts: u32,
    /// First failure, RFC 3339.
    pub first_failure: String,
    /// Last failure, RFC 3339.
    pub last_failure: String,
    /// [`ErrorContext::PERMANENT`] (the sink rejected it) or [`ErrorContext::RETRYABLE`] (an
    /// explicit budget ran out).
    pub class: String,
    /// The low-cardinality reason code (`http_400`, `message_too_large`, `retries_exhausted`).
    pub code: String,
    /// The last error message, as the destination gave it.
    #[serde(rename = "error")]
    pub message: String,
}

impl ErrorContext {
    /// The class of an event the sink rejected.
    pub const PERMANENT: &'static str = "permanent";
    /// The class of an event whose explicit `maxAttempts`/`maxAge` budget ran out.
    pub const RETRYABLE: &'static str = "retryable";

    /// The context as `(name, value)` pairs with hyphenated names and no prefix (`code`,
    /// `first-failure` …); each sink adds its own prefix.
    #[must_use]
    pub fn fields(&self) -> [(&'static str, String); 7] {
        [
            ("sink", self.sink.clone()),
            ("class", self.class.clone()),
            ("code", self.code.clone()),
            ("message", self.message.clone()),
            ("attempts", self.attempts.to_string()),
            ("first-failure", self.first_failure.clone()),
            ("last-failure", self.last_failure.clone()),
        ]
    }

    /// `herald-error-*` headers (HTTP and NATS), values as plain text; the sink encodes them for
    /// its protocol (the webhook sink percent-encodes like `ce-` headers).
    #[must_use]
    pub fn hyphen_headers(&self) -> Vec<(String, String)> {
        self.fields()
            .into_iter()
            .map(|(name, value)| (format!("herald-error-{name}"), value))
            .collect()
    }

    /// `herald_error_*` headers (Kafka), values as UTF-8 bytes.
    #[must_use]
    pub fn kafka_headers(&self) -> Vec<(String, Vec<u8>)> {
        self.fields()
            .into_iter()
            .map(|(name, value)| {
                (
                    format!("herald_error_{}", name.replace('-', "_")),
                    value.into_bytes(),
                )
            })
            .collect()
    }

    /// The context as a JSON object: its serde form, the keys of the journal's dead-letter records
    /// (`sink`, `attempts`, `firstFailure`, `lastFailure`, `class`, `code`, `error`).
    #[must_use]
    pub fn to_json(&self) -> serde_json::Value {
        // Strings and an integer under string keys: serializing cannot fail.
        serde_json::to_value(self).unwrap_or_default()
    }
}

/// A dead letter: an event a sink gave up on, with why, as the journal's dead-letter queue keeps it.
///
/// # Examples
///
/// ```
/// use herald_sink_core::{CloudEvent, DeadLetter, ErrorContext};
///
/// let letter = DeadLetter {
///     seq: 7,
///     error: ErrorContext {
///         sink: "hook".into(),
///         attempts: 1,
///         first_failure: "2026-01-01T00:00:00.000Z".into(),
///         last_failure: "2026-01-01T00:00:00.000Z".into(),
///         class: ErrorContext::PERMANENT.into(),
///         code: "http_400".into(),
///         message: "400 Bad Request".into(),
///     },
///     event: CloudEvent::new("u:1:created", "k8s://c/example.com/widgets", "t"),
/// };
/// let record = letter.to_bytes()?;
/// let json: serde_json::Value = serde_json::from_slice(&record)?;
/// assert_eq!(json["error"], "400 Bad Request");
/// assert_eq!(json["event"]["id"], "u:1:created");
/// assert_eq!(DeadLetter::from_bytes(&record)?, letter);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// The event's journal sequence number (the dead-letter queue's key).
    pub seq: u64,
    /// Why it could not be delivered; its keys sit at the record's top level.
    #[serde(flatten)]
    pub error: ErrorContext,
    /// The event, exactly as journaled (CloudEvents JSON format in the record).
    pub event: CloudEvent,
}

impl DeadLetter {
    /// The record as the journal stores it (JSON, keys in the order of the module doc).
    ///
    /// # Errors
    ///
    /// Only if `serde_json` fails to write a map of strings, which it does not; the error is passed
    /// on rather than assumed away.
    pub fn to_bytes(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    /// Reads a record the journal stored (by this herald or an earlier one: the shape has not
    /// changed).
    ///
    /// # Errors
    ///
    /// When the bytes are not such a record, or its event is not a valid event.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn context() -> ErrorContext {
        ErrorContext {
            sink: "hook".into(),
            class: "permanent".into(),
            code: "http_400".into(),
            message: "bad".into(),
            attempts: 2,
            first_failure: "t1".into(),
            last_failure: "t2".into(),
        }
    }

    #[test]
    fn error_context_headers_per_protocol() {
        let error = context();
        let hyphen = error.hyphen_headers();
        assert!(hyphen.contains(&("herald-error-code".into(), "http_400".into())));
        assert!(hyphen.contains(&("herald-error-first-failure".into(), "t1".into())));
        let kafka = error.kafka_headers();
        assert!(kafka.contains(&("herald_error_last_failure".into(), b"t2".to_vec())));
        assert!(kafka.contains(&("herald_error_attempts".into(), b"2".to_vec())));
        assert_eq!(error.to_json()["firstFailure"], "t1");
    }

    /// A record exactly as herald wrote it before the record had a type (a `json!` object with
    /// these keys in this order): it still reads, and writing it again gives the same bytes, so
    /// the journal's dead-letter queue needs no schema change.
    const STORED: &str = concat!(
        r#"{"seq":7,"sink":"hook","attempts":3,"firstFailure":"2026-01-01T00:00:00.000Z","#,
        r#""lastFailure":"2026-01-01T00:01:00.000Z","class":"permanent","code":"http_400","#,
        r#""error":"400 Bad Request","event":{"specversion":"1.0","id":"u:1:created","#,
        r#""source":"k8s://c/example.com/widgets","type":"dev.herald.resource.created","#,
        r#""subject":"ns/a","time":"2026-01-01T00:00:00.000Z","datacontenttype":"application/json","#,
        r#""dataschema":"urn:herald:change:v1","k8sgroup":"example.com","partitionkey":"ns/a","#,
        r#""resync":false,"data":{"op":"created","resync":false,"object":{"b":1,"a":2}}}}"#,
    );

    #[test]
    fn reads_and_rewrites_the_stored_record_byte_for_byte() {
        let letter = DeadLetter::from_bytes(STORED.as_bytes()).unwrap();
        assert_eq!(letter.seq, 7);
        assert_eq!(letter.error.sink, "hook");
        assert_eq!(letter.error.attempts, 3);
        assert_eq!(letter.error.class, ErrorContext::PERMANENT);
        assert_eq!(letter.error.code, "http_400");
        assert_eq!(letter.error.message, "400 Bad Request");
        assert_eq!(letter.error.first_failure, "2026-01-01T00:00:00.000Z");
        assert_eq!(letter.error.last_failure, "2026-01-01T00:01:00.000Z");
        assert_eq!(letter.event.id, "u:1:created");
        assert_eq!(letter.event.partition_key(), Some("ns/a"));
        assert_eq!(
            String::from_utf8(letter.to_bytes().unwrap()).unwrap(),
            STORED
        );
    }

    #[test]
    fn the_error_context_has_the_record_keys() {
        let letter = DeadLetter::from_bytes(STORED.as_bytes()).unwrap();
        let record: serde_json::Value = serde_json::from_str(STORED).unwrap();
        let context = letter.error.to_json();
        let keys: Vec<&String> = context.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "sink",
                "attempts",
                "firstFailure",
                "lastFailure",
                "class",
                "code",
                "error"
            ]
        );
        for key in keys {
            assert_eq!(context[key], record[key], "{key}");
        }
    }

    #[test]
    fn rejects_what_is_not_a_record() {
        assert!(DeadLetter::from_bytes(b"{}").is_err());
        assert!(DeadLetter::from_bytes(b"not json").is_err());
        let no_event = r#"{"seq":1,"sink":"s","attempts":1,"firstFailure":"t","lastFailure":"t","class":"permanent","code":"c","error":"e"}"#;
        assert!(DeadLetter::from_bytes(no_event.as_bytes()).is_err());
        let bad_event = STORED.replace(r#""specversion":"1.0","#, "");
        assert!(DeadLetter::from_bytes(bad_event.as_bytes()).is_err());
    }

    #[test]
    fn a_letter_round_trips() {
        let letter = DeadLetter {
            seq: u64::MAX,
            error: context(),
            event: CloudEvent::new("id", "/s", "t").extension("partitionkey", "k"),
        };
        let bytes = letter.to_bytes().unwrap();
        assert_eq!(DeadLetter::from_bytes(&bytes).unwrap(), letter);
    }
}
