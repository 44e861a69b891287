//! The relist diff and the watch classifier against an in-process simulator: `sequence` rises
//! within each `partitionkey` in every relist case, synthesized events included, and the ids a
//! relist synthesizes depend on the cluster's state alone.

use std::collections::BTreeMap;
use std::time::Duration;

use herald_sim::{ResourceRef, SimConfig, Simulator};
use serde_json::{Value, json};

use super::*;
use crate::event::{DEFAULT_TYPE_PREFIX, Payload, Resource};
use crate::journal::JournalConfig;

const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, kind: Widget}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
";

/// The sink name the tests read the journal as.
const READER: &str = "t";

fn widgets() -> ResourceRef {
    ResourceRef::namespaced("example.com", "v1", "widgets", "default")
}

fn widget(name: &str, v: i64) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget",
           "metadata": {"name": name, "namespace": "default"}, "spec": {"v": v}})
}

fn spec() -> WatchSpec {
    WatchSpec {
        index: 0,
        group: "example.com".into(),
        version: None,
        kind: Some("Widget".into()),
        plural: None,
        namespace: None,
        namespace_lead: true,
        namespace_selector: None,
        namespace_include: vec![],
        namespace_exclude: vec![],
        kinds: None,
        label_selector: None,
        field_selector: None,
        ops: vec![Op::Created, Op::Updated, Op::Deleted],
        initial_emit: true,
        skip_status_only_updates: false,
        when: None,
        changed: vec![],
        ignore_fields: vec![],
        template: Resource {
            cluster: "test".into(),
            group: "example.com".into(),
            version: String::new(),
            kind: "Widget".into(),
            plural: String::new(),
            namespaced: true,
            type_prefix: DEFAULT_TYPE_PREFIX.into(),
            payload: Payload::DEFAULT,
            redact: vec![],
            keep_managed_fields: false,
        },
    }
}

async fn cluster() -> (Simulator, Resolved) {
    crate::cli::install_crypto_provider();
    let sim = Simulator::start(SimConfig::default()).await.unwrap();
    sim.load_yaml(CRD).unwrap();
    let resolved = crate::watch::resolve(&sim.client().unwrap(), &spec())
        .await
        .unwrap()
        .expect("widgets are served");
    (sim, resolved)
}

/// A journal with a reader registered from the start, so every event can be read back.
/// [`spec`] on the spans path (`spans`), or on the tree path throughout: a `when` that passes
/// everything, states read back included, as before the spans path existed.
fn spec_on(spans: bool) -> WatchSpec {
    if spans {
        return spec();
    }
    WatchSpec {
        when: Some(crate::config::When::new(
            "true",
            crate::config::OnError::default(),
        )),
        ..spec()
    }
}

/// Every event `j` journaled, once durable, as text without its time (which differs run to run).
async fn durable_events(j: &Journal) -> Vec<String> {
    j.durable(u64::MAX).await.unwrap();
    j.read(READER, 0, 100_000)
        .unwrap()
        .into_iter()
        .map(|(_, e)| String::from_utf8(timeless(&e)).unwrap())
        .collect()
}

/// `v` decoded from its watch line's text as the recorder of that path decodes it.
fn watched(v: &serde_json::Value, spans: bool) -> Object {
    let text = serde_json::to_string(v).unwrap();
    if spans {
        let decoded: crate::watch::Spans<true> = serde_json::from_str(&text).unwrap();
        crate::watch::WatchedObject::into_object(decoded).unwrap()
    } else {
        let decoded: crate::watch::Stripped = serde_json::from_str(&text).unwrap();
        crate::watch::WatchedObject::into_object(decoded).unwrap()
    }
}

fn journal(dir: &std::path::Path) -> Journal {
    let j = Journal::open(JournalConfig {
        flush_interval: Duration::from_millis(2),
        ..JournalConfig::new(dir.join("journal"))
    })
    .unwrap();
    j.register_sink(READER, true).unwrap();
    j
}

/// Every event in the journal, in journal (emission) order.
async fn events(j: &Journal) -> Vec<Value> {
    j.durable(u64::MAX).await.unwrap();
    j.read(READER, 0, 100_000)
        .unwrap()
        .into_iter()
        .map(|(_, e)| serde_json::from_slice(&e).unwrap())
        .collect()
}

/// A relist nothing stops.
async fn relist(rec: &Recorder<'_>, page_size: u32) -> Result<String, SyncError> {
    relist_until(rec, page_size, std::future::pending())
        .await
        .expect("a relist nothing stops ends")
}

async fn relist_into(j: &Journal, resolved: &Resolved) -> String {
    let (spec, health, ns) = (spec(), Health::default(), NamespaceCache::default());
    let rec = Recorder::new(j, &spec, resolved, &health, &ns);
    relist(&rec, 2).await.unwrap()
}

/// An event as `<object name>:<created|updated|deleted>`.
fn name_and_op(e: &Value) -> String {
    let o = &e["data"]["object"]["metadata"];
    format!(
        "{}:{}",
        o["name"].as_str().unwrap(),
        e["type"].as_str().unwrap().rsplit('.').next().unwrap()
    )
}

fn id(e: &Value) -> &str {
    e["id"].as_str().unwrap()
}

