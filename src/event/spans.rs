//! Compact JSON read where it lies: the members of an object as spans of its bytes, without a
//! [`Value`](serde_json::Value) tree, for the recorder's states that stay as the bytes the watch's
//! decoder wrote ([`crate::watch::Spanned`]).
//!
//! The bytes are trusted to be what `serde_json::to_vec` writes (no whitespace, strings escaped
//! one way): the decoder and the serializer that wrote every index entry write nothing else. Equal
//! bytes are then equal values, and a key's bytes are the same wherever that key is written.
//! Anything that does not read as such gives `None`, and the caller takes the `Value` path.

use std::collections::HashMap;

/// One member of an object: where its key's text (inside the quotes, escaped) and its value lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// The key's text, without its quotes.
    pub key: (usize, usize),
    /// The value, whole.
    pub value: (usize, usize),
}

/// Where the string opening at `i` ends (just past its closing quote). `None` when it does not end,
/// or holds a control character, which JSON refuses in a string and no writer of these bytes
/// leaves there.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        // The delivery scan's search for a string's stop: its quote, an escape or a control
        // character, eight bytes a step (most of an object's bytes are its strings).
        j += herald_sink_core::journaled::string_stop(b.get(j..)?)?;
        match *b.get(j)? {
            b'"' => return Some(j + 1),
            // An escape: the escaped character is never the string's end.
            b'\\' => j += 2,
            _ => return None,
        }
    }
}

/// Where the value starting at `i` ends.
pub fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match *b.get(j)? {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let rest = b.get(i..)?;
            let len = rest
                .iter()
                .position(|c| matches!(c, b',' | b'}' | b']'))
                .unwrap_or(rest.len());
            Some(i + len)
        }
    }
}

/// The members of the object at `at` (its `{` to just past its `}`), in order, into `out`.
pub fn members(b: &[u8], at: (usize, usize), out: &mut Vec<Member>) -> Option<()> {
    let (start, end) = at;
    if b.get(start) != Some(&b'{') {
        return None;
    }
    let mut i = start + 1;
    if b.get(i) == Some(&b'}') {
        return (i + 1 == end).then_some(());
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(b, i)?;
        if b.get(key_end) != Some(&b':') {
            return None;
        }
        let value = (key_end + 1, value_end(b, key_end + 1)?);
        out.push(Member {
            key: (i + 1, key_end - 1),
            value,
        });
        match b.get(value.1)? {
            b',' => i = value.1 + 1,
            b'}' => return (value.1 + 1 == end).then_some(()),
            _ => return None,
        }
    }
}

/// The members of one object read one at a time, from its first or from any member's start: the
/// patch reads only the members where two states' bytes part ([`Cursor::seek`] past the equal
/// ones), from the spans already known (the decoder's top members) or from the bytes.
pub struct Cursor<'b> {
    b: &'b [u8],
    /// The object's `{` to just past its `}`.
    span: (usize, usize),
    /// Its members when already known, in order.
    known: Option<&'b [Member]>,
    /// The next member's index.
    index: usize,
    /// Where the next member's key opens (its quote), or the closing `}` once done.
    at: usize,
}

impl<'b> Cursor<'b> {
    /// At the first member of the object at `span`; `known` its members, when read already.
    /// `None` when it is not an object.
    pub fn new(b: &'b [u8], span: (usize, usize), known: Option<&'b [Member]>) -> Option<Self> {
        let (start, end) = span;
        if b.get(start) != Some(&b'{') || end < start + 2 || b.get(end - 1) != Some(&b'}') {
            return None;
        }
        let at = match known {
            Some(known) => known.first().map_or(end - 1, |m| m.key.0 - 1),
            None if b.get(start + 1) == Some(&b'}') => end - 1,
            None => start + 1,
        };
        Some(Self {
            b,
            span,
            known,
            index: 0,
            at,
        })
    }

    /// The bytes and where the object lies in them.
    pub fn object(&self) -> (&'b [u8], (usize, usize)) {
        (self.b, self.span)
    }

    /// How far the next member's start (or the closing `}`) lies from the object's end.
    pub fn left(&self) -> usize {
        self.span.1 - self.at
    }

    /// Whether every member was read.
    pub fn done(&self) -> bool {
        self.at + 1 == self.span.1
    }

    /// Where the next member opens, relative to the object's start.
    pub fn offset(&self) -> usize {
        self.at - self.span.0
    }

