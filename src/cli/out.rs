//! Writing to stdout and stderr like a Unix tool. Rust ignores SIGPIPE, so `println!` panics once
//! the reader of a pipe is gone (`herald dlq show … | head`). Herald does not restore SIGPIPE's
//! default action, because then a write to a closed socket could kill `herald run`; instead every
//! command writes through [`line`], which notes a closed stdout and drops what follows. The command
//! still finishes what it started (a replay is queued, the journal is closed cleanly), and
//! [`crate::cli::main`] then exits quietly with [`crate::exit_code::BROKEN_PIPE`].

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write to stdout met a broken pipe; later output is dropped.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Whether stdout's reader went away during this run.
pub(crate) fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

/// Writes `text` and a newline to stdout. A broken pipe is remembered (see the module doc); other
/// write errors are dropped too: what the command did does not depend on its report being read.
pub(crate) fn line(text: std::fmt::Arguments<'_>) {
    if stdout_closed() {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(text).and_then(|()| out.write_all(b"\n"))
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
    }
}

/// Writes `text` and a newline to stderr, ignoring failures (a closed stderr has no one to tell).
pub(crate) fn err_line(text: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}
