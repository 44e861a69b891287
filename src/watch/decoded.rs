//! A watched object decoded into a [`Value`] and, in the same pass, into the bytes
//! `serde_json::to_vec` writes for that value: the recorder stores those bytes in the object index
//! and carries them as the event's `data.object`, and serializing every object again after parsing
//! it was a twentieth of herald's CPU in a catch-up. The bytes are written from the parsed tokens
//! (strings escaped and numbers formatted as serde_json writes them), never copied from the line:
//! the API server's own escaping (Go escapes `<`, `>`, `&`) and number spellings may differ.
//!
//! Unless the resource keeps them, `metadata.managedFields` are skipped while the line is parsed
//! instead of being built into a [`Value`] and dropped by [`event::prepare`](crate::event::prepare)
//! (a real API server's objects carry them, often larger than the rest of the object). The value
//! is then what `prepare` would leave: every other member where the server sent it, `metadata`'s
//! order kept (`prepare` removes with `shift_remove`).

use std::fmt;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::event::write_escaped;

/// An object decoded with its serialized form; `metadata.managedFields` left out when `STRIP`.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded<const STRIP: bool> {
    /// The object, members in the server's order.
    pub value: Value,
    /// `serde_json::to_vec(&value)`; `None` when the object repeated a member (the value keeps one
    /// of them, the bytes would hold both).
    pub json: Option<Vec<u8>>,
}

/// An object decoded with `metadata.managedFields` left out (for resources that do not keep it).
pub type Stripped = Decoded<true>;
/// An object decoded whole (for resources that keep `metadata.managedFields`).
pub type Whole = Decoded<false>;

impl<'de, const STRIP: bool> Deserialize<'de> for Decoded<STRIP> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut out = Vec::with_capacity(512);
        let mut exact = true;
        let value = deserializer.deserialize_any(Tee {
            out: &mut out,
            exact: &mut exact,
            level: Level::Top,
            strip: STRIP,
        })?;
        Ok(Self {
            value,
            json: exact.then_some(out),
        })
    }
}

/// Where the visitor is: the object itself, its `metadata`, or anywhere else.
#[derive(Clone, Copy)]
enum Level {
    Top,
    Metadata,
    Inner,
}

/// Builds the [`Value`] as serde_json 1.0's `ValueVisitor` does and writes its compact JSON to
/// `out` as it goes; `exact` turns false when the bytes cannot be the value's.
struct Tee<'b> {
    out: &'b mut Vec<u8>,
    exact: &'b mut bool,
    level: Level,
    strip: bool,
}

impl Tee<'_> {
    fn child(&mut self, level: Level) -> Tee<'_> {
        Tee {
            out: &mut *self.out,
            exact: &mut *self.exact,
            level,
            strip: self.strip,
        }
    }

    fn number(self, n: Number) -> Value {
        if serde_json::to_writer(&mut *self.out, &n).is_err() {
            *self.exact = false;
        }
        Value::Number(n)
    }

    fn string(self, s: String) -> Value {
        self.out.push(b'"');
        write_escaped(self.out, &s);
        self.out.push(b'"');
        Value::String(s)
    }
}

impl<'de> DeserializeSeed<'de> for Tee<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Tee<'_> {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(self.number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(self.number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(match Number::from_f64(v) {
            Some(n) => self.number(n),
            None => self.visit_unit_value(),
        })
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(self.string(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(self.string(v))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(self.visit_unit_value())
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(self.visit_unit_value())
    }

    fn visit_seq<A: de::SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        self.out.push(b'[');
        loop {
            // The separator goes in before the element is known to exist; taken back at the end.
            let mark = self.out.len();
            if !items.is_empty() {
                self.out.push(b',');
            }
            match seq.next_element_seed(self.child(Level::Inner))? {
                Some(item) => items.push(item),
                None => {
                    self.out.truncate(mark);
                    break;
                }
            }
        }
        self.out.push(b']');
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
        // The object and its `metadata` hold several members each: room for them at once rather
        // than a map grown (and its index rehashed) as they arrive.
        let mut members = match self.level {
            Level::Top | Level::Metadata => Map::with_capacity(8),
            Level::Inner => Map::new(),
        };
        self.out.push(b'{');
        while let Some(key) = map.next_key::<String>()? {
            let level = match (self.level, key.as_str()) {
                (Level::Top, "metadata") => Level::Metadata,
                (Level::Metadata, "managedFields") if self.strip => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
                _ => Level::Inner,
            };
            if !members.is_empty() {
                self.out.push(b',');
            }
            self.out.push(b'"');
            write_escaped(self.out, &key);
            self.out.extend_from_slice(b"\":");
            let value = map.next_value_seed(self.child(level))?;
            // A repeated member replaces the first one's value in its place, as `Value` does; the
            // bytes hold both.
            if members.insert(key, value).is_some() {
                *self.exact = false;
            }
        }
        self.out.push(b'}');
        Ok(Value::Object(members))
    }
}

