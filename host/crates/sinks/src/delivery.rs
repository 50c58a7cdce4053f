//! The delivery worker of a push sink: delivers the sink's messages from
//! its memory lane and from the store to its [`Destination`], with
//! retries, backoff and dead letters.
//!
//! Messages come first through the sink's lane ([`crate::lane`]), straight
//! from the pipeline; the store holds those that spilled (their delivery
//! failed twice, or the lane was over budget) and those stored for the
//! sink otherwise (released held changes, replayed dead letters, a sink
//! with `max_backlog_messages`). The worker:
//!
//! 1. stores what its lane spills, then takes deliveries from the lane
//!    (commit order, one message per group in flight) and leases the next
//!    deliverable stored messages (group heads whose next attempt is due),
//!    up to the destination's batch size, while fewer than `max_in_flight`
//!    deliveries run;
//! 2. settles each message by its [`DeliveryOutcome`]: delivered ones are
//!    done (a stored one is deleted and its group's next message becomes
//!    deliverable); a stored message's retriable failure is retried after
//!    an exponential backoff with jitter, which holds back only its group,
//!    and one out of attempts (`max_retry_count`) or failed permanently
//!    becomes a dead letter; a message from the lane is retried once at
//!    once, then stored (see [`crate::lane`]);
//! 3. sleeps until messages arrive in the lane, until woken by the
//!    pipeline or the API (stored messages, a replay), by a finished
//!    delivery, or until the next retry is due.
//!
//! On shutdown it starts nothing new, lets running deliveries finish (each
//! is bounded by the destination's timeout), settles them, stores what its
//! lane still holds and returns.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rand::Rng;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::lane::{Lane, Taken, ToStore};
use super::pause::PauseSwitch;
use crate::config::{DeliveryConfig, SinkConfig};
use weft_core::health::{self, EntityKind, Status};
use weft_store::{Store, StoreError, StoreTime, StoredMessage};

/// What became of one message of a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// The destination accepted it.
    Delivered,
    /// It was not delivered; `retriable` says whether trying again may help
    /// (the destination's retry logic decides).
    Failed {
        /// What went wrong, for logs and the dead letter. Never holds secrets.
        error: String,
        /// False for failures no retry can fix: dead-letter at once.
        retriable: bool,
    },
}

impl DeliveryOutcome {
    /// A failure worth retrying.
    pub fn retry(error: impl Into<String>) -> DeliveryOutcome {
        DeliveryOutcome::Failed {
            error: error.into(),
            retriable: true,
        }
    }

    /// A failure no retry can fix.
    pub fn permanent(error: impl Into<String>) -> DeliveryOutcome {
        DeliveryOutcome::Failed {
            error: error.into(),
            retriable: false,
        }
    }
}

/// Where a push sink delivers: one implementation per destination type.
#[async_trait]
pub trait Destination: Send + Sync + 'static {
    /// The sink's batch size, parallelism, timeout and retries.
    fn limits(&self) -> &DeliveryLimits;

    /// Most messages handed to one [`Destination::deliver`] call.
    fn batch_size(&self) -> u32 {
        self.limits().batch_size
    }

    /// Most [`Destination::deliver`] calls running at once.
    fn max_in_flight(&self) -> usize {
        self.limits().max_in_flight as usize
    }

    /// An upper bound on one [`Destination::deliver`] call (its timeout).
    fn max_delivery_time(&self) -> Duration {
        self.limits().request_timeout
    }

    /// Delivers `batch` (commit order, at most one message per group) and
    /// returns one outcome per message, index-aligned. Must return within
    /// [`Destination::max_delivery_time`].
    async fn deliver(&self, batch: &[StoredMessage]) -> Vec<DeliveryOutcome>;
}

/// The outcomes of `delivery` (of `messages` messages), or, when it does
/// not finish within `bound`, a retriable failure of each with the error
/// `late` gives (what did not answer, and what to check).
pub async fn within(
    bound: Duration,
    messages: usize,
    delivery: impl std::future::Future<Output = Vec<DeliveryOutcome>>,
    late: impl FnOnce() -> String,
) -> Vec<DeliveryOutcome> {
    match tokio::time::timeout(bound, delivery).await {
        Ok(outcomes) => outcomes,
        Err(_) => vec![DeliveryOutcome::retry(late()); messages],
    }
}

/// When to try a failed message again, and how often at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Delay before the first retry; it doubles with each further failure.
    pub backoff_base: Duration,
    /// The longest delay between two attempts.
    pub backoff_max: Duration,
    /// Retries after the first attempt before the message is dead-lettered;
    /// `None` retries forever.
    pub max_retry_count: Option<u32>,
}

impl Default for RetryPolicy {
    /// Sequin's: from 1 s, doubling, capped at 10 min, unlimited retries.
    fn default() -> Self {
        RetryPolicy {
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(600),
            max_retry_count: None,
        }
    }
}

