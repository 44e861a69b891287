//! Journal entries the reader cannot read back as a valid event become dead letters, never silent
//! skips; entry point: [`unreadable_entry`].
//!
//! The dead-letter record keeps its one shape (an event plus its error context), so an entry that
//! is not an event is carried by a stand-in event herald makes: type [`UNREADABLE_TYPE`], source
//! [`UNREADABLE_SOURCE`], the entry's own `id` when one can be read from it, and `data` holding the
//! sequence number, the decode error and the entry's bytes (as text when they are UTF-8, else
//! base64), so nothing of what was journaled is lost and an operator can see why.

use base64::Engine as _;
use herald_sink_core::encode::DecodeError;
use herald_sink_core::event::{CloudEvent, format_time};
use herald_sink_core::sink::{Envelope, Reason};
use serde_json::{Value, json};

/// `type` of the stand-in event that carries an unreadable journal entry into the dead-letter queue.
pub const UNREADABLE_TYPE: &str = "dev.herald.journal.unreadable";
/// `source` of that stand-in event.
pub const UNREADABLE_SOURCE: &str = "urn:herald:journal";
/// The dead-letter code of an unreadable journal entry.
pub const UNREADABLE_CODE: &str = "unreadable_entry";

/// The dead letter for journal entry `seq` whose `bytes` do not read back as a valid event
/// (`error`): the stand-in envelope and the reason, whose detail names the sequence number, the
/// event id when the entry has one, and the decode error with its causes.
pub fn unreadable_entry(seq: u64, bytes: &[u8], error: &DecodeError) -> (Envelope, Reason) {
    let cause = herald_sink_core::error_chain(error);
    let id = serde_json::from_slice::<Value>(bytes)
        .ok()
        .and_then(|v| v.get("id").and_then(Value::as_str).map(str::to_owned))
        .filter(|id| !id.is_empty());
    let detail = match &id {
        Some(id) => format!("journal entry {seq} (event {id:?}) cannot be read back: {cause}"),
        None => format!("journal entry {seq} cannot be read back: {cause}"),
    };
    let mut data = json!({"seq": seq, "error": cause});
    if let Some(map) = data.as_object_mut() {
        match std::str::from_utf8(bytes) {
            Ok(text) => map.insert("entry".into(), Value::String(text.to_owned())),
            Err(_) => map.insert(
                "entryBase64".into(),
                Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
            ),
        };
    }
    let event = CloudEvent::new(
        id.unwrap_or_else(|| format!("journal-entry-{seq}")),
        UNREADABLE_SOURCE,
        UNREADABLE_TYPE,
    )
    .time(format_time(std::time::SystemTime::now()))
    .datacontenttype("application/json")
    .data(data);
    (
        Envelope::new(seq, event),
        Reason::new(UNREADABLE_CODE, detail),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn decode_error(bytes: &[u8]) -> DecodeError {
        CloudEvent::from_structured_json(bytes).unwrap_err()
    }

    #[test]
    fn names_the_sequence_the_id_and_the_cause_and_keeps_the_bytes() {
        let bytes =
            br#"{"specversion":"1.0","id":"u:7:created","source":"/s","type":"t","subject":""}"#;
        let (envelope, reason) = unreadable_entry(42, bytes, &decode_error(bytes));
        assert_eq!(reason.code, UNREADABLE_CODE);
        assert_eq!(
            reason.detail,
            "journal entry 42 (event \"u:7:created\") cannot be read back: decoded event is invalid: attribute `subject` is empty"
        );
        assert_eq!(envelope.seq, 42);
        let event = &envelope.event;
        event.validate().unwrap();
        assert_eq!(event.id, "u:7:created");
        assert_eq!(event.ty, UNREADABLE_TYPE);
        let data = event.data.as_ref().unwrap();
        assert_eq!(data["seq"], 42);
        assert_eq!(data["entry"].as_str().unwrap().as_bytes(), bytes);
    }

    #[test]
    fn keeps_bytes_that_are_not_text_as_base64() {
        let bytes = b"\xff\x00not json";
        let (envelope, reason) = unreadable_entry(3, bytes, &decode_error(bytes));
        assert!(
            reason
                .detail
                .starts_with("journal entry 3 cannot be read back: event is not valid json"),
            "{}",
            reason.detail
        );
        let event = &envelope.event;
        event.validate().unwrap();
        assert_eq!(event.id, "journal-entry-3");
        let data = event.data.as_ref().unwrap();
        let kept = base64::engine::general_purpose::STANDARD
            .decode(data["entryBase64"].as_str().unwrap())
            .unwrap();
        assert_eq!(kept, bytes);
        // The stand-in survives the dead-letter record's round trip.
        let letter = herald_sink_core::DeadLetter {
            seq: 3,
            error: herald_sink_core::ErrorContext::default(),
            event: CloudEvent::clone(event),
        };
        let back = herald_sink_core::DeadLetter::from_bytes(&letter.to_bytes().unwrap()).unwrap();
        assert_eq!(back, letter);
    }
}
