//! Changes a sink's functions have not turned into messages yet, and dead
//! letters of changes its functions failed on.
//!
//! A change is *held* (kept as its message JSON from before any function
//! ran) when a function failed on it transiently (it is due again after a
//! backoff), when an earlier change of its group is held (so its group
//! stays in commit order), while its sink is quarantined, and when a
//! function dead letter is replayed. The pipeline releases due held
//! changes through the functions again ([`Store::due_held`],
//! [`Store::settle_held`]); the slot never waits for them.

use std::collections::HashSet;
use std::time::Duration;

use rusqlite::{OptionalExtension, Transaction, params};
use serde_json::Value;

use super::{NewMessage, Store, StoreError, lsn_from_sql, lsn_to_sql, now_ms};
use weft_core::lsn::Lsn;

/// A change held for a sink's functions.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldChange {
    /// LSN of the commit of the change's transaction.
    pub commit_lsn: Lsn,
    /// Position of the change within its transaction.
    pub commit_idx: u32,
    /// The change's message group.
    pub group_id: String,
    /// The message JSON before any function ran.
    pub message: Value,
    /// Function attempts that failed so far.
    pub attempts: u32,
    /// The last function error, if any attempt failed.
    pub last_error: Option<String>,
}

/// A change to hold (or to hold again), due after `retry_in`.
#[derive(Debug, Clone, PartialEq)]
pub struct Hold {
    /// The change and its failure so far.
    pub change: HeldChange,
    /// How long until it may be tried again; zero for "as soon as its
    /// group's earlier changes are through".
    pub retry_in: Duration,
}

/// A change the sink's functions failed on for good.
#[derive(Debug, Clone, PartialEq)]
pub struct NewDeadLetter {
    /// LSN of the commit of the change's transaction.
    pub commit_lsn: Lsn,
    /// Position of the change within its transaction.
    pub commit_idx: u32,
    /// The change's message group.
    pub group_id: String,
    /// The change's idempotency key.
    pub idempotency_key: String,
    /// The message JSON before any function ran (what a replay runs again).
    pub message: Value,
    /// Function attempts made.
    pub attempts: u32,
    /// What the function reported, or why the host failed the call.
    pub error: String,
}

/// What became of a round of released held changes: stored in one
/// transaction by [`Store::settle_held`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeldSettlement {
    /// Messages the functions produced, to deliver.
    pub messages: Vec<NewMessage>,
    /// Changes that failed for good.
    pub dead_letters: Vec<NewDeadLetter>,
    /// Changes to hold again (a transient failure).
    pub holds: Vec<Hold>,
    /// Held changes now settled (delivered as messages, dropped by a
    /// filter, or dead-lettered): they leave the held changes.
    pub released: Vec<(Lsn, u32)>,
}

impl Store {
    /// Whether `sink` holds any change.
    pub fn has_held(&self, sink: &str) -> Result<bool, StoreError> {
        let conn = self.read();
        let found: Option<i64> = conn
            .prepare_cached("SELECT 1 FROM held_changes WHERE sink = ?1 LIMIT 1")?
            .query_row(params![sink], |row| row.get(0))
            .optional()?;
        Ok(found.is_some())
    }

    /// How many changes `sink` holds.
    pub fn held_count(&self, sink: &str) -> Result<u64, StoreError> {
        let conn = self.lock();
        let count: i64 = conn
            .prepare_cached("SELECT count(*) FROM held_changes WHERE sink = ?1")?
            .query_row(params![sink], |row| row.get(0))?;
        Ok(count as u64)
    }

