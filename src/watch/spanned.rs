//! A watched object decoded into the bytes `serde_json::to_vec` writes for it and the spans the
//! recorder reads in them, with no [`Value`] tree: for a resource whose recording never reads the
//! tree (no `when`, `changed`, `ignoreFields`, redaction or status-only skip; see
//! `Recorder::spans_path`), the tree, its hashed keys and its strings were a fifth of herald's
//! CPU per change, and the recorder only needed the bytes (the index entry, the event's
//! `data.object`), a few `metadata` strings (the attributes) and the two states' difference
//! (the patch, which [`event::write_diff_spans`] writes from the bytes).
//!
//! The bytes are written as [`Decoded`](super::Decoded) writes them (managedFields skipped the
//! same way), so a [`Spanned`] that cannot take this path (a repeated member, nesting deep enough
//! for the read-back check, escapes in the identifying strings, a member named like the index's
//! own) is parsed into the very `Value` `Decoded` gives ([`Spanned::into_tree`]).

use std::fmt;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Number, Value};

use crate::event::spans::{self, Member};
use crate::event::{Ident, write_escaped};

/// Objects nested deeper than this take the `Value` path, where the recorder reads back an event
/// that nests near `serde_json`'s limit (see `sync::DEEP`).
pub const DEEP: usize = 100;

/// An object as compact bytes and the spans the recorder reads in them.
#[derive(Debug, Clone, PartialEq)]
pub struct Spanned {
    /// `serde_json::to_vec` of the object (with both members of a repeated one, see `exact`).
    pub bytes: Vec<u8>,
    /// The object's own members (none when it is not an object).
    top: Vec<Member>,
    /// The text (inside the quotes) of `metadata`'s `name`, `namespace`, `uid` and
    /// `resourceVersion` when they are strings without escapes; none when absent, null, or not
    /// [`plain`](Self::plain). Offsets in 32 bits: a state is kept by the thousand.
    texts: [Option<(u32, u32)>; 4],
    /// `metadata.generation` as [`Value::as_i64`] reads it.
    generation: Option<i64>,
    /// Those four are absent, null, or strings without escapes.
    plain_meta: bool,
    /// No object anywhere repeated a member.
    exact: bool,
    /// How deep containers nest (a scalar is 0).
    depth: usize,
}

/// The `metadata` members [`Spanned`] keeps spans of, in its `meta` order.
pub(super) const META: [&str; 5] = ["name", "namespace", "uid", "resourceVersion", "generation"];
const NAME: usize = 0;
const NAMESPACE: usize = 1;
const UID: usize = 2;
const RV: usize = 3;
const GENERATION: usize = 4;

impl Spanned {
    /// Reads stored bytes (an index entry) as the decoder would have spanned them; `None` when
    /// they do not parse.
    pub fn index(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice::<Spans<false>>(bytes)
            .ok()
            .map(|s| s.0)
    }

    /// The object parsed into a [`Value`], with its bytes when they are that value's
    /// serialization (as [`Decoded`](super::Decoded) gives them).
    pub fn into_tree(self) -> (Value, Option<Vec<u8>>) {
        // The bytes are serde_json's own output (float_roundtrip: numbers read back bit for bit),
        // so they parse, into the value they were written from; a repeated member parses as
        // `Value` keeps it (the last value in the first one's place), as from the line.
        let value = serde_json::from_slice(&self.bytes).unwrap_or(Value::Null);
        (value, self.exact.then_some(self.bytes))
    }

    /// The object [`scan`](super::scan) read: `bytes` are what the decoder would have written
    /// (the scanner only takes input it can copy as is), `top` and `meta` where its members lie in
    /// them, no member repeated.
    pub(super) fn scanned(
        bytes: Vec<u8>,
        top: Vec<Member>,
        meta: &[Option<(usize, usize)>; 5],
        depth: usize,
    ) -> Self {
        let mut s = Self {
            bytes,
            top,
            texts: [None; 4],
            generation: None,
            plain_meta: false,
            exact: true,
            depth,
        };
        s.finish(meta);
        s
    }

    /// Reads the identifying members (`meta`: where the values of [`META`] lie) once the object
    /// is written (the recorder reads them a few times per change).
    fn finish(&mut self, meta: &[Option<(usize, usize)>; 5]) {
        let b = &self.bytes;
        self.plain_meta = true;
        for i in [NAME, NAMESPACE, UID, RV] {
            let Some(span) = meta[i] else {
                continue;
            };
            let raw = spans::at(b, span);
            if raw == b"null" {
                continue;
            }
            // The text inside the quotes of a string without escapes (utf-8: written from a str).
            let text = (span.1 - span.0 >= 2 && raw.first() == Some(&b'"'))
                .then_some((span.0 + 1, span.1 - 1))
                .filter(|&inner| !spans::at(b, inner).contains(&b'\\'))
                .and_then(|(start, end)| {
                    Some((u32::try_from(start).ok()?, u32::try_from(end).ok()?))
                });
            self.texts[i] = text;
            self.plain_meta &= text.is_some();
        }
        // `Value::as_i64`: an integer in i64's range; a float's text never parses as one.
        self.generation = meta[GENERATION]
            .and_then(|span| std::str::from_utf8(spans::at(b, span)).ok())
            .and_then(|text| text.parse::<i64>().ok());
    }