    /// Back or forth to the member opening at `offset` (relative to the object's start), the
    /// `index`th: a place this cursor or another over the same leading bytes read.
    pub fn seek(&mut self, offset: usize, index: usize) {
        self.at = self.span.0 + offset;
        self.index = index;
    }

    /// The next member; `Some(None)` once done, `None` when the bytes do not read as compact JSON.
    pub fn read(&mut self) -> Option<Option<Member>> {
        if self.done() {
            return Some(None);
        }
        let member = match self.known {
            Some(known) => *known.get(self.index)?,
            None => {
                let b = self.b;
                let i = self.at;
                if b.get(i) != Some(&b'"') {
                    return None;
                }
                let key_end = string_end(b, i)?;
                if b.get(key_end) != Some(&b':') {
                    return None;
                }
                Member {
                    key: (i + 1, key_end - 1),
                    value: (key_end + 1, value_end(b, key_end + 1)?),
                }
            }
        };
        self.index += 1;
        self.at = match self.b.get(member.value.1)? {
            b',' => member.value.1 + 1,
            b'}' if member.value.1 + 1 == self.span.1 => member.value.1,
            _ => return None,
        };
        Some(Some(member))
    }
}

/// The bytes of `span` in `b`.
pub fn at(b: &[u8], span: (usize, usize)) -> &[u8] {
    b.get(span.0..span.1).unwrap_or_default()
}

/// A key's text unescaped; `None` when it does not read as a string.
pub fn key_text(b: &[u8], key: (usize, usize)) -> Option<std::borrow::Cow<'_, str>> {
    let raw = at(b, key);
    if raw.contains(&b'\\') {
        // The key with its quotes is a JSON string.
        let quoted = b.get(key.0.checked_sub(1)?..key.1 + 1)?;
        serde_json::from_slice::<String>(quoted)
            .ok()
            .map(std::borrow::Cow::Owned)
    } else {
        std::str::from_utf8(raw)
            .ok()
            .map(std::borrow::Cow::Borrowed)
    }
}

/// Objects with more members than this are searched through a map once their orders part (as
/// [`super::members`] does).
const SCAN_MAX: usize = 16;

/// The members of one object with a lookup by key.
pub struct Members<'b> {
    b: &'b [u8],
    members: std::borrow::Cow<'b, [Member]>,
    by_key: Option<HashMap<&'b [u8], usize, foldhash::fast::RandomState>>,
}

impl<'b> Members<'b> {
    /// The object at `at` in `b`.
    pub fn read(b: &'b [u8], at: (usize, usize)) -> Option<Self> {
        let mut members = Vec::new();
        self::members(b, at, &mut members)?;
        Some(Self::new(b, members.into()))
    }

    /// An object of members already read.
    pub fn new(b: &'b [u8], members: std::borrow::Cow<'b, [Member]>) -> Self {
        Self {
            b,
            members,
            by_key: None,
        }
    }

    /// Its members, in order.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The bytes the object's spans point into.
    pub fn bytes(&self) -> &'b [u8] {
        self.b
    }

    /// The member whose key's text is `key` (the first, as `Map` keeps one).
    pub fn find(&mut self, key: &[u8]) -> Option<Member> {
        let b = self.b;
        if self.members.len() <= SCAN_MAX {
            return self.members.iter().find(|m| at(b, m.key) == key).copied();
        }
        let members = &self.members;
        let by_key = self.by_key.get_or_insert_with(|| {
            let mut map = HashMap::with_capacity_and_hasher(
                members.len(),
                foldhash::fast::RandomState::default(),
            );
            // The first of a repeated key, as a scan finds it.
            for (i, m) in members.iter().enumerate().rev() {
                map.insert(at(b, m.key), i);
            }
            map
        });
        by_key.get(key).map(|&i| self.members[i])
    }
}

/// The elements of the array at `at`, in order, into `out`.
fn elements(b: &[u8], at: (usize, usize), out: &mut Vec<(usize, usize)>) -> Option<()> {
    let (start, end) = at;
    if b.get(start) != Some(&b'[') {
        return None;
    }
    let mut i = start + 1;
    if b.get(i) == Some(&b']') {
        return (i + 1 == end).then_some(());
    }
    loop {
        let item = (i, value_end(b, i)?);
        out.push(item);
        match b.get(item.1)? {
            b',' => i = item.1 + 1,
            b']' => return (item.1 + 1 == end).then_some(()),
            _ => return None,
        }
    }
}

