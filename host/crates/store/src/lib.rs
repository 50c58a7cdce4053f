//! weft's durable state, in SQLite: sink cursors, every sink's undelivered
//! messages (pulled by consumers or pushed by delivery workers; big batches
//! first as compressed `segments`), dead letters, and webhook sources'
//! accepted requests.
//!
//! Everything lives in one file that users can open with `sqlite3`. The
//! store is the point of no return for the Sequin Stream sink: once
//! [`Store::append`] returns, the messages survive a crash or a power cut,
//! and only then may the pipeline confirm their LSNs to Postgres.
//!
//! All methods block (SQLite I/O and fsync); async callers run them with
//! `tokio::task::spawn_blocking`. One connection behind a mutex serialises
//! access, which is what SQLite does to writers anyway and spares us
//! `SQLITE_BUSY` handling between our own connections. A second, read-only
//! connection answers the few reads that must not wait for a transaction
//! of the first (the pipeline's held-change checks; WAL readers never
//! block on the writer).
//!
//! This layer sits on `weft-core` alone: it stores messages, payloads and
//! routes as the core defines them, and knows nothing of the config, the
//! sources, the sinks or the pipeline that use it.

mod backfills;
mod codec;
mod delivery;
mod heads;
mod held;
mod inventory;
mod pull;
mod pull_log;
mod registry;
mod schema;
mod segments;
mod spill;
mod stored_up_to;
mod webhook;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use codec::MessageColumns;
use weft_core::lsn::Lsn;
use weft_core::metrics;
use weft_core::route::Route;

pub use backfills::{Backfill, BackfillScope, BackfillState, RowFilter};
pub use codec::StoredPayload;
pub use delivery::{DeadLetter, FailedStage, StoredMessage};
pub use heads::{AckId, ParseAckIdError};
pub use held::{HeldChange, HeldSettlement, Hold, NewDeadLetter};
pub use inventory::PluginRecord;
pub use pull::{AckOutcome, Delivered, MessageCounts, QueueDepths, ReceiveLimits};
pub use registry::{RegisteredPlugin, Registration};
pub use spill::payload_bytes;
pub use stored_up_to::StoredUpTo;
pub use webhook::{Acceptance, WebhookRequest};

/// A failure of the durable store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file could not be opened or created.
    #[error(
        "cannot open the store at {path}: {source}; check that the directory exists and is writable"
    )]
    Open {
        /// The store file.
        path: PathBuf,
        /// What SQLite reported.
        source: rusqlite::Error,
    },
    /// SQLite would not switch the file to write-ahead logging.
    #[error(
        "the store at {path} stayed in journal mode {mode:?} instead of \"wal\"; put the store on a local filesystem (WAL does not work over network filesystems)"
    )]
    WalUnavailable {
        /// The store file.
        path: PathBuf,
        /// The journal mode SQLite reported.
        mode: String,
    },
    /// The file's schema is newer than this build of weft.
    #[error(
        "the store at {path} has schema version {found} but this weft knows only up to {known}; upgrade weft or point it at another store file"
    )]
    NewerSchema {
        /// The store file.
        path: String,
        /// The version recorded in the file.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
    /// A schema migration failed; the file keeps its previous version.
    #[error("store schema migration to version {version} failed: {source}")]
    Migration {
        /// The version the migration would have produced.
        version: i64,
        /// What SQLite reported.
        source: rusqlite::Error,
    },
    /// An LSN does not fit SQLite's signed 64-bit integers.
    #[error(
        "LSN {0} is beyond 7FFFFFFF/FFFFFFFF and cannot be stored; this is not a position Postgres produces"
    )]
    LsnOutOfRange(Lsn),
    /// A stored value is not what weft wrote (edited by hand or corrupted).
    #[error("the store holds an invalid {what}: {detail}; the row was modified outside weft")]
    Corrupt {
        /// Which value.
        what: &'static str,
        /// Why it is invalid.
        detail: String,
    },
    /// Any other SQLite failure.
    #[error("store query failed: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// What one transaction (or chunk) produced for one sink.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SinkBatch {
    /// The sink's name.
    pub sink: String,
    /// The messages, in commit order. May be empty: the sink's cursor still advances.
    pub messages: Vec<NewMessage>,
    /// Changes the sink's functions failed on for good.
    pub dead_letters: Vec<NewDeadLetter>,
    /// Changes held for the sink's functions (see `held`).
    pub holds: Vec<Hold>,
    /// Leave the sink's cursor where it is: the sink's messages of this
    /// batch went to its memory lane, not here, and the cursor may move
    /// only once they are delivered (see `spill`).
    pub leaves_cursor: bool,
}

