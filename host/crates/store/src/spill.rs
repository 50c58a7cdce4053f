//! The store's side of memory-first delivery: a push sink's messages wait
//! in memory between the pipeline and the destination (the sinks layer's
//! `lane`), and reach the store only when they must outlive that wait: a
//! delivery that keeps failing, a lane over its memory budget, or a worker
//! that stops. Such a message becomes an ordinary stored message of the
//! sink, delivered, retried and dead-lettered as every stored one is.
//!
//! A spill never moves the sink's cursor: the cursor says which changes
//! the sink has made safe, and a spill happens while older messages of the
//! sink may still be in memory.

use rusqlite::params;

use super::codec::{MessageColumns, StoredPayload};
use super::heads::AckId;
use super::{NewMessage, Store, StoreError, now_ms, store_messages};
use weft_core::metrics;
use weft_core::route::Route;

use super::delivery::StoredMessage;

impl StoredMessage {
    /// `message` as a delivery takes it straight from memory: its first
    /// attempt, under an ack id of its own that no store row holds.
    pub fn in_memory(message: NewMessage) -> StoredMessage {
        let size_bytes = payload_bytes(&message.payload);
        StoredMessage {
            ack_id: AckId::new(),
            commit_lsn: message.commit_lsn,
            commit_idx: message.commit_idx,
            group_id: message.group_id,
            idempotency_key: message.idempotency_key,
            payload: message.payload,
            size_bytes,
            route: message.route.map(|route| *route).unwrap_or_default(),
            attempt: 1,
        }
    }
}

impl From<StoredMessage> for NewMessage {
    /// A message from memory, to be stored as it was built.
    fn from(message: StoredMessage) -> NewMessage {
        NewMessage {
            commit_lsn: message.commit_lsn,
            commit_idx: message.commit_idx,
            group_id: message.group_id,
            idempotency_key: message.idempotency_key,
            payload: message.payload,
            route: (message.route != Route::default()).then(|| Box::new(message.route)),
        }
    }
}

/// The bytes of `payload`, as delivery budgets count them.
pub fn payload_bytes(payload: &StoredPayload) -> usize {
    match payload {
        StoredPayload::Json(text) => text.len(),
        StoredPayload::Bytes { data, .. } => data.len(),
    }
}

impl Store {
    /// Stores `messages` of the push sink `sink` that were waiting in
    /// memory (see the module doc), in one durable transaction, leaving the
    /// sink's cursor where it is. Messages already stored are ignored, as
    /// in [`Store::append`]. Returns how many were new.
    ///
    /// They were counted as ingested when the pipeline handed them over,
    /// so they are not counted again here.
    pub fn spill(&self, sink: &str, messages: &[NewMessage]) -> Result<usize, StoreError> {
        if messages.is_empty() {
            return Ok(0);
        }
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let inserted = store_messages(&tx, sink, messages, now_ms(), false)?;
        tx.commit()?;
        metrics::count(metrics::MESSAGES_SPILLED, sink, inserted);
        Ok(inserted)
    }

    /// Dead-letters `message` of the push sink `sink`, which failed in
    /// memory after `attempts` attempts, the last with `error`: one that no
    /// retry can fix (the destination said so) never touches the store's
    /// message table. Its group goes on; a replay stores it as a message.
    pub fn dead_letter_unstored(
        &self,
        sink: &str,
        message: &NewMessage,
        attempts: u32,
        error: &str,
    ) -> Result<(), StoreError> {
        let columns = MessageColumns::of(message)?;
        let now = now_ms();
        let attempted = Attempted {
            attempts,
            first_at: Some(now),
            last_at: Some(now),
        };
        insert_dead_letter(&self.lock(), sink, &columns, attempted, error, now)?;
        metrics::count(metrics::DELIVER_FAILURES, sink, 1);
        metrics::count_dead_lettered(sink, "delivery", 1);
        Ok(())
    }
}

/// How often a message was tried before it became a dead letter, and when.
pub(super) struct Attempted {
    /// Attempts (or deliveries) made.
    pub(super) attempts: u32,
    /// When the first was made, if any.
    pub(super) first_at: Option<i64>,
    /// When the last was made, if any.
    pub(super) last_at: Option<i64>,
}

/// Inserts a delivery dead letter of `sink` with `columns` at `now`; one
/// already there for the same position takes the new attempts and error.
pub(super) fn insert_dead_letter(
    conn: &rusqlite::Connection,
    sink: &str,
    columns: &MessageColumns<'_>,
    attempted: Attempted,
    error: &str,
    now: i64,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO dead_letters
             (sink, commit_lsn, commit_idx, group_id, idempotency_key, payload,
              attempts, last_error, first_attempt_at, last_attempt_at, dead_at,
              payload_bytes, content_type, route, stage)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, 'delivery')
         ON CONFLICT (sink, commit_lsn, commit_idx) DO UPDATE
         SET attempts = excluded.attempts, last_error = excluded.last_error,
             last_attempt_at = excluded.last_attempt_at, dead_at = excluded.dead_at",
    )?
    .execute(params![
        sink,
        columns.commit_lsn,
        columns.commit_idx,
        columns.group_id,
        columns.idempotency_key,
        columns.payload,
        attempted.attempts,
        error,
        attempted.first_at,
        attempted.last_at,
        now,
        columns.payload_bytes,
        columns.content_type,
        columns.route,
    ])?;
    Ok(())
}
