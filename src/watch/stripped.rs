//! A watched object decoded without its `metadata.managedFields`: the members are skipped while the
//! line is parsed instead of being built into a [`Value`] and dropped by
//! [`event::prepare`](crate::event::prepare) (a real API server's objects carry them, often
//! larger than the rest of the object). The result is the value `prepare` would leave: every other
//! member where the server sent it, `metadata`'s order kept (`prepare` removes with
//! `shift_remove`).

use std::fmt;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Number, Value};

/// An object decoded with `metadata.managedFields` left out (for resources that do not keep it).
#[derive(Debug, Clone, PartialEq)]
pub struct Stripped(pub Value);

impl<'de> Deserialize<'de> for Stripped {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Level::Top).map(Stripped)
    }
}

/// Where the visitor is: the object itself, or its `metadata`. Any other value is decoded as
/// [`Value`] decodes it.
#[derive(Clone, Copy)]
enum Level {
    Top,
    Metadata,
}

impl<'de> DeserializeSeed<'de> for Level {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// What [`Value`]'s own visitor does for every shape but an object (serde_json 1.0's
/// `ValueVisitor`), so a `metadata` or an object that is not a JSON object decodes as before.
impl<'de> Visitor<'de> for Level {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        Value::deserialize(deserializer)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Value>()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = match (self, key.as_str()) {
                (Self::Top, "metadata") => map.next_value_seed(Self::Metadata)?,
                (Self::Metadata, "managedFields") => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
                _ => map.next_value::<Value>()?,
            };
            // A repeated member replaces the first one's value in its place, as `Value` does.
            members.insert(key, value);
        }
        Ok(Value::Object(members))
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
            let Stripped(stripped) = serde_json::from_str(text).unwrap();
            assert_eq!(stripped, prepared, "{text}");
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
}
