//! A Sequin Stream sink's consumer side: receive (with long polling), ack
//! and nack over the store, run off the async threads.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{PullError, SequinStreamSettings};
use crate::pause::PauseSwitch;
use weft_store::{AckId, AckOutcome, Delivered, ReceiveLimits, Store, StoreError, StoreTime};

/// The consumer side of one Sequin Stream sink. Cheap to clone.
#[derive(Clone, Debug)]
pub struct SequinStream {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    name: String,
    store: Store,
    settings: SequinStreamSettings,
    /// Wakes long-polling receivers when messages may have become receivable.
    changed: Notify,
    /// One permit per receive request allowed open at once (`max_waiting`).
    receivers: Semaphore,
    /// While on, receives hand out nothing.
    pause: PauseSwitch,
}

impl SequinStream {
    /// The consumer side of the sink `name`, whose messages are in `store`.
    /// The sink's messages are stored as segments, read in place (see
    /// [`Store::read_in_place`]).
    pub fn new(name: &str, store: Store, settings: SequinStreamSettings) -> SequinStream {
        store.read_in_place(name);
        let receivers = Semaphore::new(settings.max_waiting as usize);
        SequinStream {
            inner: Arc::new(Inner {
                name: name.to_string(),
                store,
                settings,
                changed: Notify::new(),
                receivers,
                pause: PauseSwitch::default(),
            }),
        }
    }

    /// The sink's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The switch that pauses this sink's receives; wake the stream after
    /// turning it off.
    pub fn pause_switch(&self) -> PauseSwitch {
        self.inner.pause.clone()
    }

    /// The sink's settings.
    pub fn settings(&self) -> &SequinStreamSettings {
        &self.inner.settings
    }

    /// Tells waiting receivers that messages may be receivable. The pipeline
    /// calls it after [`Store::append`] stored messages for this sink.
    pub fn wake(&self) {
        self.inner.changed.notify_waiters();
    }

    /// Leases up to `batch_size` messages. With `wait_for`, waits until at
    /// least one is receivable, `wait_for` has passed, or `cancel` fires
    /// (then returns what it has, possibly nothing).
    pub async fn receive(
        &self,
        batch_size: u32,
        wait_for: Option<Duration>,
        cancel: &CancellationToken,
    ) -> Result<Vec<Delivered>, PullError> {
        let _permit =
            self.inner
                .receivers
                .try_acquire()
                .map_err(|_| PullError::TooManyWaiting {
                    sink: self.inner.name.clone(),
                    max_waiting: self.inner.settings.max_waiting,
                })?;
        let deadline = Instant::now() + wait_for.unwrap_or_default();
        loop {
            // Register for a wake-up before looking, so that an append
            // between the look and the wait is not missed.
            let changed = self.inner.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();

            let settings = &self.inner.settings;
            let limits = ReceiveLimits {
                ack_wait: settings.ack_wait,
                max_ack_pending: settings.max_ack_pending,
                max_deliver: settings.max_deliver,
            };
            let looked_at = StoreTime::now();
            let delivered = if self.inner.pause.is_paused() {
                Vec::new()
            } else {
                self.blocking(move |store, sink| store.receive(sink, batch_size, limits))
                    .await?
            };
            let now = Instant::now();
            if !delivered.is_empty() || now >= deadline || cancel.is_cancelled() {
                return Ok(delivered);
            }
            // A lease expiring makes a message receivable without any wake().
            let expiry = self
                .blocking(move |store, sink| store.next_lease_expiry(sink, looked_at))
                .await?;
            let wake_at = match expiry {
                Some(after) => deadline.min(now + after + Duration::from_millis(1)),
                None => deadline,
            };
            tokio::select! {
                _ = &mut changed => {}
                _ = tokio::time::sleep_until(wake_at) => {}
                _ = cancel.cancelled() => {}
            }
        }
    }

    /// Acks (deletes) the messages leased under `ack_ids`.
    pub async fn ack(&self, ack_ids: Vec<AckId>) -> Result<AckOutcome, PullError> {
        let outcome = self
            .blocking(move |store, sink| store.ack(sink, &ack_ids))
            .await?;
        if outcome.processed > 0 {
            // The next messages of the acked groups, and room under max_ack_pending.
            self.wake();
        }
        Ok(outcome)
    }

