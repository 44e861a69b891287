//! Acknowledged positions, published by the leader and applied by standbys (ADR 0013).
//!
//! A sequence number means nothing in another journal, so the leader publishes, per sink, per
//! object (`k8suid`), the highest `resourceversion` among the events it has finished (delivered,
//! dead-lettered or not routed to the sink): its cursor's prefix and the ranges acknowledged above
//! it. Delivery finishes an object's events in order (ADR 0008), so every event of that object up to
//! that resourceVersion is finished too. A standby marks each event of its own journal at or below
//! the published resourceVersion of its object as done, with the same [`Journal::acknowledge`] the
//! delivery uses: its cursor moves, its backlog is trimmed and retention runs. Entries are kept
//! for a window (at least 30 s, ten publish intervals) after they last moved, which bounds the
//! ConfigMap's size.
//!
//! Per-object entries cannot mark an event no entry names: one the leader finished before the
//! window, never had (a standby that emitted the initial state of idle objects, a deletion a
//! relist found at its own list's resourceVersion) or had in another coalesced state. So the
//! leader also publishes, per sink and journal stream, a floor: the lowest resourceVersion among
//! the sink's unfinished events of that stream, capped by the stream's checkpoint (what its
//! watch has seen). resourceVersions are one etcd revision counter, so every change of the
//! stream below the floor the leader has seen and finished, or coalesced into a later state it
//! has; a standby marks its events of the stream below the floor done.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use herald_sink_core::event::{CloudEvent, ExtensionValue};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::journal::{Journal, JournalError, MAX_ACKED_RANGES};
use crate::route::Router;

/// The ConfigMap key holding the positions document.
pub const DATA_KEY: &str = "positions.json";

/// Entries kept per sink at most (memory): past it the oldest are forgotten (their events may
/// be sent again after a takeover, never skipped).
const MAX_ENTRIES: usize = 50_000;

/// The positions document's size at most, all sinks together, so the ConfigMap stays under the
/// API server's 1 MiB object limit (etcd's request limit is 1.5 MiB): past it the oldest entries,
/// whatever their sink, are left out of the publication.
pub const MAX_DOC_BYTES: usize = 800 * 1024;

/// Journal entries looked at per sink and pass: a standby trims at most this far ahead per
/// publish interval, and the leader reads at most this many acknowledged entries above a cursor.
const MAX_SCAN: usize = 8_192;

/// Passes after which a standby's cursor that has not moved while events wait above it counts
/// as stalled (`herald_leader_election_standby_stalled_sinks`).
pub const STALLED_AFTER: u32 = 10;

/// The document in the ConfigMap.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Published {
    /// The leader that wrote it.
    pub holder: String,
    /// When it was written (RFC 3339), for operators.
    pub time: String,
    /// Sink → object uid → the highest resourceVersion of that object's finished events.
    pub sinks: BTreeMap<String, BTreeMap<String, u64>>,
    /// Sink → journal stream → the floor: every change of that stream below it is finished
    /// (ADR 0013). A sink is left out while its unfinished events are too many to read in one pass.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub floors: BTreeMap<String, BTreeMap<String, u64>>,
}

/// What the floors are compared with, read from a decoded event.
struct Change {
    rv: u64,
    /// The streams the event may have been journaled by: `<group>/<plural>/*` and
    /// `<group>/<plural>/<namespace>`.
    streams: [Option<String>; 2],
    /// The lowest resourceVersion another replica may have journaled the same change at. The
    /// event's own, except for a deletion a relist found: its resourceVersion is made up (the
    /// list's, or just below the object that replaced it), while the deletion itself happened
    /// after the old object's last version. `0` when the old object's version is not carried.
    low: u64,
}

fn change(event: &CloudEvent) -> Option<Change> {
    let text = |name: &str| match event.extensions.get(name) {
        Some(ExtensionValue::String(s)) => Some(s.as_str()),
        _ => None,
    };
    let resync = matches!(
        event.extensions.get("resync"),
        Some(ExtensionValue::Bool(true))
    );
    change_of(
        &event.source,
        &event.ty,
        text("resourceversion")?,
        text("k8snamespace"),
        resync,
        event.data.as_ref(),
    )
}

