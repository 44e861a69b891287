//! Object-index updates not yet folded into the `i/` keys (schema 7, ADR 0035).
//!
//! sled pays per key: an insert clones the leaf it changes and logs the copy, so a catch-up that
//! wrote one `i/` key per event spent about a sixth of herald's CPU in `Tree::insert_inner`
//! alone. A watch's append therefore writes its index updates, already in their stored form, as
//! one `u/` key (several past [`ENTRY_BYTES`]); the updates not yet folded are kept in memory
//! ([`Pending`]), latest value per key with the entry that holds it, and read from there.
//!
//! A fold writes a key's latest value as its `i/` key and removes `u/` keys, in one sled batch
//! with the append that asks for it, so a crash leaves either the updates or their fold:
//! - Past [`FOLD_ENTRIES`] gathered keys, [`FOLD_BYTES`] of `u/` values or [`FOLD_COUNT`]
//!   entries, each append folds the oldest entries until all three are within bounds again. An
//!   entry costs an `i/` write only for the keys whose latest update it holds: the updates a later
//!   entry replaced (an object that keeps changing) are dropped unwritten. Once the bounds are
//!   reached, an append folds about as many entries as it writes, and no more than [`FOLD_COUNT`]
//!   (unless one append wrote more than that many entries, over 64 MiB of updates).
//! - Every entry is folded before a scan of the index, when the journal is closed or dropped, and
//!   when it is opened (what a crash left, `fold_stored`).
//!
//! A relist's append (`listed`) writes the updates of keys with nothing gathered straight into the
//! `i/` keys: each object comes once in a list, so gathering would only write it twice; and no
//! `u/` entry mentions such a key, so no fold after a crash can put an older value over it.
//!
//! The value of a `u/` key: the number of updates (u32 BE), then per update the `i/` key (u32 BE
//! length, then the key), then `0` (removed) or `1`, u32 BE length and the stored value
//! (`compressed::index_value`'s form). The count makes a value cut at an update's end unreadable
//! rather than fewer updates.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::Arc;

use sled::IVec;

use super::error::{JournalError, Result};
use super::keys;

/// Gathered keys past which each append folds the oldest `u/` entries (as many as keep the
/// gathered keys within the bound). Each gathered key holds its object's stored (compressed) value
/// in memory until it is folded.
pub(super) const FOLD_ENTRIES: usize = if cfg!(test) { 8 } else { 4_096 };

/// Bytes of `u/` values past which each append folds the oldest entries: bounds what a restart
/// after a crash reads back and what the updates take on disk beside the index. 8 MiB let a
/// 120,000-change catch-up keep that much live in sled's log, and spent as much CPU as schema 6
/// (docs/operations.md, "Index updates gathered in one key (round 10)").
pub(super) const FOLD_BYTES: usize = if cfg!(test) { 600 } else { 2 << 20 };

/// `u/` entries past which each append folds the oldest ones. Without it, an entry that holds
/// only updates later ones replaced would wait for the other bounds; thousands of them (a few
/// objects that keep changing) would then all be removed by one append, whose wait would be
/// theirs. With it, an append folds about as many entries as it writes.
pub(super) const FOLD_COUNT: usize = if cfg!(test) { 16 } else { 1_024 };

/// A `u/` value holds at most this many bytes of updates (an append's updates take several when
/// they pass it): sled stores a value over a quarter of its 512 KiB segment as a file of its own,
/// and a relist's append of 2,048 updates would be one.
pub(super) const ENTRY_BYTES: usize = 64 * 1024;

/// One update: the `i/` key and its stored value (`None`: the object was removed).
pub(super) type Update = (Vec<u8>, Option<IVec>);

/// One update as read from a `u/` value, borrowing it.
pub(super) type Read<'a> = (&'a [u8], Option<&'a [u8]>);

