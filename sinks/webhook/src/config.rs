//! `type: webhook` settings, as users write them; start at [`WebhookConfig`].

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use herald_sink_core::config::{
    DeliveryKeys, DeliveryOptions, EnvLookup, MAX_TIMEOUT, Problems, SecretRef, SinkConfig,
    check_secret, deserialize_duration, read_file, resolve_secret, setting_failed,
};
use herald_sink_core::sink::SinkError;
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::{self, Deserializer};

use crate::WebhookSink;
use crate::replies::WebhookReplies;
use crate::settings::{self, DEFAULT_TIMEOUT, Settings, SigningConfig};
use crate::template::WebhookTemplate;

/// `batchMaxEvents` of a webhook sink when not given: events per `batched` request.
const DEFAULT_BATCH_MAX_EVENTS: usize = 100;

/// `type: webhook` settings: each event (or batch) is an HTTP request (a POST unless `method` says
/// PUT) to `url`; 2xx is delivered, 408, 429 and 5xx except 501 are retried (honouring
/// `Retry-After`), redirects are not followed, and 3xx, 501 and other 4xx dead-letter the event.
///
/// ```
/// use herald_sink_core::config::{Problems, SinkConfig};
/// use herald_sink_webhook::{WebhookConfig, WebhookMode};
///
/// let config: WebhookConfig = serde_json::from_value(serde_json::json!({
///     "url": "https://receiver.example/hooks/herald",
///     "headers": {"X-Tenant": "payments"},
///     "auth": {"bearer": "${WEBHOOK_TOKEN}"},
///     "mode": "batched",
/// }))?;
/// assert_eq!(config.mode, WebhookMode::Batched);
/// let mut problems = Problems::default();
/// config.validate(&mut problems);
/// assert!(problems.is_empty());
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookConfig {
    /// The receiver: an `http` or `https` URL, without credentials (use `auth`). Required.
    /// Example: `https://events.example.com/herald`.
    pub url: String,
    /// The HTTP method of every request, dead letters forwarded here included: `POST` or `PUT`
    /// (for receivers that take uploads, such as presigned object-store URLs). The start-up
    /// check stays an `OPTIONS` request. Default `POST`. Example: `PUT`.
    #[serde(default)]
    pub method: WebhookMethod,
    /// Extra headers sent with every request, name to value. Names herald sets itself
    /// (`Content-Type`, `ce-*`, `webhook-*`, `Authorization`, `X-Hub-Signature-256`,
    /// `herald-error-*`, connection headers) are refused. Values are literal text, so never put a
    /// secret here. Default: none. Example: `{X-Tenant: payments}`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The `Authorization` header: `{bearer: SECRET}`,
    /// `{basic: {username: NAME, password: SECRET}}` or `{token: {scheme: NAME, value: SECRET}}`
    /// (another scheme, such as Splunk's), secrets as references. Default: none.
    /// Example: `{bearer: ${WEBHOOK_TOKEN}}`.
    #[serde(default)]
    pub auth: Option<WebhookAuth>,
    /// TLS for `https` URLs: a private CA and a client certificate. Default: the system's root
    /// certificates, no client certificate. Example: `{caFile: /etc/herald/ca.pem}`.
    #[serde(default)]
    pub tls: Option<WebhookTls>,
    /// Per-request timeout (connect, send, receive the answer); greater than zero and at most
    /// `1h` (an unanswered request is better retried). A timed-out request is retried. Default
    /// `10s`. Example: `30s`.
    #[serde(default = "default_timeout", deserialize_with = "deserialize_duration")]
    #[schemars(with = "String", extend("default" = "10s"))]
    pub timeout: Duration,
    /// CloudEvents HTTP binding: `binary` (attributes as `ce-` headers, `data` as the body),
    /// `structured` (the JSON event as the body) or `batched` (a JSON array of up to
    /// `batchMaxEvents` events; only for receivers that asked for batches). Default `binary`.
    /// Example: `structured`.
    #[serde(default)]
    pub mode: WebhookMode,
    /// Standard Webhooks signing (`webhook-id`, `webhook-timestamp`, `webhook-signature`).
    /// Default: unsigned. Example: `{secret: ${WEBHOOK_SECRET}}`.
    #[serde(default)]
    pub signing: Option<WebhookSigning>,
    /// Request templates (minijinja): the body, headers, content type, method and a path
    /// rendered from each event, for receivers that want their own request rather than a
    /// `CloudEvent`; see [`WebhookTemplate`]. Default: none (CloudEvents as `mode` says).
    /// Example: `{body: '{"text": {{ subject | tojson }}}'}`.
    #[serde(default)]
    pub template: Option<WebhookTemplate>,
    /// How this receiver's answers are read: statuses to retry or reject, rate-limit headers, a
    /// 2xx body check (see [`WebhookReplies`]). Default: 2xx delivered; 408, 429, 5xx
    /// except 501 retried with `Retry-After`; every other status refused.
    /// Example: `{rateLimited: [403], rateLimitHeaders: [retryAfter, xRateLimitReset]}`.
    #[serde(default)]
    pub replies: Option<WebhookReplies>,
}

