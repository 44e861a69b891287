//! HTTP answers and transport errors → [`Outcome`]; start at [`classify`], or [`classify_reply`]
//! for a sink with its own [`ReplyRules`].
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
//!
//! A sink's `replies` ([`ReplyRules`]) change the table for its receiver, in this order: a status
//! listed in `reject` is rejected and one in `retry` retried (keeping its code above); a status in
//! `rateLimited` (GitHub's 403) is retried with code `rate_limited` when the answer carries an
//! honoured rate-limit header, and keeps its class otherwise; then the table. Which headers give
//! the wait is `rateLimitHeaders`: `Retry-After` (seconds or an HTTP-date, the default) and
//! `X-RateLimit-Reset` (Unix epoch seconds), `Retry-After` first. With `body: elasticsearchBulk`,
//! a 2xx answer is read as an Elasticsearch `_bulk` reply and each event gets its own item's
//! outcome ([`classify_bulk`]).

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
    let headers = ReplyHeaders {
        retry_after,
        ..ReplyHeaders::default()
    };
    classify_reply(status, &headers, excerpt, &ReplyRules::default(), now)
}

/// How one sink reads its receiver's answers (`replies` in its configuration); the default is
/// the table in the module documentation (DECISIONS.md's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyRules {
    /// Statuses retried whatever the table says (a receiver's 409 "try again").
    pub retry: Vec<u16>,
    /// Statuses dead-lettered whatever the table says (a receiver whose 503 means "never").
    pub reject: Vec<u16>,
    /// Statuses retried when the answer carries an honoured rate-limit header, and classified by
    /// the table otherwise (GitHub answers 403 both for "slow down" and for "forbidden").
    pub rate_limited: Vec<u16>,
    /// `Retry-After` gives the wait (default true).
    pub retry_after: bool,
    /// `X-RateLimit-Reset` (Unix epoch seconds) gives the wait when `Retry-After` does not
    /// (default false).
    pub rate_limit_reset: bool,
    /// What a 2xx body is checked for.
    pub body: BodyCheck,
}

impl Default for ReplyRules {
    fn default() -> Self {
        Self {
            retry: Vec::new(),
            reject: Vec::new(),
            rate_limited: Vec::new(),
            retry_after: true,
            rate_limit_reset: false,
            body: BodyCheck::None,
        }
    }
}

/// What a 2xx answer's body is checked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BodyCheck {
    /// Nothing: 2xx means every event of the request was taken.
    #[default]
    None,
    /// An Elasticsearch `_bulk` reply: `errors: true` lists, item by item in
    /// request order, which events failed ([`classify_bulk`]).
    ElasticsearchBulk,
}

/// The rate-limit headers of an answer, as text (absent or not text: `None`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplyHeaders<'a> {
    /// `Retry-After`.
    pub retry_after: Option<&'a str>,
    /// `X-RateLimit-Reset`: when the window resets, in Unix epoch seconds (GitHub's form).
    pub rate_limit_reset: Option<&'a str>,
    /// `X-RateLimit-Remaining`: requests left in the window.
    pub rate_limit_remaining: Option<&'a str>,
}

/// Header names of [`ReplyHeaders`], lower case.
pub const RATE_LIMIT_RESET: &str = "x-ratelimit-reset";
/// See [`RATE_LIMIT_RESET`].
pub const RATE_LIMIT_REMAINING: &str = "x-ratelimit-remaining";

/// Reason code of a status in `rateLimited` answered with a rate-limit header.
pub const RATE_LIMITED: &str = "rate_limited";
/// Reason code of a 2xx answer whose body check could not tell which events were taken.
pub const BULK_REPLY: &str = "bulk_reply";

impl ReplyRules {
    /// How long the answer asks to wait, from the headers these rules honour: `Retry-After`
    /// first, then `X-RateLimit-Reset`. `None` when neither is honoured, present and readable.
    #[must_use]
    pub fn hint(&self, headers: &ReplyHeaders<'_>, now: SystemTime) -> Option<Duration> {
        let retry_after = headers
            .retry_after
            .filter(|_| self.retry_after)
            .and_then(|v| parse_retry_after(v, now));
        retry_after.or_else(|| {
            headers
                .rate_limit_reset
                .filter(|_| self.rate_limit_reset)
                .and_then(|v| parse_rate_limit_reset(v, now))
        })
    }

