//! The connection and delivery settings both Redis sink types share
//! ([`RedisConnectionConfig`]). Names and defaults are Sequin's where it
//! has them.

use std::fmt;

use serde::Deserialize;
use weft_config::bounds;
use weft_config::destination::{DeliveryConfig, DeliveryDefaults, PushSettings};

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
    /// The shared delivery fields; Redis defaults: `batch_size` 10 (most
    /// messages pipelined in one round trip), `max_in_flight` 10,
    /// `request_timeout_ms` 15000 (Sequin's).
    #[serde(skip)]
    pub delivery: DeliveryConfig,
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
            .field("delivery", &self.delivery)
            .finish()
    }
}

impl RedisConnectionConfig {
    /// Default `port`.
    pub const DEFAULT_PORT: u16 = 6379;
    fn default_port() -> u16 {
        Self::DEFAULT_PORT
    }
}

impl PushSettings for RedisConnectionConfig {
    const DELIVERY_DEFAULTS: DeliveryDefaults = DeliveryDefaults {
        batch_size: 10,
        max_in_flight: 10,
        request_timeout_ms: 15_000,
    };

    fn delivery_mut(&mut self) -> &mut DeliveryConfig {
        &mut self.delivery
    }
}

/// A string that is not blank.
pub(crate) fn non_empty<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<String, D::Error> {
    let text = String::deserialize(deserializer)?;
    if text.trim().is_empty() {
        return Err(serde::de::Error::custom("must not be empty"));
    }
    Ok(text)
}
