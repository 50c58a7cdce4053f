//! The changes of a streamed, still running transaction, in memory up to a
//! threshold and on disk beyond it.
//!
//! With pgoutput v2 `streaming 'on'`, Postgres sends a transaction larger
//! than `logical_decoding_work_mem` in chunks while it runs, and only the
//! final Stream Commit or Stream Abort says what becomes of it. weft must
//! hold those changes until then without holding them in memory: a 1 GB
//! transaction must not need 1 GB of RAM. A [`TransactionBuffer`] keeps up
//! to [`SPILL_THRESHOLD_BYTES`] of decoded changes in memory and then
//! appends them to a spill file of its own (`<xid>.spill` in the source's
//! spill directory), which [`TransactionBuffer::into_replay`] reads back in
//! order at Stream Commit. Files are deleted when the buffer is dropped
//! (commit replayed, abort, lost connection) and, for crashes, by
//! [`clean_spill_dir`] when the source starts.
//!
//! Subtransaction aborts (`ROLLBACK TO SAVEPOINT`) drop the subtransaction's
//! changes from memory at once; its changes already on disk are skipped at
//! replay. Postgres sends one Stream Abort per aborted subtransaction, nested
//! ones included, so a set of aborted subtransaction ids is exact.
//!
//! The file format is private to one run and never read by another build:
//! length-prefixed records, each with the subtransaction id, an index into
//! the buffer's relation table (relations stay in memory: they are few and
//! a schema change inside the transaction adds an entry), the action and the
//! rows as (column index, JSON text) pairs. File I/O is synchronous and
//! buffered; a spill writes at most the threshold at once.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::SourceError;
use weft_core::change::{Action, Relation, Row};

/// In-memory changes of one transaction beyond this size go to disk.
pub const SPILL_THRESHOLD_BYTES: usize = 8 * 1024 * 1024;

/// What a streamed transaction holds for later: a row change or a TRUNCATE.
#[derive(Debug, Clone)]
pub enum PendingKind {
    /// A row change.
    Row {
        /// What happened.
        action: Action,
        /// The new row.
        new: Option<Row>,
        /// The old row.
        old: Option<Row>,
    },
    /// A TRUNCATE of this and possibly further tables.
    Truncate {
        /// The other truncated tables (the first is `PendingChange::relation`).
        more: Vec<Arc<Relation>>,
        /// `TRUNCATE ... CASCADE`.
        cascade: bool,
        /// `TRUNCATE ... RESTART IDENTITY`.
        restart_identity: bool,
    },
}

/// A change waiting for its transaction's commit.
#[derive(Debug, Clone)]
pub struct PendingChange {
    /// The (sub)transaction that made it.
    pub subxid: u32,
    /// The table.
    pub relation: Arc<Relation>,
    /// What it is.
    pub kind: PendingKind,
}

impl PendingChange {
    /// A rough count of the bytes it occupies in memory.
    fn approx_bytes(&self) -> usize {
        let rows = match &self.kind {
            PendingKind::Row { new, old, .. } => {
                new.as_ref().map_or(0, weft_core::change::approx_row_bytes)
                    + old.as_ref().map_or(0, weft_core::change::approx_row_bytes)
            }
            PendingKind::Truncate { more, .. } => more.len() * 8,
        };
        rows + 96
    }
}

