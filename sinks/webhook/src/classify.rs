//! HTTP answers and transport errors → [`Outcome`]; start at [`classify`].
//!
//! | answer | outcome | reason code |
//! |---|---|---|
//! | 2xx | `Ok` | |
//! | 408 Request Timeout | `Retry`, `Retry-After` as `after` | `http_408` |
//! | 429 Too Many Requests | `Retry`, `Retry-After` as `after` | `http_429` |
//! | 5xx except 501 | `Retry`, `Retry-After` as `after` | `http_5xx` |
//! | 501 Not Implemented | `Reject` | `http_501` |
//! | 3xx (redirects are not followed) | `Reject` | `http_3xx` |
//! | 413 Content Too Large | `Reject` | `oversize`: herald's driver follows the resource's `onOversize` (the reference-only event by default) |
//! | other 4xx | `Reject` | `http_4xx` |
//! | anything else (1xx as a final answer, 600–999) | `Reject` | `http_other` |
//! | connection failed (refused, DNS, TLS handshake) | `Retry` | `connect` |
//! | no answer within the timeout | `Retry` | `timeout` |
//! | the request could not be built | `Reject` | `invalid_request` |
//! | connection lost while sending or reading | `Retry` | `request` |
//!
//! Codes are metric labels, so they come from this fixed set; the status itself, its reason
//! phrase and the start of the response body go into the detail.

use std::error::Error as _;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use herald_sink_core::sink::{Outcome, Reason, SinkError, codes};

/// Most characters of the response body kept in a reason's detail.
pub const EXCERPT_CHARS: usize = 200;

/// The outcome of an HTTP answer with `status`, its `Retry-After` header value (if any) and the
/// start of its body (`excerpt`, already shortened; see [`excerpt`]).
///
/// See the module documentation for the table. `Retry-After` is honoured on every retryable
/// status, as delay-seconds or an HTTP-date ([`parse_retry_after`]); an unparsable value is
/// ignored and the driver's backoff decides.
#[must_use]
pub fn classify(status: u16, retry_after: Option<&str>, excerpt: &str) -> Outcome {
    classify_at(status, retry_after, excerpt, SystemTime::now())
}

/// [`classify`] with the current time given, for HTTP-date `Retry-After` values.
#[must_use]
pub fn classify_at(
    status: u16,
    retry_after: Option<&str>,
    excerpt: &str,
    now: SystemTime,
) -> Outcome {
    let code = match status {
        200..=299 => return Outcome::Ok,
        408 => "http_408",
        429 => "http_429",
        // The receiver's size limit: the same code as Kafka's and NATS's, so the driver applies
        // `onOversize` rather than dead-lettering the event as any other refusal.
        413 => codes::OVERSIZE,
        501 => "http_501",
        500..=599 => "http_5xx",
        300..=399 => "http_3xx",
        400..=499 => "http_4xx",
        // 1xx never ends an exchange, and 600–999 are not HTTP: nothing says a retry would help.
        _ => "http_other",
    };
    let reason = Reason::new(code, detail(status, excerpt));
    match status {
        408 | 429 | 500 | 502..=599 => Outcome::Retry {
            after: retry_after.and_then(|value| parse_retry_after(value, now)),
            reason,
        },
        _ => Outcome::Reject { reason },
    }
}

/// `HTTP 503 Service Unavailable: <excerpt>`.
fn detail(status: u16, excerpt: &str) -> String {
    let mut out = format!("HTTP {status}");
    if let Some(phrase) = reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
    {
        out.push(' ');
        out.push_str(phrase);
    }
    if !excerpt.is_empty() {
        out.push_str(": ");
        out.push_str(excerpt);
    }
    out
}

/// The start of a response body for a reason's detail: at most [`EXCERPT_CHARS`] characters,
/// lossy UTF-8, whitespace runs and control characters folded to one space, `…` when cut.
#[must_use]
pub fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut out = String::new();
    let mut chars = 0;
    let mut pending_space = false;
    for c in text.chars() {
        if c.is_whitespace() || c.is_control() {
            pending_space = !out.is_empty();
            continue;
        }
        if chars == EXCERPT_CHARS {
            out.push('…');
            break;
        }
        if pending_space {
            out.push(' ');
            chars += 1;
            pending_space = false;
        }
        out.push(c);
        chars += 1;
    }
    out
}