/// [`change`] of an event that does not decode as a CloudEvent, from its JSON as it is.
fn loose_change(bytes: &[u8]) -> Option<Change> {
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let text = |name: &str| v.get(name).and_then(serde_json::Value::as_str);
    let resync = v
        .get("resync")
        .is_some_and(|r| r.as_bool() == Some(true) || r.as_str() == Some("true"));
    change_of(
        text("source")?,
        text("type")?,
        text("resourceversion")?,
        text("k8snamespace"),
        resync,
        v.get("data"),
    )
}

fn change_of(
    source: &str,
    ty: &str,
    rv: &str,
    namespace: Option<&str>,
    resync: bool,
    data: Option<&serde_json::Value>,
) -> Option<Change> {
    let rv: u64 = rv.parse().ok()?;
    let mut parts = source.rsplitn(3, '/');
    let plural = parts.next().filter(|p| !p.is_empty())?;
    let group = parts.next().filter(|g| !g.is_empty())?;
    let streams = [
        Some(format!("{group}/{plural}/*")),
        namespace
            .filter(|n| !n.is_empty())
            .map(|n| format!("{group}/{plural}/{n}")),
    ];
    let low = if resync && ty.ends_with(".deleted") {
        data.and_then(|d| d.pointer("/metadata/resourceVersion"))
            .and_then(serde_json::Value::as_str)
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(0, |old| old.saturating_add(1).min(rv))
    } else {
        rv
    };
    Some(Change { rv, streams, low })
}

/// The two attributes an entry is matched by, read without decoding the whole event.
#[derive(Deserialize)]
struct Ids {
    k8suid: Option<String>,
    resourceversion: Option<String>,
}

fn ids(bytes: &[u8]) -> Option<(String, u64)> {
    let ids: Ids = serde_json::from_slice(bytes).ok()?;
    Some((ids.k8suid?, ids.resourceversion?.parse().ok()?))
}

