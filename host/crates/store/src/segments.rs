//! Segments: a big batch's messages stored as a few compressed rows.
//!
//! A backfill chunk or a bulk transaction brings thousands of messages at
//! once. Written as one `pull_messages` row each (with that table's four
//! indexes), they made the store's transaction the bound of a backfill
//! (BENCHMARKS.md, issue 8). A batch of at least [`STAGE_AT`] messages for
//! a sink is instead written as `pull_segments` rows of up to
//! [`SEGMENT_MESSAGES`] messages or [`SEGMENT_BYTES`] bytes each: their
//! [`MessageColumns`] encoded with postcard and compressed with zstd, one
//! blob per segment.
//!
//! Segments are a queue in front of `pull_messages`: a sink's segments
//! always come after its `pull_messages` rows, so once a sink has a
//! segment, its later batches, however small, become segments too. When a
//! receive or a push worker finds fewer deliverable messages than it asked
//! for, [`materialize_next`] moves the sink's segment stored first into
//! `pull_messages` in the same transaction, through the same insert (group
//! heads and duplicates handled alike). Per-group order holds because each
//! group's messages are stored in order (the pipeline stores in commit
//! order; a push sink's lane spills a group's messages in order too), so
//! no message of a group can overtake one that is still in a segment: it
//! is either in a later segment or not stored yet.

use std::sync::{Mutex, MutexGuard};

use rusqlite::{OptionalExtension, Transaction, params};

use super::codec::MessageColumns;
use super::{StoreError, insert_messages};

/// A batch of at least this many messages for one sink is written as
/// segments.
pub(super) const STAGE_AT: usize = 256;

/// The most messages one segment holds.
const SEGMENT_MESSAGES: usize = 1000;

/// The most bytes of messages one segment holds (unless its one message is
/// bigger): what encoding, compressing or moving a segment holds in memory
/// at once, so that big rows make smaller segments, not bigger buffers.
const SEGMENT_BYTES: usize = 1 << 20;

/// The most segments one lease moves into `pull_messages`: up to 4,000
/// messages (four times a pull receive's largest batch) or 4 MiB, a bound
/// on one lease's work when the segments bring no deliverable message (all
/// of a group whose head is in flight).
pub(super) const MATERIALIZE_PER_LEASE: usize = 4;

/// zstd's level: its fastest regular one. The messages of a chunk share
/// their metadata and keys, which even this level mostly removes.
const ZSTD_LEVEL: i32 = 1;

/// Whether `count` messages for `sink` go into segments: a big batch, or
/// any batch while the sink has segments (they must stay behind them).
pub(super) fn takes(tx: &Transaction<'_>, sink: &str, count: usize) -> Result<bool, StoreError> {
    if count == 0 {
        return Ok(false);
    }
    if count >= STAGE_AT {
        return Ok(true);
    }
    let any: bool = tx
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM pull_segments WHERE sink = ?1)")?
        .query_row(params![sink], |row| row.get(0))?;
    Ok(any)
}

