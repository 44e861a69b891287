//! The key layout of the journal's single sled tree (schema version 4; version 3 had no `f/` keys,
//! version 2 no `a/` keys either, version 1 neither those nor the head record file).
//!
//! | prefix | key | value |
//! |---|---|---|
//! | `meta/schema_version` | | ASCII decimal, `4` |
//! | `meta/head` | | u64 BE: the last assigned sequence number (survives retention emptying `e/`) |
//! | `meta/redaction_key` | | 32 random bytes: the key of the index's digests of redacted values |
//! | `e/` | u64 BE sequence number | u64 BE append time (ms since the epoch) + rendered CloudEvent |
//! | `i/` | stream, NUL, `<namespace>/<name>` | the last object seen |
//! | `c/` | stream | resourceVersion (UTF-8) |
//! | `f/` | stream | `skip`: the stream's first sync is under way and records the existing objects silently (`initialState: skip`); written with its first index entries, removed by the append that writes its first checkpoint (schema 4) |
//! | `s/` | sink | u64 BE cursor: the last acknowledged sequence number |
//! | `a/` | sink | acknowledged ranges above the cursor: pairs of u64 BE (first, last), ascending, disjoint |
//! | `d/` | sink, NUL, u64 BE sequence number | a dead letter (`dlq.rs`) |
//! | `r/` | sink, NUL, u64 BE sequence number | an event queued for replay (`dlq.rs`) |
//!
//! Beside the tree, `herald.head` (`head.rs`) holds the last durable sequence number.
//!
//! Big-endian sequence numbers make key order sequence order, so reads and retention are range scans.
//! The NUL after the stream keeps `i/a\0…` from matching a prefix scan of stream `a` for stream `ab`.

use super::error::{JournalError, Result};

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

/// Bytes of the append time in front of each stored event.
const TIME_LEN: usize = 8;

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

pub(super) fn event(seq: u64) -> Vec<u8> {
    prefixed(EVENT_PREFIX, &seq.to_be_bytes())
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

/// The sequence number of an `e/` key.
pub(super) fn event_seq(key: &[u8]) -> Result<u64> {
    decode_u64(key, key.get(EVENT_PREFIX.len()..).unwrap_or_default())
}

pub(super) fn event_value(append_ms: u64, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(TIME_LEN + payload.len());
    v.extend_from_slice(&append_ms.to_be_bytes());
    v.extend_from_slice(payload);
    v
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
        let seqs: Vec<u64> = keys.iter().map(|k| event_seq(k).unwrap()).collect();
        assert_eq!(seqs, [1, 2, 255, 256, u64::from(u32::MAX) + 1]);
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
