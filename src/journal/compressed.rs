//! The compressed form of stored values (schema 6): an `i/` value or an `e/` segment compressed
//! with LZ4 against a dictionary built into the binary, behind a tag byte naming the form.
//!
//! sled pays per byte logged as well as per key: every insert is written as a link and again in
//! every rewrite of its leaf. A value compressed alone barely shrinks (one object repeats little
//! of itself); against a dictionary of what every herald event and Kubernetes object repeats it
//! does (docs/operations.md, "Compressed journal values, schema 6 (round 7)"; ADR 0029). The
//! dictionary is part of the binary, so the store holds nothing new that verify, salvage, compact
//! or retention would have to carry.
//!
//! The tag cannot be taken for the first byte of an older value: an index value of schemas 1–5 is
//! a JSON object (`{`), an event value starts with its u64 big-endian append time, whose first
//! byte is 0 until the year 2,280,000. A later dictionary gets a tag of its own, and this one stays
//! readable.

use std::borrow::Cow;
use std::sync::LazyLock;

use lz4_flex::block;
use sled::IVec;

use super::error::{JournalError, Result};
use super::keys::printable;
use super::lz4::Prepared;

/// The tag of a value compressed against [`DICTIONARY_1`]: the tag, the plain length (u32 BE),
/// then the LZ4 block.
pub(super) const LZ4_DICTIONARY_1: u8 = 1;

/// Dictionary 1: a CloudEvent as herald renders it, JSON patch operations, and the field names
/// and common values of Kubernetes objects (metadata, `managedFields`, a pod template, status
/// conditions); nothing of any one resource. Never change a byte of it: values written with it
/// must read back. A better one is dictionary 2, under a tag of its own.
pub(super) static DICTIONARY_1: &[u8] = include_bytes!("dictionary-1.txt");

/// [`DICTIONARY_1`]'s hash table, built on first use: what every compression starts from.
static PREPARED_1: LazyLock<Prepared> = LazyLock::new(|| Prepared::new(DICTIONARY_1));

/// Bytes of the plain length after the tag.
const LEN_LEN: usize = 4;

/// LZ4 writes at most one byte per ~255 it restores: a stated plain length past that is damage,
/// and allocating it would let one damaged value exhaust memory.
const MAX_RATIO: usize = 255;

/// The largest plain value stored compressed: anything larger (no Kubernetes object comes near)
/// is stored plain, so a damaged length, which the ratio alone would let reach 255 times a big
/// value, never asks for more than this.
pub(super) const MAX_PLAIN: usize = 64 * 1024 * 1024;

/// Appends the compressed form of `plain` (tag, length, block) to `out`.
pub(super) fn compress_into(out: &mut Vec<u8>, plain: &[u8]) -> Result<()> {
    out.push(LZ4_DICTIONARY_1);
    compress_body_into(out, plain)
}

/// Appends what follows the tag in the compressed form of `plain` (length, block) to `out`: a
/// segment puts its append time between the tag and these.
pub(super) fn compress_body_into(out: &mut Vec<u8>, plain: &[u8]) -> Result<()> {
    let len = u32::try_from(plain.len())
        .map_err(|_| JournalError::EventTooLarge { bytes: plain.len() })?;
    out.extend_from_slice(&len.to_be_bytes());
    if PREPARED_1.compress_into(plain, out) {
        return Ok(());
    }
    // Past the prepared table's 64 KiB (no segment, and few objects, come near): lz4_flex, which
    // prepares a table of wider positions for this one call.
    let start = out.len();
    out.resize(start + block::get_maximum_output_size(plain.len()), 0);
    match block::compress_into_with_dict(plain, &mut out[start..], DICTIONARY_1) {
        Ok(written) => {
            out.truncate(start + written);
            Ok(())
        }
        // The output holds the largest block LZ4 can make of this input: not reached.
        Err(_) => Err(JournalError::EventTooLarge { bytes: plain.len() }),
    }
}

/// Whether a stored value is in the compressed form.
pub(super) fn is_compressed(value: &[u8]) -> bool {
    value.first() == Some(&LZ4_DICTIONARY_1)
}

/// Appends the plain bytes of a compressed value (tag, length, block) to `out`.
pub(super) fn decompress_into(key: &[u8], value: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let body =
        value
            .strip_prefix(&[LZ4_DICTIONARY_1])
            .ok_or_else(|| JournalError::CorruptEntry {
                key: printable(key),
                reason: "compressed value of an unknown form",
            })?;
    decompress_body_into(key, body, out)
}

