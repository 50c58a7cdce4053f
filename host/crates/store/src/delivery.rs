//! Push sinks' side of the store: leasing the next deliverable messages for a
//! delivery worker, settling each attempt (delivered, retry later, dead
//! letter), and the dead letters themselves.
//!
//! A push sink's messages live in the same table as a pull consumer's and are
//! leased through the same path ([`super::pull::lease_heads`]): only group
//! heads, in commit order, so one message per group is in flight. A failed
//! attempt drops the lease and hides the message until its next attempt
//! time, which blocks its group and nothing else. A dead-lettered message
//! leaves the table so that its group proceeds.

use std::time::Duration;

use rusqlite::{OptionalExtension, Row, params};

use super::codec::{StoredPayload, payload_from_columns, route_from_column};
use super::heads::{AckId, Held, lease_heads, move_to_dead_letters};
use super::{Store, StoreError, lsn_from_sql, now_ms};
use weft_core::lsn::Lsn;
use weft_core::metrics;
use weft_core::{payload::Payload, route::Route};

/// A message leased to a push sink's delivery worker.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMessage {
    /// The lease: settle the attempt with it.
    pub ack_id: AckId,
    /// LSN of the commit of the change's transaction.
    pub commit_lsn: Lsn,
    /// Position of the change within its transaction.
    pub commit_idx: u32,
    /// The message's group.
    pub group_id: String,
    /// The message's idempotency key.
    pub idempotency_key: String,
    /// The message JSON as stored (text), or a transform's bytes.
    pub payload: StoredPayload,
    /// The payload's size in bytes (JSON text or bytes), for memory budgets.
    pub size_bytes: usize,
    /// The resolved routing keys (empty for sinks without routing).
    pub route: Route,
    /// Delivery attempts so far, this one included.
    pub attempt: u32,
}

/// A message that will not be delivered unless replayed.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    /// Its id among the sink's dead letters.
    pub id: i64,
    /// LSN of the commit of the change's transaction.
    pub commit_lsn: Lsn,
    /// Position of the change within its transaction.
    pub commit_idx: u32,
    /// The message's group.
    pub group_id: String,
    /// The message's idempotency key.
    pub idempotency_key: String,
    /// The message JSON, or a transform's bytes.
    pub payload: Payload,
    /// The resolved routing keys it was to be delivered with.
    pub route: Route,
    /// How many delivery attempts were made.
    pub attempts: u32,
    /// The error of the last attempt.
    pub last_error: String,
    /// When the first attempt was made (ms since the Unix epoch).
    pub first_attempt_at: Option<i64>,
    /// When the last attempt was made (ms since the Unix epoch).
    pub last_attempt_at: Option<i64>,
    /// When it was dead-lettered (ms since the Unix epoch).
    pub dead_at: i64,
    /// Where it failed: in the sink's functions (its payload is then the
    /// message before any function ran, and a replay runs the functions
    /// again) or in delivery.
    pub stage: FailedStage,
}

/// Where a dead letter failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailedStage {
    /// A function of the sink failed on the change (or trapped on it).
    Functions,
    /// The destination refused or could not take the message.
    Delivery,
}

impl FailedStage {
    /// The stage's name in the store and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            FailedStage::Functions => "functions",
            FailedStage::Delivery => "delivery",
        }
    }
}

impl Store {
    /// Leases up to `limit` deliverable messages of the push sink `sink`:
    /// group heads whose next attempt is due, in commit order, each held for
    /// `lease` (the worker settles every lease it takes; the duration only
    /// matters if it does not, which [`Store::release_leases`] repairs).
    pub fn lease_deliverable(
        &self,
        sink: &str,
        limit: u32,
        lease: Duration,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        self.lease_deliverable_within(sink, limit, lease, usize::MAX, true)
    }

