//! The CloudEvents 1.0 event herald emits; start at [`CloudEvent`].

use std::collections::BTreeMap;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// The `specversion` every event carries. 1.0.2 events still say `1.0` (the spec keeps only major.minor).
pub const SPEC_VERSION: &str = "1.0";

/// Names of the CloudEvents core context attributes, as they appear on the wire.
///
/// None of these may be used as an extension name, and neither may `data`.
pub const CORE_ATTRIBUTES: [&str; 8] = [
    "specversion",
    "id",
    "source",
    "type",
    "subject",
    "time",
    "datacontenttype",
    "dataschema",
];

/// Longest extension name the spec allows (1.0.2 says "should"; herald treats it as a must so that
/// every binding, including ones with short header limits, can carry the name).
pub const MAX_EXTENSION_NAME_LEN: usize = 20;

/// Value of an extension attribute, limited to the CloudEvents types herald uses.
///
/// herald's extensions are strings except `resync` (a boolean). `Integer` is the spec's 32-bit
/// signed integer. Binary-mode bindings carry no type information, so an extension decoded from
/// `ce-`/`ce_` headers is always a `String` holding the canonical form (see the [`fmt::Display`] impl).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(untagged)]
pub enum ExtensionValue {
    /// A CloudEvents String.
    String(String),
    /// A CloudEvents Boolean; canonical string form `true`/`false`.
    Bool(bool),
    /// A CloudEvents Integer (32-bit signed); canonical string form in decimal.
    Integer(i32),
}

impl ExtensionValue {
    /// The value if it is a `String`.
    #[must_use]
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            Self::Bool(_) | Self::Integer(_) => None,
        }
    }

    /// The value if it is a `Bool`, or a `String` holding exactly `true` or `false` (what a
    /// binary-mode decoder yields for a boolean).
    #[must_use]
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Self::Bool(b) => Some(*b),
            Self::String(s) if s == "true" => Some(true),
            Self::String(s) if s == "false" => Some(false),
            Self::String(_) | Self::Integer(_) => None,
        }
    }

    /// The value if it is an `Integer`, or a `String` holding a decimal 32-bit integer.
    #[must_use]
    pub fn as_integer(&self) -> Option<i32> {
        match self {
            Self::Integer(i) => Some(*i),
            Self::String(s) => s.parse().ok(),
            Self::Bool(_) => None,
        }
    }
}

/// Writes the canonical string form used by binary-mode headers.
impl fmt::Display for ExtensionValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::String(s) => f.write_str(s),
            Self::Bool(b) => write!(f, "{b}"),
            Self::Integer(i) => write!(f, "{i}"),
        }
    }
}

impl From<String> for ExtensionValue {
    fn from(value: String) -> Self {
        Self::String(value)
    }
}

impl From<&str> for ExtensionValue {
    fn from(value: &str) -> Self {
        Self::String(value.to_owned())
    }
}

impl From<bool> for ExtensionValue {
    fn from(value: bool) -> Self {
        Self::Bool(value)
    }
}

impl From<i32> for ExtensionValue {
    fn from(value: i32) -> Self {
        Self::Integer(value)
    }
}