fn rv(o: &Value) -> u64 {
    o["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn uid(o: &Value) -> &str {
    o["metadata"]["uid"].as_str().unwrap()
}

/// `sequence` strictly rises in emission order within each `partitionkey`, and is the id's
/// resourceVersion zero-padded.
fn assert_sequence_rises_per_key(events: &[Value]) {
    let mut last: BTreeMap<&str, &str> = BTreeMap::new();
    for e in events {
        let key = e["partitionkey"].as_str().unwrap();
        let seq = e["sequence"].as_str().unwrap();
        let rv: u64 = e["resourceversion"].as_str().unwrap().parse().unwrap();
        assert_eq!(seq, format!("{rv:020}"), "{}", id(e));
        assert!(
            id(e).split(':').nth(1) == Some(&rv.to_string()),
            "the id carries the resourceversion: {}",
            id(e)
        );
        if let Some(prev) = last.insert(key, seq) {
            assert!(
                prev < seq,
                "{key}: sequence {prev} then {seq} ({}); all: {:#?}",
                id(e),
                events.iter().map(id).collect::<Vec<_>>()
            );
        }
    }
}

/// The ids of `events` per key, in emission order.
fn ids_per_key(events: &[Value]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in events {
        out.entry(e["partitionkey"].as_str().unwrap().to_string())
            .or_default()
            .push(id(e).to_string());
    }
    out
}

#[tokio::test]
async fn every_relist_case_keeps_sequence_rising_within_each_key() {
    let (sim, resolved) = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    let w = widgets();
    let mut before = BTreeMap::new();
    for n in [
        "kept",
        "updated",
        "gone",
        "again",
        "churned",
        "changed-then-again",
    ] {
        before.insert(n, sim.create(&w, widget(n, 1)).unwrap());
    }
    relist_into(&j, &resolved).await;
    let first = events(&j).await.len();
    assert_eq!(first, 6, "first start: every object as created");

    // While herald is not looking: updated; deleted; deleted and re-created; re-created three
    // times; updated, then deleted and re-created; and a new name.
    let updated = sim
        .merge_patch(&w, "updated", &json!({"spec": {"v": 2}}))
        .unwrap();
    sim.delete(&w, "gone").unwrap();
    sim.delete(&w, "again").unwrap();
    let again = sim.create(&w, widget("again", 2)).unwrap();
    let mut churned = Value::Null;
    for v in 2..5 {
        sim.delete(&w, "churned").unwrap();
        churned = sim.create(&w, widget("churned", v)).unwrap();
    }
    sim.merge_patch(&w, "changed-then-again", &json!({"spec": {"v": 2}}))
        .unwrap();
    sim.delete(&w, "changed-then-again").unwrap();
    let changed_again = sim.create(&w, widget("changed-then-again", 3)).unwrap();
    let fresh = sim.create(&w, widget("fresh", 1)).unwrap();
    // Later writes move the list's revision past every object's own.
    sim.create(&w, widget("later", 1)).unwrap();
    sim.delete(&w, "later").unwrap();

    let list_rv = relist_into(&j, &resolved).await;
    let all = events(&j).await;
    assert_sequence_rises_per_key(&all);
    let relisted = &all[first..];
    assert!(relisted.iter().all(|e| e["resync"] == true));
    let replaced = |old: &Value, new: &Value| {
        vec![
            format!("{}:{}:deleted", uid(old), rv(new) - 1),
            format!("{}:{}:created", uid(new), rv(new)),
        ]
    };
    let want: BTreeMap<String, Vec<String>> = [
        (
            "default/updated",
            vec![format!("{}:{}:updated", uid(&updated), rv(&updated))],
        ),
        (
            "default/gone",
            vec![format!("{}:{list_rv}:deleted", uid(&before["gone"]))],
        ),
        ("default/again", replaced(&before["again"], &again)),
        ("default/churned", replaced(&before["churned"], &churned)),
        (
            "default/changed-then-again",
            replaced(&before["changed-then-again"], &changed_again),
        ),
        (
            "default/fresh",
            vec![format!("{}:{}:created", uid(&fresh), rv(&fresh))],
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(ids_per_key(relisted), want);
    assert!(
        list_rv.parse::<u64>().unwrap() > rv(&fresh) + 1,
        "the list revision is later than every re-created object, as after any gap"
    );

    // The deletion that comes after a replaced object's creation moves on from it too.
    sim.delete(&w, "again").unwrap();
    let list_rv = relist_into(&j, &resolved).await;
    let all = events(&j).await;
    assert_sequence_rises_per_key(&all);
    assert_eq!(
        id(all.last().unwrap()),
        format!("{}:{list_rv}:deleted", uid(&again))
    );
}

#[tokio::test]
async fn the_same_cluster_state_relisted_twice_gives_the_same_ids() {
    let (sim, resolved) = cluster().await;
    let w = widgets();
    for n in ["a", "b", "c", "d"] {
        sim.create(&w, widget(n, 1)).unwrap();
    }
    // Two herald journals that recorded the same state.
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (j1, j2) = (journal(one.path()), journal(two.path()));
    relist_into(&j1, &resolved).await;
    relist_into(&j2, &resolved).await;
    let (first1, first2) = (events(&j1).await.len(), events(&j2).await.len());

    sim.merge_patch(&w, "a", &json!({"spec": {"v": 2}}))
        .unwrap();
    sim.delete(&w, "b").unwrap();
    sim.delete(&w, "c").unwrap();
    sim.create(&w, widget("c", 2)).unwrap();
    sim.delete(&w, "d").unwrap();
    sim.create(&w, widget("d", 2)).unwrap();
    sim.delete(&w, "d").unwrap();
    sim.create(&w, widget("d", 3)).unwrap();
    sim.create(&w, widget("e", 1)).unwrap();

    relist_into(&j1, &resolved).await;
    relist_into(&j2, &resolved).await;
    let once: Vec<String> = events(&j1).await[first1..]
        .iter()
        .map(|e| id(e).to_string())
        .collect();
    let twice: Vec<String> = events(&j2).await[first2..]
        .iter()
        .map(|e| id(e).to_string())
        .collect();
    assert_eq!(once.len(), 7, "{once:?}");
    assert_eq!(once, twice);

    // Relisting an unchanged state again adds nothing.
    relist_into(&j1, &resolved).await;
    assert_eq!(events(&j1).await.len(), first1 + once.len());
}

#[tokio::test]
async fn a_new_uid_on_a_watch_deletes_the_recorded_one_just_before_it() {
    // With a selector the watch need not show a deletion: the recorded object left the selection,
    // was deleted and its name re-created; the new one's ADDED is the first word of it.
    let (sim, resolved) = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    let w = widgets();
    let old = sim.create(&w, widget("n", 1)).unwrap();
    relist_into(&j, &resolved).await;
    sim.delete(&w, "n").unwrap();
    let new = sim.create(&w, widget("n", 2)).unwrap();

    let (spec, health, ns) = (spec(), Health::default(), NamespaceCache::default());
    let rec = Recorder::new(&j, &spec, &resolved, &health, &ns);
    let mut at = String::new();
    rec.record_watch(vec![(Seen::Added, new.clone())], &mut at)
        .await
        .unwrap();
    let all = events(&j).await;
    assert_sequence_rises_per_key(&all);
    assert_eq!(
        all.iter().map(|e| id(e).to_string()).collect::<Vec<_>>(),
        [
            format!("{}:{}:created", uid(&old), rv(&old)),
            format!("{}:{}:deleted", uid(&old), rv(&new) - 1),
            format!("{}:{}:created", uid(&new), rv(&new)),
        ]
    );
    assert_eq!(at, rv(&new).to_string());
}

#[test]
fn field_selector_values_escape_what_the_syntax_uses() {
    assert_eq!(field_value("team-a"), "team-a");
    assert_eq!(field_value(r"a,b=c\d"), r"a\,b\=c\\d");
}

/// A salvaged journal lost the events of `c` and `d` but kept their index entries: the relist
/// after the salvage must still send `c` (with the id the lost event had) and `d`'s deletion,
/// where a plain diff would see "no change" and send nothing.
#[tokio::test]
async fn a_salvage_that_lost_events_makes_the_relist_send_them_again() {
    let (sim, resolved) = cluster().await;
    let w = widgets();
    for n in ["a", "b", "c", "d"] {
        sim.create(&w, widget(n, 1)).unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path());
    relist_into(&j, &resolved).await;
    let before = events(&j).await;
    assert_eq!(before.len(), 4);
    j.close().await.unwrap();
    // The store rolls back by two committed events, as sled's recovery does after a truncation.
    let dir = tmp.path().join("journal");
    crate::journal::roll_back_events(&dir, 3);
    let out = crate::journal::salvage(&dir, Duration::from_secs(30), false).unwrap();
    assert_eq!(out.index_entries_unconfirmed, 2, "{out:?}");
    sim.delete(&w, "d").unwrap();

    let j = journal(tmp.path());
    let kept = events(&j).await.len();
    relist_into(&j, &resolved).await;
    let all = events(&j).await;
    let relisted: Vec<&str> = all[kept..].iter().map(id).collect();
    let lost_c = id(&before[2]).to_owned();
    assert!(lost_c.ends_with(":created"), "{lost_c}");
    let d_uid = uid(&before[3]["data"]["object"]).to_owned();
    assert_eq!(relisted.len(), 2, "{relisted:?}");
    assert!(relisted.contains(&lost_c.as_str()), "{relisted:?}");
    assert!(
        relisted
            .iter()
            .any(|i| i.starts_with(&d_uid) && i.ends_with(":deleted")),
        "{relisted:?}"
    );
    // The marks are gone: relisting again adds nothing.
    relist_into(&j, &resolved).await;
    assert_eq!(events(&j).await.len(), all.len());
    j.close().await.unwrap();
}

/// A rotated Secret changes only a redacted value (and no `generation`: Secrets have none): the
/// index's digest of it still tells the change, on a watch and on a relist, and no digest or
/// value reaches an event.
#[tokio::test]
async fn a_change_to_a_redacted_value_alone_is_still_an_update() {
    let (sim, _) = cluster().await;
    let mut spec = spec();
    spec.group = String::new();
    spec.kind = Some("Secret".into());
    spec.template.group = String::new();
    spec.template.kind = "Secret".into();
    spec.template.redact = vec!["/data".into()];
    let resolved = crate::watch::resolve(&sim.client().unwrap(), &spec)
        .await
        .unwrap()
        .expect("secrets are served");
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    let secrets = ResourceRef::namespaced("", "v1", "secrets", "default");
    sim.create(
        &secrets,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "default"},
               "data": {"password": "b25l"}}),
    )
    .unwrap();
    let (health, ns) = (Health::default(), NamespaceCache::default());
    let rec = Recorder::new(&j, &spec, &resolved, &health, &ns);
    relist(&rec, 2).await.unwrap();
    let rotate = |to: &str| {
        sim.merge_patch(&secrets, "s", &json!({"data": {"password": to}}))
            .unwrap()
    };
    // On a relist after a gap.
    let two = rotate("dHdv");
    relist(&rec, 2).await.unwrap();
    // On a watch (the first watched state also differs from the listed one in `apiVersion` and
    // `kind`, which list items lack; the second differs in the secret alone).
    let mut at = String::new();
    let three = rotate("dGhyZWU=");
    let four = rotate("Zm91cg==");
    for o in [&three, &four] {
        rec.record_watch(vec![(Seen::Modified, o.clone())], &mut at)
            .await
            .unwrap();
    }
    // The same value again (a bookkeeping-only write) is still nothing.
    let mut bumped = four.clone();
    bumped["metadata"]["resourceVersion"] = json!((rv(&four) + 1).to_string());
    rec.record_watch(vec![(Seen::Modified, bumped)], &mut at)
        .await
        .unwrap();
    let all = events(&j).await;
    let ops: Vec<&str> = all
        .iter()
        .map(|e| e["type"].as_str().unwrap().rsplit('.').next().unwrap())
        .collect();
    assert_eq!(
        ops,
        ["created", "updated", "updated", "updated"],
        "{all:#?}"
    );
    assert_eq!(
        all.iter().map(|e| id(e).to_string()).collect::<Vec<_>>()[1..],
        [two, three, four.clone()].map(|o| format!("{}:{}:updated", uid(&o), rv(&o)))
    );
    for e in &all {
        let text = e.to_string();
        assert!(!text.contains(REDACTED_DIGESTS), "{text}");
        for value in ["b25l", "dHdv", "dGhyZWU=", "Zm91cg=="] {
            assert!(!text.contains(value), "{text}");
        }
        assert_eq!(e["data"]["object"]["data"], "[redacted]");
    }
    // The deletions reported for a gone resource's index (a group pattern's deleted CRD) come
    // from the index entries, digests and all: the digests stay in the journal.
    assert_eq!(super::report_gone(&j, &spec, &resolved.stream).unwrap(), 1);
    let all = events(&j).await;
    let gone = all.last().unwrap();
    let gone_id = id(gone).to_string();
    assert!(
        gone_id.starts_with(&format!("{}:", uid(&four))) && gone_id.ends_with(":deleted"),
        "{gone:#}"
    );
    assert!(!gone.to_string().contains(REDACTED_DIGESTS), "{gone:#}");
    assert_eq!(gone["data"]["object"]["data"], "[redacted]");
}