/// Appends the plain bytes of what follows the tag of a compressed value (length, block) to `out`.
pub(super) fn decompress_body_into(key: &[u8], body: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let corrupt = |reason| JournalError::CorruptEntry {
        key: printable(key),
        reason,
    };
    let (len, block) = body
        .split_first_chunk::<LEN_LEN>()
        .ok_or_else(|| corrupt("compressed value ends inside its length"))?;
    let len = usize::try_from(u32::from_be_bytes(*len)).unwrap_or(usize::MAX);
    if len > MAX_PLAIN || len > block.len().saturating_mul(MAX_RATIO).saturating_add(16) {
        return Err(corrupt("compressed value states a length it cannot hold"));
    }
    let start = out.len();
    out.resize(start + len, 0);
    match block::decompress_into_with_dict(block, &mut out[start..], DICTIONARY_1) {
        Ok(written) if written == len => Ok(()),
        _ => {
            out.truncate(start);
            Err(corrupt("compressed value does not decompress"))
        }
    }
}

/// An `i/` value as stored: the object compressed when that makes it smaller, else the object
/// itself (a JSON object, which the tag cannot start). The compressed form is built in `scratch`,
/// which the caller keeps from one value to the next, so each value is allocated once, at its
/// size, as the [`IVec`] sled takes.
pub(super) fn index_value(object: &[u8], scratch: &mut Vec<u8>) -> Result<IVec> {
    if object.len() > MAX_PLAIN && object.first() == Some(&b'{') {
        return Ok(object.into());
    }
    scratch.clear();
    compress_into(scratch, object)?;
    if scratch.len() >= object.len() && object.first() == Some(&b'{') {
        return Ok(object.into());
    }
    Ok(scratch.as_slice().into())
}

/// The object of an `i/` value, either form.
pub(super) fn index_object<'a>(key: &[u8], value: &'a [u8]) -> Result<Cow<'a, [u8]>> {
    if !is_compressed(value) {
        return Ok(Cow::Borrowed(value));
    }
    let mut out = Vec::new();
    decompress_into(key, value, &mut out)?;
    Ok(Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OBJECT: &[u8] = br#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"widget-000001","namespace":"default","labels":{"app":"bench","tier":"gold"},"uid":"82a57c32-eed0-4106-a385-e98e2f98ae11","creationTimestamp":"2026-12-04T21:09:14Z","generation":1,"resourceVersion":"5"},"spec":{"replicas":3,"image":"registry.example/app:1.2.3","churn":-1,"env":[{"name":"MODE","value":"production"},{"name":"REGION","value":"eu-west-1"}]}}"#;

    #[test]
    fn dictionary_1_never_changes() {
        // FNV-1a of the bytes: a value written with dictionary 1 reads back only with these.
        let hash = DICTIONARY_1.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        });
        assert_eq!((DICTIONARY_1.len(), hash), (2927, DICTIONARY_1_FNV));
    }

    const DICTIONARY_1_FNV: u64 = 0xd81a_8666_7a39_8e66;

    #[test]
    fn an_index_value_shrinks_and_reads_back_and_an_old_one_reads_as_it_is() {
        let stored = index_value(OBJECT, &mut Vec::new()).unwrap();
        assert!(is_compressed(&stored));
        assert!(
            stored.len() * 3 < OBJECT.len() * 2,
            "{} bytes",
            stored.len()
        );
        assert_eq!(index_object(b"i/x", &stored).unwrap(), OBJECT);
        // A schema-5 value is the object itself.
        assert_eq!(index_object(b"i/x", OBJECT).unwrap(), OBJECT);
        // What compression cannot shrink is stored plain.
        assert_eq!(index_value(b"{}", &mut Vec::new()).unwrap(), b"{}");
    }

    #[test]
    fn an_object_past_the_prepared_tables_reach_is_compressed_and_reads_back() {
        let mut big = OBJECT[..OBJECT.len() - 1].to_vec();
        big.extend_from_slice(br#","data":{"blob":""#);
        let mut x = 0x9e37_79b9_u32;
        while big.len() < 100_000 {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let words: [&[u8]; 4] = [b"alpha ", b"beta ", b"gamma ", b"delta "];
            big.extend_from_slice(words[(x >> 30) as usize]);
        }
        big.extend_from_slice(br#""}}"#);
        let stored = index_value(&big, &mut Vec::new()).unwrap();
        assert!(is_compressed(&stored));
        assert_eq!(index_object(b"i/x", &stored).unwrap(), big);
    }

    #[test]
    fn a_damaged_compressed_value_is_corrupt_never_a_panic_or_a_huge_allocation() {
        let stored = index_value(OBJECT, &mut Vec::new()).unwrap();
        for cut in 0..stored.len() {
            assert!(index_object(b"i/x", &stored[..cut]).is_err() || cut == 0);
        }
        let mut wrong_len = stored.clone();
        wrong_len[1..5].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(index_object(b"i/x", &wrong_len).is_err());
        let mut short_len = stored.clone();
        short_len[1..5].copy_from_slice(&10u32.to_be_bytes());
        assert!(index_object(b"i/x", &short_len).is_err());
        let mut flipped = stored;
        for b in flipped.iter_mut().skip(5) {
            *b ^= 0x5a;
        }
        assert!(
            index_object(b"i/x", &flipped)
                .is_err_and(|e| matches!(e, JournalError::CorruptEntry { .. }))
        );
    }
}