    /// Whether the answer says "rate limited" through a header these rules honour: a readable
    /// `Retry-After`, or `X-RateLimit-Remaining: 0` with a readable `X-RateLimit-Reset`.
    fn rate_limit_signalled(&self, headers: &ReplyHeaders<'_>, now: SystemTime) -> bool {
        let retry_after = self.retry_after
            && headers
                .retry_after
                .and_then(|v| parse_retry_after(v, now))
                .is_some();
        let exhausted = self.rate_limit_reset
            && headers.rate_limit_remaining.map(str::trim) == Some("0")
            && headers
                .rate_limit_reset
                .and_then(|v| parse_rate_limit_reset(v, now))
                .is_some();
        retry_after || exhausted
    }
}

/// The outcome of an HTTP answer under `rules`: `status`, its rate-limit `headers` and the start
/// of its body (`excerpt`). See the module documentation for the order the rules apply in. A 2xx
/// is `Ok` here; its body check is [`classify_bulk`].
#[must_use]
pub fn classify_reply(
    status: u16,
    headers: &ReplyHeaders<'_>,
    excerpt: &str,
    rules: &ReplyRules,
    now: SystemTime,
) -> Outcome {
    if (200..=299).contains(&status) {
        return Outcome::Ok;
    }
    let code = code_of(status);
    let retry = |code| Outcome::Retry {
        after: rules.hint(headers, now),
        reason: Reason::new(code, detail(status, excerpt)),
    };
    let reject = |code| Outcome::Reject {
        reason: Reason::new(code, detail(status, excerpt)),
    };
    if rules.reject.contains(&status) {
        return reject(code);
    }
    if rules.retry.contains(&status) {
        return retry(code);
    }
    if rules.rate_limited.contains(&status) && rules.rate_limit_signalled(headers, now) {
        return retry(RATE_LIMITED);
    }
    if retried_by_default(status) {
        retry(code)
    } else {
        reject(code)
    }
}

/// The reason code of a non-2xx `status` (the module table).
fn code_of(status: u16) -> &'static str {
    match status {
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
    }
}

/// DECISIONS.md: 408, 429 and 5xx except 501 are retried.
fn retried_by_default(status: u16) -> bool {
    matches!(status, 408 | 429 | 500 | 502..=599)
}

/// The outcome of each of `events` events sent in one request answered 2xx with `body`, read
/// as an Elasticsearch `_bulk` reply: `{"errors": false, …}` takes them all; with
/// `"errors": true`, event `i` gets item `i`'s status (`{"index": {"status": 429, "error": …}}`,
/// whatever the action's name), classified under `rules` (a 2xx item is taken), retried items
/// waiting `after` (the answer's own hint). Never lost behind a 200: a body that is not such a
/// reply, or that has no item for an event, retries those events (code `bulk_reply`).
#[must_use]
pub fn classify_bulk(
    body: &[u8],
    events: usize,
    rules: &ReplyRules,
    after: Option<Duration>,
) -> Vec<Outcome> {
    #[derive(serde::Deserialize)]
    struct Bulk {
        errors: bool,
        #[serde(default)]
        items: Vec<serde_json::Map<String, serde_json::Value>>,
    }
    let unreadable = |why: String| Outcome::Retry {
        after,
        reason: Reason::new(BULK_REPLY, why),
    };
    let bulk: Bulk = match serde_json::from_slice(body) {
        Ok(bulk) => bulk,
        Err(e) => {
            return Outcome::all(
                events,
                unreadable(format!(
                    "the 2xx answer is not an Elasticsearch _bulk reply ({e}): {}",
                    excerpt(body)
                )),
            );
        }
    };
    if !bulk.errors {
        return Outcome::all(events, Outcome::Ok);
    }
    let no_headers = ReplyHeaders::default();
    (0..events)
        .map(|i| {
            let Some((action, item)) = bulk.items.get(i).and_then(|m| m.iter().next()) else {
                return unreadable(format!(
                    "the _bulk reply has errors and no item {i} for this event"
                ));
            };
            let Some(status) = item
                .get("status")
                .and_then(serde_json::Value::as_u64)
                .and_then(|s| u16::try_from(s).ok())
            else {
                return unreadable(format!("_bulk item {i} ({action}) has no status"));
            };
            let error = item.get("error").map(|e| match e {
                serde_json::Value::Object(o) => {
                    let field = |k: &str| o.get(k).and_then(serde_json::Value::as_str);
                    match (field("type"), field("reason")) {
                        (Some(t), Some(r)) => format!("{t}: {r}"),
                        (Some(t), None) => t.to_owned(),
                        (None, Some(r)) => r.to_owned(),
                        (None, None) => e.to_string(),
                    }
                }
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            });
            let text = format!(
                "_bulk item {i} ({action}){}",
                error.map_or(String::new(), |e| format!(": {e}"))
            );
            match classify_reply(
                status,
                &no_headers,
                &excerpt(text.as_bytes()),
                rules,
                SystemTime::now(),
            ) {
                Outcome::Retry {
                    after: None,
                    reason,
                } => Outcome::Retry { after, reason },
                other => other,
            }
        })
        .collect()
}

