//! HTTP binary mode (`ce-` headers); start at [`CloudEvent::http_binary_headers`].

use std::borrow::Cow;
use std::fmt::Write as _;

use super::{BinaryParts, CONTENT_TYPE_HEADER, DecodeError, HTTP_HEADER_PREFIX};
use crate::event::CloudEvent;

impl CloudEvent {
    /// Headers for HTTP binary mode; the body is [`CloudEvent::data_bytes`].
    ///
    /// Every attribute except `datacontenttype` becomes `ce-<name>` (lower case) with its canonical
    /// string value (booleans `true`/`false`, integers in decimal), percent-encoded by
    /// [`encode_header_value`]. `datacontenttype` becomes `content-type` instead (never also
    /// `ce-datacontenttype`); when unset but `data` is present, `content-type` is
    /// `application/json`, the JSON format's implicit default made explicit. The content type is not
    /// percent-encoded: it is an ordinary HTTP header whose parameters may be quoted.
    ///
    /// NATS binary mode differs only there: see [`CloudEvent::nats_binary_headers`].
    #[must_use]
    pub fn http_binary_headers(&self) -> Vec<(String, String)> {
        let mut headers = self.ce_headers();
        if let Some(ct) = self.binary_content_type() {
            headers.push((CONTENT_TYPE_HEADER.to_owned(), ct.to_owned()));
        }
        headers
    }

    /// `ce-<name>` for every attribute but `datacontenttype`, its value percent-encoded: what the
    /// HTTP and NATS bindings share (they differ only in how the content type travels).
    pub(super) fn ce_headers(&self) -> Vec<(String, String)> {
        self.binary_attributes()
            .map(|(name, value)| {
                (
                    format!("{HTTP_HEADER_PREFIX}{name}"),
                    encode_header_value(&value).into_owned(),
                )
            })
            .collect()
    }
}

/// Percent-encodes a header value as the HTTP binding asks: space, `"`, `%` and every character
/// outside printable ASCII (U+0021–U+007E) become `%XY` per UTF-8 byte, upper-case hex. Returns the
/// input unchanged (borrowed) when nothing needs encoding, which is the common case.
///
/// Also used for herald's own `herald-error-*` dead-letter headers.
///
/// ```
/// use herald_sink_core::encode::encode_header_value;
///
/// assert_eq!(encode_header_value("default/my-app"), "default/my-app");
/// assert_eq!(encode_header_value("Euro € 100%"), "Euro%20%E2%82%AC%20100%25");
/// ```
#[must_use]
pub fn encode_header_value(value: &str) -> Cow<'_, str> {
    let needs_encoding = |b: u8| !(0x21..=0x7E).contains(&b) || b == b'"' || b == b'%';
    if !value.bytes().any(needs_encoding) {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len() + 16);
    for b in value.bytes() {
        if needs_encoding(b) {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        } else {
            out.push(char::from(b));
        }
    }
    Cow::Owned(out)
}

/// Decodes one `ce-` header value as the HTTP binding asks: first removes RFC 7230 double-quote
/// quoting (`"…"` with `\`-escapes), then percent-decodes exactly once, then requires UTF-8.
/// `attribute` only names the attribute in errors.
///
/// Characters that should have been encoded but were not (a bare space, say) are accepted as they
/// are; a `%` without two hex digits is not, since it cannot be decoded without guessing.
///
/// # Errors
///
/// [`DecodeError::InvalidPercentEncoding`] or [`DecodeError::InvalidUtf8`].
pub fn decode_header_value(attribute: &str, raw: &[u8]) -> Result<String, DecodeError> {
    let unquoted = unquote(raw);
    let mut bytes = Vec::with_capacity(unquoted.len());
    let mut i = 0;
    while let Some(&b) = unquoted.get(i) {
        if b == b'%' {
            let hex = |j: usize| unquoted.get(j).and_then(|c| char::from(*c).to_digit(16));
            let (Some(hi), Some(lo)) = (hex(i + 1), hex(i + 2)) else {
                return Err(DecodeError::InvalidPercentEncoding {
                    attribute: attribute.to_owned(),
                });
            };
            // Two hex digits are at most 0xFF, so the conversion cannot fail.
            bytes.push(u8::try_from(hi * 16 + lo).unwrap_or_default());
            i += 3;
        } else {
            bytes.push(b);
            i += 1;
        }
    }
    String::from_utf8(bytes).map_err(|_| DecodeError::InvalidUtf8 {
        attribute: attribute.to_owned(),
    })
}

