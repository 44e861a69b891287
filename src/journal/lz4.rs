//! An LZ4 block compressor against a dictionary whose hash table is built once.
//!
//! `lz4_flex::block::compress_into_with_dict` allocates and zero-fills a hash table and hashes the
//! whole dictionary on every call: about a third of what compressing a journal value cost, more
//! for one small `i/` value (docs/operations.md, "The append thread (round 8)"). Its API cannot
//! keep a prepared table, so this module keeps one ([`Prepared`]) and starts each call from a
//! copy of it (8 KiB on the stack). It writes standard LZ4 blocks (the block format of the LZ4
//! specification: sequences of a token, literals, a 2-byte offset and a match length, the
//! dictionary logically before the input), which `lz4_flex::block::decompress_into_with_dict`
//! reads back: the stored format is the one schema 6 has always written, and lz4_flex stays the
//! one decoder.
//!
//! The search is LZ4's greedy one: a 4,096-entry table of the last position of each 5-byte hash,
//! a match taken as soon as 4 bytes agree, extended forward and back, and a step that grows while
//! nothing matches.

use crate::bytes::common_prefix;

/// log2 of the hash table's entries.
const HASH_LOG: u32 = 12;

/// Entries in the hash table: positions in the dictionary followed by the input, as u16, so a
/// table is 8 KiB and every position it holds is within LZ4's 64 KiB window.
const TABLE: usize = 1 << HASH_LOG;

/// The shortest match LZ4 encodes.
const MIN_MATCH: usize = 4;

/// The specification's end of block rules: the last 5 bytes are literals, and the last match
/// starts at least 12 bytes before the end.
const LAST_LITERALS: usize = 5;
const MF_LIMIT: usize = 12;

/// After 2^6 positions without a match the step grows by one (as LZ4's reference compressor).
const SKIP_TRIGGER: u32 = 6;

/// A token's 4-bit length that says more length bytes follow.
const RUN_MASK: usize = 15;

/// Multiplier of the 5-byte hash (the one LZ4's reference compressor uses on 64-bit targets).
const PRIME_5: u64 = 889_523_592_379;

/// A dictionary and the hash table of its positions.
pub(super) struct Prepared {
    dict: &'static [u8],
    table: Box<[u16; TABLE]>,
}

impl Prepared {
    /// Hashes every position of `dict` once. A dictionary longer than LZ4's window keeps only its
    /// last 64 KiB minus one byte's worth, as the decoder reaches no further.
    pub(super) fn new(dict: &'static [u8]) -> Self {
        let dict = dict
            .get(dict.len().saturating_sub(usize::from(u16::MAX))..)
            .unwrap_or_default();
        let mut table = Box::new([0_u16; TABLE]);
        let mut at = 0;
        while at + 8 <= dict.len() {
            table[hash(read_u64(dict, at))] = position(at);
            at += 1;
        }
        Self { dict, table }
    }

    /// Appends the LZ4 block of `input`, compressed against the dictionary, to `out`; returns
    /// false, writing nothing, when the dictionary and the input together pass 64 KiB (a u16
    /// table cannot name their positions; the caller compresses those another way).
    pub(super) fn compress_into(&self, input: &[u8], out: &mut Vec<u8>) -> bool {
        let base = self.dict.len();
        if base + input.len() > usize::from(u16::MAX) {
            return false;
        }
        let n = input.len();
        out.reserve(n + n / 255 + 16);
        let mut anchor = 0;
        if n > MF_LIMIT {
            let mut table = *self.table;
            let src = Source {
                dict: self.dict,
                input,
            };
            let match_end = n - LAST_LITERALS;
            let search_end = n - MF_LIMIT;
            let mut at = 0;
            'sequences: loop {
                let mut misses = 1_u32 << SKIP_TRIGGER;
                let candidate = loop {
                    if at >= search_end {
                        break 'sequences;
                    }
                    let slot = &mut table[hash(read_u64(input, at))];
                    let candidate = usize::from(*slot);
                    *slot = position(base + at);
                    if candidate < base + at && src.four(candidate) == Some(read_u32(input, at)) {
                        break candidate;
                    }
                    at += (misses >> SKIP_TRIGGER) as usize;
                    misses += 1;
                };
                let mut len =
                    MIN_MATCH + src.common(candidate + MIN_MATCH, at + MIN_MATCH, match_end);
                let (mut start, mut from) = (at, candidate);
                while start > anchor && from > 0 && src.byte(from - 1) == input.get(start - 1) {
                    start -= 1;
                    from -= 1;
                    len += 1;
                }
                sequence(out, &input[anchor..start], base + start - from, len);
                at = start + len;
                anchor = at;
                if at >= search_end {
                    break;
                }
                // As the reference compressor: the position two back from the match's end is
                // likely to start the next one's source.
                table[hash(read_u64(input, at - 2))] = position(base + at - 2);
            }
        }
        last_literals(out, &input[anchor..]);
        true
    }
}