impl SinkBatch {
    /// A batch of only `messages` for `sink`.
    pub fn of(sink: impl Into<String>, messages: Vec<NewMessage>) -> SinkBatch {
        SinkBatch {
            sink: sink.into(),
            messages,
            ..SinkBatch::default()
        }
    }
}

/// A message to store for a sink (pull consumers and push workers alike).
#[derive(Debug, Clone, PartialEq)]
pub struct NewMessage {
    /// LSN of the commit of the change's transaction.
    pub commit_lsn: Lsn,
    /// Position of the change within its transaction.
    pub commit_idx: u32,
    /// Messages of one group are handed out one at a time, in commit order.
    pub group_id: String,
    /// The message's idempotency key, kept for inspection.
    pub idempotency_key: String,
    /// What consumers receive: the message JSON, or a transform's bytes.
    pub payload: StoredPayload,
    /// The resolved routing keys (topic, subject, key, ...) for broker
    /// sinks; `None` when there are none (sinks without routing). Boxed:
    /// a `Route` inline made every message of a backfill chunk some 300
    /// bytes bigger to build, move and drop.
    pub route: Option<Box<Route>>,
}

/// A handle on the store file; cheap to clone and shareable between threads.
#[derive(Clone)]
pub struct Store {
    conn: Arc<Mutex<Connection>>,
    /// A second, read-only connection: it reads the last committed state
    /// while `conn` is busy with a transaction, so the pipeline can check a
    /// batch against the store while the previous batch commits.
    reader: Arc<Mutex<Connection>>,
    /// What memory holds of the sinks whose segments are read in place.
    logs: Arc<pull_log::Logs>,
    path: Arc<PathBuf>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

/// Turns off SQLite's allocation statistics for the whole process, once,
/// before the first connection initialises the library.
///
/// SQLite keeps them by default under a global mutex taken on every
/// `malloc` and `free`; weft never reads them, and without them the store's
/// appends use about a tenth less CPU (BENCHMARKS.md, "Fourth round"). A
/// runtime switch, not a build flag, so that every build of weft gets it.
fn without_allocation_statistics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: sqlite3_config is only safe before sqlite3_initialize;
        // weft opens no connection before its first store, and once
        // initialised SQLite refuses the call (SQLITE_MISUSE) without
        // changing anything, which leaves the statistics on, nothing worse.
        let code = unsafe {
            rusqlite::ffi::sqlite3_config(
                rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS,
                0 as std::os::raw::c_int,
            )
        };
        if code != rusqlite::ffi::SQLITE_OK {
            tracing::debug!(
                code,
                "SQLite was initialised before the store; its allocation statistics stay on"
            );
        }
    });
}

