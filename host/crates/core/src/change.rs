//! The change model: what the source produces and every later stage consumes.

use std::borrow::Cow;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::lsn::Lsn;

/// What happened to a row. `Read` marks rows emitted by a backfill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// A row was inserted.
    Insert,
    /// A row was updated.
    Update,
    /// A row was deleted.
    Delete,
    /// A row was read by a backfill.
    Read,
}

impl Action {
    /// The lowercase name used in messages, subjects and config.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Insert => "insert",
            Action::Update => "update",
            Action::Delete => "delete",
            Action::Read => "read",
        }
    }
}

/// A column of a [`Relation`], as the replication stream describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// The column's name.
    pub name: String,
    /// The OID of the column's type.
    pub type_oid: u32,
    /// The type modifier (`atttypmod`), -1 when none.
    pub type_modifier: i32,
    /// Whether the column is part of the replica identity.
    pub is_identity_key: bool,
}

/// A table as the source knows it at the time of a change.
///
/// Relations are shared (`Arc`) between all changes decoded under the same
/// schema version; a schema change produces a new `Relation`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    /// The table's OID.
    pub oid: u32,
    /// The schema (namespace) name.
    pub schema: String,
    /// The table name.
    pub name: String,
    /// The columns in table order.
    pub columns: Vec<Column>,
    /// Names of the primary-key columns in key order; empty when the table
    /// has no primary key.
    pub primary_key: Vec<String>,
}

impl Relation {
    /// `schema.table`, the form used in `include_tables`.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }

    /// The primary-key values of `row`, as strings, in key order.
    pub fn key_of(&self, row: &Row) -> Vec<String> {
        self.primary_key
            .iter()
            .map(|column| row.get(column).map(json_key_text).unwrap_or_default())
            .collect()
    }
}

pub use crate::record::Row;

/// One committed change to one row.
#[derive(Debug, Clone)]
pub struct Change {
    /// The table the row belongs to.
    pub relation: Arc<Relation>,
    /// What happened.
    pub action: Action,
    /// The LSN of the commit record of the change's transaction.
    pub commit_lsn: Lsn,
    /// The change's position within its transaction, from 0.
    pub commit_idx: u32,
    /// The transaction id.
    pub xid: u32,
    /// When the transaction committed.
    pub commit_timestamp: DateTime<Utc>,
    /// The new row, for insert and update; `None` for delete, and for a
    /// read, whose row travels as JSON in [`Change::backfill`].
    pub new: Option<Row>,
    /// The old row when Postgres sent one: on delete, and on update when the
    /// replica identity changed or is FULL. Under REPLICA IDENTITY FULL it is
    /// the whole row; otherwise only the identity columns.
    pub old: Option<Row>,
    /// Set on a `read` change a backfill emitted, with its row: it goes to
    /// that backfill's sink only, with a key derived from the backfill.
    pub backfill: Option<BackfillRead>,
    /// Set on a change a webhook source accepted (see
    /// `crate::webhook_source`): it names the source and keys the message.
    pub webhook: Option<Arc<WebhookTag>>,
}

/// Which webhook source accepted a change, and in which request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookTag {
    /// The source's name.
    pub source: String,
    /// The id weft gave the request that carried it (a UUID), from which
    /// its messages' idempotency keys derive.
    pub request_id: String,
}

/// Which backfill emitted a `read` change, and for which sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackfillTag {
    /// The backfill's id.
    pub id: String,
    /// The sink it fills.
    pub sink: String,
}

/// A row a backfill read, as its runner wrote it: the record's JSON object
/// (in column order, each value as a change renders it) and its
/// primary-key values. Written once from Postgres's text, it is copied into
/// the stored message as it is (see [`crate::record::Record`]).
#[derive(Debug, Clone)]
pub struct BackfillRead {
    /// The backfill that read the row.
    pub tag: Arc<BackfillTag>,
    /// The primary-key values, as strings, in key order.
    pub key: Vec<String>,
    /// The row's JSON object (weft wrote it: it is not parsed again).
    pub record: crate::record::WrittenJson,
}

/// A backfill watermark seen on the stream: a `pg_logical_emit_message`
/// with prefix [`WATERMARK_PREFIX`], at its position in commit order.
#[derive(Debug, Clone)]
pub struct Watermark {
    /// The message's content (see `crate::backfill`).
    pub content: String,
    /// The LSN of the commit record of its transaction.
    pub commit_lsn: Lsn,
    /// Its position within the transaction; rows a backfill emits at this
    /// watermark take the positions after it.
    pub commit_idx: u32,
    /// The transaction id.
    pub xid: u32,
    /// When the transaction committed.
    pub commit_timestamp: DateTime<Utc>,
}

/// The `pg_logical_emit_message` prefix of backfill watermarks.
pub const WATERMARK_PREFIX: &str = "weft:backfill";

