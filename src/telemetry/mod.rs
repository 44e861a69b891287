//! Telemetry: logging set-up (human or JSON, always to stderr so stdout stays for data). The admin
//! endpoint, with `/metrics`, is [`crate::admin`]; running out of file descriptors is [`fds`].

pub mod fds;

use tracing_subscriber::EnvFilter;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber. `RUST_LOG` overrides the default filter (`info`).
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .with_writer(std::io::stderr);
    // A second init (tests calling into the CLI twice) keeps the first subscriber.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Whether text logs are coloured: only on a terminal (escape codes would litter a file or a log
/// collector), and never when `NO_COLOR` is set to anything but the empty string (no-color.org).
fn colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(std::ffi::OsStr::is_empty)
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(super::colour(true, None));
        assert!(super::colour(true, Some(OsStr::new(""))));
        assert!(!super::colour(true, Some(OsStr::new("1"))));
        assert!(!super::colour(false, None));
    }
}
