//! The settings of a `redis_stream` sink: the shared Redis connection,
//! plus `stream_key`.

use serde::Deserialize;
use serde_yaml_ng::Value;
use weft_config::destination::{DestinationProblem, push_settings_of, settings_of, split_off};

use crate::redis::{RedisConnectionConfig, non_empty};

/// `type: redis_stream`: `XADD` each message to a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisStreamConfig {
    /// Where and how to deliver.
    pub connection: RedisConnectionConfig,
    /// `stream_key`: the stream messages are added to, unless a routing
    /// function sets `stream_key`. Required, not empty.
    pub stream_key: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamOnly {
    #[serde(deserialize_with = "non_empty")]
    stream_key: String,
}

impl RedisStreamConfig {
    /// Reads `redis_stream` settings (everything but `type`).
    pub fn from_settings(settings: Value) -> Result<Self, DestinationProblem> {
        let (own, shared) = split_off(settings, &["stream_key"]);
        let connection = push_settings_of(shared)?;
        let StreamOnly { stream_key } = settings_of(own)?;
        Ok(RedisStreamConfig {
            connection,
            stream_key,
        })
    }
}
