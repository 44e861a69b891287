//! The key layout of the journal's single sled tree (schema version 7; version 6 had no `u/` keys,
//! version 5 stored values uncompressed only, version 4 had single-event `e/` keys only, version 3 no `f/` keys either,
//! version 2 no `a/` keys either, version 1 neither those nor the head record file).
//!
//! | prefix | key | value |
//! |---|---|---|
//! | `meta/schema_version` | | ASCII decimal, `7` |
//! | `meta/head` | | u64 BE: the last assigned sequence number (survives retention emptying `e/`) |
//! | `meta/redaction_key` | | 32 random bytes: the key of the index's digests of redacted values |
//! | `e/` | u64 BE first + u64 BE last sequence number: a segment (schema 5) | *plain*: u64 BE append time (ms since the epoch), then per event (first, first + 1 … last) u32 BE length + rendered CloudEvent; or *compressed* (schema 6): tag `0x01`, the u64 BE append time, then the rest of the plain form compressed (`compressed.rs`) |
//! | `e/` | u64 BE sequence number: one event (schemas 1–4, still read; salvage writes them) | u64 BE append time + rendered CloudEvent |
//! | `i/` | stream, NUL, `<namespace>/<name>` | the last object seen: its JSON (schemas 1–5, and schema 6 when compression would not shrink it) or compressed (schema 6: tag `0x01`, `compressed.rs`) |
//! | `u/` | u64 BE: the entry's number, counted from the journal's open (which folds every entry) | one append's `i/` updates (or part of them), not yet folded into the `i/` keys (schema 7, `updates.rs`) |
//! | `c/` | stream | resourceVersion (UTF-8) |
//! | `f/` | stream | `skip`: the stream's first sync is under way and records the existing objects silently (`initialState: skip`); written with its first index entries, removed by the append that writes its first checkpoint (schema 4) |
//! | `s/` | sink | u64 BE cursor: the last acknowledged sequence number |
//! | `a/` | sink | acknowledged ranges above the cursor: pairs of u64 BE (first, last), ascending, disjoint |
//! | `d/` | sink, NUL, u64 BE sequence number | a dead letter (`dlq.rs`) |
//! | `r/` | sink, NUL, u64 BE sequence number | an event queued for replay (`dlq.rs`) |
//!
//! Beside the tree, `herald.head` (`head.rs`) holds the last durable sequence number.
//!
//! Big-endian sequence numbers make key order sequence order, so reads and retention are range scans:
//! `e/<n>` sorts before `e/<n><m>`, which sorts before `e/<n + 1>`, so both event forms sort by their
//! first sequence number, and [`event`]`(n)` is the lower bound of every key whose events start at
//! `n` or later. A segment holds the events of one append (several when it has more than
//! [`SEGMENT_PLAIN_BYTES`] or its stored value would pass [`SEGMENT_BYTES`]): sled pays per key
//! (an insert clones the leaf it changes, the rightmost leaf splits every ~8 keys,
//! docs/adr/0020-event-segments.md) and per byte it logs (ADR 0029). Every reader of a value goes
//! through one decoder of its kind: [`plain_events`] for `e/`, [`index_object`] for `i/`.
//! The NUL after the stream keeps `i/a\0…` from matching a prefix scan of stream `a` for stream `ab`.

use std::borrow::Cow;

use sled::IVec;

use super::compressed;
use super::error::{JournalError, Result};

pub(super) use compressed::index_object;

pub(super) const SCHEMA_VERSION_KEY: &[u8] = b"meta/schema_version";
pub(super) const HEAD_KEY: &[u8] = b"meta/head";
pub(super) const REDACTION_KEY: &[u8] = b"meta/redaction_key";
pub(super) const EVENT_PREFIX: &[u8] = b"e/";
pub(super) const INDEX_PREFIX: &[u8] = b"i/";
pub(super) const CHECKPOINT_PREFIX: &[u8] = b"c/";
pub(super) const FIRST_SYNC_PREFIX: &[u8] = b"f/";
/// The one value of an `f/` key.
pub(super) const FIRST_SYNC_SKIPPING: &[u8] = b"skip";
pub(super) const CURSOR_PREFIX: &[u8] = b"s/";
pub(super) const ACKED_PREFIX: &[u8] = b"a/";
pub(super) const DEAD_PREFIX: &[u8] = b"d/";
pub(super) const REPLAY_PREFIX: &[u8] = b"r/";
pub(super) const UPDATES_PREFIX: &[u8] = b"u/";