/// The dictionary followed by the input, addressed as one: what a match's offset counts back in.
struct Source<'a> {
    dict: &'a [u8],
    input: &'a [u8],
}

impl Source<'_> {
    fn byte(&self, at: usize) -> Option<&u8> {
        match at.checked_sub(self.dict.len()) {
            Some(i) => self.input.get(i),
            None => self.dict.get(at),
        }
    }

    /// The 4 bytes at `at`, if they lie wholly in the dictionary or wholly in the input.
    fn four(&self, at: usize) -> Option<u32> {
        let bytes = match at.checked_sub(self.dict.len()) {
            Some(i) => self.input.get(i..)?,
            None => self.dict.get(at..)?,
        };
        bytes.first_chunk::<4>().map(|b| u32::from_le_bytes(*b))
    }

    /// How many bytes from `from` equal the input's from `at`, up to the input's `end`: a match
    /// that starts in the dictionary may run on into the input, as the decoder copies it.
    fn common(&self, from: usize, at: usize, end: usize) -> usize {
        let ahead = self.input.get(at..end).unwrap_or_default();
        match from.checked_sub(self.dict.len()) {
            Some(i) => common_prefix(self.input.get(i..).unwrap_or_default(), ahead),
            None => {
                let in_dict = self.dict.get(from..).unwrap_or_default();
                let n = common_prefix(in_dict, ahead);
                if n < in_dict.len() || n == ahead.len() {
                    return n;
                }
                n + common_prefix(self.input, ahead.get(n..).unwrap_or_default())
            }
        }
    }
}

fn hash(bytes: u64) -> usize {
    // The low 5 bytes, little-endian: the top 3 shifted out.
    ((bytes << 24).wrapping_mul(PRIME_5) >> (64 - HASH_LOG)) as usize
}

/// A table position: below 64 KiB by the length check in [`Prepared::compress_into`].
fn position(at: usize) -> u16 {
    debug_assert!(
        at <= usize::from(u16::MAX),
        "position {at} past the table's reach"
    );
    u16::try_from(at).unwrap_or(u16::MAX)
}

/// The 8 bytes at `at` (callers stay 8 bytes before the end; past it reads as 0, never matched).
fn read_u64(bytes: &[u8], at: usize) -> u64 {
    bytes
        .get(at..)
        .and_then(<[u8]>::first_chunk::<8>)
        .map_or(0, |b| u64::from_le_bytes(*b))
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    bytes
        .get(at..)
        .and_then(<[u8]>::first_chunk::<4>)
        .map_or(0, |b| u32::from_le_bytes(*b))
}

/// One sequence: literals, then a match of `len` bytes `offset` back.
fn sequence(out: &mut Vec<u8>, literals: &[u8], offset: usize, len: usize) {
    let extra = len - MIN_MATCH;
    out.push(token(literals.len(), extra));
    if literals.len() >= RUN_MASK {
        length(out, literals.len() - RUN_MASK);
    }
    out.extend_from_slice(literals);
    out.extend_from_slice(&position(offset).to_le_bytes());
    if extra >= RUN_MASK {
        length(out, extra - RUN_MASK);
    }
}

/// The block's last sequence: literals only.
fn last_literals(out: &mut Vec<u8>, literals: &[u8]) {
    out.push(token(literals.len(), 0));
    if literals.len() >= RUN_MASK {
        length(out, literals.len() - RUN_MASK);
    }
    out.extend_from_slice(literals);
}

fn token(literals: usize, extra: usize) -> u8 {
    // Both nibbles at most 15.
    ((literals.min(RUN_MASK) << 4) | extra.min(RUN_MASK)) as u8
}

