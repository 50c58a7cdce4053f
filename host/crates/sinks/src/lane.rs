//! A push sink's memory lane: messages go from the pipeline to the sink's
//! delivery worker in memory, and reach the store only when they must.
//!
//! The replication slot is already a durable log: Postgres sends again
//! everything after the LSN weft confirmed. So a message a broker
//! acknowledges within moments needs no copy in the store. The pipeline
//! hands each batch's messages to the lane with the LSN that everything
//! before the batch ends at (`after`). Until a batch's messages are all
//! settled (delivered, dead-lettered or stored), the lane *holds back* the
//! feed at the `after` of its oldest unsettled batch: the pipeline confirms
//! no LSN past it. A lane with nothing unsettled holds nothing back.
//!
//! The worker takes deliveries from the lane in commit order, at most one
//! message per group in flight (as the store hands them out), so order per
//! group holds. A message that fails is tried once more at once; then it
//! *spills*: it is stored, and so is every later message of the lane, until
//! the store holds nothing more of the sink. Then the lane carries messages
//! again. Spilling also starts when the lane holds more than the sink's
//! memory budget (`max_memory_mb`), as when its destination is slower than
//! the feed, and while the sink is paused. So a stuck or paused destination
//! never holds the slot: its messages wait in the store.
//!
//! A lane outlives its worker: a worker that is replaced (a config apply)
//! or restarted (after a failure) finds the lane as it left it. A worker
//! that stops stores what the lane still holds first and closes the lane,
//! so that the pipeline stores the sink's next messages itself. A worker
//! that fails with messages in flight has lost them from memory: it marks
//! the lane lost, and the pipeline restarts its feed from the confirmed
//! LSN, which sends them again (at least once, with the same idempotency
//! keys).

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::futures::Notified;
use tokio::sync::{Notify, watch};

use crate::delivery::DeliveryOutcome;
use weft_core::lsn::Lsn;
use weft_store::{NewMessage, StoredMessage};

/// Attempts a message gets in memory before it spills to the store, where
/// the sink's own retry policy (backoff, `max_retry_count`) takes over.
pub const MEMORY_ATTEMPTS: u32 = 2;

/// Payload bytes above which the pipeline waits for the worker before it
/// sends more ([`Lane::room`]), unless the sink's budget is smaller: a
/// destination slower than the feed slows the feed instead of filling
/// memory. 4 MiB is thousands of messages, several batches of any sink in
/// flight; more only costs memory (a full 128 MiB budget made weft's
/// resident memory 370 MiB in the NATS bench).
pub const HIGH_WATER: usize = 4 << 20;

/// A push sink's memory lane. Cheap to clone; clones share the lane.
#[derive(Clone)]
pub struct Lane {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane")
            .field("holds_back", &self.holds_back())
            .finish_non_exhaustive()
    }
}

struct Inner {
    state: Mutex<State>,
    /// Bumped whenever what the lane holds back moves or the lane is lost:
    /// pipelines watch it to confirm further.
    moved: Arc<watch::Sender<u64>>,
    /// Wakes the sink's delivery worker when messages arrive.
    arrived: Notify,
    /// Wakes senders waiting for room when messages leave.
    drained: Notify,
}

/// Messages the lane handed out, and to whom their settling is owed.
#[derive(Debug)]
pub struct Taken {
    /// The messages, in commit order, at most one per group.
    pub messages: Vec<StoredMessage>,
    /// The send each message came with (index-aligned).
    marks: Vec<u64>,
    /// When each was handed to the lane, in ms since the epoch.
    handed_at: Vec<i64>,
    /// The lane's generation when they were taken.
    generation: u64,
}

/// Messages the worker must store (or dead-letter) before the lane may
/// count them settled: [`Lane::stored`] says it did.
#[derive(Debug, Default)]
pub struct ToStore {
    /// Messages to store, in commit order.
    pub messages: Vec<NewMessage>,
    /// Messages no retry can fix, with the attempts made and the error.
    pub dead: Vec<(NewMessage, u32, String)>,
    /// When each delivered message was handed to the lane (ms since the
    /// epoch), for the delivery latency.
    pub delivered_handed_at: Vec<i64>,
    marks: Vec<u64>,
    generation: u64,
}

