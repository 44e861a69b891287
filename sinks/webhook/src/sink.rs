//! [`WebhookSink`]: builds the HTTP client and turns batches into requests.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::stream::{self, StreamExt};
use herald_sink_core::event::CloudEvent;
use herald_sink_core::sink::{Envelope, ErrorContext, Outcome, Reason, Sink, SinkError};
use herald_sink_core::{Journaled, Sendable};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, LOCATION, RETRY_AFTER};
use reqwest::{Method, Url};

use crate::classify::{
    BodyCheck, RATE_LIMIT_REMAINING, RATE_LIMIT_RESET, ReplyHeaders, classify_bulk, classify_error,
    classify_reply, excerpt,
};
use crate::config::header_problem;
use crate::encode;
use crate::settings::{Auth, Mode, Settings};

/// Bytes of an error response read for its excerpt; the rest is not read.
const ERROR_BODY_LIMIT: usize = 4096;
/// Bytes of a 2xx response read for a body check (`replies.body`): an Elasticsearch `_bulk` reply
/// of a few thousand items fits; a longer one is cut, fails to parse and retries the request.
const BULK_BODY_LIMIT: usize = 16 * 1024 * 1024;
/// Bytes of a successful response read so the connection can be reused; a longer body is dropped
/// (and its connection with it).
const OK_BODY_LIMIT: usize = 64 * 1024;

/// Reason code of an event not sent because an earlier event with the same `partitionkey` in the
/// same batch is being retried: sending it would overtake that event.
const HELD_FOR_ORDER: &str = "held_for_order";

/// Prefix of the headers describing a forwarded dead letter.
const ERROR_HEADER_PREFIX: &str = "herald-error-";

/// Delivers CloudEvents to one HTTP endpoint (see the crate documentation for modes, outcomes and
/// signing).
///
/// `send` never sleeps or retries: each event (or, in batched mode, each request) yields one
/// [`Outcome`] and the driver schedules what comes next.
pub struct WebhookSink {
    config: Settings,
    url: Url,
    /// `scheme://host:port` of the URL, for messages: the path and query may hold a token.
    target: String,
    client: reqwest::Client,
}

