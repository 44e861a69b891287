//! Kafka binary mode (`ce_` headers); start at [`CloudEvent::kafka_binary_headers`].

use super::{BinaryParts, CONTENT_TYPE_HEADER, DecodeError, KAFKA_HEADER_PREFIX};
use crate::event::CloudEvent;

impl CloudEvent {
    /// Record headers for Kafka binary mode; the record value is [`CloudEvent::data_bytes`].
    ///
    /// Every attribute except `datacontenttype` becomes `ce_<name>` with its canonical string value
    /// as raw UTF-8 (the Kafka binding has no percent-encoding); `datacontenttype` becomes
    /// `content-type`, set to `application/json` when unset but `data` is present. The record key
    /// is not the encoder's business: the sink sets it from [`CloudEvent::partition_key`], leaving
    /// the extension in place as the binding requires.
    #[must_use]
    pub fn kafka_binary_headers(&self) -> Vec<(String, Vec<u8>)> {
        let mut headers: Vec<(String, Vec<u8>)> = self
            .binary_attributes()
            .map(|(name, value)| {
                (
                    format!("{KAFKA_HEADER_PREFIX}{name}"),
                    value.into_owned().into_bytes(),
                )
            })
            .collect();
        if let Some(ct) = self.binary_content_type() {
            headers.push((CONTENT_TYPE_HEADER.to_owned(), ct.as_bytes().to_vec()));
        }
        headers
    }
}

/// Reads a Kafka binary-mode record back into an event and validates it.
///
/// `ce_*` headers are attributes (names matched case-insensitively), `content-type` is
/// `datacontenttype`, others are ignored. Values must be UTF-8. `value` is the record value
/// (pass an empty slice for a record without one); it is parsed as for HTTP, an empty value
/// meaning no `data`. Extensions come back as strings.
///
/// Check [`Mode::from_content_type`](super::Mode::from_content_type) first: a record whose
/// `content-type` starts with `application/cloudevents` is structured and goes to
/// [`CloudEvent::from_structured_json`] instead.
///
/// ```
/// use herald_sink_core::{CloudEvent, encode};
/// use serde_json::json;
///
/// let event = CloudEvent::new("1", "/s", "t").data(json!({"op": "created"}));
/// let decoded = encode::kafka_binary_decode(event.kafka_binary_headers(), &event.data_bytes())?;
/// assert_eq!(decoded.data, event.data);
/// # Ok::<(), encode::DecodeError>(())
/// ```
///
/// # Errors
///
/// [`DecodeError`] for a missing or duplicated attribute, a non-UTF-8 header, a bad value, or an
/// event that breaks a CloudEvents rule.
pub fn kafka_binary_decode<I, K, V>(headers: I, value: &[u8]) -> Result<CloudEvent, DecodeError>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<[u8]>,
{
    let mut parts = BinaryParts::default();
    for (name, header_value) in headers {
        let name = name.as_ref().to_ascii_lowercase();
        let attribute = if name == CONTENT_TYPE_HEADER {
            "datacontenttype"
        } else if let Some(attribute) = name.strip_prefix(KAFKA_HEADER_PREFIX) {
            attribute
        } else {
            continue;
        };
        let text =
            std::str::from_utf8(header_value.as_ref()).map_err(|_| DecodeError::InvalidUtf8 {
                attribute: attribute.to_owned(),
            })?;
        parts.set(attribute, text.to_owned())?;
    }
    parts.finish(value)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::event::ExtensionValue;

    fn herald_event() -> CloudEvent {
        CloudEvent::new(
            "9f1c-uid:1234:deleted",
            "k8s://prod/core/configmaps",
            "dev.herald.resource.deleted",
        )
        .subject("kube-system/cfg é")
        .time("2026-01-02T03:04:05.678Z")
        .datacontenttype("application/json")
        .dataschema("urn:herald:change:v1")
        .extension("partitionkey", "kube-system/cfg é")
        .extension("resync", true)
        .data(json!({"op": "deleted", "object": {"data": {"k": "v"}}, "resync": true}))
    }

    fn header<'a>(headers: &'a [(String, Vec<u8>)], name: &str) -> Option<&'a [u8]> {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }

    #[test]
    fn maps_every_attribute_to_a_ce_underscore_header() {
        let headers = herald_event().kafka_binary_headers();
        let names: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "ce_specversion",
                "ce_id",
                "ce_source",
                "ce_type",
                "ce_subject",
                "ce_time",
                "ce_dataschema",
                "ce_partitionkey",
                "ce_resync",
                "content-type"
            ]
        );
        assert_eq!(header(&headers, "ce_specversion"), Some(&b"1.0"[..]));
        assert_eq!(header(&headers, "ce_resync"), Some(&b"true"[..]));
        assert_eq!(
            header(&headers, "content-type"),
            Some(&b"application/json"[..])
        );
        assert_eq!(header(&headers, "ce_datacontenttype"), None);
    }

    #[test]
    fn writes_raw_utf8_without_percent_encoding() {
        let headers = herald_event().kafka_binary_headers();
        assert_eq!(
            header(&headers, "ce_subject"),
            Some("kube-system/cfg é".as_bytes())
        );
    }

    #[test]
    fn value_is_the_json_data() {
        let event = herald_event();
        let value: serde_json::Value = serde_json::from_slice(&event.data_bytes()).unwrap();
        assert_eq!(Some(value), event.data);
    }

    #[test]
    fn round_trips() {
        for event in [
            herald_event(),
            CloudEvent::new("1", "/s", "t").extension("n", 5),
        ] {
            let decoded =
                kafka_binary_decode(event.kafka_binary_headers(), &event.data_bytes()).unwrap();
            let mut expected = event;
            for value in expected.extensions.values_mut() {
                *value = ExtensionValue::String(value.to_string());
            }
            assert_eq!(decoded, expected);
        }
    }

    #[test]
    fn does_not_percent_decode() {
        let headers: Vec<(&str, &[u8])> = vec![
            ("ce_specversion", b"1.0"),
            ("ce_id", b"1"),
            ("ce_source", b"/s"),
            ("ce_type", b"t"),
            ("ce_subject", b"100%20"),
        ];
        let event = kafka_binary_decode(headers, b"").unwrap();
        assert_eq!(event.subject.as_deref(), Some("100%20"));
    }

    #[test]
    fn rejects_non_utf8_headers_and_missing_attributes() {
        let headers: Vec<(&str, &[u8])> = vec![
            ("ce_specversion", b"1.0"),
            ("ce_id", b"\xff"),
            ("ce_source", b"/s"),
            ("ce_type", b"t"),
        ];
        assert!(matches!(
            kafka_binary_decode(headers, b""),
            Err(DecodeError::InvalidUtf8 { ref attribute }) if attribute == "id"
        ));
        let headers: Vec<(&str, &[u8])> = vec![
            ("ce_specversion", b"1.0"),
            ("ce_id", b"1"),
            ("ce_type", b"t"),
        ];
        assert!(matches!(
            kafka_binary_decode(headers, b""),
            Err(DecodeError::MissingAttribute {
                attribute: "source"
            })
        ));
    }

    #[test]
    fn ignores_http_style_and_foreign_headers() {
        let headers: Vec<(&str, &[u8])> = vec![
            ("ce_specversion", b"1.0"),
            ("ce_id", b"1"),
            ("ce_source", b"/s"),
            ("ce_type", b"t"),
            ("ce-subject", b"ignored"),
            ("traceparent", b"00-abc"),
        ];
        let event = kafka_binary_decode(headers, b"").unwrap();
        assert_eq!(event, CloudEvent::new("1", "/s", "t"));
    }
}
