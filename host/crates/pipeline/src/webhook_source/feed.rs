//! Feeds a webhook source's log of accepted requests into its pipeline as
//! the replication source feeds a database's: each request is one
//! transaction whose changes are its messages (inserts of the table
//! `webhook.<source>`), committed at the request's position in the log.
//! The pipeline then runs every sink's functions and stores, holds or
//! dead-letters the messages exactly as for database changes, and reports
//! how far every sink has stored; the feed prunes the log up to there.
//!
//! After a crash the feed starts again from the oldest request still in the
//! log, and the pipeline skips what each sink's cursor says it stored.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use weft_core::change::{Action, Change, Relation, SourceEvent, WebhookTag};
use weft_core::lsn::Lsn;
use weft_core::message::WEBHOOK_SCHEMA;
use weft_source::events::EventSender;
use weft_store::{Store, StoreError, WebhookRequest};

/// Most requests read from the log at once.
const READ_BATCH: u32 = 256;
/// How often expired idempotency keys are pruned.
const KEY_PRUNE_INTERVAL: Duration = Duration::from_secs(60);
/// Most idempotency keys pruned per statement.
const KEY_PRUNE_BATCH: u32 = 1000;

/// The feed of one webhook source. Clones read the same log (a failed
/// feed restarts as a clone).
#[derive(Clone)]
pub struct WebhookFeed {
    source: String,
    store: Store,
    accepted: Arc<Notify>,
    key_retention_ms: u64,
}

impl WebhookFeed {
    /// The feed of `source`'s log in `store`; `accepted` is notified after
    /// each accepted request, and idempotency keys older than
    /// `key_retention` are pruned.
    pub fn new(source: &str, store: Store, accepted: Arc<Notify>, key_retention: Duration) -> Self {
        WebhookFeed {
            source: source.to_string(),
            store,
            accepted,
            key_retention_ms: key_retention.as_millis() as u64,
        }
    }

    /// The name of the source whose log it reads.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Sends the log's requests to `events` in order until `shutdown`,
    /// pruning what `durable` (the pipeline's stored position) covers.
    pub async fn run(
        self,
        events: EventSender,
        mut durable: watch::Receiver<Lsn>,
        shutdown: CancellationToken,
    ) -> Result<(), StoreError> {
        let relation = Arc::new(Relation {
            oid: 0,
            schema: WEBHOOK_SCHEMA.to_string(),
            name: self.source.clone(),
            columns: Vec::new(),
            primary_key: Vec::new(),
        });
        let mut after = 0;
        let mut pruned = 0;
        let mut key_prune = tokio::time::interval(KEY_PRUNE_INTERVAL);
        key_prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let stored = durable.borrow_and_update().0;
            if stored > pruned {
                let (store, source) = (self.store.clone(), self.source.clone());
                tokio::task::spawn_blocking(move || store.prune_webhook_requests(&source, stored))
                    .await
                    .expect("pruning does not panic")?;
                pruned = stored;
            }
            let (store, source) = (self.store.clone(), self.source.clone());
            let requests = tokio::task::spawn_blocking(move || {
                store.webhook_requests_after(&source, after, READ_BATCH)
            })
            .await
            .expect("reading the log does not panic")?;
            if requests.is_empty() {
                tokio::select! {
                    _ = shutdown.cancelled() => return Ok(()),
                    _ = self.accepted.notified() => {}
                    changed = durable.changed() => if changed.is_err() { return Ok(()) },
                    _ = key_prune.tick() => self.prune_keys().await,
                }
                continue;
            }
            debug!(source = %self.source, requests = requests.len(), "feeding accepted requests");
            for request in requests {
                after = request.seq;
                for event in events_of(&relation, &self.source, request) {
                    tokio::select! {
                        _ = shutdown.cancelled() => return Ok(()),
                        sent = events.send(event) => if sent.is_err() { return Ok(()) },
                    }
                }
            }
        }
    }

    async fn prune_keys(&self) {
        let (store, source, retention) = (
            self.store.clone(),
            self.source.clone(),
            self.key_retention_ms,
        );
        let pruned = tokio::task::spawn_blocking(move || {
            loop {
                match store.prune_webhook_keys(&source, retention, KEY_PRUNE_BATCH) {
                    Ok(n) if n == KEY_PRUNE_BATCH as usize => continue,
                    done => return done,
                }
            }
        })
        .await;
        if let Ok(Err(error)) = pruned {
            warn!(source = %self.source, %error, "cannot prune expired idempotency keys; trying again later");
        }
    }
}

