//! One message per group in flight, for pull consumers and push workers
//! alike: ack ids, leasing a sink's group heads in commit order, promoting
//! a group's next message once its head leaves, and moving a head to the
//! dead letters.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use rusqlite::{OptionalExtension, Transaction, params};
use uuid::Uuid;

use super::codec::{MessageColumns, StoredPayload, route_from_column};
use super::spill::{Attempted, insert_dead_letter};
use super::{StoreError, lsn_from_sql, segments};
use weft_core::lsn::Lsn;
use weft_core::route::Route;

/// The lease on one delivered message: valid until the message is acked,
/// nacked, or handed out again after its visibility timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AckId(Uuid);

impl AckId {
    /// A fresh, random ack id.
    pub fn new() -> AckId {
        AckId(Uuid::new_v4())
    }
}

impl Default for AckId {
    fn default() -> Self {
        AckId::new()
    }
}

impl fmt::Display for AckId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// The text was not a UUID, the only form ack ids take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid ack id {0:?}: ack ids are UUIDs, as returned by receive")]
pub struct ParseAckIdError(pub String);

impl FromStr for AckId {
    type Err = ParseAckIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s)
            .map(AckId)
            .map_err(|_| ParseAckIdError(s.to_string()))
    }
}

impl serde::Serialize for AckId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A message leased by [`lease_heads`].
pub(super) struct Leased {
    pub(super) ack_id: AckId,
    pub(super) commit_lsn: Lsn,
    pub(super) commit_idx: u32,
    pub(super) group_id: String,
    pub(super) idempotency_key: String,
    pub(super) payload: StoredPayload,
    /// The payload's size as stored, in bytes.
    pub(super) size_bytes: usize,
    pub(super) route: Route,
    /// Deliveries so far, this one included.
    pub(super) deliver_count: u32,
}

/// The one path to "the next deliverable messages" of a sink, for pull
/// consumers and push workers alike: up to `limit` group heads that are
/// visible at `now`, in commit order, each leased until `until` under a
/// fresh ack id with one more delivery counted. Stops before the payloads
/// leased would pass `max_bytes` in all; with `first_regardless`, the first
/// message is leased whatever its size. When `pull_messages` has too few,
/// the sink's next segments join it (see [`super::segments`]).
pub(super) fn lease_heads(
    tx: &Transaction<'_>,
    sink: &str,
    now: i64,
    until: i64,
    limit: u32,
    max_bytes: usize,
    first_regardless: bool,
) -> Result<Vec<Leased>, StoreError> {
    let mut lease = Lease {
        leased: Vec::new(),
        total_bytes: 0,
        max_bytes,
        first_regardless,
    };
    let mut materialized = 0;
    loop {
        let wanted = limit.saturating_sub(lease.leased.len() as u32);
        let full = lease_visible_heads(tx, sink, now, until, wanted, &mut lease)?;
        // A lease that ends at once (a zero wait) leaves its messages
        // visible: looking again would hand them out twice.
        let more_helps = !full && until > now && lease.leased.len() < limit as usize;
        if !more_helps
            || materialized == segments::MATERIALIZE_PER_LEASE
            || !segments::materialize_next(tx, sink)?
        {
            return Ok(lease.leased);
        }
        materialized += 1;
    }
}

/// [`lease_heads`] over `pull_messages` rows alone: a sink read in place
/// (see [`super::pull_log`]) never moves its segments into that table.
pub(super) fn lease_row_heads(
    tx: &Transaction<'_>,
    sink: &str,
    now: i64,
    until: i64,
    limit: u32,
) -> Result<Vec<Leased>, StoreError> {
    let mut lease = Lease {
        leased: Vec::new(),
        total_bytes: 0,
        max_bytes: usize::MAX,
        first_regardless: true,
    };
    lease_visible_heads(tx, sink, now, until, limit, &mut lease)?;
    Ok(lease.leased)
}

/// What [`lease_heads`] has leased so far, and its byte budget.
struct Lease {
    leased: Vec<Leased>,
    total_bytes: usize,
    max_bytes: usize,
    first_regardless: bool,
}

