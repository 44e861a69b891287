//! Server-side apply field ownership (`metadata.managedFields` in FieldsV1): owners, conflicts, force and pruning.
//
// Modelled on the API server's field manager (k8s.io/apimachinery managedfields + structured-merge-diff),
// without schemas: objects are granular maps, every array is one atomic leaf, and an object node is owned
// itself (`".": {}`) only where the real server would own it for a schema-typed custom resource — when an
// Update created it, or when an applier sent it as `{}`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// One field another manager owns that the apply would change.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Conflict {
    /// The `manager` of the managedFields entry that owns the field.
    pub(crate) manager: String,
    /// The field as the real server prints it, like `.spec.size`.
    pub(crate) field: String,
}

const APPLY: &str = "Apply";
const UPDATE: &str = "Update";
/// The real server's name for whoever set the fields of an object that had no managedFields before its first apply.
const BEFORE_FIRST_APPLY: &str = "before-first-apply";
const UNTRACKED_ROOT: [&str; 2] = ["apiVersion", "kind"];
const UNTRACKED_META: [&str; 10] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
];

/// Server-side apply of `applied` (the request body, already parsed) by `manager` onto `current` (None when the
/// object does not exist yet: the apply creates it). Returns the new object including its updated
/// `metadata.managedFields`, or the conflicts (only when `force` is false).
/// `api_version` is written into the manager's entry; `now` is an RFC 3339 timestamp for `time`.
///
/// The caller validates the body (an object with apiVersion, kind and name, no managedFields) and fills in
/// server-owned metadata (uid, resourceVersion, creationTimestamp, generation) afterwards.
///
/// Status is one field among others, with one exception standing in for the real server's separate
/// `subresource: status` entries: a body without a top-level `status` leaves the manager's status fields
/// alone, and a body with nothing but `status` leaves its other fields alone. So the caller strips `status`
/// from main-endpoint bodies when the status subresource exists, and for `/status` passes only identity
/// and `status`; a controller applying both with one manager name then settles instead of flip-flopping.
pub(crate) fn apply(
    current: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    api_version: &str,
    now: &str,
) -> Result<Value, Vec<Conflict>> {
    let Some(applied_map) = applied.as_object() else {
        // Nothing field-shaped to merge; the HTTP layer rejects such bodies before they get here.
        return Ok(current.cloned().unwrap_or_else(|| applied.clone()));
    };
    let current = current.filter(|c| c.is_object());
    let base = current.cloned().unwrap_or_else(|| skeleton(applied_map));
    let mut entries = current.map(read_entries).unwrap_or_default();
    if current.is_some() && entries.is_empty() {
        // An object nobody owns (seeded without managedFields) must not be silently taken over by its
        // first applier: the real server assigns everything to a placeholder Update manager first.
        let set = compare(&Value::Object(Map::new()), &base).added;
        if !set.is_empty() {
            entries.push(Entry::new(
                BEFORE_FIRST_APPLY,
                UPDATE,
                api_version,
                now,
                set,
            ));
        }
    }

    let mine = entries
        .iter()
        .position(|e| e.is(manager, APPLY, api_version));
    let last = mine
        .and_then(|i| entries.get(i))
        .map(|e| e.set.clone())
        .unwrap_or_default();
    let mut wanted = FieldSet::default();
    applied_fields(applied_map, &mut Vec::new(), &mut wanted);
    keep_other_endpoint(&mut wanted, &last, applied_map.contains_key("status"));

    let mut merged = base.clone();
    if let Some(m) = merged.as_object_mut() {
        merge_into(m, applied_map, &mut Vec::new());
    }
    let mut kept = wanted.clone();
    for (i, e) in entries.iter().enumerate() {
        if Some(i) != mine {
            kept.union(&e.set);
        }
    }
    let stale = last.without(&kept);
    if let Some(m) = merged.as_object_mut() {
        prune(m, &stale, Some(&kept), &mut Vec::new());
    }

    let diff = compare(&base, &merged);
    let mut changed = diff.added.clone();
    changed.union(&diff.modified);
    // Applying null deletes the value, which the diff sees as a removal; it still overrides the owner.
    changed.union(&diff.removed.intersection(&wanted));
    let changed = changed.paths();

    let mut conflicts: Vec<Conflict> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if Some(i) == mine {
            continue;
        }
        for path in &changed {
            let whole = !is_nonempty_object(get_path(&merged, path));
            if e.set.has(path) || (whole && e.set.has_below(path)) {
                let c = Conflict {
                    manager: e.manager.clone(),
                    field: display_path(path),
                };
                if !conflicts.contains(&c) {
                    conflicts.push(c);
                }
            }
        }
    }
    if !force && !conflicts.is_empty() {
        return Err(conflicts);
    }

    let mut lost = changed;
    lost.extend(diff.removed.paths());
    for (i, e) in entries.iter_mut().enumerate() {
        if Some(i) != mine {
            // The real server leaves the time of managers that merely lost fields alone.
            e.disown(&lost, &merged);
        }
    }
    let object_changed = current.is_none() || !diff.is_empty();
    match mine.and_then(|i| entries.get_mut(i)) {
        Some(e) => {
            let set_changed = e.set != wanted;
            if set_changed || object_changed {
                e.time = Some(now.to_owned());
                e.raw = None;
            }
            if set_changed {
                e.set = wanted;
            }
            if e.api_version != api_version {
                e.api_version = api_version.to_owned();
                e.raw = None;
            }
        }
        None => entries.push(Entry::new(manager, APPLY, api_version, now, wanted)),
    }
    write_entries(&mut merged, entries);
    Ok(merged)
}

