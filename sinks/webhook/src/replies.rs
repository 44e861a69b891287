//! `replies` of a webhook sink, as users write it: how this receiver's answers are read; start at
//! [`WebhookReplies`]. The running sink uses the [`ReplyRules`] it becomes.

use std::collections::HashSet;

use herald_sink_core::config::Problems;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::classify::{BodyCheck, ReplyRules};

/// `replies` of a webhook sink: which statuses retry, which reject, which rate-limit headers give
/// the wait, and what a 2xx body is checked for. Every key is optional; what is left out keeps
/// the default table (408, 429, 5xx except 501 retried with `Retry-After`; 3xx, 501, other 4xx
/// dead-lettered).
///
/// ```
/// use herald_sink_core::config::Problems;
/// use herald_sink_webhook::{ReplyBody, WebhookReplies};
///
/// // GitHub: a 403 carrying `Retry-After` or `X-RateLimit-Remaining: 0` is a rate limit.
/// let replies: WebhookReplies = serde_json::from_value(serde_json::json!({
///     "rateLimited": [403],
///     "rateLimitHeaders": ["retryAfter", "xRateLimitReset"],
/// }))?;
/// assert_eq!(replies.body, ReplyBody::None);
/// let mut problems = Problems::default();
/// replies.validate(&mut problems);
/// assert!(problems.is_empty());
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookReplies {
    /// Statuses retried whatever the default table says, waiting what `rateLimitHeaders` say.
    /// Not 2xx; not also in `reject`. Default: none. Example: `[409, 423]`.
    #[serde(default)]
    pub retry: Vec<u16>,
    /// Statuses dead-lettered at once whatever the default table says, with the answer (status
    /// and start of the body) in the dead letter's context. Not 2xx. Default: none.
    /// Example: `[503]`.
    #[serde(default)]
    pub reject: Vec<u16>,
    /// Statuses that mean "rate limited" when the answer carries an honoured rate-limit header
    /// (a readable `Retry-After`, or `X-RateLimit-Remaining: 0` with `X-RateLimit-Reset`): such
    /// an answer is retried after the time the header gives; without one the status keeps its
    /// class. Not 2xx. Default: none. Example: `[403]` (GitHub).
    #[serde(default)]
    pub rate_limited: Vec<u16>,
    /// Which headers give the wait before a retry: `retryAfter` (`Retry-After`, seconds or an
    /// HTTP-date) and `xRateLimitReset` (`X-RateLimit-Reset`, Unix epoch seconds), `Retry-After`
    /// first; an empty list leaves every wait to herald's backoff. Default `[retryAfter]`.
    /// Example: `[retryAfter, xRateLimitReset]`.
    #[serde(default = "default_headers")]
    pub rate_limit_headers: Vec<RateLimitHeader>,
    /// What a 2xx answer's body is checked for: `none`, or `elasticsearchBulk` (an Elasticsearch
    /// `_bulk` reply: with `errors: true`, each event gets its item's status, so
    /// only the failed items are retried or dead-lettered). Default `none`.
    /// Example: `elasticsearchBulk`.
    #[serde(default)]
    pub body: ReplyBody,
}

impl Default for WebhookReplies {
    fn default() -> Self {
        Self {
            retry: Vec::new(),
            reject: Vec::new(),
            rate_limited: Vec::new(),
            rate_limit_headers: default_headers(),
            body: ReplyBody::None,
        }
    }
}

fn default_headers() -> Vec<RateLimitHeader> {
    vec![RateLimitHeader::RetryAfter]
}

/// One rate-limit header a webhook sink honours (`replies.rateLimitHeaders`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RateLimitHeader {
    /// `Retry-After`: delay-seconds or an HTTP-date (RFC 9110).
    RetryAfter,
    /// `X-RateLimit-Reset`: when the rate-limit window resets, in Unix epoch seconds (GitHub).
    #[serde(rename = "xRateLimitReset")]
    XRateLimitReset,
}

/// `replies.body` of a webhook sink.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ReplyBody {
    /// A 2xx answer takes every event of its request.
    #[default]
    None,
    /// A 2xx answer is an Elasticsearch `_bulk` reply, read item by item.
    ElasticsearchBulk,
}

