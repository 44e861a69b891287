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

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use herald_sink_core::event::CloudEvent;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::journal::{Journal, JournalError, MAX_ACKED_RANGES};
use crate::route::Router;

/// The ConfigMap key holding the positions document.
pub const DATA_KEY: &str = "positions.json";

/// Entries published per sink at most: about 60 bytes each, so the ConfigMap stays well under
/// the API server's 1 MiB object limit. Past it the oldest are left out (their events may be
/// sent again after a takeover, never skipped).
const MAX_ENTRIES: usize = 12_000;

/// Journal entries looked at per sink and pass: a standby trims at most this far ahead per
/// publish interval, and the leader reads at most this many acknowledged entries above a cursor.
const MAX_SCAN: usize = 8_192;

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
                let mut ages: Vec<Instant> = map.values().map(|(_, at)| *at).collect();
                ages.sort_unstable();
                let oldest_kept = ages[ages.len() - MAX_ENTRIES];
                map.retain(|_, (_, at)| *at >= oldest_kept);
            }
        }
    }

    /// Becoming leader: what was finished before (the cursors, moved by the positions applied as
    /// a standby) is not read again; only what this replica finishes from now on is.
    pub(super) fn lead(&mut self) {
        self.counted.clear();
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
        Ok(())
    }

    /// The document to publish.
    pub(super) fn published(&self, holder: &str) -> Published {
        Published {
            holder: holder.to_owned(),
            time: jiff::Timestamp::now().to_string(),
            sinks: self
                .through
                .iter()
                .map(|(sink, map)| {
                    (
                        sink.clone(),
                        map.iter()
                            .map(|(uid, (rv, _))| (uid.clone(), *rv))
                            .collect(),
                    )
                })
                .collect(),
        }
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
        let now = Instant::now();
        for (sink, map) in doc.sinks {
            for (uid, rv) in map {
                self.note(&sink, uid, rv, now);
            }
        }
        self.prune(now);
        Ok(Some(doc.holder))
    }

    /// Standby: marks the journal's events the leader finished as done, per sink; returns how
    /// many events the cursors passed.
    pub(super) fn apply(&self) -> Result<u64, PositionsError> {
        let mut passed = 0;
        for sink in self.journal.sinks() {
            let Some(known) = self.through.get(&sink) else {
                continue;
            };
            let cursor = self.journal.cursor(&sink)?;
            let rows = self.journal.read(&sink, cursor, MAX_SCAN)?;
            let mut upto = cursor;
            let mut contiguous = true;
            let mut above: Vec<(u64, u64)> = Vec::new();
            for (seq, bytes) in rows {
                let done = match CloudEvent::from_structured_json(&bytes) {
                    Ok(event) => {
                        !self.router.wants(&sink, &event)
                            || ids(&bytes).is_some_and(|(uid, rv)| {
                                known.get(&uid).is_some_and(|(through, _)| rv <= *through)
                            })
                    }
                    // The new leader dead-letters it as the old one did.
                    Err(_) => false,
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
        let mut cfg = JournalConfig::new(dir.join("journal"));
        cfg.flush_interval = Duration::from_millis(1);
        let j = Journal::open(cfg).unwrap();
        j.register_sink("out", true).unwrap();
        let seqs = j
            .append(Batch {
                stream: "s".into(),
                events,
                index: vec![],
                checkpoint: None,
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
}
