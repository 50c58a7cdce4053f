//! The channel a source sends its events to the pipeline on, bounded by
//! count and by bytes.
//!
//! Events can carry big rows (TOAST values, webhook bodies): bounded by
//! count alone, 1,024 rows of a megabyte each would wait in memory as a
//! gigabyte. Each event takes its size ([`Change::approx_bytes`]) from a
//! byte budget while it waits, and gives it back when the pipeline takes
//! it. An event bigger than the whole budget waits for the channel to empty
//! and then goes alone, so no row is ever too big to pass.
//!
//! [`Change::approx_bytes`]: weft_core::change::Change::approx_bytes

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use weft_core::change::SourceEvent;

/// How many events may wait in a source's channel.
pub const CAPACITY: usize = 1024;

/// How many bytes of events may wait in a source's channel: about one
/// pipeline batch (`weft_pipeline::BatchLimits`).
pub const MAX_BYTES: usize = 8 * 1024 * 1024;

/// What a non-change event is counted as.
const SMALL_EVENT_BYTES: usize = 64;

/// A channel for at most `capacity` events and `max_bytes` of them.
pub fn channel(capacity: usize, max_bytes: usize) -> (EventSender, EventReceiver) {
    // A semaphore takes at most u32::MAX permits at once.
    let max_bytes = max_bytes.clamp(1, u32::MAX as usize) as u32;
    let budget = Arc::new(Semaphore::new(max_bytes as usize));
    let (slots, receiver) = mpsc::channel(capacity);
    (
        EventSender {
            slots,
            budget: Arc::clone(&budget),
            max_bytes,
        },
        EventReceiver {
            slots: receiver,
            budget,
        },
    )
}

/// The pipeline's end was dropped: nothing sent any more is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the pipeline stopped taking events")]
pub struct Closed;

/// An event and the bytes it holds of the budget, given back when the
/// pipeline takes the event (and the permit drops).
struct Counted {
    event: SourceEvent,
    _bytes: OwnedSemaphorePermit,
}

/// The source's end of the channel. Clones share the same bounds.
#[derive(Clone)]
pub struct EventSender {
    slots: mpsc::Sender<Counted>,
    budget: Arc<Semaphore>,
    max_bytes: u32,
}

impl EventSender {
    /// What `event` takes of the budget: its size, capped at the budget.
    fn bytes_of(&self, event: &SourceEvent) -> u32 {
        let bytes = match event {
            SourceEvent::Change(change) => change.approx_bytes(),
            _ => SMALL_EVENT_BYTES,
        };
        bytes.min(self.max_bytes as usize) as u32
    }

    /// Waits for room for `event`: a slot and its bytes. Cancel-safe: a
    /// dropped wait holds nothing, and the event is not consumed until
    /// [`Reserved::send`].
    pub async fn reserve(&self, event: &SourceEvent) -> Result<Reserved, Closed> {
        let bytes = self.bytes_of(event);
        let held = Arc::clone(&self.budget)
            .acquire_many_owned(bytes)
            .await
            .map_err(|_| Closed)?;
        let slot = self
            .slots
            .clone()
            .reserve_owned()
            .await
            .map_err(|_| Closed)?;
        Ok(Reserved { slot, held })
    }

    /// Room for `event` if there is some now.
    pub fn try_reserve(&self, event: &SourceEvent) -> Result<Option<Reserved>, Closed> {
        if self.slots.is_closed() {
            return Err(Closed);
        }
        let bytes = self.bytes_of(event);
        let Ok(held) = Arc::clone(&self.budget).try_acquire_many_owned(bytes) else {
            return Ok(None);
        };
        match self.slots.clone().try_reserve_owned() {
            Ok(slot) => Ok(Some(Reserved { slot, held })),
            Err(mpsc::error::TrySendError::Full(_)) => Ok(None),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(Closed),
        }
    }

    /// Waits for room for `event`, then sends it. Not cancel-safe: a
    /// dropped call drops the event (see [`Self::reserve`]).
    pub async fn send(&self, event: SourceEvent) -> Result<(), Closed> {
        self.reserve(&event).await?.send(event);
        Ok(())
    }
}

/// Room for one event in the channel, from [`EventSender::reserve`].
pub struct Reserved {
    slot: mpsc::OwnedPermit<Counted>,
    held: OwnedSemaphorePermit,
}

impl Reserved {
    /// Sends `event`, which should be the event the room was reserved for:
    /// its bytes stay taken until the pipeline receives it.
    pub fn send(self, event: SourceEvent) {
        self.slot.send(Counted {
            event,
            _bytes: self.held,
        });
    }
}

