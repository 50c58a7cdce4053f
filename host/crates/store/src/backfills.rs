//! Backfills and their progress (see `weft_pipeline::backfill`): what to read,
//! where it got to, and its state, so that a restart resumes each active
//! backfill after the last row it stored.

use rusqlite::{OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Store, StoreError, now_ms};

/// Where a backfill is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BackfillState {
    /// Reading chunks.
    Active,
    /// Stopped through the API until resumed.
    Paused,
    /// Every row was read.
    Completed,
    /// Stopped on an error (see `last_error`).
    Failed,
    /// Cancelled through the API.
    Cancelled,
}

impl BackfillState {
    /// The state's name in the store and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            BackfillState::Active => "active",
            BackfillState::Paused => "paused",
            BackfillState::Completed => "completed",
            BackfillState::Failed => "failed",
            BackfillState::Cancelled => "cancelled",
        }
    }

    fn parse(text: &str) -> Result<Self, StoreError> {
        Ok(match text {
            "active" => BackfillState::Active,
            "paused" => BackfillState::Paused,
            "completed" => BackfillState::Completed,
            "failed" => BackfillState::Failed,
            "cancelled" => BackfillState::Cancelled,
            other => {
                return Err(StoreError::Corrupt {
                    what: "backfill state",
                    detail: other.to_string(),
                });
            }
        })
    }
}

/// A backfill as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Backfill {
    /// Its id.
    pub id: String,
    /// The sink it fills.
    pub sink: String,
    /// The table's schema.
    pub table_schema: String,
    /// The table's name.
    pub table_name: String,
    /// Which rows it reads.
    pub scope: BackfillScope,
    /// Where it is.
    pub state: BackfillState,
    /// The order columns' text values of the last row stored (the primary
    /// key, after the sort column for a partial backfill that has one), or
    /// `None` before the first chunk.
    pub cursor: Option<Vec<String>>,
    /// Rows read and stored so far.
    pub rows_processed: u64,
    /// The table's estimated row count when the backfill started.
    pub rows_estimated: Option<u64>,
    /// Why it failed.
    pub last_error: Option<String>,
    /// When it was created (ms since the Unix epoch).
    pub created_at: i64,
    /// When it last changed (ms since the Unix epoch).
    pub updated_at: i64,
    /// When it completed, failed or was cancelled.
    pub completed_at: Option<i64>,
}

const COLUMNS: &str = "id, sink, table_schema, table_name, state, cursor, rows_processed, \
     rows_estimated, last_error, created_at, updated_at, completed_at, scope";

type RawBackfill = (
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    i64,
    Option<i64>,
    Option<String>,
    i64,
    i64,
    Option<i64>,
    Option<String>,
);

fn raw(row: &Row<'_>) -> rusqlite::Result<RawBackfill> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
        row.get(7)?,
        row.get(8)?,
        row.get(9)?,
        row.get(10)?,
        row.get(11)?,
        row.get(12)?,
    ))
}

fn parse(raw: RawBackfill) -> Result<Backfill, StoreError> {
    let cursor = raw
        .5
        .map(|text| {
            serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                what: "backfill cursor",
                detail: e.to_string(),
            })
        })
        .transpose()?;
    let scope = raw
        .12
        .map(|text| {
            serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                what: "backfill scope",
                detail: e.to_string(),
            })
        })
        .transpose()?
        .unwrap_or_default();
    Ok(Backfill {
        id: raw.0,
        sink: raw.1,
        table_schema: raw.2,
        table_name: raw.3,
        scope,
        state: BackfillState::parse(&raw.4)?,
        cursor,
        rows_processed: raw.6 as u64,
        rows_estimated: raw.7.map(|n| n.max(0) as u64),
        last_error: raw.8,
        created_at: raw.9,
        updated_at: raw.10,
        completed_at: raw.11,
    })
}

