//! Why a watcher cannot use the API server, in words an operator understands: what `/readyz` and
//! the logs say. Entry point: [`ApiProblem::of`].
//!
//! Decided from the error's data (its variants, its `io::Error` kinds, hyper's parse flag), never
//! from its text: an API server that cannot be reached (refused, timed out, DNS), one that answers
//! something that is not the Kubernetes API (not HTTP, not JSON), one that answers with an error
//! status, and no file descriptor left to connect with are four different things to fix.

use std::error::Error as StdError;
use std::io;

use crate::telemetry::fds;

/// What went wrong talking to the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiProblem {
    /// No answer: the connection was refused, timed out, reset, or the name did not resolve.
    Unreachable(String),
    /// Something answered, but not as a Kubernetes API server would (not HTTP, not JSON, not the
    /// expected document).
    Garbage(String),
    /// The API server answered with an error status.
    ServerError(String),
    /// No file descriptor was left to open the connection with.
    OutOfFiles(String),
}

impl std::fmt::Display for ApiProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unreachable(cause) => write!(f, "API server unreachable: {cause}"),
            Self::Garbage(cause) => write!(
                f,
                "API server answer unreadable (is this a Kubernetes API server?): {cause}"
            ),
            Self::ServerError(cause) => write!(f, "API server error: {cause}"),
            Self::OutOfFiles(cause) => write!(
                f,
                "cannot connect to the API server: out of file descriptors ({cause})"
            ),
        }
    }
}

impl ApiProblem {
    /// The problem `error` shows.
    pub fn of(error: &kube::Error) -> Self {
        match error {
            kube::Error::Api(status) => Self::ServerError(format!(
                "{} {}: {}",
                status.code, status.reason, status.message
            )),
            kube::Error::SerdeError(_)
            | kube::Error::FromUtf8(_)
            | kube::Error::LinesCodecMaxLineLengthExceeded
            | kube::Error::HttpError(_) => Self::Garbage(chain(error)),
            _ => {
                if let Some(io) = fds::exhaustion_in(error) {
                    return Self::OutOfFiles(io.to_string());
                }
                if causes(error).any(|e| {
                    e.downcast_ref::<hyper::Error>()
                        .is_some_and(hyper::Error::is_parse)
                }) {
                    return Self::Garbage(chain(error));
                }
                match causes(error).find_map(|e| e.downcast_ref::<io::Error>()) {
                    Some(io) => Self::Unreachable(format!("{} ({})", headline(io), chain(error))),
                    None => Self::Unreachable(chain(error)),
                }
            }
        }
    }

    /// Whether the server could not be reached at all (for `herald check --connect`'s exit 13).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Unreachable(_) | Self::OutOfFiles(_))
    }
}

/// A short, lowercase name for the commonest connection failures; the OS text otherwise.
fn headline(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
        io::ErrorKind::TimedOut => "timed out".to_owned(),
        io::ErrorKind::ConnectionReset => "connection reset".to_owned(),
        io::ErrorKind::HostUnreachable => "host unreachable".to_owned(),
        io::ErrorKind::NetworkUnreachable => "network unreachable".to_owned(),
        _ => error.to_string(),
    }
}

/// `error` and its causes.
fn causes<'e>(
    error: &'e (dyn StdError + 'static),
) -> impl Iterator<Item = &'e (dyn StdError + 'static)> {
    std::iter::successors(Some(error), |&e| e.source())
}

/// `error` and its causes, `a: b: c`, leaving out a cause whose text the previous one already
/// shows (kube's and hyper's messages repeat their source's).
pub fn chain(error: &(dyn StdError + 'static)) -> String {
    let mut out = String::new();
    let mut previous = String::new();
    for e in causes(error) {
        let text = e.to_string();
        if !previous.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
        previous = text;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer: {0}")]
    struct Repeats(#[source] io::Error);

    #[test]
    fn a_cause_repeated_by_its_parent_is_shown_once() {
        let e = Repeats(io::Error::from(io::ErrorKind::ConnectionRefused));
        assert_eq!(chain(&e), "outer: connection refused");
    }

    #[test]
    fn an_undecodable_answer_is_garbage_not_unreachable() {
        let serde = serde_json::from_str::<serde_json::Value>("<html>").unwrap_err();
        let p = ApiProblem::of(&kube::Error::SerdeError(serde));
        assert!(matches!(p, ApiProblem::Garbage(_)), "{p}");
        assert!(p.to_string().starts_with("API server answer unreadable"));
        assert!(!p.is_unreachable());
    }

    #[test]
    fn an_error_status_says_what_the_server_said() {
        let status = kube::core::Status::failure("forbidden by policy", "Forbidden").with_code(403);
        let p = ApiProblem::of(&kube::Error::Api(Box::new(status)));
        assert_eq!(
            p.to_string(),
            "API server error: 403 Forbidden: forbidden by policy"
        );
    }

    #[test]
    fn a_refused_connection_is_unreachable_and_named() {
        let e = kube::Error::ReadEvents(io::Error::from(io::ErrorKind::ConnectionRefused));
        let p = ApiProblem::of(&e);
        assert!(p.is_unreachable());
        assert!(
            p.to_string()
                .starts_with("API server unreachable: connection refused"),
            "{p}"
        );
    }
}