/// Records a non-apply write (create, PUT, merge/JSON patch) by `manager`: every field whose value differs
/// between `old` (None on create) and `new` becomes owned by `manager` (an entry with operation "Update"), and
/// is removed from other managers' sets. Mutates `new.metadata.managedFields`. Entries that end up empty are dropped.
///
/// As on the real server, a non-empty `managedFields` list in `new` (a client editing ownership on purpose)
/// is taken as the starting point; otherwise the one in `old` is.
pub(crate) fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    now: &str,
) {
    if !new.is_object() {
        return;
    }
    let sent = new
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    let mut entries = if sent {
        read_entries(new)
    } else {
        old.map(read_entries).unwrap_or_default()
    };
    let empty = Value::Object(Map::new());
    let old = old.filter(|o| o.is_object()).unwrap_or(&empty);
    let diff = compare(old, new);
    let mut taken = diff.added.clone();
    taken.union(&diff.modified);

    let mut lost = taken.paths();
    lost.extend(diff.removed.paths());
    // The writer's own earlier entry is disowned too: removals apply to it, and what it takes is added back below.
    for e in &mut entries {
        e.disown(&lost, new);
    }
    if !taken.is_empty() {
        match entries
            .iter_mut()
            .find(|e| e.is(manager, UPDATE, api_version))
        {
            Some(e) => {
                e.set.union(&taken);
                e.time = Some(now.to_owned());
                e.raw = None;
            }
            None => entries.push(Entry::new(manager, UPDATE, api_version, now, taken)),
        }
    }
    write_entries(new, entries);
}

/// The 409 message the real server gives, e.g. `Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using example.com/v1: .spec.size`
/// (several: `Apply failed with 2 conflicts: conflicts with "m" using v1:\n- .spec.a\n- .spec.b`).
///
/// Several conflicts are grouped by manager, managers sorted by name, fields in the order given.
/// `api_version` (the version the request used) is printed for every manager: the real server prints the
/// owning entry's own version, and only for Update managers, but a [`Conflict`] records neither.
pub(crate) fn conflict_message(conflicts: &[Conflict], api_version: &str) -> String {
    if let [c] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            describe_manager(&c.manager, api_version),
            c.field
        );
    }
    let mut by_manager: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for c in conflicts {
        by_manager.entry(&c.manager).or_default().push(&c.field);
    }
    let mut lines = Vec::new();
    for (manager, fields) in by_manager {
        lines.push(format!(
            "conflicts with {}:",
            describe_manager(manager, api_version)
        ));
        lines.extend(fields.into_iter().map(|f| format!("- {f}")));
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

fn describe_manager(manager: &str, api_version: &str) -> String {
    format!("{} using {api_version}", go_quote(manager))
}

/// Go's `%q`, which the real message uses; differs from Rust's `{:?}` for control characters.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A path is a list of FieldsV1 keys (`f:spec`, `f:size`); only `f:` keys address anything in an object.
type Path = Vec<String>;

fn field_key(name: &str) -> String {
    format!("f:{name}")
}

fn display_path(path: &[String]) -> String {
    path.iter()
        .map(|k| match k.strip_prefix("f:") {
            Some(name) => format!(".{name}"),
            None => format!("[{k}]"),
        })
        .collect()
}

fn is_key(key: &str, names: &[&str]) -> bool {
    key.strip_prefix("f:").is_some_and(|n| names.contains(&n))
}

/// Whether ownership of this path is recorded at all; identity and server-owned metadata never are.
fn tracked(path: &[String]) -> bool {
    match path {
        [k] => !is_key(k, &UNTRACKED_ROOT),
        [m, k] if m == "f:metadata" => !is_key(k, &UNTRACKED_META),
        _ => true,
    }
}

/// The real server strips `.metadata` itself from every set, so nobody owns the metadata object.
fn ownable_itself(path: &[String]) -> bool {
    !path.is_empty() && !matches!(path, [m] if m == "f:metadata")
}

fn get_path<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, k| {
        let name = k.strip_prefix("f:")?;
        v.as_object()?.get(name)
    })
}

fn is_nonempty_object(value: Option<&Value>) -> bool {
    value
        .and_then(Value::as_object)
        .is_some_and(|m| !m.is_empty())
}

/// Equality as structured-merge-diff sees it: `1` and `1.0` are the same number.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            x.as_f64() == y.as_f64()
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// A set of owned fields, shaped like FieldsV1: `member` means the node itself is owned.
#[derive(Debug, Clone, Default, PartialEq)]
struct FieldSet {
    member: bool,
    children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    fn from_fields_v1(value: &Value) -> FieldSet {
        let mut set = FieldSet::default();
        if let Value::Object(m) = value {
            for (key, child) in m {
                if key == "." {
                    set.member = true;
                    continue;
                }
                let mut node = FieldSet::from_fields_v1(child);
                if node.children.is_empty() {
                    node.member = true;
                }
                set.children.insert(key.clone(), node);
            }
        }
        set
    }

    fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (key, child) in &self.children {
            m.insert(key.clone(), child.to_fields_v1());
        }
        Value::Object(m)
    }

    fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    fn node(&self, path: &[String]) -> Option<&FieldSet> {
        path.iter().try_fold(self, |n, k| n.children.get(k))
    }

    fn has(&self, path: &[String]) -> bool {
        self.node(path).is_some_and(|n| n.member)
    }

    fn has_below(&self, path: &[String]) -> bool {
        self.node(path).is_some_and(|n| !n.children.is_empty())
    }

    fn insert(&mut self, path: &[String]) {
        let node = path
            .iter()
            .fold(self, |n, k| n.children.entry(k.clone()).or_default());
        node.member = true;
    }

    /// Drops `path` (and with `subtree` everything below it), then any node left owning nothing.
    fn remove(&mut self, path: &[String], subtree: bool) {
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        let Some(child) = self.children.get_mut(first) else {
            return;
        };
        if rest.is_empty() {
            child.member = false;
            if subtree {
                child.children.clear();
            }
        } else {
            child.remove(rest, subtree);
        }
        if !child.member && child.children.is_empty() {
            self.children.remove(first);
        }
    }

    fn union(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (key, child) in &other.children {
            self.children.entry(key.clone()).or_default().union(child);
        }
    }

    fn without(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet::default();
        for p in self.paths() {
            if !other.has(&p) {
                out.insert(&p);
            }
        }
        out
    }

    fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet::default();
        for p in self.paths() {
            if other.has(&p) {
                out.insert(&p);
            }
        }
        out
    }

    /// Owned paths in structured-merge-diff's iteration order (a node's members, then its children's),
    /// which is the order the real server lists conflicts in.
    fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        for (key, child) in &self.children {
            if child.member {
                let mut p = prefix.clone();
                p.push(key.clone());
                out.push(p);
            }
        }
        for (key, child) in &self.children {
            if !child.children.is_empty() {
                prefix.push(key.clone());
                child.collect(prefix, out);
                prefix.pop();
            }
        }
    }
}

/// The leaves of an apply body, as structured-merge-diff's `ToFieldSet` gives them for a schema-typed object.
fn applied_fields(m: &Map<String, Value>, path: &mut Path, set: &mut FieldSet) {
    for (name, value) in m {
        path.push(field_key(name));
        if tracked(path) {
            match value {
                Value::Object(c) if !c.is_empty() => applied_fields(c, path, set),
                _ if ownable_itself(path) => set.insert(path),
                _ => {}
            }
        }
        path.pop();
    }
}

/// Adds back what the manager owned on the endpoint this body is not for (see [`apply`]).
fn keep_other_endpoint(wanted: &mut FieldSet, last: &FieldSet, body_has_status: bool) {
    let status = field_key("status");
    let status_only = body_has_status && wanted.children.keys().all(|k| *k == status);
    for (key, owned) in &last.children {
        let other_endpoint = match (body_has_status, status_only) {
            (false, _) => *key == status,
            (true, true) => *key != status,
            (true, false) => false,
        };
        if other_endpoint {
            wanted.children.entry(key.clone()).or_default().union(owned);
        }
    }
}

/// What an apply body makes of the live object: objects merge key by key, anything else replaces, null deletes.
fn merge_into(target: &mut Map<String, Value>, src: &Map<String, Value>, path: &mut Path) {
    for (name, value) in src {
        path.push(field_key(name));
        if tracked(path) {
            match value {
                Value::Null => {
                    target.shift_remove(name);
                }
                Value::Object(s) => match target.get_mut(name) {
                    Some(Value::Object(t)) => merge_into(t, s, path),
                    _ => {
                        let mut t = Map::new();
                        merge_into(&mut t, s, path);
                        target.insert(name.clone(), Value::Object(t));
                    }
                },
                // Keeping an equal value keeps the object byte-identical (1 stays 1 when 1.0 is applied).
                _ if target.get(name).is_some_and(|t| same(t, value)) => {}
                _ => {
                    target.insert(name.clone(), value.clone());
                }
            }
        }
        path.pop();
    }
}

/// Deletes the `stale` fields; objects the deletion empties go too unless a manager owns them.
fn prune(obj: &mut Map<String, Value>, stale: &FieldSet, kept: Option<&FieldSet>, path: &mut Path) {
    for (key, s) in &stale.children {
        let Some(name) = key.strip_prefix("f:") else {
            continue;
        };
        path.push(key.clone());
        let k = kept.and_then(|k| k.children.get(key));
        let kept_itself = k.is_some_and(|k| k.member);
        let remove = match obj.get_mut(name) {
            Some(_) if !tracked(path) => false,
            Some(Value::Object(child)) => {
                let was_empty = child.is_empty();
                prune(child, s, k, path);
                child.is_empty() && !kept_itself && ownable_itself(path) && (s.member || !was_empty)
            }
            Some(_) => s.member,
            None => false,
        };
        if remove {
            obj.shift_remove(name);
        }
        path.pop();
    }
}

/// Structured-merge-diff's `Compare`: changed leaves are modified; appeared or vanished nodes, objects
/// included, are added or removed. Two empty objects are equal leaves.
#[derive(Debug, Default)]
struct Diff {
    added: FieldSet,
    modified: FieldSet,
    removed: FieldSet,
}

impl Diff {
    fn is_empty(&self) -> bool {
        self.added.is_empty() && self.modified.is_empty() && self.removed.is_empty()
    }

    fn mark(set: &mut FieldSet, path: &[String]) {
        if ownable_itself(path) {
            set.insert(path);
        }
    }
}