/// A relist whose changes are all filtered still appends in bounded chunks: index updates fill a
/// chunk as events do.
#[test]
fn index_updates_alone_fill_a_relist_chunk() {
    let mut p = Pending::default();
    for i in 0..RELIST_CHUNK - 1 {
        p.index.push(IndexUpdate::Remove {
            key: format!("default/{i}"),
        });
    }
    assert!(!p.chunk_full());
    p.index.push(IndexUpdate::Remove {
        key: "default/last".into(),
    });
    assert!(p.chunk_full());
    let events = Pending {
        events: vec![Vec::new(); RELIST_CHUNK],
        ..Pending::default()
    };
    assert!(events.chunk_full());
}

/// A simulator holding widgets `a` to `f` (so a relist of page size 2 reads three pages) and an
/// empty journal; the directory must outlive the journal.
async fn six_widgets() -> (Simulator, Resolved, tempfile::TempDir, Journal) {
    let (sim, resolved) = cluster().await;
    let w = widgets();
    for n in ["a", "b", "c", "d", "e", "f"] {
        sim.create(&w, widget(n, 1)).unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path());
    (sim, resolved, tmp, j)
}

/// Journaled events, durable or not yet (what a poller sees while a relist runs).
fn journaled(j: &Journal) -> usize {
    j.head() as usize
}

/// Every list request of the test's resource waits this long before the server answers it.
fn slow_lists(sim: &Simulator, delay: Duration) {
    sim.add_latency(herald_sim::LatencyRule {
        path_prefix: "/apis/example.com/v1/".into(),
        delay,
        client: None,
    });
}

