//! Time-based retention of a change retention's event table: rows
//! committed longer ago than `retain_for` are deleted in small batches, so
//! that neither a long lock nor one huge transaction bloats the table.
//!
//! One task per change retention with `retain_for`. Each round (every
//! quarter of the age, between 1 s and 60 s) deletes up to
//! [`BATCH_ROWS`] rows per statement, oldest first, pausing between
//! statements, until a statement deletes fewer. The event table's
//! `committed_at` index makes each statement cheap. A table that does not
//! exist yet (the sink creates it on its first delivery) is skipped.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use weft_core::health::{EntityKind, Status};
use weft_postgres::PgConnectOptions;
use weft_postgres::TableName;

/// Rows one DELETE removes at most.
pub const BATCH_ROWS: i64 = 1000;
/// Pause between two DELETEs of a round, so that vacuum and other writers
/// keep up.
const PAUSE: Duration = Duration::from_millis(50);
/// Counter of event rows deleted by retention. Label: `retention`.
pub const RETENTION_DELETED: &str = "weft_change_retention_deleted_total";
/// The retention's health check (on its sink) while deletes fail.
pub const RETENTION_CHECK: &str = "retention";

/// What one retention task needs.
#[derive(Debug, Clone)]
pub struct RetentionJob {
    /// The change retention's name (also its sink's).
    pub name: String,
    /// The database holding the event table.
    pub target: PgConnectOptions,
    /// The event table.
    pub table: TableName,
    /// Rows committed longer ago than this are deleted.
    pub retain_for: Duration,
}

impl RetentionJob {
    /// How often a round runs: a quarter of the age, from 1 s to 60 s.
    pub fn interval(&self) -> Duration {
        (self.retain_for / 4).clamp(Duration::from_secs(1), Duration::from_secs(60))
    }

    /// Runs rounds until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let counter = metrics::counter!(RETENTION_DELETED, "retention" => self.name.clone());
        counter.increment(0);
        let mut ticker = tokio::time::interval(self.interval());
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut connection = None;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            match self.round(&mut connection, &shutdown).await {
                Ok(deleted) => {
                    counter.increment(deleted);
                    if deleted > 0 {
                        tracing::info!(retention = %self.name, deleted, "deleted event rows past retain_for");
                    }
                    weft_core::health::global().clear(
                        EntityKind::Sink,
                        &self.name,
                        RETENTION_CHECK,
                    );
                }
                Err(error) => {
                    connection = None;
                    tracing::warn!(retention = %self.name, %error, "retention round failed; trying again next round");
                    weft_core::health::global().fail(
                        EntityKind::Sink,
                        &self.name,
                        RETENTION_CHECK,
                        Status::Warning,
                        format!("old event rows cannot be deleted: {error}"),
                    );
                }
            }
        }
    }

    /// One round: deletes batches until one is short; returns the rows deleted.
    async fn round(
        &self,
        connection: &mut Option<Connection>,
        shutdown: &CancellationToken,
    ) -> Result<u64, String> {
        if connection.as_ref().is_none_or(|c| c.client.is_closed()) {
            let (client, _driver) = self
                .target
                .connect_query()
                .await
                .map_err(|e| e.to_string())?;
            *connection = Some(Connection {
                client,
                indexed: false,
            });
        }
        let connection = connection.as_mut().expect("connected above");
        let table = self.table.quoted();
        if !connection.indexed {
            let exists: bool = connection
                .client
                .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
                .await
                .map_err(|e| e.to_string())?
                .get(0);
            if !exists {
                return Ok(0);
            }
            connection
                .client
                .batch_execute(&create_index(&self.table))
                .await
                .map_err(|e| e.to_string())?;
            connection.indexed = true;
        }
        let client = &connection.client;
        let delete = format!(
            "DELETE FROM {table} WHERE id IN (SELECT id FROM {table} \
             WHERE committed_at < now() - make_interval(secs => $1) ORDER BY committed_at LIMIT $2)"
        );
        let age = self.retain_for.as_secs_f64();
        let mut total = 0;
        loop {
            let deleted = client
                .execute(&delete, &[&age, &BATCH_ROWS])
                .await
                .map_err(|e| e.to_string())?;
            total += deleted;
            if deleted < BATCH_ROWS as u64 || shutdown.is_cancelled() {
                return Ok(total);
            }
            tokio::time::sleep(PAUSE).await;
        }
    }
}

/// A retention task's connection, and whether the event table and its
/// `committed_at` index are known to exist (checked once per connection).
struct Connection {
    client: tokio_postgres::Client,
    indexed: bool,
}

/// `CREATE INDEX IF NOT EXISTS` on the event table's `committed_at`.
pub(crate) fn create_index(table: &TableName) -> String {
    let index = weft_postgres::protocol::quote_ident(&format!(
        "{}_committed_at_idx",
        table.name.chars().take(45).collect::<String>()
    ));
    format!(
        "CREATE INDEX IF NOT EXISTS {index} ON {} (committed_at)",
        table.quoted()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_run_at_a_quarter_of_the_age_within_bounds() {
        let job = |secs| RetentionJob {
            name: "r".into(),
            target: PgConnectOptions::try_from(
                &crate::config::PgConnection::from_url("postgres://u@localhost/db").unwrap(),
            )
            .unwrap(),
            table: TableName::parse("public.weft_events"),
            retain_for: Duration::from_secs(secs),
        };
        assert_eq!(job(2).interval(), Duration::from_secs(1));
        assert_eq!(job(40).interval(), Duration::from_secs(10));
        assert_eq!(job(7 * 86_400).interval(), Duration::from_secs(60));
    }

    #[test]
    fn the_index_is_named_after_the_table_and_quoted() {
        assert_eq!(
            create_index(&TableName::parse("audit.Events")),
            "CREATE INDEX IF NOT EXISTS \"Events_committed_at_idx\" ON \"audit\".\"Events\" (committed_at)"
        );
    }
}