impl Store {
    /// Records a new active backfill of the rows of `schema.table` in
    /// `scope` into `sink`.
    pub fn create_backfill(
        &self,
        id: &str,
        sink: &str,
        (schema, table): (&str, &str),
        scope: &BackfillScope,
        rows_estimated: Option<u64>,
    ) -> Result<Backfill, StoreError> {
        let now = now_ms();
        let scope = (scope != &BackfillScope::default())
            .then(|| serde_json::to_string(scope).expect("a scope serialises"));
        let conn = self.lock();
        conn.prepare_cached(
            "INSERT INTO backfills (id, sink, table_schema, table_name, state, rows_estimated, created_at, updated_at, scope)
             VALUES (?1, ?2, ?3, ?4, 'active', ?5, ?6, ?6, ?7)",
        )?
        .execute(params![id, sink, schema, table, rows_estimated.map(|n| n as i64), now, scope])?;
        drop(conn);
        self.backfill(id)?.ok_or_else(|| StoreError::Corrupt {
            what: "backfill",
            detail: format!("{id} vanished after insert"),
        })
    }

    /// The backfill `id`.
    pub fn backfill(&self, id: &str) -> Result<Option<Backfill>, StoreError> {
        let conn = self.lock();
        let row = conn
            .prepare_cached(&format!("SELECT {COLUMNS} FROM backfills WHERE id = ?1"))?
            .query_row(params![id], raw)
            .optional()?;
        row.map(parse).transpose()
    }

    /// Every backfill of `sink`, oldest first; all sinks' with `None`.
    pub fn backfills(&self, sink: Option<&str>) -> Result<Vec<Backfill>, StoreError> {
        let conn = self.lock();
        let rows = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM backfills WHERE ?1 IS NULL OR sink = ?1 ORDER BY created_at, id"
            ))?
            .query_map(params![sink], raw)?
            .collect::<Result<Vec<_>, _>>()?;
        rows.into_iter().map(parse).collect()
    }

    /// Records that the backfill `id` stored `rows` more rows from the key
    /// `from` up to the key `cursor`, and completed when `done`. Does
    /// nothing unless it is active or paused (a chunk already past the
    /// pipeline when it paused was delivered: recording it keeps resume
    /// from reading it again; a cancel wins over it) and its stored cursor
    /// is still `from`: a chunk read ahead of one that was not stored must
    /// not move the cursor past that one's rows. Returns whether it was
    /// recorded.
    pub fn record_backfill_progress(
        &self,
        id: &str,
        from: Option<&[String]>,
        cursor: Option<&[String]>,
        rows: u64,
        done: bool,
    ) -> Result<bool, StoreError> {
        let now = now_ms();
        let text = |c: &[String]| serde_json::to_string(c).expect("strings serialise");
        let (from, cursor) = (from.map(text), cursor.map(text));
        let conn = self.lock();
        let updated = conn
            .prepare_cached(
                "UPDATE backfills
                 SET cursor = coalesce(?2, cursor), rows_processed = rows_processed + ?3,
                     state = CASE WHEN ?4 THEN 'completed' ELSE state END,
                     completed_at = CASE WHEN ?4 THEN ?5 ELSE completed_at END,
                     updated_at = ?5
                 WHERE id = ?1 AND state IN ('active', 'paused') AND cursor IS ?6",
            )?
            .execute(params![id, cursor, rows as i64, done, now, from])?;
        Ok(updated == 1)
    }

    /// Moves the backfill `id` from state `from` to `to` (pause: active →
    /// paused, resume: paused → active); returns whether it was in `from`.
    pub fn move_backfill(
        &self,
        id: &str,
        from: BackfillState,
        to: BackfillState,
    ) -> Result<bool, StoreError> {
        let conn = self.lock();
        let updated = conn
            .prepare_cached(
                "UPDATE backfills SET state = ?3, updated_at = ?4 WHERE id = ?1 AND state = ?2",
            )?
            .execute(params![id, from.as_str(), to.as_str(), now_ms()])?;
        Ok(updated == 1)
    }

    /// Ends the backfill `id` as `state` (failed or cancelled) with
    /// `error`, if it is active or paused; returns whether it was.
    pub fn end_backfill(
        &self,
        id: &str,
        state: BackfillState,
        error: Option<&str>,
    ) -> Result<bool, StoreError> {
        let now = now_ms();
        let conn = self.lock();
        let updated = conn
            .prepare_cached(
                "UPDATE backfills SET state = ?2, last_error = ?3, completed_at = ?4, updated_at = ?4
                 WHERE id = ?1 AND state IN ('active', 'paused')",
            )?
            .execute(params![id, state.as_str(), error, now])?;
        Ok(updated == 1)
    }
}