impl WebhookConfig {
    /// Requests to `url` with every default: no extra headers, no auth, the system's roots, a
    /// 10 s timeout, binary mode, unsigned.
    #[must_use]
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            method: WebhookMethod::default(),
            headers: BTreeMap::new(),
            auth: None,
            tls: None,
            timeout: default_timeout(),
            mode: WebhookMode::default(),
            signing: None,
            template: None,
            replies: None,
        }
    }
}

fn default_timeout() -> Duration {
    DEFAULT_TIMEOUT
}

/// `method` of a webhook sink: the HTTP method of its requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum WebhookMethod {
    /// `POST`, what webhook receivers expect.
    #[default]
    Post,
    /// `PUT`, for receivers that store what they are sent at the URL.
    Put,
}

/// `auth` of a webhook sink: a mapping with exactly one key.
#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub enum WebhookAuth {
    /// `{bearer: SECRET}`: `Authorization: Bearer <token>`.
    Bearer(SecretRef),
    /// `{basic: {username: NAME, password: SECRET}}`: HTTP Basic authentication.
    Basic(WebhookBasicAuth),
    /// `{token: {scheme: NAME, value: SECRET}}`: `Authorization: <scheme> <token>`, for APIs
    /// with a scheme of their own (Splunk HEC's `Splunk`, Elasticsearch's `ApiKey`).
    Token(WebhookTokenAuth),
}

/// `auth` as written: serde's externally tagged enums want a YAML tag (`!bearer`) once the
/// document has gone through `serde_yaml_ng::Value`, so the one-key mapping is read as a struct.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WebhookAuthKeys {
    #[serde(default)]
    bearer: Option<SecretRef>,
    #[serde(default)]
    basic: Option<WebhookBasicAuth>,
    #[serde(default)]
    token: Option<WebhookTokenAuth>,
}

impl<'de> Deserialize<'de> for WebhookAuth {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match WebhookAuthKeys::deserialize(d)? {
            WebhookAuthKeys {
                bearer: Some(token),
                basic: None,
                token: None,
            } => Ok(Self::Bearer(token)),
            WebhookAuthKeys {
                bearer: None,
                basic: Some(basic),
                token: None,
            } => Ok(Self::Basic(basic)),
            WebhookAuthKeys {
                bearer: None,
                basic: None,
                token: Some(token),
            } => Ok(Self::Token(token)),
            _ => Err(de::Error::custom(
                "give exactly one of bearer, basic and token",
            )),
        }
    }
}

/// `auth.basic` of a webhook sink.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookBasicAuth {
    /// The user name, literal text without `:`. Required. Example: `herald`.
    pub username: String,
    /// The password, as a secret reference. Required. Example: `{fromFile: /run/secrets/pw}`.
    pub password: SecretRef,
}

