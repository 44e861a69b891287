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
use std::sync::OnceLock;

use bytes::Bytes;
use serde::Deserialize;
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::encode::DecodeError;
use crate::event::{
    AttributeRefs, CORE_ATTRIBUTES, CloudEvent, ExtensionValue, SPEC_VERSION, ValidationError,
    check_attributes, is_json_content_type,
};

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
    /// Every attribute; `data` too, unless [`Journaled::stored`] holds it unparsed. Decoded on
    /// first use for an event read with [`Journaled::read_lazily`].
    head: OnceLock<CloudEvent>,
    /// The JSON-format bytes the event was read from.
    stored: Option<Stored>,
    /// The whole event, once `data` has been parsed.
    full: OnceLock<CloudEvent>,
}

#[derive(Clone)]
struct Stored {
    bytes: Bytes,
    /// Where the JSON `data` value lies in `bytes`, when it is left unparsed (JSON data only; a
    /// text `data` is in the head).
    data: Option<Range<usize>>,
    /// Where the attributes delivery reads per event lie, while the head is not decoded.
    marks: Option<Marks>,
}

impl Journaled {
    /// An event built in memory (tests, replays): every accessor encodes or reads it as it is.
    #[must_use]
    pub fn new(event: CloudEvent) -> Self {
        Self {
            head: OnceLock::from(event),
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
    pub fn from_structured_json(bytes: impl Into<Bytes>) -> Result<Self, DecodeError> {
        Self::read(bytes.into(), false)
    }

    /// [`Journaled::from_structured_json`], the attributes validated in place but not decoded:
    /// [`Journaled::id`], [`Journaled::source`], [`Journaled::ty`], [`Journaled::partition_key`]
    /// and [`Journaled::time`] read them from the bytes, and the head is decoded on the first call of anything else that reads
    /// attributes. For a sink that sends the stored bytes as they are (the file sink), whose
    /// events then never have their attributes copied out.
    ///
    /// # Errors
    ///
    /// The [`DecodeError`] [`CloudEvent::from_structured_json`] gives for the same bytes.
    pub fn read_lazily(bytes: impl Into<Bytes>) -> Result<Self, DecodeError> {
        Self::read(bytes.into(), true)
    }

    fn read(bytes: Bytes, lazily: bool) -> Result<Self, DecodeError> {
        let Some(split) = split(&bytes) else {
            // The full decoder says exactly what is wrong, in the words it always used.
            let event = CloudEvent::from_structured_json(&bytes)?;
            return Ok(Self {
                head: OnceLock::from(event),
                stored: Some(Stored {
                    bytes,
                    data: None,
                    marks: None,
                }),
                full: OnceLock::new(),
            });
        };
        // A text `data` was parsed into the head already: nothing is left to defer.
        let marks = (lazily && split.text.is_none())
            .then(|| split.view.marks(&bytes))
            .flatten();
        let head = match marks {
            Some(_) => OnceLock::new(),
            None => OnceLock::from(split.view.to_event(split.text)),
        };
        let data = split.data;
        Ok(Self {
            head,
            stored: Some(Stored { bytes, data, marks }),
            full: OnceLock::new(),
        })
    }

    /// The event's attributes, without parsing `data`: `data` is `None` here when it is still
    /// unparsed, so read it through [`Journaled::event`] (or `*self`), never from this.
    #[must_use]
    pub fn attributes(&self) -> &CloudEvent {
        self.head.get_or_init(|| self.decode_head())
    }

    /// [`Journaled::read_lazily`] of an event whose writer says where its attributes and `data`
    /// lie ([`Layout`]), without reading it again: herald's recorder vouches this way for the
    /// events it rendered itself and found valid, and a reader given them in memory beside their
    /// bytes skips the scan. Anything the writer did not vouch for (an entry read back from the
    /// store, one journaled to be dead-lettered) goes through [`Journaled::read_lazily`], which
    /// reads and judges it. A layout that does not fit the bytes is not trusted: the bytes are
    /// read as [`Journaled::read_lazily`] reads them.
    ///
    /// # Errors
    ///
    /// Only for a layout that does not fit the bytes: what [`Journaled::read_lazily`] gives.
    pub fn vouched(bytes: impl Into<Bytes>, layout: &Layout) -> Result<Self, DecodeError> {
        let bytes = bytes.into();
        if !layout.fits(&bytes) {
            return Self::read(bytes, true);
        }
        let range = |r: &Range<u32>| r.start as usize..r.end as usize;
        Ok(Self {
            head: OnceLock::new(),
            stored: Some(Stored {
                data: Some(range(&layout.data)),
                marks: Some(Marks {
                    id: range(&layout.id),
                    source: range(&layout.source),
                    ty: range(&layout.ty),
                    partition_key: Some(range(&layout.partition_key)),
                    time: Some(range(&layout.time)),
                }),
                bytes,
            }),
            full: OnceLock::new(),
        })
    }

    /// The head of an event read lazily, from its stored bytes with `data` cut out (it is read
    /// on its own, when asked for).
    fn decode_head(&self) -> CloudEvent {
        let Some(stored) = &self.stored else {
            // Only a stored event is without a head.
            return CloudEvent::new(String::new(), String::new(), String::new());
        };
        let bytes = &stored.bytes[..];
        let head: Cow<'_, [u8]> = match stored
            .data
            .as_ref()
            .and_then(|r| Some((bytes.get(..r.start)?, bytes.get(r.end..)?)))
        {
            Some((before, after)) => {
                let mut head = Vec::with_capacity(before.len() + 4 + after.len());
                head.extend_from_slice(before);
                head.extend_from_slice(b"null");
                head.extend_from_slice(after);
                Cow::Owned(head)
            }
            None => Cow::Borrowed(bytes),
        };
        // The same bytes were read and validated when the event was: this cannot fail, and if
        // it did the full decoder would stand in (the stored bytes still go out whole).
        let view = match scan(&head) {
            Some(view) => Ok(view),
            None => serde_json::from_slice::<View<'_>>(&head),
        };
        match view {
            Ok(view) => view.to_event(None),
            Err(_) => CloudEvent::from_structured_json(bytes).map_or_else(
                |_| CloudEvent::new(String::new(), String::new(), String::new()),
                |mut event| {
                    event.data = None;
                    event
                },
            ),
        }
    }

    /// The stored text at `range` (read where it was validated).
    fn text(&self, range: &Range<usize>) -> &str {
        self.stored
            .as_ref()
            .and_then(|s| s.bytes.get(range.clone()))
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or_default()
    }

    fn marks(&self) -> Option<&Marks> {
        self.stored.as_ref().and_then(|s| s.marks.as_ref())
    }

    /// The `id` attribute, read without decoding the other attributes.
    #[must_use]
    pub fn id(&self) -> &str {
        match self.marks() {
            Some(marks) => self.text(&marks.id),
            None => &self.attributes().id,
        }
    }

    /// The `source` attribute, read without decoding the other attributes.
    #[must_use]
    pub fn source(&self) -> &str {
        match self.marks() {
            Some(marks) => self.text(&marks.source),
            None => &self.attributes().source,
        }
    }

    /// The `type` attribute, read without decoding the other attributes.
    #[must_use]
    pub fn ty(&self) -> &str {
        match self.marks() {
            Some(marks) => self.text(&marks.ty),
            None => &self.attributes().ty,
        }
    }

    /// The `partitionkey` extension when it is a string ([`CloudEvent::partition_key`]), read
    /// without decoding the other attributes.
    #[must_use]
    pub fn partition_key(&self) -> Option<&str> {
        match self.marks() {
            Some(marks) => marks.partition_key.as_ref().map(|r| self.text(r)),
            None => self.attributes().partition_key(),
        }
    }

    /// The `time` attribute, read without decoding the other attributes.
    #[must_use]
    pub fn time(&self) -> Option<&str> {
        match self.marks() {
            Some(marks) => marks.time.as_ref().map(|r| self.text(r)),
            None => self.attributes().time.as_deref(),
        }
    }

    /// The whole event, `data` parsed on the first call (and kept for the next).
    #[must_use]
    pub fn event(&self) -> &CloudEvent {
        let Some(range) = self.unparsed() else {
            return self.attributes();
        };
        self.full.get_or_init(|| {
            let mut event = self.attributes().clone();
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
            None => Cow::Owned(self.attributes().to_structured_json()),
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
            _ => Cow::Owned(self.attributes().data_bytes()),
        }
    }

    /// Whether the event came with `data`, without parsing it.
    #[must_use]
    pub fn has_data(&self) -> bool {
        // An event read lazily has no text `data` (that is parsed into an eager head).
        self.unparsed().is_some() || (self.marks().is_none() && self.attributes().data.is_some())
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
        let head = self.attributes();
        if head.datacontenttype.is_some() || head.data.is_some() || !self.has_data() {
            head
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

/// The JSON-format object read member by member, every attribute borrowed from the bytes (owned
/// only when it holds an escape), `data` as raw text. No `Value` tree, no map of members and,
/// for an event without escapes, no allocation: a map of owned strings per event was most of
/// what decoding cost (docs/operations.md, "Delivery's CPU per event").
///
/// It only succeeds where the full decoder's rules make the answer plain: a member given twice,
/// an attribute that is not a string, an extension that is not a string, a boolean or a 32-bit
/// integer, a non-null `data_base64` make it fail, and the full decoder then decides.
struct View<'a> {
    id: Cow<'a, str>,
    source: Cow<'a, str>,
    ty: Cow<'a, str>,
    subject: Option<Cow<'a, str>>,
    time: Option<Cow<'a, str>>,
    datacontenttype: Option<Cow<'a, str>>,
    dataschema: Option<Cow<'a, str>>,
    extensions: Extensions<'a>,
    /// `data` as raw JSON text.
    data: Option<&'a str>,
}

impl View<'_> {
    /// [`CloudEvent::validate`]'s rules for everything but `data`.
    fn check(&self) -> Result<(), ValidationError> {
        check_attributes(
            &AttributeRefs {
                id: &self.id,
                source: &self.source,
                ty: &self.ty,
                subject: self.subject.as_deref(),
                time: self.time.as_deref(),
                datacontenttype: self.datacontenttype.as_deref(),
                dataschema: self.dataschema.as_deref(),
            },
            self.extensions
                .iter()
                .map(|(name, value)| (&**name, value.as_str())),
        )
    }

    fn has_json_data(&self) -> bool {
        self.datacontenttype
            .as_deref()
            .is_none_or(is_json_content_type)
    }

    /// The attributes as an event, with `data` (a text `data`, or none).
    fn to_event(&self, data: Option<Value>) -> CloudEvent {
        let owned = |s: &Option<Cow<'_, str>>| s.as_deref().map(str::to_owned);
        let mut event = CloudEvent::new(&*self.id, &*self.source, &*self.ty);
        event.subject = owned(&self.subject);
        event.time = owned(&self.time);
        event.datacontenttype = owned(&self.datacontenttype);
        event.dataschema = owned(&self.dataschema);
        event.extensions = self
            .extensions
            .iter()
            .filter_map(|(name, value)| Some(((**name).to_owned(), value.to_extension()?)))
            .collect();
        event.data = data;
        event
    }

    /// Where the attributes delivery reads of every event lie in `base` (the bytes this view
    /// was read from); `None` when one of them holds an escape, and so is not there as it reads.
    fn marks(&self, base: &[u8]) -> Option<Marks> {
        let at = |text: &Cow<'_, str>| match text {
            Cow::Borrowed(s) => {
                let start = s.as_ptr().addr().checked_sub(base.as_ptr().addr())?;
                Some(start..start + s.len())
            }
            Cow::Owned(_) => None,
        };
        let partition_key = match self.extensions.get("partitionkey") {
            Some(Scalar::Text(key)) => Some(at(key)?),
            _ => None,
        };
        let time = match &self.time {
            Some(time) => Some(at(time)?),
            None => None,
        };
        Some(Marks {
            id: at(&self.id)?,
            source: at(&self.source)?,
            ty: at(&self.ty)?,
            partition_key,
            time,
        })
    }
}

/// Extensions held inline, so reading an event allocates nothing for them: herald's events carry
/// eleven.
const INLINE_EXTENSIONS: usize = 16;

/// A [`View`]'s extensions in the order they came, nulls left out.
#[derive(Default)]
struct Extensions<'a> {
    inline: [(Cow<'a, str>, Scalar<'a>); INLINE_EXTENSIONS],
    len: usize,
    more: Vec<(Cow<'a, str>, Scalar<'a>)>,
}

impl<'a> Extensions<'a> {
    fn iter(&self) -> impl Iterator<Item = &(Cow<'a, str>, Scalar<'a>)> {
        self.inline.iter().take(self.len).chain(&self.more)
    }

    fn get(&self, name: &str) -> Option<&Scalar<'a>> {
        self.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    fn push(&mut self, name: Cow<'a, str>, value: Scalar<'a>) {
        match self.inline.get_mut(self.len) {
            Some(slot) => {
                *slot = (name, value);
                self.len += 1;
            }
            None => self.more.push((name, value)),
        }
    }
}

/// The attributes delivery reads of every event, located in the stored bytes: what routing reads,
/// the ordering window's key and the latency's start, without decoding the rest.
#[derive(Clone)]
struct Marks {
    id: Range<usize>,
    source: Range<usize>,
    ty: Range<usize>,
    partition_key: Option<Range<usize>>,
    time: Option<Range<usize>>,
}

/// Where an event's writer put the attributes delivery reads of every event and its JSON `data`,
/// in the JSON-format bytes it wrote: what [`Journaled::vouched`] takes instead of reading them.
/// The writer vouches that the bytes are a valid event (its attributes pass
/// [`CloudEvent::validate`], `data` is JSON a parse accepts, `datacontenttype` is JSON's) and that
/// each string attribute here lies unescaped at its range, as [`Journaled::read_lazily`] would
/// find it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    id: Range<u32>,
    source: Range<u32>,
    ty: Range<u32>,
    partition_key: Range<u32>,
    time: Range<u32>,
    data: Range<u32>,
}

impl Layout {
    /// The layout of the `id`, `source`, `type`, `partitionkey` and `time` strings (their
    /// content, between the quotes) and the JSON `data` value; `None` when one lies past what a
    /// `u32` counts (the event is then read as any other).
    #[must_use]
    pub fn new(
        id: Range<usize>,
        source: Range<usize>,
        ty: Range<usize>,
        partition_key: Range<usize>,
        time: Range<usize>,
        data: Range<usize>,
    ) -> Option<Self> {
        let narrow = |r: Range<usize>| -> Option<Range<u32>> {
            Some(u32::try_from(r.start).ok()?..u32::try_from(r.end).ok()?)
        };
        Some(Self {
            id: narrow(id)?,
            source: narrow(source)?,
            ty: narrow(ty)?,
            partition_key: narrow(partition_key)?,
            time: narrow(time)?,
            data: narrow(data)?,
        })
    }

