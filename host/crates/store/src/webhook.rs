//! Webhook sources' durable state: each source's log of accepted requests
//! and the idempotency keys it has seen (schema migration 8).
//!
//! A request is in the log once [`Store::accept_webhook`] returns, before
//! weft answers 2xx; the source's pipeline then reads it back with
//! [`Store::webhook_requests_after`] and stores its messages per sink like
//! a transaction's. Only when every sink has stored it is it pruned.

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreError, now_ms};
use weft_core::change::Row;

/// One request a webhook source accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookRequest {
    /// Its position in the source's log, from 1, in acceptance order.
    pub seq: u64,
    /// The id weft gave it (a UUID); its messages' idempotency keys derive from it.
    pub request_id: String,
    /// Its messages' records, in the order the request listed them.
    pub records: Vec<Row>,
    /// When it was accepted, in milliseconds since the Unix epoch.
    pub accepted_at: i64,
}

/// What became of a request handed to [`Store::accept_webhook`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acceptance {
    /// Stored at this position of the source's log.
    Stored {
        /// The request's position in the log.
        seq: u64,
    },
    /// Its idempotency key was seen within the retention: nothing stored.
    Duplicate {
        /// How many messages the first request with the key carried.
        messages: u64,
    },
}

impl Store {
    /// Durably stores a request of the webhook source `source` carrying
    /// `records`, under `request_id`, unless `idempotency_key` was seen less
    /// than `retention_ms` ago. Durable when it returns.
    pub fn accept_webhook(
        &self,
        source: &str,
        request_id: &str,
        records: &[Row],
        idempotency_key: Option<&str>,
        retention_ms: u64,
    ) -> Result<Acceptance, StoreError> {
        let now = now_ms();
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        if let Some(key) = idempotency_key {
            let seen: Option<i64> = tx
                .prepare_cached(
                    "SELECT messages FROM webhook_idempotency_keys
                     WHERE source = ?1 AND key = ?2 AND accepted_at > ?3",
                )?
                .query_row(
                    params![source, key, now.saturating_sub(retention_ms as i64)],
                    |row| row.get(0),
                )
                .optional()?;
            if let Some(messages) = seen {
                return Ok(Acceptance::Duplicate {
                    messages: messages as u64,
                });
            }
        }
        let seq: i64 = tx
            .prepare_cached(
                "INSERT INTO webhook_sources (source, last_seq) VALUES (?1, 1)
                 ON CONFLICT (source) DO UPDATE SET last_seq = last_seq + 1
                 RETURNING last_seq",
            )?
            .query_row(params![source], |row| row.get(0))?;
        let records_json = serde_json::to_string(records).expect("JSON rows always serialise");
        tx.prepare_cached(
            "INSERT INTO webhook_requests (source, seq, request_id, records, accepted_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![source, seq, request_id, records_json, now])?;
        if let Some(key) = idempotency_key {
            // An expired row of the same key is replaced.
            tx.prepare_cached(
                "INSERT OR REPLACE INTO webhook_idempotency_keys
                     (source, key, seq, messages, accepted_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![source, key, seq, records.len() as i64, now])?;
        }
        tx.commit()?;
        Ok(Acceptance::Stored { seq: seq as u64 })
    }

    /// Up to `limit` requests of `source` after position `after`, in order.
    pub fn webhook_requests_after(
        &self,
        source: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<WebhookRequest>, StoreError> {
        let conn = self.lock();
        let mut query = conn.prepare_cached(
            "SELECT seq, request_id, records, accepted_at FROM webhook_requests
             WHERE source = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
        )?;
        let rows = query.query_map(params![source, after as i64, limit], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, i64>(3)?,
            ))
        })?;
        rows.map(|row| {
            let (seq, request_id, records, accepted_at) = row?;
            let records = serde_json::from_str(&records).map_err(|error| StoreError::Corrupt {
                what: "webhook request",
                detail: format!("records of {source} #{seq}: {error}"),
            })?;
            Ok(WebhookRequest {
                seq: seq as u64,
                request_id,
                records,
                accepted_at,
            })
        })
        .collect()
    }