/// Bytes of the append time in front of each stored event or segment.
const TIME_LEN: usize = 8;

/// Bytes of the length in front of each event of a segment.
const LEN_LEN: usize = 4;

/// A segment's stored value stays within this many bytes (an event bigger than this gets a segment
/// of its own). sled rewrites a leaf of up to 17 entries whole, and writes a log message over a
/// quarter of its 512 KiB segment as a separate blob file: 17 values must stay well under that.
/// 6 KiB values cost less CPU per event but raised the idle RSS at 100,000 objects past the
/// issue's 100 MiB (104–105 MiB); 3 KiB kept it below main's (ADR 0020).
pub(super) const SEGMENT_BYTES: usize = 3 * 1024;

/// An append's events go into one segment until their plain form would pass this many bytes:
/// compressed, the events of one append share most of their bytes, so a segment holds several
/// times the events of a plain one in the same [`SEGMENT_BYTES`] (ADR 0029). A run whose
/// compressed value still passes [`SEGMENT_BYTES`] is halved until it fits.
pub(super) const SEGMENT_PLAIN_BYTES: usize = 16 * 1024;

pub(super) fn check_name(what: &'static str, name: &str) -> Result<()> {
    if name.is_empty() || name.contains('\0') {
        return Err(JournalError::InvalidName {
            what,
            name: name.to_owned(),
        });
    }
    Ok(())
}

fn prefixed(prefix: &[u8], rest: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + rest.len());
    k.extend_from_slice(prefix);
    k.extend_from_slice(rest);
    k
}

pub(super) fn index_prefix(stream: &str) -> Vec<u8> {
    let mut k = prefixed(INDEX_PREFIX, stream.as_bytes());
    k.push(0);
    k
}

pub(super) fn index(stream: &str, key: &str) -> Vec<u8> {
    let mut k = index_prefix(stream);
    k.extend_from_slice(key.as_bytes());
    k
}

pub(super) fn checkpoint(stream: &str) -> Vec<u8> {
    prefixed(CHECKPOINT_PREFIX, stream.as_bytes())
}

pub(super) fn first_sync(stream: &str) -> Vec<u8> {
    prefixed(FIRST_SYNC_PREFIX, stream.as_bytes())
}

/// Whether an `f/` entry (`rest`: its key after `f/`) is a readable first-sync marker: a stream
/// name (UTF-8, not empty, no NUL) and the one value [`FIRST_SYNC_SKIPPING`].
pub(super) fn first_sync_readable(rest: &[u8], value: &[u8]) -> bool {
    value == FIRST_SYNC_SKIPPING
        && std::str::from_utf8(rest).is_ok_and(|s| check_name("stream", s).is_ok())
}

pub(super) fn cursor(sink: &str) -> Vec<u8> {
    prefixed(CURSOR_PREFIX, sink.as_bytes())
}

pub(super) fn acked(sink: &str) -> Vec<u8> {
    prefixed(ACKED_PREFIX, sink.as_bytes())
}

/// Encodes acknowledged ranges (inclusive `(first, last)` pairs) as an `a/` value.
pub(super) fn encode_ranges(ranges: &[(u64, u64)]) -> Vec<u8> {
    let mut v = Vec::with_capacity(ranges.len() * 16);
    for (first, last) in ranges {
        v.extend_from_slice(&first.to_be_bytes());
        v.extend_from_slice(&last.to_be_bytes());
    }
    v
}

/// Decodes an `a/` value: whole pairs, each `first <= last`, ascending and not touching (what
/// [`encode_ranges`] is given).
pub(super) fn decode_ranges(key: &[u8], bytes: &[u8]) -> Result<Vec<(u64, u64)>> {
    let corrupt = |reason| JournalError::CorruptEntry {
        key: printable(key),
        reason,
    };
    if !bytes.len().is_multiple_of(16) {
        return Err(corrupt(
            "acknowledged ranges are not whole pairs of 8-byte integers",
        ));
    }
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(bytes.len() / 16);
    for pair in bytes.chunks_exact(16) {
        let (a, b) = pair.split_at(8);
        let (first, last) = (decode_u64(key, a)?, decode_u64(key, b)?);
        if first > last
            || out
                .last()
                .is_some_and(|&(_, prev)| prev.saturating_add(1) >= first)
        {
            return Err(corrupt(
                "acknowledged ranges are not ascending and disjoint",
            ));
        }
        out.push((first, last));
    }
    Ok(out)
}