/// `auth.token` of a webhook sink: a credential under a scheme other than Bearer or Basic.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookTokenAuth {
    /// The scheme, an HTTP token (RFC 9110 `tchar`: letters, digits and marks such as `-`, `.`,
    /// `_`; no space), sent as written. Required. Example: `Splunk`.
    pub scheme: String,
    /// The credential after the scheme, as a secret reference. Required.
    /// Example: `${SPLUNK_HEC_TOKEN}`.
    pub value: SecretRef,
}

herald_sink_core::tls_config! {
    /// `tls` of a webhook sink, for `https` URLs. Paths are PEM files, read at start-up; `${VAR}`
    /// is expanded.
    pub struct WebhookTls {}
}

/// `mode` of a webhook sink: the CloudEvents HTTP binding mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum WebhookMode {
    /// One request per event: `ce-` headers, `data` as the body.
    #[default]
    Binary,
    /// One request per event: `application/cloudevents+json`.
    Structured,
    /// One request per `batchMaxEvents` events: `application/cloudevents-batch+json`.
    Batched,
}

/// `signing` of a webhook sink.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookSigning {
    /// The Standard Webhooks secret, `whsec_` followed by base64 (the form receivers' libraries
    /// take), as a secret reference; checked at start-up. Required.
    /// Example: `${WEBHOOK_SECRET}`.
    pub secret: SecretRef,
    /// Also send GitHub-style `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`, keyed
    /// with the same secret's text as written. Default `false`. Example: `true`.
    #[serde(default)]
    pub hub_signature_256: bool,
}

impl SinkConfig for WebhookConfig {
    type Sink = WebhookSink;

    const DELIVERY: DeliveryKeys = DeliveryKeys::All {
        batch_max_events: DEFAULT_BATCH_MAX_EVENTS,
        batch_beside: Some("mode"),
    };

    fn paths_mut(&mut self) -> Vec<(&'static str, &mut PathBuf)> {
        self.tls
            .as_mut()
            .map(WebhookTls::paths_mut)
            .unwrap_or_default()
    }

    fn validate(&self, problems: &mut Problems) {
        if let Err(message) = check_http_url(&self.url) {
            problems.add("url", message);
        }
        let mut seen: HashMap<String, &str> = HashMap::new();
        for (name, value) in &self.headers {
            let key = format!("headers.{name}");
            if let Some(message) = header_problem(name, value) {
                problems.add(key, message);
            } else if let Some(first) = seen.insert(name.to_ascii_lowercase(), name) {
                problems.add(
                    key,
                    format!("header names ignore case: {name:?} repeats {first:?}"),
                );
            }
        }
        if let Some(WebhookAuth::Basic(basic)) = &self.auth {
            if basic.username.is_empty() {
                problems.add("auth.basic.username", "must not be empty");
            } else if basic.username.contains(':') || basic.username.chars().any(char::is_control) {
                problems.add(
                    "auth.basic.username",
                    format!(
                        "{:?} cannot be a basic auth user name (no ':' or control characters)",
                        basic.username
                    ),
                );
            }
        }
        if let Some(WebhookAuth::Token(token)) = &self.auth
            && (token.scheme.is_empty() || !token.scheme.bytes().all(is_token_char))
        {
            problems.add(
                "auth.token.scheme",
                format!(
                    "{:?} is not an authentication scheme (an HTTP token such as Splunk)",
                    token.scheme
                ),
            );
        }
        if let Some(tls) = &self.tls {
            for (key, path) in tls.files() {
                if path.is_some_and(|p| p.as_os_str().is_empty()) {
                    problems.add(key, "must not be empty");
                }
            }
            tls.check_client_pair(problems);
        }
        if self.timeout.is_zero() {
            problems.add("timeout", "must be greater than 0s");
        }
        MAX_TIMEOUT.check(
            problems,
            "timeout",
            self.timeout,
            "an unanswered request is better retried",
        );
        if let Some(template) = &self.template {
            template.validate(&self.headers, problems);
        }
        if let Some(replies) = &self.replies {
            replies.validate(problems);
        }
    }

