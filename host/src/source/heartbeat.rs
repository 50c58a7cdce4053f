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
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The logical-message prefix of weft's heartbeats.
pub const HEARTBEAT_PREFIX: &str = "weft.heartbeat";

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

/// Writes a heartbeat through `client` every `interval` until aborted.
/// Failures are logged and retried at the next tick: a lost connection is
/// noticed (and reconnected) by the replication session itself.
pub fn spawn(
    client: Arc<tokio_postgres::Client>,
    interval: Duration,
    session: Uuid,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            ticker.tick().await;
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
