//! Which rows of a table a backfill reads, and the keyset-paginated query
//! that reads them chunk by chunk.
//!
//! A full backfill pages in primary-key order. A partial one may start
//! from a `sort_column` value (`start_position`): it then pages in
//! `(sort_column, primary key)` order from there, skipping rows whose sort
//! column is NULL. It may also carry a `WHERE` filter
//! ([`super::row_filter`]). Both combine.

use std::sync::Arc;

use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_postgres::types::{FromSql, ToSql, Type};
use tokio_postgres::{Client, IsolationLevel};

use super::ReadRow;
use super::row_filter::{self, RowFilter};
use super::row_json::RowWriter;
use super::runner::{BackfillError, Table, db_error, quote_ident};
use crate::message::WrittenJson;

/// Which rows a backfill reads: all of them by default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackfillScope {
    /// Read in this column's order, from `start_position` on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sort_column: Option<String>,
    /// The first `sort_column` value to read (inclusive), as text Postgres
    /// casts to the column's type, e.g. `"2026-01-01T00:00:00Z"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_position: Option<String>,
    /// Read only rows for which this holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<RowFilter>,
}

impl BackfillScope {
    /// `full` or `partial`.
    pub fn kind(&self) -> &'static str {
        if self == &BackfillScope::default() {
            "full"
        } else {
            "partial"
        }
    }

    /// Checks what can be checked without the table: a `start_position`
    /// needs a `sort_column`, and the filter must parse.
    pub fn check(&self) -> Result<(), BackfillError> {
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

    /// A scope from an API request's `start_position`, which may be a JSON
    /// string or number.
    pub fn position_text(value: &Value) -> Option<String> {
        match value {
            Value::String(text) => Some(text.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }
}

/// The most a chunk's text reserves from its first row's length; beyond
/// it, the text grows as rows arrive.
const RESERVE_AT_MOST: usize = 8 << 20;

/// A chunk's rows (key, JSON) and the transactions in progress for their
/// snapshot.
pub(crate) type ChunkRows = (Vec<ReadRow>, Vec<u32>);

/// A value the chunk query cast to `text`, borrowed from its row. Read as
/// `&str`, every value was also matched by its type's name against the
/// extension types `&str` takes (three string compares per value). The
/// text is always UTF-8: Postgres checks what it sends a UTF-8 client, even
/// from a `SQL_ASCII` database.
struct TextValue<'a>(&'a str);

impl<'a> FromSql<'a> for TextValue<'a> {
    fn from_sql(
        _: &Type,
        raw: &'a [u8],
    ) -> Result<TextValue<'a>, Box<dyn std::error::Error + Sync + Send>> {
        Ok(TextValue(std::str::from_utf8(raw)?))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::TEXT
    }
}

