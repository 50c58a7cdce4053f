use std::cell::{Cell, OnceCell};
use std::rc::Rc;

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
///
/// ```
/// use weft_sdk_guest::{Action, Change, Metadata};
///
/// let change = Change::new(
///     Action::Update,
///     r#"{"id": 9, "region": "eu"}"#.into(),
///     Some(r#"{"region": "us"}"#.into()),
///     Metadata { table_name: "orders".into(), ..Metadata::default() },
/// );
/// assert_eq!(change.action(), Action::Update);
/// assert_eq!(change.metadata().table_name, "orders");
/// assert_eq!(change.get::<i64>("id")?, Some(9));
/// assert_eq!(change.get_str("region")?, Some("eu"));
/// assert_eq!(change.old::<String>("region")?, Some("us".into()));
/// # Ok::<(), weft_sdk_guest::Error>(())
/// ```
pub struct Change {
    action: Action,
    record_text: String,
    changes_text: Option<String>,
    metadata: OnceCell<Metadata>,
    /// The host's per-change metadata, turned into `metadata` on first use:
    /// a filter that never reads it never pays for the shared strings.
    pending: Cell<Option<PendingMetadata>>,
    record: OnceCell<Map<String, Value>>,
}

impl std::fmt::Debug for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Change")
            .field("action", &self.action)
            .field("record", &self.record_text)
            .field("changes", &self.changes_text)
            .field("metadata", self.metadata())
            .finish()
    }
}

/// What the changes of one call share: the sink and the tables
/// (`batch-context` in the WIT).
#[derive(Debug, Default)]
pub(crate) struct BatchShared {
    /// Stable id of the sink.
    pub(crate) consumer_id: String,
    /// Name of the sink.
    pub(crate) consumer_name: String,
    /// `(database_name, table_schema, table_name)`; changes hold an index.
    pub(crate) relations: Vec<(String, String, String)>,
}

/// A change's own metadata as the host sent it, before it is joined with
/// the call's [`BatchShared`].
#[derive(Debug)]
pub(crate) struct PendingMetadata {
    /// The call's shared part.
    pub(crate) shared: Rc<BatchShared>,
    /// Index into `shared.relations`.
    pub(crate) relation: u32,
    /// Commit time, ISO-8601.
    pub(crate) commit_timestamp: String,
    /// LSN of the commit.
    pub(crate) commit_lsn: u64,
    /// Position within the transaction.
    pub(crate) commit_idx: u32,
    /// The deduplication key.
    pub(crate) idempotency_key: String,
    /// Primary-key values.
    pub(crate) record_pks: Vec<String>,
    /// Transaction annotations as JSON text.
    pub(crate) transaction_annotations: Option<String>,
    /// Enrichment as JSON text.
    pub(crate) enrichment: Option<String>,
}