/// Strips an RFC 7230 `quoted-string`; anything else is returned as is.
fn unquote(raw: &[u8]) -> Cow<'_, [u8]> {
    let [b'"', inner @ .., b'"'] = raw else {
        return Cow::Borrowed(raw);
    };
    let mut out = Vec::with_capacity(inner.len());
    let mut chars = inner.iter();
    while let Some(&c) = chars.next() {
        if c == b'\\' {
            if let Some(&escaped) = chars.next() {
                out.push(escaped);
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Reads an HTTP binary-mode message back into an event and validates it.
///
/// Header names match case-insensitively; headers other than `ce-*` and `content-type` are
/// ignored. `content-type` becomes `datacontenttype` as it is (not percent-decoded); the body is
/// parsed as JSON when that content type is JSON or absent, taken as text otherwise, and an empty
/// body means no `data`. Extensions come back as strings (the binding has no types).
///
/// `headers` takes any `(name, value)` pairs whose names are `str`-like and values byte-like, such
/// as `&http::HeaderMap` iterated, or the `Vec<(String, String)>` from
/// [`CloudEvent::http_binary_headers`].
///
/// ```
/// use herald_sink_core::{CloudEvent, ExtensionValue, encode};
///
/// let event = CloudEvent::new("1", "/s", "t").subject("a b").extension("resync", true);
/// let decoded = encode::http_binary_decode(event.http_binary_headers(), &event.data_bytes())?;
/// assert_eq!(decoded.subject.as_deref(), Some("a b"));
/// assert_eq!(decoded.extensions["resync"], ExtensionValue::String("true".into()));
/// # Ok::<(), encode::DecodeError>(())
/// ```
///
/// # Errors
///
/// [`DecodeError`] for a missing or duplicated attribute, a bad header value or body, or an event
/// that breaks a CloudEvents rule.
pub fn http_binary_decode<I, K, V>(headers: I, body: &[u8]) -> Result<CloudEvent, DecodeError>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<[u8]>,
{
    let mut parts = BinaryParts::default();
    for (name, value) in headers {
        let name = name.as_ref().to_ascii_lowercase();
        let value = value.as_ref();
        if name == CONTENT_TYPE_HEADER {
            let ct = std::str::from_utf8(value).map_err(|_| DecodeError::InvalidUtf8 {
                attribute: "datacontenttype".to_owned(),
            })?;
            parts.set("datacontenttype", ct.trim().to_owned())?;
        } else if let Some(attribute) = name.strip_prefix(HTTP_HEADER_PREFIX) {
            let decoded = decode_header_value(attribute, value)?;
            parts.set(attribute, decoded)?;
        }
    }
    parts.finish(body)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::event::ExtensionValue;

    fn herald_event() -> CloudEvent {
        CloudEvent::new(
            "9f1c-uid:1234:updated",
            "k8s://prod/example.com/widgets",
            "dev.herald.resource.updated",
        )
        .subject("default/w1")
        .time("2026-01-02T03:04:05.678Z")
        .datacontenttype("application/json")
        .dataschema("urn:herald:change:v1")
        .extension("partitionkey", "default/w1")
        .extension("resync", false)
        .extension("priority", -7)
        .data(json!({"op": "updated", "resync": false}))
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// Binary modes lose extension types; the round trip is exact up to that.
    fn with_string_extensions(mut event: CloudEvent) -> CloudEvent {
        for value in event.extensions.values_mut() {
            *value = ExtensionValue::String(value.to_string());
        }
        event
    }

    #[test]
    fn maps_every_attribute_to_a_ce_header() {
        assert_eq!(
            herald_event().http_binary_headers(),
            pairs(&[
                ("ce-specversion", "1.0"),
                ("ce-id", "9f1c-uid:1234:updated"),
                ("ce-source", "k8s://prod/example.com/widgets"),
                ("ce-type", "dev.herald.resource.updated"),
                ("ce-subject", "default/w1"),
                ("ce-time", "2026-01-02T03:04:05.678Z"),
                ("ce-dataschema", "urn:herald:change:v1"),
                ("ce-partitionkey", "default/w1"),
                ("ce-priority", "-7"),
                ("ce-resync", "false"),
                ("content-type", "application/json"),
            ])
        );
    }

    #[test]
    fn never_sends_ce_datacontenttype() {
        let headers = herald_event().http_binary_headers();
        assert!(headers.iter().all(|(name, _)| name != "ce-datacontenttype"));
    }

    #[test]
    fn makes_the_implicit_json_content_type_explicit() {
        let event = CloudEvent::new("1", "/s", "t").data(json!({}));
        assert!(
            event
                .http_binary_headers()
                .contains(&("content-type".to_owned(), "application/json".to_owned()))
        );
        let no_data = CloudEvent::new("1", "/s", "t");
        assert!(
            no_data
                .http_binary_headers()
                .iter()
                .all(|(n, _)| n != "content-type")
        );
    }

    #[test]
    fn percent_encodes_space_quote_percent_and_non_printable_ascii() {
        for (raw, encoded) in [
            (
                "plain-ASCII_~!#$&'()*+,/:;<=>?@[\\]^`{|}",
                "plain-ASCII_~!#$&'()*+,/:;<=>?@[\\]^`{|}",
            ),
            (" ", "%20"),
            ("\"", "%22"),
            ("%", "%25"),
            ("\t", "%09"),
            ("\u{7F}", "%7F"),
            ("é", "%C3%A9"),
            ("€", "%E2%82%AC"),
            ("😀", "%F0%9F%98%80"),
            (
                "ns/name with \"quotes\" 100%",
                "ns/name%20with%20%22quotes%22%20100%25",
            ),
        ] {
            assert_eq!(encode_header_value(raw), encoded, "{raw:?}");
        }
    }

    #[test]
    fn encodes_attribute_values_in_headers() {
        let event = CloudEvent::new("1", "/s", "t").subject("café au lait");
        let headers = event.http_binary_headers();
        assert!(headers.contains(&("ce-subject".to_owned(), "caf%C3%A9%20au%20lait".to_owned())));
    }

    #[test]
    fn round_trips_through_headers_and_body() {
        let awkward = CloudEvent::new("ü:1:created", "k8s://c/core/configmaps", "t")
            .subject("ns/\"q\" 100% %41 é")
            .extension("note", "  leading spaces and 😀");
        for event in [herald_event(), awkward, CloudEvent::new("1", "/s", "t")] {
            let decoded =
                http_binary_decode(event.http_binary_headers(), &event.data_bytes()).unwrap();
            assert_eq!(decoded, with_string_extensions(event));
        }
    }

    #[test]
    fn round_trip_sets_the_implicit_content_type() {
        let event = CloudEvent::new("1", "/s", "t").data(json!([1, 2]));
        let decoded = http_binary_decode(event.http_binary_headers(), &event.data_bytes()).unwrap();
        assert_eq!(decoded.datacontenttype.as_deref(), Some("application/json"));
        assert_eq!(decoded.data, event.data);
    }

    #[test]
    fn round_trips_text_data() {
        let event = CloudEvent::new("1", "/s", "t")
            .datacontenttype("text/plain; charset=\"utf-8\"")
            .data(json!("héllo"));
        let decoded = http_binary_decode(event.http_binary_headers(), &event.data_bytes()).unwrap();
        assert_eq!(decoded, event);
    }

    #[test]
    fn removes_double_quotes_then_decodes_exactly_once() {
        assert_eq!(decode_header_value("x", br#""a%20b""#).unwrap(), "a b");
        assert_eq!(decode_header_value("x", br#""a\"b""#).unwrap(), "a\"b");
        // %25 decodes to '%' and the result is not decoded again.
        assert_eq!(decode_header_value("x", b"%2541").unwrap(), "%41");
        assert_eq!(decode_header_value("x", br#""%2520""#).unwrap(), "%20");
        // A lone quote is not quoting.
        assert_eq!(decode_header_value("x", b"\"").unwrap(), "\"");
        assert_eq!(decode_header_value("x", b"%c3%a9").unwrap(), "é");
    }

    #[test]
    fn rejects_invalid_utf8_after_decoding() {
        for raw in [&b"%FF"[..], b"%C3", b"%C3%28", b"\xff"] {
            assert!(
                matches!(
                    decode_header_value("subject", raw),
                    Err(DecodeError::InvalidUtf8 { ref attribute }) if attribute == "subject"
                ),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn rejects_broken_percent_escapes() {
        for raw in [&b"%"[..], b"%4", b"%zz", b"100%"] {
            assert!(
                matches!(
                    decode_header_value("id", raw),
                    Err(DecodeError::InvalidPercentEncoding { .. })
                ),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn matches_header_names_case_insensitively_and_ignores_others() {
        let headers = pairs(&[
            ("CE-SpecVersion", "1.0"),
            ("Ce-Id", "1"),
            ("ce-source", "%2Fs"),
            ("CE-TYPE", "t"),
            ("Content-Type", "application/json"),
            ("Host", "example.com"),
            ("webhook-id", "1"),
        ]);
        let event = http_binary_decode(headers, br#"{"a":1}"#).unwrap();
        assert_eq!(
            event,
            CloudEvent::new("1", "/s", "t")
                .datacontenttype("application/json")
                .data(json!({"a": 1}))
        );
    }

    #[test]
    fn decode_rejects_missing_duplicate_and_invalid_attributes() {
        let base = [
            ("ce-specversion", "1.0"),
            ("ce-id", "1"),
            ("ce-source", "/s"),
            ("ce-type", "t"),
        ];
        let err = http_binary_decode(pairs(&base[1..]), b"").unwrap_err();
        assert!(matches!(
            err,
            DecodeError::MissingAttribute {
                attribute: "specversion"
            }
        ));
        let err = http_binary_decode(pairs(&base[..3]), b"").unwrap_err();
        assert!(matches!(
            err,
            DecodeError::MissingAttribute { attribute: "type" }
        ));
        let mut dup = base.to_vec();
        dup.push(("CE-ID", "2"));
        let err = http_binary_decode(pairs(&dup), b"").unwrap_err();
        assert!(
            matches!(err, DecodeError::DuplicateAttribute { ref attribute } if attribute == "id")
        );
        let mut both = base.to_vec();
        both.extend([
            ("content-type", "application/json"),
            ("ce-datacontenttype", "text/plain"),
        ]);
        let err = http_binary_decode(pairs(&both), b"").unwrap_err();
        assert!(matches!(err, DecodeError::DuplicateAttribute { .. }));
        let mut old = base.to_vec();
        old[0] = ("ce-specversion", "0.3");
        let err = http_binary_decode(pairs(&old), b"").unwrap_err();
        assert!(matches!(err, DecodeError::UnsupportedSpecVersion { .. }));
        // A control character is carried, percent-encoded (issue 14, item 4); what `content-type`
        // cannot carry is refused.
        let mut control = base.to_vec();
        control.push(("ce-subject", "a%0Ab"));
        let event = http_binary_decode(pairs(&control), b"").unwrap();
        assert_eq!(event.subject.as_deref(), Some("a\nb"));
        let mut bad_type = base.to_vec();
        bad_type.push(("content-type", "text/plain; x=\u{1}"));
        let err = http_binary_decode(pairs(&bad_type), b"").unwrap_err();
        assert!(matches!(err, DecodeError::Invalid(ref e) if e.attribute() == "datacontenttype"));
        let mut long = base.to_vec();
        long.push(("ce-averyveryverylongextension", "x"));
        let err = http_binary_decode(pairs(&long), b"").unwrap_err();
        assert!(matches!(err, DecodeError::Invalid(_)));
    }

    #[test]
    fn decode_reads_empty_body_as_no_data_and_rejects_bad_json() {
        let base = pairs(&[
            ("ce-specversion", "1.0"),
            ("ce-id", "1"),
            ("ce-source", "/s"),
            ("ce-type", "t"),
            ("content-type", "application/json"),
        ]);
        assert_eq!(http_binary_decode(base.clone(), b"").unwrap().data, None);
        assert_eq!(
            http_binary_decode(base.clone(), b"null").unwrap().data,
            Some(Value::Null)
        );
        assert!(matches!(
            http_binary_decode(base, b"{"),
            Err(DecodeError::InvalidData(_))
        ));
    }

    #[test]
    fn decode_accepts_byte_header_values() {
        let headers: Vec<(&str, &[u8])> = vec![
            ("ce-specversion", b"1.0"),
            ("ce-id", b"1"),
            ("ce-source", b"/s"),
            ("ce-type", b"t"),
            ("ce-subject", b"%E2%82%AC"),
        ];
        let event = http_binary_decode(headers, b"").unwrap();
        assert_eq!(event.subject.as_deref(), Some("€"));
    }
}
