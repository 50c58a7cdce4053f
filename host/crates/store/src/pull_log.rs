//! A pull sink's segments read in place: receive and ack cost a little per
//! batch instead of statements per message.
//!
//! A sink a pull consumer reads ([`Store::read_in_place`]) has every batch
//! stored as segments (see [`super::segments`]), whatever its size, and its
//! segments are never moved into `pull_messages`. Instead each sink keeps a
//! *window* in memory: its first segments, decoded, with each member's
//! delivery state. Receive leases members there; ack settles them and
//! records it in the segment's `settled` bitmap, one statement per segment
//! an ack touches, and deletes segments once all their members, and all
//! of the segments before them, are settled.
//!
//! Leases live in memory only. After a restart every member not settled is
//! visible again (its lease and delivery count are gone), as if its ack
//! wait had run out: at least once, with the same idempotency key.
//!
//! Order per group: a group's members are kept in a queue, and only its
//! first unsettled member can be handed out. The window is always a prefix
//! of the sink's segments, and a sink's messages are stored in commit
//! order per group, so no member outside the window can come before one in
//! it. `pull_messages` rows of the sink (replayed dead letters, or rows a
//! weft before this one stored) come before its segments: a group with
//! such a row hands out none of its members here until the row is gone.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::Transaction;

use super::codec::{MessageColumns, StoredPayload, payload_columns};
use super::heads::AckId;
use super::pull::Delivered;
use super::{StoreError, segments};

/// The most bytes of waiting members a sink's window holds beyond its
/// first segment (members handed out keep no payload in memory): what a
/// receive may look through for members of groups not in flight.
/// A few segments of a backfill's chunks; more only costs memory while
/// one hot group holds its later members back.
const WINDOW_BYTES: usize = 8 << 20;

/// Every sink's window, and which sinks are read in place.
#[derive(Default)]
pub(super) struct Logs {
    in_place: Mutex<HashSet<String>>,
    windows: Mutex<HashMap<String, Window>>,
}

impl Logs {
    /// Whether `sink`'s batches are stored as segments whatever their size.
    pub(super) fn reads_in_place(&self, sink: &str) -> bool {
        lock(&self.in_place).contains(sink)
    }

    /// Marks `sink` as read in place.
    pub(super) fn read_in_place(&self, sink: &str) {
        lock(&self.in_place).insert(sink.to_string());
    }

    /// The windows. Callers hold the store's connection first: the one
    /// lock order there is.
    pub(super) fn windows(&self) -> MutexGuard<'_, HashMap<String, Window>> {
        lock(&self.windows)
    }

    /// Messages of `sink` handed out from its window whose lease runs
    /// past `now`.
    pub(super) fn in_flight(&self, sink: &str, now: i64) -> u64 {
        self.windows()
            .get(sink)
            .map_or(0, |window| window.in_flight(now))
    }

    /// The earliest end of a lease on `sink`'s window running at `at`.
    pub(super) fn next_expiry(&self, sink: &str, at: i64) -> Option<i64> {
        self.windows()
            .get(sink)
            .and_then(|window| window.next_expiry(at))
    }

    /// Drops what memory holds of `sink` (it was removed, or a write of
    /// its state failed): the next receive reads its segments afresh.
    pub(super) fn forget(&self, sink: &str) {
        self.windows().remove(sink);
    }
}

fn lock<T>(shared: &Mutex<T>) -> MutexGuard<'_, T> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Where a member is: its segment's id and its index there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    segment: i64,
    member: u32,
}

/// A member's delivery state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Never handed out, or nacked.
    Waiting,
    /// Handed out under `ack_id`, invisible until `until`.
    Leased { ack_id: AckId, until: i64 },
    /// Acked or dead-lettered.
    Settled,
}

