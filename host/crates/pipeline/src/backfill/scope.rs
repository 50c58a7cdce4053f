//! Which rows of a table a backfill reads, and the keyset-paginated query
//! that reads them chunk by chunk.
//!
//! A full backfill pages in primary-key order. A partial one may start
//! from a `sort_column` value (`start_position`): it then pages in
//! `(sort_column, primary key)` order from there, skipping rows whose sort
//! column is NULL. It may also carry a `WHERE` filter
//! (`row_filter`). Both combine.
//!
//! Chunks are read with the simple query protocol, so that Postgres sends
//! each value as its output function's text: what pgoutput sends for a
//! change, and all weft renders from. The extended protocol's binary
//! results needed a `::text` cast per column, which cost Postgres a copy
//! and an allocation per value more than the text result: a backfill's
//! runner spent ~85% of its time waiting on the chunk query, and text
//! results store a backfill 1.1x as fast (BENCHMARKS.md, "Seventeenth
//! round"). The simple protocol binds no parameters: the scope's values
//! and the cursor are set as transaction-local settings by a statement
//! that binds them, and the chunk's SQL reads them with `current_setting`.
//! No value is ever spliced into SQL.

use std::sync::Arc;

use futures::TryStreamExt;

use serde_json::Value;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, IsolationLevel, SimpleQueryMessage, Transaction};

use super::ReadRow;
use super::row_filter::{self, SqlFilter};
use super::row_json::RowWriter;
use super::table::{BackfillError, Table, db_error};
use weft_core::message::WrittenJson;
use weft_postgres::protocol::quote_ident;
pub use weft_store::{BackfillScope, RowFilter};

/// The checks of a [`BackfillScope`] that need the backfill layer (its
/// filter's SQL rules).
pub trait ScopeRules {
    /// Checks what can be checked without the table: a `start_position`
    /// needs a `sort_column`, and the filter must parse.
    fn check(&self) -> Result<(), BackfillError>;
}

impl ScopeRules for BackfillScope {
    fn check(&self) -> Result<(), BackfillError> {
        if self.start_position.is_some() && self.sort_column.is_none() {
            return Err(BackfillError::Scope(
                "`start_position` needs a `sort_column`: the column whose values it is a position in"
                    .into(),
            ));
        }
        if let Some(filter) = &self.filter {
            row_filter::parse(filter).map_err(|e| BackfillError::Scope(e.to_string()))?;
        }
        Ok(())
    }
}

/// The most a chunk's text reserves from its first row's length; beyond
/// it, the text grows as rows arrive.
const RESERVE_AT_MOST: usize = 8 << 20;

/// A chunk's rows (key, JSON) and the transactions in progress for their
/// snapshot.
pub(crate) type ChunkRows = (Vec<ReadRow>, Vec<u32>);

/// A column chunks are ordered by.
struct OrderColumn {
    /// `t."name"`.
    column: String,
    /// Its type, as SQL.
    ty: String,
    /// Its position among the table's columns (and so in each row read).
    position: usize,
}

/// How a chunk's SQL refers to its values `$1`, `$2`, … (the scope's
/// first, then the cursor's).
#[derive(Clone, Copy)]
enum Refs {
    /// As bound parameters: for planning and estimating.
    Bound,
    /// As settings of the transaction (see [`set_values`]): for reading
    /// through the simple protocol, which binds nothing.
    Settings,
}

impl Refs {
    /// How the SQL refers to `$n`, given the scope's `values`: a NULL
    /// among them is written as NULL (a setting cannot hold one).
    fn refer(self, values: &[Option<String>], n: usize) -> String {
        match (self, values.get(n - 1)) {
            (Refs::Bound, _) => format!("${n}"),
            (Refs::Settings, Some(None)) => "NULL".to_string(),
            (Refs::Settings, _) => format!("current_setting('{}')", setting_name(n)),
        }
    }
}

/// The name of the transaction-local setting holding the value `$n`.
fn setting_name(n: usize) -> String {
    format!("weft.param_{n}")
}