impl fmt::Debug for WebhookSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookSink")
            .field("target", &self.target)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl WebhookSink {
    /// Checks `config` and builds the HTTP client (no request is made; see
    /// [`Sink::healthcheck`]).
    ///
    /// The client follows no redirects, applies `config.timeout` to every request, honours the
    /// `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY` environment variables, and speaks HTTP/1.1. TLS is
    /// rustls with the process-wide provider, which the program installs before building a sink
    /// (herald: ring, its one provider, DECISIONS.md); this crate installs none.
    ///
    /// # Errors
    ///
    /// [`SinkError::InvalidConfig`] for a URL that is not `http`/`https` or carries credentials, a
    /// zero timeout, an extra header herald sets itself or that is malformed, a Basic user name
    /// with `:`, a credential that cannot be a header value, unusable PEM (CA or client
    /// identity), or no process-wide rustls provider installed.
    pub(crate) fn new(config: Settings) -> Result<Self, SinkError> {
        let url = parse_url(&config.url)?;
        if config.timeout.is_zero() {
            return Err(invalid("timeout must be greater than zero"));
        }
        for (name, value) in &config.headers {
            if let Some(problem) = header_problem(name, value) {
                return Err(invalid(problem));
            }
        }
        if let Some(auth) = &config.auth {
            if let Auth::Basic { user, .. } = auth
                && user.contains(':')
            {
                return Err(invalid("the basic auth user name must not contain ':'"));
            }
            HeaderValue::from_str(&auth.header_value()).map_err(|_| {
                invalid("the auth credentials contain characters a header cannot carry")
            })?;
        }
        let client = build_client(&config)?;
        let target = url.origin().ascii_serialization();
        Ok(Self {
            config,
            url,
            target,
            client,
        })
    }

    /// Forwards dead letters (this sink is another sink's `deadLetterSink`): one request per
    /// event, in every mode (a one-event array in batched mode), each carrying its own
    /// `error_headers[i]`: names starting with `herald-error-` (`herald-error-code`,
    /// `herald-error-attempts` …, DECISIONS.md), values as plain text that this sink
    /// percent-encodes like `ce-` headers. Returns one [`Outcome`] per letter, in order, with the
    /// same classification, ordering and signing as [`Sink::send`].
    ///
    /// A letter with a header not named `herald-error-*` is rejected (`invalid_request`) unsent;
    /// missing entries of `error_headers` mean no extra headers.
    pub async fn send_dead_letters_with_headers(
        &self,
        letters: &[Envelope],
        error_headers: &[Vec<(String, String)>],
    ) -> Vec<Outcome> {
        self.send_each(letters, error_headers).await
    }

    /// One request for `events` (one event, or one batch), classified: one outcome per event
    /// (they differ only when a body check reads per-item results from a 2xx answer).
    async fn post<E: Sendable + Sync>(
        &self,
        events: &[&E],
        error_headers: &[(String, String)],
    ) -> Vec<Outcome> {
        let all = |outcome| Outcome::all(events.len(), outcome);
        if let Some((name, _)) = error_headers
            .iter()
            .find(|(name, _)| !name.to_ascii_lowercase().starts_with(ERROR_HEADER_PREFIX))
        {
            return all(Outcome::reject(Reason::new(
                "invalid_request",
                format!("dead-letter header {name:?} is not named {ERROR_HEADER_PREFIX}*"),
            )));
        }
        let request = match self.prepare(events, error_headers, unix_now()) {
            Ok(prepared) => prepared,
            Err(reason) => return all(Outcome::reject(reason)),
        };
        let request = self
            .client
            .request(request.method, request.url)
            .headers(request.headers)
            .body(request.body);
        let mut response = match request.send().await {
            Ok(response) => response,
            Err(error) => return all(classify_error(&error)),
        };
        let status = response.status().as_u16();
        let rules = &self.config.replies;
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v: &HeaderValue| v.to_str().ok())
                .map(str::to_owned)
        };
        let retry_after = header(RETRY_AFTER.as_str());
        let reset = header(RATE_LIMIT_RESET);
        let remaining = header(RATE_LIMIT_REMAINING);
        let hints = ReplyHeaders {
            retry_after: retry_after.as_deref(),
            rate_limit_reset: reset.as_deref(),
            rate_limit_remaining: remaining.as_deref(),
        };
        if (200..=299).contains(&status) {
            if rules.body == BodyCheck::ElasticsearchBulk {
                let body = read_prefix(&mut response, BULK_BODY_LIMIT).await;
                let after = rules.hint(&hints, SystemTime::now());
                return classify_bulk(&body, events.len(), rules, after);
            }
            // Read (a bounded amount of) the body so the connection goes back to the pool. The
            // receiver has answered 2xx, so a failure here does not change the outcome.
            let _ = read_prefix(&mut response, OK_BODY_LIMIT).await;
            return all(Outcome::Ok);
        }
        let location = header(LOCATION.as_str()).filter(|_| (300..=399).contains(&status));
        let body = read_prefix(&mut response, ERROR_BODY_LIMIT).await;
        let mut text = excerpt(&body);
        if let Some(location) = location {
            text = if text.is_empty() {
                format!("redirect to {location} not followed")
            } else {
                format!("redirect to {location} not followed; {text}")
            };
        }
        all(classify_reply(
            status,
            &hints,
            &text,
            rules,
            SystemTime::now(),
        ))
    }

    /// The request for `events`, signed at `timestamp`, not sent: what [`Sink::send`] sends, and
    /// what `herald render` prints.
    ///
    /// # Errors
    ///
    /// A [`Reason`] to reject the events with: `render_failed` when a template fails on them
    /// (the detail names the template and line), `invalid_request` when a header cannot be
    /// carried.
    pub(crate) fn prepare<E: Sendable>(
        &self,
        events: &[&E],
        error_headers: &[(String, String)],
        timestamp: u64,
    ) -> Result<Prepared, Reason> {
        let built = encode::build(&self.config, events, error_headers, timestamp)
            .map_err(|e| Reason::new(herald_sink_core::jinja::RENDER_FAILED, e))?;
        let headers = header_map(&built.headers)?;
        let url = match &built.path {
            Some(path) => crate::template::join_path(&self.url, path)
                .map_err(|e| Reason::new(herald_sink_core::jinja::RENDER_FAILED, e))?,
            None => self.url.clone(),
        };
        Ok(Prepared {
            method: built.method.unwrap_or_else(|| self.config.method.clone()),
            url,
            headers,
            header_list: built.headers,
            body: built.body,
        })
    }

    /// The request [`Sink::send`] would make for `events` now (one event, or one batch in batched
    /// mode), for `herald render`: the secrets this sink knows (auth, `template.secrets`) are
    /// replaced by `***` wherever they appear, and `authorization` keeps only its scheme.
    ///
    /// # Errors
    ///
    /// The [`Reason`] the events would be rejected with: `render_failed` (the template's error,
    /// with its line) or `invalid_request`.
    pub fn preview(&self, events: &[&CloudEvent]) -> Result<RequestPreview, Reason> {
        let prepared = self.prepare(events, &[], unix_now())?;
        let mut secrets: Vec<&str> = Vec::new();
        match &self.config.auth {
            Some(Auth::Bearer(token) | Auth::Token { token, .. }) => secrets.push(token),
            Some(Auth::Basic { password, .. }) => secrets.push(password),
            None => {}
        }
        if let Some(template) = &self.config.template {
            secrets.extend(template.secret_values());
        }
        secrets.retain(|s| !s.is_empty());
        // A template may print a secret transformed (`b64encode`, `urlencode`, `tojson` of one
        // holding quotes or `<>&'`): each of those spellings is masked too.
        let spellings: Vec<String> = secrets.iter().flat_map(|s| secret_spellings(s)).collect();
        let mask = |text: &str| {
            spellings
                .iter()
                .fold(text.to_owned(), |text, secret| text.replace(secret, MASK))
        };
        let mut headers: Vec<(String, String)> = prepared
            .header_list
            .iter()
            .map(|(name, value)| {
                let value = if name.eq_ignore_ascii_case("authorization") {
                    let scheme = value.split(' ').next().unwrap_or_default();
                    format!("{scheme} {MASK}")
                } else {
                    mask(value)
                };
                (name.clone(), value)
            })
            .collect();
        headers.push(("content-length".to_owned(), prepared.body.len().to_string()));
        let body = match String::from_utf8(prepared.body) {
            Ok(text) => mask(&text).into_bytes(),
            Err(e) => e.into_bytes(),
        };
        Ok(RequestPreview {
            method: prepared.method.to_string(),
            url: mask(prepared.url.as_str()),
            headers,
            body,
        })
    }

    /// Binary and structured mode: one request per event. Events with different partition keys
    /// go concurrently (at most `parallel_requests` at once); events sharing a key (the driver
    /// does not send such batches, but nothing breaks if it does) go one after the other, and
    /// once one of them is to be retried the later ones are held back with the same hint.
    async fn send_each(
        &self,
        batch: &[Envelope],
        error_headers: &[Vec<(String, String)>],
    ) -> Vec<Outcome> {
        let groups = group_by_key(batch);
        let parallel = self.config.parallel_requests.max(1);
        let done: Vec<Vec<(usize, Outcome)>> = stream::iter(
            groups
                .into_iter()
                .map(|group| self.send_in_order(batch, error_headers, group)),
        )
        .buffer_unordered(parallel)
        .collect()
        .await;
        let mut outcomes = vec![None; batch.len()];
        for (index, outcome) in done.into_iter().flatten() {
            outcomes[index] = Some(outcome);
        }
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(lost_track))
            .collect()
    }

    /// The events at `indexes` (one partition key), one request at a time.
    async fn send_in_order(
        &self,
        batch: &[Envelope],
        error_headers: &[Vec<(String, String)>],
        indexes: Vec<usize>,
    ) -> Vec<(usize, Outcome)> {
        let mut out = Vec::with_capacity(indexes.len());
        let mut held: Option<Outcome> = None;
        for index in indexes {
            if let Some(held) = &held {
                out.push((index, held.clone()));
                continue;
            }
            let extra = error_headers.get(index).map_or(&[][..], Vec::as_slice);
            let outcome = self
                .post(&[&*batch[index].event], extra)
                .await
                .pop()
                .unwrap_or_else(lost_track);
            if let Outcome::Retry { after, reason } = &outcome {
                held = Some(held_for_order(*after, reason));
            }
            out.push((index, outcome));
        }
        out
    }

    /// Batched mode: requests of at most `max_events` events, one after the other; every event of
    /// a request gets its outcome. A request holding a key whose earlier request is to be retried
    /// is not sent (same hint), so no key's events overtake each other.
    async fn send_batched(&self, batch: &[Envelope], max_events: usize) -> Vec<Outcome> {
        let mut outcomes = Vec::with_capacity(batch.len());
        let mut retried_keys: HashSet<&str> = HashSet::new();
        let mut held: Option<Outcome> = None;
        for chunk in batch.chunks(max_events) {
            let blocked = held.as_ref().filter(|_| {
                chunk.iter().any(|e| {
                    e.event
                        .attributes()
                        .partition_key()
                        .is_some_and(|k| retried_keys.contains(k))
                })
            });
            if let Some(held) = blocked {
                outcomes.extend(Outcome::all(chunk.len(), held.clone()));
                continue;
            }
            let events: Vec<&Journaled> = chunk.iter().map(|e| &*e.event).collect();
            let mut answered = self.post(&events, &[]).await;
            answered.resize_with(chunk.len(), lost_track);
            // Only the events that are retried hold their keys back: with a body check, the
            // items a 200 took are done.
            for (envelope, outcome) in chunk.iter().zip(&answered) {
                if let Outcome::Retry { after, reason } = outcome {
                    retried_keys.extend(envelope.event.attributes().partition_key());
                    held = Some(held_for_order(*after, reason));
                }
            }
            outcomes.extend(answered);
        }
        outcomes
    }
}

