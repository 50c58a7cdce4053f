//! Reads one backfill's table in keyset-paginated chunks, each between a
//! low and a high watermark (see the module above). It never has more than
//! [`CHUNKS_IN_FLIGHT`] chunks handed over and not yet stored: a slow sink
//! slows the backfill instead of filling memory. When a chunk is not
//! stored, the runner reads again from the stored cursor under a new
//! [`Generation`], and the chunks it read ahead under the old one are
//! never emitted. Each chunk's progress also names the key it started
//! after, and the store records it only if that is still the stored
//! cursor, so a chunk read ahead of one that was not stored cannot skip
//! that one's rows.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::scope::ChunkQuery;
use super::{Backfills, Generation, Mark, WatermarkContent};
use weft_core::change::{BackfillTag, Column, Relation, WATERMARK_PREFIX};
use weft_core::health::{self, EntityKind, Status};
use weft_postgres::PgConnectOptions;
use weft_postgres::type_catalog::TypeCatalog;
use weft_postgres::types::TypeKind;
use weft_store::{Backfill, BackfillState, Store};

/// Rows per chunk at first; it adapts to keep each query near [`TARGET_QUERY_TIME`].
const FIRST_CHUNK_ROWS: usize = 1000;
const MIN_CHUNK_ROWS: usize = 10;
const MAX_CHUNK_ROWS: usize = 10_000;
/// The time one chunk's query should take.
const TARGET_QUERY_TIME: Duration = Duration::from_millis(500);
/// Chunks handed to the pipeline and not yet stored, at most: the runner
/// reads the next chunks while the pipeline stores the ones before. Four,
/// not two, evens out the stages' uneven times per chunk (1.05-1.08x the
/// stored rate, BENCHMARKS.md "Fourteenth round") for ~10 MiB more at peak.
/// A chunk's progress is recorded when its rows are stored, not when its
/// watermark's transaction is: the next chunk's rows may share a batch with
/// that commit, and a sink paused by `max_backlog_messages` holds that batch.
const CHUNKS_IN_FLIGHT: usize = 4;
/// How long a chunk may take to be stored before it is read again.
const CHUNK_STORED_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a runner waits for the database's replication slot to exist.
const SLOT_WAIT: Duration = Duration::from_secs(120);
/// Attempts at a failing chunk before the backfill fails.
const MAX_ATTEMPTS: u32 = 5;
/// Health check ids of a backfill entity: a chunk is being retried; the
/// backfill failed.
pub(crate) const CHUNK_FAILING: &str = "chunk_failing";
pub(crate) const FAILED: &str = "failed";

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

pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

async fn emit_watermark(client: &Client, token: &str, mark: Mark) -> Result<(), BackfillError> {
    let content = serde_json::to_string(&WatermarkContent {
        token: token.to_string(),
        mark,
    })
    .expect("a watermark serialises");
    client
        .execute(
            "SELECT pg_logical_emit_message(true, $1, $2)",
            &[&WATERMARK_PREFIX, &content],
        )
        .await
        .map_err(db_error)?;
    Ok(())
}

/// Runs `backfill` until it completes, fails, or `cancel` fires.
pub async fn run(
    backfill: Backfill,
    connection: PgConnectOptions,
    slot: String,
    backfills: Backfills,
    store: Store,
    cancel: CancellationToken,
) {
    let id = backfill.id.clone();
    let health = health::global();
    let entity = super::health_name(&backfill.sink, &backfill.table_schema, &backfill.table_name);
    let mut attempts = 0;
    loop {
        match run_chunks(&backfill, &connection, &slot, &backfills, &store, &cancel).await {
            Ok(()) => return,
            // Paused or cancelled while a query ran (a resumed backfill's
            // new runner may already be reporting): this runner's error is
            // no longer the backfill's.
            Err(_) if cancel.is_cancelled() => return,
            Err(error) => {
                attempts += 1;
                if attempts >= MAX_ATTEMPTS || !error.is_transient() {
                    warn!(backfill = %id, %error, "backfill failed");
                    let _ =
                        store.end_backfill(&id, BackfillState::Failed, Some(&error.to_string()));
                    super::republish(&store, &id);
                    health.clear(EntityKind::Backfill, &entity, CHUNK_FAILING);
                    health.fail(
                        EntityKind::Backfill,
                        &entity,
                        FAILED,
                        Status::Error,
                        format!(
                            "backfill {id} failed: {error}; fix the cause, then start a new backfill (it reads the table again)"
                        ),
                    );
                    return;
                }
                health.fail(
                    EntityKind::Backfill,
                    &entity,
                    CHUNK_FAILING,
                    Status::Warning,
                    format!("backfill {id}: attempt {attempts} of {MAX_ATTEMPTS} at a chunk failed: {error}"),
                );
                warn!(backfill = %id, %error, attempt = attempts, "backfill chunk failed; retrying");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1 << attempts.min(5))) => {}
                }
            }
        }
    }
}

/// The key after which the backfill `id`'s stored progress ends: where
/// reading resumes. The store, not the runner, knows it for sure: a chunk
/// the runner gave up on may still have been stored.
async fn stored_cursor(store: &Store, id: &str) -> Result<Option<Vec<String>>, BackfillError> {
    let (store, id) = (store.clone(), id.to_string());
    let backfill = tokio::task::spawn_blocking(move || store.backfill(&id))
        .await
        .map_err(db_error)?
        .map_err(db_error)?;
    Ok(backfill.and_then(|b| b.cursor))
}

