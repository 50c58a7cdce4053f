//! The message JSON every sink delivers, in Sequin's shape.
//!
//! This module is the one place that knows the envelope and the idempotency
//! key: sinks never build either themselves.

use std::sync::Arc;

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::change::{Action, Change, Relation, Row, Truncate};
use crate::lsn::Lsn;

pub mod json;

pub use crate::record::{Record, WrittenJson};

/// The consumer (sink) a message is delivered to.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ConsumerRef {
    /// A stable UUID derived from the sink's name.
    pub id: Arc<str>,
    /// The sink's name.
    pub name: Arc<str>,
}

impl ConsumerRef {
    /// The consumer reference for the sink called `name`.
    pub fn for_sink(name: &str) -> Self {
        ConsumerRef {
            id: uuid::Uuid::new_v5(
                &uuid::Uuid::NAMESPACE_OID,
                format!("weft.sink.{name}").as_bytes(),
            )
            .to_string()
            .into(),
            name: name.into(),
        }
    }
}

/// `metadata` of a message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Metadata {
    /// Schema of the changed table.
    pub table_schema: Arc<str>,
    /// Name of the changed table.
    pub table_name: Arc<str>,
    /// Commit time, ISO-8601 in UTC with microseconds.
    pub commit_timestamp: Arc<str>,
    /// LSN of the commit, as an integer.
    pub commit_lsn: Lsn,
    /// Position of the change within its transaction.
    pub commit_idx: u32,
    /// The key consumers deduplicate on; see [`idempotency_key`].
    pub idempotency_key: String,
    /// Primary-key values as strings, in key order.
    pub record_pks: Vec<String>,
    /// The database's `name` in the config (not the Postgres database name).
    pub database_name: Arc<str>,
    /// Transaction annotations; weft does not set them yet.
    pub transaction_annotations: Option<Value>,
    /// Data added by an enrichment function.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enrichment: Option<Value>,
    /// The webhook source that accepted the message; absent on changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_source: Option<String>,
    /// The sink the message is delivered to.
    pub consumer: ConsumerRef,
}

/// A message in Sequin's JSON shape.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Message {
    /// The row: new values, or the old row on delete.
    pub record: Record,
    /// Old values of changed columns on update; null otherwise.
    pub changes: Option<Row>,
    /// insert, update, delete or read.
    pub action: Action,
    /// Where the change came from and how to deduplicate it.
    pub metadata: Metadata,
}

impl Message {
    /// Builds the message for `change`, delivered to `consumer`, from the
    /// database configured as `database_name`. Takes the change so that its
    /// row moves into the message instead of being copied (a backfill's
    /// chunk is mostly this).
    /// `shared` hands out the texts consecutive messages repeat (their
    /// table's names, their commit time) without copying them per message.
    pub fn from_change(
        change: Change,
        database_name: &Arc<str>,
        consumer: &ConsumerRef,
        shared: &mut SharedTexts,
    ) -> Message {
        let changes = change.changes();
        let Change {
            relation,
            action,
            commit_lsn,
            commit_idx,
            commit_timestamp,
            new,
            old,
            webhook,
            backfill,
            ..
        } = change;
        // A read carries its key and its JSON; a change's come from its row.
        let (record, record_pks, idempotency_key) = match backfill {
            Some(read) => {
                let key = backfill_idempotency_key(&read.tag.id, &read.key);
                (Record::Json(read.record), read.key, key)
            }
            None => {
                let row = new.or(old).unwrap_or_default();
                let record_pks = relation.key_of(&row);
                let key = match &webhook {
                    Some(tag) => webhook_idempotency_key(&tag.request_id, commit_idx),
                    None => idempotency_key(commit_lsn, commit_idx),
                };
                (Record::Map(row), record_pks, key)
            }
        };
        let (table_schema, table_name) = shared.table(&relation);
        Message {
            record,
            changes,
            action,
            metadata: Metadata {
                table_schema,
                table_name,
                commit_timestamp: shared.timestamp(commit_timestamp),
                commit_lsn,
                commit_idx,
                idempotency_key,
                record_pks,
                database_name: Arc::clone(database_name),
                transaction_annotations: None,
                enrichment: None,
                webhook_source: webhook.map(|tag| tag.source.clone()),
                consumer: consumer.clone(),
            },
        }
    }
}