/// The `u/` values of `updates`, in order, each within [`ENTRY_BYTES`] (or one update, when an
/// update alone passes it), and the number of updates of each.
pub(super) fn encode(updates: &[Update]) -> Vec<(Vec<u8>, usize)> {
    let size = |(k, v): &Update| 9 + k.len() + v.as_ref().map_or(0, |v| v.len());
    let mut out = Vec::new();
    let mut rest = updates;
    while !rest.is_empty() {
        let mut bytes = 4;
        let mut count = 0;
        for update in rest {
            if count > 0 && bytes + size(update) > ENTRY_BYTES {
                break;
            }
            bytes += size(update);
            count += 1;
        }
        let (these, after) = rest.split_at(count);
        let mut value = Vec::with_capacity(bytes);
        push_len(&mut value, these.len());
        for (key, stored) in these {
            push_len(&mut value, key.len());
            value.extend_from_slice(key);
            match stored {
                None => value.push(0),
                Some(v) => {
                    value.push(1);
                    push_len(&mut value, v.len());
                    value.extend_from_slice(v);
                }
            }
        }
        out.push((value, count));
        rest = after;
    }
    out
}

fn push_len(out: &mut Vec<u8>, len: usize) {
    // Keys and index values are far below 4 GiB (sled keeps values over 128 KiB as blobs).
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
}

/// The updates of the `u/` entry `key`, in the order they were made. Every key read is an `i/` key;
/// the values are not judged here (`integrity.rs` reads each as the index does).
pub(super) fn decode<'a>(key: &[u8], value: &'a [u8]) -> Result<Vec<Read<'a>>> {
    let corrupt = |reason| JournalError::CorruptEntry {
        key: keys::printable(key),
        reason,
    };
    let (count, mut rest) = value
        .split_first_chunk::<4>()
        .ok_or_else(|| corrupt("index updates without their count"))?;
    let count = u32::from_be_bytes(*count);
    if count == 0 {
        return Err(corrupt("index updates without an update"));
    }
    // Each update takes at least 5 bytes, so a damaged count allocates nothing huge.
    let mut out = Vec::with_capacity((count as usize).min(rest.len() / 5));
    for _ in 0..count {
        let (k, after) = take_sized(rest).ok_or_else(|| corrupt("index update cut short"))?;
        if !k.starts_with(keys::INDEX_PREFIX) {
            return Err(corrupt("index update of a key outside the index"));
        }
        let (tag, after) = after
            .split_first()
            .ok_or_else(|| corrupt("index update cut short"))?;
        rest = match tag {
            0 => {
                out.push((k, None));
                after
            }
            1 => {
                let (v, after) =
                    take_sized(after).ok_or_else(|| corrupt("index update cut short"))?;
                out.push((k, Some(v)));
                after
            }
            _ => return Err(corrupt("index update of an unknown kind")),
        };
    }
    if !rest.is_empty() {
        return Err(corrupt("index updates followed by other bytes"));
    }
    Ok(out)
}

