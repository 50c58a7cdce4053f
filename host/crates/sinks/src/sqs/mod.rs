//! The Amazon SQS sink (`type: sqs`): the delivery worker sends a sink's
//! messages to one SQS queue with `SendMessageBatch`, up to ten a request.
//!
//! - Body: the message JSON as stored. A transform's bytes payload is sent
//!   as it is when it is text SQS takes, else in base64 with the string
//!   attribute `content_transfer_encoding` = `base64`; either way with the
//!   string attribute `content_type`.
//! - FIFO queues (a name ending in `.fifo`): `MessageGroupId` and
//!   `MessageDeduplicationId` are the lowercase hex MD5 of the message's
//!   group and of its idempotency key, as Sequin sets them, so a row's
//!   changes stay in order and a redelivery within five minutes is dropped.
//! - Each message is settled by SQS's answer for it: a failed entry is
//!   retried alone, or dead-lettered when SQS refuses its content; a failed
//!   request is retried whole. A message over 256 KiB is dead-lettered
//!   without being sent. `errors.rs` says which failure is which.
//!
//! Routing functions take no keys for this type yet: Sequin's `queue_url`
//! routing key needs a field in the plugins' WIT `route` record.
//!
//! [`SqsClient`] builds the AWS SDK client on the first delivery, with the
//! sink's keys or the standard AWS credential chain (`use_task_role`).

mod client;
mod config;
mod destination;
mod errors;
mod message;

pub use client::SqsClient;
pub use config::{MAX_BATCH_ENTRIES, SqsConfig, SqsCredentials, SqsSettings, region_of_host};
pub use destination::SqsDestination;
pub use errors::MAX_MESSAGE_BYTES;
pub use message::{BASE64, CONTENT_TYPE_ATTRIBUTE, TRANSFER_ENCODING_ATTRIBUTE, md5_hex};

use std::sync::Arc;

use serde_yaml_ng::Value;
use weft_config::destination::{DeliveryConfig, DestinationProblem, Entries, push_settings_of};
use weft_config::hosts::{AllowedHost, HostError};
use weft_config::path::DocPath;

use super::config::{Config, SinkConfig};
use super::sink::{BuildError, Built, Sink, under_destination};

/// The `sqs` sink type.
pub struct SqsSink;

impl Sink for SqsSink {
    const TYPE: &'static str = "sqs";
    const ROUTING_KEYS: &'static [&'static str] = &[];
    type Config = SqsConfig;

    fn read(settings: Value) -> Result<SqsConfig, DestinationProblem> {
        push_settings_of(settings)
    }

    fn delivery(config: &SqsConfig) -> Option<&DeliveryConfig> {
        Some(&config.delivery)
    }

    fn egress_targets(config: &SqsConfig) -> Vec<(&'static str, Result<AllowedHost, HostError>)> {
        vec![config.egress_target()]
    }

    fn problems(
        config: &SqsConfig,
        _sink: &SinkConfig,
        _entries: &Entries<'_>,
    ) -> Vec<(DocPath, String)> {
        under_destination(config.problems())
    }

    fn build(config: &SqsConfig, sink: &SinkConfig, _whole: &Config) -> Result<Built, BuildError> {
        let settings = SqsSettings::resolve(sink, config).map_err(BuildError::new)?;
        let retry = settings.limits.retry;
        Ok(Built::Push {
            destination: Arc::new(SqsDestination::new(settings)),
            retry,
        })
    }
}
