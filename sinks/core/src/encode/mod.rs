//! CloudEvents bindings and their decoders; start at the table on [`CloudEvent`].

mod http;
mod kafka;
mod nats;
mod structured;

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::Value;

pub use http::{decode_header_value, encode_header_value, http_binary_decode};
pub use kafka::kafka_binary_decode;
pub use nats::nats_binary_decode;
pub use structured::{from_structured_json_batch, to_structured_json_batch};

use crate::event::{CloudEvent, ExtensionValue, SPEC_VERSION, ValidationError};

/// `Content-Type` of a structured-mode message (HTTP, Kafka and NATS alike).
pub const STRUCTURED_CONTENT_TYPE: &str = "application/cloudevents+json; charset=UTF-8";

/// `Content-Type` of a batched HTTP request; send it only when the receiver asked for batches.
pub const BATCH_CONTENT_TYPE: &str = "application/cloudevents-batch+json; charset=UTF-8";

/// `datacontenttype` assumed for JSON `data` when the event leaves it unset.
pub const JSON_CONTENT_TYPE: &str = "application/json";

/// Name of the content-type header in every binding (lower case; HTTP matches it case-insensitively).
pub const CONTENT_TYPE_HEADER: &str = "content-type";

/// Prefix of attribute headers in HTTP and NATS binary mode.
pub const HTTP_HEADER_PREFIX: &str = "ce-";

/// Prefix of attribute headers in Kafka binary mode.
pub const KAFKA_HEADER_PREFIX: &str = "ce_";

/// How a received message carries its event, told by its content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Attributes in headers, `data` as the body.
    Binary,
    /// The whole event as `application/cloudevents+json`.
    Structured,
    /// A JSON array of events (`application/cloudevents-batch+json`); HTTP only.
    Batch,
}

impl Mode {
    /// Picks the mode the way the HTTP, Kafka and NATS bindings do: a content type starting with
    /// `application/cloudevents-batch` is a batch, one starting with `application/cloudevents` is
    /// structured, anything else (or none) is binary. Matching ignores case, as 1.0.3-wip asks for
    /// Kafka and media types allow everywhere.
    #[must_use]
    pub fn from_content_type(content_type: Option<&str>) -> Self {
        let Some(ct) = content_type else {
            return Self::Binary;
        };
        let ct = ct.trim_start().to_ascii_lowercase();
        if ct.starts_with("application/cloudevents-batch") {
            Self::Batch
        } else if ct.starts_with("application/cloudevents") {
            Self::Structured
        } else {
            Self::Binary
        }
    }
}

