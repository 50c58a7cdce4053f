//! The store's schema and its ordered migrations.
//!
//! `PRAGMA user_version` records how many entries of [`MIGRATIONS`] a file
//! has applied. Migrations are append-only: never edit a released entry, add
//! a new one that alters the previous state.

use rusqlite::Connection;

use super::StoreError;

/// Each entry moves the schema from version `i` to `i + 1`.
///
/// Times are integer milliseconds since the Unix epoch, so that visibility
/// checks compare integers; read them in `sqlite3` with
/// `datetime(not_visible_until / 1000, 'unixepoch')`.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: sink cursors and pull-consumer messages.
    r#"
    CREATE TABLE sink_cursors (
        sink        TEXT PRIMARY KEY,
        commit_lsn  INTEGER NOT NULL,
        updated_at  INTEGER NOT NULL
    ) STRICT;

    CREATE TABLE pull_messages (
        id                 INTEGER PRIMARY KEY,
        sink               TEXT NOT NULL,
        commit_lsn         INTEGER NOT NULL,
        commit_idx         INTEGER NOT NULL,
        group_id           TEXT NOT NULL,
        idempotency_key    TEXT NOT NULL,
        payload            TEXT NOT NULL,
        -- 1 when this is the earliest stored message of its group: only heads
        -- may be handed out, which keeps one message per group in flight.
        head               INTEGER NOT NULL,
        ack_id             TEXT,
        deliver_count      INTEGER NOT NULL DEFAULT 0,
        not_visible_until  INTEGER,
        last_delivered_at  INTEGER,
        inserted_at        INTEGER NOT NULL,
        UNIQUE (sink, commit_lsn, commit_idx)
    ) STRICT;

    -- Finds a group's earliest message when a head is acked or a message arrives.
    CREATE INDEX pull_messages_group
        ON pull_messages (sink, group_id, commit_lsn, commit_idx);
    -- Receive walks the heads in commit order; non-heads never cost a step.
    CREATE INDEX pull_messages_heads
        ON pull_messages (sink, commit_lsn, commit_idx) WHERE head = 1;
    -- Counts messages in flight (max_ack_pending) and finds the next expiry.
    CREATE INDEX pull_messages_visibility
        ON pull_messages (sink, not_visible_until);
    -- Ack and nack look messages up by their current ack id.
    CREATE UNIQUE INDEX pull_messages_ack_id
        ON pull_messages (sink, ack_id) WHERE ack_id IS NOT NULL;
    "#,
    // 2: retry state for push sinks, and dead letters. A push sink's worker
    // leases messages exactly as a pull consumer does (ack_id,
    // not_visible_until, deliver_count = attempts so far); a failed attempt
    // clears the lease and sets not_visible_until to the next attempt time.
    r#"
    ALTER TABLE pull_messages ADD COLUMN last_error TEXT;
    ALTER TABLE pull_messages ADD COLUMN first_attempt_at INTEGER;

    -- Messages that exhausted their attempts (max_retry_count) or failed
    -- permanently. Their group moved on; replay puts them back in line.
    CREATE TABLE dead_letters (
        id                 INTEGER PRIMARY KEY,
        sink               TEXT NOT NULL,
        commit_lsn         INTEGER NOT NULL,
        commit_idx         INTEGER NOT NULL,
        group_id           TEXT NOT NULL,
        idempotency_key    TEXT NOT NULL,
        payload            TEXT NOT NULL,
        attempts           INTEGER NOT NULL,
        last_error         TEXT NOT NULL,
        first_attempt_at   INTEGER,
        last_attempt_at    INTEGER,
        dead_at            INTEGER NOT NULL,
        UNIQUE (sink, commit_lsn, commit_idx)
    ) STRICT;
    CREATE INDEX dead_letters_sink ON dead_letters (sink, id);
    "#,
    // 3: what broker sinks need beside the JSON message. `route` is the
    // resolved routing keys as JSON (topic, subject, key, ...; NULL for sinks
    // without routing). A transform's bytes payload is kept in
    // `payload_bytes` with its `content_type`; `payload` is then 'null'.
    r#"
    ALTER TABLE pull_messages ADD COLUMN route TEXT;
    ALTER TABLE pull_messages ADD COLUMN payload_bytes BLOB;
    ALTER TABLE pull_messages ADD COLUMN content_type TEXT;
    ALTER TABLE dead_letters ADD COLUMN route TEXT;
    ALTER TABLE dead_letters ADD COLUMN payload_bytes BLOB;
    ALTER TABLE dead_letters ADD COLUMN content_type TEXT;
    "#,
    // 4: changes a sink's functions have not turned into messages yet.
    // `held_changes` keeps, in commit order per group, a change whose
    // function failed transiently (due again at `not_before`), the later
    // changes of its group, every change of a quarantined sink, and
    // replayed function dead letters. `message` is the message JSON before
    // any function ran. A dead letter's `stage` says where it failed:
    // 'functions' ones hold that message JSON and replay through the
    // functions again; 'delivery' ones hold the final payload.
    r#"
    CREATE TABLE held_changes (
        sink         TEXT NOT NULL,
        commit_lsn   INTEGER NOT NULL,
        commit_idx   INTEGER NOT NULL,
        group_id     TEXT NOT NULL,
        message      TEXT NOT NULL,
        attempts     INTEGER NOT NULL,
        last_error   TEXT,
        not_before   INTEGER NOT NULL,
        held_at      INTEGER NOT NULL,
        PRIMARY KEY (sink, commit_lsn, commit_idx)
    ) STRICT;
    CREATE INDEX held_changes_group
        ON held_changes (sink, group_id, commit_lsn, commit_idx);
    ALTER TABLE dead_letters ADD COLUMN stage TEXT NOT NULL DEFAULT 'delivery';
    "#,
    // 5: backfills and their progress. `cursor` is the primary key of the
    // last row stored, as a JSON array of the key columns' text values
    // (NULL before the first chunk): a restart resumes after it.
    r#"
    CREATE TABLE backfills (
        id              TEXT PRIMARY KEY,
        sink            TEXT NOT NULL,
        table_schema    TEXT NOT NULL,
        table_name      TEXT NOT NULL,
        state           TEXT NOT NULL,
        cursor          TEXT,
        rows_processed  INTEGER NOT NULL DEFAULT 0,
        rows_estimated  INTEGER,
        last_error      TEXT,
        created_at      INTEGER NOT NULL,
        updated_at      INTEGER NOT NULL,
        completed_at    INTEGER
    ) STRICT;
    CREATE INDEX backfills_sink ON backfills (sink, created_at);
    "#,
    // 6: which rows a partial backfill reads (`BackfillScope`
    // as JSON); NULL for a full one.
    r#"
    ALTER TABLE backfills ADD COLUMN scope TEXT;
    "#,
    // 7: what weft ran with (`store::inventory`): each config it started
    // with (as written, before interpolation) and each function's component.
    r#"
    CREATE TABLE configs (
        id          INTEGER PRIMARY KEY,
        sha256      TEXT NOT NULL,
        yaml        TEXT NOT NULL,
        started_at  INTEGER NOT NULL
    ) STRICT;
    CREATE TABLE plugins (
        function         TEXT PRIMARY KEY,
        kind             TEXT NOT NULL,
        file             TEXT NOT NULL,
        sha256           TEXT NOT NULL,
        bytes            INTEGER NOT NULL,
        first_loaded_at  INTEGER NOT NULL,
        loaded_at        INTEGER NOT NULL
    ) STRICT;
    "#,
    // 8: webhook sources (`store::webhook`). `webhook_requests` is each
    // source's log of accepted requests, kept until every sink of the source
    // has stored its messages; `seq` is the position in that log (sinks'
    // cursors count it as their commit_lsn) and `records` the JSON array of
    // the request's messages. `webhook_sources.last_seq` keeps positions
    // from repeating once the log is pruned. `webhook_idempotency_keys`
    // remembers each `Idempotency-Key` for the source's retention.
    r#"
    CREATE TABLE webhook_sources (
        source    TEXT PRIMARY KEY,
        last_seq  INTEGER NOT NULL
    ) STRICT;
    CREATE TABLE webhook_requests (
        source       TEXT NOT NULL,
        seq          INTEGER NOT NULL,
        request_id   TEXT NOT NULL,
        records      TEXT NOT NULL,
        accepted_at  INTEGER NOT NULL,
        PRIMARY KEY (source, seq)
    ) STRICT;
    CREATE TABLE webhook_idempotency_keys (
        source       TEXT NOT NULL,
        key          TEXT NOT NULL,
        seq          INTEGER NOT NULL,
        messages     INTEGER NOT NULL,
        accepted_at  INTEGER NOT NULL,
        PRIMARY KEY (source, key)
    ) STRICT;
    CREATE INDEX webhook_idempotency_keys_age
        ON webhook_idempotency_keys (source, accepted_at);
    "#,
    // 9: sinks paused through the API.
    r#"
    CREATE TABLE sink_pauses (
        sink       TEXT PRIMARY KEY,
        paused_at  INTEGER NOT NULL
    ) STRICT;
    "#,
    // 10: plugins uploaded through `POST /api/plugins` (`store::registry`),
    // per account ('' for the operator's). The component bytes live in the
    // data directory's `plugins/`, named by `sha256`; `imports` is the JSON
    // array of the capability imports the component declares.
    r#"
    CREATE TABLE registered_plugins (
        account        TEXT NOT NULL,
        name           TEXT NOT NULL,
        version        TEXT NOT NULL,
        kind           TEXT NOT NULL,
        sha256         TEXT NOT NULL,
        bytes          INTEGER NOT NULL,
        imports        TEXT NOT NULL,
        registered_at  INTEGER NOT NULL,
        PRIMARY KEY (account, name, version)
    ) STRICT;
    "#,
    // 11: the visibility index holds only messages under a lease or a retry
    // wait. Every query of it asks for `not_visible_until > ?`, which implies
    // NOT NULL, and most stored messages wait untouched (NULL): a backfill
    // no longer pays an index entry per message it stores.
    r#"
    DROP INDEX pull_messages_visibility;
    CREATE INDEX pull_messages_visibility
        ON pull_messages (sink, not_visible_until) WHERE not_visible_until IS NOT NULL;
    "#,
    // 12: how far into a transaction whose Commit is not stored yet a sink
    // has stored its changes (a big transaction goes through in chunks):
    // the (commit_lsn, commit_idx) of the last change of the last chunk
    // stored, NULL when no chunk of an open transaction is stored. After a
    // crash Postgres sends that transaction again from its first change;
    // the changes up to here are dropped instead of delivered a second time.
    r#"
    ALTER TABLE sink_cursors ADD COLUMN open_lsn INTEGER;
    ALTER TABLE sink_cursors ADD COLUMN open_idx INTEGER;
    "#,
    // 13: segments (`store::segments`): a big batch's messages (a backfill
    // chunk, a bulk transaction) kept as rows of up to 1,000 messages or
    // 1 MiB each, `body` their columns encoded and compressed, until a receive or a
    // push worker needs them in `pull_messages`. `commit_lsn`/`commit_idx`
    // are those of the first message, `messages` how many it holds, and
    // `inserted_at` when they were stored. A sink's segments always come
    // after its `pull_messages` rows in commit order.
    r#"
    CREATE TABLE pull_segments (
        id           INTEGER PRIMARY KEY,
        sink         TEXT NOT NULL,
        commit_lsn   INTEGER NOT NULL,
        commit_idx   INTEGER NOT NULL,
        messages     INTEGER NOT NULL,
        body         BLOB NOT NULL,
        inserted_at  INTEGER NOT NULL,
        UNIQUE (sink, commit_lsn, commit_idx)
    ) STRICT;
    "#,
    // Segments move into `pull_messages` in the order they were stored,
    // which is each group's order also when a push sink's lane spills
    // messages of other groups that are older (see `store::segments`).
    r#"
    CREATE INDEX pull_segments_in_order ON pull_segments (sink, id);
    "#,
    // 15: a pull sink reads its segments in place (`store::pull_log`)
    // instead of moving them into `pull_messages`: `settled` is a bitmap of
    // the members acked or dead-lettered (bit i of byte i / 8 for member
    // i; NULL when none is), `settled_count` how many bits are set. A
    // segment whose members are all settled is deleted.
    r#"
    ALTER TABLE pull_segments ADD COLUMN settled BLOB;
    ALTER TABLE pull_segments ADD COLUMN settled_count INTEGER NOT NULL DEFAULT 0;
    "#,
];

/// Brings the schema of `conn` up to the newest version, one transaction per
/// migration, and refuses files written by a newer weft.
pub(crate) fn migrate(conn: &mut Connection, path: &str) -> Result<(), StoreError> {
    let found: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
    let known = MIGRATIONS.len() as i64;
    if found > known {
        return Err(StoreError::NewerSchema {
            path: path.to_string(),
            found,
            known,
        });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = index as i64 + 1;
        let tx = conn.transaction()?;
        tx.execute_batch(sql)
            .map_err(|source| StoreError::Migration { version, source })?;
        tx.pragma_update(None, "user_version", version)?;
        tx.commit()?;
        tracing::info!(path, version, "store schema migrated");
    }
    Ok(())
}