/// The query reading one backfill's chunks, built and checked against the
/// table once per run.
pub(crate) struct ChunkQuery {
    /// `SELECT … FROM … WHERE <scope>`: the part before the cursor condition.
    select: String,
    /// The scope's conditions (`TRUE` when none), for counting.
    conditions: String,
    from: String,
    /// The columns the chunks are ordered by, quoted, and their types.
    order: Vec<(String, String)>,
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
        let mut conditions = Vec::new();
        let mut values = Vec::new();
        if let Some(filter) = &scope.filter {
            let parsed =
                row_filter::parse(filter).map_err(|e| BackfillError::Scope(e.to_string()))?;
            let checked = row_filter::prepare(client, &from, &parsed, filter)
                .await
                .map_err(db_error)?
                .map_err(|e| BackfillError::Scope(e.to_string()))?;
            conditions.push(format!("({})", checked.expression));
            values.extend(checked.values);
        }
        let mut order = Vec::new();
        if let Some(column) = &scope.sort_column {
            let ty = table.column_type(column).ok_or_else(|| {
                BackfillError::Scope(format!(
                    "`sort_column` {column:?} is not a column of {}; name one of its columns, as Postgres stores it",
                    relation.qualified_name()
                ))
            })?;
            let quoted = format!("t.{}", quote_ident(column));
            conditions.push(format!("{quoted} IS NOT NULL"));
            if let Some(start) = &scope.start_position {
                check_cast(client, start, ty).await?;
                values.push(Some(start.clone()));
                conditions.push(format!("{quoted} >= ${}::text::{ty}", values.len()));
            }
            // A sort column that is the key's first column orders alone.
            if relation.primary_key.first() != Some(column) {
                order.push((quoted, ty.to_string()));
            }
        }
        for (key, ty) in relation.primary_key.iter().zip(&table.key_types) {
            order.push((format!("t.{}", quote_ident(key)), ty.clone()));
        }
        let conditions = if conditions.is_empty() {
            "TRUE".to_string()
        } else {
            conditions.join(" AND ")
        };
        let texts: Vec<String> = order.iter().map(|(c, _)| format!("{c}::text")).collect();
        // Each column's output text (what changes carry), in the table's
        // column order, which weft renders as it renders changes. Rendering
        // in Postgres instead (`to_jsonb` per column) took it 4 to 5 times
        // as long as the text (BENCHMARKS.md, "Sixth round"). `format`
        // calls the output function where `::text` would not (and makes ''
        // of NULL).
        let columns: Vec<String> = relation
            .columns
            .iter()
            .zip(&table.cast_differs)
            .map(|(c, &differs)| {
                let column = format!("t.{}", quote_ident(&c.name));
                if differs {
                    format!("CASE WHEN {column} IS NULL THEN NULL ELSE format('%s', {column}) END")
                } else {
                    format!("{column}::text")
                }
            })
            .collect();
        let select = format!(
            "SELECT {}, {} FROM {from} WHERE {conditions}",
            columns.join(", "),
            texts.join(", ")
        );
        let query = ChunkQuery {
            select,
            conditions,
            from,
            order,
            values,
        };
        // Plans the first chunk's query, so that an unorderable sort column
        // is refused now rather than at the first read.
        if let Err(error) = client.prepare(&query.sql(false, 1)).await {
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

    fn sql(&self, after_cursor: bool, limit: usize) -> String {
        let columns: Vec<&str> = self.order.iter().map(|(c, _)| c.as_str()).collect();
        let cursor = if after_cursor {
            let params: Vec<String> = self
                .order
                .iter()
                .enumerate()
                .map(|(i, (_, ty))| format!("${}::text::{ty}", self.values.len() + i + 1))
                .collect();
            format!(" AND ({}) > ({})", columns.join(", "), params.join(", "))
        } else {
            String::new()
        };
        format!(
            "{}{cursor} ORDER BY {} LIMIT {limit}",
            self.select,
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
        let sql = self.sql(cursor.is_some(), limit);
        let mut params: Vec<&(dyn ToSql + Sync)> = self
            .values
            .iter()
            .map(|v| v as &(dyn ToSql + Sync))
            .collect();
        params.extend(
            cursor
                .unwrap_or_default()
                .iter()
                .map(|v| v as &(dyn ToSql + Sync)),
        );
        // One snapshot for both queries: the transaction's first query takes it.
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
        // Rows are turned into ours as they arrive: holding the driver's
        // rows for the whole chunk as well would double its memory.
        let mut rows = Box::pin(
            transaction
                .query_raw(&sql, params)
                .await
                .map_err(db_error)?,
        );
        let mut keyed = Vec::with_capacity(limit);
        let mut text = String::new();
        let mut last_row = None;
        let width = table.relation.columns.len();
        let writer = RowWriter::new(table);
        while let Some(row) = rows.try_next().await.map_err(db_error)? {
            // The relation's columns, then the order columns: the query
            // lists them so.
            let written = writer.write(&mut text, |i| {
                row.get::<_, Option<TextValue>>(i).map(|v| v.0)
            });
            if keyed.is_empty() {
                // The rest of the chunk's rows are most often about as long
                // (up to a bound: the first may be unusually big).
                text.reserve(((text.len() + 16) * (limit - 1)).min(RESERVE_AT_MOST));
            }
            keyed.push(written);
            last_row = Some(row);
        }
        drop(rows);
        let text = Arc::new(text);
        let out = keyed
            .into_iter()
            .map(|(key, range)| (key, WrittenJson::new(Arc::clone(&text), range)))
            .collect();
        transaction.commit().await.map_err(db_error)?;
        let last = last_row.map(|row| {
            (width..width + self.order.len())
                .map(|i| row.get::<_, String>(i))
                .collect()
        });
        Ok(((out, in_progress), last))
    }

    /// The planner's estimate of the rows in scope (for a partial
    /// backfill; a full one uses the table's statistics).
    pub(crate) async fn estimate(&self, client: &Client) -> Result<Option<u64>, BackfillError> {
        let sql = format!(
            "EXPLAIN (FORMAT JSON) SELECT 1 FROM {} WHERE {}",
            self.from, self.conditions
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
    fn chunk_values_are_text_and_must_be_utf8() {
        assert!(TextValue::accepts(&Type::TEXT));
        assert!(!TextValue::accepts(&Type::VARCHAR));
        let value = TextValue::from_sql(&Type::TEXT, "ünï".as_bytes()).unwrap();
        assert_eq!(value.0, "ünï");
        assert!(TextValue::from_sql(&Type::TEXT, b"caf\xe9").is_err());
    }

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
