//! Heartbeats: a transactional logical message written into the source
//! database every few seconds on an ordinary connection.
//!
//! Why: since Postgres 15, pgoutput skips empty transactions, and a slot
//! only advances when its consumer confirms a position. In a database where
//! nothing replicated changes while other databases of the cluster write
//! WAL, the slot would hold that WAL back. A heartbeat is a small committed
//! transaction in the replicated database: it reaches weft like any other
//! (Begin, Message, Commit), the pipeline stores the empty transaction and
//! confirms its end, and the slot moves. It also measures ingestion latency:
//! the content carries weft's own clock at emission, so the round trip from
//! emission to decoding needs no clock agreement with the server.
//!
//! The message is `pg_logical_emit_message(true, 'weft.heartbeat', content)`
//! with content `{"session":"<uuid>","emitted_at":"<RFC 3339>"}`; the
//! session id tells this run's heartbeats from those of another weft (or
//! another slot) on the same database.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The logical-message prefix of weft's heartbeats.
pub const HEARTBEAT_PREFIX: &str = "weft.heartbeat";

/// The slot's health check raised while no heartbeat came back through the
/// replication stream within [`ALARM_INTERVALS`] intervals.
pub const HEARTBEAT_CHECK: &str = "heartbeat";

/// How many heartbeat intervals may pass without one coming back through
/// the stream before [`HEARTBEAT_CHECK`] warns.
pub const ALARM_INTERVALS: u32 = 3;

/// When this session's last heartbeat came back through the stream. Cheap
/// to clone; clones share the time.
#[derive(Debug, Clone)]
pub struct HeartbeatWatch(Arc<AtomicI64>);

impl HeartbeatWatch {
    /// A watch whose window starts now.
    pub fn start() -> HeartbeatWatch {
        HeartbeatWatch(Arc::new(AtomicI64::new(Utc::now().timestamp_millis())))
    }

    /// Records that a heartbeat came back.
    pub fn seen(&self) {
        self.0
            .store(Utc::now().timestamp_millis(), Ordering::Relaxed);
    }

    /// Time since the last heartbeat came back (or since the start).
    pub fn silent_for(&self) -> Duration {
        let ms = Utc::now().timestamp_millis() - self.0.load(Ordering::Relaxed);
        Duration::from_millis(ms.max(0) as u64)
    }
}

/// What a heartbeat message carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatContent {
    /// The emitting source's session (one per `run`).
    pub session: Uuid,
    /// weft's clock when the heartbeat was written.
    pub emitted_at: DateTime<Utc>,
}

impl HeartbeatContent {
    /// The time from emission until `now`, if this heartbeat came from
    /// `session`.
    pub fn round_trip(content: &[u8], session: Uuid, now: DateTime<Utc>) -> Option<Duration> {
        let heartbeat: HeartbeatContent = serde_json::from_slice(content).ok()?;
        if heartbeat.session != session {
            return None;
        }
        (now - heartbeat.emitted_at).to_std().ok()
    }
}

/// Writes a heartbeat through `client` every `interval` until aborted, and
/// raises the slot's [`HEARTBEAT_CHECK`] warning while `watch` saw none come
/// back for [`ALARM_INTERVALS`] intervals (a stalled stream: a full
/// backlog, a stuck pipeline, a server that stopped sending).
/// Failures are logged and retried at the next tick: a lost connection is
/// noticed (and reconnected) by the replication session itself.
pub fn spawn(
    client: Arc<tokio_postgres::Client>,
    interval: Duration,
    session: Uuid,
    watch: HeartbeatWatch,
    slot: String,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        let window = interval * ALARM_INTERVALS;
        loop {
            ticker.tick().await;
            check_silence(&slot, watch.silent_for(), window, interval);
            let content = serde_json::to_string(&HeartbeatContent {
                session,
                emitted_at: Utc::now(),
            })
            .expect("a heartbeat serialises");
            if let Err(e) = client
                .execute(
                    "SELECT pg_catalog.pg_logical_emit_message(true, $1::text, $2::text)",
                    &[&HEARTBEAT_PREFIX, &content],
                )
                .await
            {
                tracing::warn!(error = %e, "cannot write a heartbeat; retrying at the next interval");
            }
        }
    })
}

/// Raises or clears the slot's [`HEARTBEAT_CHECK`].
fn check_silence(slot: &str, silent: Duration, window: Duration, interval: Duration) {
    let health = weft_core::health::global();
    let kind = weft_core::health::EntityKind::Slot;
    if silent > window {
        health.fail(
            kind,
            slot,
            HEARTBEAT_CHECK,
            weft_core::health::Status::Warning,
            format!(
                "no heartbeat came back through the replication stream for {}s (one is written every {}ms): the stream is stalled; look for a full backlog, a stuck sink or a lost replication connection",
                silent.as_secs(),
                interval.as_millis()
            ),
        );
    } else {
        health.clear(kind, slot, HEARTBEAT_CHECK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_counts_only_our_own_session() {
        let session = Uuid::new_v4();
        let emitted_at = Utc::now();
        let content = serde_json::to_vec(&HeartbeatContent {
            session,
            emitted_at,
        })
        .unwrap();
        let later = emitted_at + chrono::Duration::milliseconds(250);
        assert_eq!(
            HeartbeatContent::round_trip(&content, session, later),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            HeartbeatContent::round_trip(&content, Uuid::new_v4(), later),
            None
        );
        assert_eq!(
            HeartbeatContent::round_trip(b"not json", session, later),
            None
        );
    }
}
