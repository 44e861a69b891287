//! NATS binary mode (`ce-` headers, `ce-datacontenttype` included); start at
//! [`CloudEvent::nats_binary_headers`].

use super::http::decode_header_value;
use super::{BinaryParts, DecodeError, HTTP_HEADER_PREFIX, encode_header_value};
use crate::event::CloudEvent;

impl CloudEvent {
    /// Headers for NATS binary mode (the NATS binding, 1.0.3-wip, 3.1.3); the payload is
    /// [`CloudEvent::data_bytes`].
    ///
    /// Every attribute, `datacontenttype` included, becomes `ce-<name>` with its canonical string
    /// value percent-encoded by [`encode_header_value`] (the binding's rule, the same as HTTP's).
    /// Unlike HTTP there is no `content-type` header: the binding maps `datacontenttype` like
    /// every other attribute, and a `Content-Type` of `application/cloudevents…` is what marks a
    /// message structured. When `datacontenttype` is unset but `data` is present,
    /// `ce-datacontenttype` is `application/json`, the JSON format's implicit default made
    /// explicit.
    ///
    /// ```
    /// use herald_sink_core::CloudEvent;
    /// use serde_json::json;
    ///
    /// let event = CloudEvent::new("1", "/s", "t").subject("a b").data(json!({}));
    /// let headers = event.nats_binary_headers();
    /// assert!(headers.contains(&("ce-subject".to_owned(), "a%20b".to_owned())));
    /// assert!(headers.contains(&("ce-datacontenttype".to_owned(), "application/json".to_owned())));
    /// assert!(headers.iter().all(|(name, _)| name != "content-type"));
    /// ```
    #[must_use]
    pub fn nats_binary_headers(&self) -> Vec<(String, String)> {
        let mut headers = self.ce_headers();
        if let Some(ct) = self.binary_content_type() {
            headers.push((
                format!("{HTTP_HEADER_PREFIX}datacontenttype"),
                encode_header_value(ct).into_owned(),
            ));
        }
        headers
    }
}

/// Reads a NATS binary-mode message back into an event and validates it.
///
/// `ce-*` headers (names matched case-insensitively, as the binding says NATS header names are)
/// are attributes, each value unquoted and percent-decoded once as for HTTP; `ce-datacontenttype`
/// is `datacontenttype`. Every other header is ignored, `content-type` included (the binding gives
/// it no meaning in binary mode). The payload is parsed as for HTTP, an empty payload meaning no
/// `data`. Extensions come back as strings.
///
/// ```
/// use herald_sink_core::{CloudEvent, encode};
/// use serde_json::json;
///
/// let event = CloudEvent::new("1", "/s", "t").subject("a b").data(json!({"op": "created"}));
/// let decoded = encode::nats_binary_decode(event.nats_binary_headers(), &event.data_bytes())?;
/// assert_eq!(decoded.subject.as_deref(), Some("a b"));
/// assert_eq!(decoded.datacontenttype.as_deref(), Some("application/json"));
/// # Ok::<(), encode::DecodeError>(())
/// ```
///
/// # Errors
///
/// [`DecodeError`] for a missing or duplicated attribute, a bad header value or payload, or an
/// event that breaks a CloudEvents rule.
pub fn nats_binary_decode<I, K, V>(headers: I, payload: &[u8]) -> Result<CloudEvent, DecodeError>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<[u8]>,
{
    let mut parts = BinaryParts::default();
    for (name, value) in headers {
        let name = name.as_ref().to_ascii_lowercase();
        if let Some(attribute) = name.strip_prefix(HTTP_HEADER_PREFIX) {
            let decoded = decode_header_value(attribute, value.as_ref())?;
            parts.set(attribute, decoded)?;
        }
    }
    parts.finish(payload)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::event::ExtensionValue;

    fn herald_event() -> CloudEvent {
        CloudEvent::new(
            "9f1c-uid:1234:updated",
            "k8s://prod/example.com/widgets",
            "dev.herald.resource.updated",
        )
        .subject("default/w 1")
        .time("2026-01-02T03:04:05.678Z")
        .datacontenttype("application/json")
        .dataschema("urn:herald:change:v1")
        .extension("partitionkey", "default/w 1")
        .extension("resync", false)
        .data(json!({"op": "updated", "resync": false}))
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn maps_every_attribute_to_a_ce_header_datacontenttype_included() {
        assert_eq!(
            herald_event().nats_binary_headers(),
            pairs(&[
                ("ce-specversion", "1.0"),
                ("ce-id", "9f1c-uid:1234:updated"),
                ("ce-source", "k8s://prod/example.com/widgets"),
                ("ce-type", "dev.herald.resource.updated"),
                ("ce-subject", "default/w%201"),
                ("ce-time", "2026-01-02T03:04:05.678Z"),
                ("ce-dataschema", "urn:herald:change:v1"),
                ("ce-partitionkey", "default/w%201"),
                ("ce-resync", "false"),
                ("ce-datacontenttype", "application/json"),
            ])
        );
    }

    #[test]
    fn percent_encodes_the_content_type_like_any_value() {
        let event = CloudEvent::new("1", "/s", "t")
            .datacontenttype("text/plain; charset=\"utf-8\"")
            .data(json!("x"));
        let headers = event.nats_binary_headers();
        assert!(headers.contains(&(
            "ce-datacontenttype".to_owned(),
            "text/plain;%20charset=%22utf-8%22".to_owned()
        )));
        let decoded = nats_binary_decode(headers, &event.data_bytes()).unwrap();
        assert_eq!(decoded, event);
    }

    #[test]
    fn no_data_no_content_type() {
        let event = CloudEvent::new("1", "/s", "t");
        assert!(
            event
                .nats_binary_headers()
                .iter()
                .all(|(n, _)| n != "ce-datacontenttype")
        );
    }

    #[test]
    fn round_trips() {
        let event = herald_event();
        let decoded = nats_binary_decode(event.nats_binary_headers(), &event.data_bytes()).unwrap();
        let mut expected = event;
        for value in expected.extensions.values_mut() {
            *value = ExtensionValue::String(value.to_string());
        }
        assert_eq!(decoded, expected);
    }

    #[test]
    fn ignores_content_type_and_matches_names_case_insensitively() {
        let headers = pairs(&[
            ("CE-SpecVersion", "1.0"),
            ("Ce-Id", "1"),
            ("ce-source", "%2Fs"),
            ("CE-TYPE", "t"),
            ("Content-Type", "text/plain"),
            ("CE-DataContentType", "application/json"),
            ("Nats-Msg-Id", "1"),
        ]);
        let event = nats_binary_decode(headers, br#"{"a":1}"#).unwrap();
        assert_eq!(
            event,
            CloudEvent::new("1", "/s", "t")
                .datacontenttype("application/json")
                .data(json!({"a": 1}))
        );
    }
}
