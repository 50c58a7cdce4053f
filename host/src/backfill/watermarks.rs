//! The pipeline's side of backfills: the keys that changed between a
//! chunk's watermarks, and the chunk's surviving rows as `read` changes at
//! its high watermark.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio::sync::oneshot;
use tracing::{debug, warn};

use super::{Backfills, Mark, WatermarkContent};
use crate::change::{Action, Change, Watermark};
use crate::lsn::Lsn;
use crate::store::{Store, StoreError};

/// A chunk's keys changed on the stream since its low watermark.
struct Window {
    schema: String,
    table: String,
    changed: HashSet<Vec<String>>,
}

/// A chunk whose rows go out with the transaction committed at
/// `commit_lsn`. Once that transaction is stored, [`ChunkStored::record`]
/// stores the backfill's progress and lets its runner read the next chunk.
pub struct ChunkStored {
    /// The commit of the high watermark's transaction.
    pub commit_lsn: Lsn,
    backfill: String,
    /// The backfill's health entity.
    entity: String,
    cursor: Option<Vec<String>>,
    rows: u64,
    done: bool,
    notify: Option<oneshot::Sender<()>>,
}

impl ChunkStored {
    /// Records the chunk in the backfill's progress and wakes its runner.
    pub fn record(self, store: &Store) -> Result<(), StoreError> {
        store.record_backfill_progress(
            &self.backfill,
            self.cursor.as_deref(),
            self.rows,
            self.done,
        )?;
        super::republish(store, &self.backfill);
        let health = crate::health::global();
        health.clear(
            crate::health::EntityKind::Backfill,
            &self.entity,
            super::runner::CHUNK_FAILING,
        );
        health.succeeded(crate::health::EntityKind::Backfill, &self.entity);
        if let Some(notify) = self.notify {
            let _ = notify.send(());
        }
        Ok(())
    }
}

/// Tracks open chunks on one replication stream.
pub struct Watermarks {
    backfills: Backfills,
    windows: HashMap<String, Window>,
}

impl Watermarks {
    /// Tracks the chunks registered in `backfills`.
    pub fn new(backfills: Backfills) -> Watermarks {
        Watermarks {
            backfills,
            windows: HashMap::new(),
        }
    }

    /// Notes a change from the stream: its key changed inside every open
    /// window on its table.
    pub fn observe(&mut self, change: &Change) {
        if self.windows.is_empty() || change.backfill.is_some() {
            return;
        }
        let mut key = None;
        for window in self.windows.values_mut() {
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
                    // this stream) the chunk cannot be checked: its runner
                    // times out and reads it again.
                    debug!(token = %content.token, "backfill chunk without its window; dropped");
                    return (Vec::new(), None);
                };
                let selected = rows.len() as u64;
                let tag = chunk.tag;
                let reads = rows
                    .into_iter()
                    .filter(|(key, _)| !window.changed.contains(key))
                    .zip(watermark.commit_idx + 1..)
                    .map(|((_, row), commit_idx)| Change {
                        relation: Arc::clone(&chunk.relation),
                        action: Action::Read,
                        commit_lsn: watermark.commit_lsn,
                        commit_idx,
                        xid: watermark.xid,
                        commit_timestamp: watermark.commit_timestamp,
                        new: Some(row),
                        old: None,
                        backfill: Some(Arc::clone(&tag)),
                        webhook: None,
                    })
                    .collect::<Vec<_>>();
                debug!(backfill = %tag.id, selected, emitted = reads.len(), "backfill chunk emitted");
                let stored = ChunkStored {
                    commit_lsn: watermark.commit_lsn,
                    backfill: tag.id.clone(),
                    entity: super::health_name(
                        &tag.sink,
                        &chunk.relation.schema,
                        &chunk.relation.name,
                    ),
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
    use crate::change::{BackfillTag, Column, Relation, Row};
    use serde_json::json;

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

    fn row(id: i64) -> (Vec<String>, Row) {
        let serde_json::Value::Object(row) = json!({"id": id}) else {
            unreachable!()
        };
        (vec![id.to_string()], row)
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

    fn update(id: i64) -> Change {
        let (_, row) = row(id);
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
        let backfills = Backfills::new();
        let tag = Arc::new(BackfillTag {
            id: "b".into(),
            sink: "s".into(),
        });
        let mut stored = backfills.expect("t1", tag, relation());
        let mut watermarks = Watermarks::new(backfills.clone());
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
            (1..=4).map(row).collect(),
            Some(vec!["4".into()]),
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
        let backfills = Backfills::new();
        let mut watermarks = Watermarks::new(backfills.clone());
        assert!(
            watermarks
                .on_watermark(&watermark("nope", "high", 20))
                .1
                .is_none()
        );
        let tag = Arc::new(BackfillTag {
            id: "b".into(),
            sink: "s".into(),
        });
        let _stored = backfills.expect("t2", tag, relation());
        backfills.fill("t2", vec![row(1)], None, true);
        let (reads, chunk) = watermarks.on_watermark(&watermark("t2", "high", 20));
        assert!(reads.is_empty() && chunk.is_none());
    }
}