    /// Whether the layout could be that of `bytes`: each string's range within them and between
    /// quotes, `data` after a colon. A sanity check, not a reading (that would be the scan the
    /// layout saves): a layout written for other bytes would otherwise hand out garbage as
    /// attributes. A range off a character boundary reads as empty ([`Journaled::id`] and the
    /// others check the text they hand out).
    fn fits(&self, bytes: &[u8]) -> bool {
        let quoted = |r: &Range<u32>| {
            let (start, end) = (r.start as usize, r.end as usize);
            start > 0
                && start <= end
                && bytes.get(start - 1) == Some(&b'"')
                && bytes.get(end) == Some(&b'"')
        };
        let (start, end) = (self.data.start as usize, self.data.end as usize);
        [
            &self.id,
            &self.source,
            &self.ty,
            &self.partition_key,
            &self.time,
        ]
        .into_iter()
        .all(quoted)
            && start > 0
            && start < end
            && end <= bytes.len()
            && bytes.get(start - 1) == Some(&b':')
    }
}

/// The core attributes in the order of [`CORE_ATTRIBUTES`], then `data` and `data_base64`: a
/// member's slot, so a repeated one is seen.
const DATA_SLOT: usize = CORE_ATTRIBUTES.len();
const DATA_BASE64_SLOT: usize = DATA_SLOT + 1;

fn slot(name: &str) -> Option<usize> {
    match name {
        "data" => Some(DATA_SLOT),
        "data_base64" => Some(DATA_BASE64_SLOT),
        _ => CORE_ATTRIBUTES.iter().position(|a| *a == name),
    }
}

/// A member's name, borrowed from the bytes unless it holds an escape.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Name;
        impl<'de> Visitor<'de> for Name {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }

            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }

            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }

            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(Name)
    }
}

