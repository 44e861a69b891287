//! Fault injection: the failures a real API server produces only by accident — errors on the next N
//! requests, latency, stalled watches — switched on from tests, the `/_herald/` admin API or flags.

use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::watch;

use super::status::ApiError;

/// What a garbled watch answers (200, then this one line, then the end of the stream): not JSON, and
/// not a truncated JSON value either, which clients take for the end of the stream rather than an
/// error.
pub(crate) const GARBLED_WATCH_LINE: &str = "<html>not a watch event</html>\n";

/// Fail the next `count` requests that match, with `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FailRule {
    /// Requests whose path starts with this prefix (`/apis/example.com/v1/namespaces/default/widgets`).
    pub path_prefix: String,
    /// Only this method (`GET`, `POST`, …); every method when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Only watch requests (`true`) or only non-watch requests (`false`); both when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<bool>,
    /// The HTTP status to answer: 429, 500, 503 and 504 get the real server's bodies (504 as a
    /// too-large-resourceVersion timeout with its cause); any other code a generic `Status`.
    pub status: u16,
    /// How many matching requests fail; then the rule is spent. Default 1.
    #[serde(default = "one")]
    pub count: u32,
    /// `Retry-After` in seconds (and `details.retryAfterSeconds`), for 429, 503 and 504.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
    /// Only the requests of this client; every client's when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientSelector>,
}

/// Which client a rule applies to, so that one of several clients (two herald replicas) can be
/// cut off while the others are not. Absent members match anything.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientSelector {
    /// Requests whose `User-Agent` contains this text (herald with leader election sends
    /// `herald/<version> (<identity>)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
    /// Requests authenticated as this user (a ServiceAccount token's
    /// `system:serviceaccount:<namespace>:<name>`, or the impersonated user); requests without a
    /// token are `system:admin`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// Who sent a request, as [`ClientSelector`] sees it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Client<'a> {
    /// The `User-Agent` header, when there is one.
    pub(crate) user_agent: Option<&'a str>,
    /// The authenticated (or impersonated) user's name.
    pub(crate) user: &'a str,
}

impl ClientSelector {
    fn matches(&self, client: Client<'_>) -> bool {
        self.user_agent
            .as_deref()
            .is_none_or(|want| client.user_agent.is_some_and(|ua| ua.contains(want)))
            && self.user.as_deref().is_none_or(|want| want == client.user)
    }
}

fn selects(selector: Option<&ClientSelector>, client: Client<'_>) -> bool {
    selector.is_none_or(|s| s.matches(client))
}

fn one() -> u32 {
    1
}

/// Delay every matching request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LatencyRule {
    /// Requests whose path starts with this prefix.
    pub path_prefix: String,
    /// The delay, e.g. `250ms`.
    #[serde(with = "humantime_serde")]
    pub delay: Duration,
    /// Only the requests of this client; every client's when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientSelector>,
}

/// Deny a request (and answer SelfSubjectAccessReviews accordingly), as a missing RBAC rule would.
/// Absent members match anything.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DenyRule {
    /// The verb: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verb: Option<String>,
    /// The API group (`""` for the core group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The resource, with `/status` for the status subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// The namespace (`""` for cluster-scoped requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl DenyRule {
    fn matches(&self, verb: &str, group: &str, resource: &str, namespace: &str) -> bool {
        let m = |want: &Option<String>, got: &str| want.as_deref().is_none_or(|w| w == got);
        m(&self.verb, verb)
            && m(&self.group, group)
            && m(&self.resource, resource)
            && m(&self.namespace, namespace)
    }
}