fn compare(old: &Value, new: &Value) -> Diff {
    let mut diff = Diff::default();
    compare_children(old.as_object(), new.as_object(), &mut Vec::new(), &mut diff);
    diff
}

fn compare_children(
    old: Option<&Map<String, Value>>,
    new: Option<&Map<String, Value>>,
    path: &mut Path,
    diff: &mut Diff,
) {
    let old_keys = old.into_iter().flat_map(|m| m.keys());
    let new_only = new
        .into_iter()
        .flat_map(|m| m.keys())
        .filter(|k| !old.is_some_and(|o| o.contains_key(*k)));
    for name in old_keys.chain(new_only) {
        path.push(field_key(name));
        if tracked(path) {
            compare_node(
                old.and_then(|m| m.get(name)),
                new.and_then(|m| m.get(name)),
                path,
                diff,
            );
        }
        path.pop();
    }
}

fn compare_node(old: Option<&Value>, new: Option<&Value>, path: &mut Path, diff: &mut Diff) {
    match (old, new) {
        (None, None) => {}
        (None, Some(n)) => {
            compare_children(None, n.as_object(), path, diff);
            Diff::mark(&mut diff.added, path);
        }
        (Some(o), None) => {
            compare_children(o.as_object(), None, path, diff);
            Diff::mark(&mut diff.removed, path);
        }
        (Some(o), Some(n)) => match (o.as_object(), n.as_object()) {
            (Some(om), Some(nm)) => compare_children(Some(om), Some(nm), path, diff),
            (None, None) => {
                if !same(o, n) {
                    Diff::mark(&mut diff.modified, path);
                }
            }
            // A value changing between object and non-object: the old shape's fields go, the new one's come.
            (om, nm) => {
                compare_children(om, nm, path, diff);
                Diff::mark(&mut diff.modified, path);
            }
        },
    }
}

/// One managedFields entry. `raw` keeps the entry as read, so untouched entries come back byte-identical.
#[derive(Debug)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    subresource: String,
    time: Option<String>,
    set: FieldSet,
    raw: Option<Map<String, Value>>,
}

impl Entry {
    fn new(manager: &str, operation: &str, api_version: &str, now: &str, set: FieldSet) -> Entry {
        Entry {
            manager: manager.to_owned(),
            operation: operation.to_owned(),
            api_version: api_version.to_owned(),
            subresource: String::new(),
            time: Some(now.to_owned()),
            set,
            raw: None,
        }
    }

    fn parse(m: &Map<String, Value>) -> Entry {
        let text = |key: &str| {
            m.get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let mut set = m
            .get("fieldsV1")
            .map(FieldSet::from_fields_v1)
            .unwrap_or_default();
        set.member = false;
        Entry {
            manager: text("manager"),
            operation: text("operation"),
            api_version: text("apiVersion"),
            subresource: text("subresource"),
            time: m.get("time").and_then(Value::as_str).map(str::to_owned),
            set,
            raw: Some(m.clone()),
        }
    }

    /// The real server's manager identity: appliers are one manager whatever version they apply, updaters
    /// are a different manager per version; main-resource writes never match a subresource's entry.
    fn is(&self, manager: &str, operation: &str, api_version: &str) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.is_empty()
            && (operation == APPLY || self.api_version == api_version)
    }

    fn same_identity(&self, other: &Entry) -> bool {
        self.manager == other.manager
            && self.operation == other.operation
            && self.subresource == other.subresource
            && (self.operation == APPLY || self.api_version == other.api_version)
    }

    /// Drops ownership of `paths`. Where the object now holds a leaf (or nothing) the whole subtree goes,
    /// so an atomic array also frees item-level ownership recorded by a real server.
    fn disown(&mut self, paths: &[Path], object: &Value) {
        let before = self.set.clone();
        for p in paths {
            let whole = !is_nonempty_object(get_path(object, p));
            self.set.remove(p, whole);
        }
        if self.set != before {
            self.raw = None;
        }
    }

    fn to_json(&self) -> Value {
        if let Some(raw) = &self.raw {
            return Value::Object(raw.clone());
        }
        let mut m = Map::new();
        m.insert("manager".into(), Value::String(self.manager.clone()));
        m.insert("operation".into(), Value::String(self.operation.clone()));
        m.insert("apiVersion".into(), Value::String(self.api_version.clone()));
        if let Some(t) = &self.time {
            m.insert("time".into(), Value::String(t.clone()));
        }
        m.insert("fieldsType".into(), Value::String("FieldsV1".into()));
        m.insert("fieldsV1".into(), self.set.to_fields_v1());
        if !self.subresource.is_empty() {
            m.insert(
                "subresource".into(),
                Value::String(self.subresource.clone()),
            );
        }
        Value::Object(m)
    }
}

fn read_entries(object: &Value) -> Vec<Entry> {
    let mut entries: Vec<Entry> = Vec::new();
    let list = object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array);
    for m in list.into_iter().flatten().filter_map(Value::as_object) {
        let e = Entry::parse(m);
        // A duplicate identity cannot exist on a real server; folding it in avoids conflicting with oneself.
        match entries.iter_mut().find(|x| x.same_identity(&e)) {
            Some(x) => {
                x.set.union(&e.set);
                x.raw = None;
            }
            None => entries.push(e),
        }
    }
    entries
}

