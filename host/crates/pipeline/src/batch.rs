//! Collects source events into batches.
//!
//! A batch holds whole committed transactions and, at its end, possibly the
//! first part of a transaction whose Commit has not arrived yet. The source
//! only emits committed transactions, so that part can be processed and
//! stored before its Commit: a big transaction then goes through in chunks
//! of at most [`BatchLimits`] instead of being held whole. What may be
//! confirmed (the sinks' cursors, the slot) only moves at a Commit.
//!
//! After a lost replication connection the source re-sends the transaction
//! it was in the middle of from its first change; changes the batch already
//! took are recognised by their (commit_lsn, commit_idx) and dropped.

use weft_core::change::{Change, SourceEvent};
use weft_core::lsn::Lsn;

/// How much one batch may hold before it is processed.
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    /// Process the batch once it holds this many changes.
    pub max_changes: usize,
    /// Process the batch once its changes take about this many bytes
    /// (see [`Change::approx_bytes`]).
    pub max_bytes: usize,
}

impl Default for BatchLimits {
    fn default() -> Self {
        BatchLimits {
            max_changes: 1000,
            max_bytes: 8 * 1024 * 1024,
        }
    }
}

/// The last transaction whose Commit a batch holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitPoint {
    /// Commit LSN: the sinks' cursors move here once stored.
    pub commit_lsn: Lsn,
    /// End LSN: the position to confirm once stored.
    pub end_lsn: Lsn,
}

/// What a batch hands over to be processed and stored.
#[derive(Debug, Default)]
pub struct Taken {
    /// Changes in commit order: whole transactions, possibly followed by
    /// the first part of one still waiting for its Commit.
    pub changes: Vec<Change>,
    /// The last Commit among them, if any.
    pub commit: Option<CommitPoint>,
    /// TRUNCATEs seen in the batch (see [`SourceEvent::Truncate`]).
    pub truncates: Vec<weft_core::change::Truncate>,
    /// When the batch ends inside a transaction: the (commit_lsn,
    /// commit_idx) of its last change or truncate of that transaction.
    pub open_through: Option<(Lsn, u32)>,
}

/// Events received but not yet processed.
#[derive(Debug, Default)]
pub struct Batch {
    taken: Taken,
    bytes: usize,
    /// (commit_lsn, commit_idx) of the last change or truncate taken of the
    /// transaction whose Commit has not arrived; survives `take`.
    open_through: Option<(Lsn, u32)>,
    idle_at: Option<Lsn>,
}

impl Batch {
    /// Adds changes that arrive together (a backfill chunk's thousands of
    /// reads); into an empty batch they come as their own `Vec`, not moved
    /// one by one.
    pub fn push_changes(&mut self, mut changes: Vec<Change>) {
        changes.retain(|change| self.take_position(change.commit_lsn, change.commit_idx));
        self.bytes += changes.iter().map(Change::approx_bytes).sum::<usize>();
        if self.taken.changes.is_empty() {
            self.taken.changes = changes;
        } else {
            self.taken.changes.append(&mut changes);
        }
    }

    /// Adds an event from the source.
    pub fn push(&mut self, event: SourceEvent) {
        match event {
            SourceEvent::Change(change) => {
                if self.take_position(change.commit_lsn, change.commit_idx) {
                    self.bytes += change.approx_bytes();
                    self.taken.changes.push(change);
                }
            }
            SourceEvent::Truncate(truncate) => {
                if self.take_position(truncate.commit_lsn, truncate.last_idx()) {
                    self.taken.truncates.push(truncate);
                }
            }
            SourceEvent::Commit {
                commit_lsn,
                end_lsn,
            } => {
                self.taken.commit = Some(CommitPoint {
                    commit_lsn,
                    end_lsn,
                });
                self.open_through = None;
                self.idle_at = None;
            }
            SourceEvent::Idle { wal_end } => {
                if self.open_through.is_none() {
                    self.idle_at = Some(wal_end);
                }
            }
            // The pipeline turns watermarks into changes before batching.
            SourceEvent::Watermark(_) => {}
        }
    }

    /// Records that the event at (commit_lsn, commit_idx) of an open
    /// transaction is taken; false when it was already (a re-send).
    fn take_position(&mut self, commit_lsn: Lsn, commit_idx: u32) -> bool {
        if let Some((lsn, idx)) = self.open_through
            && lsn == commit_lsn
            && commit_idx <= idx
        {
            return false;
        }
        self.open_through = Some((commit_lsn, commit_idx));
        true
    }

    /// Whether the batch should be processed before taking more events.
    pub fn is_full(&self, limits: &BatchLimits) -> bool {
        self.taken.changes.len() >= limits.max_changes || self.bytes >= limits.max_bytes
    }

    /// Whether the batch holds anything to process: a Commit, or enough of
    /// an open transaction to store a chunk of it.
    pub fn has_work(&self, limits: &BatchLimits) -> bool {
        self.taken.commit.is_some() || self.is_full(limits)
    }

    /// Takes everything received so far for processing; an open
    /// transaction continues in the next batch.
    pub fn take(&mut self) -> Taken {
        self.bytes = 0;
        let mut taken = std::mem::take(&mut self.taken);
        taken.open_through = self.open_through;
        taken
    }

    /// Whether the batch is between two transactions: it holds nothing and
    /// no transaction is open, so the set of sinks may change here without
    /// a sink seeing part of a transaction.
    pub fn at_transaction_boundary(&self) -> bool {
        self.open_through.is_none()
            && self.taken.changes.is_empty()
            && self.taken.truncates.is_empty()
            && self.taken.commit.is_none()
    }

