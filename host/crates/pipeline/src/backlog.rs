//! A sink's optional bound on its backlog (undelivered messages in the
//! store) and its `load_shedding_policy` at the bound.
//!
//! Memory is never what fills up: messages wait on disk and a delivery holds
//! at most `max_memory_mb` of them. The backlog bound exists for operators
//! who would rather stop (or shed) than let a dead consumer grow the store
//! without end. `pause_on_full` holds the whole pipeline of the slot (one
//! slot feeds every sink, in order), so Postgres retains WAL until the sink
//! drains; `discard_on_full` drops only this sink's new messages, with a
//! warning for every batch it sheds and a running total.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use weft_sinks::config::{LoadSheddingPolicy, SinkConfig};
use weft_store::{NewMessage, Store, StoreError};

/// How often a full backlog is measured again while paused, and at most how
/// often it is measured otherwise.
const RECHECK: Duration = Duration::from_millis(500);

/// What became of a batch offered to [`BacklogGuard::admit`].
pub enum Admitted {
    /// Store these (all of the batch, or the part that fits under
    /// `discard_on_full`).
    Store(Vec<NewMessage>),
    /// Shutdown came while paused: store nothing, confirm nothing.
    ShuttingDown,
}

/// One sink's backlog bound.
pub struct BacklogGuard {
    sink: String,
    limit: u64,
    policy: LoadSheddingPolicy,
    /// The backlog last measured, plus what was admitted since.
    estimate: u64,
    measured_at: Option<Instant>,
    discarded: u64,
}

impl BacklogGuard {
    /// The guard of `sink`, or `None` when its backlog is unbounded.
    pub fn new(sink: &SinkConfig) -> Option<BacklogGuard> {
        Some(BacklogGuard {
            sink: sink.name.clone(),
            limit: sink.max_backlog_messages?,
            policy: sink.load_shedding_policy,
            estimate: 0,
            measured_at: None,
            discarded: 0,
        })
    }

    /// Messages discarded by `discard_on_full` since weft started.
    pub fn discarded(&self) -> u64 {
        self.discarded
    }

    /// Applies the policy to `messages`, about to be stored: passes them
    /// while the backlog is under the bound; at the bound, waits until it
    /// drains (`pause_on_full`) or discards what does not fit
    /// (`discard_on_full`). A paused batch may take the backlog past the
    /// bound by its own size.
    pub async fn admit(
        &mut self,
        store: &Store,
        mut messages: Vec<NewMessage>,
        shutdown: &CancellationToken,
    ) -> Result<Admitted, StoreError> {
        if messages.is_empty() {
            return Ok(Admitted::Store(messages));
        }
        if self.estimate >= self.limit || self.stale() {
            self.measure(store).await?;
        }
        match self.policy {
            LoadSheddingPolicy::PauseOnFull => {
                if self.estimate >= self.limit {
                    warn!(
                        sink = %self.sink,
                        backlog = self.estimate,
                        max_backlog_messages = self.limit,
                        "backlog full: replication paused until the sink drains (load_shedding_policy: pause_on_full); Postgres retains WAL meanwhile"
                    );
                    let paused = Instant::now();
                    while self.estimate >= self.limit {
                        tokio::select! {
                            _ = shutdown.cancelled() => return Ok(Admitted::ShuttingDown),
                            _ = tokio::time::sleep(RECHECK) => {}
                        }
                        self.measure(store).await?;
                    }
                    info!(sink = %self.sink, backlog = self.estimate, paused_ms = paused.elapsed().as_millis() as u64, "backlog drained: replication resumed");
                }
            }
            LoadSheddingPolicy::DiscardOnFull => {
                let room = self.limit.saturating_sub(self.estimate) as usize;
                if messages.len() > room {
                    let shed = messages.split_off(room);
                    self.discarded += shed.len() as u64;
                    warn!(
                        sink = %self.sink,
                        discarded = shed.len(),
                        discarded_total = self.discarded,
                        first_idempotency_key = %shed[0].idempotency_key,
                        max_backlog_messages = self.limit,
                        "backlog full: new messages discarded (load_shedding_policy: discard_on_full)"
                    );
                }
            }
        }
        self.estimate += messages.len() as u64;
        Ok(Admitted::Store(messages))
    }

    fn stale(&self) -> bool {
        self.measured_at.is_none_or(|at| at.elapsed() >= RECHECK)
    }

    async fn measure(&mut self, store: &Store) -> Result<(), StoreError> {
        let store = store.clone();
        let sink = self.sink.clone();
        let counts = tokio::task::spawn_blocking(move || store.message_counts(&sink))
            .await
            .expect("backlog count task")?;
        self.estimate = counts.stored;
        self.measured_at = Some(Instant::now());
        Ok(())
    }
}
