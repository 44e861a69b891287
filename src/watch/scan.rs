//! A strict single-pass reader of watch lines and LIST pages into [`Spanned`] objects, beside the
//! serde path ([`Spans`](super::Spans)), which re-wrote every token of every object through a
//! visitor (a tenth of herald's CPU in a catch-up, as much in an initial sync).
//!
//! It takes only the JSON whose bytes are already what `serde_json::to_vec` writes of it: no
//! whitespace, strings whose escapes are the ones serde_json writes (`\" \\ \b \t \n \f \r` and
//! `\u00xx` for the other control characters), integers in `i64`/`u64` (no floats, exponents or
//! `-0`), no member repeated, nested less than [`DEEP`]. The API server and the simulator send
//! compact JSON, so an object is one copy of its slice of the line (managedFields cut out) and
//! the spans the serde path would have recorded. Anything else — a Go escape such as `\u003c`, a
//! float, a `BOOKMARK` or `ERROR` line, invalid JSON of any kind — is declined (`None`) and the
//! caller decodes the line through serde as before, so what is taken is decoded as before and
//! what is refused ends as it did.

use super::spanned::{DEEP, META, Spanned, repeats};
use crate::event::spans::Member;

/// What a watch line changes, as far as the scanner reads lines (bookmarks and errors go to serde).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `ADDED`.
    Added,
    /// `MODIFIED`.
    Modified,
    /// `DELETED`.
    Deleted,
}

/// Reads a watch line `{"type":…,"object":{…}}` (either member order) whose type is `ADDED`,
/// `MODIFIED` or `DELETED`; managedFields left out when `strip`. `None`: decode it through serde.
pub fn watch_line(line: &str, strip: bool) -> Option<(Kind, Spanned)> {
    let mut s = Scanner::new(line.as_bytes(), strip);
    s.expect(b'{')?;
    let (mut kind, mut object) = (None, None);
    loop {
        let key = s.string()?;
        s.expect(b':')?;
        match s.at(key) {
            b"type" if kind.is_none() => {
                let text = s.string()?;
                kind = Some(match s.at(text) {
                    b"ADDED" => Kind::Added,
                    b"MODIFIED" => Kind::Modified,
                    b"DELETED" => Kind::Deleted,
                    _ => return None,
                });
            }
            b"object" if object.is_none() => object = Some(s.item()?),
            _ => return None,
        }
        match s.next()? {
            b',' => {}
            b'}' => break,
            _ => return None,
        }
    }
    s.at_end()?;
    Some((kind?, object?))
}

/// What a LIST page's `metadata` says, as the serde path reads it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PageMeta {
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `continue`.
    pub continue_: Option<String>,
}

/// Reads a LIST page `{…,"metadata":{…},"items":[{…},…]}`: its `metadata` strings and its items
/// (managedFields left out when `strip`). Other members are read and left, as serde leaves them.
/// `None`: decode the page through serde.
pub fn page(text: &str, strip: bool) -> Option<(PageMeta, Vec<Spanned>)> {
    let mut s = Scanner::new(text.as_bytes(), strip);
    s.expect(b'{')?;
    let (mut meta, mut items) = (None, None);
    if s.peek()? == b'}' {
        s.pos += 1;
    } else {
        loop {
            let key = s.string()?;
            s.expect(b':')?;
            match s.at(key) {
                b"metadata" if meta.is_none() => meta = Some(s.page_meta()?),
                b"items" if items.is_none() => items = Some(s.items()?),
                b"metadata" | b"items" => return None,
                _ => s.skip()?,
            }
            match s.next()? {
                b',' => {}
                b'}' => break,
                _ => return None,
            }
        }
    }
    s.at_end()?;
    Some((meta.unwrap_or_default(), items.unwrap_or_default()))
}

/// A byte that stands for itself inside a string (not `"`, `\` or a control character).
const PLAIN: [bool; 256] = {
    let mut t = [true; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = false;
        i += 1;
    }
    t[b'"' as usize] = false;
    t[b'\\' as usize] = false;
    t
};