/// Writes the entries sorted as the real server sorts them: Apply before Update, then by time (whole seconds),
/// manager, apiVersion and subresource.
fn write_entries(object: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.set.is_empty());
    entries.sort_by(|a, b| {
        a.operation
            .cmp(&b.operation)
            .then_with(|| unix_seconds(a.time.as_deref()).cmp(&unix_seconds(b.time.as_deref())))
            .then_with(|| a.manager.cmp(&b.manager))
            .then_with(|| a.api_version.cmp(&b.api_version))
            .then_with(|| a.subresource.cmp(&b.subresource))
    });
    let Some(obj) = object.as_object_mut() else {
        return;
    };
    if entries.is_empty() {
        if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
            meta.shift_remove("managedFields");
        }
        return;
    }
    let list = Value::Array(entries.iter().map(Entry::to_json).collect());
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Value::Object(meta) = meta {
        meta.insert("managedFields".into(), list);
    }
}

/// Seconds since the epoch of an RFC 3339 time; 0 for none or garbage, as Go sorts a nil time.
fn unix_seconds(time: Option<&str>) -> i64 {
    time.and_then(parse_rfc3339).unwrap_or(0)
}

fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = b.get(from..from + len)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let sep = |at: usize, chars: &[u8]| b.get(at).is_some_and(|c| chars.contains(c));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut i = 19;
    if sep(i, b".") {
        i += 1;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    let offset = match b.get(i) {
        Some(b'Z' | b'z') if b.len() == i + 1 => 0,
        Some(sign @ (b'+' | b'-')) if b.len() == i + 6 && sep(i + 3, b":") => {
            let minutes = num(i + 1, 2)? * 60 + num(i + 4, 2)?;
            if *sign == b'+' {
                minutes * 60
            } else {
                -minutes * 60
            }
        }
        _ => return None,
    };
    // Howard Hinnant's days-from-civil.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3_600 + minute * 60 + second - offset)
}

