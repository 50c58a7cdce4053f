//! Writing a Postgres sink's batches: one transaction per delivery on the
//! target database, and, when a batch's transaction is refused, one
//! transaction per message, so that only the refused ones fail.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::Mutex;
use tokio_postgres::Client;
use tracing::warn;

use super::config::{PostgresConfig, PostgresMode, PostgresSettings};
use super::errors::{self, WriteError};
use super::item::Item;
use super::mirror::MirrorError;
use super::target::TargetTable;
use super::{append, create, mirror};
use crate::config::TableRef;
use crate::delivery::{DeliveryLimits, DeliveryOutcome, Destination};
use weft_store::StoredMessage;

/// Session settings of a sink connection: values are read as weft renders
/// them (`docs/types.md`).
const SESSION: &str = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET IntervalStyle = 'postgres'";

/// Delivers a Postgres sink's messages.
pub struct PostgresDestination {
    sink: String,
    settings: PostgresSettings,
    /// Idle connections to the target.
    idle: Mutex<Vec<Client>>,
    /// Target tables as last read from the catalog (mirror), or known to
    /// exist (append).
    tables: Mutex<HashMap<TableRef, Arc<TargetTable>>>,
}

impl PostgresDestination {
    /// The destination of the sink `sink`. Connects on first delivery.
    pub fn new(sink: &str, settings: PostgresSettings) -> PostgresDestination {
        PostgresDestination {
            sink: sink.to_string(),
            settings,
            idle: Mutex::new(Vec::new()),
            tables: Mutex::new(HashMap::new()),
        }
    }

    async fn connect(&self) -> Result<Client, String> {
        if let Some(client) = self.idle.lock().await.pop()
            && !client.is_closed()
        {
            return Ok(client);
        }
        let (client, _driver) = self
            .settings
            .target
            .connect_query()
            .await
            .map_err(|e| e.to_string())?;
        client
            .batch_execute(SESSION)
            .await
            .map_err(|e| e.to_string())?;
        Ok(client)
    }

    async fn deliver_all(&self, batch: &[StoredMessage]) -> Vec<DeliveryOutcome> {
        let mut outcomes: Vec<Option<DeliveryOutcome>> = vec![None; batch.len()];
        let fallback =
            (self.settings.mode == PostgresMode::Append).then(PostgresConfig::default_event_table);
        let mut items = Vec::with_capacity(batch.len());
        for (index, message) in batch.iter().enumerate() {
            match Item::parse(
                index,
                message,
                self.settings.table.as_ref(),
                fallback.as_ref(),
            ) {
                Ok(item) => items.push(item),
                Err(error) => outcomes[index] = Some(DeliveryOutcome::permanent(error)),
            }
        }
        if !items.is_empty() {
            let mut client = match self.connect().await {
                Ok(client) => client,
                Err(error) => {
                    let error = format!("cannot connect to the target database: {error}");
                    return fill(outcomes, || DeliveryOutcome::retry(error.clone()));
                }
            };
            let all: Vec<&Item> = items.iter().collect();
            match self.write(&mut client, &all, batch).await {
                Ok(()) => {
                    for item in &items {
                        outcomes[item.index] = Some(DeliveryOutcome::Delivered);
                    }
                }
                Err(_) if client.is_closed() => {}
                Err(_) => {
                    // Find the refused messages: each alone in its own
                    // transaction (idempotent, so the others are unharmed).
                    for item in &items {
                        let outcome = match self.write(&mut client, &[item], batch).await {
                            Ok(()) => DeliveryOutcome::Delivered,
                            Err(error) => self.outcome(item, error),
                        };
                        outcomes[item.index] = Some(outcome);
                        if client.is_closed() {
                            break;
                        }
                    }
                }
            }
            if !client.is_closed() {
                self.idle.lock().await.push(client);
            }
        }
        fill(outcomes, || {
            DeliveryOutcome::retry("the connection to the target database was lost")
        })
    }

    /// One transaction writing `items`.
    async fn write(
        &self,
        client: &mut Client,
        items: &[&Item],
        batch: &[StoredMessage],
    ) -> Result<(), WriteError> {
        let written = self.write_transaction(client, items, batch).await;
        if written.is_err() {
            // A table created or read inside the rolled-back transaction
            // may not exist, or may have changed: read it again next time.
            self.tables.lock().await.clear();
        }
        written
    }

