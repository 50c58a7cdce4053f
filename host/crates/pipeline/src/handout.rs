//! Hands a batch's changes to the sinks that take them: each sink gets its
//! own changes to turn into messages, a copy while a later sink still takes
//! the change, and the change itself at the last one. With one sink (the
//! common case, and every backfill chunk) no row is copied.

use weft_core::change::Change;

/// The batch's changes, as the sinks still need them.
enum Changes {
    /// One sink: it gets the batch's own `Vec`, its other changes removed
    /// in place (a backfill chunk's 10,000 changes are not moved twice).
    One(Vec<Change>),
    /// Several sinks: a change is taken out at its last taker's turn.
    Many(Vec<Option<Change>>),
}

/// A batch's changes, given out sink by sink in a fixed order.
pub(super) struct Handout {
    changes: Changes,
    sinks: usize,
    /// `takes[change * sinks + sink]`: whether the sink takes the change.
    takes: Vec<bool>,
}

impl Handout {
    /// Prepares `changes` for sinks `0..sinks`, where `takes(sink, change)`
    /// says whether a sink takes a change.
    pub(super) fn new(
        changes: Vec<Change>,
        sinks: usize,
        takes: impl Fn(usize, &Change) -> bool,
    ) -> Handout {
        let mut matrix = Vec::with_capacity(changes.len() * sinks);
        for change in &changes {
            matrix.extend((0..sinks).map(|sink| takes(sink, change)));
        }
        let changes = if sinks == 1 {
            Changes::One(changes)
        } else {
            Changes::Many(changes.into_iter().map(Some).collect())
        };
        Handout {
            changes,
            sinks,
            takes: matrix,
        }
    }

    /// The changes sink `sink` takes, in batch order. Sinks must be served
    /// in increasing order: a change is gone after its last taker's turn.
    pub(super) fn serve(&mut self, sink: usize) -> Vec<Change> {
        let changes = match &mut self.changes {
            Changes::One(changes) => {
                let mut changes = std::mem::take(changes);
                let mut takes = self.takes.iter();
                changes.retain(|_| takes.next().is_some_and(|&takes| takes));
                return changes;
            }
            Changes::Many(changes) => changes,
        };
        let mut served = Vec::with_capacity(changes.len());
        for (slot, takes) in changes.iter_mut().zip(self.takes.chunks(self.sinks.max(1))) {
            if !takes[sink] {
                continue;
            }
            if takes[sink + 1..].contains(&true) {
                served.extend(slot.clone());
            } else {
                served.extend(slot.take());
            }
        }
        served
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use weft_core::change::{Action, Relation};
    use weft_core::lsn::Lsn;

    fn change(commit_idx: u32) -> Change {
        Change {
            relation: Arc::new(Relation {
                oid: 1,
                schema: "public".into(),
                name: "t".into(),
                columns: Vec::new(),
                primary_key: Vec::new(),
            }),
            action: Action::Insert,
            commit_lsn: Lsn(1),
            commit_idx,
            xid: 1,
            commit_timestamp: chrono::Utc::now(),
            new: None,
            old: None,
            backfill: None,
            webhook: None,
        }
    }

    fn indexes(changes: &[Change]) -> Vec<u32> {
        changes.iter().map(|change| change.commit_idx).collect()
    }

    #[test]
    fn every_sink_gets_exactly_the_changes_it_takes_in_order() {
        // Sink 0 takes even positions, sink 1 everything from 2, sink 2 none.
        let takes = |sink: usize, change: &Change| match sink {
            0 => change.commit_idx.is_multiple_of(2),
            1 => change.commit_idx >= 2,
            _ => false,
        };
        let mut handout = Handout::new((0..6).map(change).collect(), 3, takes);
        assert_eq!(indexes(&handout.serve(0)), vec![0, 2, 4]);
        assert_eq!(indexes(&handout.serve(1)), vec![2, 3, 4, 5]);
        assert!(handout.serve(2).is_empty());
    }

    #[test]
    fn one_sink_gets_the_batch_itself_without_the_changes_it_does_not_take() {
        let mut handout = Handout::new((0..5).map(change).collect(), 1, |_, change| {
            change.commit_idx != 3
        });
        assert_eq!(indexes(&handout.serve(0)), vec![0, 1, 2, 4]);
    }

    #[test]
    fn the_last_taker_gets_the_change_itself_and_nothing_is_left() {
        let mut handout = Handout::new((0..3).map(change).collect(), 2, |_, _| true);
        assert_eq!(indexes(&handout.serve(0)), vec![0, 1, 2]);
        let Changes::Many(changes) = &handout.changes else {
            panic!("two sinks share the batch");
        };
        assert!(changes.iter().all(Option::is_some), "copies first");
        assert_eq!(indexes(&handout.serve(1)), vec![0, 1, 2]);
        let Changes::Many(changes) = &handout.changes else {
            panic!("two sinks share the batch");
        };
        assert!(changes.iter().all(Option::is_none), "then moved");
    }
}