impl PendingMetadata {
    fn into_metadata(self) -> Metadata {
        let (database_name, table_schema, table_name) = self
            .shared
            .relations
            .get(self.relation as usize)
            .cloned()
            .unwrap_or_default();
        Metadata {
            table_schema,
            table_name,
            commit_timestamp: self.commit_timestamp,
            commit_lsn: self.commit_lsn,
            commit_idx: self.commit_idx,
            idempotency_key: self.idempotency_key,
            record_pks: self.record_pks,
            database_name,
            consumer_id: self.shared.consumer_id.clone(),
            consumer_name: self.shared.consumer_name.clone(),
            transaction_annotations: self.transaction_annotations,
            enrichment: self.enrichment,
        }
    }
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
            metadata: OnceCell::from(metadata),
            pending: Cell::new(None),
            record: OnceCell::new(),
        }
    }

    /// A change as the host sent it; its metadata is built on first use.
    pub(crate) fn from_host(
        action: Action,
        record: String,
        changes: Option<String>,
        metadata: PendingMetadata,
    ) -> Self {
        Change {
            action,
            record_text: record,
            changes_text: changes,
            metadata: OnceCell::new(),
            pending: Cell::new(Some(metadata)),
            record: OnceCell::new(),
        }
    }

    /// What happened to the row.
    pub fn action(&self) -> Action {
        self.action
    }

    /// Where the change came from.
    pub fn metadata(&self) -> &Metadata {
        self.metadata.get_or_init(|| {
            self.pending
                .take()
                .map(|pending| pending.into_metadata())
                .unwrap_or_default()
        })
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

    /// For an update, the old values of the columns that changed (parsed
    /// on each call); `None` for insert, delete and read, and for updates
    /// Postgres sent no old values for. [`Change::old`] reads one column.
    pub fn changes(&self) -> Result<Option<Map<String, Value>>, Error> {
        self.changes_text
            .as_deref()
            .map(|text| parse_object(text, "changes"))
            .transpose()
    }

    /// The value of `column`, converted to `T`; `Ok(None)` when the column
    /// is absent or null, and a permanent error naming the column when it
    /// does not convert.
    ///
    /// ```
    /// use weft_sdk_guest::{Action, Change, Metadata};
    ///
    /// let change = Change::new(
    ///     Action::Insert,
    ///     r#"{"id": 42, "total": "19.99", "note": null}"#.into(),
    ///     None,
    ///     Metadata::default(),
    /// );
    /// assert_eq!(change.get::<i64>("id")?, Some(42));
    /// assert_eq!(change.get::<String>("total")?, Some("19.99".to_string()));
    /// assert_eq!(change.get::<i64>("note")?, None); // null
    /// assert_eq!(change.get::<i64>("missing")?, None);
    /// assert!(change.get::<i64>("total").is_err()); // text, not a number
    /// # Ok::<(), weft_sdk_guest::Error>(())
    /// ```
    pub fn get<T: DeserializeOwned>(&self, column: &str) -> Result<Option<T>, Error> {
        convert(self.record()?.get(column), column)
    }

    /// The text of `column`, borrowed; `Ok(None)` when the column is absent
    /// or null, and a permanent error when it holds something other than a
    /// JSON string (a number, say: use [`Change::get`]).
    ///
    /// ```
    /// use weft_sdk_guest::{Action, Change, Metadata};
    ///
    /// let change = Change::new(
    ///     Action::Insert,
    ///     r#"{"status": "paid", "id": 7}"#.into(),
    ///     None,
    ///     Metadata::default(),
    /// );
    /// assert_eq!(change.get_str("status")?, Some("paid"));
    /// assert_eq!(change.get_str("missing")?, None);
    /// assert!(change.get_str("id").is_err());
    /// # Ok::<(), weft_sdk_guest::Error>(())
    /// ```
    pub fn get_str(&self, column: &str) -> Result<Option<&str>, Error> {
        match self.record()?.get(column) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(other) => Err(Error::permanent(format!(
                "column `{column}`: expected text, found {other}"
            ))),
        }
    }

    /// The JSON value of `column` as the host rendered it (`to_jsonb()`:
    /// `numeric` keeps every digit, `json`/`jsonb` columns are nested
    /// values); `None` when the row has no such column. A SQL NULL is
    /// `Some(Value::Null)`; see [`Change::is_null`].
    ///
    /// ```
    /// use weft_sdk_guest::{Action, Change, Metadata};
    /// use weft_sdk_guest::serde_json::json;
    ///
    /// let change = Change::new(
    ///     Action::Insert,
    ///     r#"{"tags": {"vip": true}, "gone": null}"#.into(),
    ///     None,
    ///     Metadata::default(),
    /// );
    /// assert_eq!(change.get_json("tags")?, Some(&json!({"vip": true})));
    /// assert_eq!(change.get_json("gone")?, Some(&json!(null)));
    /// assert_eq!(change.get_json("missing")?, None);
    /// # Ok::<(), weft_sdk_guest::Error>(())
    /// ```
    pub fn get_json(&self, column: &str) -> Result<Option<&Value>, Error> {
        Ok(self.record()?.get(column))
    }

    /// Whether `column` is null or absent from the row. On delete without
    /// `REPLICA IDENTITY FULL` only the key columns are present, so every
    /// other column reads as null.
    ///
    /// ```
    /// use weft_sdk_guest::{Action, Change, Metadata};
    ///
    /// let change = Change::new(
    ///     Action::Delete,
    ///     r#"{"id": 3, "email": null}"#.into(),
    ///     None,
    ///     Metadata::default(),
    /// );
    /// assert!(change.is_null("email")?);
    /// assert!(change.is_null("name")?);
    /// assert!(!change.is_null("id")?);
    /// # Ok::<(), weft_sdk_guest::Error>(())
    /// ```
    pub fn is_null(&self, column: &str) -> Result<bool, Error> {
        Ok(matches!(
            self.record()?.get(column),
            None | Some(Value::Null)
        ))
    }

    /// For an update, the old value of `column` converted to `T`; `Ok(None)`
    /// when the column did not change, its old value was null, the change
    /// is not an update, or Postgres did not send old values (they need
    /// `REPLICA IDENTITY FULL`).
    ///
    /// ```
    /// use weft_sdk_guest::{Action, Change, Metadata};
    ///
    /// let change = Change::new(
    ///     Action::Update,
    ///     r#"{"id": 1, "status": "paid"}"#.into(),
    ///     Some(r#"{"status": "open"}"#.into()),
    ///     Metadata::default(),
    /// );
    /// assert_eq!(change.old::<String>("status")?, Some("open".to_string()));
    /// assert_eq!(change.old::<i64>("id")?, None); // unchanged
    /// # Ok::<(), weft_sdk_guest::Error>(())
    /// ```
    pub fn old<T: DeserializeOwned>(&self, column: &str) -> Result<Option<T>, Error> {
        match self.changes()? {
            Some(changes) => convert(changes.get(column), column),
            None => Ok(None),
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
        let m = self.metadata();
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

/// `value` converted to `T`; `None` for absent or null.
fn convert<T: DeserializeOwned>(value: Option<&Value>, column: &str) -> Result<Option<T>, Error> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(value) => serde_json::from_value(value.clone())
            .map(Some)
            .map_err(|e| Error::permanent(format!("column `{column}`: {e}"))),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn from_host(shared: &Rc<BatchShared>, relation: u32) -> Change {
        Change::from_host(
            Action::Delete,
            r#"{"id": 5}"#.into(),
            None,
            PendingMetadata {
                shared: shared.clone(),
                relation,
                commit_timestamp: "2024-05-01T12:00:00.000001Z".into(),
                commit_lsn: 77,
                commit_idx: 2,
                idempotency_key: "key".into(),
                record_pks: vec!["5".into()],
                transaction_annotations: None,
                enrichment: Some(r#"{"tier": "gold"}"#.into()),
            },
        )
    }

    #[test]
    fn host_metadata_is_joined_with_the_shared_context_on_first_read() {
        let shared = Rc::new(BatchShared {
            consumer_id: "c-1".into(),
            consumer_name: "orders-out".into(),
            relations: vec![
                ("app".into(), "public".into(), "users".into()),
                ("app".into(), "sales".into(), "orders".into()),
            ],
        });
        let change = from_host(&shared, 1);
        let metadata = change.metadata();
        assert_eq!(
            metadata,
            &Metadata {
                table_schema: "sales".into(),
                table_name: "orders".into(),
                commit_timestamp: "2024-05-01T12:00:00.000001Z".into(),
                commit_lsn: 77,
                commit_idx: 2,
                idempotency_key: "key".into(),
                record_pks: vec!["5".into()],
                database_name: "app".into(),
                consumer_id: "c-1".into(),
                consumer_name: "orders-out".into(),
                transaction_annotations: None,
                enrichment: Some(r#"{"tier": "gold"}"#.into()),
            }
        );
        // Read again: the same, not rebuilt from an emptied cell.
        assert_eq!(change.metadata().table_name, "orders");
        let message = change.into_message().unwrap();
        assert_eq!(message["metadata"]["table_schema"], "sales");
        assert_eq!(message["metadata"]["consumer"]["name"], "orders-out");
        assert_eq!(message["metadata"]["enrichment"]["tier"], "gold");
    }
}
