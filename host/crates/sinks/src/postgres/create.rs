//! `create_table: true` in mirror mode: the target table gets the source
//! table's columns (types as `format_type` names them, `NOT NULL` kept)
//! and primary key. Defaults, constraints, indexes and generated columns
//! are not copied: the mirror holds the source's values, not its rules.

use tokio_postgres::Client;

use super::target::quoted;
use crate::config::TableRef;
use weft_postgres::protocol::quote_ident;

/// The `CREATE TABLE IF NOT EXISTS` of `target` with the definition of
/// `source` as read over `source_client`.
pub async fn mirror_table_sql(
    source_client: &Client,
    source: &TableRef,
    target: &TableRef,
) -> Result<String, String> {
    let name = quoted(source);
    let columns = source_client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull
             FROM pg_attribute a
             WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
             ORDER BY a.attnum",
            &[&name],
        )
        .await
        .map_err(|e| format!("cannot read source table {source}: {e}"))?;
    if columns.is_empty() {
        return Err(format!(
            "source table {source} does not exist (or has no columns), so {target} cannot be created from it"
        ));
    }
    let key: Vec<String> = source_client
        .query(
            "SELECT a.attname::text
             FROM pg_index i
             CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
             WHERE i.indrelid = to_regclass($1) AND i.indisprimary ORDER BY k.ord",
            &[&name],
        )
        .await
        .map_err(|e| format!("cannot read source table {source}: {e}"))?
        .iter()
        .map(|row| quote_ident(row.get(0)))
        .collect();
    if key.is_empty() {
        return Err(format!(
            "source table {source} has no primary key, which a mirror needs; add one, or create {target} yourself with a primary key"
        ));
    }
    let mut definition: Vec<String> = columns
        .iter()
        .map(|row| {
            let (column, ty, not_null): (String, String, bool) =
                (row.get(0), row.get(1), row.get(2));
            let null = if not_null { " NOT NULL" } else { "" };
            format!("{} {ty}{null}", quote_ident(&column))
        })
        .collect();
    definition.push(format!("PRIMARY KEY ({})", key.join(", ")));
    Ok(format!(
        "CREATE SCHEMA IF NOT EXISTS {schema}; CREATE TABLE IF NOT EXISTS {table} ({columns})",
        schema = quote_ident(&target.schema),
        table = quoted(target),
        columns = definition.join(", "),
    ))
}