/// A CloudEvents 1.0 event (`specversion` is always [`SPEC_VERSION`]).
///
/// Fields are public so the normalizer and tests can build and inspect events directly; the chained
/// methods ([`CloudEvent::subject`], [`CloudEvent::extension`], …) are a shorthand for the same.
/// Nothing here checks the spec's rules on construction: call [`CloudEvent::validate`] before an event
/// is journaled or sent. The decoders in [`crate::encode`] validate what they return.
///
/// # Bindings
///
/// | binding | encoder | decoder |
/// |---|---|---|
/// | JSON format (`application/cloudevents+json`): Kafka/NATS/HTTP structured mode | [`CloudEvent::to_structured_json`] | [`CloudEvent::from_structured_json`] |
/// | JSON batch (`application/cloudevents-batch+json`) | [`to_structured_json_batch`](crate::encode::to_structured_json_batch) | [`from_structured_json_batch`](crate::encode::from_structured_json_batch) |
/// | HTTP binary mode (`ce-` headers, percent-encoded, `content-type`) | [`CloudEvent::http_binary_headers`] + [`CloudEvent::data_bytes`] | [`http_binary_decode`](crate::encode::http_binary_decode) |
/// | NATS binary mode (1.0.3-wip: `ce-` headers, percent-encoded, `ce-datacontenttype`) | [`CloudEvent::nats_binary_headers`] + [`CloudEvent::data_bytes`] | [`nats_binary_decode`](crate::encode::nats_binary_decode) |
/// | Kafka binary mode (`ce_` headers, raw UTF-8) | [`CloudEvent::kafka_binary_headers`] + [`CloudEvent::data_bytes`] | [`kafka_binary_decode`](crate::encode::kafka_binary_decode) |
///
/// Encoders are infallible and assume a validated event; every decoder validates what it returns.
/// Binary modes carry no type information, so extensions decoded from headers are
/// [`ExtensionValue::String`]s in canonical form (`resync` arrives as `"true"`; use
/// [`ExtensionValue::as_bool`]). [`Mode::from_content_type`](crate::Mode::from_content_type) tells
/// a receiver which decoder to use.
///
/// # Examples
///
/// ```
/// use herald_sink_core::CloudEvent;
/// use serde_json::json;
///
/// let event = CloudEvent::new(
///     "0c5f-42:1234:updated",
///     "k8s://prod/example.com/widgets",
///     "dev.herald.resource.updated",
/// )
/// .subject("default/my-widget")
/// .time("2026-01-02T03:04:05.678Z")
/// .datacontenttype("application/json")
/// .extension("partitionkey", "default/my-widget")
/// .extension("resync", false)
/// .data(json!({ "op": "updated", "resync": false }));
/// event.validate()?;
///
/// let json: serde_json::Value = serde_json::from_slice(&event.to_structured_json())?;
/// assert_eq!(json["type"], "dev.herald.resource.updated");
/// assert_eq!(json["resync"], false); // extensions keep their type in structured mode
///
/// let headers = event.http_binary_headers();
/// assert!(headers.contains(&("ce-subject".to_owned(), "default/my-widget".to_owned())));
/// assert!(headers.contains(&("content-type".to_owned(), "application/json".to_owned())));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudEvent {
    /// `id`: non-empty; `source` + `id` identify the event, so a redelivery repeats it.
    pub id: String,
    /// `source` (URI-reference): non-empty, e.g. `k8s://<cluster>/<group>/<plural>`.
    pub source: String,
    /// `type` (reverse-DNS prefixed), e.g. `dev.herald.resource.updated`.
    pub ty: String,
    /// `subject`: what the event is about within the source, e.g. `<namespace>/<name>`.
    pub subject: Option<String>,
    /// `time` as RFC 3339. herald writes UTC with milliseconds (see [`format_time`]); any RFC 3339
    /// timestamp passes [`CloudEvent::validate`].
    pub time: Option<String>,
    /// `datacontenttype` (RFC 2046 media type). Absent means `application/json` in the JSON format.
    pub datacontenttype: Option<String>,
    /// `dataschema` (absolute URI), e.g. `urn:herald:change:v1`.
    pub dataschema: Option<String>,
    /// Extension attributes by name (`[a-z0-9]{1,20}`).
    pub extensions: BTreeMap<String, ExtensionValue>,
    /// The payload. With a JSON (or absent) `datacontenttype` it is any JSON value, `Some(Null)`
    /// being distinct from `None`; with any other content type it must be a JSON string holding the
    /// text. Binary payloads are not supported: herald never sends them.
    pub data: Option<serde_json::Value>,
}