pub(super) fn printable(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

pub(super) fn decode_u64(key: &[u8], bytes: &[u8]) -> Result<u64> {
    let arr: [u8; 8] = bytes.try_into().map_err(|_| JournalError::CorruptEntry {
        key: printable(key),
        reason: "expected an 8-byte big-endian integer",
    })?;
    Ok(u64::from_be_bytes(arr))
}

/// The sequence number of a single-event `e/` key (schema 4), and the lower bound of the keys of
/// events from `seq` on in a range scan.
pub(super) fn event(seq: u64) -> Vec<u8> {
    prefixed(EVENT_PREFIX, &seq.to_be_bytes())
}

/// The key of the `n`th entry of index updates written since the journal was opened (schema 7,
/// `updates.rs`).
pub(super) fn updates(n: u64) -> Vec<u8> {
    prefixed(UPDATES_PREFIX, &n.to_be_bytes())
}

/// The key of a segment: the events `first..=last`.
pub(super) fn segment(first: u64, last: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(EVENT_PREFIX.len() + 16);
    k.extend_from_slice(EVENT_PREFIX);
    k.extend_from_slice(&first.to_be_bytes());
    k.extend_from_slice(&last.to_be_bytes());
    k
}

/// The first and last sequence numbers an `e/` key holds: both the same for a single event.
pub(super) fn event_span(key: &[u8]) -> Result<(u64, u64)> {
    let rest = key.get(EVENT_PREFIX.len()..).unwrap_or_default();
    if rest.len() == 16 {
        let (first, last) = rest.split_at(8);
        let (first, last) = (decode_u64(key, first)?, decode_u64(key, last)?);
        if first > last {
            return Err(JournalError::CorruptEntry {
                key: printable(key),
                reason: "segment ends before it starts",
            });
        }
        return Ok((first, last));
    }
    decode_u64(key, rest).map(|seq| (seq, seq))
}

/// A single event's value (schema 4; salvage still writes them).
pub(super) fn event_value(append_ms: u64, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(TIME_LEN + payload.len());
    v.extend_from_slice(&append_ms.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// A segment's plain value (schema 5): the append time once, then each event with its length.
#[cfg(test)]
pub(super) fn segment_plain<'a>(
    append_ms: u64,
    events: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    write_segment_plain(&mut v, append_ms, events)?;
    Ok(v)
}

/// Writes a segment's plain value into `out`, replacing what it held.
fn write_segment_plain<'a>(
    out: &mut Vec<u8>,
    append_ms: u64,
    events: impl IntoIterator<Item = &'a [u8]>,
) -> Result<()> {
    out.clear();
    out.extend_from_slice(&append_ms.to_be_bytes());
    for event in events {
        let len = u32::try_from(event.len())
            .map_err(|_| JournalError::EventTooLarge { bytes: event.len() })?;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(event);
    }
    Ok(())
}

/// A segment's value as schema 6 stores it ([`Scratch::segment_value`]).
#[cfg(test)]
pub(super) fn segment_value<'a>(
    append_ms: u64,
    events: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<u8>> {
    Ok(Scratch::default()
        .segment_value(append_ms, events)?
        .to_vec())
}

/// The buffers an append's segments are built in, reused from one segment to the next: each
/// value is then allocated once, at its size, when it becomes an [`IVec`], instead of being grown
/// from a guess (a 16 KiB plain segment grew through three reallocations) and copied once more.
#[derive(Default)]
pub(super) struct Scratch {
    plain: Vec<u8>,
    packed: Vec<u8>,
}

impl Scratch {
    /// A segment's value as schema 6 stores it: compressed (tag, append time, then the rest of
    /// the plain form compressed), or plain when compression would not make it smaller.
    pub(super) fn segment_value<'a>(
        &mut self,
        append_ms: u64,
        events: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<IVec> {
        write_segment_plain(&mut self.plain, append_ms, events)?;
        let plain = self.plain.as_slice();
        if plain.len() > compressed::MAX_PLAIN {
            return Ok(plain.into());
        }
        let packed = &mut self.packed;
        packed.clear();
        packed.push(compressed::LZ4_DICTIONARY_1);
        packed.extend_from_slice(&plain[..TIME_LEN]);
        compressed::compress_body_into(packed, &plain[TIME_LEN..])?;
        if packed.len() >= plain.len() {
            return Ok(plain.into());
        }
        Ok(packed.as_slice().into())
    }
}

/// An append's events as stored segments: runs of consecutive events whose plain form stays
/// within [`SEGMENT_PLAIN_BYTES`], each halved until its stored value stays within
/// [`SEGMENT_BYTES`] (one event per segment at least). The index range of each run and its value.
pub(super) fn segment_values(
    append_ms: u64,
    events: &[Vec<u8>],
) -> Result<Vec<(std::ops::Range<usize>, IVec)>> {
    let mut out = Vec::with_capacity(1 + events.len() / 8);
    let mut scratch = Scratch::default();
    let mut pending: Vec<std::ops::Range<usize>> = segment_runs(events, SEGMENT_PLAIN_BYTES);
    pending.reverse();
    while let Some(run) = pending.pop() {
        let value =
            scratch.segment_value(append_ms, events[run.clone()].iter().map(Vec::as_slice))?;
        if value.len() > SEGMENT_BYTES && run.len() > 1 {
            let mid = run.start + run.len() / 2;
            pending.push(mid..run.end);
            pending.push(run.start..mid);
            continue;
        }
        out.push((run, value));
    }
    Ok(out)
}

/// Splits an append's events into runs of consecutive events whose plain segment stays within
/// `bound` bytes (one event per run at least): the index range of each run.
pub(super) fn segment_runs(events: &[Vec<u8>], bound: usize) -> Vec<std::ops::Range<usize>> {
    let mut runs = Vec::with_capacity(1 + events.len() / 4);
    let mut start = 0;
    let mut bytes = TIME_LEN;
    for (i, event) in events.iter().enumerate() {
        let len = LEN_LEN + event.len();
        if i > start && bytes + len > bound {
            runs.push(start..i);
            start = i;
            bytes = TIME_LEN;
        }
        bytes += len;
    }
    if start < events.len() {
        runs.push(start..events.len());
    }
    runs
}

/// The append time of a stored event or segment (its first 8 bytes in the plain forms, after the
/// tag in the compressed one): retention reads it without decompressing.
pub(super) fn append_time(key: &[u8], value: &[u8]) -> Result<u64> {
    let skip = usize::from(compressed::is_compressed(value));
    let time = value
        .get(skip..skip + TIME_LEN)
        .ok_or_else(|| JournalError::CorruptEntry {
            key: printable(key),
            reason: "event shorter than its timestamp",
        })?;
    decode_u64(key, time)
}

/// Overwrites the append time of a value [`segment_values`] made (either form).
pub(super) fn set_append_time(value: &mut [u8], append_ms: u64) {
    let skip = usize::from(compressed::is_compressed(value));
    if let Some(time) = value.get_mut(skip..skip + TIME_LEN) {
        time.copy_from_slice(&append_ms.to_be_bytes());
    }
}

/// What an `e/` entry holds: its append time and each `(seq, rendered CloudEvent)` in order.
pub(super) type Stored<'a> = (u64, Vec<(u64, &'a [u8])>);