/// One message of a segment in the window.
struct Member {
    commit_lsn: i64,
    commit_idx: u32,
    group: Arc<str>,
    idempotency_key: Box<str>,
    /// `None` once handed out: memory holds the payloads of members that
    /// wait, and one that must go out again reads its segment back
    /// ([`Window::refill`]). A consumer that leaves thousands of big
    /// messages unacked must not keep them all in memory.
    payload: Option<StoredPayload>,
    /// The member's size as [`MessageColumns::approx_bytes`] counts it.
    bytes: usize,
    route: Option<Box<str>>,
    state: State,
    /// Times handed out since the window was loaded.
    deliveries: u32,
    first_delivered_at: Option<i64>,
    last_delivered_at: Option<i64>,
}

impl Member {
    fn visible(&self, now: i64) -> bool {
        match self.state {
            State::Waiting => true,
            State::Leased { until, .. } => until <= now,
            State::Settled => false,
        }
    }
}

struct Segment {
    id: i64,
    inserted_at: i64,
    members: Vec<Member>,
    /// The `settled` bitmap as it is to be stored.
    settled: Vec<u8>,
    unsettled: usize,
    /// The bytes of the members whose payload is in memory.
    bytes: usize,
}

impl Segment {
    /// Takes member `member`'s payload out of memory, if it is there.
    fn take_payload(&mut self, member: usize) -> Option<StoredPayload> {
        let member = &mut self.members[member];
        let payload = member.payload.take()?;
        self.bytes -= member.bytes;
        Some(payload)
    }
}

/// What memory holds of one sink read in place.
#[derive(Default)]
pub(super) struct Window {
    /// Its first segments, in the order they were stored.
    segments: VecDeque<Segment>,
    /// The id of the last segment loaded: the next load reads after it.
    loaded_to: i64,
    /// Each group's unsettled members, in commit order.
    groups: HashMap<Arc<str>, VecDeque<Place>>,
    /// Members handed out under each ack id still valid.
    leases: HashMap<AckId, Place>,
}

/// A member that receive found at its `max_deliver`, to be dead-lettered.
pub(super) struct Exhausted {
    pub(super) commit_lsn: i64,
    pub(super) commit_idx: u32,
    pub(super) group_id: String,
    pub(super) idempotency_key: String,
    pub(super) payload: StoredPayload,
    pub(super) route: Option<String>,
    pub(super) deliveries: u32,
    pub(super) first_delivered_at: Option<i64>,
    pub(super) last_delivered_at: Option<i64>,
}

impl Exhausted {
    /// Its columns, as a dead letter stores them.
    pub(super) fn columns(&self) -> MessageColumns<'_> {
        use std::borrow::Cow::Borrowed;
        let payload = payload_columns(&self.payload);
        MessageColumns {
            commit_lsn: self.commit_lsn,
            commit_idx: self.commit_idx,
            group_id: Borrowed(&self.group_id),
            idempotency_key: Borrowed(&self.idempotency_key),
            payload: Borrowed(payload.json),
            payload_bytes: payload.bytes.map(Borrowed),
            content_type: payload.content_type.map(Borrowed),
            route: self.route.as_deref().map(Borrowed),
        }
    }
}

/// What one receive asks of a window.
pub(super) struct Ask<'a> {
    pub(super) now: i64,
    pub(super) until: i64,
    pub(super) room: usize,
    pub(super) max_deliver: Option<u32>,
    /// Groups with `pull_messages` rows: they go first.
    pub(super) blocked: &'a HashSet<String>,
}

impl Window {
    /// Leases up to `ask.room` visible members in commit order, at most one
    /// per group, loading further segments while too few are found and the
    /// window has room. Members at their `max_deliver` are settled and
    /// returned as exhausted instead (their group's next member may go).
    /// Call [`Window::persist`] with the same transaction afterwards.
    pub(super) fn lease(
        &mut self,
        tx: &Transaction<'_>,
        sink: &str,
        ask: &Ask<'_>,
        delivered: &mut Vec<Delivered>,
        exhausted: &mut Vec<Exhausted>,
        dirty: &mut HashSet<i64>,
    ) -> Result<(), StoreError> {
        let mut from = 0;
        loop {
            for index in from..self.segments.len() {
                if delivered.len() >= ask.room {
                    return Ok(());
                }
                self.lease_in(tx, sink, index, ask, delivered, exhausted, dirty)?;
            }
            // Each member is looked at once per receive, even when a lease
            // that ends at once leaves it visible: only the segments loaded
            // now are walked next.
            if delivered.len() >= ask.room {
                return Ok(());
            }
            from = self.segments.len();
            if !self.load_next(tx, sink)? {
                return Ok(());
            }
        }
    }