/// Why positions could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PositionsError {
    /// The API server refused or could not be reached.
    #[error("the positions ConfigMap: {0}")]
    Api(#[from] kube::Error),
    /// The journal failed.
    #[error("the journal: {0}")]
    Journal(#[from] JournalError),
    /// The document could not be encoded or decoded.
    #[error("the positions document: {0}")]
    Json(#[from] serde_json::Error),
}

/// What this replica knows of the finished positions, as leader (its own) or standby (the
/// leader's, as published).
pub(super) struct Positions {
    journal: Journal,
    router: Arc<Router>,
    api: Api<ConfigMap>,
    name: String,
    keep_for: Duration,
    /// Sink → uid → (resourceVersion, when it last moved or was published).
    through: BTreeMap<String, HashMap<String, (u64, Instant)>>,
    /// Leader: per sink, the cursor up to which entries were read into `through`.
    counted: BTreeMap<String, u64>,
    /// Sink → stream → floor: the leader's own (leader) or the leader's as last fetched (standby).
    floors: BTreeMap<String, BTreeMap<String, u64>>,
    /// Standby: per sink, the passes in a row its cursor stayed while events waited above it.
    stalls: BTreeMap<String, u32>,
}

impl Positions {
    pub(super) fn new(
        journal: Journal,
        router: Arc<Router>,
        api: Api<ConfigMap>,
        name: String,
        publish_interval: Duration,
    ) -> Self {
        Self {
            journal,
            router,
            api,
            name,
            keep_for: (publish_interval * 10).max(Duration::from_secs(30)),
            through: BTreeMap::new(),
            counted: BTreeMap::new(),
            floors: BTreeMap::new(),
            stalls: BTreeMap::new(),
        }
    }

    fn note(&mut self, sink: &str, uid: String, rv: u64, now: Instant) {
        let map = self.through.entry(sink.to_owned()).or_default();
        let entry = map.entry(uid).or_insert((rv, now));
        if rv >= entry.0 {
            *entry = (rv, now);
        }
    }

    fn prune(&mut self, now: Instant) {
        let keep_for = self.keep_for;
        for map in self.through.values_mut() {
            map.retain(|_, (_, at)| now.duration_since(*at) <= keep_for);
            if map.len() > MAX_ENTRIES {
                let mut newest: Vec<(Instant, String)> = map
                    .iter()
                    .map(|(uid, (_, at))| (*at, uid.clone()))
                    .collect();
                newest.sort_unstable_by(|a, b| b.cmp(a));
                for (_, uid) in newest.drain(..).skip(MAX_ENTRIES) {
                    map.remove(&uid);
                }
            }
        }
    }

    /// Becoming leader: what was finished before (the cursors, moved by the positions applied as
    /// a standby) is not read again; only what this replica finishes from now on is.
    pub(super) fn lead(&mut self) {
        self.counted.clear();
        self.stalls.clear();
        for sink in self.journal.sinks() {
            if let Ok(cursor) = self.journal.cursor(&sink) {
                self.counted.insert(sink, cursor);
            }
        }
        self.hold_retention();
    }

    /// Becoming standby: retention is no longer held for the publisher.
    pub(super) fn follow(&mut self) {
        self.counted.clear();
        self.floors.clear();
        self.journal.hold_retention_after(u64::MAX);
    }

    fn hold_retention(&self) {
        let floor = self.counted.values().copied().min().unwrap_or(u64::MAX);
        self.journal.hold_retention_after(floor);
    }

    /// The object and resourceVersion of an event the sink's routes want. An event the sink does
    /// not want counts as finished the moment it is read, even while an earlier event of the same
    /// object waits for delivery: publishing its resourceVersion would make a standby mark that
    /// earlier event done, and a takeover lose it. Nor is an event that cannot be decoded
    /// published (its place in the object's order is unknown).
    fn routed_ids(&self, sink: &str, bytes: &[u8]) -> Option<(String, u64)> {
        let event = CloudEvent::from_structured_json(bytes).ok()?;
        if !self.router.wants(sink, &event) {
            return None;
        }
        ids(bytes)
    }

    /// Leader: reads what each sink finished since the last pass into `through`.
    pub(super) fn collect(&mut self) -> Result<(), PositionsError> {
        let now = Instant::now();
        for sink in self.journal.sinks() {
            let cursor = self.journal.cursor(&sink)?;
            let from = *self.counted.entry(sink.clone()).or_insert(cursor);
            let mut after = from;
            while after < cursor {
                let rows = self.journal.read(
                    &sink,
                    after,
                    usize::try_from(cursor - after)
                        .unwrap_or(MAX_SCAN)
                        .min(MAX_SCAN),
                )?;
                let Some(&(last, _)) = rows.last() else { break };
                for (seq, bytes) in rows {
                    if seq > cursor {
                        break;
                    }
                    if let Some((uid, rv)) = self.routed_ids(&sink, &bytes) {
                        self.note(&sink, uid, rv, now);
                    }
                }
                after = last.min(cursor);
            }
            self.counted.insert(sink.clone(), cursor);
            let mut budget = MAX_SCAN;
            for (first, last) in self.journal.acked(&sink)? {
                if budget == 0 {
                    break;
                }
                let n = usize::try_from(last - first + 1)
                    .unwrap_or(budget)
                    .min(budget);
                budget -= n;
                for (seq, bytes) in self.journal.read(&sink, first - 1, n)? {
                    if seq > last {
                        break;
                    }
                    if let Some((uid, rv)) = self.routed_ids(&sink, &bytes) {
                        self.note(&sink, uid, rv, now);
                    }
                }
            }
        }
        self.hold_retention();
        self.prune(now);
        self.floors = self.compute_floors()?;
        Ok(())
    }

    /// Leader: per sink and stream, the floor below which every change is finished: the lowest
    /// resourceVersion among the sink's unfinished events of the stream, capped by the stream's
    /// checkpoint (what its watch has seen; a change above it may still come). The checkpoints
    /// are read before the events, so every change at or below them is among the events read.
    /// A sink whose unfinished events do not fit in one scan, or include one that cannot be
    /// read, gets no floors this pass.
    fn compute_floors(&self) -> Result<BTreeMap<String, BTreeMap<String, u64>>, PositionsError> {
        let checkpoints: BTreeMap<String, u64> = self
            .journal
            .checkpoints()?
            .into_iter()
            .filter_map(|(stream, rv)| Some((stream, rv.parse().ok()?)))
            .collect();
        let mut out = BTreeMap::new();
        if checkpoints.is_empty() {
            return Ok(out);
        }
        let durable = self.journal.durable_seq();
        'sinks: for sink in self.journal.sinks() {
            let cursor = self.journal.cursor(&sink)?;
            let acked = self.journal.acked(&sink)?;
            let mut floors = checkpoints.clone();
            let mut after = cursor;
            let mut budget = MAX_SCAN;
            while after < durable {
                if budget == 0 {
                    continue 'sinks;
                }
                let want = usize::try_from(durable - after)
                    .unwrap_or(budget)
                    .min(budget);
                let rows = self.journal.read(&sink, after, want)?;
                let Some(&(last, _)) = rows.last() else { break };
                budget = budget.saturating_sub(rows.len());
                for (seq, bytes) in rows {
                    if acked.iter().any(|&(a, b)| (a..=b).contains(&seq)) {
                        continue;
                    }
                    let Ok(event) = CloudEvent::from_structured_json(&bytes) else {
                        continue 'sinks;
                    };
                    if !self.router.wants(&sink, &event) {
                        continue;
                    }
                    let Some(change) = change(&event) else {
                        continue 'sinks;
                    };
                    for stream in change.streams.iter().flatten() {
                        if let Some(floor) = floors.get_mut(stream) {
                            *floor = (*floor).min(change.low);
                        }
                    }
                }
                after = last;
            }
            out.insert(sink, floors);
        }
        Ok(out)
    }

    /// The document to publish: the newest entries of every sink that fit in
    /// [`MAX_DOC_BYTES`] serialized, together.
    pub(super) fn published(&self, holder: &str) -> Published {
        self.published_within(holder, MAX_DOC_BYTES)
    }

    fn published_within(&self, holder: &str, max_bytes: usize) -> Published {
        let mut doc = Published {
            holder: holder.to_owned(),
            time: jiff::Timestamp::now().to_string(),
            sinks: BTreeMap::new(),
            floors: self.floors.clone(),
        };
        let json_len = |s: &str| serde_json::to_string(s).map_or(usize::MAX, |j| j.len());
        let fixed = serde_json::to_string(&doc).map_or(usize::MAX, |j| j.len());
        let mut left = max_bytes.saturating_sub(fixed);
        let mut newest: Vec<(Instant, &str, &str, u64)> = self
            .through
            .iter()
            .flat_map(|(sink, map)| {
                map.iter()
                    .map(move |(uid, (rv, at))| (*at, sink.as_str(), uid.as_str(), *rv))
            })
            .collect();
        newest.sort_unstable_by_key(|e| std::cmp::Reverse(e.0));
        for (_, sink, uid, rv) in newest {
            // `"uid":rv,` and, for a sink's first entry, `"sink":{},`: an upper bound, as the
            // last comma of each object is counted too.
            let mut cost = json_len(uid).saturating_add(2 + rv.to_string().len());
            if !doc.sinks.contains_key(sink) {
                cost = cost.saturating_add(json_len(sink) + 4);
            }
            if cost > left {
                break;
            }
            left -= cost;
            doc.sinks
                .entry(sink.to_owned())
                .or_default()
                .insert(uid.to_owned(), rv);
        }
        doc
    }

    /// Leader: writes the positions to the ConfigMap (created on first use).
    pub(super) async fn publish(&self, holder: &str) -> Result<usize, PositionsError> {
        let doc = self.published(holder);
        let text = serde_json::to_string(&doc)?;
        let patch = serde_json::json!({"data": {DATA_KEY: text}});
        match self
            .api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {
                let cm = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    data: Some(BTreeMap::from([(DATA_KEY.to_owned(), text.clone())])),
                    ..ConfigMap::default()
                };
                self.api.create(&PostParams::default(), &cm).await?;
            }
            Err(e) => return Err(e.into()),
        }
        Ok(text.len())
    }

    /// Standby: reads the published positions and merges them into `through`.
    pub(super) async fn fetch(&mut self) -> Result<Option<String>, PositionsError> {
        let Some(cm) = self.api.get_opt(&self.name).await? else {
            return Ok(None);
        };
        let Some(text) = cm.data.as_ref().and_then(|d| d.get(DATA_KEY)) else {
            return Ok(None);
        };
        let doc: Published = serde_json::from_str(text)?;
        // The latest leader's floors, whole: each one a leader published held for its journal
        // when it was written, and a mark once made stays.
        self.floors = doc.floors;
        let now = Instant::now();
        for (sink, map) in doc.sinks {
            for (uid, rv) in map {
                self.note(&sink, uid, rv, now);
            }
        }
        self.prune(now);
        Ok(Some(doc.holder))
    }

    /// Standby: the sinks whose cursor has not moved for [`STALLED_AFTER`] passes in a row
    /// while events waited above it.
    pub(super) fn stalled_sinks(&self) -> u64 {
        self.stalls
            .values()
            .filter(|n| **n >= STALLED_AFTER)
            .count() as u64
    }

    /// Standby: marks the journal's events the leader finished as done, per sink; returns how
    /// many events the cursors passed.
    pub(super) fn apply(&mut self) -> Result<u64, PositionsError> {
        let mut passed = 0;
        for sink in self.journal.sinks() {
            let known = self.through.get(&sink);
            let floors = self.floors.get(&sink);
            if known.is_none() && floors.is_none() {
                continue;
            }
            let cursor = self.journal.cursor(&sink)?;
            let rows = self.journal.read(&sink, cursor, MAX_SCAN)?;
            let waiting = !rows.is_empty();
            let mut upto = cursor;
            let mut contiguous = true;
            let mut above: Vec<(u64, u64)> = Vec::new();
            let below = |c: &Change| {
                c.streams.iter().flatten().any(|stream| {
                    floors
                        .and_then(|f| f.get(stream))
                        .is_some_and(|floor| c.rv < *floor)
                })
            };
            for (seq, bytes) in rows {
                let done = match CloudEvent::from_structured_json(&bytes) {
                    Ok(event) => {
                        !self.router.wants(&sink, &event)
                            || ids(&bytes).is_some_and(|(uid, rv)| {
                                known
                                    .and_then(|k| k.get(&uid))
                                    .is_some_and(|(through, _)| rv <= *through)
                            })
                            || change(&event).is_some_and(|c| below(&c))
                    }
                    // The new leader would dead-letter it. Below the floor the old leader has
                    // dead-lettered its own copy (a floor is never published while one it
                    // cannot decode is unfinished), or never had one.
                    Err(_) => loose_change(&bytes).is_some_and(|c| below(&c)),
                };
                if !done {
                    contiguous = false;
                    continue;
                }
                if contiguous {
                    upto = seq;
                } else if let Some(last) = above.last_mut().filter(|r| r.1 + 1 == seq) {
                    last.1 = seq;
                } else if above.len() < MAX_ACKED_RANGES {
                    above.push((seq, seq));
                }
            }
            let before = self.journal.acked(&sink)?;
            if upto > cursor || above != before {
                self.journal.acknowledge(&sink, upto, &above)?;
                passed += upto - cursor;
            }
            let stalls = self.stalls.entry(sink.clone()).or_default();
            *stalls = if waiting && upto == cursor {
                stalls.saturating_add(1)
            } else {
                0
            };
        }
        Ok(passed)
    }
}

