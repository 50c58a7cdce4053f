//! Checking the server, the publication and the replication slot before
//! streaming, and creating the latter two when the config allows it.
//!
//! With `create_if_not_exists`, an existing slot or publication is accepted
//! only after checking it fits; every mismatch names the object and the SQL
//! that fixes it.

use std::time::{Duration, Instant};

use tokio_postgres::Client;

use super::{SourceConfig, SourceError};
use weft_postgres::protocol::{ReplicationConnection, quote_ident, quote_literal};
use weft_postgres::{TableName, query_error};

/// Makes sure the publication exists and covers the configured tables.
pub async fn ensure_publication(client: &Client, config: &SourceConfig) -> Result<(), SourceError> {
    let tables: Vec<TableName> = config.tables.iter().map(|t| TableName::parse(t)).collect();
    for table in &tables {
        let exists: bool = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table.quoted()])
            .await
            .map_err(query_error("checking that a configured table exists"))?
            .get(0);
        if !exists {
            return Err(SourceError::TableMissing {
                table: table.display(),
            });
        }
    }
    let publication = &config.publication_name;
    let row = client
        .query_opt(
            "SELECT puballtables, pubinsert AND pubupdate AND pubdelete \
             FROM pg_catalog.pg_publication WHERE pubname = $1",
            &[publication],
        )
        .await
        .map_err(query_error("looking up the publication"))?;
    let Some(row) = row else {
        let target = if tables.is_empty() {
            "FOR ALL TABLES".to_string()
        } else {
            format!(
                "FOR TABLE {}",
                tables
                    .iter()
                    .map(TableName::quoted)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let sql = format!("CREATE PUBLICATION {} {target}", quote_ident(publication));
        if !config.create_publication_if_not_exists {
            return Err(SourceError::PublicationMissing {
                publication: publication.clone(),
                fix: sql,
            });
        }
        client
            .batch_execute(&sql)
            .await
            .map_err(query_error("creating the publication"))?;
        tracing::info!(%publication, "created publication");
        return warn_about_keyless_tables(client, publication).await;
    };
    let all_tables: bool = row.get(0);
    let all_actions: bool = row.get(1);
    if !all_actions {
        tracing::warn!(
            %publication,
            "the publication does not publish every insert, update and delete; \
             weft will only see the actions it publishes"
        );
    }
    if all_tables {
        return warn_about_keyless_tables(client, publication).await;
    }
    let published: Vec<(String, String)> = client
        .query(
            "SELECT schemaname::text, tablename::text FROM pg_catalog.pg_publication_tables WHERE pubname = $1",
            &[publication],
        )
        .await
        .map_err(query_error("listing the publication's tables"))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let missing: Vec<&TableName> = tables
        .iter()
        .filter(|t| {
            !published
                .iter()
                .any(|(s, n)| *s == t.schema && *n == t.name)
        })
        .collect();
    if !missing.is_empty() {
        return Err(SourceError::PublicationMismatch {
            publication: publication.clone(),
            reason: format!(
                "it does not include {}",
                missing
                    .iter()
                    .map(|t| t.display())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            fix: format!(
                "ALTER PUBLICATION {} ADD TABLE {}",
                quote_ident(publication),
                missing
                    .iter()
                    .map(|t| t.quoted())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    warn_about_keyless_tables(client, publication).await
}

/// A published table that has no primary key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeylessTable {
    /// The table.
    pub table: TableName,
    /// Its replica identity: `d` (default), `n` (nothing), `f` (full) or
    /// `i` (index).
    pub replica_identity: char,
}

impl KeylessTable {
    /// Whether Postgres refuses UPDATE and DELETE on the table while it is
    /// published (no primary key and replica identity DEFAULT or NOTHING).
    pub fn blocks_updates(&self) -> bool {
        matches!(self.replica_identity, 'd' | 'n')
    }

    /// The warning weft logs for the table, naming the fix.
    pub fn warning(&self) -> String {
        let table = self.table.quoted();
        let effect = if self.blocks_updates() {
            "Postgres refuses its UPDATEs and DELETEs while it is published (replica identity \
             DEFAULT without a key)"
        } else {
            "its changes are delivered with record_pks: [] and grouped per table"
        };
        format!(
            "table {} has no primary key: {effect}; add one with ALTER TABLE {table} ADD PRIMARY \
             KEY (...), or run ALTER TABLE {table} REPLICA IDENTITY FULL",
            self.table.display()
        )
    }
}

/// The tables the publication publishes that have no primary key.
pub async fn keyless_tables(
    client: &Client,
    publication: &str,
) -> Result<Vec<KeylessTable>, SourceError> {
    let rows = client
        .query(
            "SELECT pt.schemaname::text, pt.tablename::text, c.relreplident::text \
             FROM pg_catalog.pg_publication_tables pt \
             JOIN pg_catalog.pg_namespace n ON n.nspname = pt.schemaname \
             JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename \
             WHERE pt.pubname = $1 AND NOT EXISTS ( \
                 SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND i.indisprimary) \
             ORDER BY 1, 2",
            &[&publication],
        )
        .await
        .map_err(query_error(
            "listing published tables without a primary key",
        ))?;
    Ok(rows
        .iter()
        .map(|r| KeylessTable {
            table: TableName {
                schema: r.get(0),
                name: r.get(1),
            },
            replica_identity: r.get::<_, String>(2).chars().next().unwrap_or('d'),
        })
        .collect())
}

/// Logs a warning for every published table without a primary key. Such
/// tables are accepted (see `docs/replication.md`).
pub async fn warn_about_keyless_tables(
    client: &Client,
    publication: &str,
) -> Result<(), SourceError> {
    for table in keyless_tables(client, publication).await? {
        tracing::warn!(table = %table.table.display(), "{}", table.warning());
    }
    Ok(())
}

/// Who holds a slot that is active.
#[derive(Debug, Clone)]
struct SlotHolder {
    pid: i32,
    application_name: String,
    client: String,
}

async fn slot_holder(client: &Client, slot: &str) -> Result<Option<SlotHolder>, SourceError> {
    let row = client
        .query_opt(
            "SELECT s.active_pid, coalesce(a.application_name, ''), \
                    coalesce(host(a.client_addr), 'local socket') \
             FROM pg_catalog.pg_replication_slots s \
             LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = s.active_pid \
             WHERE s.slot_name = $1 AND s.active AND s.active_pid IS NOT NULL",
            &[&slot],
        )
        .await
        .map_err(query_error(
            "checking whether the replication slot is in use",
        ))?;
    Ok(row.map(|r| SlotHolder {
        pid: r.get(0),
        application_name: r.get(1),
        client: r.get(2),
    }))
}

/// Waits for the slot to be free. A walsender of weft's own previous
/// session (after a crash or a lost connection) lingers until the server
/// notices, at most `wal_sender_timeout`; a slot still held after that
/// (plus a margin) belongs to another consumer.
async fn wait_until_slot_free(client: &Client, slot: &str) -> Result<(), SourceError> {
    let Some(mut holder) = slot_holder(client, slot).await? else {
        return Ok(());
    };
    let timeout_ms: i64 = client
        .query_one(
            "SELECT setting::bigint FROM pg_catalog.pg_settings WHERE name = 'wal_sender_timeout'",
            &[],
        )
        .await
        .map_err(query_error("reading wal_sender_timeout"))?
        .get(0);
    let timeout = if timeout_ms <= 0 {
        Duration::from_secs(60)
    } else {
        Duration::from_millis(timeout_ms as u64).min(Duration::from_secs(300))
    };
    let deadline = Instant::now() + timeout + Duration::from_secs(5);
    let mut last_warning: Option<Instant> = None;
    loop {
        if last_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(5)) {
            tracing::warn!(
                %slot,
                pid = holder.pid,
                "replication slot is in use by another process; waiting up to {} s for it to be released",
                deadline.saturating_duration_since(Instant::now()).as_secs()
            );
            last_warning = Some(Instant::now());
        }
        if Instant::now() >= deadline {
            return Err(SourceError::SlotActive {
                slot: slot.to_string(),
                pid: holder.pid,
                application_name: holder.application_name,
                client: holder.client,
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        match slot_holder(client, slot).await? {
            None => return Ok(()),
            Some(next) => holder = next,
        }
    }
}

/// Makes sure the slot exists and is a pgoutput logical slot on this
/// database, and waits (bounded) for it to be free.
pub async fn ensure_slot(
    client: &Client,
    replication: &mut ReplicationConnection,
    config: &SourceConfig,
) -> Result<(), SourceError> {
    let slot = &config.slot_name;
    let row = client
        .query_opt(
            "SELECT slot_type::text, coalesce(plugin::text, ''), coalesce(database::text, ''), \
                    current_database()::text \
             FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
            &[slot],
        )
        .await
        .map_err(query_error("looking up the replication slot"))?;
    let Some(row) = row else {
        if !config.create_slot_if_not_exists {
            return Err(SourceError::SlotMissing {
                slot: slot.clone(),
                fix: format!(
                    "SELECT pg_create_logical_replication_slot({}, 'pgoutput')",
                    quote_literal(slot)
                ),
            });
        }
        let lsn = replication.create_logical_slot(slot).await?;
        tracing::info!(%slot, consistent_point = %lsn, "created replication slot");
        return Ok(());
    };
    let (slot_type, plugin, database, current): (String, String, String, String) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    let drop_and_recreate = format!(
        "SELECT pg_drop_replication_slot({}) (it loses the slot's position), then let weft create it",
        quote_literal(slot)
    );
    if slot_type != "logical" {
        return Err(SourceError::SlotMismatch {
            slot: slot.clone(),
            reason: format!("it is a {slot_type} slot, not a logical one"),
            fix: drop_and_recreate,
        });
    }
    if plugin != "pgoutput" {
        return Err(SourceError::SlotMismatch {
            slot: slot.clone(),
            reason: format!("it uses the output plugin {plugin:?}, weft needs \"pgoutput\""),
            fix: drop_and_recreate,
        });
    }
    if database != current {
        return Err(SourceError::SlotMismatch {
            slot: slot.clone(),
            reason: format!(
                "it belongs to database {database:?}, but the connection is to {current:?}"
            ),
            fix: "connect to the slot's database or choose another slot_name".into(),
        });
    }
    wait_until_slot_free(client, slot).await
}
