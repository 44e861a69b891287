//! Durations (`500ms`, `10s`, `1h`) and byte sizes (`64MiB`) written as strings with units.
//!
//! Both refuse bare numbers: `retain: 10` could mean seconds or milliseconds, `maxSize: 64` bytes or
//! megabytes, and guessing wrong is worse than asking.

use std::fmt;
use std::time::Duration;

use serde::Deserializer;
use serde::de::{self, Visitor};

/// Parses a duration such as `500ms`, `10s`, `1h` or `1h 30m` (humantime syntax).
///
/// # Errors
/// A message quoting `text` and saying what is wrong with it.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| format!("invalid duration {text:?}: {e}"))
}

/// An upper bound on a duration key, with its spelling for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// The longest the key may be.
    pub max: Duration,
    /// `max` as users write it (`1h`).
    pub text: &'static str,
}

impl Bound {
    /// The bound `max`, written `text`.
    #[must_use]
    pub const fn new(max: Duration, text: &'static str) -> Self {
        Self { max, text }
    }

    /// Records at `key` that `value` is longer than this bound, saying `why` the bound exists.
    pub fn check(self, problems: &mut super::Problems, key: &str, value: Duration, why: &str) {
        if let Some(message) = self.problem(value, why) {
            problems.add(key, message);
        }
    }

    /// The message when `value` is longer than this bound, saying `why` the bound exists. The
    /// value is not repeated: the key names it, and an absurd one reads badly.
    #[must_use]
    pub fn problem(self, value: Duration, why: &str) -> Option<String> {
        (value > self.max).then(|| format!("must be at most {}: {why}", self.text))
    }
}

/// The longest a timeout may be (a request, a connection, an acknowledgement): what has not
/// answered within an hour is better retried, and far larger values overflow timers.
pub const MAX_TIMEOUT: Bound = Bound::new(Duration::from_secs(3600), "1h");

/// The longest anything may be kept or retried (`journal.retain`, `maxAge`): ten years, beyond
/// which a value is a slip (`100000000000days`) rather than a wish, and would overflow clocks.
pub const MAX_KEEP: Bound = Bound::new(Duration::from_secs(3650 * 24 * 3600), "3650d");

/// The binary and decimal units a size may carry, with their factor in bytes.
const SIZE_UNITS: &[(&str, u64)] = &[
    ("B", 1),
    ("KB", 1000),
    ("kB", 1000),
    ("MB", 1000 * 1000),
    ("GB", 1000 * 1000 * 1000),
    ("TB", 1000 * 1000 * 1000 * 1000),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
    // Kubernetes quantity spelling, because that is what the people writing this file type daily.
    ("Ki", 1 << 10),
    ("Mi", 1 << 20),
    ("Gi", 1 << 30),
    ("Ti", 1 << 40),
];

/// The units listed in error messages.
const SIZE_UNIT_LIST: &str = "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB, Ki, Mi, Gi, Ti";

/// Parses a size such as `64MiB`, `512 KiB`, `1GB` or `100B` into bytes.
///
/// # Errors
/// A message quoting `text` and saying what is wrong with it.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits_end);
    let unit = unit.trim_start();
    if number.is_empty() {
        return Err(format!(
            "invalid size {text:?}: expected a whole number followed by a unit ({SIZE_UNIT_LIST})"
        ));
    }
    if unit.starts_with('.') {
        return Err(format!(
            "invalid size {text:?}: fractions are not supported, use a smaller unit"
        ));
    }
    if unit.is_empty() {
        return Err(format!(
            "invalid size {text:?}: unit needed, for example {number}MiB or {number}B"
        ));
    }
    let Some(&(_, factor)) = SIZE_UNITS.iter().find(|(name, _)| *name == unit) else {
        return Err(format!(
            "invalid size {text:?}: unknown unit {unit:?}, expected one of {SIZE_UNIT_LIST}"
        ));
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
        .ok_or_else(|| format!("invalid size {text:?}: too large"))
}