/// Deletes leftover spill files of an earlier run (a crash leaves them) and
/// makes sure the directory exists.
pub fn clean_spill_dir(dir: &Path) -> Result<(), SourceError> {
    let spill_error = |source| SourceError::Spill {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(spill_error)?;
    for entry in std::fs::read_dir(dir).map_err(spill_error)? {
        let path = entry.map_err(spill_error)?.path();
        if path.extension().is_some_and(|e| e == "spill") {
            std::fs::remove_file(&path).map_err(|source| SourceError::Spill {
                path: path.clone(),
                source,
            })?;
            tracing::info!(path = %path.display(), "removed a stale spill file");
        }
    }
    Ok(())
}

/// The changes of one streamed, still running transaction; see the module
/// docs.
#[derive(Debug)]
pub struct TransactionBuffer {
    xid: u32,
    dir: PathBuf,
    threshold: usize,
    memory: Vec<PendingChange>,
    memory_bytes: usize,
    file: Option<SpillFile>,
    /// Relations referenced by spilled records, by index.
    relations: Vec<Arc<Relation>>,
    aborted: HashSet<u32>,
}

impl TransactionBuffer {
    /// An empty buffer for top-level transaction `xid`, spilling into `dir`
    /// beyond `threshold` bytes.
    pub fn new(xid: u32, dir: &Path, threshold: usize) -> TransactionBuffer {
        TransactionBuffer {
            xid,
            dir: dir.to_path_buf(),
            threshold,
            memory: Vec::new(),
            memory_bytes: 0,
            file: None,
            relations: Vec::new(),
            aborted: HashSet::new(),
        }
    }

    /// Adds a change, spilling the in-memory part to disk past the threshold.
    pub fn push(&mut self, change: PendingChange) -> Result<(), SourceError> {
        self.memory_bytes += change.approx_bytes();
        self.memory.push(change);
        if self.memory_bytes >= self.threshold {
            self.spill()?;
        }
        Ok(())
    }

    /// Whether some changes are on disk.
    pub fn spilled(&self) -> bool {
        self.file.is_some()
    }

    /// Forgets the changes of subtransaction `subxid`.
    pub fn abort_subtransaction(&mut self, subxid: u32) {
        self.memory.retain(|c| c.subxid != subxid);
        self.memory_bytes = self.memory.iter().map(PendingChange::approx_bytes).sum();
        if self.file.is_some() {
            self.aborted.insert(subxid);
        }
    }

    /// Every change not aborted, in order: first those on disk, then those
    /// in memory.
    pub fn into_replay(mut self) -> Result<Replay, SourceError> {
        let reader = match self.file.take() {
            None => None,
            Some(mut file) => {
                file.writer.flush().map_err(|e| file.error(e))?;
                let read = File::open(&file.path).map_err(|e| file.error(e))?;
                Some((BufReader::with_capacity(1 << 16, read), file))
            }
        };
        Ok(Replay {
            reader,
            relations: std::mem::take(&mut self.relations),
            aborted: std::mem::take(&mut self.aborted),
            memory: std::mem::take(&mut self.memory).into_iter(),
        })
    }

    fn spill(&mut self) -> Result<(), SourceError> {
        if self.file.is_none() {
            let path = self.dir.join(format!("{}.spill", self.xid));
            let file = File::create(&path).map_err(|source| SourceError::Spill {
                path: path.clone(),
                source,
            })?;
            tracing::debug!(xid = self.xid, path = %path.display(), "spilling a streamed transaction to disk");
            self.file = Some(SpillFile {
                path,
                writer: BufWriter::with_capacity(1 << 16, file),
            });
        }
        let mut record = Vec::new();
        for change in std::mem::take(&mut self.memory) {
            record.clear();
            encode(&change, &mut self.relations, &mut record);
            let file = self.file.as_mut().expect("created above");
            let len = u32::try_from(record.len())
                .map_err(|_| file.error(std::io::Error::other("a single change exceeds 4 GiB")))?;
            file.writer
                .write_all(&len.to_le_bytes())
                .and_then(|()| file.writer.write_all(&record))
                .map_err(|e| file.error(e))?;
        }
        self.memory_bytes = 0;
        Ok(())
    }
}

/// A spill file, deleted when dropped.
#[derive(Debug)]
struct SpillFile {
    path: PathBuf,
    writer: BufWriter<File>,
}

impl SpillFile {
    fn error(&self, source: std::io::Error) -> SourceError {
        SourceError::Spill {
            path: self.path.clone(),
            source,
        }
    }
}

impl Drop for SpillFile {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot delete a spill file");
        }
    }
}