    /// [`Window::lease`] within the segment at `index`.
    #[allow(clippy::too_many_arguments)]
    fn lease_in(
        &mut self,
        tx: &Transaction<'_>,
        sink: &str,
        index: usize,
        ask: &Ask<'_>,
        delivered: &mut Vec<Delivered>,
        exhausted: &mut Vec<Exhausted>,
        dirty: &mut HashSet<i64>,
    ) -> Result<(), StoreError> {
        let segment_id = self.segments[index].id;
        for member_index in 0..self.segments[index].members.len() {
            if delivered.len() >= ask.room {
                return Ok(());
            }
            let place = Place {
                segment: segment_id,
                member: member_index as u32,
            };
            let member = &self.segments[index].members[member_index];
            if !member.visible(ask.now)
                || self.groups.get(&member.group).and_then(|q| q.front()) != Some(&place)
                || ask.blocked.contains(&*member.group)
            {
                continue;
            }
            if let State::Leased { ack_id, .. } = member.state {
                self.leases.remove(&ack_id);
            }
            let (needs_payload, deliveries) = (member.payload.is_none(), member.deliveries);
            if needs_payload {
                self.refill(tx, sink, index)?;
            }
            if ask.max_deliver.is_some_and(|max| deliveries >= max) {
                let payload = self.segments[index]
                    .take_payload(member_index)
                    .expect("refilled above");
                let member = &self.segments[index].members[member_index];
                exhausted.push(Exhausted {
                    commit_lsn: member.commit_lsn,
                    commit_idx: member.commit_idx,
                    group_id: member.group.to_string(),
                    idempotency_key: member.idempotency_key.to_string(),
                    payload,
                    route: member.route.as_deref().map(str::to_string),
                    deliveries: member.deliveries,
                    first_delivered_at: member.first_delivered_at,
                    last_delivered_at: member.last_delivered_at,
                });
                self.settle(index, place);
                dirty.insert(segment_id);
                continue;
            }
            let ack_id = AckId::new();
            let segment = &mut self.segments[index];
            let member = &mut segment.members[member_index];
            member.state = State::Leased {
                ack_id,
                until: ask.until,
            };
            member.deliveries = member.deliveries.saturating_add(1);
            member.first_delivered_at.get_or_insert(ask.now);
            member.last_delivered_at = Some(ask.now);
            let deliver_count = member.deliveries;
            let payload = segment.take_payload(member_index).expect("refilled above");
            delivered.push(Delivered {
                ack_id,
                payload: super::pull::json_text(payload)?,
                deliver_count,
            });
            self.leases.insert(ack_id, place);
        }
        Ok(())
    }

    /// Reads the sink's next segment into the window; false when there is
    /// none, or the window is full.
    fn load_next(&mut self, tx: &Transaction<'_>, sink: &str) -> Result<bool, StoreError> {
        let bytes: usize = self.segments.iter().map(|segment| segment.bytes).sum();
        if !self.segments.is_empty() && bytes >= WINDOW_BYTES {
            return Ok(false);
        }
        let Some(loaded) = segments::next_after(tx, sink, self.loaded_to)? else {
            return Ok(false);
        };
        self.loaded_to = loaded.id;
        let columns = loaded.members()?;
        let mut segment = Segment {
            id: loaded.id,
            inserted_at: loaded.inserted_at,
            members: Vec::with_capacity(columns.len()),
            settled: loaded.settled.clone(),
            unsettled: 0,
            bytes: 0,
        };
        for (index, columns) in columns.into_iter().enumerate() {
            let settled = segments::is_set(&loaded.settled, index);
            let member = member_of(columns, settled, &mut self.groups);
            if member.payload.is_some() {
                segment.bytes += member.bytes;
            }
            if !settled {
                segment.unsettled += 1;
                self.groups
                    .get_mut(&member.group)
                    .expect("member_of registers the group")
                    .push_back(Place {
                        segment: loaded.id,
                        member: index as u32,
                    });
            }
            segment.members.push(member);
        }
        self.segments.push_back(segment);
        Ok(true)
    }

