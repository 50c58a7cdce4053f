//! Backfills: existing rows of a table replayed into a sink as `read`
//! messages while live changes keep flowing, without ever delivering an old
//! row after a newer change (the watermark method of Netflix's DBLog, as
//! Sequin and Debezium use it).
//!
//! A [`runner`] reads the table in keyset-paginated chunks. Each chunk is
//! bracketed by two watermarks written into the WAL with
//! `pg_logical_emit_message`: *low* before the chunk's `SELECT`, *high*
//! after it. On the replication stream, the pipeline's [`Watermarks`]
//! notes which rows of the table changed between the two; at the high
//! watermark it emits the chunk's rows minus those (the change events
//! already carry a version at least as new), as `read` changes at the high
//! watermark's position. From there they are ordinary changes: the sink's
//! functions run on them and their group is their row's, so per-row order
//! holds. The backfill's cursor (the last key of the chunk) is stored when
//! the chunk's transaction is, so a restart resumes after the last stored
//! chunk; a chunk in flight at a crash is read again (same idempotency
//! keys, `weft_core::message::backfill_idempotency_key`).
//!
//! [`Backfills`] ties the two sides together: the runner registers each
//! chunk under a fresh token before writing its low watermark and hands
//! over the rows before the high one; watermarks with unknown tokens (from
//! before a restart, or another weft) are ignored.

pub mod launcher;
mod row_filter;
mod row_json;
pub mod runner;
pub mod scope;
mod table;
mod watermarks;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use weft_core::change::{BackfillTag, Relation};

pub use launcher::{BackfillLauncher, BackfillTarget, TableSelection};
pub use row_filter::{FilterError, RowFilter};
pub use scope::{BackfillScope, ScopeRules};
pub use table::BackfillError;
pub use watermarks::{ChunkStored, Watermarks};

/// Publishes `backfill`'s progress as gauges (`weft_core::metrics`), labelled
/// by sink and table: the latest backfill of a table wins.
pub fn publish_progress(backfill: &weft_store::Backfill) {
    use weft_core::metrics::{BACKFILL_ACTIVE, BACKFILL_ROWS_ESTIMATED, BACKFILL_ROWS_PROCESSED};
    let labels = [
        ("sink", backfill.sink.clone()),
        (
            "table",
            format!("{}.{}", backfill.table_schema, backfill.table_name),
        ),
    ];
    metrics::gauge!(BACKFILL_ROWS_PROCESSED, &labels).set(backfill.rows_processed as f64);
    if let Some(estimate) = backfill.rows_estimated {
        metrics::gauge!(BACKFILL_ROWS_ESTIMATED, &labels).set(estimate as f64);
    }
    let active = backfill.state == weft_store::BackfillState::Active;
    metrics::gauge!(BACKFILL_ACTIVE, &labels).set(if active { 1.0 } else { 0.0 });
}

/// The health entity of `backfill`: the latest backfill of its table into
/// its sink.
pub(crate) fn health_name(sink: &str, schema: &str, table: &str) -> String {
    format!("{sink}/{schema}.{table}")
}

/// Re-reads the backfill `id` and publishes its progress; a store error
/// only costs the gauges an update.
pub(crate) fn republish(store: &weft_store::Store, id: &str) {
    if let Ok(Some(backfill)) = store.backfill(id) {
        publish_progress(&backfill);
    }
}

/// What a watermark message says (its JSON content).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatermarkContent {
    /// The chunk's token.
    pub token: String,
    /// `low` or `high`.
    pub mark: Mark,
}

/// Which side of a chunk a watermark is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mark {
    /// Written before the chunk's query.
    Low,
    /// Written after it.
    High,
}

/// A row of a chunk: its primary-key values and its JSON object.
pub(crate) type ReadRow = (Vec<String>, weft_core::message::WrittenJson);

/// A runner's claim on reading its backfill: set each time it starts
/// reading from the stored cursor. A chunk registered under an older claim
/// is refused, so rows read ahead of a chunk the pipeline dropped never go
/// out (the runner reads them again from the stored cursor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Generation(u64);

/// A chunk between its watermarks.
struct PendingChunk {
    tag: Arc<BackfillTag>,
    /// The claim it was read under.
    generation: Generation,
    relation: Arc<Relation>,
    /// The rows (their keys and JSON), once the query ran.
    rows: Option<Vec<ReadRow>>,
    /// The transactions in progress for the query's snapshot (their 32-bit
    /// xids): one that had already committed before the low watermark
    /// makes the chunk stale (see [`Watermarks`]).
    in_progress: Vec<u32>,
    /// The key the chunk starts after (`None`: the start of the scope).
    from: Option<Vec<String>>,
    /// The last key read (the next chunk starts after it).
    cursor: Option<Vec<String>>,
    /// Whether this was the last chunk.
    done: bool,
    /// Told when the chunk's rows are stored.
    stored: Option<oneshot::Sender<()>>,
}