#[cfg(test)]
mod tests {
    use herald_sink_core::event::ExtensionValue;

    use super::*;
    use crate::journal::{Batch, JournalConfig};

    fn event(uid: &str, rv: u64) -> Vec<u8> {
        event_op(uid, rv, "updated")
    }

    fn event_op(uid: &str, rv: u64, op: &str) -> Vec<u8> {
        CloudEvent::new(
            format!("{uid}:{rv}:{op}"),
            "k8s://c/example.com/widgets",
            format!("dev.herald.resource.{op}"),
        )
        .extension("k8suid", ExtensionValue::String(uid.into()))
        .extension("resourceversion", ExtensionValue::String(rv.to_string()))
        .extension(
            "partitionkey",
            ExtensionValue::String(format!("default/{uid}")),
        )
        .to_structured_json()
    }

    async fn journal(dir: &std::path::Path, events: &[(&str, u64)]) -> Journal {
        let events: Vec<Vec<u8>> = events.iter().map(|(uid, rv)| event(uid, *rv)).collect();
        journal_of(dir, events).await
    }

    async fn journal_of(dir: &std::path::Path, events: Vec<Vec<u8>>) -> Journal {
        journal_at(dir, events, None).await
    }

    /// A resync event (`resync: true`); a deletion carries its old object's resourceVersion.
    fn resync(uid: &str, rv: u64, op: &str, old_rv: u64) -> Vec<u8> {
        let mut e = CloudEvent::from_structured_json(&event_op(uid, rv, op)).unwrap();
        e.extensions
            .insert("resync".into(), ExtensionValue::Bool(true));
        e.data = Some(serde_json::json!({"metadata": {"resourceVersion": old_rv.to_string()}}));
        e.to_structured_json()
    }