impl Store {
    /// Opens (creating if needed) the store file at `path` and migrates its
    /// schema to the newest version.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        without_allocation_statistics();
        let open_err = |source| StoreError::Open {
            path: path.to_path_buf(),
            source,
        };
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(path, flags).map_err(open_err)?;
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "wal", |row| row.get(0))
            .map_err(open_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::WalUnavailable {
                path: path.to_path_buf(),
                mode,
            });
        }
        // In WAL mode, NORMAL syncs only at checkpoints, so a power cut can
        // undo a commit we already reported. FULL syncs the WAL on every
        // commit: after `append` returns the messages are on disk, and only
        // then does the pipeline confirm their LSN to Postgres, which may
        // then discard the WAL it would need to resend them.
        conn.pragma_update(None, "synchronous", "FULL")?;
        // Statement journals (an insert that may have to undo itself) and
        // sorts stay in memory instead of temp files: a profile of a
        // backfill showed every message insert writing its statement
        // journal to disk. They are at most a few pages per statement.
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        // Another process (an operator's `sqlite3`) may hold the lock briefly.
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        stable_plans(&conn).map_err(open_err)?;
        schema::migrate(&mut conn, &path.display().to_string())?;
        let reader = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(open_err)?;
        reader.busy_timeout(std::time::Duration::from_secs(5))?;
        stable_plans(&reader).map_err(open_err)?;
        Ok(Store {
            conn: Arc::new(Mutex::new(conn)),
            reader: Arc::new(Mutex::new(reader)),
            logs: Arc::default(),
            path: Arc::new(path.to_path_buf()),
        })
    }

    /// The store file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stores every later batch of `sink` as segments, whatever its size:
    /// `sink` is a pull sink, whose [`Store::receive`] reads segments in
    /// place and whose acks mark them (see `pull_log`), so that no message
    /// costs a row of its own. Kept in memory: call it each time weft
    /// starts the sink.
    pub fn read_in_place(&self, sink: &str) {
        self.logs.read_in_place(sink);
    }

    /// In one SQLite transaction: inserts every message, function dead
    /// letter and held change of every batch and advances each named
    /// sink's cursor to `cursor`. A message already stored under the same
    /// sink, commit_lsn and commit_idx is ignored while it is still a
    /// `pull_messages` row, or the first of a segment; an acked one, or
    /// one inside a segment cut elsewhere, would be stored again: keeping
    /// replays out is the caller's job (see [`StoredUpTo`]). A cursor never moves
    /// backwards. Durable when it returns. Leaves each sink's open
    /// transaction (see [`Self::append_through`]) as it was.
    pub fn append(&self, batch: &[SinkBatch], cursor: Lsn) -> Result<(), StoreError> {
        self.append_through(batch, cursor, None)
    }

    /// [`Self::append`] for a batch from the replication stream, which
    /// also records how far it took each sink into the transaction whose
    /// Commit it has not reached: `open` is the (commit_lsn, commit_idx) of
    /// the batch's last change of that transaction. `None` (the batch ends
    /// at a Commit) leaves the record as it is: it stops counting once the
    /// cursor reaches its transaction, and until then a transaction that
    /// committed before it (sent again after a restart) must not erase it.
    /// Nor does an `open` before the record (the replayed part of a
    /// transaction, which ended a batch) move it back.
    /// [`Self::sink_stored_up_to`] reads it back.
    pub fn append_through(
        &self,
        batch: &[SinkBatch],
        cursor: Lsn,
        open: Option<(Lsn, u32)>,
    ) -> Result<(), StoreError> {
        let cursor_i = lsn_to_sql(cursor)?;
        let (open_lsn, open_idx) = match open {
            None => (None, None),
            Some((lsn, idx)) => (Some(lsn_to_sql(lsn)?), Some(idx)),
        };
        let now = now_ms();
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let mut entered = Vec::with_capacity(batch.len());
        {
            // The open record only moves forward: after a restart a batch
            // can end inside the replayed, already stored part of the open
            // transaction (or of one before it), and writing that smaller
            // position would make the next restart store the rest twice.
            let mut advance = tx.prepare_cached(
                "INSERT INTO sink_cursors (sink, commit_lsn, updated_at, open_lsn, open_idx)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (sink) DO UPDATE
                 SET commit_lsn = max(commit_lsn, excluded.commit_lsn), updated_at = excluded.updated_at,
                     open_lsn = iif(excluded.open_lsn > coalesce(open_lsn, -1), excluded.open_lsn, open_lsn),
                     open_idx = CASE
                         WHEN excluded.open_lsn > coalesce(open_lsn, -1) THEN excluded.open_idx
                         WHEN excluded.open_lsn = open_lsn THEN max(open_idx, excluded.open_idx)
                         ELSE open_idx END",
            )?;
            for sink_batch in batch {
                let sink = sink_batch.sink.as_str();
                let inserted = store_messages(
                    &tx,
                    sink,
                    &sink_batch.messages,
                    now,
                    self.logs.reads_in_place(sink),
                )?;
                if inserted < sink_batch.messages.len() {
                    // Only a replay stores a position twice; rare, and the
                    // first thing to look at when a consumer sees one twice.
                    let first = &sink_batch.messages[0];
                    tracing::debug!(
                        sink,
                        replayed = sink_batch.messages.len() - inserted,
                        of = sink_batch.messages.len(),
                        first_lsn = %first.commit_lsn,
                        first_idx = first.commit_idx,
                        "messages stored already were appended again"
                    );
                }
                held::insert_function_dead_letters(&tx, sink, &sink_batch.dead_letters, now)?;
                held::insert_holds(&tx, sink, &sink_batch.holds, now)?;
                if !sink_batch.leaves_cursor {
                    advance.execute(params![sink, cursor_i, now, open_lsn, open_idx])?;
                }
                entered.push((sink, inserted, sink_batch.dead_letters.len()));
            }
        }
        tx.commit()?;
        for (sink, inserted, dead) in entered {
            metrics::count(metrics::MESSAGES_INGESTED, sink, inserted + dead);
            metrics::count_dead_lettered(sink, "functions", dead);
        }
        Ok(())
    }

    /// The commit LSN of the last transaction fully stored for `sink`, or
    /// `None` when nothing was ever stored for it.
    pub fn sink_cursor(&self, sink: &str) -> Result<Option<Lsn>, StoreError> {
        let conn = self.lock();
        let mut stmt =
            conn.prepare_cached("SELECT commit_lsn FROM sink_cursors WHERE sink = ?1")?;
        let mut rows = stmt.query(params![sink])?;
        match rows.next()? {
            Some(row) => Ok(Some(lsn_from_sql(row.get(0)?)?)),
            None => Ok(None),
        }
    }

    /// What `sink` has stored of the replication stream: its cursor and, of
    /// the transaction after it, which went through in chunks and whose
    /// Commit is not stored yet, the (commit_lsn, commit_idx) of the last
    /// change stored. Read in one statement, so the two always belong
    /// together. `None` when nothing was ever stored for `sink`.
    pub fn sink_stored_up_to(&self, sink: &str) -> Result<Option<StoredUpTo>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(
            "SELECT commit_lsn, iif(open_lsn > commit_lsn, open_lsn, NULL), open_idx
             FROM sink_cursors WHERE sink = ?1",
        )?;
        let mut rows = stmt.query(params![sink])?;
        let Some(row) = rows.next()? else {
            return Ok(None);
        };
        let open = match (row.get::<_, Option<i64>>(1)?, row.get::<_, Option<u32>>(2)?) {
            (Some(lsn), Some(idx)) => Some((lsn_from_sql(lsn)?, idx)),
            _ => None,
        };
        Ok(Some(StoredUpTo {
            cursor: lsn_from_sql(row.get(0)?)?,
            open,
        }))
    }

    /// Sets the cursor of `sink` to `lsn`, also backwards: the sink joins a
    /// stream at `lsn` (created, or moved to another source whose positions
    /// are not comparable with its old one's).
    pub fn start_sink_at(&self, sink: &str, lsn: Lsn) -> Result<(), StoreError> {
        let lsn = lsn_to_sql(lsn)?;
        self.lock().execute(
            "INSERT INTO sink_cursors (sink, commit_lsn, updated_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (sink) DO UPDATE
             SET commit_lsn = excluded.commit_lsn, updated_at = excluded.updated_at,
                 open_lsn = NULL, open_idx = NULL",
            params![sink, lsn, now_ms()],
        )?;
        Ok(())
    }

    /// Forgets the sink `sink`: deletes its stored messages, dead letters,
    /// held changes, pause and cursor,
    /// returning how many messages were deleted. For a sink removed from the
    /// config; a sink that keeps its name keeps its messages across restarts.
    pub fn remove_sink(&self, sink: &str) -> Result<u64, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let deleted = tx.execute("DELETE FROM pull_messages WHERE sink = ?1", params![sink])?
            + segments::remove(&tx, sink)?;
        tx.execute("DELETE FROM sink_cursors WHERE sink = ?1", params![sink])?;
        tx.execute("DELETE FROM dead_letters WHERE sink = ?1", params![sink])?;
        tx.execute("DELETE FROM held_changes WHERE sink = ?1", params![sink])?;
        tx.execute("DELETE FROM sink_pauses WHERE sink = ?1", params![sink])?;
        tx.commit()?;
        self.logs.forget(sink);
        Ok(deleted as u64)
    }

    /// Locks the connection. A panic while it was held rolled back its
    /// transaction (rusqlite does so on drop), so a poisoned lock is safe to reuse.
    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The read-only connection: committed state only, never waiting for
    /// a transaction of [`Self::lock`]'s connection.
    fn read(&self) -> MutexGuard<'_, Connection> {
        self.reader
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Has SQLite plan each statement once, whatever values it is run with
/// (the query planner stability guarantee). Otherwise SQLite marks a
/// statement with an equality on a parameter to be planned again when that
/// parameter is rebound, and rusqlite clears the bindings of every cached
/// statement it takes back: statements such as the ack's head promotion
/// were compiled afresh at every call, a fifth of weft's CPU while
/// consumers drained a backfill.
fn stable_plans(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
}

