//! The JSON event format and its batch form; start at [`CloudEvent::to_structured_json`].

use serde::de::Error as _;
use serde::ser::SerializeMap as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::DecodeError;
use crate::event::{CloudEvent, ExtensionValue, SPEC_VERSION};

impl CloudEvent {
    /// The event in the JSON format (`application/cloudevents+json`, see
    /// [`STRUCTURED_CONTENT_TYPE`](super::STRUCTURED_CONTENT_TYPE)).
    ///
    /// Every attribute is a top-level member, in the order `specversion`, `id`, `source`, `type`,
    /// `subject`, `time`, `datacontenttype`, `dataschema`, extensions by name, `data`. Unset optional
    /// attributes are left out. Extensions keep their JSON type (`"resync": false`). With a JSON (or
    /// no) `datacontenttype`, `data` is the JSON value itself, never a string holding JSON, and
    /// `Some(Null)` is written as `"data": null`; with any other content type `data` is a string.
    #[must_use]
    pub fn to_structured_json(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_structured_json(&mut out);
        out
    }

    /// Reads an event in the JSON format and validates it.
    ///
    /// `null` members count as unset (except `data`, where `null` is a value); unknown members are
    /// extensions and must be strings, booleans or 32-bit integers. A string `data` under a JSON
    /// content type stays a JSON string: it is not parsed again.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] when the bytes are not a JSON object or the event breaks a rule.
    pub fn from_structured_json(bytes: &[u8]) -> Result<Self, DecodeError> {
        let value: Value = serde_json::from_slice(bytes).map_err(DecodeError::InvalidJson)?;
        Self::from_json_value(value)
    }

    /// Like [`CloudEvent::from_structured_json`], from an already parsed JSON value.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] when the value is not an object or the event breaks a rule.
    pub fn from_json_value(value: Value) -> Result<Self, DecodeError> {
        let Value::Object(mut map) = value else {
            return Err(DecodeError::NotAnObject);
        };
        let specversion =
            take_string(&mut map, "specversion")?.ok_or(DecodeError::MissingAttribute {
                attribute: "specversion",
            })?;
        if specversion != SPEC_VERSION {
            return Err(DecodeError::UnsupportedSpecVersion { found: specversion });
        }
        let id = take_string(&mut map, "id")?
            .ok_or(DecodeError::MissingAttribute { attribute: "id" })?;
        let source = take_string(&mut map, "source")?.ok_or(DecodeError::MissingAttribute {
            attribute: "source",
        })?;
        let ty = take_string(&mut map, "type")?
            .ok_or(DecodeError::MissingAttribute { attribute: "type" })?;
        let mut event = CloudEvent::new(id, source, ty);
        event.subject = take_string(&mut map, "subject")?;
        event.time = take_string(&mut map, "time")?;
        event.datacontenttype = take_string(&mut map, "datacontenttype")?;
        event.dataschema = take_string(&mut map, "dataschema")?;

        let data = map.remove("data");
        let data_base64 = map.remove("data_base64").filter(|v| !v.is_null());
        event.data = match (data, data_base64) {
            (Some(_), Some(_)) => return Err(DecodeError::DataAndDataBase64),
            (None, Some(_)) => return Err(DecodeError::BinaryDataUnsupported),
            (Some(data), None) if event.has_json_data() => Some(data),
            // Outside JSON `null` can only mean "unset", as for any other attribute.
            (None | Some(Value::Null), None) => None,
            (Some(text @ Value::String(_)), None) => Some(text),
            (Some(_), None) => return Err(DecodeError::DataNotString),
        };

        for (name, value) in map {
            let value = match value {
                Value::Null => continue,
                Value::String(s) => ExtensionValue::String(s),
                Value::Bool(b) => ExtensionValue::Bool(b),
                Value::Number(n) => match n.as_i64().and_then(|i| i32::try_from(i).ok()) {
                    Some(i) => ExtensionValue::Integer(i),
                    None => return Err(DecodeError::InvalidExtensionValue { name }),
                },
                Value::Array(_) | Value::Object(_) => {
                    return Err(DecodeError::InvalidExtensionValue { name });
                }
            };
            event.extensions.insert(name, value);
        }
        event.validate().map_err(DecodeError::Invalid)?;
        Ok(event)
    }

