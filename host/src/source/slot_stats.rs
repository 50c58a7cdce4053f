//! Reads how much WAL the slot holds back and how far its confirmed
//! position trails the server, every few seconds, into gauges
//! ([`crate::metrics::SLOT_SIZE`], [`crate::metrics::SLOT_CONFIRMED_LAG`]).
//! A slot that stops advancing (a paused sink, a stuck source) shows up
//! here before the server's disk fills.

use std::sync::Arc;
use std::time::Duration;

use crate::metrics::{SLOT_CONFIRMED_LAG, SLOT_SIZE};

/// How often the slot's position is read.
pub const INTERVAL: Duration = Duration::from_secs(5);

/// Polls the slot `slot` of `database` (its name in the config, the
/// metrics' `database` label) through `client` until aborted.
/// A failed read is logged at debug level and retried at the next tick: the
/// replication session notices a lost connection itself.
pub fn spawn(
    client: Arc<tokio_postgres::Client>,
    database: String,
    slot: String,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let labels = [("database", database), ("slot", slot.clone())];
        let retained = metrics::gauge!(SLOT_SIZE, &labels);
        let lag = metrics::gauge!(SLOT_CONFIRMED_LAG, &labels);
        let mut ticker = tokio::time::interval(INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let row = client
                .query_opt(
                    "SELECT (pg_catalog.pg_current_wal_lsn() - restart_lsn)::float8, \
                            (pg_catalog.pg_current_wal_lsn() - confirmed_flush_lsn)::float8 \
                     FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
                    &[&slot],
                )
                .await;
            match row {
                Ok(Some(row)) => {
                    retained.set(row.get::<_, Option<f64>>(0).unwrap_or(0.0));
                    lag.set(row.get::<_, Option<f64>>(1).unwrap_or(0.0));
                }
                Ok(None) => tracing::debug!(%slot, "slot not found while reading its size"),
                Err(error) => tracing::debug!(%error, "cannot read the slot's size"),
            }
        }
    })
}