/// A scope's conditions (`TRUE` when none): its filter, and its sort
/// column's (not NULL, and from the value `$start` on), values referred to
/// by `param`.
fn conditions(
    filter: Option<&SqlFilter>,
    sort: Option<&(String, String)>,
    start: Option<usize>,
    param: &dyn Fn(usize) -> String,
) -> String {
    let mut conditions = Vec::new();
    if let Some(filter) = filter {
        conditions.push(format!("({})", filter.expression(param)));
    }
    if let Some((column, ty)) = sort {
        conditions.push(format!("{column} IS NOT NULL"));
        if let Some(n) = start {
            conditions.push(format!("{column} >= {}::text::{ty}", param(n)));
        }
    }
    if conditions.is_empty() {
        "TRUE".to_string()
    } else {
        conditions.join(" AND ")
    }
}

/// The query reading one backfill's chunks, built and checked against the
/// table once per run.
pub(crate) struct ChunkQuery {
    /// `SELECT <the table's columns> FROM …`.
    select: String,
    from: String,
    /// The scope's conditions, values referred to as [`Refs::Bound`]:
    /// rendered once, not per chunk.
    bound_conditions: String,
    /// The same, values referred to as [`Refs::Settings`].
    settings_conditions: String,
    /// The columns the chunks are ordered by.
    order: Vec<OrderColumn>,
    /// The scope's parameter values (the filter's, then `start_position`).
    values: Vec<Option<String>>,
}

impl ChunkQuery {
    /// Builds the query for `table` and `scope`, checking the scope with
    /// Postgres: the sort column exists and orders, the start position
    /// casts to its type, the filter checks.
    pub(crate) async fn build(
        client: &Client,
        table: &Table,
        scope: &BackfillScope,
    ) -> Result<ChunkQuery, BackfillError> {
        scope.check()?;
        let relation = &table.relation;
        let from = format!(
            "ONLY {}.{} t",
            quote_ident(&relation.schema),
            quote_ident(&relation.name)
        );
        let mut values = Vec::new();
        let filter = match &scope.filter {
            Some(filter) => {
                let parsed =
                    row_filter::parse(filter).map_err(|e| BackfillError::Scope(e.to_string()))?;
                let checked = row_filter::prepare(client, &from, &parsed, filter)
                    .await
                    .map_err(db_error)?
                    .map_err(|e| BackfillError::Scope(e.to_string()))?;
                values.extend(checked.values.iter().cloned());
                Some(checked)
            }
            None => None,
        };
        let position = |name: &str| {
            relation
                .columns
                .iter()
                .position(|c| c.name == name)
                .expect("an order column is one of the table's columns")
        };
        let mut order = Vec::new();
        let mut sort = None;
        if let Some(column) = &scope.sort_column {
            let ty = table.column_type(column).ok_or_else(|| {
                BackfillError::Scope(format!(
                    "`sort_column` {column:?} is not a column of {}; name one of its columns, as Postgres stores it",
                    relation.qualified_name()
                ))
            })?;
            let quoted = format!("t.{}", quote_ident(column));
            if let Some(start) = &scope.start_position {
                check_cast(client, start, ty).await?;
                values.push(Some(start.clone()));
            }
            // A sort column that is the key's first column orders alone.
            if relation.primary_key.first() != Some(column) {
                order.push(OrderColumn {
                    column: quoted.clone(),
                    ty: ty.to_string(),
                    position: position(column),
                });
            }
            sort = Some((quoted, ty.to_string()));
        }
        for (key, ty) in relation.primary_key.iter().zip(&table.key_types) {
            order.push(OrderColumn {
                column: format!("t.{}", quote_ident(key)),
                ty: ty.clone(),
                position: position(key),
            });
        }
        // Each column as it is: a text result is its output function's
        // text, in the table's column order, which weft renders as it
        // renders changes. Rendering in Postgres instead (`to_jsonb` per
        // column) took it 4 to 5 times as long as the text (BENCHMARKS.md,
        // "Sixth round").
        let columns: Vec<String> = relation
            .columns
            .iter()
            .map(|c| format!("t.{}", quote_ident(&c.name)))
            .collect();
        let select = format!("SELECT {} FROM {from}", columns.join(", "));
        // `start_position` is the last of the scope's values.
        let start = scope.start_position.as_ref().map(|_| values.len());
        let conditions_as = |refs: Refs| {
            conditions(filter.as_ref(), sort.as_ref(), start, &|n| {
                refs.refer(&values, n)
            })
        };
        let (bound_conditions, settings_conditions) =
            (conditions_as(Refs::Bound), conditions_as(Refs::Settings));
        let query = ChunkQuery {
            select,
            from,
            bound_conditions,
            settings_conditions,
            order,
            values,
        };
        // Plans the first chunk's query, so that an unorderable sort column
        // is refused now rather than at the first read.
        if let Err(error) = client.prepare(&query.sql(Refs::Bound, false, 1)).await {
            return Err(match row_filter::refused_by_server(&error) {
                Some(message) => BackfillError::Scope(format!(
                    "{} cannot be read in this order: {message}",
                    relation.qualified_name()
                )),
                None => db_error(error),
            });
        }
        Ok(query)
    }

