//! `--data-dir`: the simulator's state on disk, so it survives restarts and its resourceVersion never goes
//! backwards. A snapshot of every object plus a write-ahead log of changes since, one JSON line each;
//! on start the log is replayed over the snapshot, then both are folded into a fresh snapshot.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::resource::{GroupResource, ObjectKey};

const SNAPSHOT: &str = "snapshot.json";
const LOG: &str = "changes.jsonl";
/// Log lines after which a write folds the log into a new snapshot, bounding start-up replay.
const FOLD_AFTER: u64 = 100_000;

/// One object in a snapshot, or one change in the log (`object: null` is a deletion).
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    rv: u64,
    group: String,
    resource: String,
    namespace: String,
    name: String,
    object: Option<Value>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Snapshot {
    version: u32,
    rv: u64,
    objects: Vec<Entry>,
}

/// Everything loaded from a data directory.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    pub(crate) rv: u64,
    pub(crate) objects: BTreeMap<GroupResource, BTreeMap<ObjectKey, Arc<Value>>>,
}

/// The open data directory: appends changes, folds them into snapshots.
#[derive(Debug)]
pub(crate) struct Persist {
    dir: PathBuf,
    log: BufWriter<File>,
    logged: u64,
}

fn private_file(path: &Path, truncate: bool) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.create(true)
        .append(!truncate)
        .write(true)
        .truncate(truncate);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts.open(path)
}

fn private_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
    }
    #[cfg(not(unix))]
    {
        fs::create_dir_all(dir)
    }
}

fn invalid(path: &Path, line: usize, e: &serde_json::Error) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}:{line}: {e}", path.display()),
    )
}

impl Persist {
    /// Opens (creating) `dir`, loads its state, and starts a fresh log after writing it back as one snapshot.
    pub(crate) fn open(dir: &Path) -> io::Result<(Self, Loaded)> {
        private_dir(dir)?;
        let mut loaded = Loaded::default();
        let snapshot_path = dir.join(SNAPSHOT);
        if snapshot_path.exists() {
            let snap: Snapshot =
                serde_json::from_reader(BufReader::new(File::open(&snapshot_path)?))
                    .map_err(|e| invalid(&snapshot_path, 0, &e))?;
            loaded.rv = snap.rv;
            for e in snap.objects {
                apply(&mut loaded, e);
            }
        }
        let log_path = dir.join(LOG);
        if log_path.exists() {
            let lines: Vec<String> = BufReader::new(File::open(&log_path)?)
                .lines()
                .collect::<io::Result<_>>()?;
            let last = lines.len();
            for (i, line) in lines.into_iter().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                match serde_json::from_str::<Entry>(&line) {
                    Ok(e) => {
                        loaded.rv = loaded.rv.max(e.rv);
                        apply(&mut loaded, e);
                    }
                    // A crash mid-append leaves at most the last line torn; anything earlier is corruption.
                    Err(_) if i + 1 == last => {
                        tracing::warn!(message = "Ignoring a torn last line in the change log.", path = %log_path.display());
                    }
                    Err(e) => return Err(invalid(&log_path, i + 1, &e)),
                }
            }
        }
        let mut p = Self {
            dir: dir.to_path_buf(),
            log: BufWriter::new(private_file(&log_path, false)?),
            logged: 0,
        };
        p.fold(loaded.rv, &loaded.objects)?;
        Ok((p, loaded))
    }

    /// Appends one change (`object: None` for a deletion). Buffered until [`Persist::flush`].
    pub(crate) fn append(
        &mut self,
        rv: u64,
        gr: &GroupResource,
        key: &ObjectKey,
        object: Option<&Value>,
    ) -> io::Result<()> {
        let e = EntryRef {
            rv,
            group: &gr.group,
            resource: &gr.resource,
            namespace: &key.namespace,
            name: &key.name,
            object,
        };
        serde_json::to_writer(&mut self.log, &e).map_err(io::Error::other)?;
        self.log.write_all(b"\n")?;
        self.logged += 1;
        Ok(())
    }

    /// Hands buffered changes to the OS (the simulator's durability: a crash of the process loses nothing,
    /// a crash of the machine may).
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.log.flush()
    }

    /// Whether the log has grown enough to fold.
    pub(crate) fn wants_fold(&self) -> bool {
        self.logged >= FOLD_AFTER
    }

    /// Writes every object as a new snapshot (atomically: temporary file, then rename) and empties the log.
    pub(crate) fn fold(
        &mut self,
        rv: u64,
        objects: &BTreeMap<GroupResource, BTreeMap<ObjectKey, Arc<Value>>>,
    ) -> io::Result<()> {
        self.log.flush()?;
        let tmp = self.dir.join(format!("{SNAPSHOT}.tmp"));
        {
            let mut w = BufWriter::new(private_file(&tmp, true)?);
            let entries: Vec<EntryRef<'_>> = objects
                .iter()
                .flat_map(|(gr, objs)| {
                    objs.iter().map(move |(k, o)| EntryRef {
                        rv,
                        group: &gr.group,
                        resource: &gr.resource,
                        namespace: &k.namespace,
                        name: &k.name,
                        object: Some(o),
                    })
                })
                .collect();
            serde_json::to_writer(
                &mut w,
                &SnapshotRef {
                    version: 1,
                    rv,
                    objects: entries,
                },
            )
            .map_err(io::Error::other)?;
            w.flush()?;
            w.get_ref().sync_all()?;
        }
        fs::rename(&tmp, self.dir.join(SNAPSHOT))?;
        self.log = BufWriter::new(private_file(&self.dir.join(LOG), true)?);
        self.logged = 0;
        Ok(())
    }
}