/// The changes of `request` followed by its Commit.
fn events_of(
    relation: &Arc<Relation>,
    source: &str,
    request: WebhookRequest,
) -> impl Iterator<Item = SourceEvent> {
    let position = Lsn(request.seq);
    let tag = Arc::new(WebhookTag {
        source: source.to_string(),
        request_id: request.request_id,
    });
    let commit_timestamp =
        chrono::DateTime::from_timestamp_millis(request.accepted_at).unwrap_or_default();
    let relation = Arc::clone(relation);
    request
        .records
        .into_iter()
        .enumerate()
        .map(move |(index, record)| {
            SourceEvent::Change(Change {
                relation: Arc::clone(&relation),
                action: Action::Insert,
                commit_lsn: position,
                commit_idx: index as u32,
                xid: 0,
                commit_timestamp,
                new: Some(record),
                old: None,
                backfill: None,
                webhook: Some(Arc::clone(&tag)),
            })
        })
        .chain(std::iter::once(SourceEvent::Commit {
            commit_lsn: position,
            end_lsn: position,
        }))
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::{BatchLimits, FunctionChain, Pipeline, SinkHandles, SinkPipeline};
    use weft_sinks::config::Config;
    use weft_store::ReceiveLimits;

    fn row(n: i64) -> weft_core::change::Row {
        serde_json::json!({ "n": n }).as_object().unwrap().clone()
    }

    async fn wait_for(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn accepted_requests_reach_their_sinks_in_order_and_then_leave_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::from_yaml(
            "webhook_sources:
  - {name: hooks, auth: {bearer_token: t}}
  - {name: elsewhere, auth: {bearer_token: t}}
sinks:
  - {name: orders, source: {webhook: hooks}, destination: {type: sequin_stream}}
  - {name: other, source: {webhook: elsewhere}, destination: {type: sequin_stream}}
",
            dir.path(),
            &|_| None,
        )
        .unwrap();
        let store = Store::open(&dir.path().join("weft.db")).unwrap();
        store
            .accept_webhook("hooks", "req-a", &[row(1)], None, 1000)
            .unwrap();
        store
            .accept_webhook("hooks", "req-b", &[row(2), row(3)], None, 1000)
            .unwrap();
        let shutdown = CancellationToken::new();
        let (durable_tx, durable_rx) = watch::channel(Lsn::ZERO);
        let sinks = config
            .sinks
            .iter()
            .map(|sink| SinkPipeline::new(sink.clone(), FunctionChain::default()))
            .collect();
        let pipeline = Pipeline::new(
            sinks,
            store.clone(),
            durable_tx,
            SinkHandles::new(),
            BatchLimits::default(),
        );
        let (events_tx, events_rx) =
            weft_source::events::channel(16, weft_source::events::MAX_BYTES);
        let feed = WebhookFeed::new(
            "hooks",
            store.clone(),
            Arc::new(Notify::new()),
            Duration::from_secs(60),
        );
        let fed = tokio::spawn(feed.run(events_tx, durable_rx, shutdown.clone()));
        let piped = tokio::spawn(pipeline.run(events_rx, shutdown.clone()));

        wait_for("three messages stored", || {
            store.message_counts("orders").unwrap().stored == 3
        })
        .await;
        wait_for("the log pruned", || {
            store
                .webhook_requests_after("hooks", 0, 10)
                .unwrap()
                .is_empty()
        })
        .await;
        assert_eq!(store.message_counts("other").unwrap().stored, 0);
        let limits = ReceiveLimits {
            ack_wait: Duration::from_secs(30),
            max_ack_pending: 100,
            max_deliver: None,
        };
        let mut seen = Vec::new();
        for _ in 0..3 {
            // One group per source: one message in flight at a time.
            let batch = store.receive("orders", 10, limits).unwrap();
            assert_eq!(batch.len(), 1);
            store.ack("orders", &[batch[0].ack_id]).unwrap();
            seen.push(batch[0].json());
        }
        let ns: Vec<i64> = seen
            .iter()
            .map(|m| m["record"]["n"].as_i64().unwrap())
            .collect();
        assert_eq!(ns, vec![1, 2, 3]);
        let third = &seen[2]["metadata"];
        assert_eq!(third["webhook_source"], "hooks");
        assert_eq!(third["table_schema"], WEBHOOK_SCHEMA);
        assert_eq!(third["table_name"], "hooks");
        assert_eq!(
            (third["commit_lsn"].as_u64(), third["commit_idx"].as_u64()),
            (Some(2), Some(1))
        );
        assert_eq!(
            third["idempotency_key"],
            weft_core::message::webhook_idempotency_key("req-b", 1)
        );
        shutdown.cancel();
        fed.await.unwrap().unwrap();
        piped.await.unwrap().unwrap();
        assert_eq!(store.sink_cursor("orders").unwrap(), Some(Lsn(2)));
    }
}
