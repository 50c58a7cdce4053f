//! Which changes of the replication stream a sink has stored already, so
//! that those Postgres sends again after a restart are dropped.

use weft_core::lsn::Lsn;

/// What a sink has stored: every transaction through `cursor`, and of the
/// transaction after it, the changes through `open` (a big transaction
/// goes through in chunks before its Commit; see
/// `weft_pipeline::Batch`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoredUpTo {
    /// The commit LSN of the last transaction stored whole.
    pub cursor: Lsn,
    /// The (commit_lsn, commit_idx) of the last change stored of a
    /// transaction whose Commit is not stored yet.
    pub open: Option<(Lsn, u32)>,
}

impl StoredUpTo {
    /// Whole transactions through `cursor`, nothing of the next one.
    pub fn through(cursor: Lsn) -> Self {
        StoredUpTo { cursor, open: None }
    }

    /// What is stored once the transaction committing at `commit_lsn` is.
    /// The cursor never moves back: after a restart Postgres sends again
    /// transactions stored already (from the slot's confirmed position, which
    /// trails the store). The open part stays until its own Commit: a
    /// transaction that committed before it can come in between.
    pub fn after_commit(self, commit_lsn: Lsn) -> Self {
        let cursor = self.cursor.max(commit_lsn);
        StoredUpTo {
            cursor,
            open: self.open.filter(|(lsn, _)| *lsn > cursor),
        }
    }

    /// Whether the change (or truncate) at (commit_lsn, commit_idx) is
    /// stored already.
    pub fn holds(&self, commit_lsn: Lsn, commit_idx: u32) -> bool {
        commit_lsn <= self.cursor
            || self
                .open
                .is_some_and(|(lsn, idx)| commit_lsn == lsn && commit_idx <= idx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_whole_transactions_and_the_stored_part_of_the_open_one() {
        let stored = StoredUpTo {
            cursor: Lsn(100),
            open: Some((Lsn(200), 7)),
        };
        assert!(
            stored.holds(Lsn(100), 50),
            "a transaction through the cursor"
        );
        assert!(stored.holds(Lsn(200), 0));
        assert!(stored.holds(Lsn(200), 7));
        assert!(!stored.holds(Lsn(200), 8), "past the stored part");
        assert!(
            !stored.holds(Lsn(150), 0),
            "another transaction after the cursor"
        );
        assert!(!stored.holds(Lsn(300), 0));
        assert!(!StoredUpTo::through(Lsn(100)).holds(Lsn(200), 0));
    }

    #[test]
    fn a_commit_neither_moves_the_cursor_back_nor_drops_a_later_open_part() {
        let stored = StoredUpTo {
            cursor: Lsn(100),
            open: Some((Lsn(200), 7)),
        };
        assert_eq!(
            stored.after_commit(Lsn(50)),
            stored,
            "a transaction stored before, sent again"
        );
        assert_eq!(
            stored.after_commit(Lsn(150)),
            StoredUpTo {
                cursor: Lsn(150),
                open: Some((Lsn(200), 7))
            },
            "a transaction that committed before the open one"
        );
        assert_eq!(
            stored.after_commit(Lsn(200)),
            StoredUpTo::through(Lsn(200)),
            "the open transaction's own Commit"
        );
    }
}
