//! The `redis_stream` sink (`type: redis_stream`): each message is
//! `XADD`ed to a Redis stream, one field per top-level key of the message.
//! Commands are pipelined over the shared [`crate::redis`]
//! connection.

mod config;
mod destination;
mod errors;

pub use config::RedisStreamConfig;
pub use destination::{IDEMPOTENCY_FIELD, RedisStreamDestination};

use std::sync::Arc;

use serde_yaml_ng::Value;
use weft_config::destination::{DeliveryConfig, DestinationProblem};
use weft_config::hosts::{AllowedHost, HostError};

use super::config::{Config, SinkConfig};
use super::redis::{RedisConnection, RedisSettings};
use super::sink::{BuildError, Built, Sink};

/// The `redis_stream` sink type.
pub struct RedisStreamSink;

impl Sink for RedisStreamSink {
    const TYPE: &'static str = "redis_stream";
    const ROUTING_KEYS: &'static [&'static str] = &["stream_key"];
    type Config = RedisStreamConfig;

    fn read(settings: Value) -> Result<RedisStreamConfig, DestinationProblem> {
        RedisStreamConfig::from_settings(settings)
    }

    fn delivery(config: &RedisStreamConfig) -> Option<&DeliveryConfig> {
        Some(&config.connection.delivery)
    }

    fn egress_targets(
        config: &RedisStreamConfig,
    ) -> Vec<(&'static str, Result<AllowedHost, HostError>)> {
        config.connection.egress_targets()
    }

    fn build(
        config: &RedisStreamConfig,
        sink: &SinkConfig,
        _whole: &Config,
    ) -> Result<Built, BuildError> {
        let settings = RedisSettings::resolve(sink, &config.connection);
        let retry = settings.limits.retry;
        let connection = RedisConnection::new(settings).map_err(BuildError::new)?;
        Ok(Built::Push {
            destination: Arc::new(RedisStreamDestination::new(
                connection,
                config.stream_key.clone(),
            )),
            retry,
        })
    }
}