impl WebhookReplies {
    /// Records every rule these settings break, at `replies.<key>`.
    pub fn validate(&self, problems: &mut Problems) {
        let lists = [
            ("replies.retry", &self.retry),
            ("replies.reject", &self.reject),
            ("replies.rateLimited", &self.rate_limited),
        ];
        for (key, statuses) in lists {
            for status in statuses {
                if !(100..=999).contains(status) {
                    problems.add(key, format!("{status} is not an HTTP status (100 to 999)"));
                } else if (200..=299).contains(status) {
                    problems.add(
                        key,
                        format!(
                            "{status} is a success and always delivers; use replies.body to check a 2xx answer's items"
                        ),
                    );
                }
            }
        }
        let reject: HashSet<u16> = self.reject.iter().copied().collect();
        for status in &self.retry {
            if reject.contains(status) {
                problems.add(
                    "replies.retry",
                    format!("{status} is also in replies.reject; list it in one of them"),
                );
            }
        }
        let mut seen = HashSet::new();
        for header in &self.rate_limit_headers {
            if !seen.insert(header) {
                problems.add(
                    "replies.rateLimitHeaders",
                    format!("{header:?} is listed twice"),
                );
            }
        }
        if !self.rate_limited.is_empty() && self.rate_limit_headers.is_empty() {
            problems.add(
                "replies.rateLimited",
                "needs a header in replies.rateLimitHeaders to recognise a rate limit by",
            );
        }
    }

    /// The rules the running sink applies.
    #[must_use]
    pub fn rules(&self) -> ReplyRules {
        ReplyRules {
            retry: self.retry.clone(),
            reject: self.reject.clone(),
            rate_limited: self.rate_limited.clone(),
            retry_after: self
                .rate_limit_headers
                .contains(&RateLimitHeader::RetryAfter),
            rate_limit_reset: self
                .rate_limit_headers
                .contains(&RateLimitHeader::XRateLimitReset),
            body: match self.body {
                ReplyBody::None => BodyCheck::None,
                ReplyBody::ElasticsearchBulk => BodyCheck::ElasticsearchBulk,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(replies: &WebhookReplies) -> Vec<(String, String)> {
        let mut problems = Problems::default();
        replies.validate(&mut problems);
        problems.into_iter().map(|p| (p.key, p.message)).collect()
    }

    #[test]
    fn the_default_is_the_decisions_table() {
        let replies: WebhookReplies = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(replies, WebhookReplies::default());
        assert_eq!(replies.rules(), ReplyRules::default());
        assert!(problems(&replies).is_empty());
    }

    #[test]
    fn reads_every_key() {
        let replies: WebhookReplies = serde_json::from_value(serde_json::json!({
            "retry": [409],
            "reject": [503],
            "rateLimited": [403],
            "rateLimitHeaders": ["xRateLimitReset"],
            "body": "elasticsearchBulk",
        }))
        .unwrap();
        assert_eq!(
            replies.rules(),
            ReplyRules {
                retry: vec![409],
                reject: vec![503],
                rate_limited: vec![403],
                retry_after: false,
                rate_limit_reset: true,
                body: BodyCheck::ElasticsearchBulk,
            }
        );
        assert!(problems(&replies).is_empty());
        let unknown = serde_json::from_value::<WebhookReplies>(serde_json::json!({
            "rateLimitHeaders": ["xRateLimitRemaining"]
        }))
        .unwrap_err()
        .to_string();
        assert!(
            unknown.starts_with(
                "unknown variant `xRateLimitRemaining`, expected `retryAfter` or `xRateLimitReset`"
            ),
            "{unknown}"
        );
    }

    #[test]
    fn statuses_must_be_failures_listed_once() {
        let replies = WebhookReplies {
            retry: vec![204, 409, 1000],
            reject: vec![409, 99],
            rate_limited: vec![403],
            rate_limit_headers: vec![],
            body: ReplyBody::None,
        };
        assert_eq!(
            problems(&replies),
            [
                (
                    "replies.retry".to_owned(),
                    "204 is a success and always delivers; use replies.body to check a 2xx answer's items".to_owned()
                ),
                (
                    "replies.retry".to_owned(),
                    "1000 is not an HTTP status (100 to 999)".to_owned()
                ),
                (
                    "replies.reject".to_owned(),
                    "99 is not an HTTP status (100 to 999)".to_owned()
                ),
                (
                    "replies.retry".to_owned(),
                    "409 is also in replies.reject; list it in one of them".to_owned()
                ),
                (
                    "replies.rateLimited".to_owned(),
                    "needs a header in replies.rateLimitHeaders to recognise a rate limit by"
                        .to_owned()
                ),
            ]
        );
    }
}