/// How a push sink's deliveries are sized, timed and retried: its
/// destination's shared delivery fields, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryLimits {
    /// Most messages per delivery.
    pub batch_size: u32,
    /// Most deliveries in flight at once.
    pub max_in_flight: u32,
    /// Longest one delivery may take.
    pub request_timeout: Duration,
    /// Backoff and retry limit.
    pub retry: RetryPolicy,
}

impl DeliveryLimits {
    /// The limits of `sink`, whose destination's shared fields are `delivery`.
    pub fn resolve(sink: &SinkConfig, delivery: &DeliveryConfig) -> DeliveryLimits {
        DeliveryLimits {
            batch_size: delivery.batch_size,
            max_in_flight: delivery.max_in_flight,
            request_timeout: delivery.request_timeout(),
            retry: RetryPolicy {
                backoff_base: Duration::from_millis(delivery.retry_backoff_base_ms),
                backoff_max: Duration::from_millis(delivery.retry_backoff_max_ms),
                max_retry_count: sink.max_retry_count,
            },
        }
    }
}

impl RetryPolicy {
    /// The delay after the `attempt`-th failed attempt (1-based):
    /// `base * 2^(attempt-1)` capped at `backoff_max`, then jittered to
    /// between half and all of it, so that groups failing together do not
    /// retry in lockstep.
    pub fn delay(&self, attempt: u32) -> Duration {
        let exponent = attempt.saturating_sub(1).min(32);
        let full = self
            .backoff_base
            .saturating_mul(1u32 << exponent.min(31))
            .min(self.backoff_max);
        let half = full / 2;
        let jitter = rand::rng().random_range(0..=half.as_millis() as u64);
        half + Duration::from_millis(jitter)
    }

    /// Whether a message that failed its `attempt`-th attempt may be tried again.
    pub fn may_retry(&self, attempt: u32) -> bool {
        self.max_retry_count.is_none_or(|max| attempt <= max)
    }
}

/// Wakes a sink's delivery worker: new messages were stored or replayed.
/// Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct DeliveryWaker(Arc<Notify>);

impl DeliveryWaker {
    /// A waker not yet attached to a worker.
    pub fn new() -> DeliveryWaker {
        DeliveryWaker::default()
    }

    /// Wakes the worker (or makes its next wait return at once).
    pub fn wake(&self) {
        self.0.notify_one();
    }
}

/// Why a delivery worker stopped.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// The store failed; nothing was lost, undelivered messages stay stored.
    #[error("sink {sink}: store: {source}")]
    Store {
        /// The sink's name.
        sink: String,
        /// What the store reported.
        source: StoreError,
    },
    /// A store call or a delivery task panicked.
    #[error("sink {sink}: delivery task failed: {detail}")]
    Task {
        /// The sink's name.
        sink: String,
        /// The panic.
        detail: String,
    },
}

/// The delivery worker of one push sink.
pub struct DeliveryWorker {
    sink: String,
    store: Store,
    destination: Arc<dyn Destination>,
    retry: RetryPolicy,
    waker: DeliveryWaker,
    memory_budget: usize,
    pause: PauseSwitch,
    lane: Option<Lane>,
}

/// A finished delivery: its messages and their outcomes.
enum Finished {
    /// Messages leased from the store.
    Stored(Vec<StoredMessage>, Vec<DeliveryOutcome>),
    /// Messages taken from the lane.
    Memory(Taken, Vec<DeliveryOutcome>),
}

impl DeliveryWorker {
    /// The worker delivering `sink`'s messages from `store` to `destination`.
    /// Call `waker.wake()` after storing messages for the sink.
    pub fn new(
        sink: &str,
        store: Store,
        destination: Arc<dyn Destination>,
        retry: RetryPolicy,
        waker: DeliveryWaker,
    ) -> DeliveryWorker {
        DeliveryWorker {
            sink: sink.to_string(),
            store,
            destination,
            retry,
            waker,
            memory_budget: usize::MAX,
            pause: PauseSwitch::default(),
            lane: None,
        }
    }

    /// Leases nothing while `pause` is on (running deliveries finish);
    /// wake the worker after turning it off.
    pub fn with_pause(mut self, pause: PauseSwitch) -> DeliveryWorker {
        self.pause = pause;
        self
    }

    /// Bounds the payload bytes this worker holds in memory at once (the
    /// sink's `max_memory_mb`): it leases no more messages while deliveries
    /// in flight hold `bytes`. A single message bigger than `bytes` can
    /// never be delivered within the budget; it becomes a dead letter with
    /// that reason instead of being dropped.
    pub fn with_memory_budget(mut self, bytes: usize) -> DeliveryWorker {
        self.memory_budget = bytes.max(1);
        self
    }

    /// Takes the sink's messages from `lane` first (see [`crate::lane`]),
    /// and from the store only what the lane spilled or what was stored
    /// for it otherwise (released held changes, replayed dead letters).
    pub fn with_lane(mut self, lane: Lane) -> DeliveryWorker {
        self.lane = Some(lane);
        self
    }