/// `metadata.database_name` of a webhook source's messages.
pub const WEBHOOK_DATABASE_NAME: &str = "webhook";

/// `metadata.table_schema` of a webhook source's messages; `table_name` is
/// the source's name, so functions, routing defaults and message groups see
/// the source as the table `webhook.<name>`.
pub const WEBHOOK_SCHEMA: &str = "webhook";

/// A TRUNCATE of one table, in Sequin's message shape: `action` is
/// `"truncate"`, `record` is `{}`, `changes` is null, and `metadata` is a
/// change's with `record_pks: []` plus `truncate`. Sinks with
/// `truncate: deliver` send it as is: functions do not run on it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TruncateMessage {
    /// Always empty: the truncated rows are not in the WAL.
    pub record: Row,
    /// Always null.
    pub changes: Option<Row>,
    /// Always `"truncate"`.
    pub action: &'static str,
    /// As a change's metadata, plus `truncate`.
    pub metadata: TruncateMetadata,
}

/// `metadata` of a [`TruncateMessage`].
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TruncateMetadata {
    /// The fields every message's metadata has.
    #[serde(flatten)]
    pub common: Metadata,
    /// The TRUNCATE's options.
    pub truncate: TruncateOptions,
}

/// `metadata.truncate`: the options of the TRUNCATE statement.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct TruncateOptions {
    /// `TRUNCATE ... CASCADE`.
    pub cascade: bool,
    /// `TRUNCATE ... RESTART IDENTITY`.
    pub restart_identity: bool,
}

impl TruncateMessage {
    /// The message for `relation`, one of the tables `truncate` empties, at
    /// position `commit_idx` (see [`Truncate::tables`]).
    pub fn new(
        truncate: &Truncate,
        relation: &Relation,
        commit_idx: u32,
        database_name: &str,
        consumer: &ConsumerRef,
    ) -> TruncateMessage {
        TruncateMessage {
            record: Row::new(),
            changes: None,
            action: "truncate",
            metadata: TruncateMetadata {
                common: Metadata {
                    table_schema: relation.schema.as_str().into(),
                    table_name: relation.name.as_str().into(),
                    commit_timestamp: timestamp_text(truncate.commit_timestamp).into(),
                    commit_lsn: truncate.commit_lsn,
                    commit_idx,
                    idempotency_key: idempotency_key(truncate.commit_lsn, commit_idx),
                    record_pks: Vec::new(),
                    database_name: database_name.into(),
                    transaction_annotations: None,
                    enrichment: None,
                    webhook_source: None,
                    consumer: consumer.clone(),
                },
                truncate: TruncateOptions {
                    cascade: truncate.cascade,
                    restart_identity: truncate.restart_identity,
                },
            },
        }
    }
}

/// The metadata texts of the last message built, shared with the next
/// while they repeat: its table's schema and name, its commit time.
#[derive(Debug, Default)]
pub struct SharedTexts {
    table: Option<(Arc<Relation>, Arc<str>, Arc<str>)>,
    timestamp: Option<(chrono::DateTime<chrono::Utc>, Arc<str>)>,
}

impl SharedTexts {
    /// `relation`'s schema and name.
    pub fn table(&mut self, relation: &Arc<Relation>) -> (Arc<str>, Arc<str>) {
        match &self.table {
            Some((last, schema, name)) if Arc::ptr_eq(last, relation) => {
                (Arc::clone(schema), Arc::clone(name))
            }
            _ => {
                let (schema, name): (Arc<str>, Arc<str>) = (
                    relation.schema.as_str().into(),
                    relation.name.as_str().into(),
                );
                self.table = Some((Arc::clone(relation), schema.clone(), name.clone()));
                (schema, name)
            }
        }
    }

    /// `at` as a message's `commit_timestamp`.
    pub fn timestamp(&mut self, at: chrono::DateTime<chrono::Utc>) -> Arc<str> {
        match &self.timestamp {
            Some((last, text)) if *last == at => Arc::clone(text),
            _ => {
                let text: Arc<str> = timestamp_text(at).into();
                self.timestamp = Some((at, Arc::clone(&text)));
                text
            }
        }
    }
}

