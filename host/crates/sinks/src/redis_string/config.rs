//! The settings of a `redis_string` sink: the shared Redis connection,
//! plus `expire_ms`.

use serde::Deserialize;
use serde_yaml_ng::Value;
use weft_config::bounds;
use weft_config::destination::{DestinationProblem, push_settings_of, settings_of, split_off};

use crate::redis::RedisConnectionConfig;

/// `type: redis_string`: `SET`/`DEL` one key per message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisStringConfig {
    /// Where and how to deliver.
    pub connection: RedisConnectionConfig,
    /// `expire_ms`: expiry of every key set, in milliseconds (`SET ... PX`),
    /// unless a routing function sets its own (1 to 2^53). Default none.
    pub expire_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StringOnly {
    #[serde(
        default,
        deserialize_with = "bounds::opt_in_range::<_, u64, 1, 9_007_199_254_740_992>"
    )]
    expire_ms: Option<u64>,
}

impl RedisStringConfig {
    /// Reads `redis_string` settings (everything but `type`).
    pub fn from_settings(settings: Value) -> Result<Self, DestinationProblem> {
        let (own, shared) = split_off(settings, &["expire_ms"]);
        let connection = push_settings_of(shared)?;
        let StringOnly { expire_ms } = settings_of(own)?;
        Ok(RedisStringConfig {
            connection,
            expire_ms,
        })
    }
}