/// Whether a number's text is a float's (serde_json writes every float with a `.` or an
/// exponent, and no integer with either).
fn float_text(x: &[u8]) -> bool {
    x.iter().any(|c| matches!(c, b'.' | b'e' | b'E'))
}

/// Whether the value at `a` in `ab` equals the one at `b` in `bb` as [`Value`](serde_json::Value)s
/// do (what [`super::members::same`] answers for them parsed). Equal bytes are equal values;
/// unequal bytes are equal only through objects whose members come in another order (within
/// arrays: two objects of one state are walked by the caller), or floats that compare equal with
/// different spellings (`0.0` and `-0.0`).
pub fn same(ab: &[u8], a: (usize, usize), bb: &[u8], b: (usize, usize)) -> Option<bool> {
    let (x, y) = (at(ab, a), at(bb, b));
    if x == y {
        return Some(true);
    }
    match (x.first()?, y.first()?) {
        (b'{', b'{') => {
            let xo = Members::read(ab, a)?;
            let mut yo = Members::read(bb, b)?;
            if xo.members().len() != yo.members().len() {
                return Some(false);
            }
            for m in xo.members() {
                let Some(n) = yo.find(at(ab, m.key)) else {
                    return Some(false);
                };
                if !same(ab, m.value, bb, n.value)? {
                    return Some(false);
                }
            }
            Some(true)
        }
        (b'[', b'[') => {
            let (mut xs, mut ys) = (Vec::new(), Vec::new());
            elements(ab, a, &mut xs)?;
            elements(bb, b, &mut ys)?;
            if xs.len() != ys.len() {
                return Some(false);
            }
            for (&i, &j) in xs.iter().zip(&ys) {
                if !same(ab, i, bb, j)? {
                    return Some(false);
                }
            }
            Some(true)
        }
        (b'-' | b'0'..=b'9', b'-' | b'0'..=b'9') if float_text(x) && float_text(y) => {
            let (x, y) = (std::str::from_utf8(x).ok()?, std::str::from_utf8(y).ok()?);
            Some(x.parse::<f64>().ok()? == y.parse::<f64>().ok()?)
        }
        _ => Some(false),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn members_and_ends_of_compact_json() {
        let b = br#"{"a":1,"b\"c":"x\\\"}","d":[1,{"e":[]}],"f":{},"g":null}"#;
        let mut out = Vec::new();
        members(b, (0, b.len()), &mut out).unwrap();
        let keys: Vec<_> = out.iter().map(|m| key_text(b, m.key).unwrap()).collect();
        assert_eq!(keys, ["a", "b\"c", "d", "f", "g"]);
        let values: Vec<_> = out
            .iter()
            .map(|m| String::from_utf8_lossy(at(b, m.value)).into_owned())
            .collect();
        assert_eq!(
            values,
            ["1", r#""x\\\"}""#, r#"[1,{"e":[]}]"#, "{}", "null"]
        );
        // Quotes and escapes at every offset of the eight-byte step, beside bytes of 0x80 and up.
        for len in 0..20 {
            // The closing quote, after an escaped quote, after an escaped backslash.
            for (filler, end) in [("a", "\""), ("é", "\\\"\""), ("\u{7f}", "\\\\\"")] {
                let text = format!("\"{}{end}x", filler.repeat(len));
                let b = text.as_bytes();
                assert_eq!(string_end(b, 0), Some(b.len() - 1), "{text}");
            }
        }
        assert_eq!(string_end(b"\"abc", 0), None);
        assert_eq!(string_end(b"\"ab\ncd\"", 0), None, "a control character");
        assert_eq!(string_end(b"\"abcdefghijk\\", 0), None);
        let mut empty = Vec::new();
        members(b"{}", (0, 2), &mut empty).unwrap();
        assert!(empty.is_empty());
        for broken in [&b"{"[..], b"{\"a\"}", b"{\"a\":1", b"[1]", b"{\"a\":1]"] {
            assert!(members(broken, (0, broken.len()), &mut Vec::new()).is_none());
        }
        let many: Vec<String> = (0..40).map(|i| format!("\"k{i}\":{i}")).collect();
        let many = format!("{{{}}}", many.join(","));
        let mut o = Members::read(many.as_bytes(), (0, many.len())).unwrap();
        assert_eq!(at(many.as_bytes(), o.find(b"k39").unwrap().value), b"39");
        assert!(o.find(b"k40").is_none());
    }
}
