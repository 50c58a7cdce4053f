//! Reads how much WAL the slot holds back and how far its confirmed
//! position trails the server, every few seconds, into gauges
//! ([`weft_core::metrics::SLOT_SIZE`], [`weft_core::metrics::SLOT_CONFIRMED_LAG`]).
//! A slot that stops advancing (a paused sink, a stuck source) shows up
//! here before the server's disk fills, and as the slot's
//! [`SLOT_LAG_CHECK`] health warning once it retains more WAL than the
//! slot's `lag_warning_mb`.

use std::sync::Arc;
use std::time::Duration;

use weft_core::health::{EntityKind, Status};
use weft_core::metrics::{SLOT_CONFIRMED_LAG, SLOT_SIZE};

/// How often the slot's position is read.
pub const INTERVAL: Duration = Duration::from_secs(5);

/// The slot's health check raised while it retains more WAL than its bound.
pub const SLOT_LAG_CHECK: &str = "slot_lag";

/// Polls the slot `slot` of `database` (its name in the config, the
/// metrics' `database` label) through `client` until aborted, warning on
/// the slot's health while it retains more than `lag_warning_bytes`.
/// A failed read is logged at debug level and retried at the next tick: the
/// replication session notices a lost connection itself.
pub fn spawn(
    client: Arc<tokio_postgres::Client>,
    database: String,
    slot: String,
    lag_warning_bytes: u64,
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
                    let retained_bytes = row.get::<_, Option<f64>>(0).unwrap_or(0.0);
                    retained.set(retained_bytes);
                    lag.set(row.get::<_, Option<f64>>(1).unwrap_or(0.0));
                    check_lag(&slot, retained_bytes, lag_warning_bytes);
                }
                Ok(None) => tracing::debug!(%slot, "slot not found while reading its size"),
                Err(error) => tracing::debug!(%error, "cannot read the slot's size"),
            }
        }
    })
}

/// Raises or clears the slot's [`SLOT_LAG_CHECK`] for `retained` bytes.
fn check_lag(slot: &str, retained: f64, bound: u64) {
    let health = weft_core::health::global();
    if retained > bound as f64 {
        health.fail(
            EntityKind::Slot,
            slot,
            SLOT_LAG_CHECK,
            Status::Warning,
            format!(
                "the slot retains {:.1} MiB of WAL, more than its lag_warning_mb ({} MiB): weft is not confirming fast enough; look for a paused or failing sink, a full backlog or a stalled source",
                retained / (1 << 20) as f64,
                bound >> 20
            ),
        );
    } else {
        health.clear(EntityKind::Slot, slot, SLOT_LAG_CHECK);
    }
}
