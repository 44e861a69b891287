//! The simulator's storage: objects, the global resourceVersion counter and the bounded change history
//! that watches, continue tokens and exact-revision lists are served from (as etcd's MVCC window).

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::watch;

use super::meta;
use super::persist::{Loaded, Persist};
use super::resource::{GroupResource, ObjectKey, ResourceDef};

/// What a change did to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeType {
    Added,
    Modified,
    Deleted,
}

/// One committed write, kept in the history window.
#[derive(Debug)]
pub(crate) struct Change {
    pub(crate) rv: u64,
    pub(crate) gr: GroupResource,
    pub(crate) key: ObjectKey,
    pub(crate) kind: ChangeType,
    /// The new state; for a deletion the last stored state stamped with the deletion revision.
    pub(crate) object: Arc<Value>,
    /// The state before this change (`None` for a creation).
    pub(crate) prev: Option<Arc<Value>>,
}

/// Everything the server stores, behind one lock so that every write is atomic with its history entry.
#[derive(Debug)]
pub(crate) struct State {
    /// The global revision: the resourceVersion of the last write.
    pub(crate) rv: u64,
    /// Revisions up to this one have left the history: watches from older revisions get 410.
    pub(crate) compacted: u64,
    pub(crate) resources: BTreeMap<GroupResource, ResourceDef>,
    pub(crate) objects: BTreeMap<GroupResource, BTreeMap<ObjectKey, Arc<Value>>>,
    pub(crate) history: VecDeque<Arc<Change>>,
    history_limit: usize,
    /// The data directory, when the state is persisted.
    persist: Option<Persist>,
}

impl State {
    fn new(history_limit: usize) -> Self {
        let mut resources = BTreeMap::new();
        let builtins = [
            ResourceDef::builtin_namespaces(),
            ResourceDef::builtin_crds(),
        ]
        .into_iter()
        .chain(ResourceDef::other_builtins());
        for def in builtins {
            resources.insert(def.gr.clone(), def);
        }
        Self {
            rv: 0,
            compacted: 0,
            resources,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            persist: None,
        }
    }

    pub(crate) fn get(&self, gr: &GroupResource, key: &ObjectKey) -> Option<&Arc<Value>> {
        self.objects.get(gr)?.get(key)
    }

    /// Stores `obj` under a new revision and records the change.
    pub(crate) fn put(&mut self, gr: &GroupResource, key: ObjectKey, mut obj: Value) -> Arc<Value> {
        self.rv += 1;
        meta::meta_mut(&mut obj)
            .insert("resourceVersion".into(), Value::String(self.rv.to_string()));
        let obj = Arc::new(obj);
        let prev = self
            .objects
            .entry(gr.clone())
            .or_default()
            .insert(key.clone(), obj.clone());
        let kind = if prev.is_some() {
            ChangeType::Modified
        } else {
            ChangeType::Added
        };
        self.record(Change {
            rv: self.rv,
            gr: gr.clone(),
            key,
            kind,
            object: obj.clone(),
            prev,
        });
        obj
    }

    /// Removes an object under a new revision; the DELETED change carries its last state at that revision.
    pub(crate) fn remove(&mut self, gr: &GroupResource, key: &ObjectKey) -> Option<Arc<Value>> {
        let old = self.objects.get_mut(gr)?.remove(key)?;
        self.rv += 1;
        let mut last = (*old).clone();
        meta::meta_mut(&mut last)
            .insert("resourceVersion".into(), Value::String(self.rv.to_string()));
        let last = Arc::new(last);
        self.record(Change {
            rv: self.rv,
            gr: gr.clone(),
            key: key.clone(),
            kind: ChangeType::Deleted,
            object: last.clone(),
            prev: Some(old),
        });
        Some(last)
    }

