//! Reads one backfill's table in keyset-paginated chunks, each between a
//! low and a high watermark (see the module above). It never has more than
//! `CHUNKS_IN_FLIGHT` chunks handed over and not yet stored: a slow sink
//! slows the backfill instead of filling memory. When a chunk is not
//! stored, the runner reads again from the stored cursor under a new
//! `Generation`, and the chunks it read ahead under the old one are
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
use super::table::{self, BackfillError, db_error};
use super::{Backfills, Generation, Mark, WatermarkContent};
use weft_core::change::{BackfillTag, WATERMARK_PREFIX};
use weft_core::health::{self, EntityKind, Status};
use weft_postgres::PgConnectOptions;
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
    let mut client = table::connect(connection).await?;
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
    let (table, _) = table::describe(&client, &backfill.table_schema, &backfill.table_name).await?;
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
