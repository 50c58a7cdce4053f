//! Append mode: one row per message in an event table, deduplicated by
//! the message's idempotency key so that a replayed batch adds nothing.
//!
//! The event table's schema (created by `create_table: true`):
//!
//! | column | type | holds |
//! |---|---|---|
//! | `id` | `bigserial` primary key | delivery order |
//! | `seq` | `bigint` | the commit LSN of the change's transaction |
//! | `commit_idx` | `integer` | the change's position in its transaction |
//! | `source_database` | `text` | `metadata.database_name` |
//! | `source_schema`, `source_table` | `text` | the source table |
//! | `action` | `text` | insert, update, delete, read (or truncate) |
//! | `record_pks` | `jsonb` | the primary-key values, as strings |
//! | `record` | `jsonb` | the row (a delete's old values) |
//! | `changes` | `jsonb` | an update's old values of changed columns |
//! | `committed_at` | `timestamptz` | the commit timestamp |
//! | `inserted_at` | `timestamptz` | when weft wrote the row |
//! | `idempotency_key` | `text` unique | the message's idempotency key |

use serde::Serialize;
use serde_json::{Map, Value};
use tokio_postgres::Transaction;

use super::item::Item;
use super::target::quoted;
use crate::config::TableRef;
use weft_postgres::TableName;
use weft_store::StoredMessage;

/// `CREATE TABLE IF NOT EXISTS` of an event table, with its
/// `committed_at` index (which time-based retention deletes by).
pub fn create_sql(table: &TableRef) -> String {
    let name = quoted(table);
    format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE IF NOT EXISTS {name} (
           id bigserial PRIMARY KEY,
           seq bigint NOT NULL,
           commit_idx integer NOT NULL,
           source_database text NOT NULL,
           source_schema text NOT NULL,
           source_table text NOT NULL,
           action text NOT NULL,
           record_pks jsonb NOT NULL,
           record jsonb NOT NULL,
           changes jsonb,
           committed_at timestamptz NOT NULL,
           inserted_at timestamptz NOT NULL DEFAULT now(),
           idempotency_key text NOT NULL UNIQUE
         );
         {index};",
        schema = weft_postgres::protocol::quote_ident(&table.schema),
        index = super::retention::create_index(&TableName {
            schema: table.schema.clone(),
            name: table.table.clone(),
        }),
    )
}

/// One event row as `insert_sql` reads it, borrowing the message.
#[derive(Serialize)]
struct EventRow<'a> {
    seq: u64,
    commit_idx: u32,
    source_database: &'a str,
    source_schema: &'a str,
    source_table: &'a str,
    action: &'a str,
    record_pks: &'a Value,
    record: &'a Map<String, Value>,
    changes: Option<&'a Value>,
    committed_at: &'a str,
    idempotency_key: &'a str,
}

/// Inserts one event row per item (in batch order) into `table`.
pub async fn write(
    tx: &Transaction<'_>,
    table: &TableRef,
    items: &[&Item],
    batch: &[StoredMessage],
) -> Result<(), tokio_postgres::Error> {
    const NO_KEYS: &Value = &Value::Array(Vec::new());
    let rows: Vec<EventRow<'_>> = items
        .iter()
        .map(|item| {
            let message = &batch[item.index];
            EventRow {
                seq: message.commit_lsn.0,
                commit_idx: message.commit_idx,
                source_database: item.meta_str("database_name"),
                source_schema: item.meta_str("table_schema"),
                source_table: item.meta_str("table_name"),
                action: &item.action_name,
                record_pks: item.metadata.get("record_pks").unwrap_or(NO_KEYS),
                record: &item.record,
                changes: item.changes.as_ref(),
                committed_at: item.meta_str("commit_timestamp"),
                idempotency_key: &message.idempotency_key,
            }
        })
        .collect();
    let rows = serde_json::to_string(&rows).expect("event rows serialize");
    tx.execute(&insert_sql(table), &[&rows]).await?;
    Ok(())
}

fn insert_sql(table: &TableRef) -> String {
    format!(
        "INSERT INTO {table} (seq, commit_idx, source_database, source_schema, source_table, \
           action, record_pks, record, changes, committed_at, idempotency_key) \
         SELECT (e.r->>'seq')::bigint, (e.r->>'commit_idx')::integer, e.r->>'source_database', \
           e.r->>'source_schema', e.r->>'source_table', e.r->>'action', e.r->'record_pks', \
           e.r->'record', NULLIF(e.r->'changes', 'null'::jsonb), \
           COALESCE(NULLIF(e.r->>'committed_at', '')::timestamptz, now()), e.r->>'idempotency_key' \
         FROM jsonb_array_elements($1::text::jsonb) WITH ORDINALITY AS e(r, n) \
         ORDER BY e.n \
         ON CONFLICT (idempotency_key) DO NOTHING",
        table = quoted(table),
    )
}