/// The plain form of an `e/` value, whichever form it is stored in: what [`split_events`] reads.
/// The one decoder of event values; a compressed value that does not decompress is corrupt.
pub(super) fn plain_events<'a>(key: &[u8], value: &'a [u8]) -> Result<Cow<'a, [u8]>> {
    if !compressed::is_compressed(value) {
        return Ok(Cow::Borrowed(value));
    }
    let at = value
        .get(1..1 + TIME_LEN)
        .ok_or_else(|| JournalError::CorruptEntry {
            key: printable(key),
            reason: "event shorter than its timestamp",
        })?;
    let mut plain = Vec::new();
    plain.extend_from_slice(at);
    compressed::decompress_body_into(key, &value[1 + TIME_LEN..], &mut plain)?;
    Ok(Cow::Owned(plain))
}

/// The events of an `e/` entry's plain form ([`plain_events`]), either key form: its append time
/// and each `(seq, rendered CloudEvent)` in order. A segment must hold exactly the events its key
/// names, nothing after them.
pub(super) fn split_events<'a>(key: &[u8], value: &'a [u8]) -> Result<Stored<'a>> {
    if compressed::is_compressed(value) {
        return Err(JournalError::CorruptEntry {
            key: printable(key),
            reason: "compressed events read without their decoder",
        });
    }
    let (first, last) = event_span(key)?;
    let rest = key.get(EVENT_PREFIX.len()..).unwrap_or_default();
    if rest.len() == 8 {
        let (at, payload) = split_event(key, value)?;
        return Ok((at, vec![(first, payload)]));
    }
    let corrupt = |reason| JournalError::CorruptEntry {
        key: printable(key),
        reason,
    };
    let at = append_time(key, value)?;
    let mut body = &value[TIME_LEN..];
    let count = usize::try_from(last - first).map_or(usize::MAX, |n| n.saturating_add(1));
    let mut out = Vec::with_capacity(count.min(body.len() / LEN_LEN + 1));
    let mut seq = first;
    while !body.is_empty() {
        // Counted, not compared with `last`: `seq` cannot pass u64::MAX.
        if out.len() == count {
            return Err(corrupt("segment holds more events than its key names"));
        }
        let (len, after) = body
            .split_first_chunk::<LEN_LEN>()
            .ok_or_else(|| corrupt("segment ends inside an event's length"))?;
        let len = usize::try_from(u32::from_be_bytes(*len)).unwrap_or(usize::MAX);
        if after.len() < len {
            return Err(corrupt("segment ends inside an event"));
        }
        let (payload, after) = after.split_at(len);
        out.push((seq, payload));
        body = after;
        seq = seq.saturating_add(1);
    }
    if out.len() != count {
        return Err(corrupt("segment holds fewer events than its key names"));
    }
    Ok((at, out))
}