/// The registry's contents. Only chunks registered under their
/// backfill's held, open claim are ever in `chunks`.
#[derive(Default)]
struct Registry {
    chunks: HashMap<String, PendingChunk>,
    /// The claim each backfill's runner holds.
    claims: HashMap<String, Held>,
    /// The last generation handed out (unique across backfills, so a
    /// stopped backfill's old claim never matches a later one).
    last: u64,
}

/// A runner's claim as the registry keeps it.
struct Held {
    generation: Generation,
    /// False once the pipeline gave up on what was read under it
    /// ([`Backfills::invalidate`]): no chunk registers under it any more,
    /// though its runner still holds it until it renews or stops.
    open: bool,
}

impl Registry {
    /// Forgets backfill `id`'s chunks and hands it a fresh, open claim.
    fn renew(&mut self, id: &str) -> Generation {
        self.forget_chunks_of(id);
        self.last += 1;
        let generation = Generation(self.last);
        self.claims.insert(
            id.to_string(),
            Held {
                generation,
                open: true,
            },
        );
        generation
    }

    fn forget_chunks_of(&mut self, id: &str) {
        self.chunks.retain(|_, chunk| chunk.tag.id != id);
    }

    /// The claim on `id` if its runner holds `generation`.
    fn held(&mut self, id: &str, generation: Generation) -> Option<&mut Held> {
        self.claims
            .get_mut(id)
            .filter(|held| held.generation == generation)
    }

    /// Whether chunks of `id` read under `generation` may be registered.
    fn is_open(&self, id: &str, generation: Generation) -> bool {
        self.claims
            .get(id)
            .is_some_and(|held| held.generation == generation && held.open)
    }
}

/// The chunks in flight between runners and pipelines. Cheap to clone.
#[derive(Clone, Default)]
pub struct Backfills {
    registry: Arc<Mutex<Registry>>,
}

impl Backfills {
    /// An empty registry.
    pub fn new() -> Backfills {
        Backfills::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts reading backfill `id` (again) from its stored cursor: forgets
    /// its registered chunks and returns the claim its next chunks are
    /// registered under.
    pub(crate) fn restart(&self, id: &str) -> Generation {
        self.lock().renew(id)
    }

    /// Stops reading backfill `id` under `generation` (completed, paused,
    /// cancelled or failed): forgets its chunks. A no-op if a newer claim
    /// (a resumed backfill's runner) has taken over.
    pub(crate) fn stop(&self, id: &str, generation: Generation) {
        let mut registry = self.lock();
        if registry.held(id, generation).is_some() {
            registry.claims.remove(id);
            registry.forget_chunks_of(id);
        }
    }

    /// Gives up on what backfill `id` read under `generation`: when the
    /// pipeline drops one of its chunks, or refuses a chunk's progress, the
    /// chunks read after it start after rows that were never stored.
    /// Emitting them would only deliver rows that the runner, reading again
    /// from the stored cursor, delivers a second time; so they are
    /// forgotten, and so is every chunk the runner registers before it
    /// hears of this and restarts. The runner keeps its claim, closed, so
    /// that stopping still releases it.
    fn invalidate(&self, id: &str, generation: Generation) {
        let mut registry = self.lock();
        if let Some(held) = registry.held(id, generation) {
            held.open = false;
            registry.forget_chunks_of(id);
        }
    }

    /// Registers chunk `token` of backfill `tag`, read under `generation`,
    /// on `relation`; returns the receiver told when its rows are stored.
    /// A chunk of an outdated or closed claim is not registered: its receiver
    /// is closed at once and its watermarks are ignored.
    pub(crate) fn expect(
        &self,
        token: &str,
        tag: Arc<BackfillTag>,
        generation: Generation,
        relation: Arc<Relation>,
    ) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let mut registry = self.lock();
        if registry.is_open(&tag.id, generation) {
            registry.chunks.insert(
                token.to_string(),
                PendingChunk {
                    tag,
                    generation,
                    relation,
                    rows: None,
                    in_progress: Vec::new(),
                    from: None,
                    cursor: None,
                    done: false,
                    stored: Some(tx),
                },
            );
        }
        rx
    }

    /// Hands over chunk `token`'s rows, in key order, read after
    /// the key `from` up to the key `cursor` with a snapshot for which the
    /// transactions `in_progress` had not committed.
    pub(crate) fn fill(
        &self,
        token: &str,
        (rows, in_progress): (Vec<ReadRow>, Vec<u32>),
        (from, cursor): (Option<Vec<String>>, Option<Vec<String>>),
        done: bool,
    ) {
        if let Some(chunk) = self.lock().chunks.get_mut(token) {
            chunk.rows = Some(rows);
            chunk.in_progress = in_progress;
            chunk.from = from;
            chunk.cursor = cursor;
            chunk.done = done;
        }
    }

    /// The table of chunk `token`, if it is registered.
    fn relation_of(&self, token: &str) -> Option<Arc<Relation>> {
        self.lock()
            .chunks
            .get(token)
            .map(|c| Arc::clone(&c.relation))
    }

    /// Takes chunk `token` at its high watermark.
    fn take(&self, token: &str) -> Option<PendingChunk> {
        self.lock().chunks.remove(token)
    }
}