impl CloudEvent {
    /// An event with the three required attributes and nothing else.
    #[must_use]
    pub fn new(id: impl Into<String>, source: impl Into<String>, ty: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            source: source.into(),
            ty: ty.into(),
            subject: None,
            time: None,
            datacontenttype: None,
            dataschema: None,
            extensions: BTreeMap::new(),
            data: None,
        }
    }

    /// Always [`SPEC_VERSION`]; it is not a field because herald speaks no other version.
    #[must_use]
    pub fn specversion(&self) -> &'static str {
        SPEC_VERSION
    }

    /// Sets `subject`.
    #[must_use]
    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    /// Sets `time` (an RFC 3339 string; see [`format_time`]).
    #[must_use]
    pub fn time(mut self, time: impl Into<String>) -> Self {
        self.time = Some(time.into());
        self
    }

    /// Sets `datacontenttype`.
    #[must_use]
    pub fn datacontenttype(mut self, datacontenttype: impl Into<String>) -> Self {
        self.datacontenttype = Some(datacontenttype.into());
        self
    }

    /// Sets `dataschema`.
    #[must_use]
    pub fn dataschema(mut self, dataschema: impl Into<String>) -> Self {
        self.dataschema = Some(dataschema.into());
        self
    }

    /// Sets (or replaces) the extension `name`.
    #[must_use]
    pub fn extension(mut self, name: impl Into<String>, value: impl Into<ExtensionValue>) -> Self {
        self.extensions.insert(name.into(), value.into());
        self
    }

    /// Sets `data`.
    #[must_use]
    pub fn data(mut self, data: serde_json::Value) -> Self {
        self.data = Some(data);
        self
    }

    /// The `partitionkey` extension if it is set and a string: the Kafka record key and the unit of
    /// ordering in delivery.
    #[must_use]
    pub fn partition_key(&self) -> Option<&str> {
        self.extensions
            .get("partitionkey")
            .and_then(ExtensionValue::as_str)
    }

    /// True when `data` is carried as a JSON value: `datacontenttype` absent or a JSON media type
    /// (see [`is_json_content_type`]).
    #[must_use]
    pub fn has_json_data(&self) -> bool {
        self.datacontenttype
            .as_deref()
            .is_none_or(is_json_content_type)
    }

    /// Checks that the event is one herald may journal and every binding can carry: herald's one
    /// definition of a valid event. The normalizer checks what it builds with it, and the journal
    /// reader and every decoder in [`crate::encode`] check what they read with it, so an event
    /// herald journals is an event it can read back and deliver.
    ///
    /// These are the CloudEvents 1.0.2 rules with one deliberate difference: string values may hold
    /// control characters (U+0000–U+001F, U+007F–U+009F) and Unicode noncharacters. The spec asks
    /// producers not to use them, but they reach herald in object names (non-conformant API data)
    /// and changing a name would make the event lie about its object, while every binding carries
    /// them: the JSON format escapes them, `ce-` headers (HTTP, NATS) percent-encode them and Kafka
    /// `ce_` headers are UTF-8 bytes (docs/event-format.md, "Odd characters").
    ///
    /// - `id`, `source`, `type` are non-empty; `subject`, `datacontenttype`, `dataschema`, when set,
    ///   are non-empty too.
    /// - `datacontenttype` holds no control character or noncharacter: HTTP and NATS carry it
    ///   verbatim as `content-type`, where they cannot be escaped. Rust strings cannot hold lone
    ///   surrogates, so the spec's rule on those holds by construction everywhere.
    /// - `time` is an RFC 3339 timestamp; `dataschema` is an absolute URI (has a scheme);
    ///   `datacontenttype` looks like `type/subtype`.
    /// - Extension names are 1–20 of `[a-z0-9]` and are neither `data` nor a core attribute name.
    ///   The `partitionkey` and `sequence` extensions are non-empty, as their specs require.
    /// - With a non-JSON `datacontenttype`, `data` is a JSON string (the JSON format can only carry
    ///   such data as a string, and herald has no binary payloads).
    ///
    /// Not checked: the URI-reference grammar of `source`, and the reverse-DNS convention of `type`
    /// (a "should").
    ///
    /// ```
    /// use herald_sink_core::CloudEvent;
    ///
    /// // A name with a line break is carried (escaped per binding), an empty subject is not.
    /// assert!(CloudEvent::new("1", "/s", "t").subject("ns/a\nb").validate().is_ok());
    /// assert!(CloudEvent::new("1", "/s", "t").subject("").validate().is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// The first rule broken, in the order above, as a [`ValidationError`] naming the attribute.
    pub fn validate(&self) -> Result<(), ValidationError> {
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
                .map(|(n, v)| (n.as_str(), v.as_str())),
        )?;
        if let (Some(data), false) = (&self.data, self.has_json_data())
            && !data.is_string()
        {
            return Err(ValidationError::DataNotText {
                datacontenttype: self.datacontenttype.clone().unwrap_or_default(),
            });
        }
        Ok(())
    }
}

