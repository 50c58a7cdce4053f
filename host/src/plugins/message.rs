//! Message → the WIT `change` record every world takes.

use super::bindings::types;
use crate::change::Action;
use crate::message::Message;

/// The WIT change for `message`. `record` and `changes` travel as JSON text,
/// so `numeric` values keep every digit.
pub(crate) fn to_wit_change(message: &Message) -> types::Change {
    let m = &message.metadata;
    types::Change {
        action: match message.action {
            Action::Insert => types::Action::Insert,
            Action::Update => types::Action::Update,
            Action::Delete => types::Action::Delete,
            Action::Read => types::Action::Read,
        },
        record: json_text(&message.record),
        changes: message.changes.as_ref().map(json_text),
        metadata: types::Metadata {
            table_schema: m.table_schema.clone(),
            table_name: m.table_name.clone(),
            commit_timestamp: m.commit_timestamp.clone(),
            commit_lsn: m.commit_lsn.0,
            commit_idx: m.commit_idx,
            idempotency_key: m.idempotency_key.clone(),
            record_pks: m.record_pks.clone(),
            database_name: m.database_name.clone(),
            consumer_id: m.consumer.id.clone(),
            consumer_name: m.consumer.name.clone(),
            transaction_annotations: m.transaction_annotations.as_ref().map(json_text),
            enrichment: m.enrichment.as_ref().map(json_text),
        },
    }
}

fn json_text<T: serde::Serialize + ?Sized>(value: &T) -> String {
    // Serializing a JSON value or map to a string cannot fail.
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_string())
}
