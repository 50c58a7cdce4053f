//! A batch's store transaction, running on a blocking thread while the
//! pipeline already turns the next batch into messages. Appends still
//! happen one at a time and in order: the next one starts only after this
//! one is finished (see [`super::Pipeline`]'s `finish_append`).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use tokio::task::{JoinError, JoinHandle};

use super::CommitPoint;
use crate::backfill::ChunkStored;
use crate::lsn::Lsn;
use crate::store::{SinkBatch, Store, StoreError};

/// What to do once a batch is stored: the steps that must wait until its
/// messages are durable.
pub(super) struct Appended {
    /// Each sink's messages' commit timestamps, for the ingestion latency.
    pub(super) ingested: Vec<(String, Vec<DateTime<Utc>>)>,
    /// The transaction the batch completes, if it does.
    pub(super) commit: Option<CommitPoint>,
    /// Whether any sink got a message (pull consumers to wake).
    pub(super) any_message: bool,
    /// Backfill chunks whose rows the batch holds: their progress is
    /// recorded once it is stored.
    pub(super) chunks: Vec<ChunkStored>,
}

/// A store transaction under way.
pub(super) struct InFlightAppend {
    done: JoinHandle<Result<(), StoreError>>,
    /// Taken when the transaction is finished.
    pub(super) after: Appended,
}

impl InFlightAppend {
    /// Starts storing `batches`, moving the cursors to `cursor` and
    /// recording how far into an open transaction they go (`open`, see
    /// [`Store::append_through`]).
    pub(super) fn start(
        store: &Store,
        batches: Vec<SinkBatch>,
        (cursor, open): (Lsn, Option<(Lsn, u32)>),
        after: Appended,
    ) -> InFlightAppend {
        let store = store.clone();
        InFlightAppend {
            done: tokio::task::spawn_blocking(move || store.append_through(&batches, cursor, open)),
            after,
        }
    }
}

/// Waits for the append in `in_flight`, if any (never returns without one).
/// Cancel-safe: the transaction goes on and can be waited for again.
pub(super) async fn finished(
    in_flight: &mut Option<InFlightAppend>,
) -> Result<Result<(), StoreError>, JoinError> {
    match in_flight {
        Some(append) => (&mut append.done).await,
        None => std::future::pending().await,
    }
}

/// The commit timestamp of each transaction in `changes`.
pub(super) fn commit_times_of(changes: &[crate::change::Change]) -> HashMap<Lsn, DateTime<Utc>> {
    changes
        .iter()
        .map(|change| (change.commit_lsn, change.commit_timestamp))
        .collect()
}

/// Each sink's messages' commit timestamps, for the ingestion latency.
pub(super) fn commit_times(
    committed: &HashMap<Lsn, DateTime<Utc>>,
    sink_batches: &[SinkBatch],
) -> Vec<(String, Vec<DateTime<Utc>>)> {
    sink_batches
        .iter()
        .filter(|batch| !batch.messages.is_empty())
        .map(|batch| {
            let times = batch
                .messages
                .iter()
                .filter_map(|message| committed.get(&message.commit_lsn).copied())
                .collect();
            (batch.sink.clone(), times)
        })
        .collect()
}