    /// The SQL of a chunk of up to `limit` rows, after the cursor when
    /// `after_cursor`, values referred to as `refs` says.
    fn sql(&self, refs: Refs, after_cursor: bool, limit: usize) -> String {
        let param = |n| refs.refer(&self.values, n);
        let columns: Vec<&str> = self.order.iter().map(|o| o.column.as_str()).collect();
        let cursor = if after_cursor {
            let params: Vec<String> = self
                .order
                .iter()
                .enumerate()
                .map(|(i, o)| format!("{}::text::{}", param(self.values.len() + i + 1), o.ty))
                .collect();
            format!(" AND ({}) > ({})", columns.join(", "), params.join(", "))
        } else {
            String::new()
        };
        format!(
            "{} WHERE {}{cursor} ORDER BY {} LIMIT {limit}",
            self.select,
            match refs {
                Refs::Bound => &self.bound_conditions,
                Refs::Settings => &self.settings_conditions,
            },
            columns.join(", ")
        )
    }

    /// How many values a cursor has (the order columns).
    pub(crate) fn cursor_width(&self) -> usize {
        self.order.len()
    }

    /// One chunk: up to `limit` rows after `cursor` in order, each with its
    /// primary key (as changes carry it) and row, and the transactions in
    /// progress for the snapshot the rows were read with (32-bit xids, as
    /// the stream names them); plus the last row's cursor.
    pub(crate) async fn read(
        &self,
        client: &mut Client,
        table: &Table,
        cursor: Option<&[String]>,
        limit: usize,
    ) -> Result<(ChunkRows, Option<Vec<String>>), BackfillError> {
        if let Some(cursor) = cursor
            && cursor.len() != self.cursor_width()
        {
            return Err(BackfillError::Scope(format!(
                "the stored cursor has {} values but the table orders by {}; the table's key changed since the backfill started: cancel it and start a new one",
                cursor.len(),
                self.cursor_width()
            )));
        }
        let cursor = cursor.unwrap_or_default();
        // One snapshot for every query: the transaction's first query takes it.
        let transaction = client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(db_error)?;
        let in_progress = transaction
            .query(
                "SELECT (x::text::bigint % 4294967296)::bigint
                 FROM pg_snapshot_xip(pg_current_snapshot()) AS x",
                &[],
            )
            .await
            .map_err(db_error)?
            .iter()
            .map(|row| row.get::<_, i64>(0) as u32)
            .collect();
        // The values the chunk's SQL reads, as settings of this transaction
        // (a NULL is written into the SQL as NULL).
        let values: Vec<Option<&str>> = self
            .values
            .iter()
            .map(Option::as_deref)
            .chain(cursor.iter().map(|v| Some(v.as_str())))
            .collect();
        set_values(&transaction, &values).await?;
        let sql = self.sql(Refs::Settings, !cursor.is_empty(), limit);
        // Rows are turned into ours as they arrive: holding the driver's
        // rows for the whole chunk as well would double its memory.
        let mut rows = std::pin::pin!(
            transaction
                .client()
                .simple_query_raw(&sql)
                .await
                .map_err(db_error)?
        );
        let mut keyed = Vec::with_capacity(limit);
        let mut text = String::new();
        let mut last_row = None;
        let writer = RowWriter::new(table);
        while let Some(message) = rows.try_next().await.map_err(db_error)? {
            let SimpleQueryMessage::Row(row) = message else {
                continue;
            };
            // `get` panics only on text that is not UTF-8, which Postgres
            // never sends a UTF-8 client, even from a `SQL_ASCII` database.
            let written = writer.write(&mut text, |i| row.get(i));
            if keyed.is_empty() {
                // The rest of the chunk's rows are most often about as long
                // (up to a bound: the first may be unusually big).
                text.reserve(((text.len() + 16) * (limit - 1)).min(RESERVE_AT_MOST));
            }
            keyed.push(written);
            last_row = Some(row);
        }
        let text = Arc::new(text);
        let out = keyed
            .into_iter()
            .map(|(key, range)| (key, WrittenJson::new(Arc::clone(&text), range)))
            .collect();
        transaction.commit().await.map_err(db_error)?;
        let last = match last_row {
            Some(row) => Some(
                self.order
                    .iter()
                    .map(|o| {
                        row.get(o.position).map(str::to_string).ok_or_else(|| {
                            BackfillError::Database(format!(
                                "the order column {} of a row read is NULL",
                                o.column
                            ))
                        })
                    })
                    .collect::<Result<Vec<String>, _>>()?,
            ),
            None => None,
        };
        Ok(((out, in_progress), last))
    }

