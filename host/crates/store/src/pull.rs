//! Pull-consumer messages: receive, ack and nack for Sequin Stream sinks.
//!
//! A message is handed out only while it is the *head* of its group (the
//! earliest message of the group still stored) and visible (never handed
//! out, nacked, or its lease expired). Receiving leases it: a fresh
//! [`AckId`], `not_visible_until = now + ack_wait`, one more delivery. Ack
//! deletes it and makes the next message of its group the head, so each
//! group has at most one message in flight and is consumed in commit order.

use std::time::Duration;

use rusqlite::{OptionalExtension, Transaction, params};
use serde_json::value::RawValue;

use std::collections::HashSet;

use super::codec::StoredPayload;
use super::heads::{AckId, Held, lease_row_heads, move_to_dead_letters, promote_next_head};
use super::pull_log::{Ask, with_window};
use super::spill::{Attempted, insert_dead_letter};
use super::{Store, StoreError, StoreTime, now_ms, segments};
use weft_core::metrics;

/// A message handed to a consumer by [`Store::receive`].
#[derive(Debug, Clone)]
pub struct Delivered {
    /// The lease to ack or nack it with.
    pub ack_id: AckId,
    /// The message JSON, as stored: handed on to the consumer without being
    /// parsed into a tree and written out again.
    pub payload: Box<RawValue>,
    /// How many times it has been handed out, this time included.
    pub deliver_count: u32,
}

impl Delivered {
    /// The message JSON, parsed.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.payload.get()).expect("a stored payload is JSON")
    }
}

/// What [`Store::ack`] or [`Store::nack`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckOutcome {
    /// How many messages were acked (deleted) or nacked (made visible).
    pub processed: usize,
    /// Ack ids that match no stored message: already acked or nacked, handed
    /// out again after their lease expired, or never issued. Their messages,
    /// if any, are untouched.
    pub unknown: Vec<AckId>,
}

/// How many messages a sink holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MessageCounts {
    /// All stored (not yet acked) messages.
    pub stored: u64,
    /// Messages handed out whose lease has not expired.
    pub in_flight: u64,
}

/// A sink's queue, as [`Store::queue_depths`] reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepths {
    /// Stored messages not handed out: waiting for delivery or a retry.
    pub buffered: u64,
    /// Messages handed out under a lease that has not run out.
    pub in_delivery: u64,
    /// Changes held for the sink's functions.
    pub held: u64,
}

/// The rules of a pull sink's [`Store::receive`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiveLimits {
    /// How long a handed-out message stays invisible to other receivers.
    pub ack_wait: Duration,
    /// Nothing more is handed out while this many messages are in flight.
    pub max_ack_pending: u32,
    /// A message already handed out this many times is dead-lettered
    /// instead of handed out again; `None`: unlimited.
    pub max_deliver: Option<u32>,
}