/// What replaces a secret in a [`RequestPreview`].
const MASK: &str = "***";

/// A request as [`WebhookSink::preview`] shows it, secrets masked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestPreview {
    /// `POST`, `PUT` …
    pub method: String,
    /// The URL, the template's path appended.
    pub url: String,
    /// The headers herald sets, in sending order, then `content-length`; the HTTP client adds
    /// `host`, `user-agent` and `accept`.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

/// One request, ready to send.
pub(crate) struct Prepared {
    pub(crate) method: Method,
    pub(crate) url: Url,
    pub(crate) headers: HeaderMap,
    /// The headers in sending order, as built.
    pub(crate) header_list: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

/// The outcome of an event the sink has no answer for (a bug, retried rather than lost).
fn lost_track() -> Outcome {
    Outcome::retry(Reason::new(
        herald_sink_core::sink::codes::MISSING_OUTCOME,
        "the webhook sink lost track of this event",
    ))
}

/// The outcome of an event held back behind a same-key event that is retried: the same hint.
fn held_for_order(after: Option<Duration>, reason: &Reason) -> Outcome {
    Outcome::Retry {
        after,
        reason: Reason::new(
            HELD_FOR_ORDER,
            format!("an earlier event with the same partitionkey is retried ({reason})"),
        ),
    }
}

impl Sink for WebhookSink {
    const NAME: &'static str = "webhook";