/// Which rows a backfill reads: all of them by default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackfillScope {
    /// Read in this column's order, from `start_position` on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sort_column: Option<String>,
    /// The first `sort_column` value to read (inclusive), as text Postgres
    /// casts to the column's type, e.g. `"2026-01-01T00:00:00Z"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_position: Option<String>,
    /// Read only rows for which this holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<RowFilter>,
}

impl BackfillScope {
    /// `full` or `partial`.
    pub fn kind(&self) -> &'static str {
        if self == &BackfillScope::default() {
            "full"
        } else {
            "partial"
        }
    }

    /// A scope from an API request's `start_position`, which may be a JSON
    /// string or number.
    pub fn position_text(value: &Value) -> Option<String> {
        match value {
            Value::String(text) => Some(text.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }
}

/// A `WHERE` filter as a request gives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowFilter {
    /// The boolean expression, e.g. `status = $1 AND total > $2`.
    #[serde(rename = "where")]
    pub sql: String,
    /// The values of `$1`, `$2`, …: strings, numbers, booleans or null
    /// (arrays and objects are passed as their JSON text). Postgres casts
    /// each from its text to the type the expression needs.
    #[serde(default)]
    pub params: Vec<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_accumulates_until_completed_and_a_cancel_wins() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("weft.db")).unwrap();
        let full = BackfillScope::default();
        let partial = BackfillScope {
            sort_column: Some("id".into()),
            start_position: Some("4".into()),
            filter: None,
        };
        store
            .create_backfill("b1", "s", ("public", "items"), &partial, Some(10))
            .unwrap();
        let keys = ["4".to_string()];
        assert!(
            store
                .record_backfill_progress("b1", None, Some(&keys), 4, false)
                .unwrap()
        );
        let read_ahead = ["9".to_string()];
        assert!(
            !store
                .record_backfill_progress("b1", Some(&read_ahead), Some(&["12".into()]), 3, false)
                .unwrap(),
            "a chunk read after one that was not stored does not move the cursor"
        );
        assert!(
            store
                .record_backfill_progress("b1", Some(&keys), None, 0, true)
                .unwrap()
        );
        let done = store.backfill("b1").unwrap().unwrap();
        assert_eq!(done.scope, partial, "the scope survives the store");
        assert_eq!(done.state, BackfillState::Completed);
        assert_eq!(done.cursor, Some(vec!["4".to_string()]));
        assert_eq!(done.rows_processed, 4);
        assert!(done.completed_at.is_some());
        assert!(
            !store
                .record_backfill_progress("b1", Some(&keys), None, 1, false)
                .unwrap(),
            "a completed backfill takes no more progress"
        );

        store
            .create_backfill("b2", "s", ("public", "items"), &full, None)
            .unwrap();
        assert!(
            store
                .end_backfill("b2", BackfillState::Cancelled, None)
                .unwrap()
        );
        assert!(
            !store
                .record_backfill_progress("b2", None, None, 5, false)
                .unwrap()
        );
        assert_eq!(store.backfills(Some("s")).unwrap().len(), 2);
        assert!(store.backfills(Some("other")).unwrap().is_empty());

        store
            .create_backfill("b3", "s", ("public", "items"), &full, None)
            .unwrap();
        assert!(
            store
                .move_backfill("b3", BackfillState::Active, BackfillState::Paused)
                .unwrap()
        );
        assert!(
            store
                .record_backfill_progress("b3", None, Some(&keys), 5, false)
                .unwrap(),
            "a chunk already delivered when its backfill paused is recorded"
        );
        let paused = store.backfill("b3").unwrap().unwrap();
        assert_eq!(
            (paused.state, paused.cursor, paused.rows_processed),
            (BackfillState::Paused, Some(keys.to_vec()), 5),
            "and the backfill stays paused, to resume after it"
        );
        assert!(
            !store
                .move_backfill("b3", BackfillState::Active, BackfillState::Paused)
                .unwrap()
        );
        assert!(
            store
                .move_backfill("b3", BackfillState::Paused, BackfillState::Active)
                .unwrap()
        );
        assert!(
            store
                .end_backfill("b3", BackfillState::Cancelled, None)
                .unwrap()
        );
    }
}