    /// Takes the idle position, if the source went idle with nothing open
    /// or waiting.
    pub fn take_idle_position(&mut self) -> Option<Lsn> {
        if self.open_through.is_none()
            && self.taken.commit.is_none()
            && self.taken.changes.is_empty()
        {
            self.idle_at.take()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use weft_core::change::{Action, Relation};

    fn change(commit_lsn: u64, commit_idx: u32) -> SourceEvent {
        SourceEvent::Change(Change {
            relation: Arc::new(Relation {
                oid: 1,
                schema: "public".into(),
                name: "t".into(),
                columns: vec![],
                primary_key: vec![],
            }),
            action: Action::Insert,
            commit_lsn: Lsn(commit_lsn),
            commit_idx,
            xid: 1,
            commit_timestamp: chrono::Utc::now(),
            new: Some(serde_json::Map::new()),
            old: None,
            backfill: None,
            webhook: None,
        })
    }

    fn commit(commit_lsn: u64) -> SourceEvent {
        SourceEvent::Commit {
            commit_lsn: Lsn(commit_lsn),
            end_lsn: Lsn(commit_lsn + 1),
        }
    }

    #[test]
    fn idle_waits_for_the_commit_before_it() {
        let mut batch = Batch::default();
        batch.push(commit(10));
        batch.push(SourceEvent::Idle { wal_end: Lsn(20) });
        let limits = BatchLimits::default();
        assert!(batch.has_work(&limits));
        assert_eq!(batch.take_idle_position(), None);
        let taken = batch.take();
        assert_eq!(taken.commit.unwrap().end_lsn, Lsn(11));
        assert_eq!(batch.take_idle_position(), Some(Lsn(20)));
        assert_eq!(batch.take_idle_position(), None);
    }

    #[test]
    fn a_big_transaction_is_taken_in_chunks_and_commits_at_the_end() {
        let limits = BatchLimits {
            max_changes: 3,
            max_bytes: usize::MAX,
        };
        let mut batch = Batch::default();
        for idx in 0..3 {
            batch.push(change(50, idx));
        }
        assert!(batch.has_work(&limits), "a full chunk is processed");
        let chunk = batch.take();
        assert_eq!(chunk.changes.len(), 3);
        assert_eq!(chunk.commit, None, "no commit: nothing to confirm yet");
        assert_eq!(
            chunk.open_through,
            Some((Lsn(50), 2)),
            "stored through idx 2"
        );
        // An Idle while the transaction is open must not be confirmed.
        batch.push(SourceEvent::Idle { wal_end: Lsn(99) });
        assert_eq!(batch.take_idle_position(), None);
        // The source reconnects and re-sends the transaction from idx 0.
        for idx in 0..5 {
            batch.push(change(50, idx));
        }
        batch.push(commit(50));
        let rest = batch.take();
        let idxs: Vec<u32> = rest.changes.iter().map(|c| c.commit_idx).collect();
        assert_eq!(
            idxs,
            vec![3, 4],
            "re-sent changes already taken are dropped"
        );
        assert_eq!(rest.commit.unwrap().commit_lsn, Lsn(50));
        assert_eq!(rest.open_through, None, "the transaction is whole");
        // The next transaction starts fresh.
        batch.push(change(60, 0));
        let next = batch.take();
        assert_eq!(next.changes.len(), 1);
        assert_eq!(next.open_through, Some((Lsn(60), 0)));
    }

    #[test]
    fn changes_pushed_together_keep_their_order_and_skip_what_was_taken() {
        let changes = |idxs: std::ops::Range<u32>| {
            idxs.map(|idx| match change(50, idx) {
                SourceEvent::Change(change) => change,
                _ => unreachable!(),
            })
            .collect::<Vec<_>>()
        };
        let mut batch = Batch::default();
        batch.push_changes(changes(0..3));
        batch.push(change(50, 3));
        let limits = BatchLimits {
            max_changes: 5,
            max_bytes: usize::MAX,
        };
        assert!(!batch.is_full(&limits));
        // A re-sent part: 0..4 were taken already.
        batch.push_changes(changes(2..6));
        assert!(batch.is_full(&limits));
        let idxs: Vec<u32> = batch.take().changes.iter().map(|c| c.commit_idx).collect();
        assert_eq!(idxs, vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn the_byte_limit_closes_a_chunk() {
        let limits = BatchLimits {
            max_changes: usize::MAX,
            max_bytes: 1000,
        };
        let mut batch = Batch::default();
        let mut pushed = 0;
        while !batch.is_full(&limits) {
            batch.push(change(5, pushed));
            pushed += 1;
        }
        assert!(pushed > 1 && pushed < 20, "{pushed} changes");
    }

    #[test]
    fn a_boundary_is_only_between_transactions() {
        let limits = BatchLimits {
            max_changes: 2,
            max_bytes: usize::MAX,
        };
        let mut batch = Batch::default();
        assert!(batch.at_transaction_boundary());
        batch.push(change(70, 0));
        assert!(!batch.at_transaction_boundary(), "a change is waiting");
        batch.push(change(70, 1));
        batch.take();
        assert!(
            !batch.at_transaction_boundary(),
            "a chunk of an open transaction was taken"
        );
        batch.push(change(70, 2));
        batch.push(commit(70));
        assert!(batch.has_work(&limits));
        assert!(!batch.at_transaction_boundary(), "the commit is not stored");
        batch.take();
        assert!(batch.at_transaction_boundary());
    }
}