    fn secret_files(&self) -> Vec<&std::path::Path> {
        let auth = match &self.auth {
            None => None,
            Some(WebhookAuth::Bearer(token)) => Some(token),
            Some(WebhookAuth::Basic(basic)) => Some(&basic.password),
            Some(WebhookAuth::Token(token)) => Some(&token.value),
        };
        auth.into_iter()
            .chain(self.signing.as_ref().map(|s| &s.secret))
            .filter_map(SecretRef::file)
            .chain(self.template.iter().flat_map(WebhookTemplate::secret_files))
            .collect()
    }

    /// The auth secrets, and the signing secret in its `whsec_` form.
    fn check_secrets(&self, env: EnvLookup<'_>, problems: &mut Problems) {
        match &self.auth {
            None => {}
            Some(WebhookAuth::Bearer(token)) => {
                check_secret(problems, "auth.bearer", token, env);
            }
            Some(WebhookAuth::Basic(basic)) => {
                check_secret(problems, "auth.basic.password", &basic.password, env);
            }
            Some(WebhookAuth::Token(token)) => {
                check_secret(problems, "auth.token.value", &token.value, env);
            }
        }
        if let Some(signing) = &self.signing
            && let Some(text) = check_secret(problems, "signing.secret", &signing.secret, env)
            && let Err(e) = SigningConfig::standard(&text)
        {
            problems.add("signing.secret", e.to_string());
        }
        for (name, secret) in self.template.iter().flat_map(|t| &t.secrets) {
            check_secret(problems, &format!("template.secrets.{name}"), secret, env);
        }
    }

    /// `batchMaxEvents` sizes `batched` requests; one event per request leaves the driver's
    /// default.
    fn batch_max_events(&self, delivery: &DeliveryOptions) -> Option<usize> {
        match self.mode {
            WebhookMode::Batched => delivery.batch_max_events,
            WebhookMode::Binary | WebhookMode::Structured => None,
        }
    }

    /// Resolves the secrets and reads the PEM files (errors name the key and the file or
    /// variable, never a secret), then builds the HTTP client.
    async fn build(
        &self,
        name: &str,
        delivery: &DeliveryOptions,
    ) -> Result<WebhookSink, SinkError> {
        WebhookSink::new(self.settings(name, delivery)?)
    }
}

impl WebhookConfig {
    /// What the sink uses: secrets resolved, PEM files read.
    fn settings(&self, name: &str, delivery: &DeliveryOptions) -> Result<Settings, SinkError> {
        let auth = match &self.auth {
            None => None,
            Some(WebhookAuth::Bearer(token)) => Some(settings::Auth::Bearer(resolve_secret(
                "auth.bearer",
                token,
            )?)),
            Some(WebhookAuth::Basic(basic)) => Some(settings::Auth::Basic {
                user: basic.username.clone(),
                password: resolve_secret("auth.basic.password", &basic.password)?,
            }),
            Some(WebhookAuth::Token(token)) => Some(settings::Auth::Token {
                scheme: token.scheme.clone(),
                token: resolve_secret("auth.token.value", &token.value)?,
            }),
        };
        let mut tls = settings::TlsConfig::default();
        if let Some(files) = &self.tls {
            if let Some(ca) = &files.ca_file {
                tls.ca_pem = Some(read_file("tls.caFile", ca)?);
            }
            if let (Some(cert), Some(key)) = (&files.client_cert_file, &files.client_key_file) {
                tls.client_identity = Some(settings::ClientIdentity {
                    cert_pem: read_file("tls.clientCertFile", cert)?,
                    key_pem: read_file("tls.clientKeyFile", key)?,
                });
            }
        }
        let signing = match &self.signing {
            None => None,
            Some(signing) => {
                let text = resolve_secret("signing.secret", &signing.secret)?;
                let keys = SigningConfig::standard(&text)
                    .map_err(|e| setting_failed("signing.secret", e))?;
                Some(if signing.hub_signature_256 {
                    keys.with_hub_signature_256(text.into_bytes())
                } else {
                    keys
                })
            }
        };
        Ok(Settings {
            method: match self.method {
                WebhookMethod::Post => reqwest::Method::POST,
                WebhookMethod::Put => reqwest::Method::PUT,
            },
            headers: self.headers.clone().into_iter().collect(),
            auth,
            tls,
            timeout: self.timeout,
            mode: match self.mode {
                WebhookMode::Binary => settings::Mode::Binary,
                WebhookMode::Structured => settings::Mode::Structured,
                WebhookMode::Batched => settings::Mode::Batched {
                    max_events: delivery
                        .batch_max_events
                        .unwrap_or(DEFAULT_BATCH_MAX_EVENTS),
                },
            },
            signing,
            template: match &self.template {
                Some(template) => Some(template.compile(name)?),
                None => None,
            },
            replies: self
                .replies
                .as_ref()
                .map(WebhookReplies::rules)
                .unwrap_or_default(),
            ..Settings::new(self.url.clone())
        })
    }
}