/// Why a message could not be read as a [`CloudEvent`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The structured-mode payload is not JSON.
    #[error("event is not valid json")]
    InvalidJson(#[source] serde_json::Error),
    /// The structured-mode payload is JSON but not an object.
    #[error("event is not a json object")]
    NotAnObject,
    /// The batch payload is JSON but not an array.
    #[error("batch is not a json array")]
    NotAnArray,
    /// One event of a batch could not be decoded.
    #[error("batch event {index} could not be decoded")]
    BatchItem {
        /// Position of the event in the batch, from 0.
        index: usize,
        /// What was wrong with it.
        #[source]
        source: Box<DecodeError>,
    },
    /// A required attribute (`specversion`, `id`, `source`, `type`) is missing.
    #[error("required attribute `{attribute}` is missing")]
    MissingAttribute {
        /// The attribute's name.
        attribute: &'static str,
    },
    /// An attribute appears twice (two headers for it).
    #[error("attribute `{attribute}` appears more than once")]
    DuplicateAttribute {
        /// The attribute's name.
        attribute: String,
    },
    /// `specversion` is not `1.0`.
    #[error("unsupported specversion {found:?}")]
    UnsupportedSpecVersion {
        /// The value found.
        found: String,
    },
    /// A core attribute in the JSON format is not a string.
    #[error("attribute `{attribute}` is not a json string")]
    AttributeNotString {
        /// The attribute's name.
        attribute: &'static str,
    },
    /// An extension in the JSON format is not a string, boolean or 32-bit integer.
    #[error("extension `{name}` is not a string, boolean or 32-bit integer")]
    InvalidExtensionValue {
        /// The extension's name.
        name: String,
    },
    /// A header value has a `%` not followed by two hex digits.
    #[error("header for attribute `{attribute}` has an invalid percent-encoding")]
    InvalidPercentEncoding {
        /// The attribute (or header) concerned.
        attribute: String,
    },
    /// A header value is not UTF-8 (after percent-decoding, in HTTP).
    #[error("header for attribute `{attribute}` is not valid utf-8")]
    InvalidUtf8 {
        /// The attribute (or header) concerned.
        attribute: String,
    },
    /// The body is not JSON although the content type says it is.
    #[error("data is not valid json for its json content type")]
    InvalidData(#[source] serde_json::Error),
    /// With a non-JSON content type, structured `data` is not a JSON string.
    #[error("data must be a json string for a non-json datacontenttype")]
    DataNotString,
    /// Binary data (`data_base64`, or a non-UTF-8 body with a non-JSON content type); herald's
    /// event model carries JSON and text only.
    #[error("binary data is not supported")]
    BinaryDataUnsupported,
    /// Both `data` and `data_base64` are present, which the JSON format forbids.
    #[error("both data and data_base64 are present")]
    DataAndDataBase64,
    /// The decoded event breaks a CloudEvents rule.
    #[error("decoded event is invalid")]
    Invalid(#[source] ValidationError),
}

impl CloudEvent {
    /// The binary-mode body (HTTP body, Kafka value, NATS payload): the compact JSON serialization of
    /// `data` when it is JSON, the text itself for a string under a non-JSON content type, and empty
    /// when there is no `data`.
    ///
    /// An empty body reads back as "no data". On Kafka an empty value can be a tombstone on a
    /// compacted topic, which is why herald's reference-only events still carry a small `data`.
    #[must_use]
    pub fn data_bytes(&self) -> Vec<u8> {
        match &self.data {
            None => Vec::new(),
            Some(Value::String(text)) if !self.has_json_data() => text.as_bytes().to_vec(),
            // `to_vec` writes bytes directly (Display goes through `fmt::Write`, several times
            // slower); serializing a `Value` cannot fail, but if it did, Display is the same JSON.
            Some(value) => {
                serde_json::to_vec(value).unwrap_or_else(|_| value.to_string().into_bytes())
            }
        }
    }

    /// The content type a binary-mode message carries: `datacontenttype`, or
    /// [`JSON_CONTENT_TYPE`] when it is unset but `data` is present (the spec asks to make the JSON
    /// format's implicit default explicit when converting to another format).
    fn binary_content_type(&self) -> Option<&str> {
        match (&self.datacontenttype, &self.data) {
            (Some(ct), _) => Some(ct),
            (None, Some(_)) => Some(JSON_CONTENT_TYPE),
            (None, None) => None,
        }
    }

    /// `(name, canonical string value)` of every attribute a binary mode puts in `ce-`/`ce_` headers:
    /// all but `datacontenttype`, in a fixed order (core attributes, then extensions by name).
    fn binary_attributes(&self) -> impl Iterator<Item = (&str, Cow<'_, str>)> {
        let core = [
            ("specversion", Some(SPEC_VERSION)),
            ("id", Some(self.id.as_str())),
            ("source", Some(self.source.as_str())),
            ("type", Some(self.ty.as_str())),
            ("subject", self.subject.as_deref()),
            ("time", self.time.as_deref()),
            ("dataschema", self.dataschema.as_deref()),
        ];
        core.into_iter()
            .filter_map(|(name, value)| value.map(|v| (name, Cow::Borrowed(v))))
            .chain(self.extensions.iter().map(|(name, value)| {
                let text = match value {
                    ExtensionValue::String(s) => Cow::Borrowed(s.as_str()),
                    other => Cow::Owned(other.to_string()),
                };
                (name.as_str(), text)
            }))
    }
}

/// Attributes collected from binary-mode headers, before they become an event.
#[derive(Default)]
struct BinaryParts {
    specversion: Option<String>,
    id: Option<String>,
    source: Option<String>,
    ty: Option<String>,
    subject: Option<String>,
    time: Option<String>,
    datacontenttype: Option<String>,
    dataschema: Option<String>,
    extensions: BTreeMap<String, ExtensionValue>,
}

impl BinaryParts {
    /// Records attribute `name` (already lower case, prefix removed).
    fn set(&mut self, name: &str, value: String) -> Result<(), DecodeError> {
        let slot = match name {
            "specversion" => &mut self.specversion,
            "id" => &mut self.id,
            "source" => &mut self.source,
            "type" => &mut self.ty,
            "subject" => &mut self.subject,
            "time" => &mut self.time,
            "datacontenttype" => &mut self.datacontenttype,
            "dataschema" => &mut self.dataschema,
            _ => {
                if self
                    .extensions
                    .insert(name.to_owned(), ExtensionValue::String(value))
                    .is_some()
                {
                    return Err(DecodeError::DuplicateAttribute {
                        attribute: name.to_owned(),
                    });
                }
                return Ok(());
            }
        };
        if slot.replace(value).is_some() {
            return Err(DecodeError::DuplicateAttribute {
                attribute: name.to_owned(),
            });
        }
        Ok(())
    }

    fn finish(self, body: &[u8]) -> Result<CloudEvent, DecodeError> {
        let specversion = self.specversion.ok_or(DecodeError::MissingAttribute {
            attribute: "specversion",
        })?;
        if specversion != SPEC_VERSION {
            return Err(DecodeError::UnsupportedSpecVersion { found: specversion });
        }
        let mut event = CloudEvent {
            id: self
                .id
                .ok_or(DecodeError::MissingAttribute { attribute: "id" })?,
            source: self.source.ok_or(DecodeError::MissingAttribute {
                attribute: "source",
            })?,
            ty: self
                .ty
                .ok_or(DecodeError::MissingAttribute { attribute: "type" })?,
            subject: self.subject,
            time: self.time,
            datacontenttype: self.datacontenttype,
            dataschema: self.dataschema,
            extensions: self.extensions,
            data: None,
        };
        event.data = decode_body(&event, body)?;
        event.validate().map_err(DecodeError::Invalid)?;
        Ok(event)
    }
}

/// Reads a binary-mode body back into `data`, the inverse of [`CloudEvent::data_bytes`].
fn decode_body(event: &CloudEvent, body: &[u8]) -> Result<Option<Value>, DecodeError> {
    if body.is_empty() {
        return Ok(None);
    }
    if event.has_json_data() {
        return serde_json::from_slice(body)
            .map(Some)
            .map_err(DecodeError::InvalidData);
    }
    match std::str::from_utf8(body) {
        Ok(text) => Ok(Some(Value::String(text.to_owned()))),
        Err(_) => Err(DecodeError::BinaryDataUnsupported),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn detects_mode_from_content_type() {
        for (ct, mode) in [
            (None, Mode::Binary),
            (Some("application/json"), Mode::Binary),
            (Some("text/plain"), Mode::Binary),
            (
                Some("application/cloudevents+json; charset=UTF-8"),
                Mode::Structured,
            ),
            (Some("Application/CloudEvents+JSON"), Mode::Structured),
            (Some("application/cloudevents-batch+json"), Mode::Batch),
            (Some(STRUCTURED_CONTENT_TYPE), Mode::Structured),
            (Some(BATCH_CONTENT_TYPE), Mode::Batch),
        ] {
            assert_eq!(Mode::from_content_type(ct), mode, "{ct:?}");
        }
    }

    #[test]
    fn data_bytes_is_empty_without_data() {
        assert!(CloudEvent::new("1", "/s", "t").data_bytes().is_empty());
    }

    #[test]
    fn data_bytes_is_compact_json_for_json_data() {
        let event = CloudEvent::new("1", "/s", "t").data(json!({"op": "created", "n": [1, 2]}));
        assert_eq!(event.data_bytes(), br#"{"op":"created","n":[1,2]}"#);
        let event = CloudEvent::new("1", "/s", "t").data(json!("text"));
        assert_eq!(event.data_bytes(), br#""text""#);
        let event = CloudEvent::new("1", "/s", "t").data(Value::Null);
        assert_eq!(event.data_bytes(), b"null");
    }

    #[test]
    fn data_bytes_is_raw_text_for_text_content_types() {
        let event = CloudEvent::new("1", "/s", "t")
            .datacontenttype("text/plain; charset=utf-8")
            .data(json!("héllo \"world\""));
        assert_eq!(event.data_bytes(), "héllo \"world\"".as_bytes());
    }

    #[test]
    fn body_decoding_inverts_data_bytes() {
        for event in [
            CloudEvent::new("1", "/s", "t").data(json!({"a": [1, {"b": null}]})),
            CloudEvent::new("1", "/s", "t").data(json!("just a string")),
            CloudEvent::new("1", "/s", "t").data(Value::Null),
            CloudEvent::new("1", "/s", "t")
                .datacontenttype("text/plain")
                .data(json!("plain text")),
            CloudEvent::new("1", "/s", "t"),
        ] {
            assert_eq!(
                decode_body(&event, &event.data_bytes()).unwrap(),
                event.data
            );
        }
    }

    #[test]
    fn body_decoding_rejects_bad_json_and_binary() {
        let json = CloudEvent::new("1", "/s", "t").datacontenttype("application/json");
        assert!(matches!(
            decode_body(&json, b"{nope"),
            Err(DecodeError::InvalidData(_))
        ));
        let bytes = CloudEvent::new("1", "/s", "t").datacontenttype("application/octet-stream");
        assert!(matches!(
            decode_body(&bytes, &[0xff, 0x00]),
            Err(DecodeError::BinaryDataUnsupported)
        ));
    }
}
