//! The command line: one module per subcommand, clap derive, errors mapped to [`crate::exit_code`].

/// `println!` for commands: see [`out::line`] (a closed stdout does not panic).
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::out::line(format_args!($($arg)*))
    };
}

/// `eprintln!` that ignores a closed stderr: see [`out::err_line`].
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::cli::out::err_line(format_args!($($arg)*))
    };
}

mod admin_client;
mod check;
mod demo;
mod dlq;
mod journal;
mod out;
mod rbac;
mod reload;
mod render;
mod run;
mod sim;
mod status;
mod table;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::exit_code;
use crate::telemetry::{self, LogFormat};

/// herald: Kubernetes custom-resource changes as CloudEvents, delivered to Kafka, NATS and webhooks.
#[derive(Debug, Parser)]
#[command(name = "herald", version, about, propagate_version = true)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "HERALD_LOG_FORMAT"
    )]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The whole pipeline on this machine, no cluster needed: changes to a sample CRD become
    /// CloudEvents in a file and at a local webhook, shown as they arrive. Ends by itself.
    Demo(demo::DemoArgs),
    /// Validate a configuration (offline; with --connect also against the cluster and the sinks).
    Check(check::CheckArgs),
    /// Watch the configured resources and deliver their changes as CloudEvents until SIGTERM/SIGINT.
    Run(run::RunArgs),
    /// Dead-letter queues: list, show, replay, purge (on the journal of a stopped herald).
    Dlq(dlq::DlqArgs),
    /// Queue journaled events for redelivery to a sink (from a sequence number or a time).
    Replay(dlq::ReplayArgs),
    /// The journal of a stopped herald: verify it, or salvage a damaged one.
    Journal(journal::JournalArgs),
    /// Make a running herald load its configuration file again (as SIGHUP does; needs admin.token).
    Reload(reload::ReloadArgs),
    /// Print the request a webhook sink would send for an object's change (templates, headers
    /// with secrets masked, body), without a cluster.
    Render(render::RenderArgs),
    /// Show where herald stands (from its admin endpoint, or its journal when it is stopped).
    Status(status::StatusArgs),
    /// Run the Kubernetes API simulator until interrupted (SIGINT or SIGTERM).
    Sim(sim::SimArgs),
    /// Print the Role/ClusterRole and binding a configuration needs (YAML; offline, or --connect).
    Rbac(rbac::RbacArgs),
}