    async fn journal_at(
        dir: &std::path::Path,
        events: Vec<Vec<u8>>,
        checkpoint: Option<&str>,
    ) -> Journal {
        let mut cfg = JournalConfig::new(dir.join("journal"));
        cfg.flush_interval = Duration::from_millis(1);
        let j = Journal::open(cfg).unwrap();
        j.register_sink("out", true).unwrap();
        let seqs = j
            .append(Batch {
                stream: "example.com/widgets/*".into(),
                events,
                index: vec![],
                checkpoint: checkpoint.map(str::to_owned),
                listed: false,
            })
            .unwrap();
        j.durable(*seqs.last().unwrap()).await.unwrap();
        j
    }

    fn positions(j: &Journal) -> Positions {
        positions_routed(j, Router::new(Vec::new()))
    }

    fn positions_routed(j: &Journal, router: Router) -> Positions {
        // Never asked: these tests publish and fetch nothing.
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        Positions::new(
            j.clone(),
            Arc::new(router),
            Api::namespaced(client, "default"),
            "herald-positions".into(),
            Duration::from_secs(1),
        )
    }

    /// The leader's journal and a standby's hold the same changes in a different order (a list
    /// journals objects in its own order): per object, what the leader finished marks the
    /// standby's events of that object at or below it, and nothing else.
    #[tokio::test]
    async fn a_standby_marks_what_the_leader_finished_per_object() {
        let (dl, ds) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let leader = journal(
            dl.path(),
            &[("a", 5), ("b", 3), ("a", 7), ("c", 9), ("b", 8)],
        )
        .await;
        // The leader finished seq 1-2 (a@5, b@3) and seq 4 (c@9) above its cursor; a@7 is stuck.
        leader.acknowledge("out", 2, &[(4, 4)]).unwrap();
        let mut lp = positions(&leader);
        lp.lead();
        lp.counted.insert("out".into(), 0);
        lp.collect().unwrap();
        let doc = lp.published("herald-a");
        assert_eq!(
            doc.sinks["out"],
            BTreeMap::from([("a".into(), 5), ("b".into(), 3), ("c".into(), 9)])
        );

        // The standby saw b@3 first, and a@6, which the leader's watch coalesced away: it is above
        // the published a@5, so it stays, to be sent after a takeover.
        let standby = journal(
            ds.path(),
            &[("b", 3), ("a", 5), ("a", 6), ("a", 7), ("b", 8), ("c", 9)],
        )
        .await;
        standby.acknowledge("out", 0, &[]).unwrap();
        let mut sp = positions(&standby);
        let now = Instant::now();
        for (uid, rv) in &doc.sinks["out"] {
            sp.note("out", uid.clone(), *rv, now);
        }
        assert_eq!(sp.apply().unwrap(), 2);
        assert_eq!(standby.cursor("out").unwrap(), 2, "b@3 and a@5 are done");
        assert_eq!(
            standby.acked("out").unwrap(),
            [(6, 6)],
            "c@9 is done; a@6, a@7 and b@8 are not"
        );
        // Applying again changes nothing.
        assert_eq!(sp.apply().unwrap(), 0);
        assert_eq!(standby.cursor("out").unwrap(), 2);
    }

