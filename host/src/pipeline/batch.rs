//! Collects source events into batches that end on a transaction boundary.

use crate::change::{Change, SourceEvent};
use crate::lsn::Lsn;

/// How much one batch may hold before it is processed.
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    /// Process the batch once it holds this many changes (it may hold more
    /// when one transaction is bigger).
    pub max_changes: usize,
}

impl Default for BatchLimits {
    fn default() -> Self {
        BatchLimits { max_changes: 1000 }
    }
}

/// The committed part of a batch, ready to be processed and stored.
#[derive(Debug, Default)]
pub struct Committed {
    /// Changes of fully committed transactions, in commit order.
    pub changes: Vec<Change>,
    /// Commit LSN of the last transaction in `changes`.
    pub last_commit_lsn: Lsn,
    /// End LSN of the last transaction: the position to confirm once stored.
    pub last_end_lsn: Lsn,
}

/// Events received but not yet processed.
#[derive(Debug, Default)]
pub struct Batch {
    committed: Committed,
    committed_any: bool,
    open: Vec<Change>,
    idle_at: Option<Lsn>,
}

impl Batch {
    /// Adds an event from the source.
    pub fn push(&mut self, event: SourceEvent) {
        match event {
            SourceEvent::Change(change) => self.open.push(change),
            SourceEvent::Commit {
                commit_lsn,
                end_lsn,
            } => {
                self.committed.changes.append(&mut self.open);
                self.committed.last_commit_lsn = commit_lsn;
                self.committed.last_end_lsn = end_lsn;
                self.committed_any = true;
                self.idle_at = None;
            }
            SourceEvent::Idle { wal_end } => {
                if self.open.is_empty() {
                    self.idle_at = Some(wal_end);
                }
            }
        }
    }

    /// Whether the batch should be processed before taking more events.
    pub fn is_full(&self, limits: &BatchLimits) -> bool {
        self.committed.changes.len() + self.open.len() >= limits.max_changes && self.open.is_empty()
    }

    /// Whether at least one transaction has committed since the last take.
    pub fn has_committed_work(&self) -> bool {
        self.committed_any
    }

    /// Takes the committed transactions, leaving any open one in place.
    pub fn take_committed(&mut self) -> Committed {
        self.committed_any = false;
        std::mem::take(&mut self.committed)
    }

    /// Takes the idle position, if the source went idle with nothing open.
    pub fn take_idle_position(&mut self) -> Option<Lsn> {
        if self.open.is_empty() && !self.committed_any {
            self.idle_at.take()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_transaction_is_kept_and_idle_waits_for_it() {
        let mut batch = Batch::default();
        batch.push(SourceEvent::Commit {
            commit_lsn: Lsn(10),
            end_lsn: Lsn(11),
        });
        batch.push(SourceEvent::Idle { wal_end: Lsn(20) });
        assert!(batch.has_committed_work());
        let committed = batch.take_committed();
        assert_eq!(committed.last_end_lsn, Lsn(11));
        assert_eq!(batch.take_idle_position(), Some(Lsn(20)));
        assert_eq!(batch.take_idle_position(), None);
    }
}