    /// The planner's estimate of the rows in scope (for a partial
    /// backfill; a full one uses the table's statistics).
    pub(crate) async fn estimate(&self, client: &Client) -> Result<Option<u64>, BackfillError> {
        let sql = format!(
            "EXPLAIN (FORMAT JSON) SELECT 1 FROM {} WHERE {}",
            self.from, self.bound_conditions
        );
        let params: Vec<&(dyn ToSql + Sync)> = self
            .values
            .iter()
            .map(|v| v as &(dyn ToSql + Sync))
            .collect();
        let row = client.query_one(&sql, &params).await.map_err(db_error)?;
        let plan: Value = row.get(0);
        Ok(plan
            .pointer("/0/Plan/Plan Rows")
            .and_then(Value::as_f64)
            .map(|n| n.max(0.0) as u64))
    }
}

/// Sets `values` (`$1`, `$2`, …) as settings of `transaction`, with one
/// statement that binds them; NULLs are left out (the SQL says NULL).
async fn set_values(
    transaction: &Transaction<'_>,
    values: &[Option<&str>],
) -> Result<(), BackfillError> {
    let set: Vec<(String, &str)> = values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.map(|v| (setting_name(i + 1), v)))
        .collect();
    if set.is_empty() {
        return Ok(());
    }
    let calls: Vec<String> = (0..set.len())
        .map(|i| format!("set_config(${}, ${}, true)", 2 * i + 1, 2 * i + 2))
        .collect();
    let params: Vec<&(dyn ToSql + Sync)> = set
        .iter()
        .flat_map(|(name, value)| [name as &(dyn ToSql + Sync), value as _])
        .collect();
    transaction
        .execute(&format!("SELECT {}", calls.join(", ")), &params)
        .await
        .map_err(db_error)?;
    Ok(())
}

/// Checks that `value` casts to the type `ty`.
async fn check_cast(client: &Client, value: &str, ty: &str) -> Result<(), BackfillError> {
    match row_filter::cast_refused(client, value, ty)
        .await
        .map_err(db_error)?
    {
        None => Ok(()),
        Some(message) => Err(BackfillError::Scope(format!(
            "`start_position` {value:?} is not a {ty}: {message}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_scope_names_its_kind_and_needs_a_sort_column_for_a_position() {
        assert_eq!(BackfillScope::default().kind(), "full");
        let partial = BackfillScope {
            sort_column: Some("updated_at".into()),
            ..Default::default()
        };
        assert_eq!(partial.kind(), "partial");
        let orphan = BackfillScope {
            start_position: Some("1".into()),
            ..Default::default()
        };
        assert!(
            matches!(orphan.check(), Err(BackfillError::Scope(m)) if m.contains("sort_column"))
        );
        let bad_filter = BackfillScope {
            filter: Some(RowFilter {
                sql: "1; DROP TABLE x".into(),
                params: vec![],
            }),
            ..Default::default()
        };
        assert!(bad_filter.check().is_err());
        assert_eq!(
            BackfillScope::position_text(&json!(10)),
            Some("10".to_string())
        );
        assert_eq!(BackfillScope::position_text(&json!([1])), None);
    }
}