/// How long `Retry-After` asks to wait: delay-seconds (`120`) or an HTTP-date
/// (`Wed, 21 Oct 2026 07:28:00 GMT`, and the obsolete RFC 850 and asctime forms RFC 9110 asks
/// recipients to accept), relative to `now`. A date in the past is zero. `None` for anything
/// else, which leaves the delay to the driver's backoff.
///
/// No upper bound is applied: capping a server's hint is the driver's policy.
#[must_use]
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse::<u64>().ok().map(Duration::from_secs);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The outcome of a request that got no HTTP answer.
///
/// The detail never contains the URL (its path or query may hold a token), only the error and
/// its causes.
#[must_use]
pub fn classify_error(error: &reqwest::Error) -> Outcome {
    let (code, retry) = if error.is_timeout() {
        ("timeout", true)
    } else if error.is_connect() {
        ("connect", true)
    } else if error.is_builder() {
        ("invalid_request", false)
    } else {
        // Connection reset, an incomplete answer, a broken body: the next attempt may get through.
        ("request", true)
    };
    let reason = Reason::new(code, error_chain(error));
    if retry {
        Outcome::retry(reason)
    } else {
        Outcome::reject(reason)
    }
}

/// Whether waiting may fix a construction or health-check error ([`Sink::is_transient`]): as
/// [`SinkError::is_transient`], except that a connection failure whose cause is a TLS error
/// (rustls refused the receiver's certificate, or the receiver refused the handshake) is
/// permanent: the two ends disagree about certificates or protocol, which waiting does not change.
///
/// [`Sink::is_transient`]: herald_sink_core::sink::Sink::is_transient
#[must_use]
pub fn is_transient(error: &SinkError) -> bool {
    error.is_transient() && !has_tls_error(error)
}

/// Whether a `rustls::Error` is among `error`'s causes. `std::io::Error::source` skips the error
/// it wraps, so that one is looked at too.
fn has_tls_error(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        let wrapped = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .map(|inner| inner as &(dyn std::error::Error + 'static));
        if e.is::<rustls::Error>() {
            return true;
        }
        next = wrapped.or_else(|| e.source());
    }
    false
}

/// `error: cause: cause`, without the URL.
pub(crate) fn error_chain(error: &reqwest::Error) -> String {
    let mut out = String::new();
    let _ = write!(out, "{}", WithoutUrl(error));
    let mut source = error.source();
    while let Some(cause) = source {
        let _ = write!(out, ": {cause}");
        source = cause.source();
    }
    out
}

/// reqwest's `Display` appends ` for url (…)`; this prints its kind only.
struct WithoutUrl<'a>(&'a reqwest::Error);