/// `metadata.commit_timestamp`: ISO-8601 in UTC with microseconds.
fn timestamp_text(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// The idempotency key of a change: `Base64("<commit_lsn>:<commit_idx>")`,
/// as Sequin computes it. Stable across restarts and redeliveries.
pub fn idempotency_key(commit_lsn: Lsn, commit_idx: u32) -> String {
    base64_of(|plain| {
        use std::fmt::Write;
        write!(plain, "{}:{}", commit_lsn.0, commit_idx).expect("a String takes any text");
    })
}

/// The idempotency key of a backfill's `read` message, as Sequin computes
/// it: `Base64("<backfill id>:<pk values joined by ':'>")`. Stable for the
/// row within one backfill, so a chunk read again after a crash is
/// recognised as a duplicate; a new backfill gives new keys.
pub fn backfill_idempotency_key(backfill_id: &str, primary_key: &[String]) -> String {
    // Base64 turns each 3 bytes into 4 characters on their own, so the
    // id's longest prefix of whole 3-byte groups (all of a UUID) encodes
    // the same for every row: it is encoded once per backfill per thread,
    // and only the rest of the text for each row.
    thread_local! {
        static PREFIX: std::cell::RefCell<(String, String)> =
            const { std::cell::RefCell::new((String::new(), String::new())) };
    }
    let whole = backfill_id.len() - backfill_id.len() % 3;
    let whole = if backfill_id.is_char_boundary(whole) {
        whole
    } else {
        0
    };
    let (head, tail) = backfill_id.split_at(whole);
    PREFIX.with_borrow_mut(|(id, encoded)| {
        if id != head {
            id.clear();
            id.push_str(head);
            encoded.clear();
            base64::engine::general_purpose::STANDARD.encode_string(head, encoded);
        }
        let rest = tail.len() + 1 + key_values_len(primary_key);
        let mut key =
            String::with_capacity(encoded.len() + base64::encoded_len(rest, true).unwrap_or(0));
        key.push_str(encoded);
        base64_append(&mut key, |plain| {
            plain.push_str(tail);
            plain.push(':');
            push_key_values(plain, primary_key);
        });
        key
    })
}

/// Base64 of the text `write` puts together.
fn base64_of(write: impl FnOnce(&mut String)) -> String {
    let mut out = String::new();
    base64_append(&mut out, write);
    out
}

/// Appends to `out` the base64 of the text `write` puts together. The text
/// is put together in one buffer per thread: every message needs a key,
/// and a backfill makes them by the million.
fn base64_append(out: &mut String, write: impl FnOnce(&mut String)) {
    thread_local! {
        static PLAIN: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    PLAIN.with_borrow_mut(|plain| {
        plain.clear();
        write(plain);
        // Encoded on the stack: `encode_string` clears a 1 KiB buffer and
        // checks its output's UTF-8 for every key, several times the cost
        // of encoding a key's few dozen bytes.
        let mut encoded = [0u8; 256];
        let engine = base64::engine::general_purpose::STANDARD;
        match engine.encode_slice(plain.as_bytes(), &mut encoded) {
            Ok(len) => out.push_str(std::str::from_utf8(&encoded[..len]).expect("base64 is ASCII")),
            Err(_) => engine.encode_string(plain.as_bytes(), out),
        }
    })
}

/// How long `values` are once [`push_key_values`] joins them.
pub fn key_values_len(values: &[String]) -> usize {
    values.iter().map(String::len).sum::<usize>() + values.len().saturating_sub(1)
}

/// Appends `values` to `out` joined by colons, as keys and groups join a
/// row's primary-key values (without a `Vec` and `format!` per row).
pub fn push_key_values(out: &mut String, values: &[String]) {
    for (i, value) in values.iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        out.push_str(value);
    }
}

/// The idempotency key of the message at `index` of the webhook request
/// weft gave the id `request_id`: `Base64("<request_id>:<index>")`. Request
/// ids are UUIDs stored with the request, so the key is stable across
/// restarts and redeliveries and never repeats.
pub fn webhook_idempotency_key(request_id: &str, index: u32) -> String {
    base64_of(|plain| {
        use std::fmt::Write;
        write!(plain, "{request_id}:{index}").expect("a String takes any text");
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_round_trips_through_its_json() {
        let message = Message {
            record: serde_json::from_value(serde_json::json!({"id": 1, "name": "x"})).unwrap(),
            changes: None,
            action: Action::Update,
            metadata: Metadata {
                table_schema: "public".into(),
                table_name: "t".into(),
                commit_timestamp: "2026-12-01T00:00:00.000000Z".into(),
                commit_lsn: Lsn(u64::MAX >> 1),
                commit_idx: 3,
                idempotency_key: idempotency_key(Lsn(9), 3),
                record_pks: vec!["1".into()],
                database_name: "db".into(),
                transaction_annotations: None,
                enrichment: None,
                webhook_source: None,
                consumer: ConsumerRef::for_sink("s"),
            },
        };
        let json = serde_json::to_value(&message).unwrap();
        assert_eq!(serde_json::from_value::<Message>(json).unwrap(), message);
    }

    #[test]
    fn idempotency_key_matches_sequin() {
        // Base64 of "123:4".
        assert_eq!(idempotency_key(Lsn(123), 4), "MTIzOjQ=");
        // The buffer one key is put together in holds nothing of the last.
        assert_eq!(
            backfill_idempotency_key("a-long-backfill-id", &["1".into()]),
            "YS1sb25nLWJhY2tmaWxsLWlkOjE="
        );
        assert_eq!(idempotency_key(Lsn(1), 2), "MToy");
        assert_eq!(webhook_idempotency_key("r", 0), "cjow");
    }

    #[test]
    fn backfill_keys_are_the_base64_of_the_whole_text_whatever_the_id() {
        let whole = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
        let uuid = "0b6c8f4e-2a65-4d0e-9a4f-2d1f3c6b7e10";
        // Ids of each length modulo 3, alternating, so each reuses or
        // replaces the prefix the one before left.
        for id in [
            uuid, "ab", uuid, "abcd", "abc", "", "aé", "aéb", "aaé", uuid,
        ] {
            // The last key is longer than the stack buffer keys are encoded in.
            let keys = [
                vec!["1".to_string()],
                vec!["eu".into(), "42".into()],
                vec!["x".repeat(300)],
            ];
            for key in keys {
                assert_eq!(
                    backfill_idempotency_key(id, &key),
                    whole(&format!("{id}:{}", key.join(":"))),
                    "{id:?} {key:?}"
                );
            }
        }
    }

    #[test]
    fn consecutive_messages_share_their_table_and_commit_time_texts() {
        let table = |name: &str| {
            Arc::new(Relation {
                oid: 1,
                schema: "public".into(),
                name: name.into(),
                columns: Vec::new(),
                primary_key: Vec::new(),
            })
        };
        let (orders, users) = (table("orders"), table("users"));
        let mut shared = SharedTexts::default();
        let (schema, name) = shared.table(&orders);
        let (schema_again, name_again) = shared.table(&orders);
        assert!(Arc::ptr_eq(&schema, &schema_again) && Arc::ptr_eq(&name, &name_again));
        assert_eq!((&*schema, &*name), ("public", "orders"));
        assert_eq!(&*shared.table(&users).1, "users");
        let at = chrono::DateTime::from_timestamp(1_700_000_000, 123_456_000).unwrap();
        let text = shared.timestamp(at);
        assert!(Arc::ptr_eq(&text, &shared.timestamp(at)));
        assert_eq!(&*text, "2023-11-14T22:13:20.123456Z");
        let later = shared.timestamp(at + chrono::Duration::microseconds(1));
        assert_eq!(&*later, "2023-11-14T22:13:20.123457Z");
    }

    #[test]
    fn a_backfill_key_joins_the_backfill_id_and_the_key_values_with_colons() {
        let decoded = |key: String| {
            String::from_utf8(
                base64::engine::general_purpose::STANDARD
                    .decode(key)
                    .unwrap(),
            )
            .unwrap()
        };
        assert_eq!(
            decoded(backfill_idempotency_key("bf", &["1".into(), "a:b".into()])),
            "bf:1:a:b"
        );
        assert_eq!(
            decoded(backfill_idempotency_key("bf", &["7".into()])),
            "bf:7"
        );
        assert_eq!(decoded(backfill_idempotency_key("bf", &[])), "bf:");
    }
}
