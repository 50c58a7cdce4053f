//! Mirror mode: apply a batch's rows to their target table by primary key.
//!
//! Items are cut into runs in which no key repeats (the delivery worker
//! already hands over one message per group, so a batch is usually one
//! run). A run is at most one `DELETE` and one multi-row upsert per column
//! set; a truncate is a run of its own. Statements are idempotent, so a
//! batch replayed after a crash leaves the same rows.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};

use serde_json::{Map, Value};
use tokio_postgres::Transaction;

use super::item::{Item, ItemAction};
use super::target::{TargetColumn, TargetTable};

/// Why a run could not be written.
#[derive(Debug)]
pub enum MirrorError {
    /// The items do not fit the table (no primary key, unknown columns):
    /// `(batch index, reason)` per refused item.
    Refused(Vec<(usize, String)>),
    /// Postgres refused a statement.
    Sql(tokio_postgres::Error),
}

impl From<tokio_postgres::Error> for MirrorError {
    fn from(error: tokio_postgres::Error) -> Self {
        MirrorError::Sql(error)
    }
}

/// Writes `items` (all for `target`, in batch order) inside `tx`.
pub async fn write(
    tx: &Transaction<'_>,
    target: &TargetTable,
    items: &[&Item],
) -> Result<(), MirrorError> {
    check(target, items)?;
    for run in runs(target, items) {
        write_run(tx, target, &run).await?;
    }
    Ok(())
}

/// Refuses items the table cannot take, naming what to change.
fn check(target: &TargetTable, items: &[&Item]) -> Result<(), MirrorError> {
    let table = &target.table;
    let mut refused = Vec::new();
    for item in items {
        if item.action == ItemAction::Truncate {
            continue;
        }
        if target.primary_key.is_empty() {
            refused.push((
                item.index,
                format!("target table {table} has no primary key; a mirror upserts and deletes by primary key, so add one"),
            ));
            continue;
        }
        if let Some(key) = target
            .primary_key
            .iter()
            .find(|k| item.record.get(*k).is_none_or(Value::is_null))
        {
            refused.push((
                item.index,
                format!("the row has no value for {table}'s primary-key column {key:?}"),
            ));
            continue;
        }
        if item.action == ItemAction::Delete {
            continue;
        }
        let unknown: Vec<&String> = item
            .record
            .keys()
            .filter(|column| target.column(column).is_none())
            .collect();
        if !unknown.is_empty() {
            refused.push((
                item.index,
                format!("target table {table} has no (writable) column {unknown:?}; add it (ALTER TABLE {table} ADD COLUMN ...) and the message is written on its next retry"),
            ));
        }
    }
    if refused.is_empty() {
        Ok(())
    } else {
        Err(MirrorError::Refused(refused))
    }
}

/// A row to upsert: the record, or a copy of it without some columns.
type Row<'a> = Cow<'a, Map<String, Value>>;

/// A stretch of items in which each key occurs once.
enum Run<'a> {
    Rows(Vec<&'a Item>),
    Truncate,
}

fn runs<'a>(target: &TargetTable, items: &[&'a Item]) -> Vec<Run<'a>> {
    let mut runs = Vec::new();
    let mut current: Vec<&Item> = Vec::new();
    let mut keys: HashSet<String> = HashSet::new();
    for &item in items {
        if item.action == ItemAction::Truncate {
            if !current.is_empty() {
                runs.push(Run::Rows(std::mem::take(&mut current)));
                keys.clear();
            }
            runs.push(Run::Truncate);
            continue;
        }
        let key = key_of(target, &item.record);
        if !keys.insert(key.clone()) {
            runs.push(Run::Rows(std::mem::take(&mut current)));
            keys.clear();
            keys.insert(key);
        }
        current.push(item);
    }
    if !current.is_empty() {
        runs.push(Run::Rows(current));
    }
    runs
}

fn key_of(target: &TargetTable, record: &Map<String, Value>) -> String {
    let values: Vec<&Value> = target
        .primary_key
        .iter()
        .map(|k| record.get(k).unwrap_or(&Value::Null))
        .collect();
    serde_json::to_string(&values).expect("JSON values serialize")
}

async fn write_run(
    tx: &Transaction<'_>,
    target: &TargetTable,
    run: &Run<'_>,
) -> Result<(), tokio_postgres::Error> {
    let items = match run {
        Run::Truncate => return tx.batch_execute(&target.truncate_sql()).await,
        Run::Rows(items) => items,
    };
    let mut deletes = Vec::new();
    // Rows grouped by the columns they carry: an update whose unchanged
    // TOAST values the server left out writes only the columns it has.
    let mut upserts: BTreeMap<Vec<&str>, Vec<Row<'_>>> = BTreeMap::new();
    for item in items {
        match item.action {
            ItemAction::Delete => {
                let key: Map<String, Value> = target
                    .primary_key
                    .iter()
                    .map(|k| (k.clone(), item.record[k].clone()))
                    .collect();
                deletes.push(Value::Object(key));
            }
            ItemAction::Upsert => {
                let known = item.known_columns();
                // Named from the record, which outlives `known`.
                let columns = item
                    .record
                    .keys()
                    .map(String::as_str)
                    .filter(|c| known.contains_key(*c))
                    .collect();
                upserts.entry(columns).or_default().push(known);
            }
            ItemAction::Truncate => unreachable!("truncates are runs of their own"),
        }
    }
    if !deletes.is_empty() {
        let rows = serde_json::to_string(&deletes).expect("JSON values serialize");
        tx.execute(&target.delete_sql(), &[&rows]).await?;
    }
    for (names, rows) in upserts {
        let columns: Vec<&TargetColumn> = target
            .columns
            .iter()
            .filter(|c| names.contains(&c.name.as_str()))
            .collect();
        let rows = serde_json::to_string(&rows).expect("JSON values serialize");
        tx.execute(&target.upsert_sql(&columns), &[&rows]).await?;
    }
    Ok(())
}