/// A member other than `data`, as the cheap path takes it, a string borrowed unless it holds an
/// escape: arrays, objects and numbers that are not 32-bit integers fail (the full decoder then
/// gives its answer).
#[derive(Default)]
enum Scalar<'a> {
    #[default]
    Null,
    Text(Cow<'a, str>),
    Bool(bool),
    Integer(i32),
}

impl Scalar<'_> {
    fn as_str(&self) -> Option<&str> {
        match self {
            Scalar::Text(text) => Some(text),
            _ => None,
        }
    }

    fn to_extension(&self) -> Option<ExtensionValue> {
        match self {
            Scalar::Null => None,
            Scalar::Text(text) => Some(ExtensionValue::String((**text).to_owned())),
            Scalar::Bool(b) => Some(ExtensionValue::Bool(*b)),
            Scalar::Integer(i) => Some(ExtensionValue::Integer(*i)),
        }
    }
}

impl<'de> Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Member;
        impl<'de> Visitor<'de> for Member {
            type Value = Scalar<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("null, a string, a boolean or a 32-bit integer")
            }

            fn visit_unit<E>(self) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Null)
            }

            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Text(Cow::Borrowed(v)))
            }

            fn visit_str<E>(self, v: &str) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Text(Cow::Owned(v.to_owned())))
            }

            fn visit_string<E>(self, v: String) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Text(Cow::Owned(v)))
            }

            fn visit_bool<E>(self, v: bool) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Bool(v))
            }

            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Scalar<'de>, E> {
                i32::try_from(v)
                    .map(Scalar::Integer)
                    .map_err(|_| E::custom("not a 32-bit integer"))
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Scalar<'de>, E> {
                i32::try_from(v)
                    .map(Scalar::Integer)
                    .map_err(|_| E::custom("not a 32-bit integer"))
            }
        }
        deserializer.deserialize_any(Member)
    }
}