    /// Which of `groups` have a held change for `sink`: their new changes
    /// must be held behind it.
    pub fn held_groups<'a>(
        &self,
        sink: &str,
        groups: impl IntoIterator<Item = &'a str>,
    ) -> Result<HashSet<String>, StoreError> {
        let conn = self.read();
        let mut stmt = conn.prepare_cached(
            "SELECT 1 FROM held_changes WHERE sink = ?1 AND group_id = ?2 LIMIT 1",
        )?;
        let mut held = HashSet::new();
        for group in groups {
            if !held.contains(group)
                && stmt
                    .query_row(params![sink, group], |row| row.get::<_, i64>(0))
                    .optional()?
                    .is_some()
            {
                held.insert(group.to_string());
            }
        }
        Ok(held)
    }

    /// Up to `limit` held changes of `sink` that may run through the
    /// functions now, in commit order: due, and with no earlier change of
    /// their group still waiting out a backoff.
    pub fn due_held(&self, sink: &str, limit: u32) -> Result<Vec<HeldChange>, StoreError> {
        let now = now_ms();
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(
            "SELECT commit_lsn, commit_idx, group_id, message, attempts, last_error
             FROM held_changes h
             WHERE sink = ?1 AND not_before <= ?2
               AND NOT EXISTS (SELECT 1 FROM held_changes e
                               WHERE e.sink = h.sink AND e.group_id = h.group_id
                                 AND (e.commit_lsn, e.commit_idx) < (h.commit_lsn, h.commit_idx)
                                 AND e.not_before > ?2)
             ORDER BY commit_lsn, commit_idx
             LIMIT ?3",
        )?;
        let rows = stmt
            .query_map(params![sink, now, limit], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, u32>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, String>(3)?,
                    row.get::<_, u32>(4)?,
                    row.get::<_, Option<String>>(5)?,
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        rows.into_iter()
            .map(
                |(lsn, commit_idx, group_id, message, attempts, last_error)| {
                    Ok(HeldChange {
                        commit_lsn: lsn_from_sql(lsn)?,
                        commit_idx,
                        group_id,
                        message: serde_json::from_str(&message).map_err(|e| {
                            StoreError::Corrupt {
                                what: "held change",
                                detail: e.to_string(),
                            }
                        })?,
                        attempts,
                        last_error,
                    })
                },
            )
            .collect()
    }

    /// Time until the next held change of `sink` is due; `None` when none
    /// waits out a backoff.
    pub fn next_held_due(&self, sink: &str) -> Result<Option<Duration>, StoreError> {
        let now = now_ms();
        let conn = self.lock();
        let next: Option<i64> = conn
            .prepare_cached(
                "SELECT min(not_before) FROM held_changes WHERE sink = ?1 AND not_before > ?2",
            )?
            .query_row(params![sink, now], |row| row.get(0))?;
        Ok(next.map(|at| Duration::from_millis((at - now).max(0) as u64)))
    }

    /// Stores what a round of released held changes of `sink` became, in
    /// one transaction.
    pub fn settle_held(&self, sink: &str, settlement: &HeldSettlement) -> Result<(), StoreError> {
        let now = now_ms();
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let in_place = self.logs.reads_in_place(sink);
        let inserted = super::store_messages(&tx, sink, &settlement.messages, now, in_place)?;
        insert_function_dead_letters(&tx, sink, &settlement.dead_letters, now)?;
        insert_holds(&tx, sink, &settlement.holds, now)?;
        {
            let mut release = tx.prepare_cached(
                "DELETE FROM held_changes WHERE sink = ?1 AND commit_lsn = ?2 AND commit_idx = ?3",
            )?;
            for (lsn, idx) in &settlement.released {
                release.execute(params![sink, lsn_to_sql(*lsn)?, idx])?;
            }
        }
        tx.commit()?;
        let dead = settlement.dead_letters.len();
        weft_core::metrics::count(weft_core::metrics::MESSAGES_INGESTED, sink, inserted + dead);
        weft_core::metrics::count_dead_lettered(sink, "functions", dead);
        Ok(())
    }
}

/// Holds (or holds again) `holds` for `sink`.
pub(super) fn insert_holds(
    tx: &Transaction<'_>,
    sink: &str,
    holds: &[Hold],
    now: i64,
) -> Result<(), StoreError> {
    if holds.is_empty() {
        return Ok(());
    }
    let mut insert = tx.prepare_cached(
        "INSERT INTO held_changes
             (sink, commit_lsn, commit_idx, group_id, message, attempts, last_error, not_before, held_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
         ON CONFLICT (sink, commit_lsn, commit_idx) DO UPDATE
         SET attempts = excluded.attempts, last_error = excluded.last_error,
             not_before = excluded.not_before",
    )?;
    for hold in holds {
        let change = &hold.change;
        let not_before = if hold.retry_in.is_zero() {
            0
        } else {
            now.saturating_add(i64::try_from(hold.retry_in.as_millis()).unwrap_or(i64::MAX))
        };
        insert.execute(params![
            sink,
            lsn_to_sql(change.commit_lsn)?,
            change.commit_idx,
            change.group_id,
            change.message.to_string(),
            change.attempts,
            change.last_error,
            not_before,
            now,
        ])?;
    }
    Ok(())
}

/// Dead-letters changes `sink`'s functions failed on, stage `functions`.
pub(super) fn insert_function_dead_letters(
    tx: &Transaction<'_>,
    sink: &str,
    letters: &[NewDeadLetter],
    now: i64,
) -> Result<(), StoreError> {
    if letters.is_empty() {
        return Ok(());
    }
    let mut insert = tx.prepare_cached(
        "INSERT INTO dead_letters
             (sink, commit_lsn, commit_idx, group_id, idempotency_key, payload, attempts,
              last_error, first_attempt_at, last_attempt_at, dead_at, stage)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, NULL, ?9, ?9, 'functions')
         ON CONFLICT (sink, commit_lsn, commit_idx) DO UPDATE
         SET attempts = excluded.attempts, last_error = excluded.last_error,
             last_attempt_at = excluded.last_attempt_at, dead_at = excluded.dead_at",
    )?;
    for letter in letters {
        insert.execute(params![
            sink,
            lsn_to_sql(letter.commit_lsn)?,
            letter.commit_idx,
            letter.group_id,
            letter.idempotency_key,
            letter.message.to_string(),
            letter.attempts,
            letter.error,
            now,
        ])?;
    }
    Ok(())
}

/// Holds the function dead letter `id` of `sink` again, for its functions
/// to run on it; false when `id` is not a function dead letter.
pub(super) fn rehold_function_dead_letter(
    tx: &Transaction<'_>,
    sink: &str,
    id: i64,
    now: i64,
) -> Result<bool, StoreError> {
    let stage: Option<String> = tx
        .prepare_cached("SELECT stage FROM dead_letters WHERE sink = ?1 AND id = ?2")?
        .query_row(params![sink, id], |row| row.get(0))
        .optional()?;
    if stage.as_deref() != Some("functions") {
        return Ok(false);
    }
    tx.prepare_cached(
        "INSERT INTO held_changes
             (sink, commit_lsn, commit_idx, group_id, message, attempts, last_error, not_before, held_at)
         SELECT sink, commit_lsn, commit_idx, group_id, payload, 0, last_error, 0, ?3
         FROM dead_letters WHERE sink = ?1 AND id = ?2
         ON CONFLICT (sink, commit_lsn, commit_idx) DO NOTHING",
    )?
    .execute(params![sink, id, now])?;
    Ok(true)
}