/// SQLite integers are signed; real LSNs stay far below 2^63.
fn lsn_to_sql(lsn: Lsn) -> Result<i64, StoreError> {
    i64::try_from(lsn.0).map_err(|_| StoreError::LsnOutOfRange(lsn))
}

fn lsn_from_sql(value: i64) -> Result<Lsn, StoreError> {
    u64::try_from(value)
        .map(Lsn)
        .map_err(|_| StoreError::Corrupt {
            what: "commit_lsn",
            detail: format!("{value} is negative"),
        })
}

/// A moment on the store's clock (wall-clock milliseconds, since visibility
/// and retry times must survive restarts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct StoreTime(i64);

impl StoreTime {
    /// Now, on the store's clock.
    pub fn now() -> StoreTime {
        StoreTime(now_ms())
    }
}

/// The position of the last message a sink holds.
const LAST_STORED: &str = "SELECT commit_lsn, commit_idx FROM pull_messages WHERE sink = ?1
     ORDER BY commit_lsn DESC, commit_idx DESC LIMIT 1";

/// Stores `messages` (in commit order) for `sink` at `now`, as segments
/// when `in_place` (see [`Store::read_in_place`]) or [`segments::takes`]
/// them, else as `pull_messages` rows; returns how many were new.
fn store_messages(
    tx: &rusqlite::Transaction<'_>,
    sink: &str,
    messages: &[NewMessage],
    now: i64,
    in_place: bool,
) -> Result<usize, StoreError> {
    // Sized up front: collecting `Result`s cannot, and a backfill chunk's
    // thousands of messages would grow it by copies.
    let mut columns = Vec::with_capacity(messages.len());
    for message in messages {
        columns.push(MessageColumns::of(message)?);
    }
    if (in_place && !columns.is_empty()) || segments::takes(tx, sink, columns.len())? {
        segments::stage(tx, sink, &columns, now)
    } else {
        insert_messages(tx, sink, &columns, now)
    }
}

