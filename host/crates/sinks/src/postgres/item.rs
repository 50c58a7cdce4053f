//! One stored message read as what a Postgres sink writes: the action, the
//! row, its source and its target table.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::config::TableRef;
use weft_core::payload::Payload;
use weft_store::StoredMessage;

/// The value weft puts in a column whose unchanged TOAST value the server
/// did not send (see `docs/replication.md`).
pub const UNCHANGED_TOAST: &str = "unchanged_toast";

/// A message's action, as a Postgres sink applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemAction {
    /// insert, update or read: upsert the row.
    Upsert,
    /// delete: delete the row.
    Delete,
    /// truncate: empty the table.
    Truncate,
}

/// A message ready to write.
#[derive(Debug, Clone)]
pub struct Item {
    /// Its position in the delivery batch.
    pub index: usize,
    /// The action as written in the message (`insert`, `update`, ...).
    pub action_name: String,
    /// What a mirror does with it.
    pub action: ItemAction,
    /// `record`: the row (for a delete, its old values).
    pub record: Map<String, Value>,
    /// `changes`: old values of changed columns, when the message has them.
    pub changes: Option<Value>,
    /// `metadata` of the message.
    pub metadata: Map<String, Value>,
    /// The table it is written to.
    pub table: TableRef,
}

impl Item {
    /// Reads `message` (the `index`-th of its batch). `configured` is the
    /// sink's `table`, `fallback` the table used when neither a route nor
    /// the config names one (`None`: the message's source table).
    pub fn parse(
        index: usize,
        message: &StoredMessage,
        configured: Option<&TableRef>,
        fallback: Option<&TableRef>,
    ) -> Result<Item, String> {
        // Parsed here, once, and taken apart without copying.
        let mut payload = match message.payload.to_payload() {
            Ok(Payload::Json(Value::Object(payload))) => payload,
            Ok(_) => return Err(
                "a postgres sink writes a message's `action`, `record` and `metadata`; this payload is not a JSON object (a transform must keep the message's shape and may change its record)"
                    .into(),
            ),
            Err(error) => return Err(error.to_string()),
        };
        let action_name = match payload.get("action") {
            Some(Value::String(action)) => action.clone(),
            _ => return Err("the message has no string `action` (insert, update, delete, read or truncate); a transform must keep it".into()),
        };
        let action = match action_name.as_str() {
            "insert" | "update" | "read" => ItemAction::Upsert,
            "delete" => ItemAction::Delete,
            "truncate" => ItemAction::Truncate,
            other => {
                return Err(format!(
                    "unknown action {other:?}; a postgres sink applies insert, update, read, delete and truncate"
                ));
            }
        };
        let record = match payload.remove("record") {
            Some(Value::Object(record)) => record,
            Some(Value::Null) | None if action == ItemAction::Truncate => Map::new(),
            _ => return Err("the message has no object `record`; a transform must keep it (it may change the record's columns)".into()),
        };
        let metadata = match payload.remove("metadata") {
            Some(Value::Object(metadata)) => metadata,
            _ => Map::new(),
        };
        let table = match &message.route.table {
            Some(routed) => TableRef::parse(routed).map_err(|error| error.0)?,
            None => match configured.or(fallback) {
                Some(table) => table.clone(),
                None => source_table(&metadata)?,
            },
        };
        Ok(Item {
            index,
            action_name,
            action,
            record,
            changes: payload.remove("changes").filter(|c| !c.is_null()),
            metadata,
            table,
        })
    }

    /// A metadata string field, or `""`.
    pub fn meta_str(&self, name: &str) -> &str {
        self.metadata
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// The record without the columns whose unchanged TOAST value the
    /// server did not send (updates only: an insert or read has every
    /// value). Borrowed unless a column had to be left out.
    pub fn known_columns(&self) -> Cow<'_, Map<String, Value>> {
        let placeholder = |value: &Value| value.as_str() == Some(UNCHANGED_TOAST);
        if self.action_name != "update" || !self.record.values().any(placeholder) {
            return Cow::Borrowed(&self.record);
        }
        Cow::Owned(
            self.record
                .iter()
                .filter(|(_, value)| !placeholder(value))
                .map(|(column, value)| (column.clone(), value.clone()))
                .collect(),
        )
    }
}

/// `metadata.table_schema` and `table_name` as a table.
fn source_table(metadata: &Map<String, Value>) -> Result<TableRef, String> {
    let part = |name: &str| metadata.get(name).and_then(Value::as_str);
    match (part("table_schema"), part("table_name")) {
        (Some(schema), Some(table)) if !schema.is_empty() && !table.is_empty() => Ok(TableRef {
            schema: schema.into(),
            table: table.into(),
        }),
        _ => Err("the message's metadata names no source table, so the target table is unknown; set the sink's `table`, or route `table`".into()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use weft_core::lsn::Lsn;
    use weft_core::route::Route;
    use weft_store::AckId;

    fn stored(payload: Value, route: Route) -> StoredMessage {
        StoredMessage {
            ack_id: AckId::default(),
            commit_lsn: Lsn(1),
            commit_idx: 0,
            group_id: "g".into(),
            idempotency_key: "k".into(),
            payload: Payload::Json(payload).into(),
            size_bytes: 0,
            route,
            attempt: 1,
        }
    }

    fn message(action: &str) -> Value {
        json!({"action": action, "record": {"id": 1, "t": "unchanged_toast"},
               "metadata": {"table_schema": "public", "table_name": "orders"}})
    }

    #[test]
    fn target_is_route_then_config_then_source() {
        let configured = TableRef::parse("copy.orders").unwrap();
        let routed = Route {
            table: Some("routed.t".into()),
            ..Route::default()
        };
        let plain = stored(message("insert"), Route::default());
        let item = Item::parse(0, &plain, None, None).unwrap();
        assert_eq!(item.table.to_string(), "public.orders");
        let item = Item::parse(0, &plain, Some(&configured), None).unwrap();
        assert_eq!(item.table, configured);
        let item = Item::parse(
            0,
            &stored(message("insert"), routed),
            Some(&configured),
            None,
        );
        assert_eq!(item.unwrap().table.to_string(), "routed.t");
    }

    #[test]
    fn only_updates_drop_unchanged_toast_columns() {
        let update = Item::parse(0, &stored(message("update"), Route::default()), None, None);
        let update = update.unwrap();
        let known = update.known_columns();
        let missing: Vec<&String> = update
            .record
            .keys()
            .filter(|c| !known.contains_key(*c))
            .collect();
        assert_eq!(missing, ["t"]);
        assert!(known.contains_key("id") && !known.contains_key("t"));
        let insert = Item::parse(0, &stored(message("insert"), Route::default()), None, None);
        let insert = insert.unwrap();
        assert_eq!(*insert.known_columns(), insert.record);
    }

    #[test]
    fn reshaped_payloads_are_refused_with_the_reason() {
        let flat = stored(json!({"id": 1}), Route::default());
        let error = Item::parse(0, &flat, None, None).unwrap_err();
        assert!(error.contains("action"), "{error}");
        let bytes = StoredMessage {
            payload: Payload::Bytes {
                content_type: "a/b".into(),
                data: vec![1],
            }
            .into(),
            ..flat
        };
        assert!(Item::parse(0, &bytes, None, None).is_err());
    }
}