/// The changes of a committed streamed transaction, read back in order.
pub struct Replay {
    reader: Option<(BufReader<File>, SpillFile)>,
    relations: Vec<Arc<Relation>>,
    aborted: HashSet<u32>,
    memory: std::vec::IntoIter<PendingChange>,
}

impl Replay {
    /// The next change, or `None` when all were returned.
    pub fn next_change(&mut self) -> Result<Option<PendingChange>, SourceError> {
        while let Some((reader, file)) = &mut self.reader {
            let mut len = [0u8; 4];
            match reader.read_exact(&mut len) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    self.reader = None;
                    break;
                }
                Err(e) => return Err(file.error(e)),
            }
            let mut record = vec![0u8; u32::from_le_bytes(len) as usize];
            reader.read_exact(&mut record).map_err(|e| file.error(e))?;
            let change = decode(&record, &self.relations).map_err(|reason| {
                file.error(std::io::Error::new(std::io::ErrorKind::InvalidData, reason))
            })?;
            if !self.aborted.contains(&change.subxid) {
                return Ok(Some(change));
            }
        }
        Ok(self.memory.next())
    }
}

const ACTION_INSERT: u8 = 0;
const ACTION_UPDATE: u8 = 1;
const ACTION_DELETE: u8 = 2;
const ACTION_READ: u8 = 3;
const KIND_TRUNCATE: u8 = 9;
/// A row entry whose key is not a column of the relation (never produced
/// by the decoder, kept for safety): the name follows.
const NAMED_COLUMN: u16 = u16::MAX;

fn relation_index(relations: &mut Vec<Arc<Relation>>, relation: &Arc<Relation>) -> u32 {
    // Changes come in runs of the same relation: look at the newest first.
    if let Some(i) = relations.iter().rposition(|r| Arc::ptr_eq(r, relation)) {
        return i as u32;
    }
    relations.push(Arc::clone(relation));
    (relations.len() - 1) as u32
}

fn encode(change: &PendingChange, relations: &mut Vec<Arc<Relation>>, out: &mut Vec<u8>) {
    out.extend_from_slice(&change.subxid.to_le_bytes());
    out.extend_from_slice(&relation_index(relations, &change.relation).to_le_bytes());
    match &change.kind {
        PendingKind::Row { action, new, old } => {
            out.push(match action {
                Action::Insert => ACTION_INSERT,
                Action::Update => ACTION_UPDATE,
                Action::Delete => ACTION_DELETE,
                Action::Read => ACTION_READ,
            });
            encode_row(&change.relation, new.as_ref(), out);
            encode_row(&change.relation, old.as_ref(), out);
        }
        PendingKind::Truncate {
            more,
            cascade,
            restart_identity,
        } => {
            out.push(KIND_TRUNCATE);
            out.push(u8::from(*cascade) | (u8::from(*restart_identity) << 1));
            out.extend_from_slice(&(more.len() as u32).to_le_bytes());
            for relation in more {
                out.extend_from_slice(&relation_index(relations, relation).to_le_bytes());
            }
        }
    }
}

fn encode_row(relation: &Relation, row: Option<&Row>, out: &mut Vec<u8>) {
    let Some(row) = row else {
        out.push(0);
        return;
    };
    out.push(1);
    out.extend_from_slice(&(row.len() as u32).to_le_bytes());
    // Rows hold their columns in table order, so the search moves forward.
    let mut next = 0;
    for (name, value) in row {
        let found = relation.columns[next.min(relation.columns.len())..]
            .iter()
            .position(|c| &c.name == name)
            .map(|offset| next + offset)
            .filter(|&i| i < NAMED_COLUMN as usize);
        match found {
            Some(i) => {
                out.extend_from_slice(&(i as u16).to_le_bytes());
                next = i + 1;
            }
            None => {
                out.extend_from_slice(&NAMED_COLUMN.to_le_bytes());
                out.extend_from_slice(&(name.len() as u32).to_le_bytes());
                out.extend_from_slice(name.as_bytes());
            }
        }
        let json = value.to_string();
        out.extend_from_slice(&(json.len() as u32).to_le_bytes());
        out.extend_from_slice(json.as_bytes());
    }
}

