//! Property tests (proptest): arbitrary input to herald's parsers and decoders gives a value or a
//! typed error, never a panic, and encodings round-trip where they should. Pure functions only, so
//! this binary needs no simulator, broker or `herald` process; 256 cases per property by default
//! (`PROPTEST_CASES` overrides), so the whole binary runs in seconds.
//!
//! Each panic a property found is fixed and kept as a named regression test next to it.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod config;
mod headers;
mod selectors;
mod watch_line;

use proptest::prelude::*;

/// Strings that hold what breaks naive code: control characters, DEL, C1 controls, noncharacters,
/// quotes, `%`, separators and non-ASCII, mixed with ordinary name characters.
pub fn odd_string() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            4 => proptest::char::range('a', 'z'),
            1 => Just('\n'),
            1 => Just('\r'),
            1 => Just('\0'),
            1 => Just('\u{7f}'),
            1 => Just('\u{85}'),
            1 => Just('\u{ffff}'),
            1 => Just('%'),
            1 => Just('"'),
            1 => Just(' '),
            1 => Just('.'),
            1 => Just('*'),
            1 => Just('>'),
            1 => Just('/'),
            1 => Just(':'),
            1 => Just('é'),
            1 => Just('😀'),
            2 => any::<char>(),
        ],
        0..24,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

/// Arbitrary JSON values, a few levels deep.
pub fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        odd_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(odd_string(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