/// A relist streams: the first page's events are journaled while later pages are still being
/// read, not once the whole list is in memory.
#[tokio::test]
async fn the_first_page_is_journaled_while_later_pages_are_read() {
    let (sim, resolved, _tmp, j) = six_widgets().await;
    // Three pages of two, each answered half a second after it is asked for.
    slow_lists(&sim, Duration::from_millis(500));
    let done = std::sync::atomic::AtomicBool::new(false);
    let run = async {
        let rv = relist_into(&j, &resolved).await;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        rv
    };
    let watch = async {
        loop {
            let n = journaled(&j);
            if n > 0 {
                return (n, done.load(std::sync::atomic::Ordering::SeqCst));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let (_, (first_seen, finished)) = tokio::join!(run, watch);
    assert!(
        !finished && first_seen < 6,
        "the first events were journaled only with the whole list ({first_seen} of 6, relist finished: {finished})"
    );
    let all = events(&j).await;
    assert_eq!(all.len(), 6);
    assert!(all.iter().all(|e| id(e).ends_with(":created")));
    j.close().await.unwrap();
}

/// The list's snapshot expires after its first page was reconciled and journaled (410 on the
/// continue token): the relist starts over at a newer snapshot, and every change comes out once —
/// the one already reported from the expired snapshot is not reported again, the ones made
/// while the list was being read are.
#[tokio::test]
async fn a_list_expired_mid_way_starts_over_and_reports_each_change_once() {
    let (sim, resolved, _tmp, j) = six_widgets().await;
    let w = widgets();
    relist_into(&j, &resolved).await;
    let before = events(&j).await.len();
    assert_eq!(before, 6);
    // Missed while herald was away: found by the relist's first page (a, b).
    sim.merge_patch(&w, "a", &json!({"spec": {"v": 2}}))
        .unwrap();

    slow_lists(&sim, Duration::from_millis(500));
    let run = relist_into(&j, &resolved);
    let meddle = async {
        // Once the first page's update is journaled: changes behind and ahead of the list's
        // position, then the history compacted, so the next page's continue token is refused.
        while journaled(&j) < 7 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        sim.delete(&w, "b").unwrap();
        sim.merge_patch(&w, "c", &json!({"spec": {"v": 2}}))
            .unwrap();
        sim.create(&w, widget("g", 1)).unwrap();
        sim.compact();
        sim.clear_faults();
    };
    let (list_rv, ()) = tokio::join!(run, meddle);
    assert!(
        list_rv.parse::<u64>().unwrap() >= sim.resource_version(),
        "the resume point is the newer snapshot's: {list_rv}"
    );
    let all = events(&j).await;
    let mut got: Vec<String> = all[before..].iter().map(name_and_op).collect();
    got.sort();
    assert_eq!(
        got,
        ["a:updated", "b:deleted", "c:updated", "g:created"],
        "{all:#?}"
    );
    let ids: std::collections::HashSet<&str> = all.iter().map(id).collect();
    assert_eq!(ids.len(), all.len(), "an id twice");
    // Nothing is left for another relist to find.
    relist_into(&j, &resolved).await;
    assert_eq!(events(&j).await.len(), all.len());
    j.close().await.unwrap();
}

/// A first sync (empty index) skips the walk for deletions, as every index entry is its own; but
/// one whose list expired mid-way (410) must still walk: an object the expired snapshot listed,
/// reported as created and deleted before the newer snapshot, comes out as deleted.
#[tokio::test]
async fn a_first_sync_whose_list_expired_mid_way_reports_what_went_since_the_expired_snapshot() {
    let (sim, resolved, _tmp, j) = six_widgets().await;
    let w = widgets();
    slow_lists(&sim, Duration::from_millis(500));
    let run = relist_into(&j, &resolved);
    let meddle = async {
        // Once the first page (a, b) is journaled: `a` goes, and the history is compacted, so
        // the next page's continue token is refused and the list starts over without `a`.
        while journaled(&j) < 2 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        sim.delete(&w, "a").unwrap();
        sim.compact();
        sim.clear_faults();
    };
    tokio::join!(run, meddle);
    let all = events(&j).await;
    let got: Vec<String> = all.iter().map(name_and_op).collect();
    let mut sorted = got.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "a:created",
            "a:deleted",
            "b:created",
            "c:created",
            "d:created",
            "e:created",
            "f:created"
        ],
        "{got:?}"
    );
    // Nothing is left for another relist to find.
    relist_into(&j, &resolved).await;
    assert_eq!(events(&j).await.len(), all.len());
    j.close().await.unwrap();
}

/// A relist's `data.object` keeps the key order the API server sent (no typed object in
/// between that re-orders `metadata`).
#[tokio::test]
async fn a_relisted_object_keeps_the_servers_key_order() {
    let (sim, resolved) = cluster().await;
    let w = widgets();
    sim.create(&w, widget("a", 1)).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path());
    relist_into(&j, &resolved).await;
    let all = events(&j).await;
    let client = sim.client().unwrap();
    let raw: Value = client
        .request(
            kube::core::Request::new("/apis/example.com/v1/namespaces/default/widgets")
                .get("a", &kube::api::GetParams::default())
                .unwrap(),
        )
        .await
        .unwrap();
    let keys = |o: &Value| -> Vec<String> {
        o["metadata"]
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| *k != "managedFields")
            .cloned()
            .collect()
    };
    let sent = &all[0]["data"]["object"];
    assert_eq!(keys(sent), keys(&raw));
    let top = |o: &Value| -> Vec<String> { o.as_object().unwrap().keys().cloned().collect() };
    assert_eq!(top(sent), top(&raw));
    j.close().await.unwrap();
}

/// An object that left a selector but lives on is read back as the API server sends it: its
/// update carries the server's key order and the metadata fields a typed object would drop.
#[tokio::test]
async fn a_selector_exit_reads_the_object_as_the_server_sends_it() {
    let (sim, resolved) = cluster().await;
    let w = widgets();
    let mut object = widget("a", 1);
    object["metadata"]["labels"] = json!({"keep": "yes"});
    object["metadata"]["zNotInObjectMeta"] = json!("kept");
    let created = sim.create(&w, object).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path());
    let spec = WatchSpec {
        label_selector: Some("keep=yes".into()),
        ..spec()
    };
    let (health, ns) = (Health::default(), NamespaceCache::default());
    let rec = Recorder::new(&j, &spec, &resolved, &health, &ns);
    let mut at = String::new();
    rec.record_watch(vec![(Seen::Added, created.clone())], &mut at)
        .await
        .unwrap();
    let changed = sim
        .merge_patch(
            &w,
            "a",
            &json!({"metadata": {"labels": {"keep": "no"}}, "spec": {"v": 2}}),
        )
        .unwrap();
    rec.record_watch(vec![(Seen::Deleted, created)], &mut at)
        .await
        .unwrap();
    let all = events(&j).await;
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(
        id(&all[1]),
        format!("{}:{}:updated", uid(&changed), rv(&changed))
    );
    let raw: Value = sim
        .client()
        .unwrap()
        .request(
            kube::core::Request::new("/apis/example.com/v1/namespaces/default/widgets")
                .get("a", &kube::api::GetParams::default())
                .unwrap(),
        )
        .await
        .unwrap();
    let sent = &all[1]["data"]["object"];
    assert_eq!(sent["metadata"]["zNotInObjectMeta"], "kept");
    let keys = |o: &Value| -> Vec<String> {
        o["metadata"]
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| *k != "managedFields")
            .cloned()
            .collect()
    };
    assert_eq!(keys(sent), keys(&raw));
}

/// The relist of a watcher whose resource says `initialState: skip`.
async fn relist_skipping(j: &Journal, resolved: &Resolved) -> String {
    let mut spec = spec();
    spec.initial_emit = false;
    let (health, ns) = (Health::default(), NamespaceCache::default());
    let rec = Recorder::new(j, &spec, resolved, &health, &ns);
    relist(&rec, 2).await.unwrap()
}

/// A first sync with `initialState: skip` stopped after its first page (as a crash or a failed
/// page would stop it) leaves its marker beside the half-filled index; the next relist continues
/// it silently instead of reporting every object the first one had not reached as `created`.
/// Only what changes after it completes becomes an event.
#[tokio::test]
async fn a_skipping_first_sync_stopped_half_way_continues_without_events() {
    let (sim, resolved, _tmp, j) = six_widgets().await;
    let w = widgets();
    slow_lists(&sim, Duration::from_millis(300));
    let stream = resolved.stream.clone();
    let indexed = |j: &Journal| j.index_keys(&stream).unwrap().count();
    tokio::select! {
        _ = relist_skipping(&j, &resolved) => panic!("the first sync finished before it was stopped"),
        () = async {
            while indexed(&j) == 0 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        } => {}
    }
    sim.clear_faults();
    let half = indexed(&j);
    assert!((1..6).contains(&half), "{half} of 6 indexed");
    assert!(j.first_sync_skipping(&stream).unwrap(), "no marker");
    assert_eq!(j.checkpoint(&stream).unwrap(), None);

    relist_skipping(&j, &resolved).await;
    assert_eq!(
        events(&j).await,
        Vec::<Value>::new(),
        "the initial state was reported"
    );
    assert_eq!(indexed(&j), 6);
    assert!(
        !j.first_sync_skipping(&stream).unwrap(),
        "the marker outlived the checkpoint"
    );
    assert!(j.checkpoint(&stream).unwrap().is_some());

    // Done: from now on a relist reports changes.
    let b = sim
        .merge_patch(&w, "b", &json!({"spec": {"v": 2}}))
        .unwrap();
    relist_skipping(&j, &resolved).await;
    let all = events(&j).await;
    assert_eq!(
        all.iter().map(id).collect::<Vec<_>>(),
        [format!("{}:{}:updated", uid(&b), rv(&b))]
    );
    j.close().await.unwrap();
}