    fn record(&mut self, change: Change) {
        if let Some(p) = &mut self.persist {
            let object = (change.kind != ChangeType::Deleted).then_some(&*change.object);
            if let Err(error) = p.append(change.rv, &change.gr, &change.key, object) {
                tracing::error!(message = "Cannot append to the simulator's change log.", %error);
            }
        }
        self.history.push_back(Arc::new(change));
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.rv;
            }
        }
    }

    /// Forgets every object and resource (a restart that lost its state). The revision carries on
    /// unless `reset_revision`, so resumes from before the restart get 410.
    pub(crate) fn reset(&mut self, reset_revision: bool) {
        let rv = if reset_revision { 0 } else { self.rv };
        let persist = self.persist.take();
        *self = State::new(self.history_limit);
        self.rv = rv;
        self.compacted = rv;
        self.persist = persist;
        self.checkpoint();
    }

    /// Adopts state loaded from a data directory: objects, the revision, and the resources their CRDs serve.
    fn adopt(&mut self, loaded: Loaded, persist: Persist) {
        self.rv = loaded.rv;
        self.compacted = loaded.rv;
        self.objects = loaded.objects;
        let crds: Vec<Arc<Value>> = self
            .objects
            .get(&GroupResource::crds())
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        for crd in crds {
            let def = super::crd::resource_def(&crd);
            self.resources.insert(def.gr.clone(), def);
        }
        self.persist = Some(persist);
    }

    /// Folds the change log into a snapshot (at shutdown, after a reset, and when the log grows).
    pub(crate) fn checkpoint(&mut self) {
        if let Some(p) = &mut self.persist
            && let Err(error) = p.fold(self.rv, &self.objects)
        {
            tracing::error!(message = "Cannot write the simulator's snapshot.", %error);
        }
    }

    fn flush_log(&mut self) {
        let Some(p) = &mut self.persist else { return };
        if let Err(error) = p.flush() {
            tracing::error!(message = "Cannot flush the simulator's change log.", %error);
        }
        if p.wants_fold() {
            self.checkpoint();
        }
    }

    /// Forgets all history: every resume from an older revision now gets 410.
    pub(crate) fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }

    /// Changes after revision `after`, at most `max`; `None` when `after` has been compacted away.
    pub(crate) fn changes_after(&self, after: u64, max: usize) -> Option<Vec<Arc<Change>>> {
        if after < self.compacted {
            return None;
        }
        let start = self.history.partition_point(|c| c.rv <= after);
        Some(self.history.range(start..).take(max).cloned().collect())
    }

    /// The objects of `gr` as they were at revision `at`, in key order, from `start` (exclusive) on.
    ///
    /// Served by undoing the history newer than `at`, so it costs what was written since, and fails
    /// (`None`) once `at` is compacted: exactly when etcd answers 410.
    pub(crate) fn snapshot(
        &self,
        gr: &GroupResource,
        at: u64,
        after_key: Option<&ObjectKey>,
    ) -> Option<BTreeMap<ObjectKey, Arc<Value>>> {
        if at < self.compacted {
            return None;
        }
        let in_range = |k: &ObjectKey| after_key.is_none_or(|a| k > a);
        let mut view: BTreeMap<ObjectKey, Arc<Value>> = self
            .objects
            .get(gr)
            .map(|objs| {
                objs.iter()
                    .filter(|(k, _)| in_range(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let start = self.history.partition_point(|c| c.rv <= at);
        // Undo newest first, so each key ends at the state before its oldest change after `at`.
        for change in self.history.range(start..).rev() {
            if change.gr != *gr || !in_range(&change.key) {
                continue;
            }
            match &change.prev {
                Some(prev) => view.insert(change.key.clone(), prev.clone()),
                None => view.remove(&change.key),
            };
        }
        Some(view)
    }
}

/// The shared store: state under a mutex plus a channel announcing the newest revision to watchers.
#[derive(Debug)]
pub(crate) struct Store {
    state: Mutex<State>,
    revision: watch::Sender<u64>,
    /// The data directory held a state written by an earlier start.
    restored: bool,
}

impl Store {
    pub(crate) fn new(history_limit: usize) -> Self {
        Self {
            state: Mutex::new(State::new(history_limit)),
            revision: watch::Sender::new(0),
            restored: false,
        }
    }

    /// Whether the data directory held a state written by an earlier start.
    pub(crate) fn restored(&self) -> bool {
        self.restored
    }

    /// A store whose state lives in `dir` (loaded now, appended on every write).
    pub(crate) fn open(history_limit: usize, dir: &Path) -> std::io::Result<Self> {
        let (persist, loaded) = Persist::open(dir)?;
        let mut state = State::new(history_limit);
        let rv = loaded.rv;
        state.adopt(loaded, persist);
        Ok(Self {
            state: Mutex::new(state),
            revision: watch::Sender::new(rv),
            // Every start writes (the seeded namespaces), so a state that has been used has a
            // revision; a new directory, or one whose first start wrote nothing yet, has none.
            restored: rv > 0,
        })
    }

    /// Locks the state for reading.
    pub(crate) fn read(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the state as the last completed write left it: every
        // write mutates through `put`/`remove`, which keep objects and history consistent.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs a write and wakes the watchers when the revision moved.
    pub(crate) fn write<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut state = self.read();
        let before = state.rv;
        let out = f(&mut state);
        if state.rv != before {
            state.flush_log();
            // Published under the lock, so watchers never see the revision go backwards.
            self.revision.send_replace(state.rv);
        }
        out
    }

    /// A receiver that changes whenever the revision moves.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.revision.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(name: &str, v: i64) -> Value {
        json!({"metadata": {"name": name}, "spec": {"v": v}})
    }

    #[test]
    fn snapshots_undo_newer_changes() {
        let mut s = State::new(100);
        let gr = GroupResource::new("g", "things");
        s.put(&gr, ObjectKey::new("", "a"), obj("a", 1));
        s.put(&gr, ObjectKey::new("", "b"), obj("b", 1));
        let at = s.rv;
        s.put(&gr, ObjectKey::new("", "a"), obj("a", 2));
        s.remove(&gr, &ObjectKey::new("", "b"));
        s.put(&gr, ObjectKey::new("", "c"), obj("c", 1));

        let snap = s.snapshot(&gr, at, None).unwrap();
        let names: Vec<_> = snap.keys().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(snap[&ObjectKey::new("", "a")]["spec"]["v"], 1);
        let after_a = s.snapshot(&gr, at, Some(&ObjectKey::new("", "a"))).unwrap();
        assert_eq!(after_a.len(), 1);
    }

    #[test]
    fn history_window_compacts_and_expires_old_revisions() {
        let mut s = State::new(2);
        let gr = GroupResource::new("g", "things");
        for i in 0..5 {
            s.put(&gr, ObjectKey::new("", "a"), obj("a", i));
        }
        assert_eq!(s.compacted, 3);
        assert!(s.changes_after(2, 10).is_none());
        let tail = s.changes_after(3, 10).unwrap();
        assert_eq!(tail.iter().map(|c| c.rv).collect::<Vec<_>>(), [4, 5]);
        assert!(s.snapshot(&gr, 2, None).is_none());
    }

    #[test]
    fn deletions_carry_the_deletion_revision() {
        let mut s = State::new(10);
        let gr = GroupResource::new("g", "things");
        s.put(&gr, ObjectKey::new("ns", "a"), obj("a", 1));
        let last = s.remove(&gr, &ObjectKey::new("ns", "a")).unwrap();
        assert_eq!(meta::resource_version(&last), "2");
        assert_eq!(s.history.back().unwrap().kind, ChangeType::Deleted);
        assert_eq!(
            meta::resource_version(s.history.back().unwrap().prev.as_ref().unwrap()),
            "1"
        );
    }
}
