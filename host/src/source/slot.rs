//! Checking the server, the publication and the replication slot before
//! streaming, and creating the latter two when the config allows it.
//!
//! With `create_if_not_exists`, an existing slot or publication is accepted
//! only after checking it fits; every mismatch names the object and the SQL
//! that fixes it.

use tokio_postgres::Client;

use super::protocol::{ReplicationConnection, quote_ident, quote_literal};
use super::{SourceConfig, SourceError};

/// A table named in the config, split into schema and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    /// The schema; `public` when the config gave none.
    pub schema: String,
    /// The table.
    pub name: String,
}

impl TableName {
    /// Parses `schema.table` or `table` (schema `public`).
    pub fn parse(text: &str) -> TableName {
        match text.split_once('.') {
            Some((schema, name)) => TableName {
                schema: schema.to_string(),
                name: name.to_string(),
            },
            None => TableName {
                schema: "public".into(),
                name: text.to_string(),
            },
        }
    }

    /// `"schema"."table"`, quoted for SQL.
    pub fn quoted(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.name))
    }

    /// `schema.table`, unquoted.
    pub fn display(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }
}

fn query_error(context: &str) -> impl FnOnce(tokio_postgres::Error) -> SourceError + '_ {
    move |e| SourceError::Query {
        context: context.to_string(),
        source: e,
    }
}

/// Checks `wal_level` and the user's REPLICATION privilege.
pub async fn check_server(client: &Client, user: &str) -> Result<(), SourceError> {
    let wal_level: String = client
        .query_one("SHOW wal_level", &[])
        .await
        .map_err(query_error("reading wal_level"))?
        .get(0);
    if wal_level != "logical" {
        return Err(SourceError::WalLevel { actual: wal_level });
    }
    let row = client
        .query_one(
            "SELECT rolreplication OR rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user",
            &[],
        )
        .await
        .map_err(query_error("reading the user's REPLICATION privilege"))?;
    if !row.get::<_, bool>(0) {
        return Err(SourceError::NoReplicationPrivilege {
            user: user.to_string(),
        });
    }
    Ok(())
}

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
        return Ok(());
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
        return Ok(());
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
    Ok(())
}

/// Makes sure the slot exists and is a pgoutput logical slot on this
/// database.
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
    Ok(())
}