/// How long `X-RateLimit-Reset` asks to wait: Unix epoch seconds (`1700000060`, GitHub's form)
/// relative to `now`; a time already past is zero. `None` for anything else.
#[must_use]
pub fn parse_rate_limit_reset(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let at = SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(value.parse().ok()?))?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
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

    fn code_of_outcome(outcome: &Outcome) -> (&'static str, &'static str) {
        match outcome {
            Outcome::Ok => ("ok", ""),
            Outcome::Retry { reason, .. } => ("retry", reason.code),
            Outcome::Reject { reason } => ("reject", reason.code),
        }
    }

    #[test]
    fn reply_rules_override_the_table_in_order() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let rules = ReplyRules {
            retry: vec![409, 501],
            reject: vec![503],
            rate_limited: vec![403],
            ..ReplyRules::default()
        };
        let none = ReplyHeaders::default();
        let after = ReplyHeaders {
            retry_after: Some("7"),
            ..ReplyHeaders::default()
        };
        let at = |status, headers: &ReplyHeaders<'_>| {
            code_of_outcome(&classify_reply(status, headers, "", &rules, now))
        };
        assert_eq!(at(409, &none), ("retry", "http_4xx"));
        assert_eq!(at(501, &none), ("retry", "http_501"));
        assert_eq!(at(503, &after), ("reject", "http_5xx"));
        assert_eq!(at(403, &after), ("retry", RATE_LIMITED));
        assert_eq!(
            at(403, &none),
            ("reject", "http_4xx"),
            "a plain 403 is forbidden"
        );
        assert_eq!(
            at(
                403,
                &ReplyHeaders {
                    retry_after: Some("soon"),
                    ..ReplyHeaders::default()
                }
            ),
            ("reject", "http_4xx"),
            "an unreadable Retry-After says nothing"
        );
        assert_eq!(
            at(429, &none),
            ("retry", "http_429"),
            "the rest is the table"
        );
        assert_eq!(at(404, &none), ("reject", "http_4xx"));
        assert_eq!(at(200, &none), ("ok", ""));
        match classify_reply(409, &after, "busy", &rules, now) {
            Outcome::Retry { after, reason } => {
                assert_eq!(after, Some(Duration::from_secs(7)));
                assert_eq!(reason.detail, "HTTP 409 Conflict: busy");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rate_limit_headers_are_honoured_only_when_listed() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let github = ReplyHeaders {
            retry_after: None,
            rate_limit_reset: Some("1700000060"),
            rate_limit_remaining: Some("0"),
        };
        let both = ReplyRules {
            rate_limited: vec![403],
            rate_limit_reset: true,
            ..ReplyRules::default()
        };
        let after = |o: Outcome| match o {
            Outcome::Retry { after, .. } => after,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            after(classify_reply(403, &github, "", &both, now)),
            Some(Duration::from_secs(60))
        );
        // Requests left: a 403 is then a refusal, not a rate limit.
        let left = ReplyHeaders {
            rate_limit_remaining: Some("12"),
            ..github
        };
        assert!(matches!(
            classify_reply(403, &left, "", &both, now),
            Outcome::Reject { .. }
        ));
        // Not listed: X-RateLimit-Reset is ignored, by the 403 rule and as a 429's wait.
        assert!(matches!(
            classify_reply(403, &github, "", &ReplyRules::default(), now),
            Outcome::Reject { .. }
        ));
        assert_eq!(
            after(classify_reply(
                429,
                &github,
                "",
                &ReplyRules::default(),
                now
            )),
            None
        );
        assert_eq!(
            after(classify_reply(429, &github, "", &both, now)),
            Some(Duration::from_secs(60))
        );
        // Retry-After comes first; with it unlisted, only the reset counts.
        let mixed = ReplyHeaders {
            retry_after: Some("5"),
            ..github
        };
        assert_eq!(
            after(classify_reply(429, &mixed, "", &both, now)),
            Some(Duration::from_secs(5))
        );
        let reset_only = ReplyRules {
            retry_after: false,
            ..both.clone()
        };
        assert_eq!(
            after(classify_reply(429, &mixed, "", &reset_only, now)),
            Some(Duration::from_secs(60))
        );
        let neither = ReplyRules {
            retry_after: false,
            ..ReplyRules::default()
        };
        assert_eq!(after(classify_reply(503, &mixed, "", &neither, now)), None);
    }

    #[test]
    fn parses_rate_limit_reset_epoch_seconds() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        for (value, expected) in [
            ("1700000030", Some(Duration::from_secs(30))),
            (" 1700000001 ", Some(Duration::from_secs(1))),
            ("1699999000", Some(Duration::ZERO)),
            ("", None),
            ("-1", None),
            ("1.5", None),
            ("Wed, 21 Oct 2026 07:28:00 GMT", None),
            ("99999999999999999999999", None),
        ] {
            assert_eq!(parse_rate_limit_reset(value, now), expected, "{value:?}");
        }
    }

    #[test]
    fn bulk_replies_give_each_event_its_item() {
        let rules = ReplyRules {
            body: BodyCheck::ElasticsearchBulk,
            ..ReplyRules::default()
        };
        let hint = Some(Duration::from_secs(3));
        let body = br#"{"took": 3, "errors": true, "items": [
            {"index": {"_id": "a", "status": 201}},
            {"create": {"_id": "b", "status": 429, "error": {"type": "es_rejected_execution_exception", "reason": "queue full"}}},
            {"index": {"_id": "c", "status": 400, "error": {"type": "mapper_parsing_exception", "reason": "failed to parse"}}},
            {"delete": {"_id": "d", "status": 200}}
        ]}"#;
        let outcomes = classify_bulk(body, 4, &rules, hint);
        assert_eq!(outcomes[0], Outcome::Ok);
        assert_eq!(
            outcomes[1],
            Outcome::Retry {
                after: hint,
                reason: Reason::new(
                    "http_429",
                    "HTTP 429 Too Many Requests: _bulk item 1 (create): es_rejected_execution_exception: queue full"
                )
            }
        );
        assert_eq!(
            outcomes[2],
            Outcome::reject(Reason::new(
                "http_4xx",
                "HTTP 400 Bad Request: _bulk item 2 (index): mapper_parsing_exception: failed to parse"
            ))
        );
        assert_eq!(outcomes[3], Outcome::Ok);
        // The sink's own rules apply to items too.
        let conflicts = ReplyRules {
            retry: vec![400],
            ..rules.clone()
        };
        assert!(matches!(
            classify_bulk(body, 4, &conflicts, None)[2],
            Outcome::Retry { .. }
        ));
        assert_eq!(
            classify_bulk(br#"{"errors": false, "items": []}"#, 2, &rules, None),
            [Outcome::Ok, Outcome::Ok]
        );
        // Never lost behind a 200: what cannot be read is retried.
        let short = classify_bulk(
            br#"{"errors": true, "items": [{"index": {"status": 201}}]}"#,
            2,
            &rules,
            None,
        );
        assert_eq!(short[0], Outcome::Ok);
        assert_eq!(code_of_outcome(&short[1]), ("retry", BULK_REPLY));
        for body in [
            &b"ok"[..],
            b"",
            br#"{"items": []}"#,
            br#"{"errors": true, "items": [{"index": {}}]}"#,
        ] {
            let outcomes = classify_bulk(body, 1, &rules, None);
            assert_eq!(
                code_of_outcome(&outcomes[0]),
                ("retry", BULK_REPLY),
                "{body:?}"
            );
        }
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