/// A chunk read and handed to the pipeline, not yet known to be stored.
struct InFlight {
    stored: oneshot::Receiver<()>,
    done: bool,
}

/// A runner's claim on reading its backfill ([`Backfills::restart`]).
/// Dropped (the runner completed, stopped or failed), it forgets the
/// chunks still registered under it.
struct Claim<'a> {
    backfills: &'a Backfills,
    id: &'a str,
    generation: Generation,
}

impl<'a> Claim<'a> {
    fn new(backfills: &'a Backfills, id: &'a str) -> Claim<'a> {
        Claim {
            backfills,
            id,
            generation: backfills.restart(id),
        }
    }

    /// Starts over from the stored cursor: the chunks registered under the
    /// old claim, and any registered under it later, are never emitted.
    fn renew(&mut self) {
        self.generation = self.backfills.restart(self.id);
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.backfills.stop(self.id, self.generation);
    }
}

async fn run_chunks(
    backfill: &Backfill,
    connection: &PgConnectOptions,
    slot: &str,
    backfills: &Backfills,
    store: &Store,
    cancel: &CancellationToken,
) -> Result<(), BackfillError> {
    let mut client = connect(connection).await?;
    // A watermark written before the slot exists is never streamed: on a
    // first start, wait for the source to create it.
    let deadline = Instant::now() + SLOT_WAIT;
    while client
        .query_opt(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(db_error)?
        .is_none()
    {
        if Instant::now() > deadline {
            return Err(BackfillError::Database(format!(
                "replication slot {slot} does not exist after {}s; the backfill waits for the source to create it",
                SLOT_WAIT.as_secs()
            )));
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
    }
    let (table, _) = describe(&client, &backfill.table_schema, &backfill.table_name).await?;
    let query = ChunkQuery::build(&client, &table, &backfill.scope).await?;
    let tag = Arc::new(BackfillTag {
        id: backfill.id.clone(),
        sink: backfill.sink.clone(),
    });
    info!(backfill = %backfill.id, sink = %backfill.sink, table = %table.relation.qualified_name(), "backfill running");
    let mut chunk_rows = FIRST_CHUNK_ROWS;
    let mut claim = Claim::new(backfills, &backfill.id);
    let mut read_from = stored_cursor(store, &backfill.id).await?;
    let mut in_flight = VecDeque::new();
    loop {
        if cancel.is_cancelled() {
            return Ok(());
        }
        // Read ahead while the pipeline stores the chunks before.
        let read_all = in_flight.back().is_some_and(|c: &InFlight| c.done);
        if in_flight.len() < CHUNKS_IN_FLIGHT && !read_all {
            let token = uuid::Uuid::new_v4().to_string();
            let stored = backfills.expect(
                &token,
                Arc::clone(&tag),
                claim.generation,
                Arc::clone(&table.relation),
            );
            let read = async {
                emit_watermark(&client, &token, Mark::Low).await?;
                let started = Instant::now();
                let (rows, last) = query
                    .read(&mut client, &table, read_from.as_deref(), chunk_rows)
                    .await?;
                let took = started.elapsed();
                let done = rows.0.len() < chunk_rows;
                let next = last.or_else(|| read_from.clone());
                backfills.fill(&token, rows, (read_from.clone(), next.clone()), done);
                emit_watermark(&client, &token, Mark::High).await?;
                Ok::<_, BackfillError>((next, done, took))
            };
            let (next, done, took) = read.await?;
            chunk_rows = adapt(chunk_rows, took);
            read_from = next;
            in_flight.push_back(InFlight { stored, done });
            continue;
        }
        let oldest = in_flight.pop_front().expect("a chunk is in flight");
        let outcome = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            outcome = tokio::time::timeout(CHUNK_STORED_TIMEOUT, oldest.stored) => outcome,
        };
        match outcome {
            Ok(Ok(())) => {
                if oldest.done {
                    info!(backfill = %backfill.id, "backfill completed");
                    return Ok(());
                }
            }
            // Dropped by the pipeline (its window was not seen, or its
            // progress was refused) or never stored in time: read again
            // from what is stored, with the chunks read ahead of it.
            Ok(Err(_)) | Err(_) => {
                in_flight.clear();
                claim.renew();
                warn!(backfill = %backfill.id, "backfill chunk was not stored; reading it again");
                read_from = stored_cursor(store, &backfill.id).await?;
            }
        }
    }
}

/// The next chunk size: halved when the query took more than twice the
/// target, doubled when it took less than half.
fn adapt(rows: usize, took: Duration) -> usize {
    if took > TARGET_QUERY_TIME * 2 {
        (rows / 2).max(MIN_CHUNK_ROWS)
    } else if took < TARGET_QUERY_TIME / 2 {
        (rows * 2).min(MAX_CHUNK_ROWS)
    } else {
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_size_adapts_within_bounds() {
        assert_eq!(adapt(1000, Duration::from_millis(10)), 2000);
        assert_eq!(adapt(10_000, Duration::from_millis(10)), 10_000);
        assert_eq!(adapt(1000, Duration::from_secs(2)), 500);
        assert_eq!(adapt(10, Duration::from_secs(2)), 10);
        assert_eq!(adapt(1000, Duration::from_millis(500)), 1000);
    }
}