/// An event's attributes other than its extensions, borrowed: what [`check_attributes`] reads,
/// from a [`CloudEvent`] or straight from stored bytes ([`crate::Journaled`]), so both are held
/// to one set of rules.
pub(crate) struct AttributeRefs<'a> {
    pub(crate) id: &'a str,
    pub(crate) source: &'a str,
    pub(crate) ty: &'a str,
    pub(crate) subject: Option<&'a str>,
    pub(crate) time: Option<&'a str>,
    pub(crate) datacontenttype: Option<&'a str>,
    pub(crate) dataschema: Option<&'a str>,
}

/// [`CloudEvent::validate`]'s rules for everything but `data`; `extensions` are the extensions'
/// names with their values when they are strings.
pub(crate) fn check_attributes<'a>(
    a: &AttributeRefs<'a>,
    extensions: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<(), ValidationError> {
    check_required("id", a.id)?;
    check_required("source", a.source)?;
    check_required("type", a.ty)?;
    if let Some(subject) = a.subject {
        check_required("subject", subject)?;
    }
    if let Some(time) = a.time
        && !is_rfc3339(time)
    {
        return Err(ValidationError::InvalidTimestamp {
            value: time.to_owned(),
        });
    }
    if let Some(ct) = a.datacontenttype {
        check_required("datacontenttype", ct)?;
        check_header_text("datacontenttype", ct)?;
        if !is_media_type(ct) {
            return Err(ValidationError::InvalidMediaType {
                value: ct.to_owned(),
            });
        }
    }
    if let Some(schema) = a.dataschema {
        check_required("dataschema", schema)?;
        if !has_uri_scheme(schema) {
            return Err(ValidationError::NotAbsoluteUri {
                attribute: "dataschema".to_owned(),
            });
        }
    }
    for (name, value) in extensions {
        check_extension_name(name)?;
        if let Some(s) = value
            && matches!(name, "partitionkey" | "sequence")
        {
            check_required(name, s)?;
        }
    }
    Ok(())
}

/// A broken CloudEvents rule, naming the attribute (see [`ValidationError::attribute`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValidationError {
    /// A required attribute (or one that must be non-empty when present) is empty.
    #[error("attribute `{attribute}` is empty")]
    EmptyAttribute {
        /// The attribute's name.
        attribute: String,
    },
    /// `datacontenttype` contains a control character (U+0000–U+001F or U+007F–U+009F), which
    /// the `content-type` header cannot carry. Other attributes may hold them.
    #[error("attribute `{attribute}` contains control character U+{:04X}", u32::from(*.character))]
    ControlCharacter {
        /// The attribute's name.
        attribute: String,
        /// The offending character.
        character: char,
    },
    /// `datacontenttype` contains a Unicode noncharacter (U+FDD0–U+FDEF, U+xFFFE, U+xFFFF).
    /// Other attributes may hold them.
    #[error("attribute `{attribute}` contains noncharacter U+{:04X}", u32::from(*.character))]
    Noncharacter {
        /// The attribute's name.
        attribute: String,
        /// The offending character.
        character: char,
    },
    /// `time` is not an RFC 3339 timestamp.
    #[error("attribute `time` is not an rfc 3339 timestamp: {value:?}")]
    InvalidTimestamp {
        /// The value found.
        value: String,
    },
    /// `datacontenttype` is not a `type/subtype` media type.
    #[error("attribute `datacontenttype` is not a media type: {value:?}")]
    InvalidMediaType {
        /// The value found.
        value: String,
    },
    /// A URI attribute has no scheme.
    #[error("attribute `{attribute}` is not an absolute uri")]
    NotAbsoluteUri {
        /// The attribute's name.
        attribute: String,
    },
    /// An extension name is not 1–20 characters of `[a-z0-9]`.
    #[error("extension name {name:?} is not 1 to 20 characters of a-z and 0-9")]
    InvalidExtensionName {
        /// The name found.
        name: String,
    },
    /// An extension is named `data` or after a core attribute.
    #[error("extension name `{name}` is reserved")]
    ReservedExtensionName {
        /// The name found.
        name: String,
    },
    /// `data` is not a JSON string although `datacontenttype` is not a JSON media type.
    #[error("attribute `data` must be a string for non-json datacontenttype {datacontenttype:?}")]
    DataNotText {
        /// The event's `datacontenttype`.
        datacontenttype: String,
    },
}