impl std::fmt::Display for WithoutUrl<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let e = self.0;
        let kind = if e.is_timeout() {
            "request timed out"
        } else if e.is_connect() {
            "connection failed"
        } else if e.is_builder() {
            "invalid request"
        } else if e.is_body() {
            "request or response body error"
        } else if e.is_decode() {
            "response decoding error"
        } else {
            "request failed"
        };
        f.write_str(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry_after_of(outcome: &Outcome) -> Option<Duration> {
        match outcome {
            Outcome::Retry { after, .. } => *after,
            _ => None,
        }
    }

    /// Every row of the module table, plus the boundaries of each range.
    #[test]
    fn status_table() {
        enum Class {
            Ok,
            Retry(&'static str),
            Reject(&'static str),
        }
        use Class::{Ok, Reject, Retry};
        let table: &[(u16, Class)] = &[
            (100, Reject("http_other")),
            (199, Reject("http_other")),
            (200, Ok),
            (201, Ok),
            (202, Ok),
            (204, Ok),
            (299, Ok),
            (300, Reject("http_3xx")),
            (301, Reject("http_3xx")),
            (302, Reject("http_3xx")),
            (304, Reject("http_3xx")),
            (307, Reject("http_3xx")),
            (308, Reject("http_3xx")),
            (399, Reject("http_3xx")),
            (400, Reject("http_4xx")),
            (401, Reject("http_4xx")),
            (403, Reject("http_4xx")),
            (404, Reject("http_4xx")),
            (405, Reject("http_4xx")),
            (407, Reject("http_4xx")),
            (408, Retry("http_408")),
            (409, Reject("http_4xx")),
            (410, Reject("http_4xx")),
            (413, Reject("oversize")),
            (415, Reject("http_4xx")),
            (422, Reject("http_4xx")),
            (428, Reject("http_4xx")),
            (429, Retry("http_429")),
            (431, Reject("http_4xx")),
            (499, Reject("http_4xx")),
            (500, Retry("http_5xx")),
            (501, Reject("http_501")),
            (502, Retry("http_5xx")),
            (503, Retry("http_5xx")),
            (504, Retry("http_5xx")),
            (505, Retry("http_5xx")),
            (507, Retry("http_5xx")),
            (511, Retry("http_5xx")),
            (599, Retry("http_5xx")),
            (600, Reject("http_other")),
            (999, Reject("http_other")),
        ];
        for (status, class) in table {
            let outcome = classify(*status, None, "");
            match (class, &outcome) {
                (Ok, Outcome::Ok) => {}
                (
                    Retry(code),
                    Outcome::Retry {
                        after: None,
                        reason,
                    },
                )
                | (Reject(code), Outcome::Reject { reason })
                    if reason.code == *code => {}
                _ => panic!("{status}: {outcome:?}"),
            }
        }
    }

    #[test]
    fn every_status_is_classified_like_the_table_says() {
        for status in 100..=999u16 {
            let outcome = classify(status, None, "");
            let retry = matches!(status, 408 | 429 | 500 | 502..=599);
            match outcome {
                Outcome::Ok => assert!((200..=299).contains(&status), "{status}"),
                Outcome::Retry { .. } => assert!(retry, "{status}"),
                Outcome::Reject { .. } => {
                    assert!(!retry && !(200..=299).contains(&status), "{status}");
                }
            }
        }
    }

    #[test]
    fn details_name_the_status_and_quote_the_body() {
        let outcome = classify(404, None, "no such hook");
        assert_eq!(
            outcome.reason().unwrap().detail,
            "HTTP 404 Not Found: no such hook"
        );
        assert_eq!(
            classify(503, None, "").reason().unwrap().detail,
            "HTTP 503 Service Unavailable"
        );
        assert_eq!(
            classify(599, None, "x").reason().unwrap().detail,
            "HTTP 599: x"
        );
    }

    #[test]
    fn retry_after_is_the_hint_on_retryable_statuses_only() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        for status in [408, 429, 500, 502, 503, 504] {
            let outcome = classify_at(status, Some("120"), "", now);
            assert_eq!(retry_after_of(&outcome), Some(Duration::from_secs(120)));
        }
        let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
        let outcome = classify_at(503, Some(&date), "", now);
        assert_eq!(retry_after_of(&outcome), Some(Duration::from_secs(30)));
        assert_eq!(
            retry_after_of(&classify_at(503, Some("soon"), "", now)),
            None
        );
        for status in [301, 400, 501] {
            assert!(matches!(
                classify_at(status, Some("120"), "", now),
                Outcome::Reject { .. }
            ));
        }
    }

    #[test]
    fn parses_retry_after_seconds_and_dates() {
        // Sun, 06 Nov 1994 08:49:37 GMT, RFC 9110's example date.
        let example = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        let before = example - Duration::from_secs(90);
        for (value, expected) in [
            ("0", Some(Duration::ZERO)),
            ("120", Some(Duration::from_secs(120))),
            (" 7 ", Some(Duration::from_secs(7))),
            (
                "Sun, 06 Nov 1994 08:49:37 GMT",
                Some(Duration::from_secs(90)),
            ),
            (
                "Sunday, 06-Nov-94 08:49:37 GMT",
                Some(Duration::from_secs(90)),
            ),
            ("Sun Nov  6 08:49:37 1994", Some(Duration::from_secs(90))),
            ("-5", None),
            ("1.5", None),
            ("", None),
            ("99999999999999999999999", None),
            ("tomorrow", None),
        ] {
            assert_eq!(parse_retry_after(value, before), expected, "{value:?}");
        }
        // A date already past means "now".
        assert_eq!(
            parse_retry_after(
                "Sun, 06 Nov 1994 08:49:37 GMT",
                example + Duration::from_secs(5)
            ),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn excerpts_are_short_single_line_text() {
        assert_eq!(excerpt(b""), "");
        assert_eq!(
            excerpt(b"  {\"error\":\n\t\"bad\"}\r\n"),
            "{\"error\": \"bad\"}"
        );
        assert_eq!(excerpt(b"\xffok"), "\u{fffd}ok");
        let long = excerpt("é".repeat(500).as_bytes());
        assert_eq!(long.chars().count(), EXCERPT_CHARS + 1);
        assert!(long.ends_with('…'));
        assert_eq!(
            excerpt("x".repeat(EXCERPT_CHARS).as_bytes())
                .chars()
                .count(),
            EXCERPT_CHARS
        );
    }
}