/// Where the run of [`PLAIN`] bytes from `at` ends: eight bytes at a time while none of them is
/// `"`, `\` or a control character (most of a line is in strings), then byte by byte.
fn plain_run(b: &[u8], mut at: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const QUOTE: u64 = ONES * b'"' as u64;
    const BACKSLASH: u64 = ONES * b'\\' as u64;
    const SPACE: u64 = ONES * 0x20;
    while let Some(Ok(word)) = b.get(at..at + 8).map(<[u8; 8]>::try_from) {
        let x = u64::from_le_bytes(word);
        let (q, s) = (x ^ QUOTE, x ^ BACKSLASH);
        // A zero byte in `q` or `s`, or a byte below 0x20 in `x`: the lowest byte flagged is the
        // first such byte (a borrow only carries upward from a byte that is one).
        let special =
            (q.wrapping_sub(ONES) & !q | s.wrapping_sub(ONES) & !s | x.wrapping_sub(SPACE) & !x)
                & HIGH;
        if special != 0 {
            return at + (special.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while b.get(at).is_some_and(|&c| PLAIN[usize::from(c)]) {
        at += 1;
    }
    at
}

/// Integers of at most this many digits fit `i64` and `u64` whatever they are.
const DIGITS: usize = 18;

/// Where the scanner is in the input, and what it gathers of the object it reads.
struct Scanner<'a> {
    b: &'a [u8],
    pos: usize,
    strip: bool,
    /// Reading managedFields, which the object leaves out: nothing is recorded.
    skipping: bool,
    /// The object's members (spans in the input).
    top: Vec<Member>,
    /// Where `metadata`'s [`META`] values lie (in the input).
    meta: [Option<(usize, usize)>; 5],
    /// The managedFields member cut out of the object, with one of its commas.
    cut: Option<(usize, usize)>,
    /// How deep the object's containers nest.
    depth: usize,
    /// The keys of the objects being read, innermost last (spans in the input).
    keys: Vec<(usize, usize)>,
}

/// Where the scanner is: the object itself, its `metadata`, or anywhere else.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Top,
    Metadata,
    Inner,
}

impl<'a> Scanner<'a> {
    /// Only whitespace is left, as serde_json allows after a value: the API server ends every
    /// response body with a newline (Go's `json.Encoder`).
    fn at_end(&self) -> Option<()> {
        self.b
            .get(self.pos..)?
            .iter()
            .all(|c| matches!(c, b' ' | b'\t' | b'\r' | b'\n'))
            .then_some(())
    }

    fn new(b: &'a [u8], strip: bool) -> Self {
        Self {
            b,
            pos: 0,
            strip,
            skipping: false,
            top: Vec::new(),
            meta: [None; 5],
            cut: None,
            depth: 0,
            keys: Vec::with_capacity(32),
        }
    }

    fn at(&self, span: (usize, usize)) -> &'a [u8] {
        self.b.get(span.0..span.1).unwrap_or_default()
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.pos += 1;
        Some(c)
    }

    fn expect(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }

    /// One object, as the serde path writes it into a [`Spanned`].
    fn item(&mut self) -> Option<Spanned> {
        let start = self.pos;
        if self.peek()? != b'{' {
            return None;
        }
        self.top = Vec::with_capacity(8);
        self.meta = [None; 5];
        self.cut = None;
        self.depth = 0;
        self.object(Level::Top, 0)?;
        let end = self.pos;
        let (cut_at, cut_len) = self.cut.map_or((end, 0), |(a, b)| (a, b - a));
        let mut bytes = Vec::with_capacity(end - start - cut_len);
        bytes.extend_from_slice(self.b.get(start..cut_at)?);
        bytes.extend_from_slice(self.b.get(cut_at + cut_len..end)?);
        // Input offsets to the bytes' own: what follows the cut moves back by its length.
        let to = |p: usize| (if p > cut_at { p - cut_len } else { p }) - start;
        let span = |(a, b): (usize, usize)| (to(a), to(b));
        let mut top = std::mem::take(&mut self.top);
        for m in &mut top {
            *m = Member {
                key: span(m.key),
                value: span(m.value),
            };
        }
        let meta = self.meta.map(|m| m.map(span));
        Some(Spanned::scanned(bytes, top, &meta, self.depth))
    }

    /// The items of a page: an array of objects.
    fn items(&mut self) -> Option<Vec<Spanned>> {
        let mut items = Vec::new();
        match self.next()? {
            b'[' => {}
            b'n' => return self.literal(b"ull").map(|()| items),
            _ => return None,
        }
        if self.peek()? == b']' {
            self.pos += 1;
            return Some(items);
        }
        loop {
            items.push(self.item()?);
            match self.next()? {
                b',' => {}
                b']' => return Some(items),
                _ => return None,
            }
        }
    }

    /// A page's `metadata`: its two strings (without escapes, as tokens are), the rest read and
    /// left.
    fn page_meta(&mut self) -> Option<PageMeta> {
        let mut meta = PageMeta::default();
        self.expect(b'{')?;
        if self.peek()? == b'}' {
            self.pos += 1;
            return Some(meta);
        }
        loop {
            let key = self.string()?;
            self.expect(b':')?;
            let slot = match self.at(key) {
                b"resourceVersion" => Some(&mut meta.resource_version),
                b"continue" => Some(&mut meta.continue_),
                _ => None,
            };
            match slot {
                // A repeat is an error to serde's derive.
                Some(Some(_)) => return None,
                Some(slot) => {
                    let text = self.string()?;
                    let text = self.at(text);
                    if text.contains(&b'\\') {
                        return None;
                    }
                    *slot = Some(std::str::from_utf8(text).ok()?.to_owned());
                }
                None => self.skip()?,
            }
            match self.next()? {
                b',' => {}
                b'}' => return Some(meta),
                _ => return None,
            }
        }
    }

    /// A value read and left (nothing recorded).
    fn skip(&mut self) -> Option<()> {
        let was = std::mem::replace(&mut self.skipping, true);
        let read = self.value(Level::Inner, 0);
        self.skipping = was;
        read
    }

    /// A value, `depth` containers in.
    fn value(&mut self, level: Level, depth: usize) -> Option<()> {
        match self.peek()? {
            b'{' => self.object(level, depth),
            b'[' => self.array(depth),
            b'"' => self.string().map(drop),
            b'-' | b'0'..=b'9' => self.number(),
            b't' => {
                self.pos += 1;
                self.literal(b"rue")
            }
            b'f' => {
                self.pos += 1;
                self.literal(b"alse")
            }
            b'n' => {
                self.pos += 1;
                self.literal(b"ull")
            }
            _ => None,
        }
    }

    fn literal(&mut self, rest: &[u8]) -> Option<()> {
        let end = self.pos + rest.len();
        (self.b.get(self.pos..end)? == rest).then_some(())?;
        self.pos = end;
        Some(())
    }

    /// Opens a container `depth` containers in; `None` past [`DEEP`] (left to serde, whose
    /// `Spanned` then takes the tree path).
    fn open(&mut self, depth: usize) -> Option<()> {
        if depth >= DEEP {
            return None;
        }
        if !self.skipping {
            self.depth = self.depth.max(depth + 1);
        }
        self.pos += 1;
        Some(())
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        self.open(depth)?;
        if self.peek()? == b']' {
            self.pos += 1;
            return Some(());
        }
        loop {
            self.value(Level::Inner, depth + 1)?;
            match self.next()? {
                b',' => {}
                b']' => return Some(()),
                _ => return None,
            }
        }
    }

    fn object(&mut self, level: Level, depth: usize) -> Option<()> {
        self.open(depth)?;
        let base = self.keys.len();
        if self.peek()? == b'}' {
            self.pos += 1;
            return Some(());
        }
        let first_at = self.pos;
        loop {
            let member_at = self.pos;
            let key = self.string()?;
            self.expect(b':')?;
            let value_at = self.pos;
            let name = self.at(key);
            if level == Level::Metadata && self.strip && !self.skipping && name == b"managedFields"
            {
                // Left out with one comma, as the serde path leaves it out; a second one is
                // left to serde.
                if self.cut.is_some() {
                    return None;
                }
                self.skip()?;
                self.cut = Some(if member_at == first_at {
                    (member_at, self.pos + usize::from(self.peek()? == b','))
                } else {
                    (member_at - 1, self.pos)
                });
            } else {
                let child = if level == Level::Top && name == b"metadata" {
                    Level::Metadata
                } else {
                    Level::Inner
                };
                self.value(child, depth + 1)?;
                if !self.skipping {
                    self.keys.push(key);
                    match level {
                        Level::Top => self.top.push(Member {
                            key,
                            value: (value_at, self.pos),
                        }),
                        Level::Metadata => {
                            if let Some(i) = META.iter().position(|m| m.as_bytes() == name) {
                                self.meta[i] = Some((value_at, self.pos));
                            }
                        }
                        Level::Inner => {}
                    }
                }
            }
            match self.next()? {
                b',' => {}
                b'}' => break,
                _ => return None,
            }
        }
        if !self.skipping && repeats(self.b, &self.keys[base..]) {
            return None;
        }
        self.keys.truncate(base);
        Some(())
    }

    /// A string whose escapes are serde_json's own; its text's span (inside the quotes).
    fn string(&mut self) -> Option<(usize, usize)> {
        self.expect(b'"')?;
        let start = self.pos;
        loop {
            self.pos = plain_run(self.b, self.pos);
            match self.next()? {
                b'"' => return Some((start, self.pos - 1)),
                b'\\' => match self.next()? {
                    b'"' | b'\\' | b'b' | b't' | b'n' | b'f' | b'r' => {}
                    b'u' => {
                        let hex = self.b.get(self.pos..self.pos + 4)?;
                        let low = match hex[3] {
                            c @ b'0'..=b'9' => c - b'0',
                            c @ b'a'..=b'f' => c - b'a' + 10,
                            _ => return None,
                        };
                        let c = match hex[..3] {
                            [b'0', b'0', b'0'] => low,
                            [b'0', b'0', b'1'] => 0x10 + low,
                            _ => return None,
                        };
                        // serde_json writes these five short.
                        if matches!(c, 0x08 | 0x09 | 0x0A | 0x0C | 0x0D) {
                            return None;
                        }
                        self.pos += 4;
                    }
                    _ => return None,
                },
                // A control character: invalid JSON.
                _ => return None,
            }
        }
    }

    /// An integer serde_json reads as `i64` or `u64` and writes back the same.
    fn number(&mut self) -> Option<()> {
        if self.peek()? == b'-' {
            self.pos += 1;
            if !matches!(self.peek()?, b'1'..=b'9') {
                return None;
            }
        }
        let start = self.pos;
        if self.next()? != b'0' {
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.pos += 1;
            }
        }
        if self.pos - start > DIGITS {
            return None;
        }
        match self.peek() {
            Some(b'0'..=b'9' | b'.' | b'e' | b'E') => None,
            _ => Some(()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use kube::api::WatchEvent;
    use rand::rngs::StdRng;
    use rand::seq::{IndexedRandom, SliceRandom};
    use rand::{Rng, SeedableRng};
    use serde_json::{Map, Value};

    use super::*;
    use crate::watch::Spans;

    /// The scanner's reading of `line` against serde's: when the scanner takes it, serde reads
    /// the same change and the same [`Spanned`] (bytes, spans, texts, generation, depth). True
    /// when the scanner took it.
    fn agrees<const STRIP: bool>(line: &[u8]) -> bool {
        let Some((kind, scanned)) = std::str::from_utf8(line)
            .ok()
            .and_then(|text| watch_line(text, STRIP))
        else {
            return false;
        };
        let text = String::from_utf8_lossy(line);
        let by_serde = serde_json::from_slice::<WatchEvent<Spans<STRIP>>>(line)
            .unwrap_or_else(|e| panic!("the scanner took what serde refuses ({e}): {text}"));
        let (k, Spans(s)) = match by_serde {
            WatchEvent::Added(s) => (Kind::Added, s),
            WatchEvent::Modified(s) => (Kind::Modified, s),
            WatchEvent::Deleted(s) => (Kind::Deleted, s),
            _ => panic!("the scanner took a bookmark or an error: {text}"),
        };
        assert_eq!((kind, &scanned), (k, &s), "strip: {STRIP}: {text}");
        true
    }

    /// Whether the scanner took `line` with managedFields and without (a repeat inside them
    /// counts only where they are kept).
    fn both(line: &[u8]) -> bool {
        let (whole, stripped) = (agrees::<false>(line), agrees::<true>(line));
        whole && stripped
    }

    /// Writes JSON text of every form serde_json reads (and a little it does not).
    struct Gen {
        rng: StdRng,
    }

    /// String pieces: the first ones are as serde_json writes them, the rest not.
    const PIECES: [&str; 27] = [
        "a",
        "name",
        "é",
        "😀",
        "<",
        "&",
        "\u{7f}",
        "k:{",
        r#"\""#,
        r"\\",
        r"\n",
        r"\t",
        r"\b",
        r"\f",
        r"\r",
        r"\u0001",
        r"\u001f",
        r"\/",
        r"\u003c",
        r"\u00e9",
        r"\ud83d\ude00",
        r"\u001F",
        r"\u000a",
        r"\u0008",
        r"\x",
        "\u{1}",
        r"\u12",
    ];
    /// Numbers: the first ones written back as read, the rest not (or not JSON).
    const NUMBERS: [&str; 17] = [
        "0",
        "7",
        "-3",
        "123456789012345678",
        "-123456789012345678",
        "-0",
        "1.0",
        "1e3",
        "-1.5E-7",
        "1234567890123456789",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "123456789012345678901234",
        "01",
        "-",
        "0.1",
    ];
    const KEYS: [&str; 14] = [
        "metadata",
        "managedFields",
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "spec",
        "status",
        "a",
        "b",
        r"na\u006de",
        "@heraldX",
        r#"k:{\"type\":\"Ready\"}"#,
    ];

    impl Gen {
        fn odd(&mut self, p: f64) -> bool {
            self.rng.random_bool(p)
        }

        fn ws(&mut self, out: &mut String) {
            if self.odd(0.01) {
                out.push_str([" ", "\t", "\n", "\r"].choose(&mut self.rng).unwrap());
            }
        }

        fn string(&mut self, out: &mut String) {
            out.push('"');
            for _ in 0..self.rng.random_range(0..4) {
                let n = if self.odd(0.1) { PIECES.len() } else { 17 };
                out.push_str(PIECES[self.rng.random_range(0..n)]);
            }
            out.push('"');
        }

        fn key(&mut self, out: &mut String) {
            if self.odd(0.7) {
                out.push('"');
                out.push_str(KEYS.choose(&mut self.rng).unwrap());
                out.push('"');
            } else {
                self.string(out);
            }
        }

        fn scalar(&mut self, out: &mut String) {
            match self.rng.random_range(0..6) {
                0 | 1 => self.string(out),
                2 | 3 => {
                    let n = if self.odd(0.1) { NUMBERS.len() } else { 5 };
                    out.push_str(NUMBERS[self.rng.random_range(0..n)]);
                }
                4 => out.push_str(["true", "false"].choose(&mut self.rng).unwrap()),
                _ => out.push_str(if self.odd(0.02) { "nul" } else { "null" }),
            }
        }

        fn value(&mut self, out: &mut String, depth: usize) {
            self.ws(out);
            match self.rng.random_range(0..4) {
                0 if depth < 5 => self.object(out, depth + 1, false),
                1 if depth < 5 => self.array(out, depth + 1),
                _ => self.scalar(out),
            }
            self.ws(out);
        }

        fn array(&mut self, out: &mut String, depth: usize) {
            out.push('[');
            for i in 0..self.rng.random_range(0..4) {
                if i > 0 {
                    out.push(',');
                }
                self.value(out, depth);
            }
            out.push(']');
        }

        /// An object; `top`: shaped like a Kubernetes object most of the time.
        fn object(&mut self, out: &mut String, depth: usize, top: bool) {
            let mut members = Vec::new();
            for _ in 0..self.rng.random_range(0..5) {
                let mut m = String::new();
                self.key(&mut m);
                self.ws(&mut m);
                m.push(':');
                self.value(&mut m, depth);
                members.push(m);
            }
            if top && self.odd(0.9) {
                let mut m = String::from(r#""metadata":"#);
                self.metadata(&mut m);
                members.push(m);
            }
            if self.odd(0.05) && !members.is_empty() {
                let again = members[self.rng.random_range(0..members.len())].clone();
                members.push(again);
            }
            members.shuffle(&mut self.rng);
            out.push('{');
            self.ws(out);
            out.push_str(&members.join(","));
            out.push('}');
        }

        fn metadata(&mut self, out: &mut String) {
            let mut members = Vec::new();
            for key in META.iter().chain(&["managedFields", "labels"]) {
                if self.odd(0.2) {
                    continue;
                }
                let mut m = format!("\"{key}\":");
                match (*key, self.rng.random_range(0..5)) {
                    ("managedFields", _) => {
                        m.push_str(r#"[{"manager":"m","fieldsV1":{"f:spec":{"k:{\"a\":1}":{}}}},"#);
                        self.value(&mut m, 2);
                        m.push(']');
                    }
                    ("generation", 0..=2) => m.push_str(NUMBERS.choose(&mut self.rng).unwrap()),
                    (_, 0..=2) => self.string(&mut m),
                    _ => self.value(&mut m, 2),
                }
                members.push(m);
            }
            if self.odd(0.05) {
                members.push(r#""managedFields":[]"#.to_owned());
            }
            members.shuffle(&mut self.rng);
            if self.odd(0.02) {
                out.push('[');
                out.push_str(&members.join(","));
                out.push(']');
                return;
            }
            out.push('{');
            out.push_str(&members.join(","));
            out.push('}');
        }

        /// Nested `levels` deep around a value.
        fn deep(&mut self, levels: usize) -> String {
            let mut v = String::from("1");
            for _ in 0..levels {
                v = if self.odd(0.5) {
                    format!("[{v}]")
                } else {
                    format!("{{\"d\":{v}}}")
                };
            }
            v
        }

        fn line(&mut self) -> String {
            let mut object = String::new();
            self.object(&mut object, 1, true);
            if self.odd(0.05) {
                let levels = self.rng.random_range(90..130);
                let deep = self.deep(levels);
                object.insert_str(1, &format!("\"deep\":{deep},"));
                if object.ends_with(",}") {
                    object.truncate(object.len() - 2);
                    object.push('}');
                }
            }
            let kind = *[
                "ADDED",
                "MODIFIED",
                "DELETED",
                "ADDED",
                "MODIFIED",
                "BOOKMARK",
                "ERROR",
                "added",
                r"ADD\u0045D",
            ]
            .choose(&mut self.rng)
            .unwrap();
            let kind = format!(r#""type":"{kind}""#);
            let object = format!(r#""object":{object}"#);
            let mut members = vec![kind, object];
            if self.odd(0.3) {
                members.reverse();
            }
            if self.odd(0.03) {
                members.push(r#""extra":1"#.to_owned());
            }
            if self.odd(0.03) {
                members.pop();
            }
            let mut line = format!("{{{}}}", members.join(","));
            if self.odd(0.03) {
                let mut cut = self.rng.random_range(0..line.len());
                while !line.is_char_boundary(cut) {
                    cut -= 1;
                }
                line.truncate(cut);
            }
            if self.odd(0.02) {
                line.push_str(["x", " ", "}", "\n"].choose(&mut self.rng).unwrap());
            }
            line
        }
    }

    /// A generated corpus of every form: whatever the scanner takes, serde reads the same.
    #[test]
    fn what_the_scanner_takes_serde_reads_the_same() {
        let mut g = Gen {
            rng: StdRng::seed_from_u64(28),
        };
        let (mut taken, total) = (0, 20_000);
        for _ in 0..total {
            taken += usize::from(both(g.line().as_bytes()));
        }
        // The corpus is mostly plain: a scanner that declines everything agrees too.
        assert!(taken > total / 20, "{taken} of {total} taken");
    }

    /// Objects as serde_json writes them (compact, its own escapes, integers), in the shape of
    /// Kubernetes objects: the scanner takes every one. This fails if the fast path is gone.
    #[test]
    fn the_scanner_takes_every_line_serde_json_writes() {
        fn text(rng: &mut StdRng) -> String {
            (0..rng.random_range(0..12))
                .map(|_| match rng.random_range(0..10) {
                    0 => char::from(rng.random_range(0u8..0x20)),
                    1 => *['"', '\\', '/', 'é', '😀', '\u{7f}', '\u{2028}']
                        .choose(rng)
                        .unwrap(),
                    _ => char::from(rng.random_range(b'a'..=b'z')),
                })
                .collect()
        }
        fn value(rng: &mut StdRng, depth: usize) -> Value {
            match rng.random_range(0..7) {
                0 if depth < 6 => Value::Object(
                    (0..rng.random_range(0..5))
                        .map(|_| (text(rng), value(rng, depth + 1)))
                        .collect(),
                ),
                1 if depth < 6 => Value::Array(
                    (0..rng.random_range(0..4))
                        .map(|_| value(rng, depth + 1))
                        .collect(),
                ),
                2 => Value::from(
                    rng.random_range(-999_999_999_999_999_999i64..=999_999_999_999_999_999),
                ),
                3 => Value::from(rng.random_range(0u64..1000)),
                4 => Value::Bool(rng.random_bool(0.5)),
                5 => Value::Null,
                _ => Value::String(text(rng)),
            }
        }
        let mut rng = StdRng::seed_from_u64(8);
        for i in 0..5_000usize {
            let mut metadata = Map::new();
            for key in ["name", "namespace", "uid", "resourceVersion"] {
                if rng.random_bool(0.8) {
                    metadata.insert(key.into(), Value::String(text(&mut rng)));
                }
            }
            metadata.insert("generation".into(), Value::from(i));
            if rng.random_bool(0.5) {
                metadata.insert("managedFields".into(), value(&mut rng, 3));
            }
            metadata.insert("labels".into(), value(&mut rng, 3));
            let mut object = Map::new();
            object.insert("kind".into(), "Widget".into());
            object.insert("metadata".into(), Value::Object(metadata));
            object.insert("spec".into(), value(&mut rng, 1));
            let kind = ["ADDED", "MODIFIED", "DELETED"][i % 3];
            let line = serde_json::to_string(&serde_json::json!({
                "type": kind,
                "object": object,
            }))
            .unwrap();
            assert!(both(line.as_bytes()), "declined: {line}");
        }
    }

    /// Each refusal, and each invalid line: the scanner declines it (serde decides).
    #[test]
    fn the_scanner_declines_what_it_cannot_prove() {
        let ok = r#"{"type":"ADDED","object":{"metadata":{"name":"a"},"spec":{"n":1}}}"#;
        assert!(both(ok.as_bytes()));
        assert!(both(
            r#"{"object":{"metadata":{"name":"a"}},"type":"DELETED"}"#.as_bytes()
        ));
        for line in [
            // Whitespace.
            r#"{"type":"ADDED","object":{"metadata":{"name":"a"},"spec":{"n": 1}}}"#,
            r#"{"type":"ADDED", "object":{"metadata":{"name":"a"}}}"#,
            // Escapes serde_json would write otherwise.
            r#"{"type":"ADDED","object":{"metadata":{"name":"a\/b"}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a\u003cb"}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"\u00e9"}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"\u001F"}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"\u000a"}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"\ud83d\ude00"}}}"#,
            // Numbers serde_json would write otherwise.
            r#"{"type":"ADDED","object":{"metadata":{"generation":1.0}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{},"n":1e3}}"#,
            r#"{"type":"ADDED","object":{"metadata":{},"n":-0}}"#,
            r#"{"type":"ADDED","object":{"metadata":{},"n":1234567890123456789}}"#,
            r#"{"type":"ADDED","object":{"metadata":{},"n":-1234567890123456789}}"#,
            // A repeated member, anywhere; a second managedFields.
            r#"{"type":"ADDED","object":{"metadata":{"name":"a","name":"b"}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{},"x":{"k":1,"k":1}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"managedFields":[],"managedFields":[]}}}"#,
            r#"{"type":"ADDED","type":"ADDED","object":{"metadata":{}}}"#,
            // Lines serde reads otherwise: bookmarks, errors, other members, other types.
            r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}"#,
            r#"{"type":"ERROR","object":{"kind":"Status","code":410}}"#,
            r#"{"type":"ADDED","object":{"metadata":{}},"x":1}"#,
            r#"{"type":"ADD\u0045D","object":{"metadata":{}}}"#,
            r#"{"type":"ADDED","object":"text"}"#,
            r#"{"type":"ADDED"}"#,
            // Invalid JSON.
            r#"{"type":"ADDED","object":{"metadata":{"name":"a"}}}x"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a"}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"a"#,
            "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\u{1}\"}}}",
            r#"{"type":"ADDED","object":{"metadata":{"name":"a\x"}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{"name":"\u12"}}}"#,
            r#"{"type":"ADDED","object":{"metadata":{},"n":01}}"#,
            r#"{"type":"ADDED","object":{"metadata":{},"n":tru}}"#,
            r#"{"type":"ADDED","object":{"metadata":{},"n":[1,]}}"#,
            r#"{"type":"ADDED","object":{"metadata":{},}}"#,
            "",
        ] {
            assert!(watch_line(line, false).is_none(), "{line}");
            assert!(watch_line(line, true).is_none(), "{line}");
        }
        // Whitespace after the value is what serde_json allows too (an API server's LIST body
        // ends with a newline): taken, and read as serde reads it.
        for end in [" ", "\n", "\r\n", " \t\n"] {
            let line = format!(r#"{{"type":"ADDED","object":{{"metadata":{{"name":"a"}}}}}}{end}"#);
            assert!(both(line.as_bytes()), "{line:?}");
        }
        // Bytes that are not UTF-8 never reach the scanner: it takes a `&str` (the reader refuses
        // such a line, `lines.rs`).
        // Nesting: taken up to DEEP containers, declined past it.
        let nested = |levels: usize| {
            format!(
                r#"{{"type":"ADDED","object":{{"metadata":{{}},"d":{}1{}}}}}"#,
                "[".repeat(levels),
                "]".repeat(levels)
            )
        };
        assert!(both(nested(DEEP - 1).as_bytes()));
        assert!(!both(nested(DEEP).as_bytes()));
    }

    /// managedFields are cut out with one comma wherever they stand, as the serde path leaves
    /// them out.
    #[test]
    fn managed_fields_are_cut_out_wherever_they_stand() {
        for metadata in [
            r#"{"managedFields":[{"a":1}]}"#,
            r#"{"managedFields":[{"a":1}],"name":"x"}"#,
            r#"{"name":"x","managedFields":[{"a":1}]}"#,
            r#"{"name":"x","managedFields":[{"a":1}],"uid":"u"}"#,
        ] {
            let line = format!(r#"{{"type":"ADDED","object":{{"metadata":{metadata},"s":1}}}}"#);
            assert!(both(line.as_bytes()), "{line}");
            let (_, s) = watch_line(&line, true).unwrap();
            assert!(!s.bytes.windows(7).any(|w| w == b"managed"), "{line}");
        }
    }
}
