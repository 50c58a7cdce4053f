//! A batch's store transaction, running on a blocking thread while the
//! pipeline already turns the next batch into messages. Appends still
//! happen one at a time and in order: the next one starts only after this
//! one is finished (see [`super::Pipeline`]'s `finish_append`).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use tokio::task::{JoinError, JoinHandle};

use super::CommitPoint;
use crate::backfill::ChunkStored;
use weft_core::lsn::Lsn;
use weft_store::{SinkBatch, Store, StoreError};

/// What to do once a batch is stored: the steps that must wait until its
/// messages are durable.
pub(super) struct Appended {
    /// Each sink's messages' commit timestamps, for the ingestion latency.
    pub(super) ingested: Vec<(String, Vec<CommitRun>)>,
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
    /// The transaction's outcome, and the batches it stored.
    done: JoinHandle<(Result<(), StoreError>, Vec<SinkBatch>)>,
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
            done: tokio::task::spawn_blocking(move || {
                (store.append_through(&batches, cursor, open), batches)
            }),
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
        Some(append) => (&mut append.done).await.map(|(stored, batches)| {
            // Dropped here, on the pipeline's own thread that rendered
            // them (`server::pipeline_threads`): freeing a batch's
            // thousands of strings on the store's thread took mimalloc's
            // slower cross-thread path for every one.
            drop(batches);
            stored
        }),
        None => std::future::pending().await,
    }
}

/// A commit timestamp and how many of a sink's consecutive messages in a
/// batch it is the commit time of.
pub(super) type CommitRun = (DateTime<Utc>, usize);

/// The commit timestamp of each transaction in `changes` (in commit order:
/// a transaction's changes follow one another).
pub(super) fn commit_times_of(
    changes: &[weft_core::change::Change],
) -> HashMap<Lsn, DateTime<Utc>> {
    let mut times = HashMap::new();
    let mut last = None;
    for change in changes {
        if last != Some(change.commit_lsn) {
            times.insert(change.commit_lsn, change.commit_timestamp);
            last = Some(change.commit_lsn);
        }
    }
    times
}

/// Each sink's messages' commit timestamps, for the ingestion latency: one
/// run per transaction (a backfill chunk's thousands of reads share one).
pub(super) fn commit_times(
    committed: &HashMap<Lsn, DateTime<Utc>>,
    sink_batches: &[SinkBatch],
) -> Vec<(String, Vec<CommitRun>)> {
    sink_batches
        .iter()
        .filter(|batch| !batch.messages.is_empty())
        .map(|batch| {
            let mut runs: Vec<CommitRun> = Vec::new();
            // The transaction of the last run.
            let mut last = None;
            for message in &batch.messages {
                match runs.last_mut() {
                    Some((_, messages)) if last == Some(message.commit_lsn) => *messages += 1,
                    // Messages of no change in the batch (a truncate's)
                    // are not counted.
                    _ => {
                        if let Some(&time) = committed.get(&message.commit_lsn) {
                            runs.push((time, 1));
                            last = Some(message.commit_lsn);
                        }
                    }
                }
            }
            (batch.sink.clone(), runs)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_store::{NewMessage, StoredPayload};

    fn message(commit_lsn: u64, commit_idx: u32) -> NewMessage {
        NewMessage {
            commit_lsn: Lsn(commit_lsn),
            commit_idx,
            group_id: "g".into(),
            idempotency_key: "k".into(),
            payload: StoredPayload::Json("{}".into()),
            route: None,
        }
    }

    #[test]
    fn each_transaction_is_one_run_of_its_messages() {
        let (first, second) = (
            DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
            DateTime::from_timestamp(1_700_000_001, 0).unwrap(),
        );
        let committed = HashMap::from([(Lsn(10), first), (Lsn(20), second)]);
        let messages = vec![
            message(10, 0),
            message(10, 1),
            message(15, 0), // not of this batch's changes: not counted
            message(20, 0),
            message(20, 1),
            message(20, 2),
        ];
        let runs = commit_times(&committed, &[SinkBatch::of("s", messages)]);
        assert_eq!(runs, vec![("s".to_string(), vec![(first, 2), (second, 3)])]);
        assert!(commit_times(&committed, &[SinkBatch::of("empty", vec![])]).is_empty());
    }
}