impl Store {
    /// Leases up to `batch_size` messages of `sink`, in commit order, at most
    /// one per group, each invisible to other receivers for
    /// `limits.ack_wait`. Hands out nothing more once `max_ack_pending`
    /// messages are in flight. Group heads delivered `max_deliver` times
    /// whose lease ended become dead letters first, which lets their group's
    /// next message go. Atomic: concurrent receivers get disjoint messages.
    ///
    /// The sink's `pull_messages` rows go first; its segments are read in
    /// place (see [`super::pull_log`]).
    pub fn receive(
        &self,
        sink: &str,
        batch_size: u32,
        limits: ReceiveLimits,
    ) -> Result<Vec<Delivered>, StoreError> {
        let ReceiveLimits {
            ack_wait,
            max_ack_pending,
            max_deliver,
        } = limits;
        let now = now_ms();
        let until = now.saturating_add(i64::try_from(ack_wait.as_millis()).unwrap_or(i64::MAX));
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let mut windows = self.logs.windows();
        let mut delivered = Vec::new();
        let mut exhausted = match max_deliver {
            Some(max_deliver) => dead_letter_exhausted(&tx, sink, now, max_deliver)?,
            None => 0,
        };
        let in_flight: u32 = tx
            .prepare_cached(
                "SELECT count(*) FROM (SELECT 1 FROM pull_messages
                 WHERE sink = ?1 AND not_visible_until > ?2 LIMIT ?3)",
            )?
            .query_row(params![sink, now, max_ack_pending], |row| row.get(0))?;
        let in_flight =
            u64::from(in_flight) + windows.get(sink).map_or(0, |window| window.in_flight(now));
        let room =
            u64::from(batch_size).min(u64::from(max_ack_pending).saturating_sub(in_flight)) as u32;
        if room > 0 {
            for leased in lease_row_heads(&tx, sink, now, until, room)? {
                delivered.push(Delivered {
                    ack_id: leased.ack_id,
                    payload: json_text(leased.payload)?,
                    deliver_count: leased.deliver_count,
                });
            }
        }
        if delivered.len() < room as usize {
            let blocked = groups_with_rows(&tx, sink)?;
            let ask = Ask {
                now,
                until,
                room: room as usize,
                max_deliver,
                blocked: &blocked,
            };
            exhausted += with_window(&mut windows, sink, |window| {
                let (mut exhausted, mut dirty) = (Vec::new(), HashSet::new());
                window.lease(&tx, sink, &ask, &mut delivered, &mut exhausted, &mut dirty)?;
                for member in &exhausted {
                    let error = exhausted_error(member.deliveries, max_deliver.unwrap_or(0));
                    let attempted = Attempted {
                        attempts: member.deliveries,
                        first_at: member.first_delivered_at,
                        last_at: member.last_delivered_at,
                    };
                    insert_dead_letter(&tx, sink, &member.columns(), attempted, &error, now)?;
                }
                window.persist(&tx, &dirty)?;
                Ok(exhausted.len())
            })?;
        }
        if let Err(error) = tx.commit() {
            // Memory may hold leases and settlements the store does not.
            windows.remove(sink);
            return Err(error.into());
        }
        metrics::count_dead_lettered(sink, "delivery", exhausted);
        metrics::count(metrics::DELIVER_ATTEMPTS, sink, delivered.len());
        Ok(delivered)
    }

    /// Settles the messages of `sink` whose current ack id is in `ack_ids`
    /// (a row is deleted, a segment's member marked) and makes the next
    /// message of each of their groups available.
    pub fn ack(&self, sink: &str, ack_ids: &[AckId]) -> Result<AckOutcome, StoreError> {
        let mut outcome = AckOutcome::default();
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let mut windows = self.logs.windows();
        let (in_window, mut stored_at) = if windows.contains_key(sink) {
            with_window(&mut windows, sink, |window| {
                let mut dirty = HashSet::new();
                let acked = window.ack(ack_ids, &mut dirty);
                window.persist(&tx, &dirty)?;
                Ok(acked)
            })?
        } else {
            (vec![false; ack_ids.len()], Vec::new())
        };
        {
            let mut delete = tx.prepare_cached(
                "DELETE FROM pull_messages WHERE sink = ?1 AND ack_id = ?2
                 RETURNING group_id, head, inserted_at",
            )?;
            for (ack_id, in_window) in ack_ids.iter().zip(in_window) {
                if in_window {
                    outcome.processed += 1;
                    continue;
                }
                let deleted: Option<(String, bool, i64)> = delete
                    .query_row(params![sink, ack_id.to_string()], |row| {
                        Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                    })
                    .optional()?;
                match deleted {
                    Some((group_id, was_head, inserted_at)) => {
                        outcome.processed += 1;
                        stored_at.push(inserted_at);
                        if was_head {
                            promote_next_head(&tx, sink, &group_id)?;
                        }
                    }
                    None => outcome.unknown.push(*ack_id),
                }
            }
        }
        if let Err(error) = tx.commit() {
            windows.remove(sink);
            return Err(error.into());
        }
        metrics::count(metrics::DELIVER_SUCCESSES, sink, outcome.processed);
        metrics::record_delivery_latency(sink, &stored_at);
        Ok(outcome)
    }

    /// Makes the messages of `sink` whose current ack id is in `ack_ids`
    /// visible again at once; their ack ids stop being valid.
    pub fn nack(&self, sink: &str, ack_ids: &[AckId]) -> Result<AckOutcome, StoreError> {
        let mut outcome = AckOutcome::default();
        let mut conn = self.lock();
        let in_window = match self.logs.windows().get_mut(sink) {
            Some(window) => window.nack(ack_ids),
            None => vec![false; ack_ids.len()],
        };
        let tx = conn.transaction()?;
        {
            let mut release = tx.prepare_cached(
                "UPDATE pull_messages SET not_visible_until = NULL, ack_id = NULL
                 WHERE sink = ?1 AND ack_id = ?2",
            )?;
            for (ack_id, in_window) in ack_ids.iter().zip(in_window) {
                if in_window {
                    outcome.processed += 1;
                    continue;
                }
                match release.execute(params![sink, ack_id.to_string()])? {
                    0 => outcome.unknown.push(*ack_id),
                    _ => outcome.processed += 1,
                }
            }
        }
        tx.commit()?;
        metrics::count(metrics::DELIVER_FAILURES, sink, outcome.processed);
        Ok(outcome)
    }

    /// How many messages `sink` holds, and how many of them are in flight.
    pub fn message_counts(&self, sink: &str) -> Result<MessageCounts, StoreError> {
        let conn = self.lock();
        let now = now_ms();
        let stored: i64 = conn
            .prepare_cached("SELECT count(*) FROM pull_messages WHERE sink = ?1")?
            .query_row(params![sink], |row| row.get(0))?;
        let in_flight: i64 = conn
            .prepare_cached(
                "SELECT count(*) FROM pull_messages WHERE sink = ?1 AND not_visible_until > ?2",
            )?
            .query_row(params![sink, now], |row| row.get(0))?;
        let in_window = self.logs.in_flight(sink, now);
        Ok(MessageCounts {
            stored: stored as u64 + segments::count(&conn, sink)?,
            in_flight: in_flight as u64 + in_window,
        })
    }

    /// How many messages of `sink` wait (stored, not handed out), how many
    /// are handed out and not settled, and how many changes are held for its
    /// functions: the queue gauges of `/metrics`.
    pub fn queue_depths(&self, sink: &str) -> Result<QueueDepths, StoreError> {
        let conn = self.lock();
        let (stored, in_delivery): (i64, i64) = conn
            .prepare_cached(
                "SELECT count(*),
                        count(*) FILTER (WHERE ack_id IS NOT NULL AND not_visible_until > ?2)
                 FROM pull_messages WHERE sink = ?1",
            )?
            .query_row(params![sink, now_ms()], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })?;
        let held: i64 = conn
            .prepare_cached("SELECT count(*) FROM held_changes WHERE sink = ?1")?
            .query_row(params![sink], |row| row.get(0))?;
        let in_window = self.logs.in_flight(sink, now_ms());
        let segmented = segments::count(&conn, sink)?;
        Ok(QueueDepths {
            buffered: (stored - in_delivery).max(0) as u64 + segmented.saturating_sub(in_window),
            in_delivery: in_delivery as u64 + in_window,
            held: held as u64,
        })
    }

    /// Time until the earliest lease or retry wait of `sink` that was still
    /// running at `looked_at` ends, which may make a message deliverable
    /// without any new append; `None` when there is none.
    ///
    /// Pass the time taken just before the last look for deliverable
    /// messages: a wait that ended between that look and this call gives
    /// zero (look again now) instead of being missed and sleeping forever.
    pub fn next_lease_expiry(
        &self,
        sink: &str,
        looked_at: StoreTime,
    ) -> Result<Option<Duration>, StoreError> {
        let conn = self.lock();
        let next: Option<i64> = conn
            .prepare_cached("SELECT min(not_visible_until) FROM pull_messages WHERE sink = ?1 AND not_visible_until > ?2")?
            .query_row(params![sink, looked_at.0], |row| row.get(0))?;
        let in_window = self.logs.next_expiry(sink, looked_at.0);
        let next = next.into_iter().chain(in_window).min();
        let now = now_ms();
        Ok(next.map(|at| Duration::from_millis((at - now).max(0) as u64)))
    }
}

