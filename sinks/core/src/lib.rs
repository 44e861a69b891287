//! What herald and every sink share; start at [`CloudEvent`] and [`Sink`], and for the
//! configuration at [`config::SinkConfig`].
// STYLE.md §7: library crates take clippy's pedantic set; each `allow` carries its reason.
#![warn(clippy::pedantic)]

pub mod config;
pub mod dead_letter;
pub mod encode;
pub mod event;
pub mod metrics;
pub mod sink;
pub mod template;

pub use dead_letter::{DeadLetter, ErrorContext};
pub use encode::{DecodeError, Mode};
pub use event::{CloudEvent, ExtensionValue, ValidationError};
pub use metrics::MetricName;
pub use sink::{Envelope, Outcome, Reason, Sink, SinkError};
pub use template::{Template, TemplateError, Vars};