    /// Delivers until `shutdown` fires, then finishes running deliveries
    /// and stores what its lane still holds.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), DeliveryError> {
        if let Some(lane) = &self.lane {
            lane.attach();
        }
        let released = self
            .blocking(|store, sink| store.release_leases(sink))
            .await?;
        if let Some(lane) = &self.lane
            && self
                .blocking(|store, sink| store.message_counts(sink))
                .await?
                .stored
                > 0
        {
            // What the store holds of the sink from before (spilled, or
            // stored while no worker ran) goes first: the feed may send
            // those changes again, and a group's later messages must not
            // overtake its stored ones. The lane resumes once the store
            // is drained.
            lane.spill();
        }
        if released > 0 {
            info!(
                sink = %self.sink,
                released, "messages in delivery when weft stopped are deliverable again"
            );
        }
        let batch_size = self.destination.batch_size().max(1);
        let max_in_flight = self.destination.max_in_flight().max(1);
        // A lease only matters if this process dies mid-delivery; the next
        // start releases it anyway.
        let lease = self.destination.max_delivery_time() + Duration::from_secs(60);
        let mut running: JoinSet<Finished> = JoinSet::new();
        let mut in_flight_bytes = 0usize;
        // Store deliveries running: the store is idle only without them.
        let mut from_store = 0usize;
        // Whether the store may hold deliverable messages of the sink, now
        // or after a retry wait: while it cannot, the worker does not ask
        // it (a lane's deliveries would otherwise cost a store read each).
        let mut look_in_store = true;
        // The last look found nothing in the store, nothing waiting for a
        // retry and no store delivery running: a spilling lane may resume.
        let mut store_drained = false;
        // The last resume found messages in the store anyway.
        let mut resume_refused = false;
        let memory_gauge =
            metrics::gauge!(weft_core::metrics::DELIVERY_MEMORY, "sink" => self.sink.clone());
        memory_gauge.set(0.0);
        if self.memory_budget != usize::MAX {
            metrics::gauge!(weft_core::metrics::DELIVERY_MEMORY_LIMIT, "sink" => self.sink.clone())
                .set(self.memory_budget as f64);
        }
        loop {
            // Register before looking, so that a wake between look and wait is kept.
            let woken = self.waker.0.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let arrived = self.lane.as_ref().map(Lane::arrivals);
            let mut arrived = std::pin::pin!(async move {
                match arrived {
                    Some(arrived) => arrived.await,
                    None => std::future::pending().await,
                }
            });

            let mut store_failed = false;
            if let Some(lane) = &self.lane {
                if self.pause.is_paused() {
                    lane.spill();
                } else if store_drained && lane.is_spilling() {
                    let empty = self
                        .blocking(|store, sink| store.message_counts(sink))
                        .await
                        .is_ok_and(|counts| counts.stored == 0);
                    if empty {
                        // The store holds nothing of the sink any more:
                        // what waits in the lane is newer than all it
                        // held, and goes through memory again.
                        lane.resume();
                        debug!(sink = %self.sink, "the store is drained; messages go through memory again");
                    } else {
                        // Stored but not deliverable (a head in a segment
                        // still, say): look again after the next change
                        // to the store, not in a loop.
                        resume_refused = true;
                    }
                }
                store_drained = false;
                match self.store_from_memory(lane, lane.to_spill()).await {
                    Ok(stored) => look_in_store |= stored,
                    Err(error) => {
                        warn!(sink = %self.sink, %error, "cannot store the messages the sink's memory lane spills; its feed starts again from the confirmed position");
                        store_failed = true;
                    }
                }
                while !shutdown.is_cancelled()
                    && !self.pause.is_paused()
                    && running.len() < max_in_flight
                    && in_flight_bytes < self.memory_budget
                {
                    let taken =
                        lane.take(batch_size as usize, self.memory_budget - in_flight_bytes);
                    if taken.messages.is_empty() {
                        break;
                    }
                    metrics::counter!(weft_core::metrics::DELIVER_ATTEMPTS, "sink" => self.sink.clone())
                        .increment(taken.messages.len() as u64);
                    in_flight_bytes += batch_bytes(&taken.messages);
                    memory_gauge.set(in_flight_bytes as f64);
                    let destination = Arc::clone(&self.destination);
                    running.spawn(async move {
                        let outcomes = destination.deliver(&taken.messages).await;
                        Finished::Memory(taken, outcomes)
                    });
                }
            }
            let looked_at = StoreTime::now();
            let mut store_empty = false;
            while look_in_store
                && !store_failed
                && !shutdown.is_cancelled()
                && !self.pause.is_paused()
                && running.len() < max_in_flight
                && in_flight_bytes < self.memory_budget
            {
                let room = self.memory_budget - in_flight_bytes;
                // Only an idle worker takes a message bigger than the room
                // left: it is then bigger than the whole budget, and is
                // dead-lettered below.
                let idle = running.is_empty();
                let leased = self
                    .blocking(move |store, sink| {
                        store.lease_deliverable_within(sink, batch_size, lease, room, idle)
                    })
                    .await;
                let batch = match leased {
                    Ok(batch) => batch,
                    Err(error) => {
                        // E.g. an operator's sqlite3 holding the lock: try again soon.
                        warn!(sink = %self.sink, %error, "cannot read the next messages; retrying in 1s");
                        store_failed = true;
                        break;
                    }
                };
                if batch.is_empty() {
                    store_empty = true;
                    break;
                }
                let batch = match self.dead_letter_oversized(batch).await {
                    Ok(batch) if batch.is_empty() => continue,
                    Ok(batch) => batch,
                    Err(error) => {
                        warn!(sink = %self.sink, %error, "cannot dead-letter an oversized message; retrying in 1s");
                        store_failed = true;
                        break;
                    }
                };
                in_flight_bytes += batch_bytes(&batch);
                memory_gauge.set(in_flight_bytes as f64);
                from_store += 1;
                let destination = Arc::clone(&self.destination);
                running.spawn(async move {
                    let outcomes = destination.deliver(&batch).await;
                    Finished::Stored(batch, outcomes)
                });
            }
            // One reading of the token for the checks below: a cancel arriving
            // between two readings must not disable every branch of the select.
            let stopping = shutdown.is_cancelled();
            if stopping && running.is_empty() {
                break;
            }
            // With every slot busy, a due retry must wait for a delivery to
            // finish; waking for it would only spin.
            let next_retry = if stopping || running.len() >= max_in_flight {
                None
            } else if store_failed {
                Some(Duration::from_secs(1))
            } else if !look_in_store {
                None
            } else {
                let next = self
                    .blocking(move |store, sink| store.next_lease_expiry(sink, looked_at))
                    .await
                    .unwrap_or(Some(Duration::from_secs(1)));
                if next.is_none() && store_empty && from_store == 0 {
                    look_in_store = false;
                    store_drained = true;
                }
                next
            };
            // A spilling lane whose store just drained resumes at the top
            // of the loop: go round at once rather than wait for an arrival.
            let resumes = store_drained
                && !resume_refused
                && !stopping
                && !self.pause.is_paused()
                && self.lane.as_ref().is_some_and(Lane::is_spilling);
            let next_retry = if resumes {
                Some(Duration::ZERO)
            } else {
                next_retry
            };
            let retry_at = next_retry.map(|after| after + Duration::from_millis(1));
            tokio::select! {
                finished = running.join_next(), if !running.is_empty() => {
                    match finished {
                        Some(Ok(Finished::Stored(batch, outcomes))) => {
                            from_store -= 1;
                            look_in_store = true;
                            resume_refused = false;
                            in_flight_bytes = in_flight_bytes.saturating_sub(batch_bytes(&batch));
                            memory_gauge.set(in_flight_bytes as f64);
                            if let Err(error) = self.settle(batch, outcomes).await {
                                // The leases stay; their messages are sent
                                // again once the leases run out (at least once).
                                warn!(sink = %self.sink, %error, "cannot record delivery outcomes; the messages will be delivered again");
                            }
                        }
                        Some(Ok(Finished::Memory(taken, outcomes))) => {
                            in_flight_bytes = in_flight_bytes.saturating_sub(batch_bytes(&taken.messages));
                            memory_gauge.set(in_flight_bytes as f64);
                            // Spilled messages are the store's to deliver now.
                            look_in_store |= self.settle_memory(taken, outcomes).await.unwrap_or(true);
                        }
                        Some(Err(e)) => {
                            if let Some(lane) = &self.lane && lane.has_in_flight() {
                                lane.lose();
                            }
                            return Err(DeliveryError::Task {
                                sink: self.sink.clone(),
                                detail: e.to_string(),
                            });
                        }
                        None => {}
                    }
                }
                _ = &mut woken, if !stopping => {
                    look_in_store = true;
                    resume_refused = false;
                }
                _ = &mut arrived, if !stopping => {}
                _ = sleep_opt(retry_at), if retry_at.is_some() && !stopping => {}
                _ = shutdown.cancelled(), if !stopping => {
                    info!(sink = %self.sink, in_flight = running.len(), "delivery stopping after running deliveries finish");
                }
            }
        }
        if let Some(lane) = &self.lane {
            // Sends are refused from here on (the pipeline stores them), and
            // what the lane holds is stored, so that nothing waits in a
            // memory nobody delivers from.
            lane.close();
            let held = lane.to_spill();
            let count = held.messages.len();
            if let Err(error) = self.store_from_memory(lane, held).await {
                warn!(sink = %self.sink, %error, "cannot store the messages the sink's memory lane held; its feed starts again from the confirmed position");
            } else if count > 0 {
                info!(sink = %self.sink, stored = count, "messages waiting in memory are stored until the sink delivers again");
            }
        }
        info!(sink = %self.sink, "delivery stopped");
        Ok(())
    }

    /// Settles a delivery from the lane: counts its outcomes, stores what
    /// spills and dead-letters what failed for good; whether it stored
    /// messages. An error means the lane is lost (see [`Lane::lose`]),
    /// already logged.
    async fn settle_memory(
        &self,
        taken: Taken,
        outcomes: Vec<DeliveryOutcome>,
    ) -> Result<bool, DeliveryError> {
        let Some(lane) = &self.lane else {
            return Ok(false);
        };
        let delivered = outcomes
            .iter()
            .filter(|outcome| **outcome == DeliveryOutcome::Delivered)
            .count();
        let last_error = outcomes.iter().rev().find_map(|outcome| match outcome {
            DeliveryOutcome::Failed { error, .. } => Some(error.clone()),
            DeliveryOutcome::Delivered => None,
        });
        weft_core::metrics::count(weft_core::metrics::DELIVER_SUCCESSES, &self.sink, delivered);
        weft_core::metrics::count(
            weft_core::metrics::DELIVER_FAILURES,
            &self.sink,
            outcomes.len() - delivered,
        );
        if let Some(error) = &last_error {
            debug!(sink = %self.sink, %error, "a delivery from memory failed; retrying once in memory, then from the store");
        }
        let mut to_store = lane.settle(taken, outcomes);
        weft_core::metrics::record_delivery_latency(
            &self.sink,
            &std::mem::take(&mut to_store.delivered_handed_at),
        );
        let stored = self.store_from_memory(lane, to_store).await;
        if let Err(error) = &stored {
            warn!(sink = %self.sink, %error, "cannot store messages whose delivery failed; the feed starts again from the confirmed position");
        }
        report_health(&self.sink, last_error);
        stored
    }

    /// Stores (or dead-letters) what `lane` gave up, and tells the lane it
    /// is durable; whether it stored messages (dead letters aside). On
    /// failure the lane is lost.
    async fn store_from_memory(
        &self,
        lane: &Lane,
        mut to_store: ToStore,
    ) -> Result<bool, DeliveryError> {
        if to_store.is_empty() {
            return Ok(false);
        }
        let messages = std::mem::take(&mut to_store.messages);
        let any_message = !messages.is_empty();
        let dead = std::mem::take(&mut to_store.dead);
        let stored = self
            .blocking(move |store, sink| {
                store.spill(sink, &messages)?;
                for (message, attempts, error) in &dead {
                    warn!(
                        sink,
                        idempotency_key = %message.idempotency_key,
                        attempts,
                        %error,
                        "message dead-lettered; its group proceeds"
                    );
                    store.dead_letter_unstored(sink, message, *attempts, error)?;
                }
                Ok(())
            })
            .await;
        match stored {
            Ok(()) => {
                lane.stored(&to_store);
                Ok(any_message)
            }
            Err(error) => {
                lane.lose();
                Err(error)
            }
        }
    }

    /// Dead-letters the messages of `batch` bigger than the whole memory
    /// budget and returns the rest.
    async fn dead_letter_oversized(
        &self,
        batch: Vec<StoredMessage>,
    ) -> Result<Vec<StoredMessage>, DeliveryError> {
        let budget = self.memory_budget;
        let (oversized, fits): (Vec<_>, Vec<_>) =
            batch.into_iter().partition(|m| m.size_bytes > budget);
        if oversized.is_empty() {
            return Ok(fits);
        }
        let sink = self.sink.clone();
        self.blocking(move |store, sink_name| {
            for message in &oversized {
                let error = format!(
                    "the message is {} bytes, more than this sink's max_memory_mb allows ({} bytes); raise max_memory_mb or shrink the message with a transform, then replay this dead letter",
                    message.size_bytes, budget
                );
                warn!(sink = %sink, idempotency_key = %message.idempotency_key, %error, "oversized message dead-lettered");
                store.dead_letter(sink_name, message.ack_id, &error)?;
            }
            Ok(())
        })
        .await?;
        Ok(fits)
    }

    /// Records the outcome of each message of a finished delivery.
    async fn settle(
        &self,
        batch: Vec<StoredMessage>,
        mut outcomes: Vec<DeliveryOutcome>,
    ) -> Result<(), DeliveryError> {
        if outcomes.len() != batch.len() {
            warn!(
                sink = %self.sink,
                expected = batch.len(),
                got = outcomes.len(),
                "destination returned the wrong number of outcomes; retrying the messages without one"
            );
            outcomes.resize(
                batch.len(),
                DeliveryOutcome::retry("the destination reported no outcome for this message"),
            );
        }
        let last_error = outcomes.iter().rev().find_map(|outcome| match outcome {
            DeliveryOutcome::Failed { error, .. } => Some(error.clone()),
            DeliveryOutcome::Delivered => None,
        });
        let retry = self.retry;
        let sink = self.sink.clone();
        let settled = self
            .blocking(move |store, sink_name| {
                let mut delivered = Vec::new();
                for (message, outcome) in batch.iter().zip(outcomes) {
                    match outcome {
                        DeliveryOutcome::Delivered => delivered.push(message.ack_id),
                        DeliveryOutcome::Failed { error, retriable } => {
                            if retriable && retry.may_retry(message.attempt) {
                                let delay = retry.delay(message.attempt);
                                debug!(
                                    sink = %sink,
                                    idempotency_key = %message.idempotency_key,
                                    attempt = message.attempt,
                                    retry_in_ms = delay.as_millis() as u64,
                                    %error,
                                    "delivery failed; retrying later"
                                );
                                store.retry_later(sink_name, message.ack_id, &error, delay)?;
                            } else {
                                warn!(
                                    sink = %sink,
                                    idempotency_key = %message.idempotency_key,
                                    attempts = message.attempt,
                                    %error,
                                    "message dead-lettered; its group proceeds"
                                );
                                store.dead_letter(sink_name, message.ack_id, &error)?;
                            }
                        }
                    }
                }
                if !delivered.is_empty() {
                    store.ack(sink_name, &delivered)?;
                }
                Ok(())
            })
            .await;
        if settled.is_ok() {
            report_health(&self.sink, last_error);
        }
        settled
    }

    /// Runs a store call on the blocking pool.
    async fn blocking<T, F>(&self, call: F) -> Result<T, DeliveryError>
    where
        T: Send + 'static,
        F: FnOnce(&Store, &str) -> Result<T, StoreError> + Send + 'static,
    {
        let store = self.store.clone();
        let sink = self.sink.clone();
        tokio::task::spawn_blocking(move || call(&store, &sink))
            .await
            .map_err(|e| DeliveryError::Task {
                sink: self.sink.clone(),
                detail: e.to_string(),
            })?
            .map_err(|source| DeliveryError::Store {
                sink: self.sink.clone(),
                source,
            })
    }
}