struct Cursor<'a> {
    buf: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.buf.len() < n {
            return Err("a spill record is truncated".into());
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn relation(&mut self, relations: &[Arc<Relation>]) -> Result<Arc<Relation>, String> {
        let index = self.u32()? as usize;
        relations
            .get(index)
            .cloned()
            .ok_or_else(|| format!("a spill record names unknown relation #{index}"))
    }
}

fn decode(record: &[u8], relations: &[Arc<Relation>]) -> Result<PendingChange, String> {
    let mut r = Cursor { buf: record };
    let subxid = r.u32()?;
    let relation = r.relation(relations)?;
    let kind = match r.u8()? {
        KIND_TRUNCATE => {
            let flags = r.u8()?;
            let count = r.u32()? as usize;
            let mut more = Vec::with_capacity(count.min(record.len() / 4));
            for _ in 0..count {
                more.push(r.relation(relations)?);
            }
            PendingKind::Truncate {
                more,
                cascade: flags & 1 == 1,
                restart_identity: flags & 2 == 2,
            }
        }
        action => {
            let action = match action {
                ACTION_INSERT => Action::Insert,
                ACTION_UPDATE => Action::Update,
                ACTION_DELETE => Action::Delete,
                ACTION_READ => Action::Read,
                other => return Err(format!("a spill record has unknown kind {other}")),
            };
            let new = decode_row(&mut r, &relation)?;
            let old = decode_row(&mut r, &relation)?;
            PendingKind::Row { action, new, old }
        }
    };
    Ok(PendingChange {
        subxid,
        relation,
        kind,
    })
}

