//! The `source-query` capability: a read-only, parameterised query on the
//! source database, for enrichment functions whose config grants it.
//!
//! Each granted function gets its own connection (opened on first use,
//! re-opened after it breaks), so one function's slow query never queues
//! behind another's. Every call is one `BEGIN READ ONLY` transaction with
//! `SET LOCAL statement_timeout`; parameters are bound as `text`, never
//! interpolated. The guest's SQL is wrapped as a subquery whose rows are
//! aggregated to JSON by Postgres, so values render as `to_json()` renders
//! them (the session runs with `TimeZone = UTC`, as the source does), and a
//! query that is not a single `SELECT`-like subquery fails to parse.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::types::{ToSql, Type};

use weft_config::plugin_registry::Capability;

/// Most rows one query may return; more is an error naming the limit.
pub const MAX_ROWS: usize = 1000;

/// The import's full name, as it appears in a component's imports.
pub(crate) const IMPORT_NAME: &str = Capability::SourceQuery.import();

/// A granted source-query capability. Cheap to clone; clones share the
/// connection.
#[derive(Clone)]
pub struct SourceQuery {
    inner: Arc<Inner>,
}

struct Inner {
    function: String,
    config: tokio_postgres::Config,
    statement_timeout: Duration,
    runtime: tokio::runtime::Handle,
    client: tokio::sync::Mutex<Option<tokio_postgres::Client>>,
}

impl std::fmt::Debug for SourceQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceQuery")
            .field("function", &self.inner.function)
            .field("statement_timeout", &self.inner.statement_timeout)
            .finish_non_exhaustive()
    }
}

impl SourceQuery {
    /// The capability for `function`, connecting with `config` (the
    /// source's connection settings) and running connections and queries on
    /// `runtime`. Nothing connects until the first query.
    pub fn new(
        function: &str,
        config: tokio_postgres::Config,
        statement_timeout: Duration,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        SourceQuery {
            inner: Arc::new(Inner {
                function: function.to_string(),
                config,
                statement_timeout,
                runtime,
                client: tokio::sync::Mutex::new(None),
            }),
        }
    }

    /// Runs `sql` with `params` and returns the rows as a JSON array text.
    /// Blocks the calling thread, which must not be an async worker thread.
    pub fn query_blocking(&self, sql: &str, params: &[Option<String>]) -> Result<String, String> {
        self.inner.runtime.block_on(self.query(sql, params))
    }

    /// Runs `sql` with `params` and returns the rows as a JSON array text.
    pub async fn query(&self, sql: &str, params: &[Option<String>]) -> Result<String, String> {
        // The statement timeout bounds the query; this bounds connecting and
        // a server that stops answering.
        let bound = self.inner.statement_timeout + Duration::from_secs(2);
        match tokio::time::timeout(bound, self.query_unbounded(sql, params)).await {
            Ok(result) => result,
            Err(_) => {
                // The connection is in an unknown state; start afresh.
                *self.inner.client.lock().await = None;
                Err(format!(
                    "source query did not finish within {bound:?} (statement timeout {:?})",
                    self.inner.statement_timeout
                ))
            }
        }
    }

    async fn query_unbounded(
        &self,
        sql: &str,
        params: &[Option<String>],
    ) -> Result<String, String> {
        let mut slot = self.inner.client.lock().await;
        if slot.as_ref().is_none_or(|client| client.is_closed()) {
            *slot = Some(self.connect().await?);
        }
        let client = slot.as_mut().expect("connected above");
        let result = run(client, sql, params, self.inner.statement_timeout).await;
        if client.is_closed() {
            *slot = None;
        }
        result
    }

    async fn connect(&self) -> Result<tokio_postgres::Client, String> {
        let (client, connection) = self
            .inner
            .config
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(|e| format!("cannot connect to the source database: {e}"))?;
        let function = self.inner.function.clone();
        self.inner.runtime.spawn(async move {
            if let Err(error) = connection.await {
                tracing::warn!(function, %error, "source-query connection closed");
            }
        });
        Ok(client)
    }
}

/// The guest's SQL as a subquery aggregated to one JSON array, plus the row
/// count (capped at `MAX_ROWS + 1`, to tell "too many" from "exactly max").
fn wrapped(sql: &str) -> String {
    let sql = sql.trim().trim_end_matches(';').trim_end();
    format!(
        "SELECT coalesce(json_agg(q), '[]'::json)::text, count(*) \
         FROM (SELECT * FROM ({sql}\n) weft_query LIMIT {}) q",
        MAX_ROWS + 1
    )
}

async fn run(
    client: &mut tokio_postgres::Client,
    sql: &str,
    params: &[Option<String>],
    statement_timeout: Duration,
) -> Result<String, String> {
    let tx = client
        .build_transaction()
        .read_only(true)
        .start()
        .await
        .map_err(|e| format!("cannot begin a read-only transaction: {e}"))?;
    tx.batch_execute(&format!(
        "SET LOCAL statement_timeout = {}",
        statement_timeout.as_millis().max(1)
    ))
    .await
    .map_err(|e| format!("cannot set the statement timeout: {e}"))?;
    let types = vec![Type::TEXT; params.len()];
    let statement = tx
        .prepare_typed(&wrapped(sql), &types)
        .await
        .map_err(|e| format!("query rejected: {}", pg_message(&e)))?;
    let values: Vec<&(dyn ToSql + Sync)> =
        params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
    let row = tx
        .query_one(&statement, &values)
        .await
        .map_err(|e| format!("query failed: {}", pg_message(&e)))?;
    // Read-only: nothing to keep; rolling back ends it without a commit record.
    let _ = tx.rollback().await;
    let count: i64 = row.get(1);
    if count as usize > MAX_ROWS {
        return Err(format!(
            "query returned more than {MAX_ROWS} rows; narrow it (e.g. filter by the batch's keys)"
        ));
    }
    Ok(row.get(0))
}

/// The server's message (with detail and hint) when there is one.
fn pg_message(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => {
            let mut text = format!("{} (SQLSTATE {})", db.message(), db.code().code());
            if let Some(detail) = db.detail() {
                text.push_str(&format!("; {detail}"));
            }
            if let Some(hint) = db.hint() {
                text.push_str(&format!("; hint: {hint}"));
            }
            text
        }
        None => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_strips_trailing_semicolons_and_caps_rows() {
        let sql = wrapped("SELECT 1 AS a;  \n");
        assert!(
            sql.contains("FROM (SELECT 1 AS a\n) weft_query LIMIT 1001"),
            "{sql}"
        );
        assert!(!sql.contains(';'));
    }
}
