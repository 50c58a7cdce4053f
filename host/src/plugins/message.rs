//! Messages → the WIT `batch-context` and `change` records every world takes.

use super::bindings::types;
use crate::change::Action;
use crate::message::Message;

/// The WIT form of one batch: what its changes share, and the changes.
pub(crate) struct WitBatch {
    pub(crate) context: types::BatchContext,
    pub(crate) changes: Vec<types::Change>,
}

/// The WIT batch for `batch`, the messages of one sink. Table and database
/// names go once into `context.relations`, which each change references by
/// index; `record` and `changes` travel as JSON text, so `numeric` values
/// keep every digit.
pub(crate) fn to_wit_batch(batch: &[Message]) -> WitBatch {
    let consumer = batch.first().map(|message| &message.metadata.consumer);
    debug_assert!(
        batch
            .iter()
            .all(|message| Some(&message.metadata.consumer) == consumer),
        "a batch holds the messages of one sink"
    );
    let mut relations: Vec<types::Relation> = Vec::new();
    let changes = batch
        .iter()
        .map(|message| {
            let relation = relation_index(&mut relations, message);
            to_wit_change(message, relation)
        })
        .collect();
    WitBatch {
        context: types::BatchContext {
            consumer_id: consumer.map(|c| c.id.clone()).unwrap_or_default(),
            consumer_name: consumer.map(|c| c.name.clone()).unwrap_or_default(),
            relations,
        },
        changes,
    }
}

/// The index of `message`'s table in `relations`, added when new. A batch
/// holds a handful of tables at most, so a scan beats hashing.
fn relation_index(relations: &mut Vec<types::Relation>, message: &Message) -> u32 {
    let m = &message.metadata;
    let found = relations.iter().position(|r| {
        r.table_name == m.table_name
            && r.table_schema == m.table_schema
            && r.database_name == m.database_name
    });
    let index = found.unwrap_or_else(|| {
        relations.push(types::Relation {
            database_name: m.database_name.clone(),
            table_schema: m.table_schema.clone(),
            table_name: m.table_name.clone(),
        });
        relations.len() - 1
    });
    // A batch is far smaller than 2^32 messages.
    index as u32
}

fn to_wit_change(message: &Message, relation: u32) -> types::Change {
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
            relation,
            commit_timestamp: m.commit_timestamp.clone(),
            commit_lsn: m.commit_lsn.0,
            commit_idx: m.commit_idx,
            idempotency_key: m.idempotency_key.clone(),
            record_pks: m.record_pks.clone(),
            transaction_annotations: m.transaction_annotations.as_ref().map(json_text),
            enrichment: m.enrichment.as_ref().map(json_text),
        },
    }
}

fn json_text<T: serde::Serialize + ?Sized>(value: &T) -> String {
    // Serializing a JSON value or map to a string cannot fail.
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_string())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plugins::tests::message;

    #[test]
    fn each_table_is_sent_once_and_changes_point_at_theirs() {
        let mut orders = message(Action::Insert, json!({"id": 2}), None);
        orders.metadata.table_name = "orders".into();
        let users = message(Action::Insert, json!({"id": 1}), None);
        let mut elsewhere = users.clone();
        elsewhere.metadata.database_name = "archive".into();

        let wit = to_wit_batch(&[users.clone(), orders, users.clone(), elsewhere]);

        let relations: Vec<_> = wit
            .context
            .relations
            .iter()
            .map(|r| (&*r.database_name, &*r.table_schema, &*r.table_name))
            .collect();
        assert_eq!(
            relations,
            [
                ("app", "public", "users"),
                ("app", "public", "orders"),
                ("archive", "public", "users")
            ]
        );
        let indexes: Vec<u32> = wit.changes.iter().map(|c| c.metadata.relation).collect();
        assert_eq!(indexes, [0, 1, 0, 2]);
        assert_eq!(wit.context.consumer_name, users.metadata.consumer.name);
        assert_eq!(wit.context.consumer_id, users.metadata.consumer.id);
        assert_eq!(wit.changes[0].record, r#"{"id":1}"#);
    }
}