    /// Like [`Store::lease_deliverable`], but stops before the leased
    /// payloads pass `max_bytes` in all. With `first_regardless`, the first
    /// message is leased whatever its size, so that a message bigger than
    /// any budget still comes out (for the caller to dead-letter).
    pub fn lease_deliverable_within(
        &self,
        sink: &str,
        limit: u32,
        lease: Duration,
        max_bytes: usize,
        first_regardless: bool,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let now = now_ms();
        let until = now.saturating_add(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX));
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let leased = lease_heads(&tx, sink, now, until, limit, max_bytes, first_regardless)?;
        tx.commit()?;
        metrics::count(metrics::DELIVER_ATTEMPTS, sink, leased.len());
        Ok(leased
            .into_iter()
            .map(|l| StoredMessage {
                ack_id: l.ack_id,
                commit_lsn: l.commit_lsn,
                commit_idx: l.commit_idx,
                group_id: l.group_id,
                idempotency_key: l.idempotency_key,
                payload: l.payload,
                size_bytes: l.size_bytes,
                route: l.route,
                attempt: l.deliver_count,
            })
            .collect())
    }

    /// Drops every lease of `sink`, making its messages deliverable now. A
    /// push sink's worker calls it when it starts: leases left by a previous
    /// process belong to attempts that died with it. Returns how many.
    pub fn release_leases(&self, sink: &str) -> Result<u64, StoreError> {
        let conn = self.lock();
        let released = conn
            .prepare_cached(
                "UPDATE pull_messages SET ack_id = NULL, not_visible_until = NULL
                 WHERE sink = ?1 AND ack_id IS NOT NULL",
            )?
            .execute(params![sink])?;
        Ok(released as u64)
    }

    /// Ends the lease `ack_id` with a failure: the message keeps its place
    /// at the head of its group and becomes deliverable again after `delay`.
    /// Returns false when the lease is no longer held.
    pub fn retry_later(
        &self,
        sink: &str,
        ack_id: AckId,
        error: &str,
        delay: Duration,
    ) -> Result<bool, StoreError> {
        let at = now_ms().saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
        let conn = self.lock();
        let updated = conn
            .prepare_cached(
                "UPDATE pull_messages SET ack_id = NULL, not_visible_until = ?3, last_error = ?4
                 WHERE sink = ?1 AND ack_id = ?2",
            )?
            .execute(params![sink, ack_id.to_string(), at, error])?;
        metrics::count(metrics::DELIVER_FAILURES, sink, updated);
        Ok(updated == 1)
    }

    /// Ends the lease `ack_id` for good: moves the message to the dead
    /// letters with `error` and lets the next message of its group go.
    /// Returns false when the lease is no longer held.
    pub fn dead_letter(&self, sink: &str, ack_id: AckId, error: &str) -> Result<bool, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let moved = move_to_dead_letters(&tx, sink, Held::Lease(ack_id), error, now_ms())?;
        tx.commit()?;
        metrics::count(metrics::DELIVER_FAILURES, sink, usize::from(moved));
        metrics::count_dead_lettered(sink, "delivery", usize::from(moved));
        Ok(moved)
    }

    /// Up to `limit` dead letters of `sink` with an id above `after`, oldest first.
    pub fn dead_letters(
        &self,
        sink: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters
             WHERE sink = ?1 AND id > ?2 ORDER BY id LIMIT ?3"
        ))?;
        let rows = stmt
            .query_map(params![sink, after, limit], dead_letter_row)?
            .collect::<Result<Vec<_>, _>>()?;
        rows.into_iter().map(DeadLetterRow::parse).collect()
    }

    /// The dead letter `id` of `sink`.
    pub fn dead_letter_by_id(&self, sink: &str, id: i64) -> Result<Option<DeadLetter>, StoreError> {
        let conn = self.lock();
        let row = conn
            .prepare_cached(&format!(
                "SELECT {DEAD_LETTER_COLUMNS} FROM dead_letters WHERE sink = ?1 AND id = ?2"
            ))?
            .query_row(params![sink, id], dead_letter_row)
            .optional()?;
        row.map(DeadLetterRow::parse).transpose()
    }

    /// How many dead letters `sink` holds.
    pub fn dead_letter_count(&self, sink: &str) -> Result<u64, StoreError> {
        let conn = self.lock();
        let count: i64 = conn
            .prepare_cached("SELECT count(*) FROM dead_letters WHERE sink = ?1")?
            .query_row(params![sink], |row| row.get(0))?;
        Ok(count as u64)
    }

    /// Puts the dead letters `ids` of `sink` (all of them when `ids` is
    /// `None`) back in line for delivery with a fresh attempt count, at their
    /// commit position within their group. Those that failed in the sink's
    /// functions go back to the held changes, to run through the functions
    /// again. Returns the ids replayed.
    pub fn replay_dead_letters(
        &self,
        sink: &str,
        ids: Option<&[i64]>,
    ) -> Result<Vec<i64>, StoreError> {
        let now = now_ms();
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let mut replayed = Vec::new();
        let mut restored_count = 0;
        {
            let ids: Vec<i64> = match ids {
                Some(ids) => ids.to_vec(),
                None => tx
                    .prepare_cached("SELECT id FROM dead_letters WHERE sink = ?1 ORDER BY id")?
                    .query_map(params![sink], |row| row.get(0))?
                    .collect::<Result<_, _>>()?,
            };
            // The replayed message goes before later stored messages of its
            // group, unless one of them is in flight right now: then it is
            // promoted when that one settles (it is the earliest by then).
            let mut restore = tx.prepare_cached(
                "INSERT INTO pull_messages
                     (sink, commit_lsn, commit_idx, group_id, idempotency_key, payload, head,
                      inserted_at, payload_bytes, content_type, route)
                 SELECT sink, commit_lsn, commit_idx, group_id, idempotency_key, payload,
                        NOT EXISTS (SELECT 1 FROM pull_messages p
                                    WHERE p.sink = d.sink AND p.group_id = d.group_id
                                      AND ((p.commit_lsn, p.commit_idx) < (d.commit_lsn, d.commit_idx)
                                           OR (p.ack_id IS NOT NULL AND p.not_visible_until > ?3))),
                        ?3, payload_bytes, content_type, route
                 FROM dead_letters d WHERE d.sink = ?1 AND d.id = ?2 AND d.stage = 'delivery'
                 ON CONFLICT (sink, commit_lsn, commit_idx) DO NOTHING
                 RETURNING group_id, commit_lsn, commit_idx, head",
            )?;
            let mut demote = tx.prepare_cached(
                "UPDATE pull_messages SET head = 0
                 WHERE sink = ?1 AND group_id = ?2 AND head = 1
                   AND (commit_lsn, commit_idx) > (?3, ?4)",
            )?;
            let mut remove =
                tx.prepare_cached("DELETE FROM dead_letters WHERE sink = ?1 AND id = ?2")?;
            for id in ids {
                if super::held::rehold_function_dead_letter(&tx, sink, id, now)? {
                    if remove.execute(params![sink, id])? == 1 {
                        replayed.push(id);
                    }
                    continue;
                }
                let restored: Option<(String, i64, i64, bool)> = restore
                    .query_row(params![sink, id, now], |row| {
                        Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
                    })
                    .optional()?;
                if let Some((group_id, lsn, idx, head)) = &restored
                    && *head
                {
                    demote.execute(params![sink, group_id, lsn, idx])?;
                }
                restored_count += usize::from(restored.is_some());
                // A dead letter whose message is stored again (the same
                // change replayed from the slot) is simply dropped.
                if remove.execute(params![sink, id])? == 1 {
                    replayed.push(id);
                }
            }
        }
        tx.commit()?;
        // Replayed into the queue: they enter it again (held ones count when
        // their functions run again).
        metrics::count(metrics::MESSAGES_INGESTED, sink, restored_count);
        Ok(replayed)
    }

    /// Deletes the dead letter `id` of `sink`; false when there is none.
    pub fn discard_dead_letter(&self, sink: &str, id: i64) -> Result<bool, StoreError> {
        let conn = self.lock();
        let deleted = conn
            .prepare_cached("DELETE FROM dead_letters WHERE sink = ?1 AND id = ?2")?
            .execute(params![sink, id])?;
        Ok(deleted == 1)
    }
}