impl ValidationError {
    /// The attribute (core or extension) the error is about.
    #[must_use]
    pub fn attribute(&self) -> &str {
        match self {
            Self::EmptyAttribute { attribute }
            | Self::ControlCharacter { attribute, .. }
            | Self::Noncharacter { attribute, .. }
            | Self::NotAbsoluteUri { attribute } => attribute,
            Self::InvalidTimestamp { .. } => "time",
            Self::InvalidMediaType { .. } => "datacontenttype",
            Self::InvalidExtensionName { name } | Self::ReservedExtensionName { name } => name,
            Self::DataNotText { .. } => "data",
        }
    }
}

fn check_required(attribute: &str, value: &str) -> Result<(), ValidationError> {
    if value.is_empty() {
        return Err(ValidationError::EmptyAttribute {
            attribute: attribute.to_owned(),
        });
    }
    Ok(())
}

/// A value a binding carries verbatim in a header, where nothing can be escaped.
fn check_header_text(attribute: &str, value: &str) -> Result<(), ValidationError> {
    for character in value.chars() {
        let c = u32::from(character);
        if c <= 0x1F || (0x7F..=0x9F).contains(&c) {
            return Err(ValidationError::ControlCharacter {
                attribute: attribute.to_owned(),
                character,
            });
        }
        if (0xFDD0..=0xFDEF).contains(&c) || c & 0xFFFE == 0xFFFE {
            return Err(ValidationError::Noncharacter {
                attribute: attribute.to_owned(),
                character,
            });
        }
    }
    Ok(())
}