impl ToStore {
    /// Whether there is nothing to store.
    pub fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }
}

#[derive(Default)]
struct State {
    /// Messages not handed out, in commit order (a retried one goes back
    /// to the front), with the send they came with.
    queued: VecDeque<Queued>,
    /// Every send not yet settled, oldest first: the LSN everything before
    /// it ends at, and how many of its messages are not settled.
    sends: VecDeque<Send>,
    /// The mark of `sends[0]`; marks count sends from the lane's start.
    first_mark: u64,
    /// Payload bytes queued or in flight.
    bytes: usize,
    /// Groups with a message in flight.
    in_flight_groups: HashSet<String>,
    /// Messages handed out and not settled.
    in_flight: usize,
    /// Storing instead of delivering: see the module doc.
    spilling: bool,
    /// The worker is gone: sends are refused (the pipeline stores them).
    closed: bool,
    /// Messages were lost from memory: the feed must start again.
    lost: bool,
    /// Bumped by [`Lane::reset`]; settlements of an older generation are
    /// ignored.
    generation: u64,
    /// The payload bytes above which the lane spills.
    budget: usize,
    /// The commit LSN of the last transaction the pipeline handed over
    /// whole: see [`Lane::settled_through`].
    through: Option<Lsn>,
}

/// What a lane holds: see [`Lane::depth`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Depth {
    /// Messages waiting for a delivery.
    pub queued: usize,
    /// Messages in deliveries running now.
    pub in_flight: usize,
    /// Their payload bytes.
    pub bytes: usize,
}

/// A message waiting in the lane.
struct Queued {
    /// The send it came with.
    mark: u64,
    /// When it came, in ms since the epoch.
    handed_at: i64,
    message: StoredMessage,
}

struct Send {
    after: Lsn,
    outstanding: usize,
}

impl Lane {
    /// An empty lane that spills above `budget` payload bytes and bumps
    /// `moved` whenever what it holds back moves.
    pub fn new(budget: usize, moved: Arc<watch::Sender<u64>>) -> Lane {
        Lane {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    budget: budget.max(1),
                    ..State::default()
                }),
                moved,
                arrived: Notify::new(),
                drained: Notify::new(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The LSN the feed may be confirmed up to at most for this lane's
    /// sake: the `after` of its oldest send with unsettled messages, or
    /// `None` when every message it was sent is settled.
    pub fn holds_back(&self) -> Option<Lsn> {
        self.state().sends.front().map(|send| send.after)
    }

    /// Whether messages were lost from memory (a worker failed with
    /// deliveries in flight): the feed must start again from its confirmed
    /// LSN.
    pub fn is_lost(&self) -> bool {
        self.state().lost
    }

    /// Hands `messages` (commit order) to the lane; until they are
    /// settled, the lane holds the feed back at `after`, where every change
    /// before them ends. `through` is the commit LSN of the transaction
    /// they end, if they end one. Refused, with the messages given back,
    /// once the lane is closed: the caller stores them.
    pub fn send(
        &self,
        messages: Vec<NewMessage>,
        after: Lsn,
        through: Option<Lsn>,
    ) -> Result<(), Vec<NewMessage>> {
        let mut state = self.state();
        if state.closed {
            return Err(messages);
        }
        // The latest, not the greatest: after a reset the feed starts again
        // from an earlier position.
        if through.is_some() {
            state.through = through;
        }
        if messages.is_empty() {
            return Ok(());
        }
        let mark = state.first_mark + state.sends.len() as u64;
        let count = messages.len();
        let handed_at = weft_store::now_ms();
        for message in messages {
            let message = StoredMessage::in_memory(message);
            state.bytes += message.size_bytes;
            state.queued.push_back(Queued {
                mark,
                handed_at,
                message,
            });
        }
        state.sends.push_back(Send {
            after,
            outstanding: count,
        });
        if state.bytes > state.budget {
            state.spilling = true;
        }
        drop(state);
        self.inner.arrived.notify_one();
        Ok(())
    }

    /// Waits until the lane holds less than its high water
    /// ([`HIGH_WATER`], or the budget if smaller), it spills, or it is
    /// closed. After `patience` without that, the lane spills (its
    /// destination is stuck or far too slow, and the feed must go on) and
    /// this returns `false`.
    pub async fn room(&self, patience: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let drained = self.inner.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            {
                let state = self.state();
                if state.closed || state.spilling || state.bytes < state.budget.min(HIGH_WATER) {
                    return true;
                }
            }
            if tokio::time::timeout_at(deadline, drained).await.is_err() {
                self.spill();
                self.inner.arrived.notify_one();
                return false;
            }
        }
    }