/// The rest of a length past its token's 15: bytes of 255 while it lasts, then what remains.
fn length(out: &mut Vec<u8>, mut rest: usize) {
    while rest >= 255 {
        out.push(255);
        rest -= 255;
    }
    out.push(rest as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::compressed::DICTIONARY_1;
    use std::sync::LazyLock;

    static PREPARED: LazyLock<Prepared> = LazyLock::new(|| Prepared::new(DICTIONARY_1));

    /// The largest input the prepared table takes with dictionary 1.
    fn largest() -> usize {
        usize::from(u16::MAX) - DICTIONARY_1.len()
    }

    fn compress(input: &[u8]) -> Vec<u8> {
        let mut out = vec![0xee];
        assert!(
            PREPARED.compress_into(input, &mut out),
            "{} bytes",
            input.len()
        );
        // What was in `out` before stays.
        assert_eq!(out.remove(0), 0xee);
        out
    }

    /// Compresses `input` and reads it back with lz4_flex, the journal's decoder.
    fn round_trip(input: &[u8]) -> usize {
        let block = compress(input);
        let back = lz4_flex::block::decompress_with_dict(&block, input.len(), DICTIONARY_1)
            .unwrap_or_else(|e| panic!("{} bytes: {e}", input.len()));
        assert!(back == input, "{} bytes read back differently", input.len());
        block.len()
    }

    /// A deterministic byte stream (xorshift) nothing compresses.
    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()[3]
            })
            .collect()
    }

    fn object(i: u64) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": format!("widget-{i:06}"), "namespace": "default",
                "labels": {"app": "bench", "tier": if i.is_multiple_of(2) { "gold" } else { "silver" }},
                "uid": format!("82a57c32-eed0-4106-a385-{:012x}", i * 7919),
                "creationTimestamp": "2026-12-04T21:09:14Z", "generation": i % 5 + 1,
                "resourceVersion": (1000 + i * 3).to_string()},
            "spec": {"replicas": i % 7, "image": "registry.example/app:1.2.3", "churn": i,
                "env": [{"name": "MODE", "value": "production"}, {"name": "REGION", "value": "eu-west-1"}]}}))
        .unwrap()
    }

    /// A CloudEvent as herald renders one, with a patch.
    fn event(i: u64) -> Vec<u8> {
        let mut e = serde_json::to_vec(&serde_json::json!({"specversion": "1.0",
            "id": format!("82a57c32:{}:updated", 1000 + i * 3), "source": "k8s://bench/example.com/widgets",
            "type": "dev.herald.resource.updated", "subject": format!("default/widget-{i:06}"),
            "time": "2026-12-04T21:09:14.123456Z", "datacontenttype": "application/json",
            "dataschema": "urn:herald:change:v1", "resourceversion": (1000 + i * 3).to_string(),
            "resync": false, "sequence": format!("{:020}", i + 1)}))
        .unwrap();
        e.pop();
        e.extend_from_slice(b",\"data\":{\"op\":\"updated\",\"object\":");
        e.extend_from_slice(&object(i));
        e.extend_from_slice(
            format!(r#","patch":[{{"op":"replace","path":"/spec/churn","value":{i}}}]}}}}"#)
                .as_bytes(),
        );
        e
    }

    /// Events with their lengths, as a segment's plain form holds them after its append time.
    fn segment(first: u64, count: u64) -> Vec<u8> {
        let mut v = Vec::new();
        for i in first..first + count {
            let e = event(i);
            v.extend_from_slice(&u32::try_from(e.len()).unwrap().to_be_bytes());
            v.extend_from_slice(&e);
        }
        v
    }

    #[test]
    fn empty_tiny_and_boundary_lengths_read_back() {
        assert_eq!(compress(b""), [0]);
        let text = segment(0, 40);
        for len in 0..=300 {
            round_trip(&text[..len]);
            round_trip(&noise(len, len as u64));
            round_trip(&vec![b'a'; len]);
            round_trip(&DICTIONARY_1[..len]);
        }
        // Literal and match lengths at their 15 and 15 + 255 bounds, runs of every short length.
        for len in [
            14, 15, 16, 19, 20, 269, 270, 271, 274, 275, 276, 525, 526, 527,
        ] {
            let mut v = noise(len, 7);
            v.extend_from_slice(&v.clone());
            v.extend_from_slice(&noise(20, 9));
            round_trip(&v);
        }
    }

    #[test]
    fn long_runs_and_noise_read_back_up_to_the_largest_input() {
        for len in [1_000, 4_096, 16 * 1024, largest() - 1, largest()] {
            round_trip(&vec![0; len]);
            round_trip(&noise(len, len as u64));
            let text: Vec<u8> = segment(0, 200).into_iter().cycle().take(len).collect();
            round_trip(&text);
        }
        // Past it the caller compresses another way; nothing is written.
        let mut out = Vec::new();
        assert!(!PREPARED.compress_into(&vec![0; largest() + 1], &mut out));
        assert!(out.is_empty());
    }

    #[test]
    fn matches_reach_into_the_dictionary_and_run_on_from_it_into_the_input() {
        // A piece of the dictionary compresses to a few bytes: one match into it.
        let piece = &DICTIONARY_1[100..1100];
        assert!(round_trip(piece) < 20);
        // The dictionary's last bytes, then the input's first: a match that starts in the
        // dictionary and runs on into the input, which the decoder copies in two parts.
        let head = b"0123456789abcdefghij-crossing-into-the-input";
        let mut v = head.to_vec();
        v.extend_from_slice(&DICTIONARY_1[DICTIONARY_1.len() - 30..]);
        v.extend_from_slice(head);
        v.extend_from_slice(&noise(40, 3));
        round_trip(&v);
        // The whole dictionary, twice, then pieces of it in another order.
        let mut v = DICTIONARY_1.to_vec();
        v.extend_from_slice(DICTIONARY_1);
        for start in (0..DICTIONARY_1.len() - 64).step_by(97).rev() {
            v.extend_from_slice(&DICTIONARY_1[start..start + 64]);
            v.extend_from_slice(&noise(5, start as u64));
        }
        round_trip(&v);
    }

    #[test]
    fn a_generated_corpus_reads_back_in_no_more_bytes_than_lz4_flex_wrote() {
        let mut corpus: Vec<Vec<u8>> = (0..200).map(object).collect();
        corpus.extend((0..200).map(event));
        corpus.extend((0..40).map(|i| segment(i * 10, 1 + i % 16)));
        corpus.extend((1..50).map(|i| {
            let mut v = event(i);
            v.extend_from_slice(&noise(i as usize * 13, i));
            v.extend_from_slice(&object(i + 1));
            v
        }));
        let (mut ours, mut theirs) = (0, 0);
        for input in &corpus {
            ours += round_trip(input);
            theirs += lz4_flex::block::compress_with_dict(input, DICTIONARY_1).len();
        }
        assert!(ours <= theirs, "{ours} bytes against lz4_flex's {theirs}");
    }

    /// One piece of a generated input: what LZ4 finds matches in (the dictionary's bytes, the
    /// input's own earlier bytes, overlapping or not, runs) beside what it finds none in.
    #[derive(Debug, Clone)]
    enum Piece {
        Noise(Vec<u8>),
        Dictionary(usize, usize),
        Earlier(usize, usize),
        Run(u8, usize),
    }

    fn piece() -> impl proptest::strategy::Strategy<Value = Piece> {
        use proptest::prelude::*;
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64).prop_map(Piece::Noise),
            (0..DICTIONARY_1.len(), 0usize..300).prop_map(|(at, len)| Piece::Dictionary(at, len)),
            (1usize..5_000, 0usize..600).prop_map(|(back, len)| Piece::Earlier(back, len)),
            (any::<u8>(), 0usize..2_000).prop_map(|(b, len)| Piece::Run(b, len)),
        ]
    }

    fn assemble(pieces: &[Piece]) -> Vec<u8> {
        let mut input: Vec<u8> = Vec::new();
        for p in pieces {
            match p {
                Piece::Noise(bytes) => input.extend_from_slice(bytes),
                Piece::Dictionary(at, len) => {
                    let end = (at + len).min(DICTIONARY_1.len());
                    input.extend_from_slice(&DICTIONARY_1[*at..end]);
                }
                // Byte by byte, so a copy may overlap what it is copying (a run of a pattern).
                Piece::Earlier(back, len) if *back <= input.len() => {
                    let from = input.len() - back;
                    for i in 0..*len {
                        input.push(input[from + i]);
                    }
                }
                Piece::Earlier(..) => {}
                Piece::Run(b, len) => input.extend(std::iter::repeat_n(*b, *len)),
            }
        }
        input.truncate(largest());
        input
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
        /// Whatever the input, lz4_flex (the journal's decoder) reads the block back as it was.
        #[test]
        fn any_input_reads_back_with_lz4_flex(pieces in proptest::collection::vec(piece(), 0..40)) {
            round_trip(&assemble(&pieces));
        }
    }
}
