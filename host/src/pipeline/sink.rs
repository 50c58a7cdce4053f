//! One sink's view of the stream: which changes it takes and the functions
//! it runs on them.

use std::sync::{Arc, Mutex};

use crate::change::Change;
use crate::config::SinkConfig;
use crate::message::{ConsumerRef, Message};
use crate::plugins::{FunctionError, Payload, PluginError, TransformFunction};
use crate::store::NewMessage;

/// Why a sink could not turn a batch of changes into messages.
#[derive(Debug, thiserror::Error)]
pub enum SinkPipelineError {
    /// The transform failed as a whole (trap, timeout, out of memory, ...).
    #[error("transform {function}: {source}")]
    Plugin {
        /// The function's name in the config.
        function: String,
        /// What went wrong.
        source: PluginError,
    },
    /// The transform rejected one message.
    #[error(
        "transform {function} rejected the message with idempotency key {idempotency_key}: {error}"
    )]
    Rejected {
        /// The function's name in the config.
        function: String,
        /// The key of the rejected message.
        idempotency_key: String,
        /// The guest's error.
        error: String,
    },
    /// The transform produced a payload the sink cannot carry.
    #[error(
        "transform {function} returned a {content_type} bytes payload, but sequin_stream sinks carry JSON only"
    )]
    UnsupportedPayload {
        /// The function's name in the config.
        function: String,
        /// The payload's content type.
        content_type: String,
    },
    /// The blocking task running the transform panicked.
    #[error("transform task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// A named transform function shared with blocking tasks.
pub struct NamedTransform {
    /// The function's name in the config.
    pub name: String,
    /// The loaded component.
    pub function: Arc<Mutex<TransformFunction>>,
}

/// The part of a sink that runs in the pipeline.
pub struct SinkPipeline {
    config: SinkConfig,
    consumer: ConsumerRef,
    transform: Option<NamedTransform>,
}

impl SinkPipeline {
    /// The pipeline of the sink configured as `config`, with its transform
    /// already loaded.
    pub fn new(config: SinkConfig, transform: Option<NamedTransform>) -> Self {
        SinkPipeline {
            consumer: ConsumerRef::for_sink(&config.name),
            config,
            transform,
        }
    }

    /// The sink's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Whether this sink takes `change`.
    pub fn accepts(&self, change: &Change) -> bool {
        self.config.accepts(
            &change.relation.schema,
            &change.relation.name,
            change.action,
        )
    }

    /// Turns the changes this sink takes into stored messages, running the
    /// transform on them as one batch.
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
        let payloads = match &self.transform {
            None => messages
                .iter()
                .map(|m| serde_json::to_value(m).expect("a message always serialises"))
                .collect(),
            Some(transform) => run_transform(transform, messages.clone()).await?,
        };
        Ok(accepted
            .iter()
            .zip(messages)
            .zip(payloads)
            .map(|((change, message), payload)| NewMessage {
                commit_lsn: change.commit_lsn,
                commit_idx: change.commit_idx,
                group_id: group_id(change),
                idempotency_key: message.metadata.idempotency_key,
                payload,
            })
            .collect())
    }
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

async fn run_transform(
    transform: &NamedTransform,
    messages: Vec<Message>,
) -> Result<Vec<serde_json::Value>, SinkPipelineError> {
    if messages.is_empty() {
        return Ok(Vec::new());
    }
    let function = Arc::clone(&transform.function);
    let keys: Vec<String> = messages
        .iter()
        .map(|m| m.metadata.idempotency_key.clone())
        .collect();
    let outcomes = tokio::task::spawn_blocking(move || {
        let mut function = function
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        function.transform(&messages)
    })
    .await?
    .map_err(|source| SinkPipelineError::Plugin {
        function: transform.name.clone(),
        source,
    })?;
    outcomes
        .into_iter()
        .zip(keys)
        .map(|(outcome, idempotency_key)| match outcome {
            Ok(Payload::Json(value)) => Ok(value),
            Ok(Payload::Bytes { content_type, .. }) => Err(SinkPipelineError::UnsupportedPayload {
                function: transform.name.clone(),
                content_type,
            }),
            Err(FunctionError::Permanent(error) | FunctionError::Transient(error)) => {
                Err(SinkPipelineError::Rejected {
                    function: transform.name.clone(),
                    idempotency_key,
                    error,
                })
            }
        })
        .collect()
}