    /// `metadata.<META[i]>` as [`event::members::meta_str`](crate::event::members::meta_str)
    /// reads it, for a [`plain`](Self::plain) object.
    fn meta_str(&self, i: usize) -> &str {
        self.texts[i]
            .and_then(|(start, end)| self.bytes.get(start as usize..end as usize))
            .and_then(|text| std::str::from_utf8(text).ok())
            .unwrap_or("")
    }

    /// The text of `metadata.uid` and of `metadata.resourceVersion` as [`ident`](Self::ident)
    /// reads them, without checking again that they are UTF-8 (they were written from `str`s):
    /// what tells two states of one object apart, compared as bytes.
    pub fn version(&self) -> (&[u8], &[u8]) {
        let text = |i: usize| {
            self.texts[i]
                .and_then(|(start, end)| self.bytes.get(start as usize..end as usize))
                .unwrap_or_default()
        };
        (text(UID), text(RV))
    }

    /// Whether the recorder can keep this object as its bytes: no repeated member, shaped like a
    /// Kubernetes object (a `metadata` object whose identifying members are strings or null), its
    /// identifying strings free of escapes (read in place), no member named like the index's own
    /// (`@herald…`, which the `Value` path takes out), and nested less than [`DEEP`].
    pub fn plain(&self) -> bool {
        let b = &self.bytes;
        self.exact
            && self.depth <= DEEP
            && self
                .member(b"metadata")
                .is_some_and(|m| spans::at(b, m.value).first() == Some(&b'{'))
            && self.plain_meta
            && !self
                .top
                .iter()
                .any(|m| spans::at(b, m.key).starts_with(b"@herald"))
    }

    /// The object's member `key` (its key's text as written).
    fn member(&self, key: &[u8]) -> Option<Member> {
        self.top
            .iter()
            .find(|m| spans::at(&self.bytes, m.key) == key)
            .copied()
    }

    /// What the event's attributes are made of.
    pub fn ident(&self) -> Ident<'_> {
        Ident {
            uid: self.meta_str(UID),
            resource_version: self.meta_str(RV),
            name: self.meta_str(NAME),
            namespace: self.meta_str(NAMESPACE),
            generation: self.generation,
        }
    }

    /// Lets go of the spare room the decoder's buffers grew with (up to as much again as the
    /// bytes), for a state kept beyond its change: [`Known`](super::sync)'s bound counts the bytes.
    pub fn shrink(&mut self) {
        self.bytes.shrink_to_fit();
        self.top.shrink_to_fit();
    }

    /// The object's members, for [`event::write_diff_spans`].
    pub fn object(&self) -> spans::Members<'_> {
        spans::Members::new(&self.bytes, std::borrow::Cow::Borrowed(&self.top))
    }
}

/// The decoder of a [`Spanned`], `metadata.managedFields` left out when `STRIP` (as
/// [`Decoded`](super::Decoded)).
#[derive(Debug, Clone, PartialEq)]
pub struct Spans<const STRIP: bool>(pub Spanned);

impl<'de, const STRIP: bool> Deserialize<'de> for Spans<STRIP> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut s = Spanned {
            bytes: Vec::with_capacity(512),
            top: Vec::with_capacity(8),
            texts: [None; 4],
            generation: None,
            plain_meta: false,
            exact: true,
            depth: 0,
        };
        let mut keys = Vec::with_capacity(32);
        let mut meta = [None; 5];
        deserializer.deserialize_any(Writer {
            s: &mut s,
            keys: &mut keys,
            meta: &mut meta,
            level: Level::Top,
            depth: 0,
            strip: STRIP,
        })?;
        s.finish(&meta);
        Ok(Self(s))
    }
}

/// Where the writer is: the object itself, its `metadata`, or anywhere else.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Top,
    Metadata,
    Inner,
}

/// Writes the compact JSON of what it visits, and the spans of the top and `metadata` members.
struct Writer<'b> {
    s: &'b mut Spanned,
    /// The keys (spans in the bytes) of the objects being written, innermost last: each object
    /// checks its own for a repeat when it ends.
    keys: &'b mut Vec<(usize, usize)>,
    /// Where the values of [`META`] lie.
    meta: &'b mut [Option<(usize, usize)>; 5],
    level: Level,
    /// How many containers enclose the value.
    depth: usize,
    strip: bool,
}