/// Writes `messages` (in commit order) for `sink` as segments stored at
/// `now`; returns how many messages they hold. What a segment already
/// stored at the same position holds (the same changes stored again after
/// a crash) is not stored twice.
pub(super) fn stage(
    tx: &Transaction<'_>,
    sink: &str,
    messages: &[MessageColumns<'_>],
    now: i64,
) -> Result<usize, StoreError> {
    let mut staged = 0;
    for members in split(messages) {
        staged += stage_segment(tx, sink, members, now)?;
    }
    Ok(staged)
}

/// Writes `members` as one segment, keyed by the position of its first
/// message. When a segment holds that position already, it is kept, and
/// only the members it lacks are written, keyed by the first of them: a
/// replayed backfill chunk lacks none, but a push sink's memory lane
/// spills whatever it holds when it must, so the same changes sent again
/// after a crash can be cut into other segments than the first time.
/// Skipping the whole segment would lose the rest. Each round drops the
/// key's own message, so this ends. Only a conflict copies the members.
fn stage_segment(
    tx: &Transaction<'_>,
    sink: &str,
    members: &[MessageColumns<'_>],
    now: i64,
) -> Result<usize, StoreError> {
    let mut members = std::borrow::Cow::Borrowed(members);
    let mut insert = tx.prepare_cached(
        "INSERT INTO pull_segments (sink, commit_lsn, commit_idx, messages, body, inserted_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (sink, commit_lsn, commit_idx) DO NOTHING",
    )?;
    let mut existing = tx.prepare_cached(
        "SELECT id, body FROM pull_segments WHERE sink = ?1 AND commit_lsn = ?2 AND commit_idx = ?3",
    )?;
    while let Some(first) = members.first() {
        let key = (first.commit_lsn, first.commit_idx);
        let inserted = with_body(&members, |body| {
            insert.execute(params![sink, key.0, key.1, members.len() as i64, body, now])
        })?;
        if inserted == 1 {
            return Ok(members.len());
        }
        let (id, body): (i64, Vec<u8>) = existing
            .query_row(params![sink, key.0, key.1], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })?;
        let raw = decompress(&body, id)?;
        let held: std::collections::HashSet<(i64, u32)> = decode(&raw, id)?
            .iter()
            .map(|message| (message.commit_lsn, message.commit_idx))
            .collect();
        members = members
            .iter()
            .filter(|message| !held.contains(&(message.commit_lsn, message.commit_idx)))
            .cloned()
            .collect();
    }
    Ok(0)
}

/// `messages` cut into segments of at most [`SEGMENT_MESSAGES`] messages
/// and [`SEGMENT_BYTES`] bytes, in order.
fn split<'m, 'a>(messages: &'m [MessageColumns<'a>]) -> Vec<&'m [MessageColumns<'a>]> {
    let mut segments = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (at, message) in messages.iter().enumerate() {
        let size = message.approx_bytes();
        let full = at - start == SEGMENT_MESSAGES || bytes + size > SEGMENT_BYTES;
        if at > start && full {
            segments.push(&messages[start..at]);
            (start, bytes) = (at, 0);
        }
        bytes += size;
    }
    if start < messages.len() {
        segments.push(&messages[start..]);
    }
    segments
}

/// Moves the segment of `sink` stored first into `pull_messages`; false
/// when the sink has none. The order they were stored in, not their
/// positions: a push sink's lane spills each group's messages in order,
/// but a spill can start with a message older than one spilled before it
/// (of a group that was in flight then), and taking that spill first
/// would let its later message of a group overtake an earlier one still
/// in a segment.
pub(super) fn materialize_next(tx: &Transaction<'_>, sink: &str) -> Result<bool, StoreError> {
    let Some(loaded) = next_after(tx, sink, 0)? else {
        return Ok(false);
    };
    // Members a pull consumer settled while the sink read the segment in
    // place (it has since become a push sink) are not delivered again.
    let messages: Vec<MessageColumns<'_>> = loaded
        .members()?
        .into_iter()
        .enumerate()
        .filter(|(member, _)| !is_set(&loaded.settled, *member))
        .map(|(_, message)| message)
        .collect();
    insert_messages(tx, sink, &messages, loaded.inserted_at)?;
    delete(tx, loaded.id)?;
    Ok(true)
}

/// A segment as [`next_after`] reads it.
pub(super) struct Loaded {
    /// Its row id: segments are read in this order.
    pub(super) id: i64,
    /// When it was stored, in ms since the epoch.
    pub(super) inserted_at: i64,
    /// Its encoded messages, decompressed: [`Loaded::members`] decodes them.
    raw: Vec<u8>,
    /// Which members are settled (see [`is_set`]); empty when none is.
    pub(super) settled: Vec<u8>,
}

impl Loaded {
    /// The segment's messages, borrowing their text.
    pub(super) fn members(&self) -> Result<Vec<MessageColumns<'_>>, StoreError> {
        decode(&self.raw, self.id)
    }
}

/// The segment of `sink` stored first after segment `after` (0: the first),
/// if any.
pub(super) fn next_after(
    tx: &Transaction<'_>,
    sink: &str,
    after: i64,
) -> Result<Option<Loaded>, StoreError> {
    read(
        tx,
        "SELECT id, body, inserted_at, settled FROM pull_segments
         WHERE sink = ?1 AND id > ?2 ORDER BY id LIMIT 1",
        params![sink, after],
    )
}