/// Leases up to `limit` visible heads of `pull_messages` into `lease`;
/// true when its byte budget stopped it.
fn lease_visible_heads(
    tx: &Transaction<'_>,
    sink: &str,
    now: i64,
    until: i64,
    limit: u32,
    lease: &mut Lease,
) -> Result<bool, StoreError> {
    let mut heads = tx.prepare_cached(
        "SELECT id, payload, deliver_count, commit_lsn, commit_idx, group_id, idempotency_key,
                payload_bytes, content_type, route
         FROM pull_messages INDEXED BY pull_messages_heads
         WHERE sink = ?1 AND head = 1
           AND (not_visible_until IS NULL OR not_visible_until <= ?2)
         ORDER BY commit_lsn, commit_idx
         LIMIT ?3",
    )?;
    let mut take = tx.prepare_cached(
        "UPDATE pull_messages
         SET ack_id = ?2, not_visible_until = ?3, deliver_count = deliver_count + 1,
             last_delivered_at = ?4, first_attempt_at = coalesce(first_attempt_at, ?4)
         WHERE id = ?1",
    )?;
    let rows = heads
        .query_map(params![sink, now, limit], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, u32>(2)?,
                row.get::<_, i64>(3)?,
                row.get::<_, u32>(4)?,
                row.get::<_, String>(5)?,
                row.get::<_, String>(6)?,
                (
                    row.get::<_, Option<Vec<u8>>>(7)?,
                    row.get::<_, Option<String>>(8)?,
                    row.get::<_, Option<String>>(9)?,
                ),
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    for (id, payload, deliver_count, lsn, commit_idx, group_id, idempotency_key, extra) in rows {
        let (bytes, content_type, route) = extra;
        let size = bytes.as_ref().map_or(payload.len(), Vec::len);
        let may_exceed = lease.first_regardless && lease.leased.is_empty();
        if !may_exceed && lease.total_bytes.saturating_add(size) > lease.max_bytes {
            return Ok(true);
        }
        lease.total_bytes = lease.total_bytes.saturating_add(size);
        let payload = StoredPayload::from_columns(payload, bytes, content_type);
        let route = route_from_column(route, || format!("message {id}"))?;
        let ack_id = AckId::new();
        take.execute(params![id, ack_id.to_string(), until, now])?;
        lease.leased.push(Leased {
            ack_id,
            commit_lsn: lsn_from_sql(lsn)?,
            commit_idx,
            group_id,
            idempotency_key,
            payload,
            size_bytes: size,
            route,
            deliver_count: deliver_count.saturating_add(1),
        });
    }
    Ok(false)
}

/// Which stored message [`move_to_dead_letters`] moves.
pub(super) enum Held {
    /// The message leased under this ack id.
    Lease(AckId),
    /// The message with this row id.
    Row(i64),
}

/// Moves one message of `sink` to the dead letters with `error` and lets
/// the next message of its group go. False when no such message is stored.
pub(super) fn move_to_dead_letters(
    tx: &Transaction<'_>,
    sink: &str,
    held: Held,
    error: &str,
    now: i64,
) -> Result<bool, StoreError> {
    let (ack_id, row) = match held {
        Held::Lease(ack_id) => (Some(ack_id.to_string()), None),
        Held::Row(id) => (None, Some(id)),
    };
    let moved: Option<(MessageColumns<'static>, Attempted)> = tx
        .prepare_cached(
            "DELETE FROM pull_messages WHERE sink = ?1 AND (ack_id = ?2 OR id = ?3)
             RETURNING group_id, commit_lsn, commit_idx, idempotency_key, payload,
                       deliver_count, first_attempt_at, last_delivered_at,
                       payload_bytes, content_type, route",
        )?
        .query_row(params![sink, ack_id, row], |row| {
            let columns = MessageColumns {
                group_id: Cow::Owned(row.get(0)?),
                commit_lsn: row.get(1)?,
                commit_idx: row.get(2)?,
                idempotency_key: Cow::Owned(row.get(3)?),
                payload: Cow::Owned(row.get(4)?),
                payload_bytes: row.get::<_, Option<Vec<u8>>>(8)?.map(Cow::Owned),
                content_type: row.get::<_, Option<String>>(9)?.map(Cow::Owned),
                route: row.get::<_, Option<String>>(10)?.map(Cow::Owned),
            };
            let attempted = Attempted {
                attempts: row.get(5)?,
                first_at: row.get(6)?,
                last_at: row.get(7)?,
            };
            Ok((columns, attempted))
        })
        .optional()?;
    let Some((columns, attempted)) = moved else {
        return Ok(false);
    };
    insert_dead_letter(tx, sink, &columns, attempted, error, now)?;
    let group_id = columns.group_id;
    promote_next_head(tx, sink, &group_id)?;
    Ok(true)
}

/// Makes the earliest stored message of `group_id` its head, after the
/// previous head left (acked, delivered or dead-lettered).
pub(super) fn promote_next_head(
    tx: &Transaction<'_>,
    sink: &str,
    group_id: &str,
) -> Result<(), StoreError> {
    tx.prepare_cached(PROMOTE_NEXT_HEAD)?
        .execute(params![sink, group_id])?;
    Ok(())
}

/// [`promote_next_head`]'s statement.
pub(super) const PROMOTE_NEXT_HEAD: &str = "UPDATE pull_messages SET head = 1
     WHERE id = (SELECT id FROM pull_messages WHERE sink = ?1 AND group_id = ?2
                 ORDER BY commit_lsn, commit_idx LIMIT 1)
       AND head = 0";
