//! The pipeline's side of backfills: the keys that changed between a
//! chunk's watermarks, and the chunk's surviving rows as `read` changes at
//! its high watermark.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use tokio::sync::oneshot;
use tracing::{debug, warn};

use super::{Backfills, Generation, Mark, WatermarkContent};
use weft_core::change::{Action, BackfillRead, Change, Watermark};
use weft_store::{Store, StoreError};

/// A chunk's keys changed on the stream since its low watermark.
struct Window {
    schema: String,
    table: String,
    changed: HashSet<Vec<String>>,
    /// The transactions seen committing since the low watermark.
    committed: HashSet<u32>,
}

/// How many of the latest transactions seen on the stream are remembered,
/// to recognise one a chunk's snapshot missed although it committed before
/// the chunk's low watermark.
const RECENT_TRANSACTIONS: usize = 100_000;

/// The latest transactions seen on the stream (their xids), oldest first.
#[derive(Default)]
struct RecentTransactions {
    order: VecDeque<u32>,
    seen: HashSet<u32>,
}

impl RecentTransactions {
    fn note(&mut self, xid: u32) {
        if self.order.back() == Some(&xid) || !self.seen.insert(xid) {
            return;
        }
        self.order.push_back(xid);
        if self.order.len() > RECENT_TRANSACTIONS
            && let Some(oldest) = self.order.pop_front()
        {
            self.seen.remove(&oldest);
        }
    }
}

/// A chunk whose rows went into the pipeline's batch. Once that batch is
/// stored, [`ChunkStored::record`] stores the backfill's progress and lets
/// its runner read the next chunk. It does not wait for the commit of the
/// high watermark's transaction: the rows are durable in the store by then,
/// and a later batch may be paused by a sink's full backlog.
pub struct ChunkStored {
    backfill: String,
    /// The claim the chunk was read under, and the registry that knows it.
    generation: Generation,
    backfills: Backfills,
    /// The backfill's health entity.
    entity: String,
    from: Option<Vec<String>>,
    cursor: Option<Vec<String>>,
    rows: u64,
    done: bool,
    notify: Option<oneshot::Sender<()>>,
}

impl ChunkStored {
    /// Records the chunk in the backfill's progress and wakes its runner.
    /// A chunk whose progress is refused (the backfill was cancelled or
    /// ended, or an earlier chunk was not stored) drops its runner's
    /// receiver instead, with the chunks read after it: the runner reads
    /// again from the stored cursor.
    pub fn record(self, store: &Store) -> Result<(), StoreError> {
        let recorded = store.record_backfill_progress(
            &self.backfill,
            self.from.as_deref(),
            self.cursor.as_deref(),
            self.rows,
            self.done,
        )?;
        if !recorded {
            self.backfills.invalidate(&self.backfill, self.generation);
            return Ok(());
        }
        super::republish(store, &self.backfill);
        let health = weft_core::health::global();
        health.clear(
            weft_core::health::EntityKind::Backfill,
            &self.entity,
            super::runner::CHUNK_FAILING,
        );
        health.succeeded(weft_core::health::EntityKind::Backfill, &self.entity);
        if let Some(notify) = self.notify {
            let _ = notify.send(());
        }
        Ok(())
    }
}

/// Tracks open chunks on one replication stream.
///
/// The watermarks alone leave one gap: Postgres writes a transaction's
/// commit record before it makes the transaction visible, so a transaction
/// can commit *before* a chunk's low watermark on the stream and still be
/// invisible to the chunk's query, which then reads an older version of its
/// rows than the change the stream already carried. The runner hands over
/// the transactions in progress for the query's snapshot; a chunk whose
/// snapshot missed one that the stream showed committing before the
/// window is dropped, and its runner reads it again.
pub struct Watermarks {
    backfills: Backfills,
    windows: HashMap<String, Window>,
    recent: RecentTransactions,
}

impl Watermarks {
    /// Tracks the chunks registered in `backfills`.
    pub fn new(backfills: Backfills) -> Watermarks {
        Watermarks {
            backfills,
            windows: HashMap::new(),
            recent: RecentTransactions::default(),
        }
    }