/// A stream that skipped its initial state and finished its first sync, whose checkpoint a
/// salvage then dropped: an index without a checkpoint (and without a marker) is no first start,
/// so the relist reports the differences, `initialState: skip` or not.
#[tokio::test]
async fn a_skipping_stream_whose_checkpoint_a_salvage_dropped_reports_the_differences() {
    let (sim, resolved) = cluster().await;
    let w = widgets();
    for n in ["a", "b"] {
        sim.create(&w, widget(n, 1)).unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let j = journal(tmp.path());
    relist_skipping(&j, &resolved).await;
    assert_eq!(events(&j).await.len(), 0);
    let c = sim.create(&w, widget("c", 1)).unwrap();
    let (spec, health, ns) = (spec(), Health::default(), NamespaceCache::default());
    let rec = Recorder::new(&j, &spec, &resolved, &health, &ns);
    let mut at = String::new();
    rec.record_watch(vec![(Seen::Added, c.clone())], &mut at)
        .await
        .unwrap();
    assert_eq!(events(&j).await.len(), 1);
    j.close().await.unwrap();
    // The store loses its one event (sled rolled back): the salvage drops every checkpoint.
    let dir = tmp.path().join("journal");
    crate::journal::roll_back_events(&dir, 1);
    let out = crate::journal::salvage(&dir, Duration::from_secs(30), false).unwrap();
    assert_eq!(
        out.checkpoints_dropped,
        std::slice::from_ref(&resolved.stream),
        "{out:?}"
    );
    assert_eq!(out.first_syncs_kept, 0, "{out:?}");
    let b = sim
        .merge_patch(&w, "b", &json!({"spec": {"v": 2}}))
        .unwrap();

    let j = journal(tmp.path());
    let kept = events(&j).await.len();
    relist_skipping(&j, &resolved).await;
    let all = events(&j).await;
    let mut relisted: Vec<&str> = all[kept..].iter().map(id).collect();
    relisted.sort_unstable();
    // Every entry is unconfirmed (no event of the lost journal carries its state): each is sent
    // whole, `c` with the id its lost event had.
    let a = &sim_object(&sim, "a").await;
    let mut want = vec![
        format!("{}:{}:created", uid(a), rv(a)),
        format!("{}:{}:created", uid(&b), rv(&b)),
        format!("{}:{}:created", uid(&c), rv(&c)),
    ];
    want.sort_unstable();
    assert_eq!(relisted, want);
    j.close().await.unwrap();
}

/// The object `name` as the simulator serves it now.
async fn sim_object(sim: &Simulator, name: &str) -> Value {
    sim.client()
        .unwrap()
        .request(
            kube::core::Request::new("/apis/example.com/v1/namespaces/default/widgets")
                .get(name, &kube::api::GetParams::default())
                .unwrap(),
        )
        .await
        .unwrap()
}

#[tokio::test]
async fn each_watched_change_is_diffed_against_what_the_index_holds_across_batches_and_relists() {
    let (sim, resolved) = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    let w = widgets();
    sim.create(&w, widget("n", 1)).unwrap();
    let (spec, health, ns) = (spec(), Health::default(), NamespaceCache::default());
    let rec = Recorder::new(&j, &spec, &resolved, &health, &ns);
    relist(&rec, 2).await.unwrap();
    let set = |spec: Value| sim.merge_patch(&w, "n", &json!({ "spec": spec })).unwrap();
    let mut at = String::new();
    // Two watch batches: the second compares with the first's state (which the watch remembers).
    for v in [2, 3] {
        rec.record_watch(vec![(Seen::Modified, set(json!({"v": v})))], &mut at)
            .await
            .unwrap();
    }
    // Changed while the watch was away; the relist reports it, and the recorder's next watched
    // change compares with the relisted state, not with the one its last watch recorded.
    set(json!({"w": 1}));
    relist(&rec, 2).await.unwrap();
    rec.record_watch(vec![(Seen::Modified, set(json!({"v": 5})))], &mut at)
        .await
        .unwrap();
    let all = events(&j).await;
    let spec_ops: Vec<Vec<&Value>> = all[1..]
        .iter()
        .map(|e| {
            e["data"]["patch"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|op| op["path"].as_str().unwrap().starts_with("/spec"))
                .collect()
        })
        .collect();
    assert_eq!(
        spec_ops,
        [
            vec![&json!({"op": "replace", "path": "/spec/v", "value": 2})],
            vec![&json!({"op": "replace", "path": "/spec/v", "value": 3})],
            vec![&json!({"op": "add", "path": "/spec/w", "value": 1})],
            vec![&json!({"op": "replace", "path": "/spec/v", "value": 5})],
        ],
        "{all:#?}"
    );
}

/// An object of a resource that redacts nothing may still carry a top-level member named like
/// the index's digests (a schema that preserves unknown fields): events leave that member out of
/// `data.object`, so their patch must not name it either (the patch written while deciding the
/// update is of the raw states).
#[tokio::test]
async fn a_member_named_like_the_digests_stays_out_of_the_patch_too() {
    let (sim, resolved) = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    let w = widgets();
    sim.create(&w, widget("n", 1)).unwrap();
    let (spec, health, ns) = (spec(), Health::default(), NamespaceCache::default());
    let rec = Recorder::new(&j, &spec, &resolved, &health, &ns);
    relist(&rec, 2).await.unwrap();
    let mut changed = sim
        .merge_patch(&w, "n", &json!({"spec": {"v": 2}}))
        .unwrap();
    changed[REDACTED_DIGESTS] = json!({"/spec": "not a digest"});
    let mut at = String::new();
    rec.record_watch(vec![(Seen::Modified, changed)], &mut at)
        .await
        .unwrap();
    let all = events(&j).await;
    assert_eq!(all.len(), 2, "{all:#?}");
    assert!(all[1]["data"]["object"].get(REDACTED_DIGESTS).is_none());
    assert_eq!(
        all[1]["data"]["patch"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|op| !op["path"].as_str().unwrap().starts_with("/metadata"))
            .collect::<Vec<_>>(),
        [&json!({"op": "replace", "path": "/spec/v", "value": 2})],
        "{all:#?}"
    );
}

/// A relist stopped half-way (its watcher stopped for a reload) returns only once the chunk it
/// was appending has landed: nothing of it is written after it returned, where it would race the
/// watcher that replaces it on the same stream (an index entry put back to an older state). The
/// relist that follows finds the index as the stopped one left it and reports each object once.
#[tokio::test]
async fn a_stopped_relist_writes_nothing_after_it_returned() {
    let (sim, resolved, _tmp, j) = six_widgets().await;
    slow_lists(&sim, Duration::from_millis(300));
    let (spec, health, ns) = (spec(), Health::default(), NamespaceCache::default());
    let rec = Recorder::new(&j, &spec, &resolved, &health, &ns);
    let stream = resolved.stream.clone();
    let indexed = |j: &Journal| j.index_keys(&stream).unwrap().count();
    // Stopped as soon as the first page's chunk is on its way (the first events journaled).
    let stop = async {
        while j.head() == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    let stopped = relist_until(&rec, 2, stop).await;
    assert!(stopped.is_none(), "the relist ended before it was stopped");
    let (head, keys) = (j.head(), indexed(&j));
    assert!((1..6).contains(&keys), "{keys} of 6 indexed");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        (j.head(), indexed(&j)),
        (head, keys),
        "the stopped relist wrote after it returned"
    );

    sim.clear_faults();
    relist(&rec, 2).await.unwrap();
    let all = events(&j).await;
    let mut ids: Vec<&str> = all.iter().map(id).collect();
    assert_eq!(ids.len(), 6, "{ids:?}");
    assert!(ids.iter().all(|i| i.ends_with(":created")), "{ids:?}");
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 6, "an object reported twice");
    assert_eq!(indexed(&j), 6);
    j.close().await.unwrap();
}