fn decode_row(r: &mut Cursor<'_>, relation: &Relation) -> Result<Option<Row>, String> {
    if r.u8()? == 0 {
        return Ok(None);
    }
    let count = r.u32()? as usize;
    let mut row = Row::new();
    for _ in 0..count {
        let name = match r.u16()? {
            NAMED_COLUMN => {
                let len = r.u32()? as usize;
                String::from_utf8(r.take(len)?.to_vec())
                    .map_err(|_| "a spilled column name is not UTF-8".to_string())?
            }
            i => relation
                .columns
                .get(i as usize)
                .map(|c| c.name.clone())
                .ok_or_else(|| format!("a spill record names unknown column #{i}"))?,
        };
        let len = r.u32()? as usize;
        let value: Value = serde_json::from_slice(r.take(len)?)
            .map_err(|e| format!("a spilled value is not JSON: {e}"))?;
        row.insert(name, value);
    }
    Ok(Some(row))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use weft_core::change::Column;

    fn relation(name: &str) -> Arc<Relation> {
        Arc::new(Relation {
            oid: 1,
            schema: "public".into(),
            name: name.into(),
            columns: ["id", "note", "big"]
                .iter()
                .map(|c| Column {
                    name: (*c).into(),
                    type_oid: 25,
                    type_modifier: -1,
                    is_identity_key: *c == "id",
                })
                .collect(),
            primary_key: vec!["id".into()],
        })
    }

    fn row(value: Value) -> Row {
        value.as_object().unwrap().clone()
    }

    fn insert(subxid: u32, relation: &Arc<Relation>, id: i64) -> PendingChange {
        PendingChange {
            subxid,
            relation: relation.clone(),
            kind: PendingKind::Row {
                action: Action::Insert,
                new: Some(row(
                    json!({"id": id, "note": "n\"é", "big": 12345678901234567890.125_f64}),
                )),
                old: None,
            },
        }
    }

    fn ids(buffer: TransactionBuffer) -> Vec<i64> {
        let mut replay = buffer.into_replay().unwrap();
        let mut out = Vec::new();
        while let Some(change) = replay.next_change().unwrap() {
            let PendingKind::Row { new, .. } = change.kind else {
                panic!()
            };
            out.push(new.unwrap()["id"].as_i64().unwrap());
        }
        out
    }

    #[test]
    fn spills_past_the_threshold_and_replays_in_order_without_aborted_subtransactions() {
        let dir = tempfile::tempdir().unwrap();
        let t = relation("t");
        let mut buffer = TransactionBuffer::new(7, dir.path(), 1000);
        for id in 0..100 {
            buffer
                .push(insert(if id % 10 == 3 { 8 } else { 7 }, &t, id))
                .unwrap();
        }
        assert!(buffer.spilled());
        assert!(dir.path().join("7.spill").exists());
        buffer.abort_subtransaction(8);
        let expected: Vec<i64> = (0..100).filter(|id| id % 10 != 3).collect();
        assert_eq!(ids(buffer), expected);
        assert!(
            !dir.path().join("7.spill").exists(),
            "the spill file is deleted after replay"
        );
    }

    #[test]
    fn rows_survive_the_round_trip_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let t = relation("t");
        let u = relation("u");
        let mut buffer = TransactionBuffer::new(9, dir.path(), 0);
        let update = PendingChange {
            subxid: 9,
            relation: u.clone(),
            kind: PendingKind::Row {
                action: Action::Update,
                new: Some(row(json!({"id": 1, "note": null, "big": {"a": [1, "x"]}}))),
                old: Some(row(json!({"id": 1}))),
            },
        };
        let truncate = PendingChange {
            subxid: 9,
            relation: t.clone(),
            kind: PendingKind::Truncate {
                more: vec![u.clone()],
                cascade: true,
                restart_identity: false,
            },
        };
        buffer.push(update.clone()).unwrap();
        buffer.push(truncate).unwrap();
        assert!(buffer.spilled());
        let mut replay = buffer.into_replay().unwrap();
        let first = replay.next_change().unwrap().unwrap();
        assert!(Arc::ptr_eq(&first.relation, &u));
        let (
            PendingKind::Row { new, old, action },
            PendingKind::Row {
                new: n2, old: o2, ..
            },
        ) = (first.kind, update.kind)
        else {
            panic!()
        };
        assert_eq!(action, Action::Update);
        assert_eq!((new, old), (n2, o2));
        let second = replay.next_change().unwrap().unwrap();
        assert!(Arc::ptr_eq(&second.relation, &t));
        let PendingKind::Truncate {
            more,
            cascade,
            restart_identity,
        } = second.kind
        else {
            panic!()
        };
        assert!(Arc::ptr_eq(&more[0], &u) && cascade && !restart_identity);
        assert!(replay.next_change().unwrap().is_none());
    }

    #[test]
    fn dropping_a_buffer_deletes_its_file_and_startup_cleans_stale_ones() {
        let dir = tempfile::tempdir().unwrap();
        let t = relation("t");
        let mut buffer = TransactionBuffer::new(5, dir.path(), 0);
        buffer.push(insert(5, &t, 1)).unwrap();
        assert!(dir.path().join("5.spill").exists());
        drop(buffer);
        assert!(!dir.path().join("5.spill").exists());
        std::fs::write(dir.path().join("77.spill"), b"stale").unwrap();
        std::fs::write(dir.path().join("keep.txt"), b"other").unwrap();
        clean_spill_dir(dir.path()).unwrap();
        assert!(!dir.path().join("77.spill").exists());
        assert!(dir.path().join("keep.txt").exists());
    }

    #[test]
    fn a_corrupt_spill_file_is_an_error_not_a_panic() {
        let relations = vec![relation("t")];
        let mut record = Vec::new();
        encode(
            &insert(1, &relations[0], 1),
            &mut relations.clone(),
            &mut record,
        );
        for len in 0..record.len() {
            assert!(decode(&record[..len], &relations).is_err(), "prefix {len}");
        }
        assert!(decode(&record, &[]).is_err(), "unknown relation");
    }
}