impl Writer<'_> {
    fn child(&mut self, level: Level) -> Writer<'_> {
        Writer {
            s: &mut *self.s,
            keys: &mut *self.keys,
            meta: &mut *self.meta,
            level,
            depth: self.depth + 1,
            strip: self.strip,
        }
    }

    fn number(self, n: &Number) {
        if serde_json::to_writer(&mut self.s.bytes, n).is_err() {
            self.s.exact = false;
        }
    }

    fn string(self, v: &str) {
        let out = &mut self.s.bytes;
        out.push(b'"');
        write_escaped(out, v);
        out.push(b'"');
    }

    fn contained(&mut self) {
        self.s.depth = self.s.depth.max(self.depth + 1);
    }
}

impl<'de> DeserializeSeed<'de> for Writer<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Writer<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.s
            .bytes
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }

    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.number(&v.into());
        Ok(())
    }

    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.number(&v.into());
        Ok(())
    }

    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        match Number::from_f64(v) {
            Some(n) => self.number(&n),
            None => self.s.bytes.extend_from_slice(b"null"),
        }
        Ok(())
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.string(v);
        Ok(())
    }

    fn visit_none<E>(self) -> Result<(), E> {
        self.s.bytes.extend_from_slice(b"null");
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.s.bytes.extend_from_slice(b"null");
        Ok(())
    }

    fn visit_seq<A: de::SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        self.contained();
        self.s.bytes.push(b'[');
        let mut first = true;
        loop {
            // The separator goes in before the element is known to exist; taken back at the end.
            let mark = self.s.bytes.len();
            if !first {
                self.s.bytes.push(b',');
            }
            if seq.next_element_seed(self.child(Level::Inner))?.is_none() {
                self.s.bytes.truncate(mark);
                break;
            }
            first = false;
        }
        self.s.bytes.push(b']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        self.contained();
        self.s.bytes.push(b'{');
        let base = self.keys.len();
        let mut first = true;
        loop {
            let mark = self.s.bytes.len();
            if !first {
                self.s.bytes.push(b',');
            }
            let key_at = self.s.bytes.len() + 1;
            let Some(key) = map.next_key_seed(Key(&mut self.s.bytes))? else {
                self.s.bytes.truncate(mark);
                break;
            };
            let key_span = (key_at, self.s.bytes.len() - 1);
            let (level, meta) = match (self.level, key) {
                (Level::Top, KeyKind::Metadata) => (Level::Metadata, None),
                (Level::Metadata, KeyKind::ManagedFields) if self.strip => {
                    self.s.bytes.truncate(mark);
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
                (Level::Metadata, KeyKind::Meta(i)) => (Level::Inner, Some(i)),
                _ => (Level::Inner, None),
            };
            first = false;
            self.s.bytes.push(b':');
            let value_at = self.s.bytes.len();
            map.next_value_seed(self.child(level))?;
            let value_span = (value_at, self.s.bytes.len());
            self.keys.push(key_span);
            match (self.level, meta) {
                (Level::Top, _) => self.s.top.push(Member {
                    key: key_span,
                    value: value_span,
                }),
                (Level::Metadata, Some(i)) => self.meta[i] = Some(value_span),
                _ => {}
            }
        }
        self.s.bytes.push(b'}');
        if repeats(&self.s.bytes, &self.keys[base..]) {
            self.s.exact = false;
        }
        self.keys.truncate(base);
        Ok(())
    }
}

/// Whether two of one object's keys are the same (the same text is the same bytes).
pub(super) fn repeats(b: &[u8], keys: &[(usize, usize)]) -> bool {
    if keys.len() <= 16 {
        return keys.iter().enumerate().any(|(i, &k)| {
            keys[..i]
                .iter()
                .any(|&j| spans::at(b, j) == spans::at(b, k))
        });
    }
    let mut sorted: Vec<&[u8]> = keys.iter().map(|&k| spans::at(b, k)).collect();
    sorted.sort_unstable();
    sorted.windows(2).any(|w| w[0] == w[1])
}

/// What a key is to the writer.
#[derive(Clone, Copy)]
enum KeyKind {
    Metadata,
    ManagedFields,
    /// One of [`META`], by its index.
    Meta(usize),
    Other,
}