    /// Completes once every message the lane was sent is settled
    /// (delivered, dead-lettered or stored), or the lane is lost (then the
    /// feed starts again, and [`Lane::reset`] empties it). Messages stored
    /// for the sink from elsewhere wait for it: any message still in the
    /// lane is older than they are, and the worker delivers the lane and
    /// the store side by side, so a group's newer message stored now could
    /// overtake its older one still in memory.
    pub async fn emptied(&self) {
        loop {
            let drained = self.inner.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            {
                let state = self.state();
                if state.sends.is_empty() || state.lost {
                    return;
                }
            }
            drained.await;
        }
    }

    /// Completes once messages arrive after it is enabled (or arrived
    /// since the last wait): the worker's wake-up.
    pub fn arrivals(&self) -> Notified<'_> {
        self.inner.arrived.notified()
    }

    /// Forgets every leading send that is settled, and tells the
    /// pipelines when that moved what the lane holds back.
    fn advance(&self, state: &mut State) {
        let mut moved = false;
        while state
            .sends
            .front()
            .is_some_and(|send| send.outstanding == 0)
        {
            state.sends.pop_front();
            state.first_mark += 1;
            moved = true;
        }
        if moved {
            self.inner.moved.send_modify(|moves| *moves += 1);
        }
        self.inner.drained.notify_waiters();
    }

    /// Counts the messages of `marks` settled.
    fn settle_marks(&self, state: &mut State, marks: &[u64]) {
        for &mark in marks {
            if let Some(index) = mark.checked_sub(state.first_mark)
                && let Some(send) = state.sends.get_mut(index as usize)
            {
                send.outstanding = send.outstanding.saturating_sub(1);
            }
        }
        self.advance(state);
    }

    /// Drops everything the lane holds and starts a new generation: the
    /// pipeline is starting its feed again, and Postgres sends everything
    /// after the confirmed LSN once more. Settlements of deliveries still
    /// running are ignored.
    pub fn reset(&self) {
        let mut state = self.state();
        state.queued.clear();
        state.first_mark += state.sends.len() as u64;
        state.sends.clear();
        state.in_flight_groups.clear();
        state.in_flight = 0;
        state.bytes = 0;
        // `spilling` stays: what the lane spilled may still be in the
        // store, and must be delivered before the lane carries the group's
        // next messages.
        state.lost = false;
        state.through = None;
        state.generation += 1;
        drop(state);
        self.inner.drained.notify_waiters();
    }

    /// Attaches the lane to a starting worker: the lane takes sends again,
    /// and what a failed worker had in flight is not waited for (the lane
    /// is lost, see [`Lane::is_lost`]).
    pub fn attach(&self) {
        let mut state = self.state();
        state.closed = false;
        if state.in_flight > 0 {
            state.lost = true;
            drop(state);
            self.inner.moved.send_modify(|moves| *moves += 1);
            self.inner.drained.notify_waiters();
        }
    }

    /// Up to `limit` queued messages holding at most `room` payload bytes
    /// (the first one regardless), in commit order, none of a group with a
    /// message in flight; nothing while the lane spills.
    pub fn take(&self, limit: usize, room: usize) -> Taken {
        let mut state = self.state();
        let generation = state.generation;
        let mut taken = Taken {
            messages: Vec::new(),
            marks: Vec::new(),
            handed_at: Vec::new(),
            generation,
        };
        if state.spilling || state.queued.is_empty() {
            return taken;
        }
        // Look no further than a few batches ahead: messages of groups in
        // flight are skipped, and a long run of them must not make every
        // take walk the whole queue.
        let window = limit.saturating_mul(4).min(state.queued.len());
        let mut skipped = Vec::new();
        let mut bytes = 0usize;
        let state = &mut *state;
        for _ in 0..window {
            if taken.messages.len() >= limit {
                break;
            }
            let Some(queued) = state.queued.pop_front() else {
                break;
            };
            let fits = taken.messages.is_empty() || bytes + queued.message.size_bytes <= room;
            if !fits {
                state.queued.push_front(queued);
                break;
            }
            if state.in_flight_groups.contains(&queued.message.group_id) {
                skipped.push(queued);
                continue;
            }
            state
                .in_flight_groups
                .insert(queued.message.group_id.clone());
            bytes += queued.message.size_bytes;
            taken.marks.push(queued.mark);
            taken.handed_at.push(queued.handed_at);
            taken.messages.push(queued.message);
        }
        for entry in skipped.into_iter().rev() {
            state.queued.push_front(entry);
        }
        state.in_flight += taken.messages.len();
        taken
    }

    /// Settles a delivery of `taken` by its `outcomes`: delivered messages
    /// are done; one that failed with retries left in memory goes back to
    /// the front of the queue; the rest are returned to be stored (and the
    /// lane spills) or dead-lettered (a permanent failure).
    pub fn settle(&self, taken: Taken, outcomes: Vec<DeliveryOutcome>) -> ToStore {
        let mut state = self.state();
        let mut to_store = ToStore {
            generation: taken.generation,
            ..ToStore::default()
        };
        if taken.generation != state.generation {
            return to_store;
        }
        let mut done = Vec::new();
        let mut retry = Vec::new();
        let count = taken.messages.len();
        let outcomes = outcomes
            .into_iter()
            .chain(std::iter::repeat(DeliveryOutcome::retry(
                "the destination reported no outcome for this message",
            )));
        let taken_messages = taken
            .messages
            .into_iter()
            .zip(taken.marks)
            .zip(taken.handed_at);
        for (((mut message, mark), handed_at), outcome) in taken_messages.zip(outcomes) {
            state.in_flight_groups.remove(&message.group_id);
            match outcome {
                DeliveryOutcome::Delivered => {
                    state.bytes = state.bytes.saturating_sub(message.size_bytes);
                    done.push(mark);
                    to_store.delivered_handed_at.push(handed_at);
                }
                DeliveryOutcome::Failed {
                    retriable: true, ..
                } if message.attempt < MEMORY_ATTEMPTS && !state.spilling => {
                    message.attempt += 1;
                    retry.push(Queued {
                        mark,
                        handed_at,
                        message,
                    });
                }
                DeliveryOutcome::Failed { error, retriable } => {
                    state.bytes = state.bytes.saturating_sub(message.size_bytes);
                    let attempts = message.attempt;
                    to_store.marks.push(mark);
                    if retriable {
                        state.spilling = true;
                        to_store.messages.push(NewMessage::from(message));
                    } else {
                        to_store
                            .dead
                            .push((NewMessage::from(message), attempts, error));
                    }
                }
            }
        }
        state.in_flight = state.in_flight.saturating_sub(count);
        // Back to the front in commit order: each is the oldest of its
        // group, and nothing of its group was handed out meanwhile.
        for entry in retry.into_iter().rev() {
            state.queued.push_front(entry);
        }
        self.settle_marks(&mut state, &done);
        to_store
    }

    /// What the lane must store while it spills: every queued message
    /// whose group has nothing in flight (the rest follow once their
    /// group's delivery settles, keeping each group's order in the store).
    pub fn to_spill(&self) -> ToStore {
        let mut state = self.state();
        let mut to_store = ToStore {
            generation: state.generation,
            ..ToStore::default()
        };
        if !state.spilling && !state.closed {
            return to_store;
        }
        let state = &mut *state;
        let mut kept = VecDeque::new();
        for queued in state.queued.drain(..) {
            if state.in_flight_groups.contains(&queued.message.group_id) {
                kept.push_back(queued);
            } else {
                state.bytes = state.bytes.saturating_sub(queued.message.size_bytes);
                to_store.marks.push(queued.mark);
                to_store.messages.push(NewMessage::from(queued.message));
            }
        }
        state.queued = kept;
        to_store
    }

    /// Records that `to_store`'s messages are durable in the store (or
    /// dead letters).
    pub fn stored(&self, to_store: &ToStore) {
        let mut state = self.state();
        if to_store.generation != state.generation {
            return;
        }
        self.settle_marks(&mut state, &to_store.marks);
    }

    /// Carries messages in memory again, unless it is over its budget or
    /// closed. Call it only when the store holds nothing of the sink and
    /// no delivery from the store runs: then every message the lane holds
    /// is newer than all the store held, and none of a group waits there.
    pub fn resume(&self) {
        let mut state = self.state();
        if state.bytes <= state.budget && !state.closed {
            state.spilling = false;
        }
    }

    /// Spills from now on, until the store is drained (the sink is
    /// paused: its messages wait in the store, not in memory, so that the
    /// slot is not held back for as long as the pause lasts).
    pub fn spill(&self) {
        self.state().spilling = true;
        self.inner.drained.notify_waiters();
    }

    /// Spills above `budget` payload bytes from now on (the sink's
    /// `max_memory_mb` changed).
    pub fn set_budget(&self, budget: usize) {
        self.state().budget = budget.max(1);
    }

    /// Whether the lane spills.
    pub fn is_spilling(&self) -> bool {
        self.state().spilling
    }

    /// Whether a delivery from memory is running.
    pub fn has_in_flight(&self) -> bool {
        self.state().in_flight > 0
    }

    /// Closes the lane as its worker stops: sends are refused from now on
    /// (the pipeline stores them), and [`Lane::to_spill`] gives everything
    /// it holds. Once a worker attaches again, the lane keeps spilling
    /// until the store is drained: what was stored meanwhile goes first.
    pub fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        state.spilling = true;
    }

    /// Marks the lane lost (its worker failed with messages in memory) and
    /// wakes the pipeline, which starts its feed again.
    pub fn lose(&self) {
        self.state().lost = true;
        self.inner.moved.send_modify(|moves| *moves += 1);
        self.inner.drained.notify_waiters();
    }

    /// The commit LSN through which every change the pipeline handed over
    /// is settled (delivered, dead-lettered or stored), when nothing is
    /// unsettled: the sink's cursor may move there. weft records it when
    /// it stops, once the workers have finished, so that a restart does
    /// not deliver again what a clean stop had delivered: the slot's last
    /// confirmation may not have reached Postgres.
    pub fn settled_through(&self) -> Option<Lsn> {
        let state = self.state();
        let settled = state.sends.is_empty() && state.in_flight == 0 && state.queued.is_empty();
        state.through.filter(|_| settled && !state.lost)
    }

    /// Forgets where the pipeline's last transaction ended: the sink left
    /// that feed, and its cursor will be a position of another stream.
    pub fn forget_through(&self) {
        self.state().through = None;
    }

    /// What the lane holds now.
    pub fn depth(&self) -> Depth {
        let state = self.state();
        Depth {
            queued: state.queued.len(),
            in_flight: state.in_flight,
            bytes: state.bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_store::StoredPayload;

    fn message(lsn: u64, group: &str) -> NewMessage {
        NewMessage {
            commit_lsn: Lsn(lsn),
            commit_idx: 0,
            group_id: group.to_string(),
            idempotency_key: format!("k{lsn}"),
            payload: StoredPayload::Json(format!("{{\"lsn\":{lsn}}}")),
            route: None,
        }
    }

    fn lane(budget: usize) -> (Lane, watch::Receiver<u64>) {
        let (moved, watching) = watch::channel(0);
        (Lane::new(budget, Arc::new(moved)), watching)
    }

    fn lsns(taken: &Taken) -> Vec<u64> {
        taken.messages.iter().map(|m| m.commit_lsn.0).collect()
    }

    #[test]
    fn the_lane_holds_the_feed_back_at_its_oldest_unsettled_send() {
        let (lane, _moved) = lane(1 << 20);
        assert_eq!(lane.holds_back(), None);
        lane.send(vec![message(10, "a")], Lsn(5), None).unwrap();
        lane.send(vec![message(20, "b")], Lsn(11), None).unwrap();
        let first = lane.take(1, usize::MAX);
        let second = lane.take(1, usize::MAX);
        assert_eq!((lsns(&first), lsns(&second)), (vec![10], vec![20]));
        lane.settle(second, vec![DeliveryOutcome::Delivered]);
        assert_eq!(
            lane.holds_back(),
            Some(Lsn(5)),
            "the older send is not settled"
        );
        lane.settle(first, vec![DeliveryOutcome::Delivered]);
        assert_eq!(lane.holds_back(), None);
        // A send without messages holds nothing back.
        lane.send(vec![], Lsn(30), None).unwrap();
        assert_eq!(lane.holds_back(), None);
    }

    #[test]
    fn one_message_per_group_is_in_flight_and_order_holds_after_a_retry() {
        let (lane, _moved) = lane(1 << 20);
        lane.send(
            vec![message(1, "a"), message(2, "a"), message(3, "b")],
            Lsn(0),
            None,
        )
        .unwrap();
        let taken = lane.take(10, usize::MAX);
        assert_eq!(lsns(&taken), vec![1, 3], "a's second waits for its first");
        let to_store = lane.settle(
            taken,
            vec![DeliveryOutcome::retry("down"), DeliveryOutcome::Delivered],
        );
        assert!(to_store.is_empty(), "a first failure is retried in memory");
        let retried = lane.take(10, usize::MAX);
        assert_eq!(lsns(&retried), vec![1]);
        assert_eq!(retried.messages[0].attempt, 2);
        lane.settle(retried, vec![DeliveryOutcome::Delivered]);
        assert_eq!(lsns(&lane.take(10, usize::MAX)), vec![2]);
    }

    #[test]
    fn a_message_out_of_memory_attempts_spills_the_lane_in_group_order() {
        let (lane, _moved) = lane(1 << 20);
        lane.send(
            vec![message(1, "a"), message(2, "a"), message(3, "b")],
            Lsn(0),
            None,
        )
        .unwrap();
        let taken = lane.take(1, usize::MAX);
        lane.settle(taken, vec![DeliveryOutcome::retry("down")]);
        let taken = lane.take(1, usize::MAX);
        let to_store = lane.settle(taken, vec![DeliveryOutcome::retry("still down")]);
        assert_eq!(to_store.messages.len(), 1);
        assert!(lane.is_spilling());
        assert!(
            lane.take(10, usize::MAX).messages.is_empty(),
            "no deliveries while spilling"
        );
        lane.stored(&to_store);
        let rest = lane.to_spill();
        let spilled: Vec<u64> = rest.messages.iter().map(|m| m.commit_lsn.0).collect();
        assert_eq!(spilled, vec![2, 3]);
        assert_eq!(lane.holds_back(), Some(Lsn(0)));
        lane.stored(&rest);
        assert_eq!(lane.holds_back(), None, "stored counts as settled");
        lane.resume();
        assert!(!lane.is_spilling());
    }

    #[test]
    fn a_permanent_failure_is_dead_lettered_without_a_retry() {
        let (lane, _moved) = lane(1 << 20);
        lane.send(vec![message(1, "a")], Lsn(0), None).unwrap();
        let taken = lane.take(1, usize::MAX);
        let to_store = lane.settle(taken, vec![DeliveryOutcome::permanent("too big")]);
        assert_eq!(to_store.dead.len(), 1);
        assert_eq!(to_store.dead[0].1, 1);
        assert!(!lane.is_spilling(), "a dead letter does not spill the lane");
        lane.stored(&to_store);
        assert_eq!(lane.holds_back(), None);
    }

    #[test]
    fn a_lane_over_its_budget_spills_and_a_closed_lane_refuses_sends() {
        let (lane, _moved) = lane(10);
        lane.send(vec![message(1, "a"), message(2, "b")], Lsn(0), None)
            .unwrap();
        assert!(lane.is_spilling());
        let to_store = lane.to_spill();
        assert_eq!(to_store.messages.len(), 2);
        lane.stored(&to_store);
        lane.close();
        let refused = lane.send(vec![message(5, "a")], Lsn(4), None).unwrap_err();
        assert_eq!(refused.len(), 1);
        // Reopened, it spills until the store, which took what was
        // refused, is drained.
        lane.attach();
        lane.send(vec![message(6, "a")], Lsn(5), None).unwrap();
        assert!(lane.take(5, usize::MAX).messages.is_empty());
        assert_eq!(lane.to_spill().messages.len(), 1);
    }

    #[test]
    fn a_reset_forgets_what_the_lane_held_and_ignores_old_settlements() {
        let (lane, _moved) = lane(1 << 20);
        lane.send(vec![message(1, "a"), message(2, "b")], Lsn(0), None)
            .unwrap();
        let taken = lane.take(1, usize::MAX);
        lane.reset();
        lane.settle(taken, vec![DeliveryOutcome::Delivered]);
        assert_eq!((lane.depth().queued, lane.depth().bytes), (0, 0));
        lane.send(vec![message(1, "a")], Lsn(0), None).unwrap();
        assert_eq!(lsns(&lane.take(5, usize::MAX)), vec![1]);
    }

    #[test]
    fn the_settled_position_is_where_the_last_whole_transaction_ended() {
        let (lane, _moved) = lane(1 << 20);
        lane.send(vec![message(1, "a")], Lsn(0), Some(Lsn(1)))
            .unwrap();
        // A chunk of a transaction not committed yet moves nothing.
        lane.send(vec![message(5, "b")], Lsn(2), None).unwrap();
        assert_eq!(lane.settled_through(), None, "two sends unsettled");
        let taken = lane.take(10, usize::MAX);
        lane.settle(
            taken,
            vec![DeliveryOutcome::Delivered, DeliveryOutcome::Delivered],
        );
        assert_eq!(lane.settled_through(), Some(Lsn(1)));
        lane.send(vec![], Lsn(6), Some(Lsn(5))).unwrap();
        assert_eq!(lane.settled_through(), Some(Lsn(5)));
        // Sent again from an earlier position after a reset: nothing is
        // settled until the feed hands a transaction over again.
        lane.reset();
        assert_eq!(lane.settled_through(), None);
        lane.send(vec![message(1, "a")], Lsn(0), Some(Lsn(1)))
            .unwrap();
        lane.forget_through();
        let taken = lane.take(10, usize::MAX);
        lane.settle(taken, vec![DeliveryOutcome::Delivered]);
        assert_eq!(lane.settled_through(), None, "the sink left the feed");
    }

    #[test]
    fn a_worker_that_starts_while_messages_were_in_flight_loses_the_lane() {
        let (lane, mut moved) = lane(1 << 20);
        lane.send(vec![message(1, "a")], Lsn(0), None).unwrap();
        let _taken = lane.take(1, usize::MAX);
        moved.mark_unchanged();
        lane.attach();
        assert!(lane.is_lost());
        assert!(moved.has_changed().unwrap(), "the pipeline is woken");
    }

    #[tokio::test]
    async fn a_full_lane_makes_the_sender_wait_until_the_worker_drains_it_or_spills() {
        let (small, _moved) = lane(20);
        small
            .send(vec![message(1, "a"), message(2, "b")], Lsn(0), None)
            .unwrap();
        // Over its budget: the send itself made it spill.
        assert!(small.room(std::time::Duration::from_millis(10)).await);
        let (lane, _moved) = lane(64 << 20);
        let big = |lsn| NewMessage {
            payload: StoredPayload::Json("x".repeat(HIGH_WATER)),
            ..message(lsn, "a")
        };
        lane.send(vec![big(1)], Lsn(0), None).unwrap();
        let draining = lane.clone();
        let worker = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            let taken = draining.take(1, usize::MAX);
            draining.settle(taken, vec![DeliveryOutcome::Delivered]);
        });
        assert!(
            lane.room(std::time::Duration::from_secs(10)).await,
            "room once delivered"
        );
        worker.await.unwrap();
        lane.send(vec![big(2)], Lsn(1), None).unwrap();
        assert!(
            !lane.room(std::time::Duration::from_millis(50)).await,
            "nobody drains it"
        );
        assert!(lane.is_spilling(), "a lane full for too long spills");
    }

    #[tokio::test]
    async fn emptied_waits_until_everything_sent_is_settled() {
        let (lane, _moved) = lane(1 << 20);
        lane.emptied().await;
        lane.send(vec![message(1, "a"), message(2, "b")], Lsn(0), None)
            .unwrap();
        let taken = lane.take(1, usize::MAX);
        let waiting = tokio::spawn({
            let lane = lane.clone();
            async move { lane.emptied().await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "one in flight, one queued");
        lane.settle(taken, vec![DeliveryOutcome::Delivered]);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "one still queued");
        lane.spill();
        let to_store = lane.to_spill();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "taken for the store, not stored yet"
        );
        lane.stored(&to_store);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("emptied once the last message is stored")
            .unwrap();
    }
}
