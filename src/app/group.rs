//! Group patterns (`group` with `kinds`): one watcher per custom resource of the group that matches,
//! started and stopped as the group's CustomResourceDefinitions come and go. Entry point: [`run`].
//!
//! The CRDs are followed with a list and watch of `apiextensions.k8s.io/v1`
//! `customresourcedefinitions` (kube's `watcher`, which relists by itself: only the current set
//! matters, never a missed change). Each matched kind gets the watcher it would get if it were
//! configured alone (same label, journal stream and checkpoint), so restarts resume per kind and a
//! switch between `kind: X` and `kinds: ["*"]` resumes too. A CRD being deleted retires its watcher:
//! the watcher reads the deletions of its objects that the watch shows, and ends once the resource
//! is no longer served.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::supervisor::{Registry, guarded};
use crate::journal::Journal;
use crate::watch::pattern::{MatchedKind, matched_kinds};
use crate::watch::{self, WatchSpec, problem};

/// How long a stopping pattern waits for all its watchers together (the supervisor gives the
/// pattern 5 s).
const STOP_BUDGET: Duration = Duration::from_secs(4);

/// How often finished (retired) watchers are collected.
const COLLECT_EVERY: Duration = Duration::from_millis(250);

/// What a group pattern's watchers share with the supervisor.
pub(super) struct Context {
    /// The cluster client.
    pub client: kube::Client,
    /// The journal every watcher appends to.
    pub journal: Journal,
    /// Timings of the watch loops.
    pub tuning: watch::Tuning,
    /// `/healthz`: turns false when a loop dies on its own.
    pub alive: Arc<std::sync::atomic::AtomicBool>,
    /// Where the matched kinds' watchers are listed for `/status` and metrics.
    pub registry: Arc<Registry>,
}

/// One matched kind's watcher.
struct Child {
    stop: CancellationToken,
    /// Set while its CRD is being deleted (cleared if the CRD comes back first).
    retire: Arc<AtomicBool>,
    handle: JoinHandle<()>,
    /// Its kind's journal stream: what its index still holds when it retires is reported deleted.
    stream: String,
}

/// Runs a group pattern until `stop` fires: follows the CRDs of `spec.group`, keeping one watcher per
/// matching kind. `health` is the pattern's own entry: served once CRDs can be listed, synced while
/// their watch runs.
pub(super) async fn run(
    ctx: Context,
    spec: WatchSpec,
    stop: CancellationToken,
    health: Arc<watch::Health>,
) {
    let api: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
    let mut crds = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    // The CRDs of the last complete view, by name; a relist builds the next one aside.
    let mut known: BTreeMap<String, CustomResourceDefinition> = BTreeMap::new();
    let mut listing: Option<BTreeMap<String, CustomResourceDefinition>> = None;
    let mut children: BTreeMap<String, Child> = BTreeMap::new();
    let mut collect = tokio::time::interval(COLLECT_EVERY);
    // After the first complete view, a new CRD is new: its objects are all reported, whatever
    // `initialState` says (that is for what existed when herald first started). The first view
    // ever is remembered in the journal, so a CRD installed while herald was down is new too (a
    // kind that has a checkpoint resumes from it whatever `late` says).
    let marker = first_view_stream(&spec);
    let mut late = match ctx.journal.checkpoint(&marker) {
        Ok(m) => m.is_some(),
        Err(error) => {
            tracing::warn!(message = "Reading the pattern's first-view mark failed; taking it for a first start.", error = %problem::chain(&error), pattern = %spec.label());
            false
        }
    };
    let mut first_view = true;
    loop {
        let event = tokio::select! {
            () = stop.cancelled() => break,
            _ = collect.tick() => {
                if collect_finished(&ctx, &mut children, &spec) {
                    // A CRD installed again while its old watcher was ending gets a new one.
                    reconcile(&ctx, &spec, &stop, &known, &mut children, late);
                }
                continue;
            }
            event = crds.next() => event,
        };
        let Some(event) = event else { break };
        let changed = match event {
            Ok(watcher::Event::Init) => {
                listing = Some(BTreeMap::new());
                false
            }
            Ok(watcher::Event::InitApply(crd)) => {
                if let Some(l) = listing.as_mut()
                    && let Some(crd) = slim(&spec, crd)
                {
                    l.insert(crd_name(&crd), crd);
                }
                false
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(l) = listing.take() {
                    known = l;
                }
                health.clear_problem();
                health.resolved.store(true, Ordering::SeqCst);
                health.synced.store(true, Ordering::SeqCst);
                true
            }
            Ok(watcher::Event::Apply(crd)) => {
                let name = crd_name(&crd);
                match slim(&spec, crd) {
                    Some(crd) => known.insert(name, crd),
                    // Its group changed (not allowed by the API server, but cheap to follow).
                    None => known.remove(&name),
                };
                health.clear_problem();
                health.synced.store(true, Ordering::SeqCst);
                true
            }
            Ok(watcher::Event::Delete(crd)) => {
                known.remove(&crd_name(&crd));
                health.clear_problem();
                health.synced.store(true, Ordering::SeqCst);
                true
            }
            Err(error) => {
                // Only a failed list leaves the view of the CRDs incomplete: after a failed watch,
                // kube's watcher watches again from where it was, without a relist (no InitDone
                // would ever restore `synced`).
                if matches!(error, watcher::Error::InitialListFailed(_)) {
                    health.synced.store(false, Ordering::SeqCst);
                }
                let message = error.to_string();
                if let watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e) =
                    &error
                {
                    let _ = health.note_problem(e);
                }
                tracing::warn!(message = "Following CustomResourceDefinitions failed; retrying.", resource = %spec.label(), error = %message);
                false
            }
        };
        if changed {
            if first_view {
                report_orphans(&ctx, &spec, &known);
            }
            reconcile(&ctx, &spec, &stop, &known, &mut children, late);
            if !late {
                mark_first_view(&ctx, &spec, &marker);
            }
            first_view = false;
            late = true;
        }
    }
    // Stopping: the children's tokens are children of `stop`, so they stop with it.
    for child in children.values() {
        child.stop.cancel();
    }
    // One budget for all of them, within the supervisor's 5 s for the whole pattern; a child
    // still running then is aborted (dropping a JoinHandle would leave its task running).
    let deadline = tokio::time::Instant::now() + STOP_BUDGET;
    for (label, mut child) in children {
        if tokio::time::timeout_at(deadline, &mut child.handle)
            .await
            .is_err()
        {
            child.handle.abort();
            tracing::warn!(message = "Watcher did not stop in time; aborted.", resource = %label);
        }
        ctx.registry.remove_watcher(&label);
    }
}