/// Watch batches recorded while the one before is still appending diff against that one's states:
/// an object too large for the recorder's memory of appended states ([`KNOWN_OBJECT_MAX`]) is read
/// from the batch in flight, not from a store that may not hold it yet (it would be reported
/// `created` again, or its patch taken against an older state).
#[tokio::test]
async fn a_batch_recorded_while_the_one_before_appends_diffs_against_that_ones_states() {
    let (sim, resolved) = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    let w = widgets();
    let big = "x".repeat(KNOWN_OBJECT_MAX + 1);
    let (spec, health, ns) = (spec(), Health::default(), NamespaceCache::default());
    let rec = Recorder::new(&j, &spec, &resolved, &health, &ns);
    let mut at = String::new();
    let mut seen = vec![(
        Seen::Added,
        sim.create(
            &w,
            json!({"apiVersion": "example.com/v1", "kind": "Widget",
                   "metadata": {"name": "n", "namespace": "default"}, "spec": {"v": 1, "big": big}}),
        )
        .unwrap(),
    )];
    for v in [2, 3] {
        seen.push((
            Seen::Modified,
            sim.merge_patch(&w, "n", &json!({"spec": {"v": v}}))
                .unwrap(),
        ));
    }
    let last = rv(&seen[2].1).to_string();
    for change in seen {
        rec.record_watch_beside(vec![(change.0, change.1, None)], &mut at)
            .await
            .unwrap();
    }
    rec.settle_watch(&mut at).await.unwrap();
    assert_eq!(at, last);
    assert_eq!(j.checkpoint(&resolved.stream).unwrap(), Some(last));
    let all = events(&j).await;
    let spec_ops: Vec<(&str, Vec<&Value>)> = all
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().rsplit('.').next().unwrap(),
                e["data"]["patch"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|op| op["path"].as_str().unwrap().starts_with("/spec"))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        spec_ops,
        [
            ("created", vec![]),
            (
                "updated",
                vec![&json!({"op": "replace", "path": "/spec/v", "value": 2})]
            ),
            (
                "updated",
                vec![&json!({"op": "replace", "path": "/spec/v", "value": 3})]
            ),
        ],
        "{all:#?}"
    );
}

/// A batch whose append fails stops the watch there: the failure comes back from recording the
/// next batch (which is then not appended), the resume point stays where the last landed batch
/// left it, and the checkpoint never passes an event that is not in the journal.
#[tokio::test]
async fn a_failed_append_stops_the_batches_after_it_and_the_resume_point_stays_behind_it() {
    let (sim, resolved) = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let w = widgets();
    let a = sim.create(&w, widget("a", 1)).unwrap();
    let b = sim.create(&w, widget("b", 1)).unwrap();
    let c = sim.create(&w, widget("c", 1)).unwrap();
    let (spec, health, ns) = (spec(), Health::default(), NamespaceCache::default());
    {
        let j = journal(dir.path());
        let rec = Recorder::new(&j, &spec, &resolved, &health, &ns);
        let mut at = String::new();
        rec.record_watch_beside(vec![(Seen::Added, a.clone(), None)], &mut at)
            .await
            .unwrap();
        rec.settle_watch(&mut at).await.unwrap();
        assert_eq!(at, rv(&a).to_string());
        // From here on the journal refuses every write: `b`'s append fails on its thread.
        j.clone().close().await.unwrap();
        rec.record_watch_beside(vec![(Seen::Added, b, None)], &mut at)
            .await
            .unwrap();
        let failed = rec
            .record_watch_beside(vec![(Seen::Added, c, None)], &mut at)
            .await;
        assert!(
            matches!(failed, Err(SyncError::JournalFailed(_))),
            "{failed:?}"
        );
        assert_eq!(at, rv(&a).to_string());
        // Nothing is left appending: `c` was never handed to the journal.
        rec.settle_watch(&mut at).await.unwrap();
        assert_eq!(at, rv(&a).to_string());
    }
    let j = journal(dir.path());
    assert_eq!(
        j.checkpoint(&resolved.stream).unwrap(),
        Some(rv(&a).to_string())
    );
    let names: Vec<String> = events(&j).await.iter().map(name_and_op).collect();
    assert_eq!(names, ["a:created"]);
}

/// A recorder dropped with a batch still appending (its watcher aborted for not stopping in time)
/// returns only once the batch landed: the watcher that replaces it then finds the index and the
/// checkpoint as the batch left them, and no write of the old one lands after.
#[tokio::test]
async fn a_recorder_dropped_with_a_batch_appending_waits_for_it_to_land() {
    let (sim, resolved) = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let j = journal(dir.path());
    let w = widgets();
    let (spec, health, ns) = (spec(), Health::default(), NamespaceCache::default());
    let mut batch = Vec::new();
    for i in 0..200 {
        let created = sim.create(&w, widget(&format!("w{i}"), i)).unwrap();
        let json = serde_json::to_vec(&created).ok();
        batch.push((Seen::Added, created, json));
    }
    let last = rv(&batch[199].1).to_string();
    let rec = Recorder::new(&j, &spec, &resolved, &health, &ns);
    let mut at = String::new();
    rec.record_watch_beside(batch, &mut at).await.unwrap();
    drop(rec);
    assert_eq!(j.checkpoint(&resolved.stream).unwrap(), Some(last));
    assert_eq!(events(&j).await.len(), 200);
}

/// An event's bytes without its `time` (the moment of recording).
fn timeless(event: &[u8]) -> Vec<u8> {
    let text = String::from_utf8(event.to_vec()).unwrap();
    let at = text.find("\"time\":\"").unwrap() + 8;
    let end = at + text[at..].find('"').unwrap();
    format!("{}{}", &text[..at], &text[end..]).into_bytes()
}

