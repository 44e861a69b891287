//! Dead letters and replays, per sink, in the same store: `d/<sink>\0<seq>` holds what a sink gave up on
//! (a [`DeadLetter`] record, written by the delivery layer), `r/<sink>\0<seq>` what an operator asked
//! to send again.
//! Both are bounded scans by sink prefix; neither affects cursors or retention of the event log.

use herald_sink_core::DeadLetter;

use super::error::{JournalError, Result};
use super::{Journal, keys};

use keys::{DEAD_PREFIX, REPLAY_PREFIX};

fn prefix(kind: &[u8], sink: &str) -> Vec<u8> {
    let mut k = kind.to_vec();
    k.extend_from_slice(sink.as_bytes());
    k.push(0);
    k
}

fn key(kind: &[u8], sink: &str, seq: u64) -> Vec<u8> {
    let mut k = prefix(kind, sink);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

fn seq_of(k: &[u8]) -> u64 {
    let tail = k.len().saturating_sub(8);
    let mut b = [0u8; 8];
    b.copy_from_slice(&k[tail..]);
    u64::from_be_bytes(b)
}

impl Journal {
    fn dlq_err(sink: &str) -> impl FnOnce(sled::Error) -> JournalError + '_ {
        move |source| JournalError::DeadLetterFailed {
            sink: sink.to_owned(),
            source,
        }
    }

    /// Stores a dead letter for `sink` (the record is the delivery layer's), keyed by the event's seq.
    pub fn dead_letter_put(&self, sink: &str, seq: u64, record: &[u8]) -> Result<()> {
        self.check_open()?;
        keys::check_name("sink", sink)?;
        self.inner
            .db
            .insert(key(DEAD_PREFIX, sink, seq), record)
            .map_err(|e| self.note_write_error("dead-letter", &e))?;
        self.inner.flush.note_write(0);
        Ok(())
    }

    /// The dead letters of `sink`, oldest first, at most `max`.
    pub fn dead_letters(&self, sink: &str, max: usize) -> Result<Vec<(u64, Vec<u8>)>> {
        self.scan(DEAD_PREFIX, sink, max)
    }

    /// One dead letter.
    pub fn dead_letter_get(&self, sink: &str, seq: u64) -> Result<Option<Vec<u8>>> {
        Ok(self
            .inner
            .db
            .get(key(DEAD_PREFIX, sink, seq))
            .map_err(Self::dlq_err(sink))?
            .map(|v| v.to_vec()))
    }

    /// How many dead letters `sink` has.
    pub fn dead_letter_count(&self, sink: &str) -> usize {
        self.inner.db.scan_prefix(prefix(DEAD_PREFIX, sink)).count()
    }

    /// Removes dead letters (`None`: all of `sink`'s); returns how many.
    pub fn dead_letters_remove(&self, sink: &str, seqs: Option<&[u64]>) -> Result<usize> {
        self.check_open()?;
        let keys: Vec<Vec<u8>> = match seqs {
            Some(seqs) => seqs.iter().map(|s| key(DEAD_PREFIX, sink, *s)).collect(),
            None => self
                .inner
                .db
                .scan_prefix(prefix(DEAD_PREFIX, sink))
                .keys()
                .filter_map(std::result::Result::ok)
                .map(|k| k.to_vec())
                .collect(),
        };
        let mut removed = 0;
        for k in keys {
            if self
                .inner
                .db
                .remove(k)
                .map_err(|e| self.note_write_error("dead-letter", &e))?
                .is_some()
            {
                removed += 1;
            }
        }
        self.inner.flush.note_write(0);
        Ok(removed)
    }

    /// Moves dead letters (`None`: all of `sink`'s) into the replay queue in one atomic batch, so a
    /// replay that fails again while the move runs cannot be erased by it. Each record's event
    /// (structured JSON) is what gets queued; returns the moved sequence numbers.
    pub fn dead_letters_to_replay(&self, sink: &str, seqs: Option<&[u64]>) -> Result<Vec<u64>> {
        self.check_open()?;
        let rows = self.dead_letters(sink, usize::MAX)?;
        let mut batch = sled::Batch::default();
        let mut moved = Vec::new();
        for (seq, record) in rows {
            if seqs.is_some_and(|s| !s.contains(&seq)) {
                continue;
            }
            // A record that does not decode queues nothing the driver can read: it drops it as an
            // unreadable replay, with a log line, instead of keeping it in the DLQ for ever.
            let event = DeadLetter::from_bytes(&record)
                .map(|letter| letter.event.to_structured_json())
                .unwrap_or_default();
            batch.remove(key(DEAD_PREFIX, sink, seq));
            batch.insert(key(REPLAY_PREFIX, sink, seq), event);
            moved.push(seq);
        }
        self.inner
            .db
            .apply_batch(batch)
            .map_err(|e| self.note_write_error("dead-letter", &e))?;
        self.inner.flush.note_write(0);
        Ok(moved)
    }

    /// Queues an event (structured JSON) to be sent to `sink` again, ahead of its cursor.
    pub fn replay_put(&self, sink: &str, seq: u64, event: &[u8]) -> Result<()> {
        self.check_open()?;
        keys::check_name("sink", sink)?;
        self.inner
            .db
            .insert(key(REPLAY_PREFIX, sink, seq), event)
            .map_err(|e| self.note_write_error("dead-letter", &e))?;
        self.inner.flush.note_write(0);
        Ok(())
    }

    /// Queued replays of `sink`, oldest first, at most `max`.
    pub fn replays(&self, sink: &str, max: usize) -> Result<Vec<(u64, Vec<u8>)>> {
        self.scan(REPLAY_PREFIX, sink, max)
    }

    /// A replay was delivered (or dead-lettered again): it leaves the queue.
    pub fn replay_done(&self, sink: &str, seq: u64) -> Result<()> {
        self.check_open()?;
        self.inner
            .db
            .remove(key(REPLAY_PREFIX, sink, seq))
            .map_err(|e| self.note_write_error("dead-letter", &e))?;
        self.inner.flush.note_write(0);
        Ok(())
    }

    /// Durable events of the log from `from_seq` on (within retention), for `herald replay`:
    /// never one a crash could still take back, which a replay would otherwise send as if it had
    /// happened.
    pub fn events_from(&self, from_seq: u64, max: usize) -> Result<Vec<(u64, Vec<u8>)>> {
        let after = from_seq.saturating_sub(1);
        let durable = self.durable_seq();
        let mut out = Vec::new();
        if max == 0 || after >= durable {
            return Ok(out);
        }
        let start = self.events_start(after).map_err(Self::dlq_err("*"))?;
        let range = start..keys::event(durable.saturating_add(1));
        'scan: for entry in self.inner.db.range(range) {
            let (k, v) = entry.map_err(Self::dlq_err("*"))?;
            if !k.starts_with(keys::EVENT_PREFIX) {
                break;
            }
            let plain = keys::plain_events(&k, &v)?;
            let (_, events) = keys::split_events(&k, &plain)?;
            for (seq, event) in events {
                if seq <= after {
                    continue;
                }
                if seq > durable {
                    break 'scan;
                }
                out.push((seq, event.to_vec()));
                if out.len() == max {
                    break 'scan;
                }
            }
        }
        Ok(out)
    }

    fn scan(&self, kind: &[u8], sink: &str, max: usize) -> Result<Vec<(u64, Vec<u8>)>> {
        let mut out = Vec::new();
        for entry in self.inner.db.scan_prefix(prefix(kind, sink)).take(max) {
            let (k, v) = entry.map_err(Self::dlq_err(sink))?;
            out.push((seq_of(&k), v.to_vec()));
        }
        Ok(out)
    }
}