/// Segment `id` of `sink`, if it is stored.
pub(super) fn by_id(
    tx: &Transaction<'_>,
    sink: &str,
    id: i64,
) -> Result<Option<Loaded>, StoreError> {
    read(
        tx,
        "SELECT id, body, inserted_at, settled FROM pull_segments WHERE sink = ?1 AND id = ?2",
        params![sink, id],
    )
}

/// The segment `sql` selects (id, body, inserted_at, settled), if any.
fn read(
    tx: &Transaction<'_>,
    sql: &str,
    values: impl rusqlite::Params,
) -> Result<Option<Loaded>, StoreError> {
    let row = tx
        .prepare_cached(sql)?
        .query_row(values, |row| {
            let body: Vec<u8> = row.get(1)?;
            let settled: Option<Vec<u8>> = row.get(3)?;
            Ok((row.get(0)?, body, row.get(2)?, settled))
        })
        .optional()?;
    let Some((id, body, inserted_at, settled)) = row else {
        return Ok(None);
    };
    Ok(Some(Loaded {
        id,
        inserted_at,
        raw: decompress(&body, id)?,
        settled: settled.unwrap_or_default(),
    }))
}

/// Records which members of segment `id` are settled: `count` of them,
/// marked in `settled`.
pub(super) fn record_settled(
    tx: &Transaction<'_>,
    id: i64,
    settled: &[u8],
    count: usize,
) -> Result<(), StoreError> {
    tx.prepare_cached("UPDATE pull_segments SET settled = ?2, settled_count = ?3 WHERE id = ?1")?
        .execute(params![id, settled, count as i64])?;
    Ok(())
}

/// Deletes segment `id`: all its members are settled.
pub(super) fn delete(tx: &Transaction<'_>, id: i64) -> Result<(), StoreError> {
    tx.prepare_cached("DELETE FROM pull_segments WHERE id = ?1")?
        .execute(params![id])?;
    Ok(())
}

/// Whether bit `member` of the bitmap `bits` is set.
pub(super) fn is_set(bits: &[u8], member: usize) -> bool {
    bits.get(member / 8)
        .is_some_and(|byte| byte & (1 << (member % 8)) != 0)
}

/// Sets bit `member` of the bitmap `bits`, growing it as needed.
pub(super) fn set(bits: &mut Vec<u8>, member: usize) {
    if bits.len() <= member / 8 {
        bits.resize(member / 8 + 1, 0);
    }
    bits[member / 8] |= 1 << (member % 8);
}

/// How many messages the segments of `sink` hold, not counting those
/// settled in place.
pub(super) fn count(conn: &rusqlite::Connection, sink: &str) -> Result<u64, StoreError> {
    let count: i64 = conn
        .prepare_cached(
            "SELECT coalesce(sum(messages - settled_count), 0) FROM pull_segments WHERE sink = ?1",
        )?
        .query_row(params![sink], |row| row.get(0))?;
    Ok(count.max(0) as u64)
}

/// Deletes the segments of `sink`; returns how many messages they held.
pub(super) fn remove(tx: &Transaction<'_>, sink: &str) -> Result<usize, StoreError> {
    let held = count(tx, sink)?;
    tx.execute("DELETE FROM pull_segments WHERE sink = ?1", params![sink])?;
    Ok(held as usize)
}

/// The buffers and zstd context that segments are encoded with.
/// Allocating them afresh for every segment (a megabyte each time) cost
/// more in page faults than the compression itself; one set per thread
/// would keep a few megabytes in every blocking thread that ever stored a
/// batch. Appends hold the store's connection while they encode, so one
/// shared set is never contended.
struct Encoder {
    raw: Vec<u8>,
    compressed: Vec<u8>,
    zstd: zstd::bulk::Compressor<'static>,
}

static ENCODER: Mutex<Option<Encoder>> = Mutex::new(None);

/// The zstd context segments are decompressed with, shared for the same
/// reason.
static DECODER: Mutex<Option<zstd::bulk::Decompressor<'static>>> = Mutex::new(None);

