//! One sink's view of the stream: which changes it takes and the function
//! chain it runs on them (see [`super::chain`]).

use crate::change::Change;
use crate::config::SinkConfig;
use crate::message::{ConsumerRef, Message};
use crate::plugins::Payload;
use crate::store::NewMessage;

use super::backlog::BacklogGuard;
use super::chain::{ChainOutcome, ChainRunError, FunctionChain};
use super::default_route;

/// Why a sink could not turn a batch of changes into messages. Every
/// variant makes the pipeline retry the batch later; nothing is stored or
/// confirmed until it succeeds.
#[derive(Debug, thiserror::Error)]
pub enum SinkPipelineError {
    /// A function failed as a whole (trap, timeout, out of memory, ...), or
    /// its blocking task died.
    #[error(transparent)]
    Chain(#[from] ChainRunError),
    /// A function failed on one change. Dead letters come with the delivery
    /// layer; until then the batch is retried.
    #[error(
        "{kind} function {function} failed on the change with idempotency key {idempotency_key} ({}): {error}",
        if *transient { "transient" } else { "permanent" }
    )]
    Failed {
        /// The function's name in the config.
        function: String,
        /// The function's kind.
        kind: &'static str,
        /// The key of the change.
        idempotency_key: String,
        /// The function's reason.
        error: String,
        /// Whether the function called it transient.
        transient: bool,
    },
    /// The transform produced a payload the sink cannot carry.
    #[error(
        "transform {function} returned a {content_type} bytes payload, but {sink_type} sinks carry JSON only; return JSON from the transform, or use a broker or webhook sink"
    )]
    UnsupportedPayload {
        /// The transform's name in the config.
        function: String,
        /// The payload's content type.
        content_type: String,
        /// The sink's type.
        sink_type: &'static str,
    },
}

/// The part of a sink that runs in the pipeline.
pub struct SinkPipeline {
    config: SinkConfig,
    consumer: ConsumerRef,
    chain: FunctionChain,
    backlog: Option<BacklogGuard>,
}

impl SinkPipeline {
    /// The pipeline of the sink configured as `config`, with its functions
    /// already loaded into `chain`.
    pub fn new(config: SinkConfig, chain: FunctionChain) -> Self {
        SinkPipeline {
            consumer: ConsumerRef::for_sink(&config.name),
            backlog: BacklogGuard::new(&config),
            config,
            chain,
        }
    }

    /// The sink's backlog bound, if it has one.
    pub fn backlog_mut(&mut self) -> Option<&mut BacklogGuard> {
        self.backlog.as_mut()
    }

    /// The sink's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The sink's config.
    pub fn config(&self) -> &SinkConfig {
        &self.config
    }

    /// Whether this sink takes `change` (its tables and actions; the filter
    /// function comes later, in the chain).
    pub fn accepts(&self, change: &Change) -> bool {
        self.config.accepts(
            &change.relation.schema,
            &change.relation.name,
            change.action,
        )
    }

    /// Turns the changes this sink takes into stored messages, running the
    /// function chain on them as one batch. Changes the filter drops yield
    /// no message; the caller still advances the sink's cursor past them.
    pub async fn process(
        &mut self,
        changes: &[&Change],
    ) -> Result<Vec<NewMessage>, SinkPipelineError> {
        let accepted: Vec<&Change> = changes
            .iter()
            .copied()
            .filter(|c| self.accepts(c))
            .collect();
        let messages: Vec<Message> = accepted
            .iter()
            .map(|change| Message::from_change(change, &self.config.database, &self.consumer))
            .collect();
        let outcomes = self.chain.run(messages).await?;
        let mut stored = Vec::with_capacity(outcomes.len());
        for (change, outcome) in accepted.iter().zip(outcomes) {
            match outcome {
                ChainOutcome::Message(done) => {
                    match &done.payload {
                        Payload::Bytes { content_type, .. }
                            if !carries_bytes(self.chain.sink_type) =>
                        {
                            return Err(SinkPipelineError::UnsupportedPayload {
                                function: self
                                    .chain
                                    .transform
                                    .as_ref()
                                    .map(|t| t.name.clone())
                                    .unwrap_or_default(),
                                content_type: content_type.clone(),
                                sink_type: self.chain.sink_type,
                            });
                        }
                        _ => {}
                    }
                    let group_id = group_id(change);
                    let route = default_route::merge(
                        default_route::default_route(
                            self.chain.sink_type,
                            change.action,
                            &done.message.metadata,
                            &group_id,
                        ),
                        done.route,
                    );
                    stored.push(NewMessage {
                        commit_lsn: change.commit_lsn,
                        commit_idx: change.commit_idx,
                        group_id,
                        idempotency_key: done.message.metadata.idempotency_key,
                        payload: done.payload,
                        route,
                    });
                }
                ChainOutcome::Dropped { .. } => {}
                ChainOutcome::Failed {
                    function,
                    kind,
                    error,
                    transient,
                } => {
                    return Err(SinkPipelineError::Failed {
                        function,
                        kind,
                        idempotency_key: crate::message::idempotency_key(
                            change.commit_lsn,
                            change.commit_idx,
                        ),
                        error,
                        transient,
                    });
                }
            }
        }
        Ok(stored)
    }
}

/// Whether a sink of `sink_type` can deliver a transform's bytes payload:
/// every push sink can (brokers carry bytes; a webhook sends them as the
/// body with their content type); pull consumers receive JSON only.
fn carries_bytes(sink_type: &str) -> bool {
    sink_type != "sequin_stream"
}

/// The message group of a change: its table and primary-key values. Changes
/// of one group are delivered one at a time, in commit order.
pub fn group_id(change: &Change) -> String {
    format!(
        "{}:{}",
        change.relation.qualified_name(),
        change.primary_key_values().join(":")
    )
}