    /// A route that takes creations and updates only: the leader's `deleted` event of an object
    /// is finished as soon as it is read, while the object's earlier update still waits. The
    /// deletion's resourceVersion is not published, so the standby keeps the update to send.
    #[tokio::test]
    async fn an_event_the_sink_does_not_want_publishes_nothing_for_its_object() {
        let route = || {
            Router::new(vec![crate::route::Route {
                resources: vec![crate::route::ResourcePattern::Any],
                ops: vec![crate::event::Op::Created, crate::event::Op::Updated],
                sinks: vec!["out".into()],
                when: None,
            }])
        };
        let events = || {
            vec![
                event_op("a", 5, "updated"),
                event_op("a", 6, "deleted"),
                event_op("b", 7, "updated"),
            ]
        };
        let (dl, ds) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let leader = journal_of(dl.path(), events()).await;
        // a@5 waits for delivery; the deletion (not routed) and b@7 are done.
        leader.acknowledge("out", 0, &[(2, 3)]).unwrap();
        let mut lp = positions_routed(&leader, route());
        lp.lead();
        lp.collect().unwrap();
        let doc = lp.published("herald-a");
        assert_eq!(doc.sinks["out"], BTreeMap::from([("b".into(), 7)]));

        let standby = journal_of(ds.path(), events()).await;
        standby.acknowledge("out", 0, &[]).unwrap();
        let mut sp = positions_routed(&standby, route());
        let now = Instant::now();
        for (uid, rv) in &doc.sinks["out"] {
            sp.note("out", uid.clone(), *rv, now);
        }
        sp.apply().unwrap();
        assert_eq!(standby.cursor("out").unwrap(), 0, "a@5 is still to send");
        assert_eq!(standby.acked("out").unwrap(), [(2, 3)]);
    }