/// A [`View`] built member by member, with the rules that make it fail where the full decoder
/// must decide: both the serde reading and [`scan`] feed it, so they agree by construction.
#[derive(Default)]
struct Members<'a> {
    core: [Option<Cow<'a, str>>; CORE_ATTRIBUTES.len()],
    seen: [bool; DATA_BASE64_SLOT + 1],
    data: Option<&'a str>,
    extensions: Extensions<'a>,
}

impl<'a> Members<'a> {
    /// Notes a member's slot as taken; a member given twice is the full decoder's call.
    fn take(&mut self, slot: Option<usize>) -> Result<(), &'static str> {
        if let Some(i) = slot
            && let Some(seen) = self.seen.get_mut(i)
            && std::mem::replace(seen, true)
        {
            return Err("a member given twice");
        }
        Ok(())
    }

    /// The `data` member, as raw JSON text.
    fn data(&mut self, raw: &'a str) -> Result<(), &'static str> {
        self.take(Some(DATA_SLOT))?;
        self.data = Some(raw);
        Ok(())
    }

    /// Any member but `data`.
    fn member(&mut self, name: Cow<'a, str>, value: Scalar<'a>) -> Result<(), &'static str> {
        let slot = slot(&name);
        self.take(slot)?;
        match (slot, value) {
            (Some(DATA_BASE64_SLOT), Scalar::Null) => {}
            (Some(i), Scalar::Null) if i < DATA_SLOT => {}
            (Some(i), Scalar::Text(text)) if i < DATA_SLOT => {
                if let Some(core) = self.core.get_mut(i) {
                    *core = Some(text);
                }
            }
            (Some(_), _) => return Err("not a string attribute"),
            // A later member of the same name would replace an earlier one (or a null take it
            // away): the full decoder's call.
            (None, _) if self.extensions.get(&name).is_some() => {
                return Err("a member given twice");
            }
            (None, Scalar::Null) => {}
            (None, value) => self.extensions.push(name, value),
        }
        Ok(())
    }

    fn finish(self) -> Result<View<'a>, &'static str> {
        let [
            specversion,
            id,
            source,
            ty,
            subject,
            time,
            datacontenttype,
            dataschema,
        ] = self.core;
        let (Some(id), Some(source), Some(ty)) = (id, source, ty) else {
            return Err("a required attribute is missing");
        };
        if specversion.as_deref() != Some(SPEC_VERSION) {
            return Err("not a 1.0 event");
        }
        Ok(View {
            id,
            source,
            ty,
            subject,
            time,
            datacontenttype,
            dataschema,
            extensions: self.extensions,
            data: self.data,
        })
    }
}

impl<'de> Deserialize<'de> for View<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> Visitor<'de> for Object {
            type Value = View<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON-format event")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<View<'de>, A::Error> {
                use serde::de::Error as _;
                let mut members = Members::default();
                while let Some(Key(name)) = map.next_key()? {
                    if name == "data" {
                        let raw = map.next_value::<&RawValue>()?;
                        members.data(raw.get()).map_err(A::Error::custom)?;
                        continue;
                    }
                    let value = map.next_value::<Scalar<'de>>()?;
                    members.member(name, value).map_err(A::Error::custom)?;
                }
                members.finish().map_err(A::Error::custom)
            }
        }
        deserializer.deserialize_map(Object)
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

/// Nesting below which [`plain`] vouches for a value; under [`DATA_DEPTH`].
const PLAIN_DEPTH: usize = 100;

/// Longest run of digits [`plain`] vouches for: an integer needs over 308 digits to leave the
/// range of an `f64`, which is what makes a parse refuse a number without an exponent.
const PLAIN_DIGITS: usize = 300;

/// Whether `raw`, JSON text already checked for syntax (a [`RawValue`]), holds none of what
/// parsing it into a `Value` refuses beyond syntax: no `\u` escape (a lone surrogate), no
/// exponent and no run of digits long enough to leave an `f64`'s range, no nesting near
/// [`DATA_DEPTH`]. One pass over the bytes; when it says no, [`Check`] decides. Most of the
/// objects herald journals are plain, and the check walked every one of them (about a sixth of
/// the decoder's time).
fn plain(raw: &str) -> bool {
    let mut depth = 0usize;
    let mut digits = 0usize;
    let mut bytes = raw.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'"' => {
                digits = 0;
                // Inside a string only an escape matters: `\u` may be half a surrogate pair.
                loop {
                    match bytes.next() {
                        Some(b'"') | None => break,
                        Some(b'\\') => {
                            if matches!(bytes.next(), Some(b'u') | None) {
                                return false;
                            }
                        }
                        Some(_) => {}
                    }
                }
            }
            b'0'..=b'9' => {
                digits += 1;
                if digits > PLAIN_DIGITS {
                    return false;
                }
            }
            // Outside strings a letter after a digit is an exponent (`true` and `false` end
            // in an `e` after a letter).
            b'e' | b'E' if digits > 0 => return false,
            b'[' | b'{' => {
                depth += 1;
                if depth >= PLAIN_DEPTH {
                    return false;
                }
                digits = 0;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                digits = 0;
            }
            // A fraction's point and a sign keep the run: `1.5e400` is one number.
            b'.' | b'-' | b'+' => {}
            _ => digits = 0,
        }
    }
    true
}

/// A JSON-format event the cheap path read: its attributes, where its JSON `data` lies, and a
/// text `data`, parsed.
struct Split<'a> {
    view: View<'a>,
    data: Option<Range<usize>>,
    text: Option<Value>,
}