fn take_sized(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = bytes.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// The updates of the `u/` entries not yet folded: the latest stored value of each key and the
/// entry that holds it, and the entries in the order they were written.
#[derive(Default)]
pub(super) struct Pending {
    latest: HashMap<Arc<[u8]>, (u64, Option<IVec>)>,
    entries: VecDeque<Entry>,
    bytes: usize,
    next: u64,
}

/// A `u/` entry not yet folded.
struct Entry {
    n: u64,
    keys: Vec<Arc<[u8]>>,
    bytes: usize,
}

/// What an append writes for its index updates, decided under the append lock and recorded in
/// [`Pending`] once its batch is applied ([`Pending::applied`]).
pub(super) struct Plan {
    /// The oldest entries the batch folds.
    folds: usize,
    /// The updates of each `u/` entry the batch writes, and its bytes.
    written: Vec<(Vec<Update>, usize)>,
}

impl Pending {
    /// The latest update of the `i/` key `key`: `Some(None)` when it removed the object, `None`
    /// when no entry not yet folded updates it.
    pub(super) fn get(&self, key: &[u8]) -> Option<Option<IVec>> {
        self.latest.get(key).map(|(_, v)| v.clone())
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds an append's index updates to `b`: their `u/` entries, and the fold of as many of the
    /// oldest entries as keep the gathered keys, bytes and entries within [`FOLD_ENTRIES`],
    /// [`FOLD_BYTES`] and [`FOLD_COUNT`]. A folded entry costs an `i/` write only for the keys
    /// whose latest update it holds and this append does not update again; an update a later
    /// entry replaces is dropped with it. The updates of a `listed` append (a relist's) whose keys
    /// have nothing gathered go straight into their `i/` keys: no `u/` entry mentions them, so no
    /// fold at an open after a crash can put an older value over them.
    pub(super) fn plan(&self, b: &mut sled::Batch, updates: Vec<Update>, listed: bool) -> Plan {
        let (direct, mut updates): (Vec<Update>, Vec<Update>) = if listed {
            updates
                .into_iter()
                .partition(|(k, _)| !self.latest.contains_key(k.as_slice()))
        } else {
            (Vec::new(), updates)
        };
        for (key, value) in direct {
            write(b, &key, value);
        }
        let encoded = encode(&updates);
        let incoming_bytes: usize = encoded.iter().map(|(v, _)| v.len()).sum();
        // The append's updates are one per key (`last_of_each_key`).
        let fresh = updates
            .iter()
            .filter(|(k, _)| !self.latest.contains_key(k.as_slice()))
            .count();
        let mut keys = self.latest.len() + fresh;
        let mut bytes = self.bytes + incoming_bytes;
        let mut folds = 0;
        let mut count = self.entries.len() + encoded.len();
        let within =
            |keys, bytes, count| keys <= FOLD_ENTRIES && bytes <= FOLD_BYTES && count <= FOLD_COUNT;
        // Only a fold asks which keys the append updates again.
        let incoming: HashSet<&[u8]> = if within(keys, bytes, count) {
            HashSet::new()
        } else {
            updates.iter().map(|(k, _)| k.as_slice()).collect()
        };
        for entry in &self.entries {
            if within(keys, bytes, count) {
                break;
            }
            for key in &entry.keys {
                if let Some((n, value)) = self.latest.get(key)
                    && *n == entry.n
                {
                    // This append's own update of the key replaces it: nothing to write.
                    if !incoming.contains(&**key) {
                        write(b, key, value.clone());
                        keys -= 1;
                    }
                }
            }
            b.remove(keys::updates(entry.n));
            bytes -= entry.bytes;
            count -= 1;
            folds += 1;
        }
        let mut written = Vec::with_capacity(encoded.len());
        for (i, (value, count)) in encoded.into_iter().enumerate() {
            b.insert(keys::updates(self.next + i as u64), value.as_slice());
            let rest = updates.split_off(count.min(updates.len()));
            written.push((std::mem::replace(&mut updates, rest), value.len()));
        }
        Plan { folds, written }
    }

    /// Records `plan` once its batch was applied.
    pub(super) fn applied(&mut self, plan: Plan) {
        for _ in 0..plan.folds {
            let Some(entry) = self.entries.pop_front() else {
                break;
            };
            for key in entry.keys {
                if self.latest.get(&key).is_some_and(|(n, _)| *n == entry.n) {
                    self.latest.remove(&key);
                }
            }
            self.bytes -= entry.bytes;
        }
        for (updates, bytes) in plan.written {
            let n = self.next;
            self.next += 1;
            let mut keys = Vec::with_capacity(updates.len());
            for (key, value) in updates {
                let key: Arc<[u8]> = key.into();
                self.latest.insert(Arc::clone(&key), (n, value));
                keys.push(key);
            }
            self.entries.push_back(Entry { n, keys, bytes });
            self.bytes += bytes;
        }
    }

    /// Adds the fold of every entry to `b`: each gathered key as its `i/` key, the `u/` keys
    /// removed.
    pub(super) fn fold_into(&self, b: &mut sled::Batch) {
        for (key, (_, value)) in &self.latest {
            write(b, key, value.clone());
        }
        for entry in &self.entries {
            b.remove(keys::updates(entry.n));
        }
    }

    /// Forgets what was gathered without folding it, as a crash would (the `u/` keys stay).
    #[cfg(test)]
    pub(super) fn forget(&mut self) {
        self.folded();
    }

    /// After the batch of [`fold_into`](Pending::fold_into) was applied.
    pub(super) fn folded(&mut self) {
        self.latest.clear();
        self.entries.clear();
        self.bytes = 0;
    }
}

/// Adds an update's `i/` write to `b`: the stored value, or the key's removal.
fn write(b: &mut sled::Batch, key: &[u8], value: Option<IVec>) {
    match value {
        Some(v) => b.insert(key, v),
        None => b.remove(key),
    }
}

/// Folds the `u/` entries a store holds (what a crash left) into its `i/` keys, oldest first, in
/// one batch; how many entries.
pub(super) fn fold_stored(db: &sled::Db, path: &Path) -> Result<usize> {
    let failed = |source| JournalError::IndexFoldFailed {
        path: path.to_owned(),
        source,
    };
    let mut b = sled::Batch::default();
    let mut latest: HashMap<Vec<u8>, Option<IVec>> = HashMap::new();
    let mut count = 0;
    for item in db.scan_prefix(keys::UPDATES_PREFIX) {
        let (k, v) = item.map_err(failed)?;
        for (key, value) in decode(&k, &v)? {
            latest.insert(key.to_vec(), value.map(IVec::from));
        }
        b.remove(k);
        count += 1;
    }
    if count == 0 {
        return Ok(0);
    }
    for (key, value) in latest {
        write(&mut b, &key, value);
    }
    db.apply_batch(b).map_err(failed)?;
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_read_back_in_order_and_a_damaged_value_is_corrupt() {
        let updates: Vec<Update> = vec![
            (
                b"i/s\0default/a".to_vec(),
                Some(IVec::from(&b"{\"a\":1}"[..])),
            ),
            (b"i/s\0default/b".to_vec(), None),
            (b"i/s\0default/a".to_vec(), Some(IVec::from(&b"{}"[..]))),
        ];
        let mut encoded = encode(&updates);
        assert_eq!(encoded.len(), 1);
        let (value, count) = encoded.remove(0);
        assert_eq!(count, 3);
        let read = decode(b"u/x", &value).unwrap();
        let expected: Vec<(&[u8], Option<&[u8]>)> = updates
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
            .collect();
        assert_eq!(read, expected);
        // Every cut short of the end is refused, never read as fewer updates; so is a longer one.
        for cut in 0..value.len() {
            let read = decode(b"u/x", &value[..cut]);
            assert!(read.is_err(), "cut at {cut} read as {read:?}");
        }
        let mut longer = value.clone();
        longer.push(0);
        assert!(decode(b"u/x", &longer).is_err());
        // The first key's first byte, then its kind.
        let mut foreign = value.clone();
        foreign[8] = b'e';
        assert!(decode(b"u/x", &foreign).is_err());
        let mut kind = value;
        kind[8 + 13] = 2;
        assert!(decode(b"u/x", &kind).is_err());
    }

    #[test]
    fn an_appends_updates_are_cut_into_values_within_the_bound_and_read_back_whole() {
        let big = IVec::from(vec![b'x'; 1000]);
        let updates: Vec<Update> = (0..200)
            .map(|n| {
                (
                    format!("i/s\0default/{n:04}").into_bytes(),
                    Some(big.clone()),
                )
            })
            .collect();
        let encoded = encode(&updates);
        assert!(encoded.len() > 1, "{} values", encoded.len());
        let mut read = Vec::new();
        for (value, count) in &encoded {
            assert!(value.len() <= ENTRY_BYTES, "{} bytes", value.len());
            let these = decode(b"u/x", value).unwrap();
            assert_eq!(these.len(), *count);
            read.extend(
                these
                    .into_iter()
                    .map(|(k, v)| (k.to_vec(), v.map(IVec::from))),
            );
        }
        assert_eq!(read, updates);
        // An update alone past the bound gets a value of its own.
        let huge = vec![(
            b"i/s\0default/huge".to_vec(),
            Some(IVec::from(vec![b'y'; 100_000])),
        )];
        assert_eq!(encode(&huge).len(), 1);
    }

    /// Appends of random updates over few and many keys: after each, what a reader sees (gathered,
    /// else the tree) and what the next open would fold (the `u/` keys over the `i/` keys) are the
    /// updates made, and the gathered keys stay within the bound.
    #[test]
    fn oldest_first_folds_keep_the_index_and_what_a_crash_leaves_exact() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let mut pending = Pending::default();
        let mut model: std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>> = Default::default();
        let mut x = 0x2545_f491_u32;
        let mut rand = |n: u32| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x % n
        };
        for round in 0..400u32 {
            let count = 1 + rand(6);
            let mut updates: Vec<Update> = Vec::new();
            for _ in 0..count {
                // Mostly a few hot keys, sometimes one of many.
                let k = if rand(4) == 0 {
                    10 + rand(300)
                } else {
                    rand(6)
                };
                let key = format!("i/s\0default/{k}").into_bytes();
                let value =
                    (rand(5) != 0).then(|| IVec::from(format!("{{\"r\":{round}}}").as_bytes()));
                updates.retain(|(other, _)| *other != key);
                updates.push((key, value));
            }
            for (k, v) in &updates {
                model.insert(k.clone(), v.as_ref().map(|v| v.to_vec()));
            }
            // A relist's append now and then: fresh keys straight into the index.
            let listed = rand(3) == 0;
            let mut b = sled::Batch::default();
            let plan = pending.plan(&mut b, updates, listed);
            db.apply_batch(b).unwrap();
            pending.applied(plan);
            // Within every bound but by this append's own updates (a few small ones here).
            assert!(pending.latest.len() <= FOLD_ENTRIES + 6, "round {round}");
            assert!(pending.entries.len() <= FOLD_COUNT, "round {round}");
            assert!(pending.bytes <= FOLD_BYTES, "round {round}");

            let read = |k: &[u8]| match pending.get(k) {
                Some(v) => v.map(|v| v.to_vec()),
                None => db.get(k).unwrap().map(|v| v.to_vec()),
            };
            let mut recovered: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = db
                .scan_prefix(keys::INDEX_PREFIX)
                .map(|e| e.unwrap())
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .collect();
            for e in db.scan_prefix(keys::UPDATES_PREFIX) {
                let (k, v) = e.unwrap();
                for (key, value) in decode(&k, &v).unwrap() {
                    match value {
                        Some(v) => recovered.insert(key.to_vec(), v.to_vec()),
                        None => recovered.remove(key),
                    };
                }
            }
            for (k, v) in &model {
                assert_eq!(&read(k), v, "round {round}: read of {}", keys::printable(k));
                assert_eq!(
                    recovered.get(k),
                    v.as_ref(),
                    "round {round}: recovery of {}",
                    keys::printable(k)
                );
            }
        }
        // A full fold leaves the index alone, exact.
        let mut b = sled::Batch::default();
        pending.fold_into(&mut b);
        db.apply_batch(b).unwrap();
        pending.folded();
        assert_eq!(db.scan_prefix(keys::UPDATES_PREFIX).count(), 0);
        let index: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = db
            .scan_prefix(keys::INDEX_PREFIX)
            .map(|e| e.unwrap())
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect();
        let expected: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = model
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect();
        assert_eq!(index, expected);
    }
}