/// `deserialize_with` for [`Duration`] fields.
///
/// # Errors
/// Anything but a string that [`parse_duration`] takes.
pub fn deserialize_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    d.deserialize_str(DurationVisitor)
}

/// `deserialize_with` for an optional duration key (serde calls it only when the key is present).
///
/// # Errors
/// As [`deserialize_duration`].
pub fn deserialize_some_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    deserialize_duration(d).map(Some)
}

/// `deserialize_with` for byte-size fields.
///
/// # Errors
/// Anything but a string that [`parse_size`] takes.
pub fn deserialize_size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_str(SizeVisitor)
}

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration with a unit, like 500ms, 10s or 1h")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
        parse_duration(v).map_err(E::custom)
    }
}

struct SizeVisitor;

impl Visitor<'_> for SizeVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a size with a unit, like 64MiB, 512KiB or 1GB")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        parse_size(v).map_err(E::custom)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_durations_with_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_durations_without_or_with_unknown_units() {
        assert_eq!(
            parse_duration("10"),
            Err(r#"invalid duration "10": time unit needed, for example 10sec or 10ms"#.into())
        );
        let unknown = parse_duration("10 parsecs").unwrap_err();
        assert!(
            unknown.starts_with(r#"invalid duration "10 parsecs": unknown time unit "parsecs""#),
            "{unknown}"
        );
        assert_eq!(
            parse_duration(""),
            Err(r#"invalid duration "": value was empty"#.into())
        );
    }

    #[test]
    fn durations_over_their_bound_are_problems() {
        let mut problems = super::super::Problems::default();
        let absurd = parse_duration("100000000000days").unwrap();
        MAX_TIMEOUT.check(&mut problems, "timeout", absurd, "why");
        MAX_TIMEOUT.check(&mut problems, "ok", MAX_TIMEOUT.max, "why");
        MAX_KEEP.check(
            &mut problems,
            "keep",
            MAX_KEEP.max + Duration::from_secs(1),
            "why",
        );
        let found: Vec<(String, String)> =
            problems.into_iter().map(|p| (p.key, p.message)).collect();
        assert_eq!(
            found,
            [
                ("timeout".to_owned(), "must be at most 1h: why".to_owned()),
                ("keep".to_owned(), "must be at most 3650d: why".to_owned()),
            ]
        );
        for bound in [MAX_TIMEOUT, MAX_KEEP] {
            assert_eq!(parse_duration(bound.text), Ok(bound.max));
        }
    }

    #[test]
    fn parses_sizes_with_units() {
        assert_eq!(parse_size("64MiB"), Ok(64 * 1024 * 1024));
        assert_eq!(parse_size("512 KiB"), Ok(512 * 1024));
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_size("2Gi"), Ok(2 << 30));
        assert_eq!(parse_size("100B"), Ok(100));
    }

    #[test]
    fn rejects_sizes_without_or_with_unknown_units() {
        assert_eq!(
            parse_size("64"),
            Err(r#"invalid size "64": unit needed, for example 64MiB or 64B"#.into())
        );
        assert_eq!(
            parse_size("64 MiBs"),
            Err(format!(
                r#"invalid size "64 MiBs": unknown unit "MiBs", expected one of {SIZE_UNIT_LIST}"#
            ))
        );
        assert_eq!(
            parse_size("MiB"),
            Err(format!(
                r#"invalid size "MiB": expected a whole number followed by a unit ({SIZE_UNIT_LIST})"#
            ))
        );
        assert_eq!(
            parse_size("1.5GiB"),
            Err(r#"invalid size "1.5GiB": fractions are not supported, use a smaller unit"#.into())
        );
        assert_eq!(
            parse_size("99999999999TiB"),
            Err(r#"invalid size "99999999999TiB": too large"#.into())
        );
    }
}