#[derive(Serialize)]
struct EntryRef<'a> {
    rv: u64,
    group: &'a str,
    resource: &'a str,
    namespace: &'a str,
    name: &'a str,
    object: Option<&'a Value>,
}

#[derive(Serialize)]
struct SnapshotRef<'a> {
    version: u32,
    rv: u64,
    objects: Vec<EntryRef<'a>>,
}

fn apply(loaded: &mut Loaded, e: Entry) {
    let gr = GroupResource::new(e.group, e.resource);
    let key = ObjectKey {
        namespace: e.namespace,
        name: e.name,
    };
    match e.object {
        Some(o) => {
            loaded
                .objects
                .entry(gr)
                .or_default()
                .insert(key, Arc::new(o));
        }
        None => {
            if let Some(objs) = loaded.objects.get_mut(&gr) {
                objs.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn log_replays_over_the_snapshot_and_survives_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let gr = GroupResource::new("g", "things");
        {
            let (mut p, loaded) = Persist::open(dir.path()).unwrap();
            assert_eq!(loaded.rv, 0);
            p.append(1, &gr, &ObjectKey::new("ns", "a"), Some(&json!({"v": 1})))
                .unwrap();
            p.append(2, &gr, &ObjectKey::new("ns", "b"), Some(&json!({"v": 2})))
                .unwrap();
            p.append(3, &gr, &ObjectKey::new("ns", "a"), None).unwrap();
            p.flush().unwrap();
        }
        // A crash in the middle of an append.
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join(LOG))
            .unwrap();
        f.write_all(b"{\"rv\":4,\"gro").unwrap();
        let (_, loaded) = Persist::open(dir.path()).unwrap();
        assert_eq!(loaded.rv, 3);
        let objs = &loaded.objects[&gr];
        assert_eq!(objs.len(), 1);
        assert_eq!(objs[&ObjectKey::new("ns", "b")]["v"], 2);
        // Opening folded everything into the snapshot and emptied the log.
        assert_eq!(fs::read_to_string(dir.path().join(LOG)).unwrap(), "");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(dir.path().join(SNAPSHOT))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
