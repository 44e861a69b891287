//! Process exit codes of the `herald` binary. Scripts may rely on them; any other failure exits with 1.

/// Success.
pub const OK: i32 = 0;
/// An unexpected failure (a bug, or an error with no better class).
pub const UNEXPECTED: i32 = 1;
/// Bad command-line usage (clap's own code).
pub const USAGE: i32 = 2;
/// The configuration is invalid.
pub const CONFIG_INVALID: i32 = 10;
/// A sink or dependency failed its health check.
pub const HEALTHCHECK_FAILED: i32 = 11;
/// The journal could not be opened or is corrupt.
pub const JOURNAL_ERROR: i32 = 12;
/// The Kubernetes API server could not be reached.
pub const CLUSTER_UNREACHABLE: i32 = 13;
/// A listen address could not be bound (for example the simulator's port is taken).
pub const BIND_FAILED: i32 = 14;
/// Stdout's reader went away before the command finished writing (`herald dlq show … | head`): the
/// command completes quietly and exits 128 + SIGPIPE, as a shell reports a tool killed by SIGPIPE.
pub const BROKEN_PIPE: i32 = 141;