/// The attributes of the JSON-format `bytes` and where their JSON `data` lies; `None` when the
/// cheap path cannot decide or finds an error (the full decoder then gives the answer or the
/// error, in its words).
fn split(bytes: &[u8]) -> Option<Split<'_>> {
    // A view the scan gives has had its `data` vouched for as it went: it is plain.
    let view = if let Some(view) = scan(bytes) {
        view
    } else {
        let view = serde_json::from_slice::<View<'_>>(bytes).ok()?;
        if let Some(raw) = view.data.filter(|raw| !plain(raw)) {
            // A raw value is only checked for syntax, deeper than the full decoder nests and
            // with numbers and escapes it refuses; those go to it, to be refused in its words.
            let mut de = serde_json::Deserializer::from_str(raw);
            Check { left: DATA_DEPTH }.deserialize(&mut de).ok()?;
        }
        view
    };
    let raw = view.data;
    // What `data` means to the decoder's rules: JSON data stays text, located; any other
    // content type takes a string (or `null`, meaning unset), parsed.
    let (data, text) = match raw {
        None => (None, None),
        Some(raw) if view.has_json_data() => {
            let start = raw.as_ptr().addr().checked_sub(bytes.as_ptr().addr())?;
            (Some(start..start + raw.len()), None)
        }
        Some(raw) => match serde_json::from_str::<Value>(raw).ok()? {
            Value::Null => (None, None),
            text @ Value::String(_) => (None, Some(text)),
            _ => return None,
        },
    };
    view.check().ok()?;
    Some(Split { view, data, text })
}

/// Reads the JSON-format object by hand, for the events herald writes itself: member names and
/// attribute strings without escapes, extensions that are strings, booleans or short integers,
/// and a [`plain`] `data`, which it checks for syntax in the same pass. `None` for anything
/// else (an escape, an exponent, a syntax error…), and the serde reading then decides: so the
/// scan only has to accept nothing that reading refuses, and read what it accepts as that reading
/// does. It replaces two passes over `data` (serde's raw value and [`plain`]) by one, and
/// serde's per-member machinery by a byte loop.
fn scan(bytes: &[u8]) -> Option<View<'_>> {
    // serde refuses a string that is not UTF-8; checking it all at once lets the scan slice
    // `str`s anywhere it finds an ASCII delimiter.
    let text = std::str::from_utf8(bytes).ok()?;
    let mut at = Cursor { text, i: 0 };
    let mut members = Members::default();
    at.skip_ws();
    at.eat(b'{')?;
    at.skip_ws();
    if !at.eat_if(b'}') {
        loop {
            let name = at.string()?;
            at.skip_ws();
            at.eat(b':')?;
            at.skip_ws();
            if name == "data" {
                let start = at.i;
                at.plain_value()?;
                members.data(text.get(start..at.i)?).ok()?;
            } else {
                let value = at.scalar()?;
                members.member(Cow::Borrowed(name), value).ok()?;
            }
            at.skip_ws();
            if at.eat_if(b'}') {
                break;
            }
            at.eat(b',')?;
            at.skip_ws();
        }
    }
    at.skip_ws();
    // serde takes trailing whitespace and nothing else.
    if at.i != bytes.len() {
        return None;
    }
    members.finish().ok()
}

