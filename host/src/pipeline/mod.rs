//! Runs each sink's function chain over the change stream and stores the
//! resulting messages durably, then tells the source how far it may confirm.
//!
//! The loop takes committed transactions from the source, groups as many as
//! are ready into one batch, runs every matching sink's functions on the
//! batch, and writes all sinks' messages in one store transaction together
//! with each sink's cursor. Only then is the batch's last commit reported as
//! durable, so a crash at any point replays from the slot and the cursors
//! drop what was already stored.

mod batch;
pub mod chain;
pub mod routing_keys;
mod sink;

pub use batch::{Batch, BatchLimits};
pub use chain::{ChainMessage, ChainOutcome, FunctionChain, Named};
pub use sink::{SinkPipeline, SinkPipelineError, group_id};

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::api::PullApiState;
use crate::change::SourceEvent;
use crate::lsn::Lsn;
use crate::store::{SinkBatch, Store};

/// Why the pipeline stopped.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The store could not be read or written.
    #[error("store: {0}")]
    Store(#[from] crate::store::StoreError),
    /// A blocking task panicked or was cancelled.
    #[error("pipeline task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// The pipeline of one source (one replication slot) and its sinks.
pub struct Pipeline {
    sinks: Vec<SinkPipeline>,
    store: Store,
    durable: watch::Sender<Lsn>,
    pull_api: PullApiState,
    limits: BatchLimits,
}

impl Pipeline {
    /// A pipeline for `sinks`, storing into `store`, reporting durable
    /// positions through `durable` and waking pull consumers via `wakeups`.
    pub fn new(
        sinks: Vec<SinkPipeline>,
        store: Store,
        durable: watch::Sender<Lsn>,
        pull_api: PullApiState,
        limits: BatchLimits,
    ) -> Self {
        Pipeline {
            sinks,
            store,
            durable,
            pull_api,
            limits,
        }
    }

    /// Consumes `events` until the channel closes or `shutdown` fires.
    pub async fn run(
        mut self,
        mut events: mpsc::Receiver<SourceEvent>,
        shutdown: CancellationToken,
    ) -> Result<(), PipelineError> {
        let mut cursors = HashMap::new();
        for sink in &self.sinks {
            let store = self.store.clone();
            let name = sink.name().to_string();
            let cursor = tokio::task::spawn_blocking(move || store.sink_cursor(&name)).await??;
            cursors.insert(sink.name().to_string(), cursor.unwrap_or(Lsn::ZERO));
        }
        info!(sinks = self.sinks.len(), "pipeline started");
        let mut batch = Batch::default();
        loop {
            let event = tokio::select! {
                _ = shutdown.cancelled() => break,
                event = events.recv() => event,
            };
            let Some(event) = event else { break };
            batch.push(event);
            // Take whatever else is already waiting, up to the batch limits.
            while !batch.is_full(&self.limits) {
                match events.try_recv() {
                    Ok(event) => batch.push(event),
                    Err(_) => break,
                }
            }
            if batch.has_committed_work() {
                self.flush(&mut batch, &mut cursors).await?;
                if let Some(wal_end) = batch.take_idle_position() {
                    self.confirm(wal_end);
                }
            } else if let Some(wal_end) = batch.take_idle_position() {
                self.confirm(wal_end);
            }
        }
        info!("pipeline stopped");
        Ok(())
    }

    async fn flush(
        &mut self,
        batch: &mut Batch,
        cursors: &mut HashMap<String, Lsn>,
    ) -> Result<(), PipelineError> {
        let committed = batch.take_committed();
        let mut sink_batches = Vec::with_capacity(self.sinks.len());
        for sink in &mut self.sinks {
            let cursor = cursors.get(sink.name()).copied().unwrap_or(Lsn::ZERO);
            let fresh: Vec<_> = committed
                .changes
                .iter()
                .filter(|change| change.commit_lsn > cursor)
                .collect();
            let messages = loop {
                match sink.process(&fresh).await {
                    Ok(messages) => break messages,
                    Err(error) => {
                        // Nothing is lost: the batch is not stored and the
                        // slot is not confirmed until the sink's functions
                        // succeed. Dead letters come with the delivery layer.
                        warn!(sink = sink.name(), %error, "function chain failed; retrying in 1s");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            };
            sink_batches.push(SinkBatch {
                sink: sink.name().to_string(),
                messages,
            });
        }
        let store = self.store.clone();
        let last_commit = committed.last_commit_lsn;
        tokio::task::spawn_blocking(move || store.append(&sink_batches, last_commit)).await??;
        for sink in &self.sinks {
            cursors.insert(sink.name().to_string(), last_commit);
            self.pull_api.wake(sink.name());
        }
        self.confirm(committed.last_end_lsn);
        Ok(())
    }

    fn confirm(&self, lsn: Lsn) {
        self.durable.send_if_modified(|current| {
            if lsn > *current {
                *current = lsn;
                true
            } else {
                false
            }
        });
    }
}