const DEAD_LETTER_COLUMNS: &str = "id, commit_lsn, commit_idx, group_id, idempotency_key, payload, \
     attempts, last_error, first_attempt_at, last_attempt_at, dead_at, payload_bytes, content_type, \
     route, stage";

/// A dead-letter row before its LSN and payload are checked.
struct DeadLetterRow {
    id: i64,
    commit_lsn: i64,
    commit_idx: u32,
    group_id: String,
    idempotency_key: String,
    payload: String,
    payload_bytes: Option<Vec<u8>>,
    content_type: Option<String>,
    route: Option<String>,
    stage: String,
    attempts: u32,
    last_error: String,
    first_attempt_at: Option<i64>,
    last_attempt_at: Option<i64>,
    dead_at: i64,
}

fn dead_letter_row(row: &Row<'_>) -> rusqlite::Result<DeadLetterRow> {
    Ok(DeadLetterRow {
        id: row.get(0)?,
        commit_lsn: row.get(1)?,
        commit_idx: row.get(2)?,
        group_id: row.get(3)?,
        idempotency_key: row.get(4)?,
        payload: row.get(5)?,
        attempts: row.get(6)?,
        last_error: row.get(7)?,
        first_attempt_at: row.get(8)?,
        last_attempt_at: row.get(9)?,
        dead_at: row.get(10)?,
        payload_bytes: row.get(11)?,
        content_type: row.get(12)?,
        route: row.get(13)?,
        stage: row.get(14)?,
    })
}

