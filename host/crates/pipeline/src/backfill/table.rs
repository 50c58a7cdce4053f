//! The table a backfill reads, as the catalog describes it (its columns,
//! primary key and types), the connection it is read on, and what fails a
//! backfill.

use std::sync::Arc;

use tokio_postgres::Client;
use weft_core::change::{Column, Relation};
use weft_postgres::PgConnectOptions;
use weft_postgres::type_catalog::TypeCatalog;
use weft_postgres::types::TypeKind;

/// Why a backfill could not start or continue.
#[derive(Debug, thiserror::Error)]
pub enum BackfillError {
    /// The database could not be reached or queried.
    #[error("{0}")]
    Database(String),
    /// The table does not exist.
    #[error("table {0} does not exist; check the name (schema-qualified, as Postgres stores it)")]
    NoTable(String),
    /// The table has no primary key to paginate by.
    #[error(
        "table {0} has no primary key; a backfill pages through a table by its primary key: add one (ALTER TABLE ... ADD PRIMARY KEY)"
    )]
    NoPrimaryKey(String),
    /// The request's scope (sort column, start position, filter) does not
    /// fit the table; the reason, naming the field.
    #[error("{0}")]
    Scope(String),
    /// Postgres cannot send a row in scope (a data exception, SQLSTATE
    /// class 22, e.g. bytes that are not UTF-8 in a `SQL_ASCII` database):
    /// reading it again would fail again.
    #[error(
        "a row in the backfill's scope cannot be read: {0}; reading it again would fail again: fix the row (or the backfill's `filter`, if the error is in it) and start a new backfill"
    )]
    Unreadable(String),
}

impl BackfillError {
    /// Whether trying again may help (the database was unreachable), as
    /// opposed to a table or scope that does not fit.
    pub fn is_transient(&self) -> bool {
        matches!(self, BackfillError::Database(_))
    }
}

/// A database error as a backfill's error, with the server's message.
pub(crate) fn db_error(error: impl std::error::Error + 'static) -> BackfillError {
    let text = weft_core::error::with_causes(&error);
    let code = (&error as &dyn std::error::Error)
        .downcast_ref::<tokio_postgres::Error>()
        .and_then(tokio_postgres::Error::code);
    match code {
        Some(code) if code.code().starts_with("22") => BackfillError::Unreadable(text),
        _ => BackfillError::Database(text),
    }
}

/// The table as a backfill reads it: its relation and key column types.
pub(crate) struct Table {
    pub(crate) relation: Arc<Relation>,
    /// `format_type` of each primary-key column, in key order.
    pub(crate) key_types: Vec<String>,
    /// `format_type` of each column, in the relation's column order.
    pub(crate) types: Vec<String>,
    /// How each column's text renders in JSON, in the relation's column
    /// order: as changes render it ([`weft_postgres::types`]).
    pub(crate) kinds: Vec<TypeKind>,
}

impl Table {
    /// The `format_type` of the column `name`, if the table has it.
    pub(crate) fn column_type(&self, name: &str) -> Option<&str> {
        self.relation
            .columns
            .iter()
            .position(|c| c.name == name)
            .map(|i| self.types[i].as_str())
    }
}

/// Opens a query connection with the session settings weft's rendering assumes.
pub(crate) async fn connect(options: &PgConnectOptions) -> Result<Client, BackfillError> {
    let (client, _connection) = options.connect_query().await.map_err(db_error)?;
    client
        .batch_execute(
            "SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET IntervalStyle = 'postgres'; \
             SET extra_float_digits = 3; SET bytea_output = 'hex'",
        )
        .await
        .map_err(db_error)?;
    Ok(client)
}

/// Looks up `schema.table`: columns, primary key, and the planner's row estimate.
pub(crate) async fn describe(
    client: &Client,
    schema: &str,
    table: &str,
) -> Result<(Table, Option<u64>), BackfillError> {
    let name = format!("{schema}.{table}");
    let found = client
        .query_opt(
            "SELECT c.oid, CASE WHEN c.reltuples < 0 THEN NULL ELSE c.reltuples::bigint END
             FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')",
            &[&schema, &table],
        )
        .await
        .map_err(db_error)?
        .ok_or_else(|| BackfillError::NoTable(name.clone()))?;
    let oid: u32 = found.get(0);
    // The planner's estimate: unknown (NULL) until the table is analysed.
    let estimate: Option<i64> = found.get(1);
    let key_rows = client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod)
             FROM pg_index i
             CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
             WHERE i.indrelid = $1 AND i.indisprimary ORDER BY k.ord",
            &[&oid],
        )
        .await
        .map_err(db_error)?;
    if key_rows.is_empty() {
        return Err(BackfillError::NoPrimaryKey(name));
    }
    let primary_key: Vec<String> = key_rows.iter().map(|r| r.get(0)).collect();
    let key_types = key_rows.iter().map(|r| r.get(1)).collect();
    let column_rows = client
        .query(
            "SELECT a.attname::text, a.atttypid, a.atttypmod, format_type(a.atttypid, a.atttypmod)
             FROM pg_attribute a
             WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            &[&oid],
        )
        .await
        .map_err(db_error)?;
    let types = column_rows.iter().map(|r| r.get(3)).collect();
    let columns = column_rows
        .iter()
        .map(|r| {
            let name: String = r.get(0);
            Column {
                is_identity_key: primary_key.contains(&name),
                name,
                type_oid: r.get(1),
                type_modifier: r.get(2),
            }
        })
        .collect();
    let oids: Vec<u32> = column_rows.iter().map(|r| r.get(1)).collect();
    let kinds = TypeCatalog::default()
        .resolve(client, &oids)
        .await
        .map_err(db_error)?;
    let relation = Arc::new(Relation {
        oid,
        schema: schema.to_string(),
        name: table.to_string(),
        columns,
        primary_key,
    });
    Ok((
        Table {
            relation,
            key_types,
            types,
            kinds,
        },
        estimate.map(|n| n.max(0) as u64),
    ))
}