    /// Reads back the payloads of the unsettled members of the segment at
    /// `index` that were handed out: one of them goes out again.
    fn refill(&mut self, tx: &Transaction<'_>, sink: &str, index: usize) -> Result<(), StoreError> {
        let id = self.segments[index].id;
        let Some(loaded) = segments::by_id(tx, sink, id)? else {
            return Err(StoreError::Corrupt {
                what: "segment",
                detail: format!(
                    "pull_segments row {id} of {sink} is gone while messages of it are unsettled"
                ),
            });
        };
        let segment = &mut self.segments[index];
        for (member, columns) in segment.members.iter_mut().zip(loaded.members()?) {
            if member.payload.is_none() && member.state != State::Settled {
                member.payload = Some(payload_of(columns));
                segment.bytes += member.bytes;
            }
        }
        Ok(())
    }

    /// Settles the member at `place` (its segment at `index`): it leaves
    /// its group's queue, whose next member may be handed out.
    fn settle(&mut self, index: usize, place: Place) {
        let segment = &mut self.segments[index];
        let member = &mut segment.members[place.member as usize];
        if member.state == State::Settled {
            return;
        }
        member.state = State::Settled;
        let group = Arc::clone(&member.group);
        segment.take_payload(place.member as usize);
        segment.unsettled -= 1;
        segments::set(&mut segment.settled, place.member as usize);
        if let Some(queue) = self.groups.get_mut(&group) {
            // Only a group's first member is ever handed out, so it is the
            // one settled; anything else would be a bug, kept harmless.
            if queue.front() == Some(&place) {
                queue.pop_front();
            } else {
                queue.retain(|queued| *queued != place);
            }
            if queue.is_empty() {
                self.groups.remove(&group);
            }
        }
    }

    fn index_of(&self, segment: i64) -> Option<usize> {
        self.segments
            .binary_search_by_key(&segment, |loaded| loaded.id)
            .ok()
    }

    /// Settles the members leased under `ack_ids` that are in this window;
    /// returns, per ack id, whether it was one, and the store times of
    /// those settled (for the delivery latency).
    pub(super) fn ack(
        &mut self,
        ack_ids: &[AckId],
        dirty: &mut HashSet<i64>,
    ) -> (Vec<bool>, Vec<i64>) {
        let mut found = Vec::with_capacity(ack_ids.len());
        let mut stored_at = Vec::new();
        for ack_id in ack_ids {
            let Some(place) = self.leases.remove(ack_id) else {
                found.push(false);
                continue;
            };
            found.push(true);
            if let Some(index) = self.index_of(place.segment) {
                stored_at.push(self.segments[index].inserted_at);
                self.settle(index, place);
                dirty.insert(place.segment);
            }
        }
        (found, stored_at)
    }

    /// Makes the members leased under `ack_ids` visible again at once;
    /// returns, per ack id, whether it was one of this window's.
    pub(super) fn nack(&mut self, ack_ids: &[AckId]) -> Vec<bool> {
        ack_ids
            .iter()
            .map(|ack_id| {
                let Some(place) = self.leases.remove(ack_id) else {
                    return false;
                };
                if let Some(index) = self.index_of(place.segment) {
                    self.segments[index].members[place.member as usize].state = State::Waiting;
                }
                true
            })
            .collect()
    }

