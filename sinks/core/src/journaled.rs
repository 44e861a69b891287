//! An event as delivery holds it: the bytes the journal stored, its attributes, and its `data`
//! parsed only when something asks for it; start at [`Journaled`].
//!
//! The journal stores each event in the JSON format, the form structured-mode sinks send. Decoding
//! all of it into a [`CloudEvent`] (whose `data` is a `serde_json::Value` tree of the whole
//! object) and encoding it again for the sink was a third of herald's CPU per event (ADR 0014):
//! here the attributes are read and validated, `data` is located but left as text, and the
//! stored bytes are what a structured sink sends and what a binary sink's body is cut from.

use std::borrow::Cow;
use std::fmt;
use std::ops::{Deref, Range};
use std::sync::{Arc, OnceLock};

use serde::Deserialize;
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::encode::DecodeError;
use crate::event::CloudEvent;

/// An event on its way to a sink: either built from a [`CloudEvent`], or read from the journal's
/// bytes, whose `data` is parsed on first use only, once, and kept.
///
/// It dereferences to the whole [`CloudEvent`] (parsing `data` if it has not been), so code that
/// reads `data` always sees it. The delivery path uses the cheaper accessors instead:
/// [`Journaled::attributes`] for everything but `data`, [`Journaled::structured_json`] for the
/// JSON format and [`Journaled::data_bytes`] for a binary-mode body; none of them parses `data`.
///
/// ```
/// use herald_sink_core::{CloudEvent, Journaled};
/// use serde_json::json;
///
/// let event = CloudEvent::new("u:1:created", "/s", "t")
///     .extension("partitionkey", "ns/a")
///     .data(json!({"object": {"b": 1, "a": 2}}));
/// let stored = event.to_structured_json();
/// let journaled = Journaled::from_structured_json(stored.clone())?;
/// assert_eq!(journaled.attributes().partition_key(), Some("ns/a"));
/// assert_eq!(&*journaled.structured_json(), &stored[..]); // the stored bytes, as they are
/// assert_eq!(&*journaled.data_bytes(), br#"{"object":{"b":1,"a":2}}"#);
/// assert_eq!(*journaled, event); // `data` parsed on this first use
/// # Ok::<(), herald_sink_core::DecodeError>(())
/// ```
#[derive(Clone)]
pub struct Journaled {
    /// Every attribute; `data` too, unless [`Journaled::stored`] holds it unparsed.
    head: CloudEvent,
    /// The JSON-format bytes the event was read from.
    stored: Option<Stored>,
    /// The whole event, once `data` has been parsed.
    full: OnceLock<CloudEvent>,
}

#[derive(Clone)]
struct Stored {
    bytes: Arc<[u8]>,
    /// Where the JSON `data` value lies in `bytes`, when it is left unparsed (JSON data only; a
    /// text `data` is in the head).
    data: Option<Range<usize>>,
}

impl Journaled {
    /// An event built in memory (tests, replays): every accessor encodes or reads it as it is.
    #[must_use]
    pub fn new(event: CloudEvent) -> Self {
        Self {
            head: event,
            stored: None,
            full: OnceLock::new(),
        }
    }

    /// Reads an event in the JSON format: its attributes decoded and validated by the rules of
    /// [`CloudEvent::from_structured_json`], its JSON `data` checked for syntax only and left
    /// unparsed.
    ///
    /// # Errors
    ///
    /// The [`DecodeError`] [`CloudEvent::from_structured_json`] gives for the same bytes.
    pub fn from_structured_json(bytes: impl Into<Arc<[u8]>>) -> Result<Self, DecodeError> {
        let bytes: Arc<[u8]> = bytes.into();
        match split(&bytes) {
            Some((head, data)) => Ok(Self {
                head,
                stored: Some(Stored { bytes, data }),
                full: OnceLock::new(),
            }),
            // The full decoder says exactly what is wrong, in the words it always used.
            None => match CloudEvent::from_structured_json(&bytes) {
                Ok(event) => Ok(Self {
                    head: event,
                    stored: Some(Stored { bytes, data: None }),
                    full: OnceLock::new(),
                }),
                Err(error) => Err(error),
            },
        }
    }