    fn write_structured_json(&self, out: &mut Vec<u8>) {
        // Cannot fail: every map key is a string, `serde_json::Value` numbers are always finite,
        // and writing into a Vec has no I/O error. A panic here would be a serde_json bug.
        if let Err(error) = serde_json::to_writer(out, self) {
            unreachable!("serializing a CloudEvent to JSON failed: {error}");
        }
    }
}

/// The event as the JSON format's object (what [`CloudEvent::to_structured_json`] writes), so it
/// can be embedded in other serde documents such as dead-letter records.
impl Serialize for CloudEvent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("specversion", SPEC_VERSION)?;
        map.serialize_entry("id", &self.id)?;
        map.serialize_entry("source", &self.source)?;
        map.serialize_entry("type", &self.ty)?;
        for (name, value) in [
            ("subject", &self.subject),
            ("time", &self.time),
            ("datacontenttype", &self.datacontenttype),
            ("dataschema", &self.dataschema),
        ] {
            if let Some(value) = value {
                map.serialize_entry(name, value)?;
            }
        }
        for (name, value) in &self.extensions {
            map.serialize_entry(name, value)?;
        }
        match &self.data {
            None => {}
            Some(data) if self.has_json_data() || data.is_string() => {
                map.serialize_entry("data", data)?;
            }
            // Only an event that fails `validate` gets here; writing its JSON text as the string
            // keeps the output a well-formed JSON-format event instead of failing.
            Some(data) => map.serialize_entry("data", &data.to_string())?,
        }
        map.end()
    }
}

/// Reads the JSON format's object, with the rules of [`CloudEvent::from_structured_json`].
impl<'de> Deserialize<'de> for CloudEvent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Self::from_json_value(value).map_err(D::Error::custom)
    }
}

/// Removes `name` from `map` as an optional string attribute (`null` = unset).
fn take_string(
    map: &mut Map<String, Value>,
    name: &'static str,
) -> Result<Option<String>, DecodeError> {
    match map.remove(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(DecodeError::AttributeNotString { attribute: name }),
    }
}

/// `events` as an `application/cloudevents-batch+json` body (see
/// [`BATCH_CONTENT_TYPE`](super::BATCH_CONTENT_TYPE)): a JSON array of JSON-format events, `[]` when
/// empty. The HTTP binding allows it only when the receiver asked for batches.
///
/// ```
/// use herald_sink_core::{CloudEvent, encode};
///
/// let events = [CloudEvent::new("1", "/s", "t"), CloudEvent::new("2", "/s", "t")];
/// let body = encode::to_structured_json_batch(&events);
/// assert_eq!(encode::from_structured_json_batch(&body)?, events);
/// # Ok::<(), encode::DecodeError>(())
/// ```
#[must_use]
pub fn to_structured_json_batch<'a>(events: impl IntoIterator<Item = &'a CloudEvent>) -> Vec<u8> {
    let mut out = vec![b'['];
    for (index, event) in events.into_iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        event.write_structured_json(&mut out);
    }
    out.push(b']');
    out
}