/// The sink's `delivery` health check: an error naming the destination's
/// last failure while deliveries fail, cleared (and the sink's last
/// success noted) by a batch that delivered everything.
fn report_health(sink: &str, last_error: Option<String>) {
    let health = health::global();
    match last_error {
        Some(error) => health.fail(
            EntityKind::Sink,
            sink,
            "delivery",
            Status::Error,
            format!("deliveries are failing: {error}; they are retried with backoff (see the dead letters for those that ran out of retries)"),
        ),
        None => {
            health.clear(EntityKind::Sink, sink, "delivery");
            health.succeeded(EntityKind::Sink, sink);
        }
    }
}

/// The payload bytes a delivery of `batch` holds.
fn batch_bytes(batch: &[StoredMessage]) -> usize {
    batch.iter().map(|m| m.size_bytes).sum()
}

async fn sleep_opt(after: Option<Duration>) {
    match after {
        Some(after) => tokio::time::sleep(after).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;
    use weft_core::lsn::Lsn;
    use weft_store::{NewMessage, SinkBatch};

    /// A destination that refuses groups listed in `failing` and records
    /// what it accepted, each call taking `delay`.
    struct Recorder {
        failing: Mutex<Vec<String>>,
        accepted: Mutex<Vec<(String, u64)>>,
        delay: Duration,
        /// Payload bytes inside `deliver` calls now, and the most seen.
        bytes_in_flight: Mutex<(usize, usize)>,
    }

    const RECORDER_LIMITS: DeliveryLimits = DeliveryLimits {
        batch_size: 3,
        max_in_flight: 2,
        request_timeout: Duration::from_secs(5),
        retry: RetryPolicy {
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(600),
            max_retry_count: None,
        },
    };

    #[async_trait]
    impl Destination for Recorder {
        fn limits(&self) -> &DeliveryLimits {
            &RECORDER_LIMITS
        }
        async fn deliver(&self, batch: &[StoredMessage]) -> Vec<DeliveryOutcome> {
            let bytes = batch_bytes(batch);
            {
                let mut held = self.bytes_in_flight.lock().unwrap();
                held.0 += bytes;
                held.1 = held.1.max(held.0);
            }
            tokio::time::sleep(self.delay).await;
            self.bytes_in_flight.lock().unwrap().0 -= bytes;
            let failing = self.failing.lock().unwrap().clone();
            batch
                .iter()
                .map(|m| {
                    if failing.contains(&m.group_id) {
                        DeliveryOutcome::retry("refused")
                    } else {
                        self.accepted
                            .lock()
                            .unwrap()
                            .push((m.group_id.clone(), m.commit_lsn.0));
                        DeliveryOutcome::Delivered
                    }
                })
                .collect()
        }
    }

    fn setup(failing: &[&str], delay: Duration) -> (tempfile::TempDir, Store, Arc<Recorder>) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("weft.db")).unwrap();
        let recorder = Arc::new(Recorder {
            failing: Mutex::new(failing.iter().map(|s| s.to_string()).collect()),
            accepted: Mutex::default(),
            delay,
            bytes_in_flight: Mutex::default(),
        });
        (dir, store, recorder)
    }

    fn append(store: &Store, lsn: u64, groups: &[&str]) {
        append_sized(store, lsn, groups, 0);
    }

    /// Like `append`, each payload about `pad` bytes long.
    fn append_sized(store: &Store, lsn: u64, groups: &[&str], pad: usize) {
        let messages = sized_messages(lsn, groups, pad);
        store
            .append(&[SinkBatch::of("s", messages)], Lsn(lsn))
            .unwrap();
    }

    /// One message per group of `groups` at `lsn`, in that order, each
    /// payload about `pad` bytes long.
    fn sized_messages(lsn: u64, groups: &[&str], pad: usize) -> Vec<NewMessage> {
        groups
            .iter()
            .enumerate()
            .map(|(idx, group)| NewMessage {
                commit_lsn: Lsn(lsn),
                commit_idx: idx as u32,
                group_id: group.to_string(),
                idempotency_key: weft_core::message::idempotency_key(Lsn(lsn), idx as u32),
                payload: weft_core::payload::Payload::Json(if pad == 0 {
                    json!({})
                } else {
                    json!({ "pad": "x".repeat(pad) })
                })
                .into(),
                route: None,
            })
            .collect()
    }

    fn fast_retries(max_retry_count: Option<u32>) -> RetryPolicy {
        RetryPolicy {
            backoff_base: Duration::from_millis(10),
            backoff_max: Duration::from_millis(40),
            max_retry_count,
        }
    }

    async fn eventually(what: &str, check: impl Fn() -> bool) {
        // Generous: retry times are wall-clock (they survive restarts in the
        // store), and a busy CI machine or a clock step can delay them.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
        while !check() {
            assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[test]
    fn backoff_doubles_with_jitter_up_to_the_cap() {
        let policy = RetryPolicy::default();
        for _ in 0..50 {
            let first = policy.delay(1);
            assert!(first >= Duration::from_millis(500) && first <= Duration::from_secs(1));
            let fourth = policy.delay(4);
            assert!(fourth >= Duration::from_secs(4) && fourth <= Duration::from_secs(8));
            let late = policy.delay(40);
            assert!(late >= Duration::from_secs(300) && late <= Duration::from_secs(600));
        }
        assert!(policy.may_retry(1_000_000));
        let limited = RetryPolicy {
            max_retry_count: Some(2),
            ..policy
        };
        assert!(limited.may_retry(2));
        assert!(!limited.may_retry(3));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failing_group_is_dead_lettered_while_others_flow_in_order() {
        let (_dir, store, recorder) = setup(&["bad"], Duration::ZERO);
        let waker = DeliveryWaker::new();
        let worker = DeliveryWorker::new(
            "s",
            store.clone(),
            recorder.clone(),
            fast_retries(Some(2)),
            waker.clone(),
        );
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(worker.run(shutdown.clone()));
        append(&store, 10, &["a", "bad", "b"]);
        append(&store, 20, &["a", "bad", "b"]);
        waker.wake();
        eventually("a and b delivered", || {
            recorder.accepted.lock().unwrap().len() == 4
        })
        .await;
        let accepted = recorder.accepted.lock().unwrap().clone();
        for group in ["a", "b"] {
            let lsns: Vec<u64> = accepted
                .iter()
                .filter(|(g, _)| g == group)
                .map(|(_, lsn)| *lsn)
                .collect();
            assert_eq!(lsns, vec![10, 20], "group {group}");
        }
        eventually("both bad messages dead", || {
            store.dead_letter_count("s").unwrap() == 2
        })
        .await;
        let dead = store.dead_letters("s", 0, 10).unwrap();
        assert_eq!(dead[0].commit_lsn, Lsn(10));
        assert_eq!(dead[0].attempts, 3, "first attempt plus two retries");
        assert_eq!(dead[0].last_error, "refused");

        // Replay after the destination recovers: delivered, in order.
        recorder.failing.lock().unwrap().clear();
        store.replay_dead_letters("s", None).unwrap();
        waker.wake();
        eventually("replayed bad delivered", || {
            recorder.accepted.lock().unwrap().len() == 6
        })
        .await;
        let bad: Vec<u64> = recorder
            .accepted
            .lock()
            .unwrap()
            .iter()
            .filter(|(g, _)| g == "bad")
            .map(|(_, lsn)| *lsn)
            .collect();
        assert_eq!(bad, vec![10, 20]);
        shutdown.cancel();
        running.await.unwrap().unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn memory_budget_bounds_bytes_in_flight_and_dead_letters_oversized_messages() {
        let (_dir, store, recorder) = setup(&[], Duration::from_millis(30));
        let waker = DeliveryWaker::new();
        // Without the budget, 2 deliveries of 3 messages (~6 x 110 bytes)
        // would run at once.
        let worker = DeliveryWorker::new(
            "s",
            store.clone(),
            recorder.clone(),
            fast_retries(None),
            waker.clone(),
        )
        .with_memory_budget(250);
        let groups: Vec<String> = (0..12).map(|g| format!("g{g}")).collect();
        let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
        append_sized(&store, 10, &groups, 100);
        append_sized(&store, 20, &["big"], 1000);
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(worker.run(shutdown.clone()));
        eventually("all small messages delivered", || {
            recorder.accepted.lock().unwrap().len() == 12
        })
        .await;
        eventually("the oversized message dead-lettered", || {
            store.dead_letter_count("s").unwrap() == 1
        })
        .await;
        shutdown.cancel();
        running.await.unwrap().unwrap();
        let peak = recorder.bytes_in_flight.lock().unwrap().1;
        assert!(peak <= 250, "{peak} payload bytes were in flight at once");
        assert!(peak >= 200, "two messages fit the budget; peak was {peak}");
        let dead = store.dead_letters("s", 0, 10).unwrap();
        assert_eq!(dead[0].group_id, "big");
        assert!(
            dead[0].last_error.contains("max_memory_mb"),
            "{}",
            dead[0].last_error
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_waits_for_deliveries_in_flight_and_records_them() {
        let (_dir, store, recorder) = setup(&[], Duration::from_millis(500));
        let waker = DeliveryWaker::new();
        let worker = DeliveryWorker::new(
            "s",
            store.clone(),
            recorder.clone(),
            fast_retries(None),
            waker.clone(),
        );
        append(&store, 10, &["a", "b"]);
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(worker.run(shutdown.clone()));
        tokio::time::sleep(Duration::from_millis(100)).await;
        shutdown.cancel();
        running.await.unwrap().unwrap();
        assert_eq!(recorder.accepted.lock().unwrap().len(), 2);
        assert_eq!(
            store.message_counts("s").unwrap().stored,
            0,
            "the finished delivery was recorded before the worker returned"
        );
    }

    /// A worker of sink `s` delivering to `recorder` from a lane of its
    /// own (a 1 MiB budget), and that lane.
    fn lane_worker(store: &Store, recorder: &Arc<Recorder>) -> (Lane, DeliveryWorker) {
        let lane = Lane::new(1 << 20, Arc::new(tokio::sync::watch::channel(0).0));
        let worker = DeliveryWorker::new(
            "s",
            store.clone(),
            recorder.clone(),
            fast_retries(None),
            DeliveryWaker::new(),
        )
        .with_lane(lane.clone());
        (lane, worker)
    }

    fn lane_messages(lsn: u64, groups: &[&str]) -> Vec<NewMessage> {
        sized_messages(lsn, groups, 0)
    }

    fn accepted_of(recorder: &Recorder, group: &str) -> Vec<u64> {
        recorder
            .accepted
            .lock()
            .unwrap()
            .iter()
            .filter(|(g, _)| g == group)
            .map(|(_, lsn)| *lsn)
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lane_delivers_from_memory_and_a_failing_group_waits_in_the_store() {
        let (_dir, store, recorder) = setup(&["b"], Duration::ZERO);
        let (lane, worker) = lane_worker(&store, &recorder);
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(worker.run(shutdown.clone()));
        lane.send(lane_messages(10, &["a", "b", "c"]), Lsn(5), None)
            .unwrap();
        eventually("a and c delivered from memory", || {
            recorder.accepted.lock().unwrap().len() == 2
        })
        .await;
        eventually("b spilled to the store", || {
            store.message_counts("s").unwrap().stored == 1
        })
        .await;
        // The lane counts it settled once the store said it is durable,
        // a moment after the row is visible.
        eventually("a stored message is settled", || {
            lane.holds_back().is_none()
        })
        .await;
        assert!(lane.is_spilling());
        // While b waits in the store, the lane's next messages go there too,
        // behind it: nothing of b's group overtakes it.
        lane.send(lane_messages(20, &["a", "b"]), Lsn(15), None)
            .unwrap();
        eventually("the later messages stored", || {
            store.message_counts("s").unwrap().stored == 2
        })
        .await;
        assert_eq!(accepted_of(&recorder, "a"), vec![10, 20]);
        recorder.failing.lock().unwrap().clear();
        eventually("b delivered from the store in order", || {
            accepted_of(&recorder, "b") == vec![10, 20]
        })
        .await;
        eventually("the lane carries messages again", || !lane.is_spilling()).await;
        lane.send(lane_messages(30, &["b"]), Lsn(25), None).unwrap();
        eventually("b's next from memory", || {
            accepted_of(&recorder, "b") == vec![10, 20, 30]
        })
        .await;
        assert_eq!(store.message_counts("s").unwrap().stored, 0);
        shutdown.cancel();
        running.await.unwrap().unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stopping_worker_stores_what_its_lane_holds_and_closes_it() {
        // Every message fails: the lane holds them until the worker stops.
        let (_dir, store, recorder) = setup(&[], Duration::from_millis(200));
        let (lane, worker) = lane_worker(&store, &recorder);
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(worker.run(shutdown.clone()));
        // Group a's three messages: one in flight, two queued behind it.
        lane.send(lane_messages(10, &["a"]), Lsn(5), None).unwrap();
        lane.send(lane_messages(20, &["a"]), Lsn(15), None).unwrap();
        lane.send(lane_messages(30, &["a"]), Lsn(25), None).unwrap();
        eventually("the first in flight", || lane.has_in_flight()).await;
        shutdown.cancel();
        running.await.unwrap().unwrap();
        assert_eq!(accepted_of(&recorder, "a"), vec![10]);
        assert_eq!(
            store.message_counts("s").unwrap().stored,
            2,
            "the queued two are stored"
        );
        assert_eq!(lane.holds_back(), None);
        let refused = lane
            .send(lane_messages(40, &["a"]), Lsn(35), None)
            .unwrap_err();
        assert_eq!(refused.len(), 1, "a closed lane gives messages back");
    }
}