    /// The event's attributes, without parsing `data`: `data` is `None` here when it is still
    /// unparsed, so read it through [`Journaled::event`] (or `*self`), never from this.
    #[must_use]
    pub fn attributes(&self) -> &CloudEvent {
        &self.head
    }

    /// The whole event, `data` parsed on the first call (and kept for the next).
    #[must_use]
    pub fn event(&self) -> &CloudEvent {
        let Some(range) = self.unparsed() else {
            return &self.head;
        };
        self.full.get_or_init(|| {
            let mut event = self.head.clone();
            let text = self
                .stored
                .as_ref()
                .and_then(|s| s.bytes.get(range.clone()))
                .unwrap_or_default();
            // The range was checked when the event was read with the full decoder's limits
            // (depth, number range, escapes: `Check`), so this parse cannot fail; if it did,
            // `null` stands in (and the stored bytes still go out whole).
            event.data = Some(serde_json::from_slice(text).unwrap_or(Value::Null));
            event
        })
    }

    /// Where `data` lies unparsed in the stored bytes, if it does.
    fn unparsed(&self) -> Option<Range<usize>> {
        self.stored.as_ref().and_then(|s| s.data.clone())
    }

    /// The event in the JSON format: the stored bytes as they are when it was read from them,
    /// else [`CloudEvent::to_structured_json`].
    #[must_use]
    pub fn structured_json(&self) -> Cow<'_, [u8]> {
        match &self.stored {
            Some(stored) => Cow::Borrowed(&stored.bytes),
            None => Cow::Owned(self.head.to_structured_json()),
        }
    }

    /// The binary-mode body, as [`CloudEvent::data_bytes`] gives it: the stored `data` bytes when
    /// they are unparsed JSON (the journal wrote them compact, as `data_bytes` does).
    #[must_use]
    pub fn data_bytes(&self) -> Cow<'_, [u8]> {
        match (self.unparsed(), &self.stored) {
            (Some(range), Some(stored)) => {
                Cow::Borrowed(stored.bytes.get(range).unwrap_or_default())
            }
            _ => Cow::Owned(self.head.data_bytes()),
        }
    }

    /// Whether the event came with `data`, without parsing it.
    #[must_use]
    pub fn has_data(&self) -> bool {
        self.unparsed().is_some() || self.head.data.is_some()
    }
}

/// What a sink's encoder reads from an event: a [`CloudEvent`] built in memory or a
/// [`Journaled`] one, whose stored bytes are sent without decoding `data`. Encoders are generic
/// over it, so tests keep handing them plain events.
pub trait Sendable {
    /// The whole event (`data` parsed if it was not): for templates and anything else that reads
    /// `data`.
    fn event(&self) -> &CloudEvent;
    /// The attributes; `data` may be absent here although the event has some (see
    /// [`Journaled::attributes`]).
    fn attributes(&self) -> &CloudEvent;
    /// The attributes with `data`'s presence right, for the binding headers (which say
    /// `content-type: application/json` for data without a `datacontenttype`).
    fn binding_attributes(&self) -> &CloudEvent;
    /// The event in the JSON format.
    fn json_bytes(&self) -> Cow<'_, [u8]>;
    /// The binary-mode body ([`CloudEvent::data_bytes`]).
    fn body_bytes(&self) -> Cow<'_, [u8]>;
    /// Whether the event has `data`.
    fn carries_data(&self) -> bool;
}

impl Sendable for CloudEvent {
    fn event(&self) -> &CloudEvent {
        self
    }
    fn attributes(&self) -> &CloudEvent {
        self
    }
    fn binding_attributes(&self) -> &CloudEvent {
        self
    }
    fn json_bytes(&self) -> Cow<'_, [u8]> {
        Cow::Owned(self.to_structured_json())
    }
    fn body_bytes(&self) -> Cow<'_, [u8]> {
        Cow::Owned(self.data_bytes())
    }
    fn carries_data(&self) -> bool {
        self.data.is_some()
    }
}