/// The active faults of one simulator.
#[derive(Debug)]
pub(crate) struct Faults {
    fail: Mutex<Vec<FailRule>>,
    latency: Mutex<Vec<LatencyRule>>,
    deny: Mutex<Vec<DenyRule>>,
    /// `true` while watches are stalled: connections stay open and nothing is sent.
    stall: watch::Sender<bool>,
    /// `true` while every new watch answers one line that is not JSON, then ends.
    garble: std::sync::atomic::AtomicBool,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            fail: Mutex::new(Vec::new()),
            latency: Mutex::new(Vec::new()),
            deny: Mutex::new(Vec::new()),
            stall: watch::Sender::new(false),
            garble: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Rules are plain data; a panic elsewhere cannot leave them half-written.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Faults {
    pub(crate) fn add_fail(&self, rule: FailRule) {
        lock(&self.fail).push(rule);
    }

    pub(crate) fn add_latency(&self, rule: LatencyRule) {
        lock(&self.latency).push(rule);
    }

    /// Removes every fail and latency rule and ends any stall or garbling.
    pub(crate) fn clear(&self) {
        lock(&self.fail).clear();
        lock(&self.latency).clear();
        lock(&self.deny).clear();
        self.stall.send_replace(false);
        self.garble_watches(false);
    }

    pub(crate) fn add_deny(&self, rule: DenyRule) {
        lock(&self.deny).push(rule);
    }

    /// Whether a request with these attributes is denied.
    pub(crate) fn denied(&self, verb: &str, group: &str, resource: &str, namespace: &str) -> bool {
        lock(&self.deny)
            .iter()
            .any(|r| r.matches(verb, group, resource, namespace))
    }

    pub(crate) fn stall_watches(&self, stalled: bool) {
        self.stall.send_replace(stalled);
    }

    pub(crate) fn stall_receiver(&self) -> watch::Receiver<bool> {
        self.stall.subscribe()
    }

    pub(crate) fn garble_watches(&self, garbled: bool) {
        self.garble
            .store(garbled, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether a new watch should answer [`GARBLED_WATCH_LINE`] instead of events.
    pub(crate) fn watches_garbled(&self) -> bool {
        self.garble.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The latency to add before answering `path`.
    pub(crate) fn latency_for(&self, path: &str, client: Client<'_>) -> Option<Duration> {
        lock(&self.latency)
            .iter()
            .filter(|r| path.starts_with(&r.path_prefix) && selects(r.client.as_ref(), client))
            .map(|r| r.delay)
            .max()
    }

    /// Consumes one matching fail rule and returns the error to answer with.
    pub(crate) fn take_failure(
        &self,
        method: &str,
        path: &str,
        is_watch: bool,
        current_rv: u64,
        client: Client<'_>,
    ) -> Option<ApiError> {
        let mut rules = lock(&self.fail);
        let idx = rules.iter().position(|r| {
            r.count > 0
                && path.starts_with(&r.path_prefix)
                && selects(r.client.as_ref(), client)
                && r.method
                    .as_deref()
                    .is_none_or(|m| m.eq_ignore_ascii_case(method))
                && r.watch.is_none_or(|w| w == is_watch)
        })?;
        let rule = rules[idx].clone();
        rules[idx].count -= 1;
        if rules[idx].count == 0 {
            rules.remove(idx);
        }
        Some(injected(&rule, current_rv))
    }

    /// A snapshot of the active rules, for `GET /_herald/faults`.
    pub(crate) fn describe(&self) -> serde_json::Value {
        json!({
            "fail": *lock(&self.fail),
            "latency": *lock(&self.latency),
            "deny": *lock(&self.deny),
            "watchesStalled": *self.stall.borrow(),
            "watchesGarbled": self.watches_garbled(),
        })
    }
}

/// The error body a real server sends for `rule.status`.
fn injected(rule: &FailRule, current_rv: u64) -> ApiError {
    let retry = rule.retry_after_seconds;
    let mut e = match rule.status {
        429 => ApiError::custom(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
        ),
        500 => ApiError::custom(
            500,
            "InternalError",
            "Internal error occurred: injected by herald sim",
        ),
        503 => ApiError::custom(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ),
        504 => ApiError::too_large_resource_version(current_rv + 1, current_rv),
        other => ApiError::custom(other, "", &format!("injected failure with status {other}")),
    };
    if let Some(secs) = retry {
        e = e.retry_after(secs);
    }
    e
}

/// `serde` for durations written with units (`250ms`, `2s`).
mod humantime_serde {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(prefix: &str, status: u16, count: u32) -> FailRule {
        FailRule {
            path_prefix: prefix.into(),
            method: None,
            watch: None,
            status,
            count,
            retry_after_seconds: Some(2),
            client: None,
        }
    }

    #[test]
    fn fail_rules_are_spent_after_count_matches() {
        let f = Faults::default();
        f.add_fail(rule("/apis/x", 503, 2));
        assert!(
            f.take_failure("GET", "/api/v1", false, 5, Client::default())
                .is_none()
        );
        let e = f
            .take_failure("GET", "/apis/x/v1/things", false, 5, Client::default())
            .unwrap();
        assert_eq!((e.code, e.reason), (503, "ServiceUnavailable"));
        assert!(
            f.take_failure("POST", "/apis/x", false, 5, Client::default())
                .is_some()
        );
        assert!(
            f.take_failure("GET", "/apis/x", false, 5, Client::default())
                .is_none()
        );
    }

    #[test]
    fn method_and_watch_filters_apply() {
        let f = Faults::default();
        f.add_fail(FailRule {
            method: Some("get".into()),
            watch: Some(true),
            ..rule("/", 500, 5)
        });
        assert!(
            f.take_failure("GET", "/apis", false, 1, Client::default())
                .is_none()
        );
        assert!(
            f.take_failure("POST", "/apis", true, 1, Client::default())
                .is_none()
        );
        assert!(
            f.take_failure("GET", "/apis", true, 1, Client::default())
                .is_some()
        );
    }

    #[test]
    fn client_selectors_pick_one_client() {
        let f = Faults::default();
        f.add_fail(FailRule {
            client: Some(ClientSelector {
                user_agent: Some("(herald-a)".into()),
                user: None,
            }),
            ..rule("/", 503, 5)
        });
        let a = Client {
            user_agent: Some("herald/0.1.0 (herald-a)"),
            user: "system:admin",
        };
        let b = Client {
            user_agent: Some("herald/0.1.0 (herald-b)"),
            user: "system:admin",
        };
        assert!(f.take_failure("GET", "/apis", false, 1, b).is_none());
        assert!(
            f.take_failure("GET", "/apis", false, 1, Client::default())
                .is_none()
        );
        assert!(f.take_failure("GET", "/apis", false, 1, a).is_some());
        f.add_latency(LatencyRule {
            path_prefix: "/".into(),
            delay: Duration::from_millis(5),
            client: Some(ClientSelector {
                user_agent: None,
                user: Some("system:serviceaccount:herald:herald".into()),
            }),
        });
        assert_eq!(f.latency_for("/apis", a), None);
        let sa = Client {
            user_agent: None,
            user: "system:serviceaccount:herald:herald",
        };
        assert_eq!(f.latency_for("/apis", sa), Some(Duration::from_millis(5)));
    }

    #[test]
    fn too_large_carries_its_cause_and_retry_after() {
        let e = injected(&rule("/", 504, 1), 7);
        assert_eq!(
            e.message,
            "Timeout: Too large resource version: 8, current: 7"
        );
        assert_eq!(
            e.to_status()["details"]["causes"][0]["reason"],
            "ResourceVersionTooLarge"
        );
        assert_eq!(e.to_status()["details"]["retryAfterSeconds"], 2);
    }

    #[test]
    fn rules_parse_from_camel_case_json() {
        let r: FailRule =
            serde_json::from_str(r#"{"pathPrefix":"/apis","status":429,"retryAfterSeconds":1}"#)
                .unwrap();
        assert_eq!(r.count, 1);
        let l: LatencyRule = serde_json::from_str(r#"{"pathPrefix":"/","delay":"250ms"}"#).unwrap();
        assert_eq!(l.delay, Duration::from_millis(250));
        assert!(
            serde_json::from_str::<FailRule>(r#"{"pathPrefix":"/","status":500,"bogus":1}"#)
                .is_err()
        );
    }
}
