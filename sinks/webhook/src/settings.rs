//! What the running sink uses, derived from [`WebhookConfig`](crate::WebhookConfig) with secrets
//! resolved and PEM files read; start at [`Settings`].

use std::fmt;
use std::time::Duration;

use base64::Engine as _;
use herald_sink_core::sink::SinkError;

/// Default per-request timeout (connect, send and wait for the response status).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Default cap on the requests one `send` call has in flight at once (binary and structured mode).
pub const DEFAULT_PARALLEL_REQUESTS: usize = 32;

/// Prefix of a Standard Webhooks symmetric secret (`whsec_` + base64 of the key).
const STANDARD_SECRET_PREFIX: &str = "whsec_";

/// Settings of a [`WebhookSink`](crate::WebhookSink): the configuration with its secrets resolved
/// and its PEM files read. `Debug` never prints a secret.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    /// The receiver: an `http` or `https` URL without credentials in it. Every request is a POST
    /// to it; the healthcheck sends it an OPTIONS request.
    pub url: String,
    /// The method of every request (the healthcheck's is `OPTIONS`). Default `POST`.
    pub method: reqwest::Method,
    /// Extra headers sent with every request, in this order. Names are checked when the sink is
    /// built: the ones herald sets itself (`content-type`, `ce-*`, `webhook-*`, `authorization`,
    /// `x-hub-signature-256`, `herald-error-*`, and connection-level headers) are refused.
    pub headers: Vec<(String, String)>,
    /// The `Authorization` header, if any.
    pub auth: Option<Auth>,
    /// Server verification and client certificate.
    pub tls: TlsConfig,
    /// Per-request timeout: connecting, sending and receiving the response must fit in it. An
    /// expired timeout is a `Retry` with code `timeout`. Default [`DEFAULT_TIMEOUT`].
    pub timeout: Duration,
    /// How events map to requests. Default [`Mode::Binary`].
    pub mode: Mode,
    /// Request signing; `None` sends no signature headers.
    pub signing: Option<SigningConfig>,
    /// Most requests one `send` call has in flight at once in binary and structured mode (the
    /// driver's `concurrency` multiplies it). Default [`DEFAULT_PARALLEL_REQUESTS`]; 0 counts as 1.
    pub parallel_requests: usize,
    /// Request templates (`template:`); `None` sends CloudEvents as `mode` says.
    pub template: Option<crate::template::RequestTemplate>,
    /// How the receiver's answers are read (`replies`). Default: the table in [`crate::classify`].
    pub replies: crate::classify::ReplyRules,
}

impl Settings {
    /// Settings for `url` with every default: no extra headers, no auth, the system's root
    /// certificates, a 10 s timeout, binary mode, no signing.
    #[must_use]
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            method: reqwest::Method::POST,
            headers: Vec::new(),
            auth: None,
            tls: TlsConfig::default(),
            timeout: DEFAULT_TIMEOUT,
            mode: Mode::default(),
            signing: None,
            parallel_requests: DEFAULT_PARALLEL_REQUESTS,
            template: None,
            replies: crate::classify::ReplyRules::default(),
        }
    }
}

/// Header values may be tokens from the configuration: only their names are printed.
impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header_names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Settings")
            .field("url", &self.url)
            .field("method", &self.method)
            .field("headers", &header_names)
            .field("auth", &self.auth)
            .field("tls", &self.tls)
            .field("timeout", &self.timeout)
            .field("mode", &self.mode)
            .field("signing", &self.signing)
            .field("parallel_requests", &self.parallel_requests)
            .field("template", &self.template)
            .field("replies", &self.replies)
            .finish()
    }
}

/// The `Authorization` header herald sends.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// `Authorization: Basic <base64 of user:password>` (RFC 7617).
    Basic {
        /// The user name; it must not contain `:`.
        user: String,
        /// The password.
        password: String,
    },
    /// `Authorization: <scheme> <token>` (Splunk HEC's `Splunk <token>`).
    Token {
        /// The scheme, an HTTP token.
        scheme: String,
        /// The credential.
        token: String,
    },
}

impl Auth {
    /// The header value.
    pub fn header_value(&self) -> String {
        match self {
            Self::Bearer(token) => format!("Bearer {token}"),
            Self::Token { scheme, token } => format!("{scheme} {token}"),
            Self::Basic { user, password } => {
                let credentials = format!("{user}:{password}");
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(credentials)
                )
            }
        }
    }
}

/// Prints the scheme and the user, never the token or password.
impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Self::Token { scheme, .. } => f
                .debug_struct("Token")
                .field("scheme", scheme)
                .field("token", &"<redacted>")
                .finish(),
            Self::Basic { user, .. } => f
                .debug_struct("Basic")
                .field("user", user)
                .field("password", &"<redacted>")
                .finish(),
        }
    }
}

/// TLS settings for `https` URLs (ignored for `http`).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// PEM CA certificates that verify the receiver, **instead of** the system's roots (a
    /// private CA, as Kubernetes' `caBundle`). `None` uses the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// A client certificate for mutual TLS.
    pub client_identity: Option<ClientIdentity>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("ca_pem", &self.ca_pem.as_ref().map(Vec::len))
            .field("client_identity", &self.client_identity)
            .finish()
    }
}

/// A client certificate chain and its private key, both PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The certificate chain (PEM), leaf first.
    pub cert_pem: Vec<u8>,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_pem: Vec<u8>,
}