/// An absolute `http`/`https` URL with a host, no credentials, no spaces or control characters.
fn check_http_url(url: &str) -> Result<(), String> {
    let lower = url.to_ascii_lowercase();
    let Some(rest) = ["http://", "https://"]
        .iter()
        .find_map(|scheme| lower.starts_with(scheme).then(|| &url[scheme.len()..]))
    else {
        return Err(format!(
            "{url:?} is not an http or https URL (like https://events.example.com/herald)"
        ));
    };
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{url:?} contains spaces or control characters"));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        // The value may be a credential: do not repeat it.
        return Err(
            "credentials in the URL are refused; use auth, whose secrets are references".into(),
        );
    }
    let host = authority.strip_prefix('[').map_or_else(
        || authority.split(':').next().unwrap_or_default(),
        |v6| v6.split(']').next().unwrap_or_default(),
    );
    if host.is_empty() {
        return Err(format!("{url:?} has no host"));
    }
    Ok(())
}

/// Header names herald sets itself (lower case), and prefixes it owns.
const RESERVED_HEADERS: [&str; 9] = [
    "content-type",
    "content-length",
    "content-encoding",
    "transfer-encoding",
    "connection",
    "host",
    "te",
    "x-hub-signature-256",
    "authorization",
];
const RESERVED_PREFIXES: [&str; 3] = ["ce-", "webhook-", "herald-error-"];