/// Writes a key (quoted, escaped) and says what it is, without allocating it.
struct Key<'b>(&'b mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = KeyKind;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<KeyKind, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = KeyKind;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a string key")
    }

    fn visit_str<E>(self, v: &str) -> Result<KeyKind, E> {
        self.0.push(b'"');
        write_escaped(self.0, v);
        self.0.push(b'"');
        Ok(match v {
            "metadata" => KeyKind::Metadata,
            "managedFields" => KeyKind::ManagedFields,
            _ => META
                .iter()
                .position(|m| *m == v)
                .map_or(KeyKind::Other, KeyKind::Meta),
        })
    }
}

impl<const STRIP: bool> super::WatchedObject for Spans<STRIP> {
    fn scan(line: &str) -> Option<kube::api::WatchEvent<Self>> {
        use kube::api::WatchEvent;
        let (kind, s) = super::scan::watch_line(line, STRIP)?;
        let s = Self(s);
        Some(match kind {
            super::scan::Kind::Added => WatchEvent::Added(s),
            super::scan::Kind::Modified => WatchEvent::Modified(s),
            super::scan::Kind::Deleted => WatchEvent::Deleted(s),
        })
    }

    fn into_parts(self) -> Result<(Value, Option<Vec<u8>>), kube::Error> {
        let (value, json) = self.0.into_tree();
        let (value, _) = value.into_parts()?;
        Ok((value, json))
    }

    fn into_object(self) -> Result<super::Object, kube::Error> {
        if self.0.plain() {
            Ok(super::Object::Spans(self.0))
        } else {
            let (value, json) = self.into_parts()?;
            Ok(super::Object::Tree(value, json))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::event;
    use crate::watch::{Stripped, Whole};

    /// The decoders write the same bytes for any line, and a plain object's identity is what the
    /// `Value` gives.
    #[test]
    fn spans_write_what_the_value_decoder_writes() {
        let texts = [
            r#"{"metadata":{"name":"a\u003cb","uid":"\ud83d\ude00 é \u0001","generation":3},"spec":{"a":1}}"#,
            r#"{"metadata":{"managedFields":[{"m":1}],"name":"x","namespace":"n","resourceVersion":"7","generation":1.0},"n":[0,-0,1.0,1e3,-1.5E-7,12345678901234567890,123456789012345678901234,-9223372036854775808,0.1]}"#,
            r#"{"metadata":{},"a":[],"b":{},"c":[[],[{}],{"d":[null,true,false]}],"e":"","f":null}"#,
            r#" { "metadata" : { "name" : "spaced" , "managedFields" : [ ] } , "spec" : [ 1 , 2 ] } "#,
            r#"{"metadata":{"name":"a","name":"b"}}"#,
            r#"{"spec":1,"metadata":{},"spec":2}"#,
            r#"{"metadata":{"generation":9223372036854775808},"x":{"k":1,"k":1}}"#,
            r#"{"metadata":"text"}"#,
            r#""text""#,
            r#"[1,{"metadata":{"managedFields":[]}}]"#,
            r#"null"#,
        ];
        for text in texts {
            let Whole { value, json } = serde_json::from_str(text).unwrap();
            let Spans::<false>(s) = serde_json::from_str(text).unwrap();
            assert_eq!(json.is_some(), s.exact, "{text}");
            if let Some(json) = &json {
                assert_eq!(&s.bytes, json, "{text}");
            }
            assert_eq!(s.clone().into_tree(), (value.clone(), json), "{text}");
            if s.plain() {
                let ident = s.ident();
                let meta = event::members::meta_str;
                assert_eq!(ident.name, meta(&value, "name"));
                assert_eq!(ident.namespace, meta(&value, "namespace"));
                assert_eq!(ident.uid, meta(&value, "uid"));
                assert_eq!(ident.resource_version, meta(&value, "resourceVersion"));
                assert_eq!(
                    ident.generation,
                    value
                        .pointer("/metadata/generation")
                        .and_then(Value::as_i64)
                );
            }
            let Stripped { value, json } = serde_json::from_str(text).unwrap();
            let Spans::<true>(s) = serde_json::from_str(text).unwrap();
            if let Some(json) = &json {
                assert_eq!(&s.bytes, json, "{text}");
            }
            assert_eq!(s.into_tree(), (value, json), "{text}");
        }
        // Escapes in an identifying string, a repeat and a member named like the index's own
        // take the `Value` path.
        for (text, plain) in [
            (r#"{"metadata":{"name":"a","uid":"u"}}"#, true),
            (r#"{"metadata":{"name":"a\"b"}}"#, false),
            (r#"{"metadata":{"name":"a"},"metadata":{}}"#, false),
            (r#"{"metadata":{"name":"a"},"@heraldRedacted":{}}"#, false),
            (r#"{"metadata":{"name":1}}"#, false),
            (r#"{"metadata":[]}"#, false),
        ] {
            let Spans::<true>(s) = serde_json::from_str(text).unwrap();
            assert_eq!(s.plain(), plain, "{text}");
        }
    }
}