/// Locks `shared`: a panic while it was held left at worst a buffer with
/// stale bytes, which every use clears first.
fn lock<T>(shared: &Mutex<T>) -> MutexGuard<'_, T> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Calls `use_body` with the body of a segment of `members`: encoded, then
/// compressed.
fn with_body<T>(members: &[MessageColumns<'_>], use_body: impl FnOnce(&[u8]) -> T) -> T {
    let mut shared = lock(&ENCODER);
    let encoder = shared.get_or_insert_with(|| Encoder {
        raw: Vec::new(),
        compressed: Vec::new(),
        // Fails only when zstd cannot allocate its context.
        zstd: zstd::bulk::Compressor::new(ZSTD_LEVEL).expect("a zstd context at level 1"),
    });
    // Neither can fail: postcard writes any sequence of these plain
    // fields to a growing buffer, and the destination has room for
    // zstd's worst case.
    encoder.raw.clear();
    let raw = postcard::serialize_with_flavor(members, Appended(std::mem::take(&mut encoder.raw)))
        .expect("message columns always encode");
    encoder.compressed.clear();
    encoder
        .compressed
        .reserve(zstd::zstd_safe::compress_bound(raw.len()));
    encoder
        .zstd
        .compress_to_buffer(&raw, &mut encoder.compressed)
        .expect("the buffer holds zstd's bound");
    encoder.raw = raw;
    let used = use_body(&encoder.compressed);
    // A segment of one huge message must not pin its size for good.
    if encoder.raw.capacity() > 2 * SEGMENT_BYTES {
        encoder.raw = Vec::new();
        encoder.compressed = Vec::new();
    }
    used
}

/// postcard's output appended to a `Vec` kept between segments. Its own
/// `to_extend` pushed payloads byte by byte, and its `Vec` flavor cannot
/// start from a `Vec` it is given.
struct Appended(Vec<u8>);

impl postcard::ser_flavors::Flavor for Appended {
    type Output = Vec<u8>;

    fn try_push(&mut self, byte: u8) -> postcard::Result<()> {
        self.0.push(byte);
        Ok(())
    }

    fn try_extend(&mut self, bytes: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<Vec<u8>> {
        Ok(self.0)
    }
}

/// A segment body's encoded messages can be no bigger than this: a body
/// whose header claims more was not written by weft.
const MAX_RAW_BYTES: u64 = 4 << 30;

/// The encoded messages of segment `id`'s `body`.
fn decompress(body: &[u8], id: i64) -> Result<Vec<u8>, StoreError> {
    let size = match zstd::zstd_safe::get_frame_content_size(body) {
        Ok(Some(size)) if size <= MAX_RAW_BYTES => size as usize,
        Ok(Some(size)) => return Err(corrupt(id, format!("it claims {size} bytes"))),
        Ok(None) => return Err(corrupt(id, "its size is missing")),
        Err(_) => return Err(corrupt(id, "it is not a zstd frame")),
    };
    let mut raw = Vec::with_capacity(size);
    let mut shared = lock(&DECODER);
    let zstd = match &mut *shared {
        Some(zstd) => zstd,
        empty => empty.insert(zstd::bulk::Decompressor::new().map_err(|e| corrupt(id, e))?),
    };
    zstd.decompress_to_buffer(body, &mut raw)
        .map_err(|e| corrupt(id, e))?;
    Ok(raw)
}

/// The messages of segment `id`, borrowing their text from `raw`.
fn decode(raw: &[u8], id: i64) -> Result<Vec<MessageColumns<'_>>, StoreError> {
    postcard::from_bytes(raw).map_err(|e| corrupt(id, e))
}

fn corrupt(id: i64, error: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        what: "segment",
        detail: format!("pull_segments row {id} does not decode: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::super::tests::{NO_LIMIT, WAIT, ack_ids, batch, limits, msg, open_temp, positions};
    use super::*;
    use crate::{NewMessage, SinkBatch, Store};
    use weft_core::lsn::Lsn;
    use weft_core::{payload::Payload, route::Route};

    /// `count` messages at `lsn`, one group each (`g0`, `g1`, ...), as a
    /// backfill chunk brings them.
    fn chunk(lsn: u64, count: u32) -> Vec<NewMessage> {
        (0..count).map(|i| msg(lsn, i, &format!("g{i}"))).collect()
    }

    fn rows(store: &Store, table: &str) -> i64 {
        store
            .lock()
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
                row.get(0)
            })
            .unwrap()
    }

    /// Receives and acks everything `sink` holds, `size` at a time.
    fn drain(store: &Store, sink: &str, size: u32) -> Vec<(u64, u32)> {
        let mut seen = Vec::new();
        loop {
            let got = store.receive(sink, size, limits(WAIT, NO_LIMIT)).unwrap();
            if got.is_empty() {
                return seen;
            }
            seen.extend(positions(&got));
            store.ack(sink, &ack_ids(&got)).unwrap();
        }
    }

    #[test]
    fn a_big_batch_is_stored_as_segments_and_received_in_commit_order() {
        let (_dir, store) = open_temp();
        store.append(&batch("s", chunk(10, 2500)), Lsn(10)).unwrap();
        assert_eq!(rows(&store, "pull_messages"), 0);
        assert_eq!(rows(&store, "pull_segments"), 3, "1000 + 1000 + 500");
        assert_eq!(store.message_counts("s").unwrap().stored, 2500);
        assert_eq!(store.queue_depths("s").unwrap().buffered, 2500);

        let seen = drain(&store, "s", 300);
        let expected: Vec<(u64, u32)> = (0..2500).map(|i| (10, i)).collect();
        assert_eq!(seen, expected);
        assert_eq!(rows(&store, "pull_segments"), 0);
        assert_eq!(store.message_counts("s").unwrap().stored, 0);
    }

    #[test]
    fn small_batches_are_rows_until_a_sink_has_segments_then_queue_behind_them() {
        let (_dir, store) = open_temp();
        store
            .append(&batch("s", vec![msg(5, 0, "g1")]), Lsn(5))
            .unwrap();
        assert_eq!(rows(&store, "pull_segments"), 0, "a small batch is a row");
        store
            .append(&batch("s", chunk(10, STAGE_AT as u32)), Lsn(10))
            .unwrap();
        // A later change of g1 and g7: it must not overtake their chunk rows.
        store
            .append(
                &batch("s", vec![msg(20, 0, "g1"), msg(20, 1, "g7")]),
                Lsn(20),
            )
            .unwrap();
        assert_eq!(rows(&store, "pull_messages"), 1);
        assert_eq!(rows(&store, "pull_segments"), 2);

        // One message per group in flight: g1's row first, the chunk's
        // other groups after it, and nothing of lsn 20 yet.
        let first = store.receive("s", 1000, limits(WAIT, NO_LIMIT)).unwrap();
        let got = positions(&first);
        assert_eq!(got[0], (5, 0));
        assert_eq!(got.len(), STAGE_AT, "g1's chunk row waits behind (5, 0)");
        assert!(got.iter().all(|&(lsn, _)| lsn < 20), "{got:?}");
        store.ack("s", &ack_ids(&first)).unwrap();

        let second = store.receive("s", 1000, limits(WAIT, NO_LIMIT)).unwrap();
        assert_eq!(
            positions(&second),
            vec![(10, 1), (20, 1)],
            "g1's chunk row, then g7's change"
        );
        store.ack("s", &ack_ids(&second)).unwrap();
        let rest = drain(&store, "s", 1000);
        assert_eq!(rest, vec![(20, 0)]);
    }

    #[test]
    fn segments_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("weft.db");
        {
            let store = Store::open(&path).unwrap();
            store.append(&batch("s", chunk(10, 1500)), Lsn(10)).unwrap();
            // Half delivered and acked, a lease open at the crash.
            let got = store.receive("s", 700, limits(WAIT, NO_LIMIT)).unwrap();
            store.ack("s", &ack_ids(&got)).unwrap();
            store
                .receive("s", 10, limits(Duration::from_millis(1), NO_LIMIT))
                .unwrap();
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(store.message_counts("s").unwrap().stored, 800);
        std::thread::sleep(Duration::from_millis(5));
        let seen = drain(&store, "s", 250);
        let expected: Vec<(u64, u32)> = (700..1500).map(|i| (10, i)).collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn a_replayed_chunk_is_stored_once() {
        let (_dir, store) = open_temp();
        store.append(&batch("s", chunk(10, 600)), Lsn(10)).unwrap();
        store.append(&batch("s", chunk(10, 600)), Lsn(10)).unwrap();
        assert_eq!(store.message_counts("s").unwrap().stored, 600);
        assert_eq!(drain(&store, "s", 1000).len(), 600);
    }

    #[test]
    fn a_replay_cut_differently_stores_what_the_first_segment_lacks() {
        // A push sink's lane spills what it holds when it must, so the
        // same changes, sent again after a crash, can reach the store cut
        // into other segments than the first time: a segment at the same
        // position may hold fewer or other messages.
        let (_dir, store) = open_temp();
        store.spill("s", &chunk(10, 300)[..260]).unwrap();
        let mut replay = chunk(10, 300);
        replay.remove(5);
        assert_eq!(store.spill("s", &replay).unwrap(), 40, "260 to 299 are new");
        let seen = drain(&store, "s", 1000);
        let expected: Vec<(u64, u32)> = (0..300).map(|i| (10, i)).collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn a_spill_that_starts_before_an_earlier_spill_keeps_each_groups_order() {
        // The lane spilled a's first message (in flight when its delivery
        // failed), then what it queued: b's older message and a's next.
        let (_dir, store) = open_temp();
        store.spill("s", &chunk(20, 300)).unwrap();
        store.spill("s", &[msg(30, 0, "a")]).unwrap();
        store
            .spill("s", &[msg(10, 0, "b"), msg(31, 0, "a")])
            .unwrap();
        let seen = drain(&store, "s", 1);
        let of_a: Vec<(u64, u32)> = seen.iter().copied().filter(|p| p.0 >= 30).collect();
        assert_eq!(
            of_a,
            vec![(30, 0), (31, 0)],
            "a's messages in order: {seen:?}"
        );
        assert_eq!(seen.len(), 303);
    }

    #[test]
    fn push_workers_get_bytes_payloads_and_routes_back_as_stored() {
        let (_dir, store) = open_temp();
        let mut messages = chunk(10, 300);
        messages[3].payload = Payload::Bytes {
            content_type: "avro/binary".into(),
            data: vec![0, 159, 255],
        }
        .into();
        messages[4].route = Route {
            topic: Some("orders".into()),
            key: Some("k-4".into()),
            ..Route::default()
        }
        .boxed_unless_empty();
        store
            .append(&batch("push", messages.clone()), Lsn(10))
            .unwrap();
        let leased = store
            .lease_deliverable("push", 1000, Duration::from_secs(30))
            .unwrap();
        assert_eq!(leased.len(), 300);
        for (got, sent) in leased.iter().zip(&messages) {
            assert_eq!(
                (got.commit_lsn, got.commit_idx, &got.group_id),
                (sent.commit_lsn, sent.commit_idx, &sent.group_id)
            );
            assert_eq!(got.idempotency_key, sent.idempotency_key);
            assert_eq!(got.payload, sent.payload);
            assert_eq!(
                got.route,
                sent.route.as_deref().cloned().unwrap_or_default()
            );
        }
    }

    #[test]
    fn a_byte_budget_stops_a_lease_that_segments_fill() {
        let (_dir, store) = open_temp();
        store
            .append(&batch("push", chunk(10, 300)), Lsn(10))
            .unwrap();
        let size = store
            .lease_deliverable_within("push", 1, Duration::from_secs(30), usize::MAX, true)
            .unwrap()[0]
            .size_bytes;
        let leased = store
            .lease_deliverable_within("push", 1000, Duration::from_secs(30), size * 5, false)
            .unwrap();
        assert_eq!(leased.len(), 5);
    }

    #[test]
    fn big_messages_make_smaller_segments() {
        let (_dir, store) = open_temp();
        let messages: Vec<NewMessage> = (0..300u32)
            .map(|i| {
                let mut m = msg(10, i, &format!("g{i}"));
                m.payload =
                    Payload::Json(json!({"idx": i, "lsn": 10, "blob": "x".repeat(10_000)})).into();
                m
            })
            .collect();
        store.append(&batch("s", messages), Lsn(10)).unwrap();
        // 300 messages of ~10 kB: about 100 per 1 MiB segment.
        assert_eq!(rows(&store, "pull_segments"), 3);
        let seen = drain(&store, "s", 1000);
        assert_eq!(seen, (0..300).map(|i| (10, i)).collect::<Vec<_>>());
    }

    #[test]
    fn one_lease_moves_a_bounded_number_of_segments() {
        let (_dir, store) = open_temp();
        // One group: only its head can go out, so no segment brings a
        // deliverable message once the head is in flight.
        let hot: Vec<NewMessage> = (0..6000).map(|i| msg(10, i, "hot")).collect();
        store.append(&batch("s", hot), Lsn(10)).unwrap();
        let lease = Duration::from_secs(30);
        let first = store.lease_deliverable("s", 10, lease).unwrap();
        assert_eq!(first.len(), 1);
        let moved = rows(&store, "pull_messages");
        assert_eq!(moved, (MATERIALIZE_PER_LEASE * SEGMENT_MESSAGES) as i64);
        assert!(store.lease_deliverable("s", 10, lease).unwrap().is_empty());
        assert_eq!(rows(&store, "pull_messages"), 6000);
        assert_eq!(store.message_counts("s").unwrap().stored, 6000);
    }

    #[test]
    fn a_receive_reads_segments_in_place_and_moves_none() {
        let (_dir, store) = open_temp();
        let hot: Vec<NewMessage> = (0..6000).map(|i| msg(10, i, "hot")).collect();
        store.append(&batch("s", hot), Lsn(10)).unwrap();
        assert_eq!(
            positions(&store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap()),
            vec![(10, 0)]
        );
        assert!(
            store
                .receive("s", 10, limits(WAIT, NO_LIMIT))
                .unwrap()
                .is_empty()
        );
        assert_eq!(rows(&store, "pull_messages"), 0);
        assert_eq!(
            store.message_counts("s").unwrap(),
            crate::MessageCounts {
                stored: 6000,
                in_flight: 1
            }
        );
    }

    #[test]
    fn removing_a_sink_deletes_its_segments_only() {
        let (_dir, store) = open_temp();
        let both = vec![
            SinkBatch::of("gone", chunk(10, 400)),
            SinkBatch::of("kept", chunk(10, 400)),
        ];
        store.append(&both, Lsn(10)).unwrap();
        assert_eq!(store.remove_sink("gone").unwrap(), 400);
        assert_eq!(store.message_counts("gone").unwrap().stored, 0);
        assert_eq!(store.message_counts("kept").unwrap().stored, 400);
    }

    #[test]
    fn a_segment_modified_outside_weft_is_reported_not_delivered() {
        let (_dir, store) = open_temp();
        store.append(&batch("s", chunk(10, 300)), Lsn(10)).unwrap();
        store
            .lock()
            .execute("UPDATE pull_segments SET body = x'00ff'", [])
            .unwrap();
        let err = store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap_err();
        assert!(
            err.to_string().contains("pull_segments row"),
            "names the row: {err}"
        );
        assert_eq!(
            store.message_counts("s").unwrap().stored,
            300,
            "nothing lost"
        );
    }

    #[test]
    fn a_chunk_of_the_bench_table_compresses() {
        let messages: Vec<NewMessage> = (0..1000u32)
            .map(|i| {
                let mut m = msg(10, i, &format!("g{i}"));
                m.payload = Payload::Json(json!({
                    "record": {"id": i, "note": "n".repeat(60)},
                    "metadata": {"table_schema": "public", "table_name": "bench_rows"}
                }))
                .into();
                m
            })
            .collect();
        let columns: Vec<MessageColumns<'_>> = messages
            .iter()
            .map(|m| MessageColumns::of(m).unwrap())
            .collect();
        let raw: usize = messages.iter().map(|m| m.payload.body().len()).sum();
        let body = with_body(&columns, <[u8]>::to_vec);
        assert!(body.len() * 4 < raw, "{} bytes for {raw}", body.len());
        let plain = decompress(&body, 1).unwrap();
        assert_eq!(decode(&plain, 1).unwrap(), columns);
    }
}