/// A character of an HTTP token (RFC 9110 `tchar`): header names, authentication schemes.
fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Why an extra header cannot be sent, or `None` when it can: an HTTP token as the name, not a
/// header herald sets itself (names match case-insensitively), no control characters in the
/// value. The one rule, for the configuration's checks and the sink's own.
pub(crate) fn header_problem(name: &str, value: &str) -> Option<String> {
    if name.is_empty() || !name.bytes().all(is_token_char) {
        return Some(format!("{name:?} is not an HTTP header name"));
    }
    let lower = name.to_ascii_lowercase();
    if lower == "authorization" {
        return Some(
            "use auth for the Authorization header; its secrets are references".to_owned(),
        );
    }
    if RESERVED_HEADERS.contains(&lower.as_str())
        || RESERVED_PREFIXES.iter().any(|p| lower.starts_with(p))
    {
        return Some(format!(
            "{name:?} is set by herald and cannot be configured"
        ));
    }
    if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7F) {
        return Some(format!(
            "the value of {name:?} contains a control character"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use herald_sink_core::config::Flat;
    use serde_json::json;

    use super::*;

    /// A webhook's keys as herald reads them beside `name` and `type`, or the error with its
    /// path below the sink.
    fn flat(keys: serde_json::Value) -> Result<Flat<WebhookConfig>, String> {
        serde_path_to_error::deserialize(keys).map_err(|e| format!("{}: {}", e.path(), e.inner()))
    }

    #[test]
    fn unknown_keys_are_refused_with_every_key_a_webhook_takes() {
        assert_eq!(
            flat(json!({"url": "https://events.example.com/herald", "path": "x"})).unwrap_err(),
            "path: unknown field `path`, expected one of `url`, `method`, `headers`, `auth`, `tls`, `timeout`, `mode`, `batchMaxEvents`, `signing`, `template`, `replies`, `concurrency`, `maxAttempts`, `maxAge`, `deadLetterSink`, `rateLimit`, `debounce`, `start`",
        );
    }

    #[test]
    fn method_is_post_unless_put() {
        let url = "https://bucket.example/o/key?X-Amz-Signature=s";
        assert_eq!(
            flat(json!({"url": url})).unwrap().config.method,
            WebhookMethod::Post
        );
        assert_eq!(
            flat(json!({"url": url, "method": "PUT"}))
                .unwrap()
                .config
                .method,
            WebhookMethod::Put
        );
        assert_eq!(
            flat(json!({"url": url, "method": "GET"})).unwrap_err(),
            "method: unknown variant `GET`, expected `POST` or `PUT`"
        );
    }

    /// Answers one request with 200 and returns its request line, read over a real socket.
    async fn receive_one(listener: tokio::net::TcpListener) -> String {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
        let (socket, _) = listener.accept().await.unwrap();
        let mut reader = BufReader::new(socket);
        let mut request_line = String::new();
        reader.read_line(&mut request_line).await.unwrap();
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).await.unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).await.unwrap();
        reader
            .get_mut()
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        request_line.trim_end().to_owned()
    }

    /// The request line of the one event sent by a sink built from `method`.
    async fn request_line(method: WebhookMethod) -> String {
        use herald_sink_core::event::CloudEvent;
        use herald_sink_core::sink::{Envelope, Outcome, Sink};
        // What the program does at start-up: an HTTP client needs a process-wide provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/uploads/w1.json", listener.local_addr().unwrap());
        let receiver = tokio::spawn(receive_one(listener));
        let config = WebhookConfig {
            method,
            ..WebhookConfig::new(url)
        };
        let sink = config
            .build("uploads", &DeliveryOptions::new(WebhookConfig::DELIVERY))
            .await
            .unwrap();
        let event = CloudEvent::new("u:1:created", "k8s://c/g/p", "t").data(json!({"a": 1}));
        let outcomes = sink.send(&[Envelope::new(1, event)]).await;
        assert_eq!(outcomes, [Outcome::Ok]);
        receiver.await.unwrap()
    }

    #[tokio::test]
    async fn sends_with_the_configured_method() {
        assert_eq!(
            request_line(WebhookMethod::Put).await,
            "PUT /uploads/w1.json HTTP/1.1"
        );
        assert_eq!(
            request_line(WebhookMethod::Post).await,
            "POST /uploads/w1.json HTTP/1.1"
        );
    }

    #[test]
    fn extra_headers_are_checked() {
        assert_eq!(header_problem("X-Tenant", "payments"), None);
        assert_eq!(header_problem("x-trace", "a\tb"), None);
        for (name, value) in [
            ("Content-Type", "text/plain"),
            ("ce-id", "1"),
            ("Webhook-Signature", "x"),
            ("herald-error-code", "x"),
            ("X-Hub-Signature-256", "x"),
            ("Host", "x"),
            ("Authorization", "Bearer x"),
            ("bad name", "x"),
            ("", "x"),
            ("x-ok", "line\r\nbreak"),
        ] {
            assert!(header_problem(name, value).is_some(), "{name}: {value}");
        }
        assert_eq!(
            header_problem("authorization", "x").unwrap(),
            "use auth for the Authorization header; its secrets are references"
        );
    }
}