/// Never prints the key.
impl fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("cert_pem", &self.cert_pem.len())
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// How events become HTTP requests (CloudEvents HTTP binding).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// One request per event: attributes as `ce-` headers, `data` as the body, `content-type`
    /// from `datacontenttype`.
    #[default]
    Binary,
    /// One request per event: the JSON event as the body
    /// (`application/cloudevents+json; charset=UTF-8`).
    Structured,
    /// One request per `max_events` events: a JSON array
    /// (`application/cloudevents-batch+json; charset=UTF-8`). All events of a request share its
    /// outcome. Only for receivers that asked for batches.
    Batched {
        /// Most events per request; 0 counts as 1.
        max_events: usize,
    },
}

/// Request signing: Standard Webhooks, and optionally GitHub's `X-Hub-Signature-256`.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningConfig {
    /// The HMAC-SHA256 key of `webhook-signature`: the *decoded* bytes of a `whsec_<base64>`
    /// secret (see [`SigningConfig::standard`]).
    pub secret: Vec<u8>,
    /// The HMAC-SHA256 key of `X-Hub-Signature-256`, used as given (GitHub-style receivers use
    /// the secret's text as the key); `None` sends no such header.
    pub hub_signature_256_secret: Option<Vec<u8>>,
}

impl SigningConfig {
    /// Signing with a Standard Webhooks secret as receivers' libraries take it: `whsec_` followed
    /// by the base64 of the key (the prefix may be left out).
    ///
    /// # Errors
    ///
    /// [`SinkError::InvalidConfig`] when the rest is not base64 or decodes to nothing; the message
    /// never repeats the secret.
    pub fn standard(secret: &str) -> Result<Self, SinkError> {
        let encoded = secret
            .strip_prefix(STANDARD_SECRET_PREFIX)
            .unwrap_or(secret);
        let key = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|_| SinkError::InvalidConfig {
                detail: "the signing secret must be whsec_ followed by base64 (Standard Webhooks)"
                    .into(),
            })?;
        if key.is_empty() {
            return Err(SinkError::InvalidConfig {
                detail: "the signing secret is empty".into(),
            });
        }
        Ok(Self {
            secret: key,
            hub_signature_256_secret: None,
        })
    }

    /// Also sends `X-Hub-Signature-256`, keyed with `secret` as is.
    #[must_use]
    pub fn with_hub_signature_256(mut self, secret: impl Into<Vec<u8>>) -> Self {
        self.hub_signature_256_secret = Some(secret.into());
        self
    }
}

/// Never prints the keys.
impl fmt::Debug for SigningConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningConfig")
            .field("secret", &"<redacted>")
            .field(
                "hub_signature_256_secret",
                &self.hub_signature_256_secret.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let config = Settings::new("http://127.0.0.1:1/x");
        assert_eq!(config.timeout, Duration::from_secs(10));
        assert_eq!(config.mode, Mode::Binary);
        assert!(config.headers.is_empty() && config.auth.is_none() && config.signing.is_none());
        assert_eq!(config.tls, TlsConfig::default());
        assert_eq!(config.parallel_requests, DEFAULT_PARALLEL_REQUESTS);
    }

    #[test]
    fn standard_secrets_are_base64_with_an_optional_prefix() {
        let with = SigningConfig::standard("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let without = SigningConfig::standard("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(with, without);
        assert_eq!(with.secret.len(), 24);
        assert_eq!(with.hub_signature_256_secret, None);
        for bad in ["whsec_not base64!", "whsec_", ""] {
            let err = SigningConfig::standard(bad).unwrap_err().to_string();
            assert!(err.starts_with("invalid sink configuration: "), "{err}");
            assert!(!err.contains("not base64!"), "{err}");
        }
    }

    #[test]
    fn debug_never_prints_secrets() {
        let config = Settings {
            headers: vec![("x-api-key".into(), "k3y".into())],
            auth: Some(Auth::Basic {
                user: "herald".into(),
                password: "pa55".into(),
            }),
            tls: TlsConfig {
                ca_pem: Some(b"CA".to_vec()),
                client_identity: Some(ClientIdentity {
                    cert_pem: b"CERT".to_vec(),
                    key_pem: b"PRIVATE".to_vec(),
                }),
            },
            signing: Some(
                SigningConfig::standard("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
                    .unwrap()
                    .with_hub_signature_256(b"hub-s3cret".to_vec()),
            ),
            ..Settings::new("https://h/")
        };
        let text = format!("{config:?}");
        for secret in ["k3y", "pa55", "PRIVATE", "hub-s3cret", "MfKQ"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(
            text.contains("x-api-key") && text.contains("herald"),
            "{text}"
        );
        assert_eq!(
            format!("{:?}", Auth::Bearer("t0ken".into())),
            "Bearer(<redacted>)"
        );
    }

    #[test]
    fn auth_header_values() {
        assert_eq!(Auth::Bearer("abc".into()).header_value(), "Bearer abc");
        let splunk = Auth::Token {
            scheme: "Splunk".into(),
            token: "f00".into(),
        };
        assert_eq!(splunk.header_value(), "Splunk f00");
        assert_eq!(
            format!("{splunk:?}"),
            r#"Token { scheme: "Splunk", token: "<redacted>" }"#
        );
        // RFC 7617's example.
        let basic = Auth::Basic {
            user: "Aladdin".into(),
            password: "open sesame".into(),
        };
        assert_eq!(basic.header_value(), "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
    }
}