/// Where a string's text stops in `bytes`: its closing quote, an escape, or a control character
/// (which JSON refuses in a string). Eight bytes a step: most of an event's bytes are the
/// object's strings (herald's recorder finds the ends of its objects' strings with it too).
#[must_use]
pub fn string_stop(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // The high bit of each byte below `n` (`n` ≤ 128); a borrow can mark a byte after the first
    // one marked, never one before it, so the lowest mark is exact.
    let below = |word: u64, n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word & HIGH;
    let mut chunks = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().ok()?);
        let marks = below(word ^ (ONES * u64::from(b'"')), 1)
            | below(word ^ (ONES * u64::from(b'\\')), 1)
            | below(word, 0x20);
        if marks != 0 {
            return Some(at + (marks.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
        .map(|i| at + i)
}

/// [`scan`]'s place in the text.
struct Cursor<'a> {
    text: &'a str,
    i: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.i).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat_if(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        if hit {
            self.i += 1;
        }
        hit
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        self.eat_if(b).then_some(())
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        let end = self.i.checked_add(word.len())?;
        (self.text.as_bytes().get(self.i..end)? == word.as_bytes()).then_some(())?;
        self.i = end;
        Some(())
    }

    /// A string without escapes, its content borrowed (the attributes and names).
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        let len = string_stop(self.text.as_bytes().get(start..)?)?;
        let end = start + len;
        self.i = end;
        self.eat(b'"')?;
        self.text.get(start..end)
    }

    /// A string in `data`: escapes other than `\u` pass (they cannot make a parse fail), a `\u`
    /// may be half a surrogate pair and is left to [`Check`]; control characters are refused.
    fn plain_string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        let bytes = self.text.as_bytes();
        loop {
            let rest = bytes.get(self.i..)?;
            let len = string_stop(rest)?;
            self.i += len;
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return Some(());
                }
                b'\\' => {
                    self.i += 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 1,
                        _ => return None,
                    }
                }
                _ => return None,
            }
        }
    }

    /// A number without an exponent and with at most [`PLAIN_DIGITS`] digits, as JSON writes it
    /// (no leading zero, a fraction with digits).
    fn plain_number(&mut self) -> Option<()> {
        self.eat_if(b'-');
        let whole = self.digits();
        if whole == 0 || (whole > 1 && self.text.as_bytes().get(self.i - whole) == Some(&b'0')) {
            return None;
        }
        let mut count = whole;
        if self.eat_if(b'.') {
            let fraction = self.digits();
            if fraction == 0 {
                return None;
            }
            count += fraction;
        }
        // An exponent is left to the check (it may leave an `f64`'s range).
        if count > PLAIN_DIGITS || matches!(self.peek(), Some(b'e' | b'E')) {
            return None;
        }
        Some(())
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        self.i - start
    }

    /// A value in `data`, checked for syntax and for being [`plain`], without recursion: the
    /// containers open are kept in `open` (`true` for an object).
    fn plain_value(&mut self) -> Option<()> {
        let mut open = [false; PLAIN_DEPTH];
        let mut depth = 0usize;
        loop {
            // A value.
            self.skip_ws();
            let mut complete = true;
            match self.peek()? {
                b'{' | b'[' => {
                    let object = self.peek() == Some(b'{');
                    self.i += 1;
                    self.skip_ws();
                    if !self.eat_if(if object { b'}' } else { b']' }) {
                        // Nesting as deep as `plain` leaves to the check, so is it here.
                        *open.get_mut(depth.checked_add(1).filter(|d| *d < PLAIN_DEPTH)?)? = object;
                        depth += 1;
                        if object {
                            self.key()?;
                        }
                        complete = false;
                    }
                }
                b'"' => self.plain_string()?,
                b't' => self.literal("true")?,
                b'f' => self.literal("false")?,
                b'n' => self.literal("null")?,
                b'-' | b'0'..=b'9' => self.plain_number()?,
                _ => return None,
            }
            if !complete {
                continue;
            }
            // What follows a value: the end of its containers, or the next member.
            loop {
                if depth == 0 {
                    return Some(());
                }
                self.skip_ws();
                let object = *open.get(depth)?;
                match self.peek()? {
                    b',' => {
                        self.i += 1;
                        if object {
                            self.skip_ws();
                            self.key()?;
                        }
                        break;
                    }
                    b'}' if object => {}
                    b']' if !object => {}
                    _ => return None,
                }
                self.i += 1;
                depth -= 1;
            }
        }
    }

    /// A member name in `data` and its colon.
    fn key(&mut self) -> Option<()> {
        self.plain_string()?;
        self.skip_ws();
        self.eat(b':')
    }

    /// A member's value other than `data`: a string without escapes, a boolean, `null` or an
    /// integer short enough to be 32-bit.
    fn scalar(&mut self) -> Option<Scalar<'a>> {
        match self.peek()? {
            b'"' => self.string().map(|s| Scalar::Text(Cow::Borrowed(s))),
            b't' => self.literal("true").map(|()| Scalar::Bool(true)),
            b'f' => self.literal("false").map(|()| Scalar::Bool(false)),
            b'n' => self.literal("null").map(|()| Scalar::Null),
            _ => {
                let start = self.i;
                self.eat_if(b'-');
                let digits = self.digits();
                // `-0` reads as a float; a leading zero is a syntax error.
                let first = self.text.as_bytes().get(self.i - digits).copied();
                if digits == 0
                    || digits > 9
                    || (first == Some(b'0') && (digits > 1 || self.i - start > 1))
                {
                    return None;
                }
                if matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
                    return None;
                }
                self.text
                    .get(start..self.i)?
                    .parse()
                    .ok()
                    .map(Scalar::Integer)
            }
        }
    }
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

    /// [`Journaled::read_lazily`] gives what the full decoder gives, or its error: each
    /// attribute it reads from the bytes, the head decoded later, the whole event, `data`.
    fn assert_lazy_read_agrees(bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        match (
            CloudEvent::from_structured_json(bytes),
            Journaled::read_lazily(bytes.to_vec()),
        ) {
            (Ok(full), Ok(lazy)) => {
                assert_eq!(lazy.id(), full.id, "{text}");
                assert_eq!(lazy.source(), full.source, "{text}");
                assert_eq!(lazy.ty(), full.ty, "{text}");
                assert_eq!(lazy.partition_key(), full.partition_key(), "{text}");
                assert_eq!(lazy.time(), full.time.as_deref(), "{text}");
                assert_eq!(lazy.has_data(), full.data.is_some(), "{text}");
                assert_eq!(&*lazy.structured_json(), bytes, "{text}");
                assert_eq!(&*lazy.data_bytes(), &full.data_bytes()[..], "{text}");
                // `data` is in the head only when it was not left unparsed.
                let (mut head, mut attributes) = (full.clone(), lazy.attributes().clone());
                (head.data, attributes.data) = (None, None);
                assert_eq!(attributes, head, "{text}");
                assert_eq!(lazy, full, "{text}");
            }
            (Err(full), Err(lazy)) => assert_eq!(lazy.to_string(), full.to_string(), "{text}"),
            (full, lazy) => panic!("{text}: {full:?} vs {lazy:?}"),
        }
    }

    /// What [`assert_lazy_read_agrees`] checks but the `data` bytes, for input that is not
    /// written compact as the journal writes it (whitespace, exponents): lazy and eager reads
    /// give the full decoder's event, or its error.
    fn assert_reads_agree(bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let full = CloudEvent::from_structured_json(bytes);
        for read in [
            Journaled::read_lazily(bytes.to_vec()),
            Journaled::from_structured_json(bytes.to_vec()),
        ] {
            match (&full, read) {
                (Ok(full), Ok(read)) => {
                    assert_eq!(read.id(), full.id, "{text}");
                    assert_eq!(read.source(), full.source, "{text}");
                    assert_eq!(read.ty(), full.ty, "{text}");
                    assert_eq!(read.partition_key(), full.partition_key(), "{text}");
                    assert_eq!(read.time(), full.time.as_deref(), "{text}");
                    assert_eq!(read.has_data(), full.data.is_some(), "{text}");
                    let (mut head, mut attributes) = (full.clone(), read.attributes().clone());
                    (head.data, attributes.data) = (None, None);
                    assert_eq!(attributes, head, "{text}");
                    assert_eq!(read, *full, "{text}");
                }
                (Err(full), Err(read)) => assert_eq!(read.to_string(), full.to_string(), "{text}"),
                (full, read) => panic!("{text}: {full:?} vs {read:?}"),
            }
        }
    }

    /// The layout of `bytes` as the lazy read found it (the test's stand-in for a writer's).
    fn layout_found(bytes: &[u8]) -> Layout {
        let lazy = Journaled::read_lazily(bytes.to_vec()).unwrap();
        let stored = lazy.stored.as_ref().unwrap();
        let marks = stored.marks.clone().unwrap();
        Layout::new(
            marks.id,
            marks.source,
            marks.ty,
            marks.partition_key.unwrap(),
            marks.time.unwrap(),
            stored.data.clone().unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn a_vouched_event_reads_as_the_lazy_read_does_without_reading_it() {
        let events = [
            widget(),
            widget()
                .subject("ns/\"escaped\"\n")
                .extension("k8sname", "a\\b"),
            widget().data(json!({"op": "created", "object": {"s": "\u{1}\u{d7ff}", "n": 1e300}})),
        ];
        for event in events {
            let bytes = event.to_structured_json();
            let layout = layout_found(&bytes);
            let vouched = Journaled::vouched(bytes.clone(), &layout).unwrap();
            assert!(vouched.head.get().is_none(), "nothing read");
            let lazy = Journaled::read_lazily(bytes.clone()).unwrap();
            assert_eq!(vouched.id(), lazy.id());
            assert_eq!(vouched.source(), lazy.source());
            assert_eq!(vouched.ty(), lazy.ty());
            assert_eq!(vouched.partition_key(), lazy.partition_key());
            assert_eq!(vouched.time(), lazy.time());
            assert!(vouched.has_data());
            assert_eq!(&*vouched.structured_json(), &bytes[..]);
            assert_eq!(&*vouched.data_bytes(), &event.data_bytes()[..]);
            assert_eq!(
                vouched.attributes(),
                lazy.attributes(),
                "the head, on demand"
            );
            assert_eq!(vouched, event);
        }
    }

    #[test]
    fn a_layout_that_does_not_fit_its_bytes_is_not_trusted() {
        let long = widget().to_structured_json();
        let layout = layout_found(&long);
        let short = CloudEvent::new("1", "/s", "t")
            .extension("partitionkey", "k")
            .time("2026-01-02T03:04:05Z")
            .data(json!({}))
            .to_structured_json();
        let read = Journaled::vouched(short.clone(), &layout).unwrap();
        assert_eq!(read.id(), "1", "read, not taken from the layout");
        assert_eq!(read.partition_key(), Some("k"));
        assert_eq!(&*read.data_bytes(), b"{}");
        let broken = b"{\"specversion\":\"1.0\"}".to_vec();
        let layout = Layout::new(0..1, 0..1, 0..1, 0..1, 0..1, 0..2).unwrap();
        assert!(
            Journaled::vouched(broken, &layout).is_err(),
            "bytes the layout does not fit are judged as any others"
        );
    }

    #[test]
    fn a_lazy_read_decodes_no_attribute_until_one_is_asked_for() {
        let event = widget();
        let bytes = event.to_structured_json();
        let lazy = Journaled::read_lazily(bytes.clone()).unwrap();
        assert_eq!(lazy.id(), "u:7:updated");
        assert_eq!(lazy.partition_key(), Some("ns/a"));
        assert_eq!(lazy.time(), Some("2026-01-02T03:04:05.678Z"));
        assert_eq!(lazy.source(), "k8s://prod/example.com/widgets");
        assert_eq!(lazy.ty(), "t.updated");
        assert_eq!(&*lazy.structured_json(), &bytes[..]);
        assert!(lazy.head.get().is_none(), "nothing above decoded the head");
        assert!(lazy.has_data());
        assert!(
            lazy.head.get().is_none(),
            "nor did asking whether it has data"
        );
        assert_eq!(lazy.attributes().subject.as_deref(), Some("ns/a\u{0}b"));
        assert!(lazy.attributes().data.is_none(), "data is left unparsed");
        assert_eq!(lazy, event);
        // The eager read decodes the head at once.
        let eager = Journaled::from_structured_json(bytes).unwrap();
        assert!(eager.head.get().is_some());
    }

    #[test]
    fn lazy_and_eager_reads_agree_on_escapes_and_many_extensions() {
        let mut many = widget().extension("partitionkey", "ns/\"quoted\"\n");
        for i in 0..40 {
            many = many.extension(format!("x{i}"), if i % 2 == 0 { "v" } else { "" });
        }
        let cases = [
            many.to_structured_json(),
            CloudEvent::new("u:\u{7f}:é", "k8s://p/\"g\"/w", "t\\x")
                .time("2026-01-02T03:04:05Z")
                .extension("partitionkey", "ns/a")
                .to_structured_json(),
            widget().datacontenttype("text/plain").data(json!("hi")).to_structured_json(),
            CloudEvent::new("1", "/s", "t")
                .extension("partitionkey", true)
                .to_structured_json(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","partitionkey":"a\u0062"}"#
                .to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","partitionkey":""}"#
                .to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","x1":"a","x2":"b","x3":"c","x4":"d","x5":"e","x6":"f","x7":"g","x8":"h","x9":"i","x10":"j","x11":"k","x12":"l","x13":"m","x14":"n","x15":"o","x16":"p","x17":"q","x1":"r"}"#
                .to_vec(),
        ];
        for bytes in cases {
            assert_lazy_read_agrees(&bytes);
            match (
                CloudEvent::from_structured_json(&bytes),
                Journaled::from_structured_json(bytes.clone()),
            ) {
                (Ok(full), Ok(cheap)) => assert_eq!(cheap, full),
                (Err(full), Err(cheap)) => assert_eq!(cheap.to_string(), full.to_string()),
                (full, cheap) => panic!("{full:?} vs {cheap:?}"),
            }
        }
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
            // Members given twice, in every order that decides differently: the last one wins.
            br#"{"specversion":"1.0","id":"1","id":"2","source":"/s","type":"t"}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","subject":null,"subject":"a"}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","ext":"a","ext":null}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","ext":null,"ext":"a"}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","ext":"a","ext":true}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":{"a":1},"data":[2]}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":1,"data_base64":null}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data_base64":null,"data_base64":"AA=="}"#.to_vec(),
            // Escaped member names are the names they spell.
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","ext":"x","data":{}}"#.to_vec(),
            // Attributes that are not strings, extensions outside the CloudEvents types.
            br#"{"specversion":"1.0","id":1,"source":"/s","type":"t"}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","time":{"a":1}}"#.to_vec(),
            br#"{"specversion":null,"id":"1","source":"/s","type":"t"}"#.to_vec(),
            br#"{"specversion":"1.0","id":null,"source":"/s","type":"t"}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","ext":2147483647,"neg":-2147483648}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","ext":2147483648}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","ext":1.0}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","Ext":"x"}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","time":"yesterday"}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"Application/CloudEvents+JSON","data":{"a":1}}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"text/plain","data":"hi","data":null}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t"} x"#.to_vec(),
            // What the one pass over `data` (`plain`) hands to the check, and what it need not.
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":{"uid":"3dcc3f82-11e9","n":1e+300,"m":-2.5e-30,"b":[true,false,null]}}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":{"s":"1e400 \"\\ \u0001"}}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":{"s":"\\ud800"}}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":[1.5e400]}"#.to_vec(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":[-0.5E+309]}"#.to_vec(),
        ];
        // Integers around the edge of an `f64`'s range, which a parse refuses past it (their
        // `data` bytes are not what encoding the parsed number gives, so only the outcome is
        // compared).
        for digits in [300, 308, 309, 310, 400] {
            let bytes = format!(
                r#"{{"specversion":"1.0","id":"1","source":"/s","type":"t","data":[-{}]}}"#,
                "9".repeat(digits)
            )
            .into_bytes();
            match (
                CloudEvent::from_structured_json(&bytes),
                Journaled::from_structured_json(bytes.clone()),
            ) {
                (Ok(full), Ok(cheap)) => assert_eq!(cheap, full),
                (Err(full), Err(cheap)) => assert_eq!(cheap.to_string(), full.to_string()),
                (full, cheap) => panic!("{digits} digits: {full:?} vs {cheap:?}"),
            }
        }
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
            assert_lazy_read_agrees(&bytes);
        }
    }

    /// An event as herald writes it: the attributes of a change, an object with the shapes
    /// Kubernetes objects have (escapes, unicode, fractions, empty and nested containers).
    fn rendered() -> Vec<u8> {
        let mut event = CloudEvent::new(
            "3dcc3f82-11e9:1234:updated",
            "k8s://prod/example.com/widgets",
            "com.example.widget.updated",
        )
        .subject("ns/a")
        .time("2026-01-02T03:04:05.678Z")
        .datacontenttype("application/json")
        .dataschema("https://herald.dev/schemas/data/v1");
        for (name, value) in [
            ("k8sgroup", "example.com"),
            ("partitionkey", "ns/a"),
            ("sequence", "00000000000000001234"),
        ] {
            event = event.extension(name, value);
        }
        event
            .extension("resync", false)
            .extension("count", -42)
            .data(json!({
                "op": "updated",
                "object": {
                    "metadata": {"name": "a", "labels": {}, "finalizers": [], "generation": 0},
                    "spec": {"s": "q\"b\\c\n/\t é ✓", "n": [-12.5, 0, 0.25, 1e3, 9_007_199_254_740_993_u64], "x": [[{}], [null, true, false]]},
                },
                "patch": [{"op": "replace", "path": "/spec/n", "value": 1}],
                "resync": false,
            }))
            .to_structured_json()
    }

    #[test]
    fn the_scan_reads_what_herald_writes_without_serde() {
        let bytes = rendered();
        let view = scan(&bytes).unwrap();
        assert!(view.marks(&bytes).is_some());
        assert_eq!(view.extensions.iter().count(), 5);
        assert_lazy_read_agrees(&bytes);
        // Whitespace between the tokens too.
        let value: Value = serde_json::from_slice(&bytes).unwrap();
        let pretty = serde_json::to_vec_pretty(&value).unwrap();
        assert!(scan(&pretty).is_some());
        assert_reads_agree(&pretty);
        // What the scan leaves to serde: escapes in attributes, `\u` and exponents in `data`.
        for other in [
            br#"{"specversion":"1.0","id":"\u0031","source":"/s","type":"t"}"#.as_slice(),
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":{"s":"\u00e9"}}"#,
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":[1e5]}"#,
            br#"{"specversion":"1.0","id":"1","source":"/s","type":"t","x":-0}"#,
        ] {
            assert!(scan(other).is_none(), "{}", String::from_utf8_lossy(other));
            assert_reads_agree(other);
        }
    }

    /// The scan's limits, on each side: what it takes at the limit it reads itself, past it it
    /// leaves to serde (an off-by-one would only slow the fast path, so nothing else would fail).
    #[test]
    fn the_scan_reads_up_to_its_limits_and_leaves_what_is_past_them_to_serde() {
        let event = |extra: &str, data: &str| {
            format!(
                r#"{{"specversion":"1.0","id":"1","source":"/s","type":"t"{extra},"data":{data}}}"#
            )
        };
        let nested = |depth: usize| format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        let number = |digits: usize| format!("1.{}", "5".repeat(digits - 1));
        let cases = [
            (
                event(r#","x":123456789"#, "1"),
                event(r#","x":1234567890"#, "1"),
            ),
            (event("", &nested(99)), event("", &nested(100))),
            (
                event("", &number(PLAIN_DIGITS)),
                event("", &number(PLAIN_DIGITS + 1)),
            ),
        ];
        for (at, past) in cases {
            assert!(scan(at.as_bytes()).is_some(), "{at}");
            assert!(scan(past.as_bytes()).is_none(), "{past}");
            assert_reads_agree(at.as_bytes());
            assert_reads_agree(past.as_bytes());
        }
    }

    /// Every one-byte corruption of a rendered event, read by the scan (or refused by it and read
    /// by serde): the outcome is the full decoder's, event or error.
    #[test]
    fn the_scan_agrees_with_the_full_decoder_on_every_corruption() {
        let bytes = rendered();
        let edits: &[Option<u8>] = &[
            None,
            Some(b'"'),
            Some(b'\\'),
            Some(b'{'),
            Some(b'}'),
            Some(b'['),
            Some(b']'),
            Some(b','),
            Some(b':'),
            Some(b'0'),
            Some(b'-'),
            Some(b'.'),
            Some(b'e'),
            Some(b' '),
            Some(0x01),
            Some(0xff),
        ];
        for i in 0..bytes.len() {
            for edit in edits {
                let mut corrupt = bytes.clone();
                match edit {
                    None => {
                        corrupt.remove(i);
                    }
                    Some(b) => corrupt[i] = *b,
                }
                assert_reads_agree(&corrupt);
            }
        }
    }

    #[test]
    fn string_stop_finds_the_first_quote_escape_or_control_character() {
        let slow = |b: &[u8]| b.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20);
        let mut cases: Vec<Vec<u8>> = vec![Vec::new(), b"abc".to_vec(), "é✓ x".as_bytes().to_vec()];
        // Fillers below and at or above 0x80 (é is 0xC3 0xA9), so the eight-byte step meets
        // both in front of the stop.
        for (len, filler) in
            (0..20).flat_map(|len| [b'a', 0xc3, 0xa9, 0x80, 0xff].map(|f| (len, f)))
        {
            for stop in [b'"', b'\\', 0x00, 0x1f, b'\n'] {
                for at in 0..len {
                    let mut bytes = vec![filler; len];
                    bytes[at] = stop;
                    // A later byte that a borrow could mark, and bytes just above the limits.
                    bytes.extend_from_slice(&[0x01, 0x20, b'#', b']', 0xff]);
                    cases.push(bytes);
                }
            }
        }
        for bytes in cases {
            assert_eq!(string_stop(&bytes), slow(&bytes), "{bytes:?}");
        }
    }
}