    /// An OPTIONS request to the URL within the timeout. Any HTTP answer, whatever its status
    /// (405 included), shows the receiver is reachable.
    async fn healthcheck(&self) -> Result<(), SinkError> {
        match self
            .client
            .request(Method::OPTIONS, self.url.clone())
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(error) if error.is_timeout() => Err(SinkError::HealthcheckTimedOut {
                after: self.config.timeout,
            }),
            Err(error) => Err(SinkError::ConnectFailed {
                target: self.target.clone(),
                source: Box::new(error.without_url()),
            }),
        }
    }

    /// A TLS failure is permanent; see [`crate::classify::is_transient`].
    fn is_transient(error: &SinkError) -> bool {
        crate::classify::is_transient(error)
    }

    async fn send_dead_letters(
        &self,
        letters: &[Envelope],
        errors: &[ErrorContext],
    ) -> Vec<Outcome> {
        let headers: Vec<Vec<(String, String)>> =
            errors.iter().map(ErrorContext::hyphen_headers).collect();
        self.send_dead_letters_with_headers(letters, &headers).await
    }

    async fn send(&self, batch: &[Envelope]) -> Vec<Outcome> {
        match self.config.mode {
            Mode::Binary | Mode::Structured => self.send_each(batch, &[]).await,
            Mode::Batched { max_events } => self.send_batched(batch, max_events.max(1)).await,
        }
    }
}