    /// Writes the settled state of the segments in `dirty`, and lets go of
    /// the settled segments at the front of the window, deleting them.
    ///
    /// A settled segment behind the front keeps its row until it reaches
    /// the front: segment ids are SQLite rowids, which a new row takes
    /// from the greatest one stored, so deleting the last row would let
    /// the next segment take an id the window has read past already.
    pub(super) fn persist(
        &mut self,
        tx: &Transaction<'_>,
        dirty: &HashSet<i64>,
    ) -> Result<(), StoreError> {
        while self
            .segments
            .front()
            .is_some_and(|segment| segment.unsettled == 0)
        {
            let segment = self.segments.pop_front().expect("checked above");
            segments::delete(tx, segment.id)?;
        }
        if self.segments.is_empty() {
            // Every segment read so far is deleted: the next one stored may
            // take any id, and the next read starts from the first.
            self.loaded_to = 0;
        }
        for &id in dirty {
            if let Some(index) = self.index_of(id) {
                let segment = &self.segments[index];
                let count = segment.members.len() - segment.unsettled;
                segments::record_settled(tx, id, &segment.settled, count)?;
            }
        }
        Ok(())
    }

    /// Members handed out whose lease runs past `now`.
    pub(super) fn in_flight(&self, now: i64) -> u64 {
        self.lease_ends().filter(|until| *until > now).count() as u64
    }

    /// The earliest end of a lease running at `at`.
    pub(super) fn next_expiry(&self, at: i64) -> Option<i64> {
        self.lease_ends().filter(|until| *until > at).min()
    }

    /// When each lease still valid ends (including those that ended and
    /// whose member was not handed out again).
    fn lease_ends(&self) -> impl Iterator<Item = i64> + '_ {
        self.leases.values().filter_map(|place| {
            let index = self.index_of(place.segment)?;
            match self.segments[index].members[place.member as usize].state {
                State::Leased { until, .. } => Some(until),
                _ => None,
            }
        })
    }
}

/// A member of a segment as loaded, its group's name shared with the
/// window's queue of that group.
fn member_of(
    columns: MessageColumns<'_>,
    settled: bool,
    groups: &mut HashMap<Arc<str>, VecDeque<Place>>,
) -> Member {
    let group = match groups.get_key_value(&*columns.group_id) {
        Some((group, _)) => Arc::clone(group),
        None => {
            let group: Arc<str> = Arc::from(&*columns.group_id);
            if !settled {
                groups.insert(Arc::clone(&group), VecDeque::new());
            }
            group
        }
    };
    let bytes = columns.approx_bytes();
    let idempotency_key = columns
        .idempotency_key
        .clone()
        .into_owned()
        .into_boxed_str();
    let route = columns
        .route
        .clone()
        .map(|route| route.into_owned().into_boxed_str());
    Member {
        commit_lsn: columns.commit_lsn,
        commit_idx: columns.commit_idx,
        group,
        idempotency_key,
        route,
        payload: (!settled).then(|| payload_of(columns)),
        bytes,
        state: if settled {
            State::Settled
        } else {
            State::Waiting
        },
        deliveries: 0,
        first_delivered_at: None,
        last_delivered_at: None,
    }
}

/// The payload of a member's columns.
fn payload_of(columns: MessageColumns<'_>) -> StoredPayload {
    StoredPayload::from_columns(
        columns.payload.into_owned(),
        columns.payload_bytes.map(std::borrow::Cow::into_owned),
        columns.content_type.map(std::borrow::Cow::into_owned),
    )
}

