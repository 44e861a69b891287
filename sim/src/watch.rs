//! WATCH: a chunked stream of one-line JSON events served from the change history
//! (WATCH-PROTOCOL.md §A6): synthetic ADDED for a fresh start, resume after a revision, 410 as an
//! in-stream ERROR, selector transitions as ADDED/DELETED, bookmarks and the timeout.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::list::matches;
use super::meta;
use super::ops::present;
use super::resource::{ObjectKey, ResourceDef};
use super::selector::{FieldSelector, LabelSelector};
use super::status::ApiError;
use super::store::{Change, ChangeType, Store};

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// Synthetic ADDED for the current state (at least this revision, waiting up to 3 s for it), then
    /// changes: resourceVersion unset or "0", or a streaming list.
    Initial { at_least: u64 },
    /// After this revision, with no synthetic events.
    After(u64),
}

/// What a watch task shares with the server: its end signals, the stall switch and the open-watch count.
#[derive(Debug, Clone)]
pub(crate) struct WatchCtx {
    pub(crate) cancel: CancellationToken,
    pub(crate) stall: watch::Receiver<bool>,
    pub(crate) open: Arc<AtomicUsize>,
    /// A reader that accepts nothing for this long is dropped, as the real cacher drops a watcher whose
    /// buffer stays full.
    pub(crate) slow_reader_timeout: Duration,
}

/// A parsed watch request.
#[derive(Debug, Clone)]
pub(crate) struct WatchRequest {
    pub(crate) def: ResourceDef,
    pub(crate) version: String,
    pub(crate) namespace: Option<String>,
    pub(crate) labels: LabelSelector,
    pub(crate) fields: FieldSelector,
    pub(crate) start: Start,
    pub(crate) bookmarks: bool,
    pub(crate) timeout: Duration,
    pub(crate) bookmark_interval: Duration,
    /// Send the `k8s.io/initial-events-end` bookmark after the initial events (streaming lists, and the
    /// WatchList defaulting of a watch from ""/"0"); only sent with `bookmarks`.
    pub(crate) initial_events_end: bool,
}

/// How many changes one poll of the history takes before writing them out (bounds time under the lock).
const BATCH: usize = 512;
/// Lines buffered between the producer task and the connection: a reader that stops reading holds back
/// only its own producer, which is dropped once the history it needs is compacted.
const CHANNEL_DEPTH: usize = 256;

type Tx = mpsc::Sender<Result<Bytes, Infallible>>;

/// Starts the producer task of a watch and returns the response body it feeds.
pub(crate) fn serve(store: Arc<Store>, req: WatchRequest, ctx: WatchCtx) -> Body {
    let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
    ctx.open.fetch_add(1, Ordering::SeqCst);
    let out = Out { tx, ctx };
    tokio::spawn(run(store, req, out));
    Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    // Serializing a `Value` into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut out, object);
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

impl WatchRequest {
    fn in_scope(&self, key: &ObjectKey) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| key.namespace == ns)
    }

    fn matches(&self, obj: &Value) -> bool {
        matches(&self.def, obj, &self.labels, &self.fields)
    }

    fn render(&self, obj: &Value) -> Value {
        let wanted = self.def.api_version(&self.version);
        if obj.get("apiVersion").and_then(Value::as_str) == Some(wanted.as_str())
            && obj.get("kind").and_then(Value::as_str) == Some(self.def.kind.as_str())
        {
            obj.clone()
        } else {
            present(&self.def, &self.version, obj)
        }
    }

    /// The event a change becomes for this watcher, if any: selector transitions become ADDED/DELETED.
    fn event(&self, c: &Change) -> Option<Bytes> {
        if c.gr != self.def.gr || !self.in_scope(&c.key) {
            return None;
        }
        match c.kind {
            ChangeType::Added => self
                .matches(&c.object)
                .then(|| line("ADDED", &self.render(&c.object))),
            ChangeType::Deleted => {
                let last = c.prev.as_deref().unwrap_or(&c.object);
                self.matches(last)
                    .then(|| line("DELETED", &self.render(&c.object)))
            }
            ChangeType::Modified => {
                let was = c.prev.as_deref().is_some_and(|p| self.matches(p));
                let is = self.matches(&c.object);
                match (was, is) {
                    (true, true) => Some(line("MODIFIED", &self.render(&c.object))),
                    (false, true) => Some(line("ADDED", &self.render(&c.object))),
                    (true, false) => {
                        // The object left the selection: DELETED with its previous content at the new revision.
                        let mut prev = c.prev.as_deref().cloned().unwrap_or(Value::Null);
                        meta::meta_mut(&mut prev)
                            .insert("resourceVersion".into(), Value::String(c.rv.to_string()));
                        Some(line("DELETED", &self.render(&prev)))
                    }
                    (false, false) => None,
                }
            }
        }
    }

    fn bookmark(&self, rv: u64) -> Bytes {
        line(
            "BOOKMARK",
            &json!({
                "apiVersion": self.def.api_version(&self.version),
                "kind": self.def.kind,
                "metadata": {"resourceVersion": rv.to_string()},
            }),
        )
    }

    /// The bookmark that ends a streaming list's initial events.
    fn initial_events_end(&self, rv: u64) -> Bytes {
        line(
            "BOOKMARK",
            &json!({
                "apiVersion": self.def.api_version(&self.version),
                "kind": self.def.kind,
                "metadata": {"resourceVersion": rv.to_string(),
                             "annotations": {"k8s.io/initial-events-end": "true"}},
            }),
        )
    }
}