/// Indexes of `batch` grouped by `partitionkey`, each group in batch order, groups in order of
/// their first event. An event without a key is a group of its own.
fn group_by_key(batch: &[Envelope]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::with_capacity(batch.len());
    let mut by_key: HashMap<&str, usize> = HashMap::new();
    for (index, envelope) in batch.iter().enumerate() {
        let Some(key) = envelope.event.attributes().partition_key() else {
            groups.push(vec![index]);
            continue;
        };
        match by_key.entry(key) {
            Entry::Occupied(group) => groups[*group.get()].push(index),
            Entry::Vacant(slot) => {
                slot.insert(groups.len());
                groups.push(vec![index]);
            }
        }
    }
    groups
}

fn invalid(detail: impl Into<String>) -> SinkError {
    SinkError::InvalidConfig {
        detail: detail.into().into(),
    }
}

/// An absolute `http`/`https` URL with a host and no credentials.
fn parse_url(text: &str) -> Result<Url, SinkError> {
    let url = Url::parse(text).map_err(|e| invalid(format!("url is not a valid URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(format!(
            "url must be http or https, not {}",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("url has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(
            "url must not contain credentials; use auth, whose secrets are references",
        ));
    }
    Ok(url)
}

fn build_client(config: &Settings) -> Result<reqwest::Client, SinkError> {
    // reqwest takes the process-wide provider and panics without one: say so instead.
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        return Err(invalid(
            "cannot build the HTTP client: no rustls crypto provider is installed (the program \
             installs one at start-up)",
        ));
    }
    // A request that times out must not be answered (or processed) later on a connection that is
    // used again: the timeout drops the request's future, and hyper's HTTP/1 client then closes
    // that connection instead of returning it to the pool (its dispatcher sees the response's
    // receiver gone); a response whose body read times out is dropped unread, which closes it too.
    // The retry opens a new connection. herald builds reqwest without HTTP/2, so this is the only
    // case; tested end to end in `tests/run_acks.rs`.
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(config.timeout)
        .connect_timeout(config.timeout)
        .user_agent(concat!("herald/", env!("CARGO_PKG_VERSION")));
    if let Some(pem) = &config.tls.ca_pem {
        let certs = reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|_| invalid("the CA file is not PEM certificates"))?;
        if certs.is_empty() {
            return Err(invalid("the CA file holds no PEM certificate"));
        }
        builder = builder.tls_certs_only(certs);
    }
    if let Some(identity) = &config.tls.client_identity {
        let mut pem = identity.cert_pem.clone();
        pem.push(b'\n');
        pem.extend_from_slice(&identity.key_pem);
        let identity = reqwest::Identity::from_pem(&pem).map_err(|_| {
            invalid(
                "the client certificate and key are not a PEM certificate chain and private key",
            )
        })?;
        builder = builder.identity(identity);
    }
    builder.build().map_err(|e| {
        invalid(format!(
            "cannot build the HTTP client: {}",
            crate::classify::error_chain(&e)
        ))
    })
}

/// The request headers; the `authorization` value is marked sensitive (never logged by the HTTP
/// stack).
fn header_map(headers: &[(String, String)]) -> Result<HeaderMap, Reason> {
    let mut map = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let header_name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| Reason::new("invalid_request", format!("invalid header name {name:?}")))?;
        let mut header_value = HeaderValue::from_str(value).map_err(|_| {
            Reason::new(
                "invalid_request",
                format!("header {name} has a value HTTP cannot carry"),
            )
        })?;
        if header_name == reqwest::header::AUTHORIZATION {
            header_value.set_sensitive(true);
        }
        map.append(header_name, header_value);
    }
    Ok(map)
}