    /// A replica started after the objects existed (a late standby, `initialState: emit`)
    /// journals a `created` for each, events the leader never had or finished long ago: no
    /// per-object entry names them. The leader's floor (its watch has seen up to 20, nothing is
    /// unfinished) marks them all done, and a deletion a relist found; a change the leader's
    /// watch has not seen yet stays. So does an event that does not decode (no id): the leader
    /// has dead-lettered its own copy.
    #[tokio::test]
    async fn a_late_standby_trims_its_backlog_from_the_leaders_floor() {
        let undecodable = serde_json::to_vec(&serde_json::json!({
            "specversion": "1.0",
            "source": "k8s://c/example.com/widgets",
            "type": "dev.herald.resource.updated",
            "k8suid": "f",
            "resourceversion": "11",
        }))
        .unwrap();
        assert!(CloudEvent::from_structured_json(&undecodable).is_err());
        let (dl, ds) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let leader = journal_at(
            dl.path(),
            vec![event_op("a", 5, "created"), event_op("c", 9, "updated")],
            Some("20"),
        )
        .await;
        leader.acknowledge("out", 2, &[]).unwrap();
        let mut lp = positions(&leader);
        lp.lead();
        lp.collect().unwrap();
        let doc = lp.published("herald-a");
        assert!(doc.sinks.get("out").is_none_or(BTreeMap::is_empty));
        assert_eq!(
            doc.floors["out"],
            BTreeMap::from([("example.com/widgets/*".into(), 20)])
        );

        let standby = journal_at(
            ds.path(),
            vec![
                resync("b", 3, "created", 3),
                resync("a", 5, "created", 5),
                resync("c", 9, "created", 9),
                resync("d", 15, "deleted", 4),
                undecodable.clone(),
                event_op("e", 25, "created"),
            ],
            Some("25"),
        )
        .await;
        standby.acknowledge("out", 0, &[]).unwrap();
        let mut sp = positions(&standby);
        sp.floors = doc.floors.clone();
        assert_eq!(sp.apply().unwrap(), 5);
        assert_eq!(standby.cursor("out").unwrap(), 5, "all but e@25 are done");
        assert_eq!(standby.acked("out").unwrap(), []);
    }

