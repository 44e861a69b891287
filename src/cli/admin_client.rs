//! The CLI's side of the admin endpoint: one-shot HTTP/1.0 requests to a running herald on loopback
//! (no client library needed for one request), so `status`, `dlq` and `replay` work while herald
//! holds its journal.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::CliError;
use crate::config::Config;

/// A running herald's admin endpoint.
pub(super) struct Admin {
    addr: SocketAddr,
    token: Option<String>,
    /// Why the configured token could not be read, for the message when a call needs it.
    token_error: Option<String>,
}

impl Admin {
    /// The endpoint of `cfg` if a herald answers there, with the token resolved when one is
    /// configured (the mutating and DLQ calls need it).
    pub(super) async fn running(cfg: &Config) -> Result<Option<Self>, CliError> {
        let mut admin = Self {
            addr: cfg.admin.listen,
            token: None,
            token_error: None,
        };
        if admin.request("GET", "/healthz").await.is_err() {
            return Ok(None);
        }
        match cfg
            .admin
            .token
            .as_ref()
            .map(crate::config::SecretRef::resolve)
        {
            None => {}
            Some(Ok(token)) => admin.token = Some(token),
            Some(Err(e)) => admin.token_error = Some(format!("admin.token: {e}")),
        }
        Ok(Some(admin))
    }

    /// Where the endpoint listens.
    pub(super) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sends `method path` and returns the status code and body.
    pub(super) async fn request(&self, method: &str, path: &str) -> std::io::Result<(u16, String)> {
        let timed_out = |what: &str| {
            std::io::Error::new(std::io::ErrorKind::TimedOut, format!("{what} timed out"))
        };
        let mut s = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::net::TcpStream::connect(self.addr),
        )
        .await
        .map_err(|_| timed_out("connect"))??;
        let auth = self
            .token
            .as_deref()
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        s.write_all(
            format!(
                "{method} {path} HTTP/1.0\r\nHost: {}\r\n{auth}Content-Length: 0\r\n\r\n",
                self.addr
            )
            .as_bytes(),
        )
        .await?;
        let mut buf = String::new();
        tokio::time::timeout(Duration::from_secs(30), s.read_to_string(&mut buf))
            .await
            .map_err(|_| timed_out("reading the answer"))??;
        let (head, body) = buf.split_once("\r\n\r\n").unwrap_or((buf.as_str(), ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse::<u16>().ok())
            .unwrap_or(0);
        Ok((status, body.to_owned()))
    }

    /// `request`, expecting 200 and a JSON body; other answers become errors that say what the
    /// endpoint said.
    pub(super) async fn json(
        &self,
        method: &str,
        path: &str,
    ) -> Result<serde_json::Value, CliError> {
        self.json_found(method, path).await?.ok_or_else(|| {
            CliError::AdminFailed(format!("{method} {path} on {}: HTTP 404", self.addr))
        })
    }

    /// [`Admin::json`], with a 404 (a DLQ or replay call naming a sink the running herald does not
    /// have) as `None`, for the caller to say which sinks there are.
    pub(super) async fn json_found(
        &self,
        method: &str,
        path: &str,
    ) -> Result<Option<serde_json::Value>, CliError> {
        let (status, body) = self
            .request(method, path)
            .await
            .map_err(|e| CliError::AdminFailed(format!("{method} {path} on {}: {e}", self.addr)))?;
        if status == 404 {
            return Ok(None);
        }
        if status != 200 {
            let hint = match (&self.token, &self.token_error) {
                (_, Some(error)) if status == 401 => format!(" ({error})"),
                (None, None) if status == 401 => {
                    " (admin.token is not set in this configuration)".to_owned()
                }
                _ => String::new(),
            };
            return Err(CliError::AdminFailed(format!(
                "{method} {path} on {}: HTTP {status}: {}{hint}",
                self.addr,
                body.trim()
            )));
        }
        serde_json::from_str(&body).map(Some).map_err(|e| {
            CliError::AdminFailed(format!("{method} {path} on {}: not JSON: {e}", self.addr))
        })
    }
}