/// A watch recorded from the objects' bytes and spans (the watch's decoder on a resource that
/// filters nothing by content) journals, byte for byte, the events and index entries the tree
/// path journals for the same lines: creations, updates (patches of reordered members, floats
/// spelled two ways, bookkeeping-only changes filtered), a repeated state, a new uid under the
/// same name, objects that are not plain (taking the tree path beside the spans path, in either
/// order), managedFields skipped, deletions, across batches and within one.
#[tokio::test]
async fn the_spans_path_journals_what_the_tree_path_journals() {
    let (_sim, resolved) = cluster().await;
    let obj = |name: &str, uid: &str, rv: u64, spec: Value, status: Value| {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": name, "namespace": "default", "uid": uid,
                            "resourceVersion": rv.to_string(), "generation": 7,
                            "managedFields": [{"manager": "m", "time": rv}],
                            "labels": {"a": "1", "b/c": "2"}},
               "spec": spec, "status": status})
    };
    // A member named like the index's own makes an object take the tree path.
    let extra = |mut v: Value| {
        v["@heraldExtra"] = json!({"k": 1});
        v
    };
    let conditions = json!([{"type": "Ready", "status": "True"}, {"type": "Big", "n": 0.0}]);
    let reordered = json!([{"status": "True", "type": "Ready"}, {"n": -0.0, "type": "Big"}]);
    let batches = vec![
        vec![
            (Seen::Added, obj("n", "u1", 1, json!({"v": 1}), json!({}))),
            (
                Seen::Modified,
                obj(
                    "n",
                    "u1",
                    2,
                    json!({"v": 2, "l": [1, 2]}),
                    conditions.clone(),
                ),
            ),
            (
                Seen::Modified,
                obj(
                    "n",
                    "u1",
                    2,
                    json!({"v": 2, "l": [1, 2]}),
                    conditions.clone(),
                ),
            ),
            (
                Seen::Added,
                obj("odd\"name", "u9", 3, json!({"v": 1}), json!({})),
            ),
            (
                Seen::Added,
                extra(obj("m", "u5", 3, json!({"v": 1}), json!({}))),
            ),
        ],
        vec![
            // Only the bookkeeping moved (the managedFields are skipped anyway).
            (
                Seen::Modified,
                obj(
                    "n",
                    "u1",
                    4,
                    json!({"v": 2, "l": [1, 2]}),
                    reordered.clone(),
                ),
            ),
            (
                Seen::Modified,
                obj("odd\"name", "u9", 5, json!({"v": 2}), json!({})),
            ),
            (
                Seen::Modified,
                obj("n", "u1", 6, json!({"l": [2], "w": {"x": "~/"}}), reordered),
            ),
            (Seen::Added, obj("n", "u2", 8, json!({"v": 1}), json!(null))),
            (
                Seen::Modified,
                obj("m", "u5", 8, json!({"v": 2}), json!({})),
            ),
        ],
        vec![
            (
                Seen::Deleted,
                obj("n", "u2", 9, json!({"v": 1}), json!(null)),
            ),
            (Seen::Bookmark, json!("10")),
            (
                Seen::Modified,
                extra(obj("m", "u5", 9, json!({"v": 3}), json!({}))),
            ),
            (
                Seen::Deleted,
                obj("odd\"name", "u9", 11, json!({"v": 2}), json!({})),
            ),
        ],
    ];
    let mut journals = Vec::new();
    for spans in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let j = journal(dir.path());
        let spec = spec_on(spans);
        let (health, ns) = (Health::default(), NamespaceCache::default());
        let rec = Recorder::new(&j, &spec, &resolved, &health, &ns);
        assert_eq!(rec.spans_path(), spans);
        let mut at = String::new();
        for batch in &batches {
            let changes = batch
                .iter()
                .map(|(seen, v)| {
                    let object = if *seen == Seen::Bookmark {
                        Object::Tree(v.clone(), None)
                    } else {
                        watched(v, spans)
                    };
                    (*seen, object)
                })
                .collect();
            rec.record_objects_beside(changes, &mut at).await.unwrap();
        }
        rec.settle_watch(&mut at).await.unwrap();
        assert_eq!(at, "11");
        let events = durable_events(&j).await;
        let index = j.index_scan(&resolved.stream).unwrap();
        let filtered = health.filtered.load(std::sync::atomic::Ordering::Relaxed);
        journals.push((
            events,
            index,
            j.checkpoint(&resolved.stream).unwrap(),
            filtered,
        ));
        j.close().await.unwrap();
    }
    let ops: Vec<String> = journals[0]
        .0
        .iter()
        .map(|e| {
            let e: Value = serde_json::from_str(e).unwrap();
            format!("{} {}", e["subject"], e["type"])
        })
        .collect();
    // The tree path's events are the ones expected, so the comparison below is not vacuous.
    assert_eq!(ops.len(), 12, "{ops:#?}");
    assert_eq!(journals[0].3, 1, "the bookkeeping-only update is filtered");
    assert_eq!(journals[1], journals[0]);
}

/// A relist on the spans path (its list pages read into bytes and spans, the index's states read
/// back as bytes) journals, byte for byte, the events and index entries the tree path journals for
/// the same cluster: the first sync, then updates, a deletion, a re-creation under a new uid, a
/// new object and an unchanged one found by a relist after a gap.
#[tokio::test]
async fn a_relist_on_the_spans_path_journals_what_the_tree_path_journals() {
    let (sim, resolved) = cluster().await;
    let w = widgets();
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let journals = [journal(dirs[0].path()), journal(dirs[1].path())];
    let specs = [spec_on(false), spec_on(true)];
    let (health, ns) = (Health::default(), NamespaceCache::default());
    let relist_both = || async {
        for (j, spec) in journals.iter().zip(&specs) {
            let rec = Recorder::new(j, spec, &resolved, &health, &ns);
            relist(&rec, 2).await.unwrap();
        }
    };
    for n in ["kept", "updated", "gone", "again", "nested"] {
        sim.create(&w, widget(n, 1)).unwrap();
    }
    sim.merge_patch(
        &w,
        "nested",
        &json!({"status": {"conditions": [{"type": "Ready", "n": 1.5}]}}),
    )
    .unwrap();
    relist_both().await;
    sim.merge_patch(&w, "updated", &json!({"spec": {"v": 2, "w": {"a/b": "~"}}}))
        .unwrap();
    sim.merge_patch(
        &w,
        "nested",
        &json!({"status": {"conditions": [{"type": "Ready", "n": 2}]}}),
    )
    .unwrap();
    sim.delete(&w, "gone").unwrap();
    sim.delete(&w, "again").unwrap();
    sim.create(&w, widget("again", 2)).unwrap();
    sim.create(&w, widget("fresh", 1)).unwrap();
    relist_both().await;

    let mut seen = Vec::new();
    for j in &journals {
        seen.push((
            durable_events(j).await,
            j.index_scan(&resolved.stream).unwrap(),
        ));
    }
    assert!(!Recorder::new(&journals[0], &specs[0], &resolved, &health, &ns).spans_path());
    assert!(Recorder::new(&journals[1], &specs[1], &resolved, &health, &ns).spans_path());
    // 5 created, then 2 updated, 1 deleted, 1 replaced (deleted + created), 1 created.
    assert_eq!(seen[0].0.len(), 11, "{:#?}", seen[0].0);
    assert_eq!(seen[1], seen[0]);
    for j in journals {
        j.close().await.unwrap();
    }
}

