//! The Kafka sink (`type: kafka`): the delivery worker produces a sink's messages to Kafka.
//!
//! - Topic: the message's `route.topic` (set by a routing function), else
//!   the sink's `topic`. Key: `route.message_key`, by default the message
//!   group (the row's primary key), so that a row's changes land on one
//!   partition. Headers: `idempotency-key` = the idempotency key, and
//!   `content-type` for a transform's bytes payload (sent byte-exact).
//! - The idempotent producer with `acks=all`: a message counts as delivered
//!   only once its delivery report says every in-sync replica has it.
//!   Failed and timed-out reports are retried by the delivery worker; only
//!   an oversized message or an invalid topic name is dead-lettered at once.
//! - Order: the worker sends one message per group per delivery, in commit
//!   order, and the next only after the previous one's report; idempotence
//!   keeps order within a partition across librdkafka's own retries.
//!
//! [`KafkaProducer`] is built at startup and connects in the background;
//! while the brokers are down, messages wait in librdkafka's queue (bounded
//! by `max_memory_mb`) for at most `request_timeout_ms`, then fail and wait
//! in weft's store for their retry.

mod config;
mod destination;
mod errors;
mod producer;

pub use config::{
    Compression, KafkaConfig, KafkaSettings, SaslCredentials, SaslMechanism, topic_name_problem,
};
pub use destination::{CONTENT_TYPE_HEADER, IDEMPOTENCY_KEY_HEADER, KafkaDestination};
pub use errors::classify;
pub use producer::{KafkaProducer, SinkContext, SinkProducer};

use std::sync::Arc;

use serde_yaml_ng::Value;
use weft_config::destination::{DeliveryConfig, DestinationProblem, Entries, push_settings_of};
use weft_config::hosts::{AllowedHost, HostError};
use weft_config::path::DocPath;
use weft_core::message::Metadata;
use weft_core::route::Route;

use super::config::{Config, SinkConfig};
use super::sink::{BuildError, Built, DefaultRoute, Sink, under_destination};

/// The `kafka` sink type.
pub struct KafkaSink;

impl Sink for KafkaSink {
    const TYPE: &'static str = "kafka";
    const ROUTING_KEYS: &'static [&'static str] = &["topic", "message_key"];
    type Config = KafkaConfig;

    fn read(settings: Value) -> Result<KafkaConfig, DestinationProblem> {
        push_settings_of(settings)
    }

    fn delivery(config: &KafkaConfig) -> Option<&DeliveryConfig> {
        Some(&config.delivery)
    }

    fn egress_targets(config: &KafkaConfig) -> Vec<(&'static str, Result<AllowedHost, HostError>)> {
        config
            .host_list()
            .into_iter()
            .map(|entry| ("hosts", AllowedHost::parse(entry)))
            .collect()
    }

    fn problems(
        config: &KafkaConfig,
        sink: &SinkConfig,
        _entries: &Entries<'_>,
    ) -> Vec<(DocPath, String)> {
        under_destination(config.problems(sink.routing.is_some()))
    }

    const DEFAULT_ROUTE: Option<DefaultRoute> = Some(default_route);

    fn build(
        config: &KafkaConfig,
        sink: &SinkConfig,
        _whole: &Config,
    ) -> Result<Built, BuildError> {
        let settings = KafkaSettings::resolve(sink, config).map_err(BuildError::new)?;
        let retry = settings.limits.retry;
        let destination = KafkaDestination::new(settings).map_err(BuildError::new)?;
        Ok(Built::Push {
            destination: Arc::new(destination),
            retry,
        })
    }
}

/// `message_key`: the message group, so that per-key order holds per
/// partition. The topic comes from the sink's config.
fn default_route(_action: &str, _metadata: &Metadata, group_id: &str) -> Route {
    Route {
        message_key: Some(group_id.to_string()),
        ..Route::default()
    }
}