impl Sendable for Journaled {
    fn event(&self) -> &CloudEvent {
        Journaled::event(self)
    }
    fn attributes(&self) -> &CloudEvent {
        Journaled::attributes(self)
    }
    fn binding_attributes(&self) -> &CloudEvent {
        // Only an unset `datacontenttype` makes the headers depend on `data`.
        if self.head.datacontenttype.is_some() || self.head.data.is_some() || !self.has_data() {
            &self.head
        } else {
            Journaled::event(self)
        }
    }
    fn json_bytes(&self) -> Cow<'_, [u8]> {
        self.structured_json()
    }
    fn body_bytes(&self) -> Cow<'_, [u8]> {
        self.data_bytes()
    }
    fn carries_data(&self) -> bool {
        self.has_data()
    }
}

impl Deref for Journaled {
    type Target = CloudEvent;

    fn deref(&self) -> &CloudEvent {
        self.event()
    }
}

impl From<CloudEvent> for Journaled {
    fn from(event: CloudEvent) -> Self {
        Self::new(event)
    }
}

impl fmt::Debug for Journaled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.event(), f)
    }
}

impl PartialEq for Journaled {
    fn eq(&self, other: &Self) -> bool {
        self.event() == other.event()
    }
}

impl Eq for Journaled {}

impl PartialEq<CloudEvent> for Journaled {
    fn eq(&self, other: &CloudEvent) -> bool {
        self.event() == other
    }
}

impl PartialEq<Journaled> for CloudEvent {
    fn eq(&self, other: &Journaled) -> bool {
        self == other.event()
    }
}

/// The JSON-format object with every member but `data` parsed, and `data` as raw text.
struct Split<'a> {
    members: Map<String, Value>,
    data: Option<&'a RawValue>,
}

impl<'de> Deserialize<'de> for Split<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Split<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON-format event")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Split<'de>, A::Error> {
                let mut out = Split {
                    members: Map::new(),
                    data: None,
                };
                while let Some(key) = map.next_key::<String>()? {
                    if key == "data" {
                        out.data = Some(map.next_value()?);
                    } else {
                        let value = map.next_value()?;
                        out.members.insert(key, value);
                    }
                }
                Ok(out)
            }
        }
        deserializer.deserialize_map(Members)
    }
}

/// How deep `data` may nest: `serde_json` refuses a document nested 128 deep, and the event's
/// object is the first level.
const DATA_DEPTH: usize = 126;

/// Reads a JSON value as parsing it into a `Value` would, without building one: numbers out of
/// range, lone surrogates and nesting deeper than `left` fail as they would there.
#[derive(Clone, Copy)]
struct Check {
    left: usize,
}