/// Up to `limit` bytes of the body (possibly a little more: whole chunks); errors end it early.
async fn read_prefix(response: &mut reqwest::Response, limit: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    body
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The ways a template can print `secret`: as it is, JSON-escaped as minijinja's `tojson` writes
/// strings (`<>&'` as `\u00XX`), percent-encoded (with and without `/` kept) and base64.
fn secret_spellings(secret: &str) -> Vec<String> {
    use base64::Engine as _;
    use std::fmt::Write as _;
    let mut out = vec![secret.to_owned()];
    let json = serde_json::to_string(secret).unwrap_or_default();
    let json = json.trim_matches('"').to_owned();
    out.push(json.clone());
    out.push(
        json.replace('<', "\\u003c")
            .replace('>', "\\u003e")
            .replace('&', "\\u0026")
            .replace('\'', "\\u0027"),
    );
    for keep_slash in [false, true] {
        let mut enc = String::new();
        for b in secret.bytes() {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || (keep_slash && b == b'/') {
                enc.push(char::from(b));
            } else {
                let _ = write!(enc, "%{b:02X}");
            }
        }
        out.push(enc);
    }
    out.push(base64::engine::general_purpose::STANDARD.encode(secret));
    out.retain(|s| !s.is_empty());
    // Longest first: a spelling that contains another is masked whole.
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out.dedup();
    out
}

#[cfg(test)]
mod tests {

    /// `herald render` masks a secret however the template spells it: as it is, JSON-escaped,
    /// percent-encoded or base64, in the URL path too.
    #[test]
    fn secret_spellings_cover_what_templates_print() {
        let s = super::secret_spellings("a/b&c'd e");
        for spelling in [
            "a/b&c'd e",
            "a/b\\u0026c\\u0027d e",
            "a%2Fb%26c%27d%20e",
            "a/b%26c%27d%20e",
            "YS9iJmMnZCBl",
        ] {
            assert!(s.iter().any(|x| x == spelling), "{spelling} not in {s:?}");
        }
    }
    use super::*;
    use crate::settings::{ClientIdentity, SigningConfig, TlsConfig};

    /// What the program does at start-up (herald's cli): a client needs a process-wide provider.
    fn install_provider() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }

    fn detail(err: SinkError) -> String {
        match err {
            SinkError::InvalidConfig { detail } => detail.into_owned(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn name_is_webhook() {
        assert_eq!(<WebhookSink as Sink>::NAME, "webhook");
    }

    #[test]
    fn builds_for_http_and_https_urls() {
        install_provider();
        for url in [
            "http://127.0.0.1:8080/hook",
            "https://receiver.example/hooks/herald?tenant=a",
            "HTTP://[::1]/",
        ] {
            let sink = WebhookSink::new(Settings::new(url)).unwrap();
            assert!(!sink.target.contains("/hook"), "{}", sink.target);
        }
        let sink = WebhookSink::new(Settings::new("https://h.example/p/s3cret")).unwrap();
        assert_eq!(sink.target, "https://h.example");
        assert!(!format!("{sink:?}").contains("Bearer"));
    }

    #[test]
    fn refuses_unusable_urls() {
        for (url, expected) in [
            ("not a url", "url is not a valid URL"),
            ("ftp://h/x", "url must be http or https, not ftp"),
            ("https://user:pw@h/x", "url must not contain credentials"),
            ("https://user@h/x", "url must not contain credentials"),
            ("file:///tmp/x", "url must be http or https, not file"),
        ] {
            let err = detail(WebhookSink::new(Settings::new(url)).unwrap_err());
            assert!(err.starts_with(expected), "{url}: {err}");
            assert!(!err.contains("pw"), "{err}");
        }
    }

    #[test]
    fn refuses_bad_settings() {
        install_provider();
        let base = || Settings::new("http://127.0.0.1:1/");
        let header = |name: &str, value: &str| Settings {
            headers: vec![(name.into(), value.into())],
            ..base()
        };
        let auth = |auth| Settings {
            auth: Some(auth),
            ..base()
        };
        let tls = |tls| Settings { tls, ..base() };
        let cases = [
            (
                Settings {
                    timeout: Duration::ZERO,
                    ..base()
                },
                "timeout must be greater than zero",
            ),
            (
                header("ce-id", "x"),
                "\"ce-id\" is set by herald and cannot be configured",
            ),
            (
                header("Authorization", "Bearer x"),
                "use auth for the Authorization header; its secrets are references",
            ),
            (
                auth(Auth::Basic {
                    user: "a:b".into(),
                    password: "p".into(),
                }),
                "the basic auth user name must not contain ':'",
            ),
            (
                auth(Auth::Bearer("line\nbreak".into())),
                "the auth credentials contain characters a header cannot carry",
            ),
            (
                tls(TlsConfig {
                    ca_pem: Some(b"not pem".to_vec()),
                    client_identity: None,
                }),
                "the CA file holds no PEM certificate",
            ),
            (
                tls(TlsConfig {
                    ca_pem: None,
                    client_identity: Some(ClientIdentity {
                        cert_pem: b"x".to_vec(),
                        key_pem: b"y".to_vec(),
                    }),
                }),
                "the client certificate and key are not a PEM certificate chain and private key",
            ),
        ];
        for (config, expected) in cases {
            assert_eq!(detail(WebhookSink::new(config).unwrap_err()), expected);
        }
    }

    #[test]
    fn groups_events_by_partition_key_in_order() {
        let envelope = |seq: u64, key: Option<&str>| {
            let mut event = CloudEvent::new(format!("e{seq}"), "/s", "t");
            if let Some(key) = key {
                event = event.extension("partitionkey", key);
            }
            Envelope::new(seq, event)
        };
        let batch = [
            envelope(0, Some("ns/a")),
            envelope(1, Some("ns/b")),
            envelope(2, None),
            envelope(3, Some("ns/a")),
            envelope(4, None),
            envelope(5, Some("ns/b")),
            envelope(6, Some("ns/c")),
        ];
        assert_eq!(
            group_by_key(&batch),
            [vec![0, 3], vec![1, 5], vec![2], vec![4], vec![6]]
        );
        assert!(group_by_key(&[]).is_empty());
    }

    /// Refused before any connection is attempted (the URL's port is never contacted).
    #[tokio::test]
    async fn dead_letter_headers_must_be_named_herald_error() {
        install_provider();
        let sink = WebhookSink::new(Settings::new("http://127.0.0.1:1/")).unwrap();
        let letters = [Envelope::new(1, CloudEvent::new("1", "/s", "t"))];
        let outcomes = sink
            .send_dead_letters_with_headers(&letters, &[vec![("x-error".into(), "boom".into())]])
            .await;
        assert_eq!(
            outcomes,
            [Outcome::reject(Reason::new(
                "invalid_request",
                "dead-letter header \"x-error\" is not named herald-error-*"
            ))]
        );
    }

    #[test]
    fn header_map_marks_authorization_sensitive() {
        let config = Settings {
            auth: Some(Auth::Bearer("t".into())),
            headers: vec![("X-Tenant".into(), "a".into())],
            signing: Some(SigningConfig {
                secret: b"k".to_vec(),
                hub_signature_256_secret: None,
            }),
            ..Settings::new("http://127.0.0.1:1/")
        };
        let event = CloudEvent::new("1", "/s", "t").data(serde_json::json!({"a": 1}));
        let built = encode::build(&config, &[&event], &[], 5).unwrap();
        let map = header_map(&built.headers).unwrap();
        assert!(map["authorization"].is_sensitive());
        assert_eq!(map["x-tenant"], "a");
        assert_eq!(map["webhook-id"], "1");
        assert_eq!(map["content-type"], "application/json");
        assert_eq!(map.len(), built.headers.len());
    }

    #[test]
    fn header_values_http_cannot_carry_reject_the_event() {
        let reason = header_map(&[("content-type".into(), "text/plain\u{7f}".into())]).unwrap_err();
        assert_eq!(reason.code, "invalid_request");
    }

    #[test]
    fn builder_errors_are_rejected_without_the_url() {
        install_provider();
        let client = build_client(&Settings::new("http://127.0.0.1:1/")).unwrap();
        let error = client
            .post("http://127.0.0.1:1/p/s3cret")
            .header("x", "a\nb")
            .build()
            .unwrap_err();
        let outcome = classify_error(&error);
        let reason = outcome.reason().unwrap();
        assert!(matches!(outcome, Outcome::Reject { .. }), "{outcome:?}");
        assert_eq!(reason.code, "invalid_request");
        assert!(!reason.detail.contains("s3cret"), "{}", reason.detail);
    }
}
