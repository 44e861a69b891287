//! The admin endpoint's listener: accepts that survive running out of file descriptors. Entry
//! point: [`Headroom`].
//!
//! axum's own accept loop sleeps a second after an `EMFILE` and tries again; under a herald whose
//! watchers retry connections all the time, a freed descriptor is taken by a watcher first, so
//! `/healthz` and `/readyz` never answered again. This listener holds a few descriptors in reserve
//! (`/dev/null` opened read-only): on `EMFILE` it closes one and accepts into the hole at once, and
//! each connection, when it closes, takes its descriptor back into the reserve before anyone else
//! can. Other accept errors never end the server either.

use std::fs::File;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::telemetry::fds;

/// Descriptors held for the admin endpoint: enough for a few probes and a scrape at once.
const RESERVE: usize = 4;

/// Wait after an accept error that a reserve descriptor could not cure.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// The descriptors in reserve.
#[derive(Clone, Default)]
struct Reserve(Arc<Mutex<Vec<File>>>);

impl Reserve {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<File>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Opens descriptors until the reserve is full or none is left.
    fn refill(&self) {
        let mut held = self.lock();
        while held.len() < RESERVE {
            match File::open("/dev/null") {
                Ok(f) => held.push(f),
                Err(_) => break,
            }
        }
    }

    /// Closes one reserved descriptor; false when none is left.
    fn release_one(&self) -> bool {
        self.lock().pop().is_some()
    }
}

/// A [`TcpListener`] for [`axum::serve`] that keeps accepting when descriptors run out.
pub struct Headroom {
    inner: TcpListener,
    reserve: Reserve,
}

impl Headroom {
    /// Wraps `inner`, filling the reserve now (while descriptors are still to be had).
    pub fn new(inner: TcpListener) -> Self {
        let reserve = Reserve::default();
        reserve.refill();
        Self { inner, reserve }
    }
}

impl axum::serve::Listener for Headroom {
    type Io = Reserved;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    return (
                        Reserved {
                            stream: Some(stream),
                            reserve: self.reserve.clone(),
                        },
                        addr,
                    );
                }
                Err(error) if fds::is_exhaustion(&error) => {
                    fds::note("accepting an admin connection", &error);
                    // The hole a released descriptor leaves is the lowest free number, which the
                    // very next accept takes: retry at once.
                    if !self.reserve.release_one() {
                        tokio::time::sleep(ACCEPT_RETRY).await;
                    }
                }
                Err(error) if is_connection_error(&error) => {}
                Err(error) => {
                    tracing::warn!(message = "Admin endpoint accept failed; retrying.", %error);
                    tokio::time::sleep(ACCEPT_RETRY).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A connection closed by the peer before it was accepted: nothing to report.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// An accepted admin connection; closing it refills the reserve, so the descriptor it frees goes
/// back to the admin endpoint rather than to whatever asks next.
pub struct Reserved {
    /// Always `Some` until dropped.
    stream: Option<TcpStream>,
    reserve: Reserve,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        drop(self.stream.take());
        self.reserve.refill();
    }
}

impl Reserved {
    fn stream(&mut self) -> io::Result<Pin<&mut TcpStream>> {
        self.stream
            .as_mut()
            .map(Pin::new)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))
    }
}

impl AsyncRead for Reserved {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut().stream() {
            Ok(s) => s.poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl AsyncWrite for Reserved {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut().stream() {
            Ok(s) => s.poll_write(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().stream() {
            Ok(s) => s.poll_flush(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().stream() {
            Ok(s) => s.poll_shutdown(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut().stream() {
            Ok(s) => s.poll_write_vectored(cx, bufs),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.as_ref().is_some_and(|s| s.is_write_vectored())
    }
}