/// The object an apply creates before the body is merged in: identity fields only, which merging skips.
fn skeleton(applied: &Map<String, Value>) -> Value {
    let mut obj = Map::new();
    for key in UNTRACKED_ROOT {
        if let Some(v) = applied.get(key) {
            obj.insert(key.into(), v.clone());
        }
    }
    let mut meta = Map::new();
    if let Some(am) = applied.get("metadata").and_then(Value::as_object) {
        for key in ["name", "namespace"] {
            if let Some(v) = am.get(key) {
                meta.insert(key.into(), v.clone());
            }
        }
    }
    obj.insert("metadata".into(), Value::Object(meta));
    Value::Object(obj)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    const V: &str = "example.com/v1";
    const T0: &str = "2024-01-01T00:00:00Z";
    const T1: &str = "2024-01-01T00:01:00Z";
    const T2: &str = "2024-01-01T00:02:00Z";
    const T3: &str = "2024-01-01T00:03:00Z";

    fn widget(spec: Value) -> Value {
        json!({"apiVersion": V, "kind": "Widget", "metadata": {"name": "w", "namespace": "default"}, "spec": spec})
    }

    fn entries(obj: &Value) -> Vec<Value> {
        obj["metadata"]["managedFields"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    fn entry<'a>(obj: &'a Value, manager: &str, operation: &str) -> Option<&'a Value> {
        obj["metadata"]["managedFields"]
            .as_array()?
            .iter()
            .find(|e| e["manager"] == manager && e["operation"] == operation)
    }

    fn conflict(manager: &str, field: &str) -> Conflict {
        Conflict {
            manager: manager.into(),
            field: field.into(),
        }
    }

    #[test]
    fn create_by_apply() {
        let mut body = widget(json!({"size": 3, "ports": [80, 443], "tls": {}}));
        body["metadata"]["labels"] = json!({"app": "w"});
        let obj = apply(None, &body, "kubectl", false, V, T0).unwrap();
        assert_eq!(
            obj["spec"],
            json!({"size": 3, "ports": [80, 443], "tls": {}})
        );
        assert_eq!(obj["metadata"]["name"], "w");
        assert_eq!(obj["metadata"]["namespace"], "default");
        assert_eq!(obj["metadata"]["labels"], json!({"app": "w"}));
        assert_eq!(
            entries(&obj),
            vec![json!({
                "manager": "kubectl", "operation": "Apply", "apiVersion": V, "time": T0, "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {"f:ports": {}, "f:size": {}, "f:tls": {}}
                }
            })]
        );
    }

    #[test]
    fn identical_reapply_is_byte_identical() {
        let body = widget(json!({"size": 3, "nested": {"a": 1.0}}));
        let first = apply(None, &body, "kubectl", false, V, T0).unwrap();
        let mut body2 = body.clone();
        body2["spec"]["nested"]["a"] = json!(1);
        let second = apply(Some(&first), &body2, "kubectl", false, V, T1).unwrap();
        assert_eq!(
            serde_json::to_string(&first).unwrap(),
            serde_json::to_string(&second).unwrap()
        );
    }

    #[test]
    fn changed_value_with_same_fields_refreshes_time() {
        let first = apply(None, &widget(json!({"size": 3})), "kubectl", false, V, T0).unwrap();
        let second = apply(
            Some(&first),
            &widget(json!({"size": 4})),
            "kubectl",
            false,
            V,
            T1,
        )
        .unwrap();
        assert_eq!(second["spec"]["size"], 4);
        assert_eq!(entry(&second, "kubectl", "Apply").unwrap()["time"], T1);
    }

    #[test]
    fn apply_without_a_field_removes_it() {
        let mut body = widget(json!({"size": 3, "color": "red", "extra": {"a": 1}}));
        body["metadata"]["labels"] = json!({"app": "w"});
        let first = apply(None, &body, "kubectl", false, V, T0).unwrap();
        let second = apply(
            Some(&first),
            &widget(json!({"size": 3})),
            "kubectl",
            false,
            V,
            T1,
        )
        .unwrap();
        assert_eq!(second["spec"], json!({"size": 3}));
        assert!(
            second["metadata"].get("labels").is_none(),
            "emptied labels go too"
        );
        assert_eq!(
            entry(&second, "kubectl", "Apply").unwrap()["fieldsV1"],
            json!({"f:spec": {"f:size": {}}})
        );
        assert_eq!(entry(&second, "kubectl", "Apply").unwrap()["time"], T1);
    }

    #[test]
    fn removal_keeps_fields_someone_else_owns() {
        let first = apply(
            None,
            &widget(json!({"size": 3, "color": "red"})),
            "a",
            false,
            V,
            T0,
        )
        .unwrap();
        let shared = apply(
            Some(&first),
            &widget(json!({"color": "red"})),
            "b",
            false,
            V,
            T1,
        )
        .unwrap();
        let after = apply(
            Some(&shared),
            &widget(json!({"size": 3})),
            "a",
            false,
            V,
            T2,
        )
        .unwrap();
        assert_eq!(after["spec"], json!({"size": 3, "color": "red"}));
        assert_eq!(
            entry(&after, "b", "Apply").unwrap()["fieldsV1"],
            json!({"f:spec": {"f:color": {}}})
        );
    }

    #[test]
    fn conflict_with_update_manager() {
        let created = apply(None, &widget(json!({"size": 3})), "kubectl", false, V, T0).unwrap();
        let mut edited = created.clone();
        edited["spec"]["size"] = json!(5);
        record_update(Some(&created), &mut edited, "kubectl-edit", V, T1);
        assert_eq!(
            entry(&edited, "kubectl-edit", "Update").unwrap()["fieldsV1"],
            json!({"f:spec": {"f:size": {}}})
        );
        assert!(
            entry(&edited, "kubectl", "Apply").is_none(),
            "lost its only field"
        );

        let err = apply(
            Some(&edited),
            &widget(json!({"size": 4})),
            "kubectl",
            false,
            V,
            T2,
        )
        .unwrap_err();
        assert_eq!(err, vec![conflict("kubectl-edit", ".spec.size")]);
        assert_eq!(
            conflict_message(&err, V),
            "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using example.com/v1: .spec.size"
        );
    }

    #[test]
    fn conflict_with_apply_manager_and_force_transfers() {
        let a = apply(
            None,
            &widget(json!({"size": 3, "color": "red"})),
            "a",
            false,
            V,
            T0,
        )
        .unwrap();
        let err = apply(
            Some(&a),
            &widget(json!({"size": 4, "color": "blue"})),
            "b",
            false,
            V,
            T1,
        )
        .unwrap_err();
        assert_eq!(
            err,
            vec![conflict("a", ".spec.color"), conflict("a", ".spec.size")]
        );

        let forced = apply(Some(&a), &widget(json!({"size": 4})), "b", true, V, T1).unwrap();
        assert_eq!(forced["spec"], json!({"size": 4, "color": "red"}));
        assert_eq!(
            entry(&forced, "a", "Apply").unwrap()["fieldsV1"],
            json!({"f:spec": {"f:color": {}}})
        );
        assert_eq!(
            entry(&forced, "a", "Apply").unwrap()["time"],
            T0,
            "losing fields keeps the time"
        );
        assert_eq!(
            entry(&forced, "b", "Apply").unwrap()["fieldsV1"],
            json!({"f:spec": {"f:size": {}}})
        );
        let back = apply(
            Some(&forced),
            &widget(json!({"size": 3, "color": "red"})),
            "a",
            false,
            V,
            T2,
        );
        assert_eq!(back.unwrap_err(), vec![conflict("b", ".spec.size")]);
    }

    #[test]
    fn equal_values_are_shared() {
        let a = apply(None, &widget(json!({"size": 3})), "a", false, V, T0).unwrap();
        let both = apply(Some(&a), &widget(json!({"size": 3})), "b", false, V, T1).unwrap();
        let own = json!({"f:spec": {"f:size": {}}});
        assert_eq!(entry(&both, "a", "Apply").unwrap()["fieldsV1"], own);
        assert_eq!(entry(&both, "b", "Apply").unwrap()["fieldsV1"], own);
        // Shared fields still conflict for whichever co-owner changes them alone.
        let err = apply(Some(&both), &widget(json!({"size": 4})), "b", false, V, T2).unwrap_err();
        assert_eq!(err, vec![conflict("a", ".spec.size")]);
    }

    #[test]
    fn applying_null_overrides_and_needs_force() {
        let a = apply(
            None,
            &widget(json!({"size": 3, "color": "red"})),
            "a",
            false,
            V,
            T0,
        )
        .unwrap();
        let err = apply(Some(&a), &widget(json!({"color": null})), "b", false, V, T1).unwrap_err();
        assert_eq!(err, vec![conflict("a", ".spec.color")]);
        let forced = apply(Some(&a), &widget(json!({"color": null})), "b", true, V, T1).unwrap();
        assert_eq!(forced["spec"], json!({"size": 3}));
    }

    #[test]
    fn record_update_on_create() {
        let mut obj = widget(json!({"size": 3, "tls": {"enabled": true}}));
        obj["metadata"]["labels"] = json!({"app": "w"});
        obj["metadata"]["uid"] = json!("u-1");
        obj["status"] = json!({"phase": "New"});
        record_update(None, &mut obj, "kubectl-create", V, T0);
        assert_eq!(
            entries(&obj),
            vec![json!({
                "manager": "kubectl-create", "operation": "Update", "apiVersion": V, "time": T0, "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {".": {}, "f:size": {}, "f:tls": {".": {}, "f:enabled": {}}},
                    "f:status": {".": {}, "f:phase": {}}
                }
            })]
        );
    }

    #[test]
    fn record_update_on_change() {
        let mut created = widget(json!({"size": 3, "color": "red"}));
        record_update(None, &mut created, "creator", V, T0);

        let mut changed = created.clone();
        changed["spec"]["size"] = json!(4);
        changed["spec"].as_object_mut().unwrap().remove("color");
        changed["metadata"]["labels"] = json!({"tier": "web"});
        record_update(Some(&created), &mut changed, "patcher", V, T1);
        assert_eq!(
            entries(&changed),
            vec![
                json!({"manager": "creator", "operation": "Update", "apiVersion": V, "time": T0, "fieldsType": "FieldsV1",
                       "fieldsV1": {"f:spec": {}}}),
                json!({"manager": "patcher", "operation": "Update", "apiVersion": V, "time": T1, "fieldsType": "FieldsV1",
                       "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:tier": {}}}, "f:spec": {"f:size": {}}}}),
            ]
        );

        // A write that changes nothing leaves managedFields, times included, alone.
        let mut again = changed.clone();
        record_update(Some(&changed), &mut again, "patcher", V, T2);
        assert_eq!(again, changed);

        // Only removals: the writer takes nothing, so it gets no entry, and the owner loses the field.
        let mut removed = changed.clone();
        removed["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("labels");
        record_update(Some(&changed), &mut removed, "cleaner", V, T3);
        assert!(entry(&removed, "cleaner", "Update").is_none());
        assert_eq!(
            entry(&removed, "patcher", "Update").unwrap()["fieldsV1"],
            json!({"f:spec": {"f:size": {}}})
        );
    }

    #[test]
    fn a_write_can_reset_managed_fields() {
        let mut created = widget(json!({"size": 3}));
        record_update(None, &mut created, "creator", V, T0);
        let mut reset = created.clone();
        reset["metadata"]["managedFields"] = json!([{}]);
        record_update(Some(&created), &mut reset, "kubectl-patch", V, T1);
        assert!(reset["metadata"].get("managedFields").is_none());
    }

    #[test]
    fn labels_are_tracked_per_key() {
        let mut body = widget(json!({"size": 1}));
        body["metadata"]["labels"] = json!({"app": "w", "tier": "web"});
        let a = apply(None, &body, "a", false, V, T0).unwrap();

        let mut other = json!({"apiVersion": V, "kind": "Widget", "metadata": {"name": "w", "namespace": "default"}});
        other["metadata"]["labels"] = json!({"tier": "db"});
        let err = apply(Some(&a), &other, "b", false, V, T1).unwrap_err();
        assert_eq!(err, vec![conflict("a", ".metadata.labels.tier")]);

        other["metadata"]["labels"] = json!({"team": "x"});
        let b = apply(Some(&a), &other, "b", false, V, T1).unwrap();
        assert_eq!(
            b["metadata"]["labels"],
            json!({"app": "w", "tier": "web", "team": "x"})
        );
        assert_eq!(
            entry(&b, "b", "Apply").unwrap()["fieldsV1"],
            json!({"f:metadata": {"f:labels": {"f:team": {}}}})
        );
    }

    #[test]
    fn entries_sorted_like_the_real_server() {
        let mut obj = widget(json!({"size": 1}));
        record_update(None, &mut obj, "creator", V, T0);
        let applied = apply(
            Some(&obj),
            &widget(json!({"color": "red"})),
            "zed",
            false,
            V,
            T1,
        )
        .unwrap();
        let applied = apply(
            Some(&applied),
            &widget(json!({"shape": "box"})),
            "alpha",
            false,
            V,
            T1,
        )
        .unwrap();
        let names: Vec<_> = entries(&applied)
            .iter()
            .map(|e| {
                format!(
                    "{}/{}",
                    e["operation"].as_str().unwrap(),
                    e["manager"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(names, ["Apply/alpha", "Apply/zed", "Update/creator"]);
    }

    #[test]
    fn unowned_object_gets_before_first_apply() {
        let seeded = widget(json!({"size": 3}));
        let err = apply(
            Some(&seeded),
            &widget(json!({"size": 4})),
            "kubectl",
            false,
            V,
            T1,
        )
        .unwrap_err();
        assert_eq!(err, vec![conflict(BEFORE_FIRST_APPLY, ".spec.size")]);
        let ok = apply(
            Some(&seeded),
            &widget(json!({"size": 3})),
            "kubectl",
            false,
            V,
            T1,
        )
        .unwrap();
        assert!(entry(&ok, BEFORE_FIRST_APPLY, "Update").is_some());
        assert!(entry(&ok, "kubectl", "Apply").is_some());
    }

    #[test]
    fn untracked_fields_are_kept_and_never_owned() {
        let mut current = apply(None, &widget(json!({"size": 1})), "a", false, V, T0).unwrap();
        current["metadata"]["uid"] = json!("u-1");
        current["metadata"]["resourceVersion"] = json!("7");
        let mut body = widget(json!({"size": 1}));
        body["metadata"]["resourceVersion"] = json!("1");
        body["metadata"]["uid"] = json!("other");
        let out = apply(Some(&current), &body, "a", false, V, T1).unwrap();
        assert_eq!(out, current);
    }

    #[test]
    fn arrays_are_atomic() {
        let a = apply(
            None,
            &widget(json!({"ports": [80, 443]})),
            "a",
            false,
            V,
            T0,
        )
        .unwrap();
        let err = apply(Some(&a), &widget(json!({"ports": [80]})), "b", false, V, T1).unwrap_err();
        assert_eq!(err, vec![conflict("a", ".spec.ports")]);
    }

    #[test]
    fn status_and_main_applies_by_one_manager_settle() {
        let main_body = widget(json!({"size": 3}));
        let status_body = json!({"apiVersion": V, "kind": "Widget", "metadata": {"name": "w"},
                                 "status": {"phase": "Ready"}});
        let a = apply(None, &main_body, "ctrl", false, V, T0).unwrap();
        let b = apply(Some(&a), &status_body, "ctrl", false, V, T1).unwrap();
        assert_eq!(
            b["spec"],
            json!({"size": 3}),
            "a status-only body prunes no spec"
        );
        assert_eq!(
            entry(&b, "ctrl", "Apply").unwrap()["fieldsV1"],
            json!({"f:spec": {"f:size": {}}, "f:status": {"f:phase": {}}})
        );
        let c = apply(Some(&b), &main_body, "ctrl", false, V, T2).unwrap();
        assert_eq!(c, b, "a body without status leaves status alone");
        let d = apply(Some(&c), &status_body, "ctrl", false, V, T3).unwrap();
        assert_eq!(d, b);

        // With status next to other fields the body is a plain apply: unapplied status goes.
        let mut both = widget(json!({"size": 3}));
        both["status"] = json!({});
        let e = apply(Some(&d), &both, "ctrl", false, V, T3).unwrap();
        assert_eq!(e["status"], json!({}));
        assert_eq!(
            entry(&e, "ctrl", "Apply").unwrap()["fieldsV1"],
            json!({"f:spec": {"f:size": {}}, "f:status": {}})
        );
    }

    #[test]
    fn empty_body_gives_up_everything_but_status() {
        let mut body = widget(json!({"size": 3}));
        body["status"] = json!({"phase": "Ready"});
        let a = apply(None, &body, "ctrl", false, V, T0).unwrap();
        let bare = json!({"apiVersion": V, "kind": "Widget", "metadata": {"name": "w", "namespace": "default"}});
        let b = apply(Some(&a), &bare, "ctrl", false, V, T1).unwrap();
        assert!(b.get("spec").is_none());
        assert_eq!(b["status"], json!({"phase": "Ready"}));
    }

    #[test]
    fn item_level_ownership_from_a_real_server_counts_for_the_whole_array() {
        let mut obj = widget(json!({"containers": [{"name": "c", "image": "a"}]}));
        obj["metadata"]["managedFields"] = json!([{
            "manager": "helm", "operation": "Update", "apiVersion": V, "time": T0, "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}}
        }]);
        let body = widget(json!({"containers": [{"name": "c", "image": "b"}]}));
        let err = apply(Some(&obj), &body, "kubectl", false, V, T1).unwrap_err();
        assert_eq!(err, vec![conflict("helm", ".spec.containers")]);
        let forced = apply(Some(&obj), &body, "kubectl", true, V, T1).unwrap();
        assert!(entry(&forced, "helm", "Update").is_none());
    }

    #[test]
    fn conflict_messages() {
        let several = [
            conflict("zed", ".spec.z"),
            conflict("m", ".spec.b"),
            conflict("m", ".spec.a"),
        ];
        assert_eq!(
            conflict_message(&several, "v1"),
            "Apply failed with 3 conflicts: conflicts with \"m\" using v1:\n- .spec.b\n- .spec.a\n\
             conflicts with \"zed\" using v1:\n- .spec.z"
        );
        assert_eq!(
            conflict_message(&[conflict("kubectl-client-side-apply", ".spec.size")], V),
            "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using example.com/v1: .spec.size"
        );
    }

    #[test]
    fn field_sets_round_trip_fields_v1() {
        let v1 = json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                        "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}}}}});
        assert_eq!(FieldSet::from_fields_v1(&v1).to_fields_v1(), v1);
    }

    #[test]
    fn parses_rfc3339() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("2024-01-01T00:00:00Z"), Some(1_704_067_200));
        assert_eq!(
            parse_rfc3339("2024-01-01T01:00:00.5+01:00"),
            Some(1_704_067_200)
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
    }

    #[test]
    fn garbage_does_not_panic() {
        assert_eq!(apply(None, &json!(7), "m", false, V, T0).unwrap(), json!(7));
        let weird = json!({"metadata": {"managedFields": [1, {"fieldsV1": 3}, {}]}, "spec": 1});
        let out = apply(
            Some(&weird),
            &json!({"spec": 2}),
            "m",
            true,
            V,
            "not a time",
        )
        .unwrap();
        assert_eq!(out["spec"], 2);
        let mut n = json!("scalar");
        record_update(Some(&weird), &mut n, "m", V, T0);
        assert_eq!(n, json!("scalar"));
    }
}