/// Reads an `application/cloudevents-batch+json` body.
///
/// # Errors
///
/// [`DecodeError::NotAnArray`], or [`DecodeError::BatchItem`] with the index of the first event
/// that does not decode.
pub fn from_structured_json_batch(bytes: &[u8]) -> Result<Vec<CloudEvent>, DecodeError> {
    let value: Value = serde_json::from_slice(bytes).map_err(DecodeError::InvalidJson)?;
    let Value::Array(items) = value else {
        return Err(DecodeError::NotAnArray);
    };
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| {
            CloudEvent::from_json_value(item).map_err(|source| DecodeError::BatchItem {
                index,
                source: Box::new(source),
            })
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::ValidationError;

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
        .extension("k8skind", "Widget")
        .extension("partitionkey", "default/w1")
        .extension("resync", true)
        .extension("priority", 7)
        .data(json!({"op": "updated", "object": {"spec": {"replicas": 3}}, "resync": true}))
    }

    fn parse(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn writes_every_attribute_as_a_top_level_member() {
        let json = parse(&herald_event().to_structured_json());
        assert_eq!(
            json,
            json!({
                "specversion": "1.0",
                "id": "9f1c-uid:1234:updated",
                "source": "k8s://prod/example.com/widgets",
                "type": "dev.herald.resource.updated",
                "subject": "default/w1",
                "time": "2026-01-02T03:04:05.678Z",
                "datacontenttype": "application/json",
                "dataschema": "urn:herald:change:v1",
                "k8skind": "Widget",
                "partitionkey": "default/w1",
                "priority": 7,
                "resync": true,
                "data": {"op": "updated", "object": {"spec": {"replicas": 3}}, "resync": true}
            })
        );
    }

    #[test]
    fn writes_members_in_a_stable_order() {
        let json = parse(&herald_event().to_structured_json());
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "specversion",
                "id",
                "source",
                "type",
                "subject",
                "time",
                "datacontenttype",
                "dataschema",
                "k8skind",
                "partitionkey",
                "priority",
                "resync",
                "data"
            ]
        );
    }

    #[test]
    fn keeps_extension_types() {
        let json = parse(&herald_event().to_structured_json());
        assert_eq!(json["resync"], Value::Bool(true));
        assert_eq!(json["priority"], json!(7));
        assert_eq!(json["k8skind"], json!("Widget"));
    }

    #[test]
    fn leaves_out_unset_attributes_and_absent_data() {
        let json = parse(&CloudEvent::new("1", "/s", "t").to_structured_json());
        assert_eq!(
            json,
            json!({"specversion": "1.0", "id": "1", "source": "/s", "type": "t"})
        );
    }

    #[test]
    fn writes_json_data_inline_when_content_type_is_absent_or_json() {
        for ct in [
            None,
            Some("application/json"),
            Some("application/vnd.x+json"),
        ] {
            let mut event = CloudEvent::new("1", "/s", "t").data(json!({"a": 1}));
            event.datacontenttype = ct.map(str::to_owned);
            assert_eq!(
                parse(&event.to_structured_json())["data"],
                json!({"a": 1}),
                "{ct:?}"
            );
        }
    }

    #[test]
    fn writes_null_data_distinct_from_absent_data() {
        let with_null = CloudEvent::new("1", "/s", "t").data(Value::Null);
        let json = parse(&with_null.to_structured_json());
        assert_eq!(json.get("data"), Some(&Value::Null));
        let decoded = CloudEvent::from_structured_json(&with_null.to_structured_json()).unwrap();
        assert_eq!(decoded.data, Some(Value::Null));
        let without = CloudEvent::new("1", "/s", "t");
        let decoded = CloudEvent::from_structured_json(&without.to_structured_json()).unwrap();
        assert_eq!(decoded.data, None);
    }

    #[test]
    fn writes_text_data_as_a_string_for_other_content_types() {
        let event = CloudEvent::new("1", "/s", "t")
            .datacontenttype("text/plain")
            .data(json!("hello"));
        assert_eq!(parse(&event.to_structured_json())["data"], json!("hello"));
        // An invalid event (object data under text/plain) still yields a well-formed JSON event.
        let invalid = CloudEvent::new("1", "/s", "t")
            .datacontenttype("text/plain")
            .data(json!({"a": 1}));
        assert_eq!(
            parse(&invalid.to_structured_json())["data"],
            json!(r#"{"a":1}"#)
        );
    }

    #[test]
    fn round_trips() {
        for event in [
            herald_event(),
            CloudEvent::new("1", "/s", "t"),
            CloudEvent::new("ü", "urn:x", "t")
                .subject("ns/\"quoted\" %41 name")
                .datacontenttype("text/plain")
                .data(json!("text")),
        ] {
            let decoded = CloudEvent::from_structured_json(&event.to_structured_json()).unwrap();
            assert_eq!(decoded, event);
        }
    }

    #[test]
    fn does_not_parse_string_data_again() {
        let bytes = br#"{"specversion":"1.0","id":"1","source":"/s","type":"t",
            "datacontenttype":"application/json","data":"{\"a\":1}"}"#;
        let event = CloudEvent::from_structured_json(bytes).unwrap();
        assert_eq!(event.data, Some(json!(r#"{"a":1}"#)));
    }

    #[test]
    fn reads_null_attributes_as_unset() {
        let bytes = br#"{"specversion":"1.0","id":"1","source":"/s","type":"t",
            "subject":null,"time":null,"k8sname":null}"#;
        let event = CloudEvent::from_structured_json(bytes).unwrap();
        assert_eq!(event, CloudEvent::new("1", "/s", "t"));
    }

    #[test]
    fn reads_typed_extensions() {
        let bytes = br#"{"specversion":"1.0","id":"1","source":"/s","type":"t",
            "resync":false,"count":-3,"name":"x"}"#;
        let event = CloudEvent::from_structured_json(bytes).unwrap();
        assert_eq!(event.extensions["resync"], ExtensionValue::Bool(false));
        assert_eq!(event.extensions["count"], ExtensionValue::Integer(-3));
        assert_eq!(event.extensions["name"], ExtensionValue::String("x".into()));
    }

    #[test]
    fn rejects_malformed_events() {
        type Expect = fn(&DecodeError) -> bool;
        let cases: [(&[u8], Expect); 13] = [
            (b"not json", |e| matches!(e, DecodeError::InvalidJson(_))),
            (b"[1]", |e| matches!(e, DecodeError::NotAnObject)),
            (br#"{"id":"1","source":"/s","type":"t"}"#, |e| {
                matches!(e, DecodeError::MissingAttribute { attribute: "specversion" })
            }),
            (br#"{"specversion":"0.3","id":"1","source":"/s","type":"t"}"#, |e| {
                matches!(e, DecodeError::UnsupportedSpecVersion { found } if found == "0.3")
            }),
            (br#"{"specversion":"1.0","source":"/s","type":"t"}"#, |e| {
                matches!(e, DecodeError::MissingAttribute { attribute: "id" })
            }),
            (br#"{"specversion":"1.0","id":"1","type":"t"}"#, |e| {
                matches!(e, DecodeError::MissingAttribute { attribute: "source" })
            }),
            (br#"{"specversion":"1.0","id":1,"source":"/s","type":"t"}"#, |e| {
                matches!(e, DecodeError::AttributeNotString { attribute: "id" })
            }),
            (br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","x":1.5}"#, |e| {
                matches!(e, DecodeError::InvalidExtensionValue { name } if name == "x")
            }),
            (br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","x":2147483648}"#, |e| {
                matches!(e, DecodeError::InvalidExtensionValue { name } if name == "x")
            }),
            (br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","x":{"a":1}}"#, |e| {
                matches!(e, DecodeError::InvalidExtensionValue { name } if name == "x")
            }),
            (br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data_base64":"AQI="}"#, |e| {
                matches!(e, DecodeError::BinaryDataUnsupported)
            }),
            (
                br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":1,"data_base64":"AQI="}"#,
                |e| matches!(e, DecodeError::DataAndDataBase64),
            ),
            (
                br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"text/plain","data":{}}"#,
                |e| matches!(e, DecodeError::DataNotString),
            ),
        ];
        for (bytes, expected) in cases {
            let err = CloudEvent::from_structured_json(bytes).unwrap_err();
            assert!(
                expected(&err),
                "{}: {err:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    #[test]
    fn validates_what_it_decodes() {
        for (bytes, attribute) in [
            (
                &br#"{"specversion":"1.0","id":"","source":"/s","type":"t"}"#[..],
                "id",
            ),
            (
                br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","BadName":"x"}"#,
                "BadName",
            ),
            (
                br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","time":"noon"}"#,
                "time",
            ),
            (
                br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"a/b;\u0007"}"#,
                "datacontenttype",
            ),
        ] {
            match CloudEvent::from_structured_json(bytes) {
                Err(DecodeError::Invalid(err)) => assert_eq!(err.attribute(), attribute),
                other => panic!("{}: {other:?}", String::from_utf8_lossy(bytes)),
            }
        }
    }

    /// Regression (tests/properties): numbers in `data` read back to the same bits; `serde_json`'s
    /// default parser was one ULP off for these, so a journaled object drifted from the observed one.
    #[test]
    fn floats_read_back_exactly() {
        for x in [8.745_658_093_575_307e-268_f64, 6.242_884_863_818_042e218] {
            let event = CloudEvent::new("1", "/s", "t").data(json!([{"x": x}]));
            let back = CloudEvent::from_structured_json(&event.to_structured_json()).unwrap();
            assert_eq!(back, event);
            assert_eq!(
                back.data.unwrap()[0]["x"].as_f64().unwrap().to_bits(),
                x.to_bits()
            );
        }
    }

    /// A name holding control characters survives the JSON format, escaped (issue 14, item 4).
    #[test]
    fn carries_control_characters_escaped() {
        let event = CloudEvent::new("u:1:created", "/s", "t")
            .subject("ns/a\nb\u{0}c\u{7F}")
            .extension("k8sname", "a\nb\u{0}c\u{7F}");
        let bytes = event.to_structured_json();
        assert!(!bytes.contains(&b'\n') && !bytes.contains(&0), "{bytes:?}");
        assert_eq!(CloudEvent::from_structured_json(&bytes).unwrap(), event);
    }

    #[test]
    fn error_names_the_invalid_attribute_in_its_source() {
        let err = CloudEvent::from_structured_json(
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":1,"data_base64":null}"#,
        );
        assert!(err.is_ok(), "a null data_base64 is unset: {err:?}");
        let err = CloudEvent::from_structured_json(
            br#"{"specversion":"1.0","id":"1","source":"/s","type":""}"#,
        )
        .unwrap_err();
        let source = std::error::Error::source(&err).unwrap();
        assert_eq!(source.to_string(), "attribute `type` is empty");
        assert!(matches!(
            err,
            DecodeError::Invalid(ValidationError::EmptyAttribute { .. })
        ));
    }

    #[test]
    fn batch_is_a_json_array_of_events() {
        let events = vec![herald_event(), CloudEvent::new("2", "/s", "t")];
        let body = to_structured_json_batch(&events);
        let json = parse(&body);
        assert_eq!(json.as_array().unwrap().len(), 2);
        assert_eq!(json[0], parse(&herald_event().to_structured_json()));
        assert_eq!(from_structured_json_batch(&body).unwrap(), events);
    }

    #[test]
    fn empty_batch_is_an_empty_array() {
        let body = to_structured_json_batch(&[]);
        assert_eq!(body, b"[]");
        assert!(from_structured_json_batch(&body).unwrap().is_empty());
    }

    #[test]
    fn batch_error_names_the_bad_event() {
        let body =
            br#"[{"specversion":"1.0","id":"1","source":"/s","type":"t"},{"specversion":"1.0"}]"#;
        match from_structured_json_batch(body) {
            Err(DecodeError::BatchItem { index: 1, source }) => {
                assert!(matches!(
                    *source,
                    DecodeError::MissingAttribute { attribute: "id" }
                ));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            from_structured_json_batch(br#"{"specversion":"1.0"}"#),
            Err(DecodeError::NotAnArray)
        ));
    }

    #[test]
    fn serde_impls_match_the_json_format() {
        let event = herald_event();
        assert_eq!(
            serde_json::to_vec(&event).unwrap(),
            event.to_structured_json()
        );
        let back: CloudEvent = serde_json::from_slice(&event.to_structured_json()).unwrap();
        assert_eq!(back, event);
        let wrapped = json!({"sink": "kafka", "event": event});
        let back: CloudEvent = serde_json::from_value(wrapped["event"].clone()).unwrap();
        assert_eq!(back, herald_event());
        let bad: Result<CloudEvent, _> = serde_json::from_str(r#"{"specversion":"1.0"}"#);
        assert!(
            bad.unwrap_err()
                .to_string()
                .contains("required attribute `id` is missing")
        );
    }
}