/// Now plus `d`, saturating: absurd timeouts from a query string must not overflow.
fn later(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(10 * 365 * 24 * 3600))
}

/// The sending half of a watch: honours stalls, drops slow readers, ends on cancellation.
struct Out {
    tx: Tx,
    ctx: WatchCtx,
}

impl Drop for Out {
    fn drop(&mut self) {
        self.ctx.open.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Out {
    /// Sends one line; `false` when the watch must end (reader gone or too slow, watch cancelled).
    async fn send(&mut self, line: Bytes) -> bool {
        while *self.ctx.stall.borrow() {
            // Stalled: the connection stays open and nothing is sent, not even bookmarks.
            tokio::select! {
                r = self.ctx.stall.changed() => if r.is_err() { break },
                () = self.ctx.cancel.cancelled() => return false,
                () = self.tx.closed() => return false,
            }
        }
        tokio::select! {
            sent = tokio::time::timeout(self.ctx.slow_reader_timeout, self.tx.send(Ok(line))) => {
                matches!(sent, Ok(Ok(())))
            }
            () = self.ctx.cancel.cancelled() => false,
        }
    }
}

async fn run(store: Arc<Store>, req: WatchRequest, mut out: Out) {
    let mut revisions = store.subscribe();
    if let Start::Initial { at_least } = req.start
        && at_least > store.read().rv
    {
        // A streaming list from a future revision: wait a little, as the watch cache does.
        let _ = tokio::time::timeout(
            Duration::from_secs(3),
            revisions.wait_for(|rv| *rv >= at_least),
        )
        .await;
    }
    let begin = {
        let state = store.read();
        match req.start {
            Start::Initial { at_least } if at_least > state.rv => {
                Err(ApiError::too_large_resource_version(at_least, state.rv))
            }
            Start::Initial { .. } => {
                let objs: Vec<Arc<Value>> = state
                    .objects
                    .get(&req.def.gr)
                    .map(|m| {
                        m.iter()
                            .filter(|(k, o)| req.in_scope(k) && req.matches(o))
                            .map(|(_, o)| o.clone())
                            .collect()
                    })
                    .unwrap_or_default();
                Ok((objs, state.rv))
            }
            Start::After(n) if n < state.compacted => {
                Err(ApiError::watch_expired(n, state.compacted))
            }
            Start::After(n) => Ok((Vec::new(), n)),
        }
    };
    let (initial, mut pos) = match begin {
        Ok(b) => b,
        Err(error) => {
            // Once the resourceVersion parsed, errors are in-stream: 200, one ERROR event, end.
            out.send(line("ERROR", &error.to_status())).await;
            return;
        }
    };
    let fresh = matches!(req.start, Start::Initial { .. });
    for obj in initial {
        if !out.send(line("ADDED", &req.render(&obj))).await {
            return;
        }
    }
    if fresh
        && req.initial_events_end
        && req.bookmarks
        && !out.send(req.initial_events_end(pos)).await
    {
        return;
    }
    let deadline = later(req.timeout);
    let mut next_bookmark = later(req.bookmark_interval);
    loop {
        // Drain everything committed so far.
        loop {
            let batch = {
                let state = store.read();
                let caught_up = || state.changes_after(pos, 1).is_some_and(|c| c.is_empty());
                if !state.resources.contains_key(&req.def.gr) && caught_up() {
                    // The CRD is gone and its DELETED events are out: the real server ends such watches.
                    return;
                }
                if state
                    .resources
                    .get(&req.def.gr)
                    .is_some_and(|d| versions_changed(&req.def, d))
                    && caught_up()
                {
                    // The CRD's versions changed (served or storage): the real server rebuilds the
                    // resource's storage and ends the watches of the old one; clients re-watch from
                    // their last revision (a version no longer served answers 404).
                    return;
                }
                state.changes_after(pos, BATCH)
            };
            let Some(batch) = batch else {
                // The history this watcher still needed is gone: drop it, as the server drops a watcher
                // whose buffer filled. The client re-watches and learns about the gap from a 410.
                return;
            };
            if batch.is_empty() {
                break;
            }
            for c in &batch {
                pos = c.rv;
                if let Some(ev) = req.event(c)
                    && !out.send(ev).await
                {
                    return;
                }
            }
        }
        tokio::select! {
            changed = revisions.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = tokio::time::sleep_until(deadline) => {
                if req.bookmarks {
                    out.send(req.bookmark(pos)).await;
                }
                return;
            }
            () = tokio::time::sleep_until(next_bookmark), if req.bookmarks => {
                next_bookmark = later(req.bookmark_interval);
                if !out.send(req.bookmark(pos)).await {
                    return;
                }
            }
            () = out.ctx.cancel.cancelled() => return,
            () = out.tx.closed() => return,
        }
    }
}

/// Whether a CRD update changed which versions are served or stored since `was`.
fn versions_changed(was: &ResourceDef, now: &ResourceDef) -> bool {
    let flags = |d: &ResourceDef| -> Vec<(String, bool, bool)> {
        d.versions
            .iter()
            .map(|v| (v.name.clone(), v.served, v.storage))
            .collect()
    };
    flags(was) != flags(now)
}