/// A pull consumer's view of a payload: JSON as stored, a bytes payload as
/// its JSON view (see [`weft_core::payload::Payload::into_json_view`]). Pull
/// sinks only ever store JSON (the pipeline sees to it).
pub(super) fn json_text(payload: StoredPayload) -> Result<Box<RawValue>, StoreError> {
    let text = match payload {
        StoredPayload::Json(text) => text,
        bytes => bytes.to_payload()?.into_json_view().to_string(),
    };
    RawValue::from_string(text).map_err(|e| StoreError::Corrupt {
        what: "payload",
        detail: e.to_string(),
    })
}

/// The groups of `sink` with `pull_messages` rows: their segments' members
/// wait for them (see [`super::pull_log`]).
fn groups_with_rows(tx: &Transaction<'_>, sink: &str) -> Result<HashSet<String>, StoreError> {
    Ok(tx
        .prepare_cached("SELECT DISTINCT group_id FROM pull_messages WHERE sink = ?1")?
        .query_map(params![sink], |row| row.get(0))?
        .collect::<Result<_, _>>()?)
}

/// Why a message handed out `deliveries` times became a dead letter.
fn exhausted_error(deliveries: u32, max_deliver: u32) -> String {
    format!(
        "handed out {deliveries} times without an ack (max_deliver = {max_deliver}); \
         replay it once the consumer can process it"
    )
}

/// Moves the group heads of `sink` that were handed out `max_deliver` times
/// and are visible again (lease ended, or nacked) to the dead letters.
fn dead_letter_exhausted(
    tx: &Transaction<'_>,
    sink: &str,
    now: i64,
    max_deliver: u32,
) -> Result<usize, StoreError> {
    let exhausted: Vec<(i64, u32)> = tx
        .prepare_cached(
            "SELECT id, deliver_count FROM pull_messages INDEXED BY pull_messages_heads
             WHERE sink = ?1 AND head = 1 AND deliver_count >= ?3
               AND (not_visible_until IS NULL OR not_visible_until <= ?2)",
        )?
        .query_map(params![sink, now, max_deliver], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?
        .collect::<Result<_, _>>()?;
    let count = exhausted.len();
    for (id, deliveries) in exhausted {
        let error = exhausted_error(deliveries, max_deliver);
        move_to_dead_letters(tx, sink, Held::Row(id), &error, now)?;
    }
    Ok(count)
}