    /// Notes a change from the stream: its transaction committed, and its
    /// key changed inside every open window on its table.
    pub fn observe(&mut self, change: &Change) {
        if change.backfill.is_some() {
            return;
        }
        self.recent.note(change.xid);
        if self.windows.is_empty() {
            return;
        }
        let mut key = None;
        for window in self.windows.values_mut() {
            window.committed.insert(change.xid);
            if window.schema == change.relation.schema && window.table == change.relation.name {
                let key = key.get_or_insert_with(|| change.primary_key_values());
                window.changed.insert(key.clone());
            }
        }
    }

    /// Handles a watermark: a low one opens its chunk's window; a high one
    /// closes it and returns the chunk's rows that did not change inside it,
    /// as `read` changes at the watermark's position, with what to record
    /// once they are stored. Unknown tokens are ignored.
    pub fn on_watermark(&mut self, watermark: &Watermark) -> (Vec<Change>, Option<ChunkStored>) {
        let content: WatermarkContent = match serde_json::from_str(&watermark.content) {
            Ok(content) => content,
            Err(error) => {
                warn!(%error, content = %watermark.content, "ignoring a malformed backfill watermark");
                return (Vec::new(), None);
            }
        };
        match content.mark {
            Mark::Low => {
                if let Some(relation) = self.backfills.relation_of(&content.token) {
                    self.windows.insert(
                        content.token,
                        Window {
                            schema: relation.schema.clone(),
                            table: relation.name.clone(),
                            changed: HashSet::new(),
                            committed: HashSet::new(),
                        },
                    );
                }
                (Vec::new(), None)
            }
            Mark::High => {
                let window = self.windows.remove(&content.token);
                let Some(chunk) = self.backfills.take(&content.token) else {
                    return (Vec::new(), None);
                };
                let (Some(window), Some(rows)) = (window, chunk.rows) else {
                    // Without its window (the low watermark was not seen on
                    // this stream) the chunk cannot be checked: dropping it
                    // tells its runner, which reads it again.
                    debug!(token = %content.token, "backfill chunk without its window; dropped");
                    self.backfills.invalidate(&chunk.tag.id, chunk.generation);
                    return (Vec::new(), None);
                };
                if let Some(xid) = chunk
                    .in_progress
                    .iter()
                    .find(|xid| self.recent.seen.contains(xid) && !window.committed.contains(xid))
                {
                    debug!(token = %content.token, xid, "backfill chunk's snapshot missed a transaction committed before its window; read again");
                    self.backfills.invalidate(&chunk.tag.id, chunk.generation);
                    return (Vec::new(), None);
                }
                let selected = rows.len() as u64;
                let tag = chunk.tag;
                // Sized up front: a chunk is up to 10,000 rows, and growing
                // by doubling costs copies and fresh pages each time.
                let mut reads = Vec::with_capacity(rows.len());
                reads.extend(
                    rows.into_iter()
                        .filter(|(key, _)| !window.changed.contains(key))
                        .zip(watermark.commit_idx + 1..)
                        .map(|((key, record), commit_idx)| Change {
                            relation: Arc::clone(&chunk.relation),
                            action: Action::Read,
                            commit_lsn: watermark.commit_lsn,
                            commit_idx,
                            xid: watermark.xid,
                            commit_timestamp: watermark.commit_timestamp,
                            new: None,
                            old: None,
                            backfill: Some(BackfillRead {
                                tag: Arc::clone(&tag),
                                key,
                                record,
                            }),
                            webhook: None,
                        }),
                );
                debug!(backfill = %tag.id, selected, emitted = reads.len(), "backfill chunk emitted");
                let stored = ChunkStored {
                    backfill: tag.id.clone(),
                    generation: chunk.generation,
                    backfills: self.backfills.clone(),
                    entity: super::health_name(
                        &tag.sink,
                        &chunk.relation.schema,
                        &chunk.relation.name,
                    ),
                    from: chunk.from,
                    cursor: chunk.cursor,
                    rows: selected,
                    done: chunk.done,
                    notify: chunk.stored,
                };
                (reads, Some(stored))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use weft_core::change::{BackfillTag, Column, Relation};
    use weft_core::lsn::Lsn;

    fn relation() -> Arc<Relation> {
        Arc::new(Relation {
            oid: 1,
            schema: "public".into(),
            name: "items".into(),
            columns: vec![Column {
                name: "id".into(),
                type_oid: 23,
                type_modifier: -1,
                is_identity_key: true,
            }],
            primary_key: vec!["id".into()],
        })
    }

    fn row(id: i64) -> crate::backfill::ReadRow {
        (vec![id.to_string()], json!({"id": id}).to_string().into())
    }

    fn watermark(token: &str, mark: &str, lsn: u64) -> Watermark {
        Watermark {
            content: json!({"token": token, "mark": mark}).to_string(),
            commit_lsn: Lsn(lsn),
            commit_idx: 0,
            xid: 1,
            commit_timestamp: chrono::Utc::now(),
        }
    }

    /// A registry, the watermarks tracking it, and backfill `b` of sink `s`
    /// with its runner's claim.
    fn tracking() -> (Backfills, Watermarks, Arc<BackfillTag>, Generation) {
        let backfills = Backfills::new();
        let watermarks = Watermarks::new(backfills.clone());
        let tag = Arc::new(BackfillTag {
            id: "b".into(),
            sink: "s".into(),
        });
        let generation = backfills.restart("b");
        (backfills, watermarks, tag, generation)
    }

    fn update(id: i64) -> Change {
        let serde_json::Value::Object(row) = json!({"id": id}) else {
            unreachable!()
        };
        Change {
            relation: relation(),
            action: Action::Update,
            commit_lsn: Lsn(15),
            commit_idx: 0,
            xid: 2,
            commit_timestamp: chrono::Utc::now(),
            new: Some(row),
            old: None,
            backfill: None,
            webhook: None,
        }
    }

    #[test]
    fn rows_changed_inside_the_window_are_dropped_and_the_rest_read_at_the_high_mark() {
        let (backfills, mut watermarks, tag, generation) = tracking();
        let mut stored = backfills.expect("t1", tag, generation, relation());
        watermarks.observe(&update(2)); // before the window: irrelevant
        assert!(
            watermarks
                .on_watermark(&watermark("t1", "low", 10))
                .0
                .is_empty()
        );
        watermarks.observe(&update(3));
        backfills.fill(
            "t1",
            ((1..=4).map(row).collect(), Vec::new()),
            (None, Some(vec!["4".into()])),
            true,
        );
        let (reads, chunk) = watermarks.on_watermark(&watermark("t1", "high", 20));
        let ids: Vec<_> = reads.iter().map(|c| c.record()["id"].clone()).collect();
        assert_eq!(
            ids,
            vec![json!(1), json!(2), json!(4)],
            "3 changed in the window"
        );
        assert!(
            reads
                .iter()
                .all(|c| c.action == Action::Read && c.commit_lsn == Lsn(20))
        );
        let positions: Vec<u32> = reads.iter().map(|c| c.commit_idx).collect();
        assert_eq!(positions, vec![1, 2, 3]);
        let chunk = chunk.expect("progress to record");
        assert_eq!((chunk.rows, chunk.done), (4, true));
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("weft.db")).unwrap();
        store
            .create_backfill("b", "s", ("public", "items"), &Default::default(), None)
            .unwrap();
        chunk.record(&store).unwrap();
        assert!(stored.try_recv().is_ok(), "the runner is told");
        assert_eq!(store.backfill("b").unwrap().unwrap().rows_processed, 4);
    }

    #[test]
    fn unknown_tokens_and_a_missing_low_mark_emit_nothing() {
        let (backfills, mut watermarks, tag, generation) = tracking();
        assert!(
            watermarks
                .on_watermark(&watermark("nope", "high", 20))
                .1
                .is_none()
        );
        let _stored = backfills.expect("t2", tag, generation, relation());
        backfills.fill("t2", (vec![row(1)], Vec::new()), (None, None), true);
        let (reads, chunk) = watermarks.on_watermark(&watermark("t2", "high", 20));
        assert!(reads.is_empty() && chunk.is_none());
    }

    #[test]
    fn chunks_read_ahead_of_a_lost_one_are_dropped_with_it() {
        let (backfills, mut watermarks, tag, generation) = tracking();
        let other = Arc::new(BackfillTag {
            id: "other".into(),
            sink: "s".into(),
        });
        let other_generation = backfills.restart("other");
        let mut unrelated = backfills.expect("o1", other, other_generation, relation());
        // Chunk t1 (rows 1-2) is lost: its low watermark is never seen.
        let mut first = backfills.expect("t1", Arc::clone(&tag), generation, relation());
        backfills.fill(
            "t1",
            ((1..=2).map(row).collect(), Vec::new()),
            (None, Some(vec!["2".into()])),
            false,
        );
        // Chunk t2 (rows 3-4) was read ahead after it.
        let mut second = backfills.expect("t2", Arc::clone(&tag), generation, relation());
        watermarks.on_watermark(&watermark("t2", "low", 30));
        backfills.fill(
            "t2",
            ((3..=4).map(row).collect(), Vec::new()),
            (Some(vec!["2".into()]), Some(vec!["4".into()])),
            true,
        );
        assert!(
            watermarks
                .on_watermark(&watermark("t1", "high", 31))
                .1
                .is_none()
        );
        let (reads, chunk) = watermarks.on_watermark(&watermark("t2", "high", 40));
        assert!(
            reads.is_empty() && chunk.is_none(),
            "t2 starts after rows that were never stored: its runner reads both again, so emitting it would deliver rows 3-4 twice"
        );
        assert!(closed(&mut first), "t1's runner hears it was lost");
        assert!(closed(&mut second), "and so does t2's");
        assert!(
            matches!(
                unrelated.try_recv(),
                Err(oneshot::error::TryRecvError::Empty)
            ),
            "another backfill's chunk is untouched"
        );
    }

    fn closed(receiver: &mut oneshot::Receiver<()>) -> bool {
        matches!(
            receiver.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        )
    }

    #[test]
    fn a_chunk_read_after_a_drop_under_the_old_claim_is_never_emitted() {
        let (backfills, mut watermarks, tag, generation) = tracking();
        // t1 is lost (its low watermark is never seen) while its runner
        // still waits for an earlier chunk to be stored...
        let _first = backfills.expect("t1", Arc::clone(&tag), generation, relation());
        backfills.fill(
            "t1",
            (vec![row(1)], Vec::new()),
            (None, Some(vec!["1".into()])),
            false,
        );
        watermarks.on_watermark(&watermark("t1", "high", 10));
        // ... so it reads t2 under its old claim before it hears.
        let mut late = backfills.expect("t2", Arc::clone(&tag), generation, relation());
        watermarks.on_watermark(&watermark("t2", "low", 20));
        backfills.fill(
            "t2",
            (vec![row(2)], Vec::new()),
            (Some(vec!["1".into()]), Some(vec!["2".into()])),
            true,
        );
        let (reads, chunk) = watermarks.on_watermark(&watermark("t2", "high", 30));
        assert!(
            reads.is_empty() && chunk.is_none(),
            "row 2 would go out twice: its runner reads it again after row 1"
        );
        assert!(closed(&mut late), "its runner is told");
        // Read again from the stored cursor under a new claim: emitted.
        let renewed = backfills.restart("b");
        let _again = backfills.expect("t3", tag, renewed, relation());
        watermarks.on_watermark(&watermark("t3", "low", 40));
        backfills.fill(
            "t3",
            ((1..=2).map(row).collect(), Vec::new()),
            (None, Some(vec!["2".into()])),
            true,
        );
        let (reads, chunk) = watermarks.on_watermark(&watermark("t3", "high", 50));
        assert_eq!(reads.len(), 2);
        assert!(chunk.is_some());
    }

    #[test]
    fn refused_progress_drops_the_chunks_read_after_it() {
        let (backfills, mut watermarks, tag, generation) = tracking();
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("weft.db")).unwrap();
        store
            .create_backfill("b", "s", ("public", "items"), &Default::default(), None)
            .unwrap();
        // t1 starts after key 5, but nothing is stored yet: refused.
        let mut first = backfills.expect("t1", Arc::clone(&tag), generation, relation());
        watermarks.on_watermark(&watermark("t1", "low", 10));
        backfills.fill(
            "t1",
            (vec![row(6)], Vec::new()),
            (Some(vec!["5".into()]), Some(vec!["6".into()])),
            false,
        );
        let (reads, chunk) = watermarks.on_watermark(&watermark("t1", "high", 20));
        assert_eq!(reads.len(), 1);
        let mut ahead = backfills.expect("t2", tag, generation, relation());
        chunk.unwrap().record(&store).unwrap();
        assert!(closed(&mut first), "t1's runner reads it again");
        assert!(closed(&mut ahead), "and t2, read after it, goes with it");
        watermarks.on_watermark(&watermark("t2", "low", 30));
        let (reads, chunk) = watermarks.on_watermark(&watermark("t2", "high", 40));
        assert!(reads.is_empty() && chunk.is_none());
        assert_eq!(store.backfill("b").unwrap().unwrap().rows_processed, 0);
    }

    #[test]
    fn a_stopped_claim_leaves_a_newer_one_alone() {
        let (backfills, _watermarks, tag, old) = tracking();
        // A paused backfill's runner stops after the resumed one started.
        let new = backfills.restart("b");
        let _chunk = backfills.expect("t1", Arc::clone(&tag), new, relation());
        backfills.stop("b", old);
        assert!(backfills.relation_of("t1").is_some(), "still registered");
        backfills.stop("b", new);
        assert!(backfills.relation_of("t1").is_none(), "forgotten");
        let mut after = backfills.expect("t2", tag, new, relation());
        assert!(
            closed(&mut after),
            "nothing registers under a stopped claim"
        );
    }

    #[test]
    fn a_runner_that_stops_after_a_drop_leaves_no_claim_behind() {
        let (backfills, mut watermarks, tag, generation) = tracking();
        // t1 is dropped (no low watermark), then the backfill is cancelled
        // before its runner hears: the runner stops under its old claim.
        let mut lost = backfills.expect("t1", Arc::clone(&tag), generation, relation());
        backfills.fill("t1", (vec![row(1)], Vec::new()), (None, None), false);
        watermarks.on_watermark(&watermark("t1", "high", 10));
        assert!(closed(&mut lost));
        let mut late = backfills.expect("t2", tag, generation, relation());
        assert!(closed(&mut late), "nothing registers under a dropped claim");
        backfills.stop("b", generation);
        assert!(
            backfills.lock().claims.is_empty(),
            "a stopped backfill is forgotten, not kept under a claim nobody holds"
        );
    }

    #[test]
    fn a_chunk_whose_snapshot_missed_a_transaction_committed_before_its_window_is_read_again() {
        let (backfills, mut watermarks, tag, generation) = tracking();
        let by = |id: i64, xid: u32| Change { xid, ..update(id) };
        let fill_rows_1_to_3 = |token: &str, in_progress: Vec<u32>| {
            let rows = (1..=3).map(row).collect();
            backfills.fill(
                token,
                (rows, in_progress),
                (None, Some(vec!["3".into()])),
                true,
            );
        };
        // Transaction 7 commits on the stream before the low watermark, but
        // the query's snapshot still saw it in progress: its rows are stale.
        let mut stale = backfills.expect("t1", Arc::clone(&tag), generation, relation());
        watermarks.observe(&by(2, 7));
        watermarks.on_watermark(&watermark("t1", "low", 10));
        fill_rows_1_to_3("t1", vec![7, 9]);
        // The runner read the next chunk ahead before the pipeline got here.
        let mut ahead = backfills.expect("t1b", Arc::clone(&tag), generation, relation());
        backfills.fill(
            "t1b",
            (vec![row(4)], Vec::new()),
            (Some(vec!["3".into()]), Some(vec!["4".into()])),
            true,
        );
        let (reads, chunk) = watermarks.on_watermark(&watermark("t1", "high", 20));
        assert!(reads.is_empty() && chunk.is_none(), "dropped");
        assert!(closed(&mut stale), "its runner reads it again");
        watermarks.on_watermark(&watermark("t1b", "low", 21));
        let (reads, chunk) = watermarks.on_watermark(&watermark("t1b", "high", 22));
        assert!(
            reads.is_empty() && chunk.is_none() && closed(&mut ahead),
            "the chunk read ahead is read again too, not delivered twice"
        );
        // Read again: transaction 8, in progress for the new snapshot,
        // commits inside the window (its row is dropped as usual), and 9
        // has not committed yet (its change comes after the chunk).
        let renewed = backfills.restart("b");
        let _fresh = backfills.expect("t2", tag, renewed, relation());
        watermarks.on_watermark(&watermark("t2", "low", 30));
        watermarks.observe(&by(3, 8));
        fill_rows_1_to_3("t2", vec![8, 9]);
        let (reads, chunk) = watermarks.on_watermark(&watermark("t2", "high", 40));
        let ids: Vec<_> = reads.iter().map(|c| c.record()["id"].clone()).collect();
        assert_eq!(ids, vec![json!(1), json!(2)]);
        assert!(chunk.is_some());
    }
}