/// The journal entry that says the pattern's first complete view of the CRDs is done: the
/// checkpoint of a stream no watcher has (`<group>/*/<namespace or *>`: no plural is `*`), so the
/// journal's layout stays as it is.
fn first_view_stream(spec: &WatchSpec) -> String {
    format!(
        "{}/{}/{}",
        spec.group,
        crate::config::ANY_KIND,
        spec.namespace.as_deref().unwrap_or("*")
    )
}

/// Records that the first complete view is done (an empty batch that only sets the checkpoint).
fn mark_first_view(ctx: &Context, spec: &WatchSpec, marker: &str) {
    let batch = crate::journal::Batch {
        stream: marker.to_string(),
        events: Vec::new(),
        index: Vec::new(),
        checkpoint: Some("first-view-done".to_string()),
        listed: false,
    };
    if let Err(error) = ctx.journal.append(batch) {
        tracing::warn!(message = "Recording the pattern's first view failed; a CRD installed while herald is down may be taken for one present at the first start.", error = %problem::chain(&error), pattern = %spec.label());
    }
}

/// Reports the deletion of whatever `stream`'s index still holds (its CRD is gone, and its objects
/// with it): deletions the watcher did not read (paused by the backlog, relisting, herald down).
fn report_gone(ctx: &Context, spec: &WatchSpec, stream: &str) {
    match watch::report_gone(&ctx.journal, spec, stream) {
        Ok(0) => {}
        Ok(objects) => {
            tracing::info!(message = "CRD gone; reported the deletion of the objects its index still held.", stream, objects, pattern = %spec.label());
        }
        Err(error) => {
            tracing::warn!(message = "Reporting the deletions of a gone CRD's objects failed.", stream, error = %problem::chain(&error), pattern = %spec.label());
        }
    }
}

/// At the pattern's first complete view of the CRDs: the kinds of its group with an index but no
/// CRD (deleted while herald was down) get their objects' deletions reported.
fn report_orphans(
    ctx: &Context,
    spec: &WatchSpec,
    crds: &BTreeMap<String, CustomResourceDefinition>,
) {
    let live: BTreeSet<&str> = crds
        .values()
        .filter(|c| c.spec.group == spec.group && c.metadata.deletion_timestamp.is_none())
        .map(|c| c.spec.names.plural.as_str())
        .collect();
    let streams = match ctx.journal.indexed_streams(&format!("{}/", spec.group)) {
        Ok(s) => s,
        Err(error) => {
            tracing::warn!(message = "Looking for the kinds of deleted CRDs failed.", error = %problem::chain(&error), pattern = %spec.label());
            return;
        }
    };
    let scope = spec.namespace.as_deref().unwrap_or("*");
    for stream in streams {
        let mut parts = stream.splitn(3, '/');
        let (Some(_), Some(plural), Some(ns)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        // `*`: also a cluster-scoped kind's, which the first namespace's spec of a list watches.
        if live.contains(plural) || !(ns == scope || (ns == "*" && spec.namespace_lead)) {
            continue;
        }
        // Only the kinds this pattern takes.
        let entries = match ctx.journal.index_scan(&stream) {
            Ok(entries) => entries,
            Err(error) => {
                // Damage found after the open's integrity scan: the stream's objects cannot be
                // listed, so no gone report for it (and nothing removed) until it is repaired.
                tracing::warn!(
                    message = "Cannot read the object index of a stream that is no longer watched; its deletions are not reported.",
                    stream = %stream,
                    error = %problem::chain(&error),
                );
                continue;
            }
        };
        let kind = entries
            .into_iter()
            .next()
            .and_then(|(_, raw)| serde_json::from_slice::<serde_json::Value>(&raw).ok())
            .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_owned));
        if kind.is_some_and(|k| spec.takes_kind(&k)) {
            report_gone(ctx, spec, &stream);
        }
    }
}