/// A failure of a subcommand, carrying the exit code it maps to.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The simulator could not start.
    #[error("cannot start the simulator")]
    SimStartFailed(#[source] herald_sim::SimError),
    /// The configuration is invalid.
    #[error("invalid configuration")]
    ConfigInvalid(#[source] crate::config::ConfigError),
    /// Bad usage clap cannot see (a missing combination of flags).
    #[error("{0}")]
    Usage(String),
    /// `herald check --connect` found problems.
    #[error("{}", .0.join("\n"))]
    CheckFailed(Vec<String>),
    /// The bridge could not start.
    #[error("cannot start")]
    StartFailed(#[source] crate::app::StartError),
    /// The journal could not be closed cleanly.
    #[error("journal error")]
    JournalFailed(#[source] crate::journal::JournalError),
    /// A `--load` file could not be applied.
    #[error("cannot load the simulator's start-up objects")]
    SimLoadFailed(#[source] herald_sim::LoadError),
    /// The async runtime could not start.
    #[error("cannot start the async runtime")]
    RuntimeFailed(#[source] std::io::Error),
    /// A running herald's admin endpoint refused or failed a request.
    #[error("{0}")]
    AdminFailed(String),
    /// A running herald refused to reload its configuration (it keeps the one in force).
    #[error("the running herald refused the reload: {0}")]
    ReloadRefused(String),
    /// `herald render`: the sink cannot be built (a secret is missing) or its template fails
    /// for this object.
    #[error("cannot render the request: {0}")]
    Render(String),
    /// A `--sink` that names no sink (not in the configuration, and no dead letters kept for it).
    #[error("no sink named {sink:?} (the configured sinks: {})", if .known.is_empty() { "none".to_owned() } else { .known.join(", ") })]
    UnknownSink {
        /// The name given.
        sink: String,
        /// The configured sinks.
        known: Vec<String>,
    },
    /// A `--seq` that names no dead letter of the sink.
    #[error("sink {sink:?} has no dead letter with sequence number {}", .seqs.iter().map(u64::to_string).collect::<Vec<_>>().join(", "))]
    NoSuchDeadLetter {
        /// The sink.
        sink: String,
        /// The sequence numbers not in its queue.
        seqs: Vec<u64>,
    },
    /// `herald journal verify` found the journal damaged.
    #[error("{0}")]
    JournalDamaged(String),
    /// `herald rbac --namespace-scoped` cannot grant what the configuration needs.
    #[error("namespaced Roles (--namespace-scoped) cannot grant what this configuration needs")]
    RbacRefused(#[source] crate::rbac::RbacError),
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::SimStartFailed(herald_sim::SimError::BindFailed { .. }) => {
                exit_code::BIND_FAILED
            }
            CliError::SimLoadFailed(_)
            | CliError::ConfigInvalid(_)
            | CliError::RbacRefused(_)
            | CliError::ReloadRefused(_)
            | CliError::Render(_) => exit_code::CONFIG_INVALID,
            CliError::StartFailed(e) => match e {
                crate::app::StartError::ClusterUnreachable(_) => exit_code::CLUSTER_UNREACHABLE,
                crate::app::StartError::JournalFailed(_)
                | crate::app::StartError::EmbeddedInUse { .. }
                // The embedded cluster's state lives in the journal directory.
                | crate::app::StartError::EmbeddedFailed(herald_sim::SimError::DataDirFailed {
                    ..
                }) => exit_code::JOURNAL_ERROR,
                crate::app::StartError::SinkFailed { .. } => exit_code::HEALTHCHECK_FAILED,
                crate::app::StartError::AdminBindFailed { .. } => exit_code::BIND_FAILED,
                crate::app::StartError::AdminTokenFailed(_) => exit_code::CONFIG_INVALID,
                crate::app::StartError::EmbeddedLoadFailed(_)
                | crate::app::StartError::Invalid(_) => exit_code::CONFIG_INVALID,
                crate::app::StartError::EmbeddedFailed(_) => exit_code::UNEXPECTED,
            },
            CliError::JournalFailed(_) | CliError::JournalDamaged(_) => exit_code::JOURNAL_ERROR,
            CliError::CheckFailed(_) => exit_code::HEALTHCHECK_FAILED,
            // The command line names something that is not there: like `ls nosuch`, a usage error.
            CliError::Usage(_)
            | CliError::UnknownSink { .. }
            | CliError::NoSuchDeadLetter { .. } => exit_code::USAGE,
            CliError::SimStartFailed(_) | CliError::RuntimeFailed(_) | CliError::AdminFailed(_) => {
                exit_code::UNEXPECTED
            }
        }
    }
}

/// Parses the command line, runs the command, prints any error chain once and returns the exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init(cli.log_format);
    telemetry::fds::raise_limit();
    install_crypto_provider();
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // A blocking thread (a relist's chunk appends, file I/O) that is done goes within a
        // second instead of tokio's ten: what its allocator heap still holds of a finished
        // initial sync goes with it, not 10 s later (idle RSS at 100,000 objects).
        .thread_keep_alive(std::time::Duration::from_secs(1))
        .build()
        .map_err(CliError::RuntimeFailed)
        .and_then(|rt| rt.block_on(run(cli.command)));
    match result {
        // The reader of stdout went away (`herald dlq show … | head`): quietly, like a Unix tool.
        Ok(()) if out::stdout_closed() => ExitCode::from(exit_code::BROKEN_PIPE as u8),
        Ok(()) => ExitCode::from(exit_code::OK as u8),
        Err(error) => {
            errln!("error: {}", chain(&error));
            ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(1))
        }
    }
}

/// Installs herald's one rustls crypto provider, ring (DECISIONS.md), as the process default, once,
/// before anything builds a TLS client. No library crate installs one: the webhook sink's reqwest
/// refuses to pick one itself, and kube and async-nats take the process default. Public for
/// benchmarks and tests that run herald in-process: they call it as the binary does.
pub fn install_crypto_provider() {
    // Err means one is installed already, which is the state we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

async fn run(command: Command) -> Result<(), CliError> {
    match command {
        Command::Check(args) => check::run(args).await,
        Command::Demo(args) => demo::run(args).await,
        Command::Run(args) => run::run(args).await,
        Command::Sim(args) => sim::run(args).await,
        Command::Status(args) => status::run(args).await,
        Command::Reload(args) => reload::run(args).await,
        Command::Render(args) => render::run(args).await,
        Command::Dlq(args) => dlq::dlq(args).await,
        Command::Replay(args) => dlq::replay(args).await,
        Command::Journal(args) => journal::run(args).await,
        Command::Rbac(args) => rbac::run(args).await,
    }
}

/// An error and its sources, `error: a\n  caused by: b`, each cause once.
fn chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        out.push_str("\n  caused by: ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
