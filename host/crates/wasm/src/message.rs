//! Messages → the WIT `batch-context` and `change` records every world takes.
//!
//! The WIT values borrow from the messages (`ownership: Borrowing` in
//! `bindings`): only the JSON texts of rows are rendered for a call.

use super::bindings::types;
use weft_core::change::Action;
use weft_core::message::{Message, Record};

/// Calls `call` with the WIT form of `batch`, the messages of one sink: what
/// they share (the sink, and each table once in `relations`, which changes
/// reference by index) and the changes. `record` and `changes` travel as
/// JSON text, so `numeric` values keep every digit.
pub(crate) fn with_wit_batch<R>(
    batch: &[Message],
    call: impl FnOnce(types::BatchContext<'_>, &[types::Change<'_>]) -> R,
) -> R {
    let consumer = batch.first().map(|message| &message.metadata.consumer);
    debug_assert!(
        batch
            .iter()
            .all(|message| Some(&message.metadata.consumer) == consumer),
        "a batch holds the messages of one sink"
    );
    let texts: Vec<Texts> = batch.iter().map(Texts::of).collect();
    // Every change's key values in one list, so that a batch makes one
    // allocation for them, not one per change.
    let pks: Vec<&str> = batch
        .iter()
        .flat_map(|message| message.metadata.record_pks.iter().map(String::as_str))
        .collect();
    let mut relations: Vec<types::Relation<'_>> = Vec::new();
    let mut pks_from = 0;
    let changes: Vec<types::Change<'_>> = batch
        .iter()
        .zip(&texts)
        .map(|(message, texts)| {
            let m = &message.metadata;
            let pks_to = pks_from + m.record_pks.len();
            let change = types::Change {
                action: action(message.action),
                record: &texts.record,
                changes: texts.changes.as_deref(),
                metadata: types::Metadata {
                    relation: relation_index(&mut relations, message),
                    commit_timestamp: &m.commit_timestamp,
                    commit_lsn: m.commit_lsn.0,
                    commit_idx: m.commit_idx,
                    idempotency_key: &m.idempotency_key,
                    record_pks: &pks[pks_from..pks_to],
                    transaction_annotations: texts.annotations.as_deref(),
                    enrichment: texts.enrichment.as_deref(),
                },
            };
            pks_from = pks_to;
            change
        })
        .collect();
    let context = types::BatchContext {
        consumer_id: consumer.map_or("", |c| &c.id),
        consumer_name: consumer.map_or("", |c| &c.name),
        relations: &relations,
    };
    call(context, &changes)
}

/// The JSON texts one change crosses with.
struct Texts {
    record: String,
    changes: Option<String>,
    annotations: Option<String>,
    enrichment: Option<String>,
}

impl Texts {
    fn of(message: &Message) -> Texts {
        Texts {
            record: match &message.record {
                Record::Json(json) => json.to_string(),
                Record::Map(row) => json_text(row),
            },
            changes: message.changes.as_ref().map(json_text),
            annotations: message
                .metadata
                .transaction_annotations
                .as_ref()
                .map(json_text),
            enrichment: message.metadata.enrichment.as_ref().map(json_text),
        }
    }
}

/// The index of `message`'s table in `relations`, added when new. A batch
/// holds a handful of tables at most, so a scan beats hashing.
fn relation_index<'a>(relations: &mut Vec<types::Relation<'a>>, message: &'a Message) -> u32 {
    let m = &message.metadata;
    let found = relations.iter().position(|r| {
        r.table_name == &*m.table_name
            && r.table_schema == &*m.table_schema
            && r.database_name == &*m.database_name
    });
    let index = found.unwrap_or_else(|| {
        relations.push(types::Relation {
            database_name: &m.database_name,
            table_schema: &m.table_schema,
            table_name: &m.table_name,
        });
        relations.len() - 1
    });
    // A batch is far smaller than 2^32 messages.
    index as u32
}

fn action(action: Action) -> types::Action {
    match action {
        Action::Insert => types::Action::Insert,
        Action::Update => types::Action::Update,
        Action::Delete => types::Action::Delete,
        Action::Read => types::Action::Read,
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
    use crate::test_support::message;

    #[test]
    fn each_table_is_sent_once_and_changes_point_at_theirs() {
        let mut orders = message(Action::Insert, json!({"id": 2}), None);
        orders.metadata.table_name = "orders".into();
        orders.metadata.record_pks = vec!["2".into(), "eu".into()];
        let users = message(Action::Insert, json!({"id": 1}), None);
        let mut elsewhere = users.clone();
        elsewhere.metadata.database_name = "archive".into();
        let batch = [users.clone(), orders, users.clone(), elsewhere];

        with_wit_batch(&batch, |context, changes| {
            let relations: Vec<_> = context
                .relations
                .iter()
                .map(|r| (r.database_name, r.table_schema, r.table_name))
                .collect();
            assert_eq!(
                relations,
                [
                    ("app", "public", "users"),
                    ("app", "public", "orders"),
                    ("archive", "public", "users")
                ]
            );
            let indexes: Vec<u32> = changes.iter().map(|c| c.metadata.relation).collect();
            assert_eq!(indexes, [0, 1, 0, 2]);
            let pks: Vec<&[&str]> = changes.iter().map(|c| c.metadata.record_pks).collect();
            assert_eq!(pks, [&["1"][..], &["2", "eu"], &["1"], &["1"]]);
            assert_eq!(context.consumer_name, &*users.metadata.consumer.name);
            assert_eq!(context.consumer_id, &*users.metadata.consumer.id);
            assert_eq!(changes[0].record, r#"{"id":1}"#);
        });
    }
}