impl Tee<'_> {
    fn visit_unit_value(self) -> Value {
        self.out.extend_from_slice(b"null");
        Value::Null
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::event;

    fn resource() -> event::Resource {
        event::Resource {
            cluster: "c".into(),
            group: "example.com".into(),
            version: "v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
            namespaced: true,
            type_prefix: event::DEFAULT_TYPE_PREFIX.into(),
            payload: event::Payload::DEFAULT,
            redact: Vec::new(),
            keep_managed_fields: false,
        }
    }

    /// The decoded object is what decoding it whole and `prepare` leave, member for member and in
    /// the same order (serialized byte for byte), wherever `managedFields` sits.
    #[test]
    fn skipping_managed_fields_while_parsing_equals_parsing_and_preparing() {
        let managed = r#"[{"manager":"kubectl","operation":"Apply","apiVersion":"v1","time":"2024-01-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:a":{}}}}]"#;
        let texts = [
            format!(
                r#"{{"apiVersion":"v1","kind":"W","metadata":{{"managedFields":{managed},"name":"a","namespace":"n","uid":"u","resourceVersion":"1"}},"spec":{{"a":1}}}}"#
            ),
            format!(
                r#"{{"apiVersion":"v1","kind":"W","metadata":{{"name":"a","namespace":"n","managedFields":{managed},"uid":"u","resourceVersion":"1","labels":{{"x":"y"}}}},"spec":{{"a":1}}}}"#
            ),
            format!(
                r#"{{"apiVersion":"v1","kind":"W","metadata":{{"name":"a","namespace":"n","uid":"u","resourceVersion":"1","managedFields":{managed}}},"spec":{{"a":1}}}}"#
            ),
            r#"{"apiVersion":"v1","kind":"W","metadata":{"name":"a","namespace":"n","uid":"u","resourceVersion":"1"},"spec":{"a":1.5,"b":[1,-2,null,true,"s"],"managedFields":[1]}}"#.to_owned(),
            format!(
                r#"{{"metadata":{{"managedFields":{managed}}},"spec":{{"metadata":{{"managedFields":{managed}}}}}}}"#
            ),
            format!(r#"{{"spec":{{}},"metadata":{{"a":1,"managedFields":{managed},"a":2}}}}"#),
            r#"{"metadata":{},"spec":null}"#.to_owned(),
            r#"{"metadata":null}"#.to_owned(),
            r#"{"metadata":"text","managedFields":[]}"#.to_owned(),
            r#"{"metadata":[{"managedFields":[]}]}"#.to_owned(),
            r#"{}"#.to_owned(),
            r#""text""#.to_owned(),
            r#"[1,{"metadata":{"managedFields":[]}}]"#.to_owned(),
            r#"12345678901234567890"#.to_owned(),
            r#"-1.25e-3"#.to_owned(),
        ];
        for text in &texts {
            let whole: Value = serde_json::from_str(text).unwrap();
            let prepared = event::prepare(&resource(), whole);
            let Stripped {
                value: stripped,
                json,
            } = serde_json::from_str(text).unwrap();
            assert_eq!(stripped, prepared, "{text}");
            // None for the one that repeats a member (see the test below).
            let exact = serde_json::to_vec(&stripped).unwrap();
            assert!(json.is_none_or(|json| json == exact), "{text}");
            assert_eq!(
                serde_json::to_string(&stripped).unwrap(),
                serde_json::to_string(&prepared).unwrap(),
                "{text}"
            );
            assert!(
                stripped.pointer("/metadata/managedFields").is_none(),
                "{text}"
            );
        }
        // The managed fields really were there to strip in the first three.
        for text in &texts[..3] {
            let whole: Value = serde_json::from_str(text).unwrap();
            assert!(whole.pointer("/metadata/managedFields").is_some());
        }
        // What does not parse as a value does not parse either way.
        for text in [r#"{"metadata":{"managedFields":[}}"#, r#"{"metadata":"#, ""] {
            assert!(serde_json::from_str::<Value>(text).is_err());
            assert!(serde_json::from_str::<Stripped>(text).is_err(), "{text}");
        }
    }

    /// The bytes written while parsing are `serde_json::to_vec` of the value for whatever the line
    /// holds: the server's escapes (Go writes `\u003c` for `<`), escapes of control characters
    /// and non-ASCII text, numbers of every spelling (exponents, big integers, `-0`), empty and
    /// nested containers; with managedFields kept (`Whole`) or skipped.
    #[test]
    fn the_bytes_written_while_parsing_are_the_values_serialization() {
        let texts = [
            r#"{"metadata":{"name":"a\u003cb\u003e\u0026","uid":"\ud83d\ude00 é \u0001\u001f\u007f \"\\\/ \b\f\n\r\t"},"spec":{"a":1}}"#,
            r#"{"metadata":{"managedFields":[{"m":1}],"name":"x"},"n":[0,-0,1.0,1e3,-1.5E-7,12345678901234567890,123456789012345678901234,-9223372036854775808,0.1,1.7976931348623157e308]}"#,
            r#"{"metadata":{},"a":[],"b":{},"c":[[],[{}],{"d":[null,true,false]}],"e":"","f":null}"#,
            r#" { "metadata" : { "name" : "spaced" } , "spec" : [ 1 , 2 ] } "#,
            r#"{"metadata":"text"}"#,
            r#""text""#,
            r#"[1,{"metadata":{"managedFields":[]}}]"#,
            r#"-1.25e-3"#,
            r#"null"#,
        ];
        for text in texts {
            let whole: Value = serde_json::from_str(text).unwrap();
            let Whole { value, json } = serde_json::from_str(text).unwrap();
            assert_eq!(value, whole, "{text}");
            assert_eq!(json, Some(serde_json::to_vec(&whole).unwrap()), "{text}");
            let Stripped { value, json } = serde_json::from_str(text).unwrap();
            assert_eq!(value, event::prepare(&resource(), whole), "{text}");
            assert_eq!(json, Some(serde_json::to_vec(&value).unwrap()), "{text}");
        }
        // managedFields kept when not stripped, in their place.
        let Whole { value, json } =
            serde_json::from_str(r#"{"metadata":{"a":1,"managedFields":[1],"b":2}}"#).unwrap();
        assert_eq!(
            json.unwrap(),
            br#"{"metadata":{"a":1,"managedFields":[1],"b":2}}"#.to_vec()
        );
        assert!(value.pointer("/metadata/managedFields").is_some());
    }

    /// A repeated member leaves one value (the last, in the first one's place) but both in the
    /// bytes: no bytes then, so the recorder serializes the value as before.
    #[test]
    fn an_object_with_a_repeated_member_has_no_bytes() {
        for text in [
            r#"{"metadata":{"name":"a","name":"b"}}"#,
            r#"{"spec":1,"metadata":{},"spec":2}"#,
            r#"{"metadata":{},"spec":{"x":[{"k":1,"k":1}]}}"#,
        ] {
            let whole: Value = serde_json::from_str(text).unwrap();
            let Whole { value, json } = serde_json::from_str(text).unwrap();
            assert_eq!(value, whole, "{text}");
            assert_eq!(json, None, "{text}");
        }
    }
}