/// Inserts `messages` for `sink` into `pull_messages` (ignoring those
/// already stored), stored at `inserted_at`, keeping each group's head the
/// earliest of its messages; returns how many were new.
fn insert_messages(
    tx: &rusqlite::Transaction<'_>,
    sink: &str,
    messages: &[MessageColumns<'_>],
    inserted_at: i64,
) -> Result<usize, StoreError> {
    // A message is a head when no earlier message of its group is stored.
    // One row of VALUES, not INSERT ... SELECT: SQLite gives a statement
    // that may write several rows a statement journal, a copy of every
    // page it changes, which cost a quarter of the insert.
    let mut insert = tx.prepare_cached(
        "INSERT INTO pull_messages
             (sink, commit_lsn, commit_idx, group_id, idempotency_key, payload, head,
              inserted_at, payload_bytes, content_type, route)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6,
                 NOT EXISTS (SELECT 1 FROM pull_messages
                             WHERE sink = ?1 AND group_id = ?4
                               AND (commit_lsn, commit_idx) < (?2, ?3)),
                 ?7, ?8, ?9, ?10)
         ON CONFLICT (sink, commit_lsn, commit_idx) DO NOTHING",
    )?;
    // Only when a message arrives out of commit order: later messages
    // of its group stop being heads.
    let mut demote = tx.prepare_cached(
        "UPDATE pull_messages SET head = 0
         WHERE sink = ?1 AND group_id = ?2 AND head = 1
           AND (commit_lsn, commit_idx) > (?3, ?4)",
    )?;
    // Messages almost always arrive after everything the sink holds; only
    // one placed before a stored message (a replayed chunk) can have later
    // messages of its group to demote.
    let mut last_stored: Option<(i64, u32)> = tx
        .prepare_cached(LAST_STORED)?
        .query_row(params![sink], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    let mut new = 0;
    for message in messages {
        let position = (message.commit_lsn, message.commit_idx);
        let inserted = insert.execute(params![
            sink,
            message.commit_lsn,
            message.commit_idx,
            message.group_id,
            message.idempotency_key,
            message.payload,
            inserted_at,
            message.payload_bytes.as_deref(),
            message.content_type,
            message.route,
        ])?;
        if inserted == 1 && last_stored.is_some_and(|last| position < last) {
            demote.execute(params![
                sink,
                message.group_id,
                message.commit_lsn,
                message.commit_idx
            ])?;
        }
        last_stored = last_stored.max(Some(position));
        new += inserted;
    }
    Ok(new)
}

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
