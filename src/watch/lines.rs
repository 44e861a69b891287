//! A watch response read line by line, as kube's `Client::request_events` reads it, with each line
//! offered to the [`scan`](super::scan)ner before serde: kube framed lines with a `LinesCodec`,
//! which copies every line into a `String` of its own, and handed it to serde, whose visitor
//! re-wrote every token of the object.
//!
//! Kept from kube (kube-client 5.0, `request_events`): `Accept-Encoding: identity`; API errors
//! answered instead of a stream (`request_stream` reads them); lines split at `\n`, one trailing
//! `\r` dropped, no length limit, a line that is not UTF-8 an error that ends the stream; a
//! body that ends early (an unexpected EOF anywhere in the error's chain, or hyper's "unexpected
//! EOF during chunk") ends the stream quietly, any other read error is an error that ends it; a
//! last line without its `\n` decoded at the end; a line serde finds incomplete (`is_eof`, such
//! as an empty line) skipped; a line that is not a watch event but a `Status` an API error.

use std::io;
use std::pin::Pin;

use futures::{AsyncBufRead, AsyncBufReadExt};
use kube::api::WatchEvent;
use kube::core::Status;

use super::WatchedObject;

/// A watch response's body.
pub(super) type Body = Pin<Box<dyn AsyncBufRead + Send>>;

/// Sends `request` (a watch) and returns its body, or the API's error.
pub(super) async fn open(
    client: &kube::Client,
    mut request: axum::http::Request<Vec<u8>>,
) -> kube::Result<Body> {
    // As kube: watch streams are not compressed (kube's decompression reads only the first
    // gzip member of a stream that has one per event).
    request
        .headers_mut()
        .entry(axum::http::header::ACCEPT_ENCODING)
        .or_insert(axum::http::HeaderValue::from_static("identity"));
    Ok(Box::pin(client.request_stream(request).await?))
}

/// What the body gave next.
pub(super) enum Next<K> {
    /// A decoded line; `scanned` when the scanner read it (serde did not).
    Event {
        event: kube::Result<WatchEvent<K>>,
        scanned: bool,
    },
    /// The body ended (or ended early, as kube lets it end).
    End,
}

/// Splits a body into lines and decodes each.
pub(super) struct Lines {
    body: Body,
    /// A line begun in an earlier chunk.
    partial: Vec<u8>,
    /// Decoded lines still in the current chunk start here.
    start: usize,
    done: bool,
}

impl Lines {
    pub(super) fn new(body: Body) -> Self {
        Self {
            body,
            partial: Vec::new(),
            start: 0,
            done: false,
        }
    }

    /// The next event, skipping lines kube skips.
    pub(super) async fn next<K: WatchedObject + serde::de::DeserializeOwned>(&mut self) -> Next<K> {
        loop {
            if self.done {
                return Next::End;
            }
            let chunk = match self.body.fill_buf().await {
                Ok(chunk) => chunk,
                Err(error) => {
                    self.done = true;
                    if ended_early(&error) {
                        tracing::warn!("eof in poll: {error:?}");
                        return Next::End;
                    }
                    return Next::Event {
                        event: Err(kube::Error::ReadEvents(error)),
                        scanned: false,
                    };
                }
            };
            if chunk.is_empty() {
                // The end of the body: a last line without its newline is still a line.
                self.done = true;
                if self.partial.is_empty() {
                    return Next::End;
                }
                let line = std::mem::take(&mut self.partial);
                match decode::<K>(&line) {
                    Some((event, scanned)) => return Next::Event { event, scanned },
                    None => return Next::End,
                }
            }
            let rest = chunk.get(self.start..).unwrap_or_default();
            let Some(nl) = memchr::memchr(b'\n', rest) else {
                self.partial.extend_from_slice(rest);
                let n = chunk.len();
                self.body.as_mut().consume(n);
                self.start = 0;
                continue;
            };
            let decoded = if self.partial.is_empty() {
                decode::<K>(&rest[..nl])
            } else {
                self.partial.extend_from_slice(&rest[..nl]);
                let decoded = decode::<K>(&self.partial);
                self.partial.clear();
                decoded
            };
            self.start += nl + 1;
            if self.start == chunk.len() {
                self.body.as_mut().consume(self.start);
                self.start = 0;
            }
            if let Some((event, scanned)) = decoded {
                // kube's line reader ends after a line that is not UTF-8 (its codec failed).
                self.done |= matches!(event, Err(kube::Error::ReadEvents(_)));
                return Next::Event { event, scanned };
            }
        }
    }
}

/// Whether a read error is the body ending early, which kube ends the stream on quietly.
fn ended_early(error: &io::Error) -> bool {
    if error.to_string().contains("unexpected EOF during chunk") {
        return true;
    }
    // `request_stream` wraps the body's error: kube looked from that error down its chain.
    let mut current: Option<&(dyn std::error::Error + 'static)> = match error.get_ref() {
        Some(inner) => Some(inner),
        None => Some(error),
    };
    for _ in 0..16 {
        let Some(e) = current else {
            return false;
        };
        if e.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::UnexpectedEof)
        {
            return true;
        }
        current = e.source();
    }
    false
}

/// One line as kube decodes it (the scanner first); `None` for a line kube skips. The flag: the
/// scanner read it.
pub(super) fn decode<K: WatchedObject + serde::de::DeserializeOwned>(
    line: &[u8],
) -> Option<(kube::Result<WatchEvent<K>>, bool)> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Ok(text) = std::str::from_utf8(line) else {
        return Some((
            Err(kube::Error::ReadEvents(io::Error::new(
                io::ErrorKind::InvalidData,
                "stream did not contain valid UTF-8",
            ))),
            false,
        ));
    };
    if let Some(event) = K::scan(text) {
        return Some((Ok(event), true));
    }
    match serde_json::from_str::<WatchEvent<K>>(text) {
        Ok(event) => Some((Ok(event), false)),
        Err(e) if e.is_eof() => None,
        Err(e) => Some((
            Err(match serde_json::from_str::<Status>(text) {
                Ok(status) => kube::Error::Api(status.boxed()),
                Err(_) => kube::Error::SerdeError(e),
            }),
            false,
        )),
    }
}