/// Checks an extension name against the spec's naming rules.
///
/// # Errors
///
/// [`ValidationError::InvalidExtensionName`] or [`ValidationError::ReservedExtensionName`].
pub fn check_extension_name(name: &str) -> Result<(), ValidationError> {
    let well_formed = !name.is_empty()
        && name.len() <= MAX_EXTENSION_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if !well_formed {
        return Err(ValidationError::InvalidExtensionName {
            name: name.to_owned(),
        });
    }
    if name == "data" || CORE_ATTRIBUTES.contains(&name) {
        return Err(ValidationError::ReservedExtensionName {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// True for the media types whose `data` the JSON format carries as a JSON value: `*/json` and
/// `*/*+json`, parameters ignored, case-insensitive (so `application/json; charset=utf-8` and
/// `application/cloudevents+json` both count).
#[must_use]
pub fn is_json_content_type(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    let Some((_, subtype)) = essence.split_once('/') else {
        return false;
    };
    // Compared in place: this runs for every event read back from the journal.
    let tail = subtype
        .len()
        .checked_sub(5)
        .and_then(|i| subtype.as_bytes().get(i..));
    subtype.eq_ignore_ascii_case("json") || tail.is_some_and(|t| t.eq_ignore_ascii_case(b"+json"))
}

fn is_media_type(value: &str) -> bool {
    let essence = value.split(';').next().unwrap_or_default().trim();
    essence.split_once('/').is_some_and(|(ty, subtype)| {
        !ty.is_empty() && !subtype.is_empty() && !essence.contains(char::is_whitespace)
    })
}

/// RFC 3986 `scheme ":"` prefix, which makes a URI absolute.
fn has_uri_scheme(value: &str) -> bool {
    let Some((scheme, _)) = value.split_once(':') else {
        return false;
    };
    let mut bytes = scheme.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
}

/// RFC 3339 `date-time`: `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`, `T`/`Z` in either case, with
/// calendar-correct days and leap second 60 allowed.
fn is_rfc3339(value: &str) -> bool {
    let b = value.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<u32> {
        let slice = b.get(range)?;
        slice.iter().try_fold(0u32, |acc, &d| {
            d.is_ascii_digit().then(|| acc * 10 + u32::from(d - b'0'))
        })
    };
    let sep = |i: usize, allowed: &[u8]| b.get(i).is_some_and(|c| allowed.contains(c));
    let (Some(year), Some(month), Some(day), Some(hour), Some(minute), Some(second)) = (
        digits(0..4),
        digits(5..7),
        digits(8..10),
        digits(11..13),
        digits(14..16),
        digits(17..19),
    ) else {
        return false;
    };
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt") && sep(13, b":") && sep(16, b":")) {
        return false;
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    if day == 0 || day > days_in_month || hour > 23 || minute > 59 || second > 60 {
        return false;
    }
    let mut i = 19;
    if sep(i, b".") {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    match b.get(i) {
        Some(b'Z' | b'z') => i + 1 == b.len(),
        Some(b'+' | b'-') => {
            let (Some(oh), Some(om)) = (digits(i + 1..i + 3), digits(i + 4..i + 6)) else {
                return false;
            };
            sep(i + 3, b":") && oh <= 23 && om <= 59 && i + 6 == b.len()
        }
        _ => false,
    }
}

/// Formats `time` the way herald writes `time`: RFC 3339, UTC, milliseconds, e.g.
/// `2026-01-02T03:04:05.678Z`. Sub-millisecond digits are truncated, not rounded, so the
/// string never lies about an instant that has not happened yet.
#[must_use]
pub fn format_time(time: SystemTime) -> String {
    let millis: i128 = match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i128::try_from(after.as_millis()).unwrap_or(i128::MAX),
        // Before the epoch: floor toward the past, like the positive side does.
        Err(before) => {
            let d = before.duration();
            let whole = i128::try_from(d.as_millis()).unwrap_or(i128::MAX);
            if d.subsec_nanos() % 1_000_000 == 0 {
                -whole
            } else {
                -whole - 1
            }
        }
    };
    let secs = millis.div_euclid(1000);
    let ms = millis.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i128) -> (i128, i128, i128) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i128::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    fn herald_event() -> CloudEvent {
        CloudEvent::new(
            "9f1c-uid:1234:updated",
            "k8s://prod/example.com/widgets",
            "dev.herald.resource.updated",
        )
        .subject("default/w1")
        .time("2026-01-02T03:04:05.678Z")
        .datacontenttype("application/json")
        .dataschema("urn:herald:change:v1")
        .extension("k8sgroup", "example.com")
        .extension("k8snamespace", "default")
        .extension("partitionkey", "default/w1")
        .extension("sequence", "00000000000000001234")
        .extension("resync", false)
        .data(json!({"op": "updated", "resync": false}))
    }

    #[test]
    fn accepts_a_herald_event() {
        herald_event().validate().unwrap();
    }

    #[test]
    fn accepts_minimal_event() {
        CloudEvent::new("1", "/s", "t").validate().unwrap();
    }

    #[test]
    fn rejects_empty_required_attributes() {
        for (event, attribute) in [
            (CloudEvent::new("", "/s", "t"), "id"),
            (CloudEvent::new("1", "", "t"), "source"),
            (CloudEvent::new("1", "/s", ""), "type"),
            (CloudEvent::new("1", "/s", "t").subject(""), "subject"),
            (CloudEvent::new("1", "/s", "t").dataschema(""), "dataschema"),
            (
                CloudEvent::new("1", "/s", "t").datacontenttype(""),
                "datacontenttype",
            ),
            (
                CloudEvent::new("1", "/s", "t").extension("partitionkey", ""),
                "partitionkey",
            ),
            (
                CloudEvent::new("1", "/s", "t").extension("sequence", ""),
                "sequence",
            ),
        ] {
            let err = event.validate().unwrap_err();
            assert_eq!(
                err,
                ValidationError::EmptyAttribute {
                    attribute: attribute.to_owned()
                }
            );
            assert_eq!(err.attribute(), attribute);
        }
    }

    #[test]
    fn allows_empty_string_in_other_extensions() {
        CloudEvent::new("1", "/s", "t")
            .extension("note", "")
            .validate()
            .unwrap();
    }

    /// Control characters and noncharacters reach herald in object names; every binding carries
    /// them (escaped), so they do not make an event invalid (issue 14, item 4).
    #[test]
    fn carries_control_characters_and_noncharacters_in_string_values() {
        for c in [
            '\u{0}',
            '\n',
            '\r',
            '\t',
            '\u{1F}',
            '\u{7F}',
            '\u{85}',
            '\u{9F}',
            '\u{FDD0}',
            '\u{FFFE}',
            '\u{10FFFF}',
        ] {
            let odd = format!("a{c}b");
            CloudEvent::new(odd.as_str(), format!("/s{c}"), format!("t{c}"))
                .subject(format!("ns/{odd}"))
                .extension("k8sname", odd.as_str())
                .extension("partitionkey", format!("ns/{odd}"))
                .extension("sequence", odd.as_str())
                .validate()
                .unwrap();
        }
    }

    #[test]
    fn rejects_what_content_type_cannot_carry() {
        for c in ['\u{0}', '\n', '\u{1F}', '\u{7F}', '\u{85}', '\u{9F}'] {
            let err = CloudEvent::new("1", "/s", "t")
                .datacontenttype(format!("text/plain; x=a{c}b"))
                .validate()
                .unwrap_err();
            assert_eq!(
                err,
                ValidationError::ControlCharacter {
                    attribute: "datacontenttype".to_owned(),
                    character: c
                }
            );
        }
        let err = CloudEvent::new("1", "/s", "t")
            .datacontenttype("text/plain; x=\r")
            .validate()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "attribute `datacontenttype` contains control character U+000D"
        );
        for c in [
            '\u{FDD0}',
            '\u{FDEF}',
            '\u{FFFE}',
            '\u{FFFF}',
            '\u{1FFFF}',
            '\u{10FFFE}',
        ] {
            let err = CloudEvent::new("1", "/s", "t")
                .datacontenttype(format!("text/plain; x={c}"))
                .validate()
                .unwrap_err();
            assert!(
                matches!(err, ValidationError::Noncharacter { ref attribute, character } if attribute == "datacontenttype" && character == c),
                "{err:?}"
            );
        }
    }

    #[test]
    fn accepts_non_ascii_text_outside_control_ranges() {
        CloudEvent::new("ü-1", "/s", "t")
            .subject("ns/ñame €\u{A0}")
            .validate()
            .unwrap();
    }

    #[test]
    fn checks_extension_names() {
        for good in ["a", "k8sgroup", "resync", "abcdefghij0123456789", "0abc"] {
            check_extension_name(good).unwrap();
        }
        for bad in [
            "",
            "K8sGroup",
            "k8s-group",
            "k8s_group",
            "abcdefghij0123456789x",
            "ünï",
            "a b",
        ] {
            assert_eq!(
                check_extension_name(bad).unwrap_err(),
                ValidationError::InvalidExtensionName {
                    name: bad.to_owned()
                },
                "{bad:?}"
            );
        }
        for reserved in [
            "data",
            "id",
            "source",
            "specversion",
            "type",
            "subject",
            "time",
            "datacontenttype",
            "dataschema",
        ] {
            let err = CloudEvent::new("1", "/s", "t")
                .extension(reserved, "x")
                .validate()
                .unwrap_err();
            assert_eq!(
                err,
                ValidationError::ReservedExtensionName {
                    name: reserved.to_owned()
                }
            );
        }
    }

    #[test]
    fn checks_time_is_rfc3339() {
        for good in [
            "2026-01-02T03:04:05.678Z",
            "2026-01-02T03:04:05Z",
            "2026-01-02t03:04:05z",
            "2024-02-29T23:59:60.123456789+01:00",
            "1970-01-01T00:00:00-05:30",
        ] {
            CloudEvent::new("1", "/s", "t")
                .time(good)
                .validate()
                .unwrap();
        }
        for bad in [
            "",
            "2026-01-02",
            "2026-01-02 03:04:05Z",
            "2026-01-02T03:04:05",
            "2026-01-02T03:04:05.Z",
            "2026-13-02T03:04:05Z",
            "2025-02-29T03:04:05Z",
            "2026-01-02T24:00:00Z",
            "2026-01-02T03:04:05+0100",
            "2026-01-02T03:04:05Zjunk",
            "yesterday",
        ] {
            let err = CloudEvent::new("1", "/s", "t")
                .time(bad)
                .validate()
                .unwrap_err();
            assert_eq!(err.attribute(), "time", "{bad:?}");
        }
    }

    #[test]
    fn checks_dataschema_and_datacontenttype_shape() {
        let err = CloudEvent::new("1", "/s", "t")
            .dataschema("/relative/schema")
            .validate()
            .unwrap_err();
        assert_eq!(
            err,
            ValidationError::NotAbsoluteUri {
                attribute: "dataschema".to_owned()
            }
        );
        let err = CloudEvent::new("1", "/s", "t")
            .datacontenttype("json")
            .validate()
            .unwrap_err();
        assert_eq!(err.attribute(), "datacontenttype");
        CloudEvent::new("1", "/s", "t")
            .dataschema("https://example.com/schema.json")
            .datacontenttype("application/json; charset=utf-8")
            .validate()
            .unwrap();
    }

    #[test]
    fn requires_string_data_for_non_json_content_types() {
        let err = CloudEvent::new("1", "/s", "t")
            .datacontenttype("text/plain")
            .data(json!({"a": 1}))
            .validate()
            .unwrap_err();
        assert_eq!(err.attribute(), "data");
        CloudEvent::new("1", "/s", "t")
            .datacontenttype("text/plain")
            .data(json!("hello"))
            .validate()
            .unwrap();
        // JSON data may be any JSON value, including null and a bare string.
        for data in [json!(null), json!("s"), json!(3), json!([1])] {
            CloudEvent::new("1", "/s", "t")
                .data(data)
                .validate()
                .unwrap();
        }
    }

    #[test]
    fn recognises_json_content_types() {
        for ct in [
            "application/json",
            "application/json; charset=utf-8",
            "text/json",
            "application/cloudevents+json",
            "Application/JSON",
            "application/vnd.herald.change+json;v=1",
        ] {
            assert!(is_json_content_type(ct), "{ct}");
        }
        for ct in [
            "text/plain",
            "application/jsonl",
            "json",
            "application/x-json-stream",
        ] {
            assert!(!is_json_content_type(ct), "{ct}");
        }
    }

    #[test]
    fn extension_values_have_canonical_strings() {
        assert_eq!(ExtensionValue::from(true).to_string(), "true");
        assert_eq!(ExtensionValue::from(false).to_string(), "false");
        assert_eq!(ExtensionValue::from(-42).to_string(), "-42");
        assert_eq!(ExtensionValue::from("x y").to_string(), "x y");
        assert_eq!(ExtensionValue::from("true").as_bool(), Some(true));
        assert_eq!(ExtensionValue::from("17").as_integer(), Some(17));
        assert_eq!(ExtensionValue::from(true).as_str(), None);
    }

    #[test]
    fn reads_partition_key() {
        assert_eq!(herald_event().partition_key(), Some("default/w1"));
        assert_eq!(CloudEvent::new("1", "/s", "t").partition_key(), None);
    }

    #[test]
    fn formats_time_in_utc_with_milliseconds() {
        let t = UNIX_EPOCH + Duration::from_millis(1_767_323_045_678);
        assert_eq!(format_time(t), "2026-01-02T03:04:05.678Z");
        assert_eq!(format_time(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            format_time(UNIX_EPOCH + Duration::from_nanos(951_782_400_999_999_999)),
            "2000-02-29T00:00:00.999Z"
        );
        assert_eq!(
            format_time(UNIX_EPOCH - Duration::from_millis(1)),
            "1969-12-31T23:59:59.999Z"
        );
        assert_eq!(
            format_time(UNIX_EPOCH - Duration::from_micros(1500)),
            "1969-12-31T23:59:59.998Z"
        );
        let now = format_time(SystemTime::now());
        assert!(is_rfc3339(&now), "{now}");
        assert_eq!(now.len(), "2026-01-02T03:04:05.678Z".len());
    }
}