impl DeadLetterRow {
    fn parse(self) -> Result<DeadLetter, StoreError> {
        let id = self.id;
        let payload =
            payload_from_columns(&self.payload, self.payload_bytes, self.content_type, || {
                format!("dead letter {id}")
            })?;
        let route = route_from_column(self.route, || format!("dead letter {id}"))?;
        Ok(DeadLetter {
            id: self.id,
            commit_lsn: lsn_from_sql(self.commit_lsn)?,
            commit_idx: self.commit_idx,
            group_id: self.group_id,
            idempotency_key: self.idempotency_key,
            payload,
            route,
            attempts: self.attempts,
            last_error: self.last_error,
            first_attempt_at: self.first_attempt_at,
            last_attempt_at: self.last_attempt_at,
            dead_at: self.dead_at,
            stage: if self.stage == "functions" {
                FailedStage::Functions
            } else {
                FailedStage::Delivery
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{NewMessage, SinkBatch, StoreTime};

    const LEASE: Duration = Duration::from_secs(30);

    fn open_temp() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("weft.db")).unwrap();
        (dir, store)
    }

    fn append(store: &Store, sink: &str, messages: &[(u64, &str)]) {
        let messages: Vec<NewMessage> = messages
            .iter()
            .map(|&(lsn, group)| NewMessage {
                commit_lsn: Lsn(lsn),
                commit_idx: 0,
                group_id: group.to_string(),
                idempotency_key: weft_core::message::idempotency_key(Lsn(lsn), 0),
                payload: Payload::Json(json!({"lsn": lsn})).into(),
                route: None,
            })
            .collect();
        let last = Lsn(messages
            .iter()
            .map(|m: &NewMessage| m.commit_lsn.0)
            .max()
            .unwrap_or(0));
        store
            .append(&[SinkBatch::of(sink, messages)], last)
            .unwrap();
    }

    fn lsns(messages: &[StoredMessage]) -> Vec<u64> {
        messages.iter().map(|m| m.commit_lsn.0).collect()
    }

    #[test]
    fn a_retried_message_blocks_only_its_group_until_due() {
        let (_dir, store) = open_temp();
        append(&store, "s", &[(10, "a"), (20, "b"), (30, "a"), (40, "b")]);
        let first = store.lease_deliverable("s", 10, LEASE).unwrap();
        assert_eq!(lsns(&first), vec![10, 20]);
        assert_eq!(first[0].attempt, 1);
        // a fails, b is delivered.
        assert!(
            store
                .retry_later("s", first[0].ack_id, "HTTP 500", Duration::from_millis(300))
                .unwrap()
        );
        assert_eq!(store.ack("s", &[first[1].ack_id]).unwrap().processed, 1);
        // b proceeds; a's next message waits behind a's failed head.
        assert_eq!(
            lsns(&store.lease_deliverable("s", 10, LEASE).unwrap()),
            vec![40]
        );
        assert!(store.lease_deliverable("s", 10, LEASE).unwrap().is_empty());
        let looked_at = StoreTime::now();
        let due = store
            .next_lease_expiry("s", looked_at)
            .unwrap()
            .expect("a retry is due later");
        assert!(due <= Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(350));
        // The worker's race: the retry fell due after its last look. It
        // must hear "now", not "nothing pending" (which slept forever).
        assert_eq!(
            store.next_lease_expiry("s", looked_at).unwrap(),
            Some(Duration::ZERO)
        );
        let again = store.lease_deliverable("s", 10, LEASE).unwrap();
        assert_eq!(lsns(&again), vec![10]);
        assert_eq!(again[0].attempt, 2, "attempts count across retries");
        // The old lease is void.
        assert!(
            !store
                .retry_later("s", first[0].ack_id, "late", Duration::ZERO)
                .unwrap()
        );
    }

    #[test]
    fn dead_lettering_frees_the_group_and_keeps_the_failure() {
        let (_dir, store) = open_temp();
        append(&store, "s", &[(10, "a"), (20, "a")]);
        let first = store.lease_deliverable("s", 10, LEASE).unwrap();
        assert_eq!(lsns(&first), vec![10]);
        store
            .retry_later("s", first[0].ack_id, "HTTP 500", Duration::ZERO)
            .unwrap();
        let second = store.lease_deliverable("s", 10, LEASE).unwrap();
        assert!(
            store
                .dead_letter("s", second[0].ack_id, "HTTP 503")
                .unwrap()
        );
        assert!(!store.dead_letter("s", second[0].ack_id, "twice").unwrap());
        assert_eq!(
            lsns(&store.lease_deliverable("s", 10, LEASE).unwrap()),
            vec![20]
        );

        let dead = store.dead_letters("s", 0, 100).unwrap();
        assert_eq!(dead.len(), 1);
        let letter = &dead[0];
        assert_eq!(letter.commit_lsn, Lsn(10));
        assert_eq!(letter.group_id, "a");
        assert_eq!(letter.attempts, 2);
        assert_eq!(letter.last_error, "HTTP 503");
        assert_eq!(letter.payload, Payload::Json(json!({"lsn": 10})));
        assert!(letter.first_attempt_at.unwrap() <= letter.last_attempt_at.unwrap());
        assert_eq!(
            store.dead_letter_by_id("s", letter.id).unwrap().as_ref(),
            Some(letter)
        );
        assert_eq!(store.dead_letter_by_id("other", letter.id).unwrap(), None);
        assert_eq!(store.dead_letter_count("s").unwrap(), 1);
    }

    #[test]
    fn replay_puts_a_dead_letter_back_at_its_place_in_the_group() {
        let (_dir, store) = open_temp();
        append(&store, "s", &[(10, "a"), (20, "a"), (30, "a")]);
        let first = store.lease_deliverable("s", 10, LEASE).unwrap();
        store.dead_letter("s", first[0].ack_id, "boom").unwrap();
        let id = store.dead_letters("s", 0, 10).unwrap()[0].id;
        // 20 is now the head, not in flight: the replayed 10 goes first again.
        assert_eq!(
            store.replay_dead_letters("s", Some(&[id])).unwrap(),
            vec![id]
        );
        assert_eq!(store.dead_letter_count("s").unwrap(), 0);
        let again = store.lease_deliverable("s", 10, LEASE).unwrap();
        assert_eq!(lsns(&again), vec![10]);
        assert_eq!(again[0].attempt, 1, "a replay starts a fresh attempt count");

        // Dead-letter 10 again while 20 is in flight: the replay waits for 20.
        store.dead_letter("s", again[0].ack_id, "boom").unwrap();
        let twenty = store.lease_deliverable("s", 10, LEASE).unwrap();
        assert_eq!(lsns(&twenty), vec![20]);
        assert_eq!(store.replay_dead_letters("s", None).unwrap().len(), 1);
        assert!(
            store.lease_deliverable("s", 10, LEASE).unwrap().is_empty(),
            "one message per group in flight"
        );
        store.ack("s", &[twenty[0].ack_id]).unwrap();
        assert_eq!(
            lsns(&store.lease_deliverable("s", 10, LEASE).unwrap()),
            vec![10]
        );
        assert!(
            store
                .replay_dead_letters("s", Some(&[999]))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn discard_deletes_and_release_leases_recovers_a_dead_worker() {
        let (_dir, store) = open_temp();
        append(&store, "s", &[(10, "a"), (20, "b")]);
        let first = store.lease_deliverable("s", 1, LEASE).unwrap();
        store.dead_letter("s", first[0].ack_id, "boom").unwrap();
        let id = store.dead_letters("s", 0, 10).unwrap()[0].id;
        assert!(store.discard_dead_letter("s", id).unwrap());
        assert!(!store.discard_dead_letter("s", id).unwrap());

        let leased = store.lease_deliverable("s", 10, LEASE).unwrap();
        assert_eq!(lsns(&leased), vec![20]);
        assert!(store.lease_deliverable("s", 10, LEASE).unwrap().is_empty());
        assert_eq!(store.release_leases("s").unwrap(), 1);
        let again = store.lease_deliverable("s", 10, LEASE).unwrap();
        assert_eq!(lsns(&again), vec![20]);
        assert_eq!(again[0].attempt, 2);
    }
}
