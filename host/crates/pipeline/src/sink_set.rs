//! Changes to a running pipeline's set of sinks: a sink created, updated or
//! deleted through the API joins the pipeline, is replaced in it, or leaves
//! it, while the pipeline's other sinks keep flowing.
//!
//! The pipeline applies a change only between two transactions (see
//! [`super::Batch::at_transaction_boundary`]), so no sink ever sees part of
//! a transaction. A replaced sink keeps its cursor: it goes on after the
//! last transaction its old version stored, without loss or reordering. A
//! sink that *starts* (created, or moved here from another source) begins
//! after the last transaction the pipeline stored.

use tokio::sync::{mpsc, oneshot};

use super::SinkPipeline;

/// One change to a pipeline's sinks.
pub enum SinkSetChange {
    /// Adds the sink, or replaces the sink of its name.
    Put {
        /// The sink, its functions loaded.
        sink: Box<SinkPipeline>,
        /// Whether its cursor restarts at the pipeline's position (a new
        /// sink, or one moved from another source) instead of carrying on.
        starts_here: bool,
    },
    /// Removes the sink of this name.
    Remove(String),
}

/// A change and the way to say it was applied.
pub struct SinkSetRequest {
    /// The change.
    pub change: SinkSetChange,
    /// Told once the change is applied.
    pub applied: oneshot::Sender<()>,
}

/// The pipeline that should apply a change has stopped.
#[derive(Debug, thiserror::Error)]
#[error("the pipeline has stopped, so its sinks cannot change without a restart")]
pub struct PipelineStopped;

/// Sends changes to one pipeline's sinks. Cheap to clone.
#[derive(Clone, Debug)]
pub struct SinkSetHandle {
    requests: mpsc::UnboundedSender<SinkSetRequest>,
}

/// The pipeline's end of a [`SinkSetHandle`].
pub type SinkSetReceiver = mpsc::UnboundedReceiver<SinkSetRequest>;

impl SinkSetHandle {
    /// A handle and the receiver to give the pipeline
    /// ([`super::Pipeline::with_sink_changes`]).
    pub fn channel() -> (SinkSetHandle, SinkSetReceiver) {
        let (requests, receiver) = mpsc::unbounded_channel();
        (SinkSetHandle { requests }, receiver)
    }

    /// Sends `change` and waits until the pipeline has applied it: the
    /// next transaction it stores is processed by the new set of sinks.
    pub async fn apply(&self, change: SinkSetChange) -> Result<(), PipelineStopped> {
        let (applied, done) = oneshot::channel();
        self.requests
            .send(SinkSetRequest { change, applied })
            .map_err(|_| PipelineStopped)?;
        done.await.map_err(|_| PipelineStopped)
    }
}