/// Whether a `d/` or `r/` key has its shape: a non-empty sink name, NUL, an 8-byte sequence number.
pub(super) fn queue_key_is_valid(key: &[u8]) -> bool {
    let rest = key.get(2..).unwrap_or_default();
    rest.len() > 9 && rest.get(rest.len() - 9) == Some(&0) && !rest[..rest.len() - 9].contains(&0)
}

/// Splits a stored event into its append time and the rendered CloudEvent.
pub(super) fn split_event<'a>(key: &[u8], value: &'a [u8]) -> Result<(u64, &'a [u8])> {
    if value.len() < TIME_LEN {
        return Err(JournalError::CorruptEntry {
            key: printable(key),
            reason: "event shorter than its timestamp",
        });
    }
    let (time, payload) = value.split_at(TIME_LEN);
    Ok((decode_u64(key, time)?, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_keys_sort_in_sequence_order() {
        let mut keys: Vec<_> = [256u64, 1, 255, u64::from(u32::MAX) + 1, 2]
            .into_iter()
            .map(event)
            .collect();
        keys.sort();
        let seqs: Vec<u64> = keys.iter().map(|k| event_span(k).unwrap().0).collect();
        assert_eq!(seqs, [1, 2, 255, 256, u64::from(u32::MAX) + 1]);
    }

    #[test]
    fn segments_sort_between_single_events_by_their_first_sequence_number() {
        let mut keys = [
            event(5),
            segment(6, 9),
            event(10),
            segment(1, 4),
            event(256),
        ];
        keys.sort();
        let spans: Vec<(u64, u64)> = keys.iter().map(|k| event_span(k).unwrap()).collect();
        assert_eq!(spans, [(1, 4), (5, 5), (6, 9), (10, 10), (256, 256)]);
        // `event(n)` is the lower bound of a scan of the keys from `n` on.
        assert!(event(6) < segment(6, 9) && segment(6, 9) < event(7));
        assert!(event_span(&segment(9, 6)).is_err());
    }

    #[test]
    fn a_segment_round_trips_its_events_and_a_damaged_one_is_corrupt() {
        let events: [&[u8]; 3] = [b"{\"a\":1}", b"", b"{}"];
        let v = segment_plain(42, events).unwrap();
        let (at, read) = split_events(&segment(7, 9), &v).unwrap();
        assert_eq!(at, 42);
        assert_eq!(read, [(7, events[0]), (8, events[1]), (9, events[2])]);
        assert_eq!(append_time(&segment(7, 9), &v).unwrap(), 42);
        // A single event reads as before.
        let single = event_value(3, b"{}");
        assert_eq!(
            split_events(&event(4), &single).unwrap(),
            (3, vec![(4, &b"{}"[..])])
        );
        // The key names more or fewer events than the value holds, or the value is cut.
        assert!(split_events(&segment(7, 10), &v).is_err());
        assert!(split_events(&segment(7, 8), &v).is_err());
        assert!(split_events(&segment(7, 9), &v[..v.len() - 1]).is_err());
        assert!(split_events(&segment(7, 9), &v[..10]).is_err());
        assert!(split_events(&segment(7, 9), &v[..4]).is_err());
    }

    /// Events of one append, as herald renders them: most of their bytes are shared.
    fn rendered(n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                format!(
                    r#"{{"specversion":"1.0","id":"8e08ddf6-b4cc-4ee8-a9f2-e0ac6861{i:04}:{rv}:updated","source":"k8s://bench/example.com/widgets","type":"dev.herald.resource.updated","subject":"default/widget-{i:06}","time":"2026-12-04T21:12:24.881Z","datacontenttype":"application/json","dataschema":"urn:herald:change:v1","k8sgroup":"example.com","k8skind":"Widget","k8sname":"widget-{i:06}","resourceversion":"{rv}","resync":false,"data":{{"op":"updated","object":{{"apiVersion":"example.com/v1","kind":"Widget","metadata":{{"name":"widget-{i:06}","namespace":"default","resourceVersion":"{rv}"}},"spec":{{"replicas":3,"image":"registry.example/app:1.2.3"}}}},"resync":false}}}}"#,
                    rv = 1000 + i
                )
                .into_bytes()
            })
            .collect()
    }

    #[test]
    fn a_compressed_segment_reads_back_through_its_decoder_and_a_damaged_one_is_corrupt() {
        let events = rendered(3);
        let v = segment_value(42, events.iter().map(Vec::as_slice)).unwrap();
        let plain = segment_plain(42, events.iter().map(Vec::as_slice)).unwrap();
        assert!(compressed::is_compressed(&v));
        assert!(
            v.len() * 2 < plain.len(),
            "{} of {} bytes",
            v.len(),
            plain.len()
        );
        // Retention reads the time without decompressing; an append sets it after compressing.
        assert_eq!(append_time(&segment(7, 9), &v).unwrap(), 42);
        let mut later = v.clone();
        set_append_time(&mut later, 43);
        assert_eq!(append_time(&segment(7, 9), &later).unwrap(), 43);
        assert_eq!(
            split_events(
                &segment(7, 9),
                &plain_events(&segment(7, 9), &later).unwrap()
            )
            .unwrap()
            .0,
            43
        );
        let key = segment(7, 9);
        let read = plain_events(&key, &v).unwrap();
        assert_eq!(*read, *plain);
        let (at, read) = split_events(&key, &read).unwrap();
        assert_eq!(at, 42);
        let expected: Vec<(u64, &[u8])> = (7..).zip(events.iter().map(Vec::as_slice)).collect();
        assert_eq!(read, expected);
        // A plain (schema-5) value reads as it is; a compressed one only through the decoder.
        assert_eq!(plain_events(&key, &plain).unwrap(), plain);
        assert!(split_events(&key, &v).is_err());
        // Cut anywhere, or its length damaged: corrupt, never a panic.
        for cut in 1..v.len() {
            assert!(plain_events(&key, &v[..cut]).is_err(), "cut at {cut}");
        }
        let mut damaged = v.clone();
        damaged[9..13].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(plain_events(&key, &damaged).is_err());
    }

    #[test]
    fn an_append_is_cut_into_segments_of_at_most_segment_bytes() {
        let small = vec![0u8; 1_000];
        let big = vec![0u8; SEGMENT_BYTES * 2];
        // Three 1,004-byte entries and the time fill 3,020 bytes: the 4th starts a new segment.
        let events = vec![small.clone(); 13];
        assert_eq!(
            segment_runs(&events, SEGMENT_BYTES),
            [0..3, 3..6, 6..9, 9..12, 12..13]
        );
        let events = vec![small.clone(), big.clone(), small.clone()];
        assert_eq!(segment_runs(&events, SEGMENT_BYTES), [0..1, 1..2, 2..3]);
        assert_eq!(
            segment_runs(&[big], SEGMENT_BYTES),
            std::iter::once(0..1).collect::<Vec<_>>()
        );
        assert!(segment_runs(&[], SEGMENT_BYTES).is_empty());
        for run in segment_runs(&vec![small; 40], SEGMENT_BYTES) {
            let v = segment_plain(0, vec![&[0u8; 1_000][..]; run.len()]).unwrap();
            assert!(v.len() <= SEGMENT_BYTES);
        }
    }

    #[test]
    fn compressed_segments_hold_more_events_and_never_pass_segment_bytes() {
        // Shared bytes: a segment holds several times the events a plain one did (two or three).
        let events = rendered(64);
        let segments = segment_values(5, &events).unwrap();
        assert!(segments.len() <= 64 / 8, "{} segments", segments.len());
        // Bytes that do not compress: runs halved until each value fits, every event kept in order.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let noise: Vec<Vec<u8>> = (0..12)
            .map(|_| {
                (0..900)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        state.to_be_bytes()[0]
                    })
                    .collect()
            })
            .collect();
        for events in [&events, &noise] {
            let segments = segment_values(5, events).unwrap();
            let mut next = 0;
            for (run, value) in &segments {
                assert_eq!(run.start, next);
                next = run.end;
                assert!(value.len() <= SEGMENT_BYTES, "{} bytes", value.len());
                let key = segment(run.start as u64, run.end as u64 - 1);
                let plain = plain_events(&key, value).unwrap();
                let (at, read) = split_events(&key, &plain).unwrap();
                assert_eq!(at, 5);
                let read: Vec<&[u8]> = read.into_iter().map(|(_, e)| e).collect();
                let expected: Vec<&[u8]> = events[run.clone()].iter().map(Vec::as_slice).collect();
                assert_eq!(read, expected);
            }
            assert_eq!(next, events.len());
        }
    }

    #[test]
    fn index_prefix_of_one_stream_excludes_longer_stream_names() {
        let a = index_prefix("a");
        assert!(index("a", "ns/x").starts_with(&a));
        assert!(!index("ab", "ns/x").starts_with(&a));
    }

    #[test]
    fn first_sync_markers_are_readable_only_with_a_stream_and_their_value() {
        assert_eq!(
            first_sync("example.com/widgets/*"),
            b"f/example.com/widgets/*"
        );
        assert!(first_sync_readable(
            b"example.com/widgets/*",
            FIRST_SYNC_SKIPPING
        ));
        assert!(!first_sync_readable(b"example.com/widgets/*", b"skiq"));
        assert!(!first_sync_readable(b"", FIRST_SYNC_SKIPPING));
        assert!(!first_sync_readable(b"a\0b", FIRST_SYNC_SKIPPING));
        assert!(!first_sync_readable(&[0xff, 0xfe], FIRST_SYNC_SKIPPING));
    }

    #[test]
    fn names_with_nul_or_empty_are_rejected() {
        assert!(check_name("stream", "a\0b").is_err());
        assert!(check_name("sink", "").is_err());
        assert!(check_name("sink", "kafka-main").is_ok());
    }

    #[test]
    fn acknowledged_ranges_round_trip_and_bad_ones_are_corrupt() {
        let ranges = [(3, 5), (7, 7), (u64::from(u32::MAX), u64::MAX)];
        assert_eq!(
            decode_ranges(b"a/x", &encode_ranges(&ranges)).unwrap(),
            ranges
        );
        assert!(decode_ranges(b"a/x", &[0; 15]).is_err());
        assert!(decode_ranges(b"a/x", &encode_ranges(&[(5, 3)])).is_err());
        assert!(decode_ranges(b"a/x", &encode_ranges(&[(3, 5), (6, 8)])).is_err());
        assert!(decode_ranges(b"a/x", &encode_ranges(&[(3, 5), (1, 2)])).is_err());
    }

    #[test]
    fn short_event_value_is_corrupt() {
        assert!(matches!(
            split_event(b"e/x", b"1234"),
            Err(JournalError::CorruptEntry { .. })
        ));
        let v = event_value(7, b"{}");
        assert_eq!(split_event(b"e/x", &v).unwrap(), (7, &b"{}"[..]));
    }
}