    /// The floor stops at the leader's lowest unfinished change. A deletion its relist found
    /// carries the list's resourceVersion (18 here), made up: the deletion happened after the
    /// old object's 14, so the floor counts it at 15, and the standby's copy of the deletion,
    /// seen by its watch at 15, stays to be sent.
    #[tokio::test]
    async fn the_floor_stops_below_an_unfinished_deletion_a_relist_found() {
        let (dl, ds) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let leader = journal_at(
            dl.path(),
            vec![
                event_op("x", 10, "updated"),
                resync("z", 18, "deleted", 14),
                event_op("y", 16, "updated"),
            ],
            Some("20"),
        )
        .await;
        // x and y are delivered; z's deletion waits.
        leader.acknowledge("out", 1, &[(3, 3)]).unwrap();
        let mut lp = positions(&leader);
        lp.lead();
        lp.counted.insert("out".into(), 0);
        lp.collect().unwrap();
        let doc = lp.published("herald-a");
        assert_eq!(
            doc.floors["out"],
            BTreeMap::from([("example.com/widgets/*".into(), 15)])
        );

        let standby = journal_at(
            ds.path(),
            vec![
                event_op("x", 10, "updated"),
                event_op("z", 15, "deleted"),
                event_op("y", 16, "updated"),
            ],
            Some("20"),
        )
        .await;
        standby.acknowledge("out", 0, &[]).unwrap();
        let mut sp = positions(&standby);
        let now = Instant::now();
        for (uid, rv) in &doc.sinks["out"] {
            sp.note("out", uid.clone(), *rv, now);
        }
        sp.floors = doc.floors.clone();
        sp.apply().unwrap();
        assert_eq!(
            standby.cursor("out").unwrap(),
            1,
            "z's deletion is still to send"
        );
        assert_eq!(standby.acked("out").unwrap(), [(3, 3)]);
    }

    /// A burst on several sinks: the entries of the window, together, are more than the
    /// ConfigMap can hold. The document keeps the newest, whatever their sink, within the one
    /// budget, and stays under it.
    #[tokio::test]
    async fn the_document_keeps_the_newest_entries_of_all_sinks_within_one_budget() {
        let dir = tempfile::tempdir().unwrap();
        let j = journal(dir.path(), &[("a", 1)]).await;
        let mut p = positions(&j);
        let start = Instant::now();
        let mut n = 0u64;
        for i in 0..8_000u64 {
            for sink in ["one", "two", "three"] {
                n += 1;
                let at = start + Duration::from_micros(n);
                p.note(
                    sink,
                    format!("{i:08}-0000-4000-8000-{n:012}"),
                    1_000_000 + n,
                    at,
                );
            }
        }
        let doc = p.published("herald-a");
        let text = serde_json::to_string(&doc).unwrap();
        assert!(text.len() <= 800 * 1024, "{} bytes", text.len());
        let kept: usize = doc.sinks.values().map(BTreeMap::len).sum();
        assert!(kept > 10_000 && kept < 24_000, "{kept}");
        let id = |i: u64, n: u64| format!("{i:08}-0000-4000-8000-{n:012}");
        assert!(
            doc.sinks["three"].contains_key(&id(7_999, n)),
            "the newest is kept"
        );
        assert!(
            !doc.sinks["one"].contains_key(&id(0, 1)),
            "the oldest is left out"
        );
        // A small budget: what fits, never more.
        let small = p.published_within("herald-a", 300);
        assert!(serde_json::to_string(&small).unwrap().len() <= 300);
        assert!(!small.sinks.is_empty());
    }

    /// A standby whose cursor nothing the leader publishes moves counts as stalled after
    /// [`STALLED_AFTER`] passes, and no longer once it moves.
    #[tokio::test]
    async fn a_cursor_the_positions_do_not_move_counts_as_stalled() {
        let dir = tempfile::tempdir().unwrap();
        let standby = journal_at(dir.path(), vec![event("x", 30)], Some("30")).await;
        standby.acknowledge("out", 0, &[]).unwrap();
        let mut sp = positions(&standby);
        let stream = || "example.com/widgets/*".to_owned();
        sp.floors = BTreeMap::from([("out".into(), BTreeMap::from([(stream(), 20)]))]);
        for _ in 1..STALLED_AFTER {
            sp.apply().unwrap();
        }
        assert_eq!(sp.stalled_sinks(), 0);
        sp.apply().unwrap();
        assert_eq!(sp.stalled_sinks(), 1);
        sp.floors = BTreeMap::from([("out".into(), BTreeMap::from([(stream(), 31)]))]);
        assert_eq!(sp.apply().unwrap(), 1);
        assert_eq!(sp.stalled_sinks(), 0);
    }
}