impl Change {
    /// The row the message shows as `record`: the new row, the old row for
    /// a delete, or a read's row (parsed from its JSON).
    pub fn record(&self) -> Cow<'_, Row> {
        static EMPTY: std::sync::OnceLock<Row> = std::sync::OnceLock::new();
        if let Some(read) = &self.backfill {
            return Cow::Owned(crate::record::Record::parse_written(&read.record));
        }
        Cow::Borrowed(
            self.new
                .as_ref()
                .or(self.old.as_ref())
                .unwrap_or_else(|| EMPTY.get_or_init(Row::new)),
        )
    }

    /// The message's `changes`: for an update, the old values of the columns
    /// whose value changed (`{}` when Postgres sent no old row); `None` for
    /// every other action.
    pub fn changes(&self) -> Option<Row> {
        if self.action != Action::Update {
            return None;
        }
        let (Some(new), Some(old)) = (&self.new, &self.old) else {
            return Some(Row::new());
        };
        Some(
            old.iter()
                .filter(|(column, old_value)| new.get(*column) != Some(*old_value))
                .map(|(column, old_value)| (column.clone(), old_value.clone()))
                .collect(),
        )
    }

    /// The primary-key values of the row, as strings, in key order.
    pub fn primary_key_values(&self) -> Vec<String> {
        match &self.backfill {
            Some(read) => read.key.clone(),
            None => self.relation.key_of(&self.record()),
        }
    }
}

/// A rough count of the heap bytes a row occupies, for memory limits
/// (spilling big transactions, sizing pipeline batches). Not exact: it
/// counts text lengths plus a fixed overhead per value.
pub fn approx_row_bytes(row: &Row) -> usize {
    fn value_bytes(value: &serde_json::Value) -> usize {
        32 + match value {
            serde_json::Value::String(s) => s.len(),
            serde_json::Value::Number(_) => 16,
            serde_json::Value::Array(items) => items.iter().map(value_bytes).sum(),
            serde_json::Value::Object(map) => {
                map.iter().map(|(k, v)| k.len() + value_bytes(v)).sum()
            }
            serde_json::Value::Null | serde_json::Value::Bool(_) => 0,
        }
    }
    row.iter().map(|(k, v)| 32 + k.len() + value_bytes(v)).sum()
}

impl Change {
    /// A rough count of the heap bytes the change occupies; see
    /// [`approx_row_bytes`].
    pub fn approx_bytes(&self) -> usize {
        128 + self.new.as_ref().map_or(0, approx_row_bytes)
            + self.old.as_ref().map_or(0, approx_row_bytes)
            + self.backfill.as_ref().map_or(0, |read| read.record.len())
    }
}

/// The text of a JSON value as used in keys: strings bare, everything else as
/// its JSON text.
pub fn json_key_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// What the source hands the pipeline: committed changes in commit order,
/// each transaction closed by a [`SourceEvent::Commit`].
#[derive(Debug, Clone)]
pub enum SourceEvent {
    /// A change of a committed transaction.
    Change(Change),
    /// Every change of the transaction committed at `commit_lsn` has been sent.
    /// Once the pipeline has stored them durably it may confirm `end_lsn`.
    Commit {
        /// The LSN of the commit record.
        commit_lsn: Lsn,
        /// The LSN just past the commit record; what the slot is confirmed to.
        end_lsn: Lsn,
    },
    /// A committed transaction truncated these tables, at this point among
    /// its changes. Each table takes a `commit_idx` like a change (see
    /// [`Truncate::tables`]), so positions stay stable across replays. Each
    /// sink skips it or delivers a message per table, by its `truncate`
    /// option; see `docs/replication.md`.
    Truncate(Truncate),
    /// The server has sent everything before `wal_end` and no transaction is
    /// open: once every earlier event is durable, `wal_end` may be confirmed.
    Idle {
        /// The server's WAL position when it went idle.
        wal_end: Lsn,
    },
    /// A backfill watermark; the pipeline turns it into the backfill's
    /// `read` changes at this position (see `crate::backfill`).
    Watermark(Watermark),
}

/// A TRUNCATE of one or more tables in a committed transaction.
#[derive(Debug, Clone)]
pub struct Truncate {
    /// The truncated tables (those in the publication).
    pub relations: Vec<Arc<Relation>>,
    /// `TRUNCATE ... CASCADE`.
    pub cascade: bool,
    /// `TRUNCATE ... RESTART IDENTITY`.
    pub restart_identity: bool,
    /// The LSN of the commit record of the transaction.
    pub commit_lsn: Lsn,
    /// The position of its first table within the transaction, from 0,
    /// shared with changes; the tables take consecutive positions.
    pub commit_idx: u32,
    /// The transaction id.
    pub xid: u32,
    /// When the transaction committed.
    pub commit_timestamp: DateTime<Utc>,
}

impl Truncate {
    /// Each truncated table with its own position in the transaction:
    /// `commit_idx`, `commit_idx + 1`, ... in the order Postgres listed them.
    pub fn tables(&self) -> impl Iterator<Item = (&Arc<Relation>, u32)> {
        self.relations.iter().zip(self.commit_idx..)
    }

    /// The position of its last table: the next change of the transaction
    /// comes after it.
    pub fn last_idx(&self) -> u32 {
        self.commit_idx + self.relations.len().saturating_sub(1) as u32
    }
}