/// The recorder vouches (a layout beside the bytes in the journal's memory) for the events it
/// found valid and wrote with unescaped attributes, on both paths, and for no other: an event
/// journaled to be dead-lettered (no resourceVersion: an empty `sequence`) and one whose
/// partition key holds an escape are read in full by delivery, and every layout is where a
/// reader finds the attributes.
#[tokio::test]
async fn the_recorder_vouches_for_the_valid_events_it_wrote_and_no_other() {
    let (_sim, resolved) = cluster().await;
    let obj = |name: &str, uid: &str, rv: Option<u64>| {
        let mut v = json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": name, "namespace": "default", "uid": uid},
               "spec": {"v": 1, "s": "\u{1}é"}});
        if let Some(rv) = rv {
            v["metadata"]["resourceVersion"] = json!(rv.to_string());
        }
        v
    };
    // Valid, and read as a watch line, but nested so deep that its event (two levels deeper) is
    // refused by every reader: journaled to be dead-lettered, so never vouched for.
    let mut deep = obj("deep", "u5", Some(5));
    let mut nest = json!(1);
    for _ in 0..126 {
        nest = json!({ "n": nest });
    }
    deep["spec"] = nest;
    assert!(serde_json::from_str::<serde_json::Value>(&deep.to_string()).is_ok());
    for spans in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let j = journal(dir.path());
        let spec = spec_on(spans);
        let (health, ns) = (Health::default(), NamespaceCache::default());
        let rec = Recorder::new(&j, &spec, &resolved, &health, &ns);
        let changes = [
            obj("a", "u1", Some(1)),
            obj("no-version", "u2", None),
            obj("odd\"name", "u3", Some(3)),
            obj("b", "u4", Some(4)),
            deep.clone(),
        ]
        .into_iter()
        .map(|v| (Seen::Added, watched(&v, spans)))
        .collect();
        let mut at = String::new();
        rec.record_objects_beside(changes, &mut at).await.unwrap();
        rec.settle_watch(&mut at).await.unwrap();
        j.durable(u64::MAX).await.unwrap();
        let rows = j.read_vouched(READER, 0, 100).unwrap();
        let vouched: Vec<bool> = rows.iter().map(|(_, _, l)| l.is_some()).collect();
        assert_eq!(
            vouched,
            [true, false, false, true, false],
            "spans path: {spans}"
        );
        let no_version = herald_sink_core::Journaled::read_lazily(rows[1].1.clone());
        assert!(no_version.is_err(), "it is dead-lettered by every reader");
        let too_deep = herald_sink_core::CloudEvent::from_structured_json(&rows[4].1);
        assert!(too_deep.is_err(), "it is dead-lettered by every reader");
        for (_, bytes, layout) in &rows {
            let Some(layout) = layout else { continue };
            let full = herald_sink_core::CloudEvent::from_structured_json(bytes).unwrap();
            let read = herald_sink_core::Journaled::vouched(bytes.clone(), layout).unwrap();
            assert_eq!(read.id(), full.id);
            assert_eq!(read.partition_key(), full.partition_key());
            assert_eq!(read.time(), full.time.as_deref());
            assert_eq!(*read, full);
        }
        j.close().await.unwrap();
    }
}

/// A LIST page the scanner reads is the page serde reads (its `metadata` strings, each item's
/// [`Spanned`]); what it declines, serde decides. Plain pages are taken.
#[test]
fn the_scanner_reads_list_pages_as_serde_does() {
    fn agree<const STRIP: bool>(text: &str) -> bool {
        let Some((meta, items)) = super::super::scan::page(text, STRIP) else {
            return false;
        };
        let page = serde_json::from_str::<Page<super::super::Spans<STRIP>>>(text)
            .unwrap_or_else(|e| panic!("the scanner took what serde refuses ({e}): {text}"));
        assert_eq!(
            (meta.resource_version, meta.continue_),
            (page.metadata.resource_version, page.metadata.continue_),
            "{text}"
        );
        let by_serde: Vec<Spanned> = page
            .items
            .unwrap_or_default()
            .into_iter()
            .map(|s| s.0)
            .collect();
        assert_eq!(items, by_serde, "strip: {STRIP}: {text}");
        true
    }
    let item = |i: usize| {
        format!(
            r#"{{"apiVersion":"example.com/v1","kind":"Widget","metadata":{{"name":"w{i}","namespace":"ns","uid":"u-{i}","resourceVersion":"{i}","generation":{i},"managedFields":[{{"manager":"m","fieldsV1":{{"f:spec":{{"k:{{\"a\":1}}":{{}}}}}}}}],"labels":{{"a":"b\u0001"}}}},"spec":{{"n":[{i},-{i},true,null],"s":"é\"\\\t"}}}}"#
        )
    };
    let items = (1..=20).map(item).collect::<Vec<_>>().join(",");
    let taken = [
        format!(
            r#"{{"kind":"WidgetList","apiVersion":"example.com/v1","metadata":{{"resourceVersion":"99","continue":"eyJ2IjoxfQ==","remainingItemCount":5}},"items":[{items}]}}"#
        ),
        format!(
            r#"{{"items":[{items}],"metadata":{{"resourceVersion":"99"}},"kind":"WidgetList"}}"#
        ),
        // As the API server writes it: Go's `json.Encoder` ends the body with a newline.
        format!(
            "{{\"kind\":\"WidgetList\",\"metadata\":{{\"resourceVersion\":\"99\"}},\"items\":[{items}]}}\n"
        ),
        r#"{"kind":"WidgetList","metadata":{"resourceVersion":"1"},"items":[]}"#.to_owned(),
        r#"{"kind":"WidgetList","metadata":{"resourceVersion":"1"},"items":null}"#.to_owned(),
        r#"{"metadata":{},"kind":"x","kind":"y"}"#.to_owned(),
        r#"{}"#.to_owned(),
        // Items that are not plain are read as serde reads them (the recorder decides).
        r#"{"metadata":{"resourceVersion":"1"},"items":[{"metadata":{"name":"a\"b"}},{"spec":1}]}"#
            .to_owned(),
    ];
    for text in &taken {
        assert!(
            agree::<false>(text) && agree::<true>(text),
            "declined: {text}"
        );
    }
    // The LIST reader of the spans path goes through the scanner (`list_page_as`); the tree
    // path's never does.
    for text in &taken {
        assert!(<super::super::Spans<true> as Item>::scan_page(text).is_some());
        assert!(<super::super::Spans<false> as Item>::scan_page(text).is_some());
        assert!(<Decoded<true> as Item>::scan_page(text).is_none());
    }
    for text in [
        // Whitespace, a float, a repeat in an item, a Go escape, a repeated page member, an item
        // that is not an object, metadata strings it does not read, invalid JSON.
        format!(r#"{{"metadata":{{"resourceVersion":"99"}}, "items":[{items}]}}"#),
        r#"{"metadata":{},"items":[{"metadata":{},"n":1.5}]}"#.to_owned(),
        r#"{"metadata":{},"items":[{"metadata":{"name":"a","name":"a"}}]}"#.to_owned(),
        r#"{"metadata":{},"items":[{"metadata":{"name":"\u003c"}}]}"#.to_owned(),
        r#"{"metadata":{"resourceVersion":"1","resourceVersion":"2"},"items":[]}"#.to_owned(),
        r#"{"metadata":{},"items":[],"items":[]}"#.to_owned(),
        r#"{"metadata":{},"items":["text"]}"#.to_owned(),
        r#"{"metadata":{"resourceVersion":null},"items":[]}"#.to_owned(),
        r#"{"metadata":{"continue":"a\/b"},"items":[]}"#.to_owned(),
        format!(r#"{{"metadata":{{}},"items":[{items}]"#),
        format!(r#"{{"metadata":{{}},"items":[{items}]}}x"#),
    ] {
        assert!(super::super::scan::page(&text, true).is_none(), "{text}");
        assert!(super::super::scan::page(&text, false).is_none(), "{text}");
    }
}