impl Check {
    /// The check of a container's members, or the error of one nested too deep.
    fn inner<E: serde::de::Error>(self) -> Result<Self, E> {
        match self.left.checked_sub(1) {
            Some(left) => Ok(Self { left }),
            None => Err(E::custom("recursion limit exceeded")),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Check {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Check {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let inner = self.inner()?;
        while seq.next_element_seed(inner)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let inner = self.inner()?;
        while map.next_key_seed(inner)?.is_some() {
            map.next_value_seed(inner)?;
        }
        Ok(())
    }
}

/// The attributes of the JSON-format `bytes` and where their JSON `data` lies; `None` when the
/// cheap path cannot decide or finds an error (the full decoder then gives the answer or the
/// error, in its words).
fn split(bytes: &[u8]) -> Option<(CloudEvent, Option<Range<usize>>)> {
    let Split { mut members, data } = serde_json::from_slice::<Split<'_>>(bytes).ok()?;
    let json_data = members
        .get("datacontenttype")
        .and_then(Value::as_str)
        .is_none_or(crate::event::is_json_content_type);
    // What `data` means to the decoder's rules, without parsing a JSON value: text is parsed
    // (it goes in the head), anything else stands in as `null` or a non-string.
    let text = data.map(RawValue::get);
    if let Some(raw) = text {
        // A raw value is only checked for syntax, deeper than the full decoder nests and with
        // numbers and escapes it refuses; those go to it, to be refused in its words.
        let mut de = serde_json::Deserializer::from_str(raw);
        Check { left: DATA_DEPTH }.deserialize(&mut de).ok()?;
    }
    let range = match text {
        None => None,
        Some(raw) if json_data => {
            members.insert("data".to_owned(), Value::Null);
            let start = raw.as_ptr().addr().checked_sub(bytes.as_ptr().addr())?;
            Some(start..start + raw.len())
        }
        Some(raw) => {
            let value = serde_json::from_str::<Value>(raw).ok()?;
            members.insert("data".to_owned(), value);
            None
        }
    };
    let mut head = CloudEvent::from_json_value(Value::Object(members)).ok()?;
    if range.is_some() {
        head.data = None;
    }
    Some((head, range))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn widget() -> CloudEvent {
        CloudEvent::new("u:7:updated", "k8s://prod/example.com/widgets", "t.updated")
            .subject("ns/a\u{0}b")
            .time("2026-01-02T03:04:05.678Z")
            .datacontenttype("application/json")
            .extension("partitionkey", "ns/a")
            .extension("resync", false)
            .data(json!({"op": "updated", "object": {"z": 1, "a": [1.5, "x"]}}))
    }

    #[test]
    fn stored_events_send_their_bytes_and_parse_data_once_on_demand() {
        let event = widget();
        let bytes = event.to_structured_json();
        let j = Journaled::from_structured_json(bytes.clone()).unwrap();
        assert!(j.attributes().data.is_none(), "data is left unparsed");
        assert!(j.has_data());
        assert_eq!(j.attributes().id, "u:7:updated");
        assert_eq!(&*j.structured_json(), &bytes[..]);
        assert_eq!(&*j.data_bytes(), &event.data_bytes()[..]);
        assert_eq!(*j, event);
        assert!(std::ptr::eq(j.event(), j.event()), "parsed once, kept");
    }

    #[test]
    fn in_memory_events_encode_as_the_event_does() {
        let event = widget();
        let j = Journaled::new(event.clone());
        assert_eq!(&*j.structured_json(), &event.to_structured_json()[..]);
        assert_eq!(&*j.data_bytes(), &event.data_bytes()[..]);
        assert_eq!(j, event);
    }

    #[test]
    fn decoding_agrees_with_the_full_decoder() {
        let cases: Vec<Vec<u8>> = vec![
            widget().to_structured_json(),
            widget().data(json!(null)).to_structured_json(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"text/plain","data":"hi"}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"text/plain","data":null}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"text/plain","data":{"a":1}}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":1,"data_base64":"AA=="}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","subject":""}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":{"a":"#.to_vec(),
            br"[1]".to_vec(),
            br#"{"specversion":"0.3","id":"1","source":"/s","type":"t"}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","ext":[1],"data":{}}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":{"n":1e400}}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":[-1e400]}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":{"s":"\ud800"}}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":{"\udc00":1}}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"text/plain","data":[1e400]}"#.to_vec(),
        ];
        let cases = cases.into_iter().chain((124..=129).flat_map(|depth| {
            let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            let object = format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
            [nested, object].map(|data| {
                format!(
                    r#"{{"specversion":"1.0","id":"1","source":"/s","type":"t","data":{data}}}"#
                )
                .into_bytes()
            })
        }));
        for bytes in cases {
            let full = CloudEvent::from_structured_json(&bytes);
            let cheap = Journaled::from_structured_json(bytes.clone());
            match (full, cheap) {
                (Ok(full), Ok(cheap)) => {
                    assert!(cheap.event().data.is_some() || full.data.is_none());
                    assert_eq!(cheap, full);
                    assert_eq!(&*cheap.data_bytes(), &full.data_bytes()[..]);
                }
                (Err(full), Err(cheap)) => assert_eq!(cheap.to_string(), full.to_string()),
                (full, cheap) => {
                    panic!("{}: {full:?} vs {cheap:?}", String::from_utf8_lossy(&bytes))
                }
            }
        }
    }
}
