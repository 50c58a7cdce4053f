use std::cell::OnceCell;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::Error;

/// What happened to the row. `Read` marks rows emitted by a backfill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
    /// The lowercase name used in messages: `insert`, `update`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Insert => "insert",
            Action::Update => "update",
            Action::Delete => "delete",
            Action::Read => "read",
        }
    }
}

/// Where a change came from: the `metadata` of a Sequin message.
///
/// `Default` (empty strings and zeros) is for tests of a plugin:
/// `Metadata { table_name: "orders".into(), ..Metadata::default() }`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    /// Schema of the changed table.
    pub table_schema: String,
    /// Name of the changed table.
    pub table_name: String,
    /// Commit time, ISO-8601 in UTC with microseconds.
    pub commit_timestamp: String,
    /// LSN of the commit.
    pub commit_lsn: u64,
    /// Position of the change within its transaction.
    pub commit_idx: u32,
    /// The key consumers deduplicate on.
    pub idempotency_key: String,
    /// Primary-key values as strings, in key order.
    pub record_pks: Vec<String>,
    /// The database's name in the weft config.
    pub database_name: String,
    /// Stable id of the sink the message goes to.
    pub consumer_id: String,
    /// Name of the sink the message goes to.
    pub consumer_name: String,
    /// Transaction annotations as JSON text.
    pub transaction_annotations: Option<String>,
    /// Enrichment data as JSON text.
    pub enrichment: Option<String>,
}

/// One change: `(action, record, changes, metadata)`, as a Sequin function
/// receives it. The row arrives as JSON text and is parsed on first use.
#[derive(Debug)]
pub struct Change {
    action: Action,
    record_text: String,
    changes_text: Option<String>,
    metadata: Metadata,
    record: OnceCell<Map<String, Value>>,
}

impl Change {
    /// A change from its parts; `record` and `changes` are JSON object text.
    pub fn new(
        action: Action,
        record: String,
        changes: Option<String>,
        metadata: Metadata,
    ) -> Self {
        Change {
            action,
            record_text: record,
            changes_text: changes,
            metadata,
            record: OnceCell::new(),
        }
    }

    /// What happened to the row.
    pub fn action(&self) -> Action {
        self.action
    }

    /// Where the change came from.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The row as the JSON text the host sent (unparsed, cheap).
    pub fn record_text(&self) -> &str {
        &self.record_text
    }

    /// The row as a JSON object: the new row, or the old row on delete.
    /// Parsed once; `numeric` values keep every digit.
    pub fn record(&self) -> Result<&Map<String, Value>, Error> {
        if let Some(record) = self.record.get() {
            return Ok(record);
        }
        let parsed = parse_object(&self.record_text, "record")?;
        Ok(self.record.get_or_init(|| parsed))
    }

    /// The row, for editing in place. [`Change::to_message`] uses the edited
    /// row.
    pub fn record_mut(&mut self) -> Result<&mut Map<String, Value>, Error> {
        self.record()?;
        Ok(self.record.get_mut().expect("record parsed just above"))
    }

    /// For an update, the old values of the columns that changed.
    pub fn changes(&self) -> Result<Option<Map<String, Value>>, Error> {
        self.changes_text
            .as_deref()
            .map(|text| parse_object(text, "changes"))
            .transpose()
    }

    /// The value of `column`, converted to `T`; `Ok(None)` when the column
    /// is absent or null.
    ///
    /// ```ignore
    /// let name: Option<String> = change.get("name")?;
    /// let id: Option<i64> = change.get("id")?;
    /// ```
    pub fn get<T: DeserializeOwned>(&self, column: &str) -> Result<Option<T>, Error> {
        match self.record()?.get(column) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => serde_json::from_value(value.clone())
                .map(Some)
                .map_err(|e| Error::permanent(format!("column `{column}`: {e}"))),
        }
    }

    /// The Sequin message JSON for this change,
    /// `{"record", "changes", "action", "metadata"}`, with the record as
    /// edited through [`Change::record_mut`].
    pub fn to_message(&self) -> Result<Value, Error> {
        self.message_with(self.record()?.clone())
    }

    /// Like [`Change::to_message`], without copying the record.
    pub fn into_message(mut self) -> Result<Value, Error> {
        self.record()?;
        let record = self.record.take().expect("record parsed just above");
        self.message_with(record)
    }

    fn message_with(&self, record: Map<String, Value>) -> Result<Value, Error> {
        let m = &self.metadata;
        let mut metadata = Map::new();
        metadata.insert("table_schema".into(), m.table_schema.clone().into());
        metadata.insert("table_name".into(), m.table_name.clone().into());
        metadata.insert("commit_timestamp".into(), m.commit_timestamp.clone().into());
        metadata.insert("commit_lsn".into(), m.commit_lsn.into());
        metadata.insert("commit_idx".into(), m.commit_idx.into());
        metadata.insert("idempotency_key".into(), m.idempotency_key.clone().into());
        metadata.insert("record_pks".into(), m.record_pks.clone().into());
        metadata.insert("database_name".into(), m.database_name.clone().into());
        metadata.insert(
            "transaction_annotations".into(),
            parse_optional(m.transaction_annotations.as_deref())?,
        );
        if let Some(enrichment) = m.enrichment.as_deref() {
            metadata.insert("enrichment".into(), serde_json::from_str(enrichment)?);
        }
        let mut consumer = Map::new();
        consumer.insert("id".into(), m.consumer_id.clone().into());
        consumer.insert("name".into(), m.consumer_name.clone().into());
        metadata.insert("consumer".into(), Value::Object(consumer));

        let mut message = Map::new();
        message.insert("record".into(), Value::Object(record));
        message.insert(
            "changes".into(),
            parse_optional(self.changes_text.as_deref())?,
        );
        message.insert("action".into(), self.action.as_str().into());
        message.insert("metadata".into(), Value::Object(metadata));
        Ok(Value::Object(message))
    }
}

fn parse_object(text: &str, what: &str) -> Result<Map<String, Value>, Error> {
    serde_json::from_str(text)
        .map_err(|e| Error::permanent(format!("{what} is not a JSON object: {e}")))
}

fn parse_optional(text: Option<&str>) -> Result<Value, Error> {
    Ok(match text {
        Some(text) => serde_json::from_str(text)?,
        None => Value::Null,
    })
}