    /// Deletes the requests of `source` up to position `through`, which
    /// every sink of the source has stored; returns how many.
    pub fn prune_webhook_requests(&self, source: &str, through: u64) -> Result<usize, StoreError> {
        let conn = self.lock();
        Ok(conn
            .prepare_cached("DELETE FROM webhook_requests WHERE source = ?1 AND seq <= ?2")?
            .execute(params![source, through as i64])?)
    }

    /// Forgets up to `limit` idempotency keys of `source` seen more than
    /// `retention_ms` ago; returns how many. Small batches keep the lock
    /// short for requests waiting to be accepted.
    pub fn prune_webhook_keys(
        &self,
        source: &str,
        retention_ms: u64,
        limit: u32,
    ) -> Result<usize, StoreError> {
        let cutoff = now_ms().saturating_sub(retention_ms as i64);
        let conn = self.lock();
        Ok(conn
            .prepare_cached(
                "DELETE FROM webhook_idempotency_keys WHERE rowid IN (
                     SELECT rowid FROM webhook_idempotency_keys
                     WHERE source = ?1 AND accepted_at <= ?2 LIMIT ?3)",
            )?
            .execute(params![source, cutoff, limit])?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: i64) -> Row {
        serde_json::json!({ "n": n }).as_object().unwrap().clone()
    }

    #[test]
    fn requests_come_back_in_acceptance_order_and_positions_never_repeat() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("weft.db")).unwrap();
        for n in 1..=3 {
            let accepted = store
                .accept_webhook("hooks", &format!("r{n}"), &[record(n)], None, 1000)
                .unwrap();
            assert_eq!(accepted, Acceptance::Stored { seq: n as u64 });
        }
        let after_one = store.webhook_requests_after("hooks", 1, 10).unwrap();
        let seqs: Vec<u64> = after_one.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, vec![2, 3]);
        assert_eq!(after_one[0].records, vec![record(2)]);
        assert_eq!(store.prune_webhook_requests("hooks", 3).unwrap(), 3);
        // A pruned log still continues after its last position.
        let next = store
            .accept_webhook("hooks", "r4", &[record(4)], None, 1000)
            .unwrap();
        assert_eq!(next, Acceptance::Stored { seq: 4 });
        assert!(
            store
                .webhook_requests_after("other", 0, 10)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_repeated_key_is_a_duplicate_until_it_expires() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("weft.db")).unwrap();
        let two = [record(1), record(2)];
        let first = store
            .accept_webhook("hooks", "a", &two, Some("k1"), 60_000)
            .unwrap();
        assert_eq!(first, Acceptance::Stored { seq: 1 });
        let again = store
            .accept_webhook("hooks", "b", &[record(3)], Some("k1"), 60_000)
            .unwrap();
        assert_eq!(again, Acceptance::Duplicate { messages: 2 });
        // Another source has keys of its own.
        let elsewhere = store
            .accept_webhook("other", "c", &[record(3)], Some("k1"), 60_000)
            .unwrap();
        assert_eq!(elsewhere, Acceptance::Stored { seq: 1 });
        assert_eq!(
            store.webhook_requests_after("hooks", 0, 10).unwrap().len(),
            1
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
        // Past a (tiny) retention the key is forgotten, and then pruned.
        let expired = store
            .accept_webhook("hooks", "d", &[record(4)], Some("k1"), 1)
            .unwrap();
        assert_eq!(expired, Acceptance::Stored { seq: 2 });
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(store.prune_webhook_keys("hooks", 1, 100).unwrap(), 1);
        assert_eq!(store.prune_webhook_keys("other", 60_000, 100).unwrap(), 0);
    }
}