/// Runs `write` on `sink`'s window in `windows`, creating it if needed;
/// when `write` fails the window is dropped, so that memory never claims
/// more than the store recorded.
pub(super) fn with_window<T>(
    windows: &mut HashMap<String, Window>,
    sink: &str,
    write: impl FnOnce(&mut Window) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let window = windows.entry(sink.to_string()).or_default();
    let done = write(window);
    if done.is_err() {
        windows.remove(sink);
    }
    done
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests::{
        NO_LIMIT, WAIT, ack_ids, batch, limits, msg, open_temp_for, positions,
    };
    use crate::{MessageCounts, ReceiveLimits, Store};
    use weft_core::lsn::Lsn;

    fn table_count(store: &Store, table: &str) -> i64 {
        store
            .lock()
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
                row.get(0)
            })
            .unwrap()
    }

    #[test]
    fn every_batch_becomes_a_segment_that_acks_mark_and_then_delete() {
        let (_dir, store) = open_temp_for(true, &["s"]);
        for lsn in [10, 20, 30] {
            store
                .append(
                    &batch("s", vec![msg(lsn, 0, "a"), msg(lsn, 1, "b")]),
                    Lsn(lsn),
                )
                .unwrap();
        }
        assert_eq!(table_count(&store, "pull_messages"), 0);
        assert_eq!(table_count(&store, "pull_segments"), 3);
        let first = store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap();
        assert_eq!(positions(&first), vec![(10, 0), (10, 1)]);
        // Half of the first segment settled: marked, not deleted.
        store.ack("s", &[first[0].ack_id]).unwrap();
        assert_eq!(table_count(&store, "pull_segments"), 3);
        assert_eq!(store.message_counts("s").unwrap().stored, 5);
        store.ack("s", &[first[1].ack_id]).unwrap();
        assert_eq!(table_count(&store, "pull_segments"), 2);
        let rest = store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap();
        assert_eq!(positions(&rest), vec![(20, 0), (20, 1)]);
        store.ack("s", &ack_ids(&rest)).unwrap();
        let last = store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap();
        store.ack("s", &ack_ids(&last)).unwrap();
        assert_eq!(table_count(&store, "pull_segments"), 0);
        assert_eq!(store.message_counts("s").unwrap(), MessageCounts::default());
    }

    #[test]
    fn segments_stored_after_the_last_one_settled_are_still_read() {
        let (_dir, store) = open_temp_for(true, &["s"]);
        let receive = || store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap();
        store
            .append(&batch("s", vec![msg(10, 0, "a")]), Lsn(10))
            .unwrap();
        store
            .append(&batch("s", vec![msg(20, 0, "b")]), Lsn(20))
            .unwrap();
        let both = receive();
        assert_eq!(positions(&both), vec![(10, 0), (20, 0)]);
        // The last segment settles while the first does not: a new one
        // must not take its id and be passed over.
        store.ack("s", &[both[1].ack_id]).unwrap();
        store
            .append(&batch("s", vec![msg(30, 0, "c")]), Lsn(30))
            .unwrap();
        let third = receive();
        assert_eq!(positions(&third), vec![(30, 0)]);
        store.ack("s", &[both[0].ack_id, third[0].ack_id]).unwrap();
        assert_eq!(table_count(&store, "pull_segments"), 0);
        // Everything settled and deleted: ids start over, and are read.
        store
            .append(&batch("s", vec![msg(40, 0, "d")]), Lsn(40))
            .unwrap();
        assert_eq!(positions(&receive()), vec![(40, 0)]);
    }

    #[test]
    fn messages_handed_out_and_not_acked_do_not_fill_the_window() {
        let (_dir, store) = open_temp_for(true, &["s"]);
        // 40 messages of 1 MiB, each a segment of its own: five times the
        // window, all handed out and none acked.
        for i in 0..40u64 {
            let mut message = msg(10 + i, 0, &format!("g{i}"));
            message.payload = weft_core::payload::Payload::Json(
                serde_json::json!({"lsn": 10 + i, "idx": 0, "blob": "x".repeat(1 << 20)}),
            )
            .into();
            store
                .append(&batch("s", vec![message]), Lsn(10 + i))
                .unwrap();
        }
        let mut seen = Vec::new();
        for _ in 0..40 {
            seen.extend(positions(
                &store.receive("s", 8, limits(WAIT, NO_LIMIT)).unwrap(),
            ));
        }
        assert_eq!(seen, (0..40).map(|i| (10 + i, 0)).collect::<Vec<_>>());
        // A lease that ran out reads its segment back for the payload.
        let short = limits(Duration::ZERO, NO_LIMIT);
        let (_dir2, again) = open_temp_for(true, &["s"]);
        again
            .append(&batch("s", vec![msg(5, 0, "a")]), Lsn(5))
            .unwrap();
        let first = again.receive("s", 1, short).unwrap();
        let second = again.receive("s", 1, short).unwrap();
        assert_eq!(first[0].payload.get(), second[0].payload.get());
        assert_eq!(second[0].deliver_count, 2);
    }

    #[test]
    fn acks_outlive_a_restart_and_leases_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("weft.db");
        {
            let store = Store::open(&path).unwrap();
            store.read_in_place("s");
            let messages = vec![msg(10, 0, "a"), msg(10, 1, "b"), msg(10, 2, "c")];
            store.append(&batch("s", messages), Lsn(10)).unwrap();
            let got = store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap();
            assert_eq!(got.len(), 3);
            store.ack("s", &[got[1].ack_id]).unwrap();
        }
        let store = Store::open(&path).unwrap();
        store.read_in_place("s");
        assert_eq!(
            store.message_counts("s").unwrap(),
            MessageCounts {
                stored: 2,
                in_flight: 0
            }
        );
        let again = store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap();
        assert_eq!(positions(&again), vec![(10, 0), (10, 2)]);
        assert!(
            again.iter().all(|d| d.deliver_count == 1),
            "counts start again"
        );
    }

    #[test]
    fn a_window_looks_past_a_group_in_flight_into_later_segments() {
        let (_dir, store) = open_temp_for(true, &["s"]);
        let hot = (0..3).map(|i| msg(10, i, "a")).collect();
        store.append(&batch("s", hot), Lsn(10)).unwrap();
        store
            .append(&batch("s", vec![msg(20, 0, "b")]), Lsn(20))
            .unwrap();
        let got = store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap();
        assert_eq!(positions(&got), vec![(10, 0), (20, 0)]);
        store.ack("s", &ack_ids(&got)).unwrap();
        let next = store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap();
        assert_eq!(positions(&next), vec![(10, 1)]);
        let expiry = store.next_lease_expiry("s", crate::StoreTime::now());
        assert!(expiry.unwrap().is_some(), "leases in the window count");
    }

    #[test]
    fn a_replayed_dead_letter_goes_before_its_groups_later_members() {
        let (_dir, store) = open_temp_for(true, &["s"]);
        store
            .append(&batch("s", vec![msg(10, 0, "a"), msg(20, 0, "a")]), Lsn(20))
            .unwrap();
        let once = ReceiveLimits {
            ack_wait: Duration::ZERO,
            max_ack_pending: NO_LIMIT,
            max_deliver: Some(1),
        };
        assert_eq!(
            positions(&store.receive("s", 10, once).unwrap()),
            vec![(10, 0)]
        );
        // Handed out once: dead-lettered, and its group's next one goes.
        let counted = ReceiveLimits {
            ack_wait: WAIT,
            ..once
        };
        let next = store.receive("s", 10, counted).unwrap();
        assert_eq!(positions(&next), vec![(20, 0)]);
        let dead = store.dead_letters("s", 0, 10).unwrap();
        assert_eq!(dead.len(), 1);
        assert!(
            dead[0].last_error.contains("max_deliver = 1"),
            "{}",
            dead[0].last_error
        );
        store.nack("s", &ack_ids(&next)).unwrap();
        // Replayed, it waits in `pull_messages` and goes before (20, 0).
        store.replay_dead_letters("s", None).unwrap();
        let replayed = store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap();
        assert_eq!(positions(&replayed), vec![(10, 0)]);
        store.ack("s", &ack_ids(&replayed)).unwrap();
        let last = store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap();
        assert_eq!(positions(&last), vec![(20, 0)]);
    }
}
