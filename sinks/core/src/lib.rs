//! What herald and every sink share; start at [`CloudEvent`] and [`Sink`], and for the
//! configuration at [`config::SinkConfig`].
// STYLE.md §7: library crates take clippy's pedantic set; each `allow` carries its reason.
#![warn(clippy::pedantic)]

pub mod config;
pub mod dead_letter;
pub mod encode;
pub mod event;
pub mod jinja;
pub mod journaled;
pub mod metrics;
pub mod sink;
pub mod template;

pub use dead_letter::{DeadLetter, ErrorContext};
pub use encode::{DecodeError, Mode};
pub use event::{CloudEvent, ExtensionValue, ValidationError};
pub use journaled::{Journaled, Layout, Sendable};
pub use metrics::MetricName;
pub use sink::{Envelope, Outcome, Reason, Sink, SinkError};
pub use template::{Template, TemplateError, Vars};

/// An error and its causes on one line, `error: cause: cause`: how herald and the sinks name a
/// failure in a message (an unreadable file then says why, `No such file or directory`).
#[must_use]
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