    /// Nacks the messages leased under `ack_ids`: visible again at once.
    pub async fn nack(&self, ack_ids: Vec<AckId>) -> Result<AckOutcome, PullError> {
        let outcome = self
            .blocking(move |store, sink| store.nack(sink, &ack_ids))
            .await?;
        if outcome.processed > 0 {
            self.wake();
        }
        Ok(outcome)
    }

    /// Runs a store call on the blocking pool.
    async fn blocking<T, F>(&self, call: F) -> Result<T, PullError>
    where
        T: Send + 'static,
        F: FnOnce(&Store, &str) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || call(&inner.store, &inner.name))
            .await
            .map_err(|e| PullError::Panicked {
                sink: self.inner.name.clone(),
                detail: e.to_string(),
            })?
            .map_err(PullError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_core::lsn::Lsn;
    use weft_store::{NewMessage, SinkBatch};

    fn append(store: &Store, sink: &str, lsn: u64, group: &str) {
        let message = NewMessage {
            commit_lsn: Lsn(lsn),
            commit_idx: 0,
            group_id: group.into(),
            idempotency_key: weft_core::message::idempotency_key(Lsn(lsn), 0),
            payload: weft_core::payload::Payload::Json(serde_json::json!({"lsn": lsn})).into(),
            route: None,
        };
        let batch = [SinkBatch::of(sink, vec![message])];
        store.append(&batch, Lsn(lsn)).unwrap();
    }

    fn stream(settings: SequinStreamSettings) -> (tempfile::TempDir, Store, SequinStream) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("weft.db")).unwrap();
        let stream = SequinStream::new("orders", store.clone(), settings);
        (dir, store, stream)
    }

    #[tokio::test]
    async fn long_poll_returns_when_woken_after_append() {
        let (_dir, store, stream) = stream(SequinStreamSettings::default());
        let cancel = CancellationToken::new();
        let waiter = {
            let stream = stream.clone();
            let cancel = cancel.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let got = stream
                    .receive(10, Some(Duration::from_secs(20)), &cancel)
                    .await
                    .unwrap();
                (got, started.elapsed())
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        append(&store, "orders", 10, "a");
        stream.wake();
        let (got, waited) = waiter.await.unwrap();
        assert_eq!(got.len(), 1);
        assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    }

    #[tokio::test]
    async fn long_poll_returns_empty_at_the_deadline_or_on_cancel() {
        let (_dir, _store, stream) = stream(SequinStreamSettings::default());
        let cancel = CancellationToken::new();
        let started = Instant::now();
        let got = stream
            .receive(1, Some(Duration::from_millis(300)), &cancel)
            .await
            .unwrap();
        assert!(got.is_empty());
        assert!(started.elapsed() >= Duration::from_millis(300));

        let waiter = {
            let (stream, cancel) = (stream.clone(), cancel.clone());
            tokio::spawn(async move {
                stream
                    .receive(1, Some(Duration::from_secs(60)), &cancel)
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
        let got = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(got.is_empty());
    }

    #[tokio::test]
    async fn long_poll_picks_up_a_message_whose_lease_expires() {
        let settings = SequinStreamSettings {
            ack_wait: Duration::from_millis(500),
            ..Default::default()
        };
        let (_dir, store, stream) = stream(settings);
        append(&store, "orders", 10, "a");
        let cancel = CancellationToken::new();
        let first = stream.receive(1, None, &cancel).await.unwrap();
        assert_eq!(first.len(), 1);
        let started = Instant::now();
        let again = stream
            .receive(1, Some(Duration::from_secs(10)), &cancel)
            .await
            .unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].deliver_count, 2);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn max_waiting_refuses_extra_receivers() {
        let settings = SequinStreamSettings {
            max_waiting: 1,
            ..Default::default()
        };
        let (_dir, _store, stream) = stream(settings);
        let cancel = CancellationToken::new();
        let waiter = {
            let (stream, cancel) = (stream.clone(), cancel.clone());
            tokio::spawn(async move {
                stream
                    .receive(1, Some(Duration::from_secs(60)), &cancel)
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let err = stream.receive(1, None, &cancel).await.unwrap_err();
        assert!(
            matches!(err, PullError::TooManyWaiting { max_waiting: 1, .. }),
            "{err}"
        );
        cancel.cancel();
        waiter.await.unwrap().unwrap();
        // The permit is back once the first receive returned.
        assert!(stream.receive(1, None, &cancel).await.unwrap().is_empty());
    }
}