    async fn write_transaction(
        &self,
        client: &mut Client,
        items: &[&Item],
        batch: &[StoredMessage],
    ) -> Result<(), WriteError> {
        let mut by_table: Vec<(&TableRef, Vec<&Item>)> = Vec::new();
        for &item in items {
            match by_table.iter_mut().find(|(table, _)| **table == item.table) {
                Some((_, list)) => list.push(item),
                None => by_table.push((&item.table, vec![item])),
            }
        }
        let tx = client.transaction().await?;
        for (table, items) in by_table {
            let target = self.target(&tx, table, items[0]).await?;
            match self.settings.mode {
                PostgresMode::Append => append::write(&tx, table, &items, batch).await?,
                PostgresMode::Mirror => match mirror::write(&tx, &target, &items).await {
                    Ok(()) => {}
                    Err(MirrorError::Sql(error)) => return Err(WriteError::Sql(error)),
                    Err(MirrorError::Refused(refused)) => return Err(WriteError::Refused(refused)),
                },
            }
        }
        tx.commit().await?;
        Ok(())
    }

    /// The target table `table`, read from the catalog (and created when
    /// missing and asked to) the first time.
    async fn target(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
        table: &TableRef,
        first: &Item,
    ) -> Result<Arc<TargetTable>, WriteError> {
        if let Some(known) = self.tables.lock().await.get(table) {
            return Ok(known.clone());
        }
        let mut described = TargetTable::describe(tx.client(), table).await?;
        if described.is_none() && self.settings.create_table {
            let sql = match self.settings.mode {
                PostgresMode::Append => append::create_sql(table),
                PostgresMode::Mirror => self.mirror_create_sql(table, first).await?,
            };
            tx.batch_execute(&sql).await?;
            described = TargetTable::describe(tx.client(), table).await?;
        }
        let described = described.ok_or_else(|| {
            WriteError::Setup(format!(
                "target table {table} does not exist; create it, or set `create_table: true`"
            ))
        })?;
        let described = Arc::new(described);
        self.tables
            .lock()
            .await
            .insert(table.clone(), described.clone());
        Ok(described)
    }

    /// The DDL of a mirror table for `table`, from the definition of the
    /// source table of `first`.
    async fn mirror_create_sql(
        &self,
        table: &TableRef,
        first: &Item,
    ) -> Result<String, WriteError> {
        let Some(source) = &self.settings.source else {
            return Err(WriteError::Setup(format!(
                "target table {table} does not exist and this sink has no source database to copy its definition from; create it"
            )));
        };
        let source_table = TableRef {
            schema: first.meta_str("table_schema").to_string(),
            table: first.meta_str("table_name").to_string(),
        };
        let (client, _driver) = source.connect_query().await.map_err(|e| {
            WriteError::Setup(format!("cannot connect to the source database: {e}"))
        })?;
        create::mirror_table_sql(&client, &source_table, table)
            .await
            .map_err(WriteError::Setup)
    }

    /// The outcome of `item` written alone that failed with `error`.
    fn outcome(&self, item: &Item, error: WriteError) -> DeliveryOutcome {
        let outcome = errors::outcome(error);
        if let DeliveryOutcome::Failed {
            error,
            retriable: false,
        } = &outcome
        {
            warn!(sink = %self.sink, table = %item.table, %error, "postgres refused a message; it is dead-lettered");
        }
        outcome
    }
}

fn fill(
    outcomes: Vec<Option<DeliveryOutcome>>,
    missing: impl Fn() -> DeliveryOutcome,
) -> Vec<DeliveryOutcome> {
    outcomes
        .into_iter()
        .map(|outcome| outcome.unwrap_or_else(&missing))
        .collect()
}

#[async_trait]
impl Destination for PostgresDestination {
    fn limits(&self) -> &DeliveryLimits {
        &self.settings.limits
    }

    async fn deliver(&self, batch: &[StoredMessage]) -> Vec<DeliveryOutcome> {
        let timeout = self.settings.limits.request_timeout;
        match tokio::time::timeout(timeout, self.deliver_all(batch)).await {
            Ok(outcomes) => outcomes,
            Err(_) => {
                // The transaction may still commit; a retry is idempotent.
                self.idle.lock().await.clear();
                let error = format!("the write did not finish within {timeout:?}");
                vec![DeliveryOutcome::retry(error); batch.len()]
            }
        }
    }
}