/// The pipeline's end of the channel.
pub struct EventReceiver {
    slots: mpsc::Receiver<Counted>,
    budget: Arc<Semaphore>,
}

impl EventReceiver {
    /// The next event; `None` once every sender is gone and the channel is
    /// empty. Cancel-safe.
    pub async fn recv(&mut self) -> Option<SourceEvent> {
        Some(self.slots.recv().await?.event)
    }

    /// The next event if one is waiting.
    pub fn try_recv(&mut self) -> Option<SourceEvent> {
        Some(self.slots.try_recv().ok()?.event)
    }
}

impl Drop for EventReceiver {
    /// Wakes senders waiting for bytes, so they see the channel closed.
    fn drop(&mut self) {
        self.budget.close();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use weft_core::change::{Action, Change, Column, Relation, Row};
    use weft_core::lsn::Lsn;

    /// An insert whose row holds `text_len` characters.
    fn change(text_len: usize) -> SourceEvent {
        let relation = Arc::new(Relation {
            oid: 1,
            schema: "public".into(),
            name: "docs".into(),
            columns: vec![Column {
                name: "body".into(),
                type_oid: 25,
                type_modifier: -1,
                is_identity_key: false,
            }],
            primary_key: Vec::new(),
        });
        let mut row = Row::new();
        row.insert("body".into(), "x".repeat(text_len).into());
        SourceEvent::Change(Change {
            relation,
            action: Action::Insert,
            commit_lsn: Lsn(1),
            commit_idx: 0,
            xid: 1,
            commit_timestamp: chrono::Utc::now(),
            new: Some(row),
            old: None,
            backfill: None,
            webhook: None,
        })
    }

    #[tokio::test]
    async fn big_events_wait_for_bytes_even_with_slots_free() {
        let (sender, mut receiver) = channel(100, 10_000);
        sender.send(change(6_000)).await.unwrap();
        assert!(
            sender.try_reserve(&change(6_000)).unwrap().is_none(),
            "a second 6 kB row does not fit a 10 kB budget"
        );
        assert!(
            sender.try_reserve(&change(100)).unwrap().is_some(),
            "a small one still does"
        );
        let waiting = tokio::spawn({
            let sender = sender.clone();
            async move { sender.send(change(6_000)).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "the send waits for bytes");
        assert!(receiver.recv().await.is_some());
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("taking the first row makes room")
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn an_event_bigger_than_the_budget_goes_alone_once_the_channel_is_empty() {
        let (sender, mut receiver) = channel(100, 1_000);
        sender.send(change(10)).await.unwrap();
        let big = tokio::spawn({
            let sender = sender.clone();
            async move { sender.send(change(50_000)).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!big.is_finished(), "it waits while anything else waits");
        receiver.recv().await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), big)
            .await
            .expect("an empty channel takes it")
            .unwrap()
            .unwrap();
        let SourceEvent::Change(got) = receiver.recv().await.unwrap() else {
            panic!("a change");
        };
        assert_eq!(got.new.unwrap()["body"].as_str().unwrap().len(), 50_000);
        assert!(sender.try_reserve(&change(900)).unwrap().is_some());
    }

    #[tokio::test]
    async fn the_count_still_bounds_small_events() {
        let (sender, mut receiver) = channel(2, 1_000_000);
        sender.send(change(1)).await.unwrap();
        sender.send(change(1)).await.unwrap();
        assert!(sender.try_reserve(&change(1)).unwrap().is_none());
        receiver.try_recv().unwrap();
        assert!(sender.try_reserve(&change(1)).unwrap().is_some());
    }

    #[tokio::test]
    async fn a_budget_past_what_a_semaphore_counts_is_capped_not_wrapped() {
        // Cut to 32 bits, 4 GiB + 1,000 bytes would be a budget of 1,000.
        let (sender, _receiver) = channel(4, (1 << 32) + 1_000);
        sender.send(change(600)).await.unwrap();
        assert!(sender.try_reserve(&change(600)).unwrap().is_some());
    }

    #[tokio::test]
    async fn senders_see_the_pipeline_gone() {
        let (sender, receiver) = channel(4, 1_000);
        sender.send(change(900)).await.unwrap();
        let waiting = tokio::spawn({
            let sender = sender.clone();
            async move { sender.send(change(900)).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(receiver);
        let result = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("a waiting sender wakes")
            .unwrap();
        assert_eq!(result, Err(Closed));
        assert_eq!(sender.try_reserve(&change(1)).err(), Some(Closed));
    }
}