/// The CRD as the pattern keeps it: `None` for another group's; without the versions' schemas
/// (often most of a CRD, and never read here).
fn slim(spec: &WatchSpec, mut crd: CustomResourceDefinition) -> Option<CustomResourceDefinition> {
    if crd.spec.group != spec.group {
        return None;
    }
    for v in &mut crd.spec.versions {
        v.schema = None;
    }
    crd.metadata.managed_fields = None;
    Some(crd)
}

fn crd_name(crd: &CustomResourceDefinition) -> String {
    crd.metadata.name.clone().unwrap_or_default()
}

/// Starts a watcher for each newly matched kind (`late`: found after the first complete view of
/// the CRDs, so its objects are reported whatever `initialState` says); retires the watchers of
/// kinds no longer matched (their CRD is being deleted or gone): they end once their resource is
/// no longer served.
fn reconcile(
    ctx: &Context,
    spec: &WatchSpec,
    stop: &CancellationToken,
    crds: &BTreeMap<String, CustomResourceDefinition>,
    children: &mut BTreeMap<String, Child>,
    late: bool,
) {
    let want: BTreeMap<String, MatchedKind> = matched_kinds(spec, crds.values())
        .into_iter()
        .map(|m| (m.label.clone(), m))
        .collect();
    for (label, child) in children.iter() {
        let retire = !want.contains_key(label);
        if child.retire.swap(retire, Ordering::SeqCst) != retire && retire {
            tracing::info!(message = "CRD deleted; its watcher stops once the deletions of its objects are read.", resource = %label);
        }
    }
    for (label, m) in want {
        if children.contains_key(&label) {
            continue;
        }
        let mut child_spec = m.spec(spec);
        child_spec.initial_emit |= late;
        tracing::info!(message = "Kind of a watched group found; starting its watcher.", resource = %label, pattern = %spec.label());
        let child_health = Arc::new(watch::Health::default());
        let child_stop = stop.child_token();
        let retire = Arc::new(AtomicBool::new(false));
        let task = {
            let (client, journal, tuning) =
                (ctx.client.clone(), ctx.journal.clone(), ctx.tuning.clone());
            let (s, h, r) = (child_stop.clone(), child_health.clone(), retire.clone());
            async move {
                watch::run_retiring(client, journal, child_spec, tuning, s.clone(), h, Some(r))
                    .await;
                // Ending by retirement is no failure: mark it stopped before the guard looks.
                s.cancel();
            }
        };
        let handle = tokio::spawn(guarded(ctx.alive.clone(), child_stop.clone(), task));
        ctx.registry.add_watcher(label.clone(), child_health);
        let stream = m.stream(spec);
        children.insert(
            label,
            Child {
                stop: child_stop,
                retire,
                handle,
                stream,
            },
        );
    }
}

/// Drops the watchers that ended (retired after their CRD's deletion) from the registry; true when
/// there were some.
fn collect_finished(
    ctx: &Context,
    children: &mut BTreeMap<String, Child>,
    spec: &WatchSpec,
) -> bool {
    let done: Vec<String> = children
        .iter()
        .filter(|(_, c)| c.handle.is_finished())
        .map(|(l, _)| l.clone())
        .collect();
    for label in &done {
        let Some(child) = children.remove(label) else {
            continue;
        };
        ctx.registry.remove_watcher(label);
        tracing::info!(message = "Watcher of a deleted CRD stopped.", resource = %label, pattern = %spec.label());
        if child.retire.load(Ordering::SeqCst) {
            // Before a watcher for a CRD installed again can start on the same stream.
            report_gone(ctx, spec, &child.stream);
        }
    }
    !done.is_empty()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::{self, Config};

    #[test]
    fn the_pattern_keeps_only_its_groups_crds_without_schemas() {
        let cfg: Config = config::from_str(
            "resources:\n- {group: example.com, kinds: ['*']}\nsinks:\n- {name: out, type: file, path: e.jsonl}\n",
        )
        .unwrap();
        let spec = WatchSpec::from_config(&cfg).remove(0);
        let crd = |group: &str| -> CustomResourceDefinition {
            serde_json::from_value(json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": format!("widgets.{group}")},
                "spec": {"group": group, "scope": "Namespaced",
                         "names": {"kind": "Widget", "plural": "widgets"},
                         "versions": [{"name": "v1", "served": true, "storage": true,
                                       "schema": {"openAPIV3Schema": {"type": "object"}}}]}
            }))
            .unwrap()
        };
        assert!(slim(&spec, crd("other.example")).is_none());
        let kept = slim(&spec, crd("example.com")).unwrap();
        assert_eq!(kept.spec.versions.len(), 1);
        assert!(kept.spec.versions[0].schema.is_none());
        assert!(kept.spec.versions[0].served);
    }
}
