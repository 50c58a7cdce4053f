//! Settings of `type: redis_string` and `type: redis_stream`: the
//! connection and delivery fields both share ([`RedisConnectionConfig`]),
//! plus `expire_ms` (strings) or `stream_key` (streams). Names and
//! defaults are Sequin's where it has them.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};

use super::{DestinationProblem, settings_of};
use crate::config::bounds;

/// How a Redis sink connects and delivers. `Debug` hides the password.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, expecting = "redis settings")]
pub struct RedisConnectionConfig {
    /// Host name or IP address of the Redis server. Required.
    #[serde(deserialize_with = "non_empty")]
    pub host: String,
    /// TCP port (1 to 65535). Default 6379.
    #[serde(
        default = "RedisConnectionConfig::default_port",
        deserialize_with = "bounds::in_range::<_, u16, 1, 65_535>"
    )]
    pub port: u16,
    /// Logical database number, selected on connect (0 to 65535). Default 0.
    #[serde(default, deserialize_with = "bounds::in_range::<_, u32, 0, 65_535>")]
    pub database: u32,
    /// ACL user name. Default none (the `default` user).
    #[serde(default)]
    pub username: Option<String>,
    /// Password (`AUTH`). Default none. Never logged.
    #[serde(default)]
    pub password: Option<String>,
    /// Connect with TLS, verifying the server's certificate against the
    /// system's web PKI roots and its host name. Default false.
    #[serde(default)]
    pub tls: bool,
    /// Most messages pipelined in one round trip (1 to 10000). Default 10.
    #[serde(
        default = "RedisConnectionConfig::default_batch_size",
        deserialize_with = "bounds::in_range::<_, u32, 1, 10_000>"
    )]
    pub batch_size: u32,
    /// Most pipelines in flight at once (1 to 1000). Default 10.
    #[serde(
        default = "RedisConnectionConfig::default_max_in_flight",
        deserialize_with = "bounds::in_range::<_, u32, 1, 1000>"
    )]
    pub max_in_flight: u32,
    /// Longest one pipeline (connecting included) may take before its
    /// messages are retried, in milliseconds (100 to 600000). Default 15000.
    #[serde(
        default = "RedisConnectionConfig::default_request_timeout_ms",
        deserialize_with = "bounds::in_range::<_, u64, 100, 600_000>"
    )]
    pub request_timeout_ms: u64,
    /// Delay before the first retry of a failed message, in milliseconds
    /// (1 to 3600000); it doubles with each failure, with jitter. Default 1000.
    #[serde(
        default = "RedisConnectionConfig::default_retry_backoff_base_ms",
        deserialize_with = "bounds::in_range::<_, u64, 1, 3_600_000>"
    )]
    pub retry_backoff_base_ms: u64,
    /// The longest delay between two attempts, in milliseconds (1 to
    /// 86400000). Default 600000 (10 minutes).
    #[serde(
        default = "RedisConnectionConfig::default_retry_backoff_max_ms",
        deserialize_with = "bounds::in_range::<_, u64, 1, 86_400_000>"
    )]
    pub retry_backoff_max_ms: u64,
}

impl fmt::Debug for RedisConnectionConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConnectionConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("database", &self.database)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .field("batch_size", &self.batch_size)
            .field("max_in_flight", &self.max_in_flight)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("retry_backoff_base_ms", &self.retry_backoff_base_ms)
            .field("retry_backoff_max_ms", &self.retry_backoff_max_ms)
            .finish()
    }
}

impl RedisConnectionConfig {
    /// Default `port`.
    pub const DEFAULT_PORT: u16 = 6379;
    /// Default `batch_size`.
    pub const DEFAULT_BATCH_SIZE: u32 = 10;
    /// Default `max_in_flight`.
    pub const DEFAULT_MAX_IN_FLIGHT: u32 = 10;
    /// Default `request_timeout_ms` (Sequin's 15 s).
    pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 15_000;
    /// Default `retry_backoff_base_ms` (Sequin's 1 s).
    pub const DEFAULT_RETRY_BACKOFF_BASE_MS: u64 = 1_000;
    /// Default `retry_backoff_max_ms` (Sequin's 10 min).
    pub const DEFAULT_RETRY_BACKOFF_MAX_MS: u64 = 600_000;

    /// The request timeout as a duration.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    fn default_port() -> u16 {
        Self::DEFAULT_PORT
    }

    fn default_batch_size() -> u32 {
        Self::DEFAULT_BATCH_SIZE
    }

    fn default_max_in_flight() -> u32 {
        Self::DEFAULT_MAX_IN_FLIGHT
    }

    fn default_request_timeout_ms() -> u64 {
        Self::DEFAULT_REQUEST_TIMEOUT_MS
    }

    fn default_retry_backoff_base_ms() -> u64 {
        Self::DEFAULT_RETRY_BACKOFF_BASE_MS
    }

    fn default_retry_backoff_max_ms() -> u64 {
        Self::DEFAULT_RETRY_BACKOFF_MAX_MS
    }
}

/// `type: redis_string`: `SET`/`DEL` one key per message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisStringConfig {
    /// Where and how to deliver.
    pub connection: RedisConnectionConfig,
    /// `expire_ms`: expiry of every key set, in milliseconds (`SET ... PX`),
    /// unless a routing function sets its own (1 to 2^53). Default none.
    pub expire_ms: Option<u64>,
}

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
struct StringOnly {
    #[serde(
        default,
        deserialize_with = "bounds::opt_in_range::<_, u64, 1, 9_007_199_254_740_992>"
    )]
    expire_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamOnly {
    #[serde(deserialize_with = "non_empty")]
    stream_key: String,
}

impl RedisStringConfig {
    /// Reads `redis_string` settings (everything but `type`).
    pub(crate) fn from_settings(settings: Value) -> Result<Self, DestinationProblem> {
        let (own, shared) = split(settings, "expire_ms");
        let connection = settings_of(shared)?;
        let StringOnly { expire_ms } = settings_of(own)?;
        Ok(RedisStringConfig {
            connection,
            expire_ms,
        })
    }
}

impl RedisStreamConfig {
    /// Reads `redis_stream` settings (everything but `type`).
    pub(crate) fn from_settings(settings: Value) -> Result<Self, DestinationProblem> {
        let (own, shared) = split(settings, "stream_key");
        let connection = settings_of(shared)?;
        let StreamOnly { stream_key } = settings_of(own)?;
        Ok(RedisStreamConfig {
            connection,
            stream_key,
        })
    }
}

/// `settings` split into the mapping holding `key` (if set) and the rest.
fn split(settings: Value, key: &str) -> (Value, Value) {
    let mut rest = match settings {
        Value::Mapping(fields) => fields,
        other => return (Value::Mapping(Mapping::new()), other),
    };
    let mut own = Mapping::new();
    if let Some(value) = rest.remove(key) {
        own.insert(Value::String(key.to_string()), value);
    }
    (Value::Mapping(own), Value::Mapping(rest))
}

fn non_empty<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let text = String::deserialize(deserializer)?;
    if text.trim().is_empty() {
        return Err(serde::de::Error::custom("must not be empty"));
    }
    Ok(text)
}
