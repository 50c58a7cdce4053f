//! Settings of `type: rabbitmq`: publish messages to a RabbitMQ exchange
//! with publisher confirms.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use crate::config::bounds;

/// How a RabbitMQ sink connects and publishes. Names follow Sequin's.
/// `Debug` hides `password`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, expecting = "rabbitmq settings")]
pub struct RabbitMqConfig {
    /// The broker's host name or IP address. Required.
    pub host: String,
    /// The broker's AMQP port (1 to 65535). Default 5672.
    #[serde(default, deserialize_with = "bounds::opt_port")]
    pub port: Option<u16>,
    /// User name. Default none: RabbitMQ's `guest` (which RabbitMQ accepts
    /// only from localhost).
    #[serde(default)]
    pub username: Option<String>,
    /// Password for `username`. Default none (`guest`); never logged.
    #[serde(default)]
    pub password: Option<String>,
    /// The virtual host. Default `/`.
    #[serde(default = "RabbitMqConfig::default_virtual_host")]
    pub virtual_host: String,
    /// Connect over TLS (AMQPS) and verify the server's certificate against
    /// the system's roots (plus `tls_ca_file`). Default false.
    #[serde(default)]
    pub tls: bool,
    /// A PEM file of CA certificates to trust, for a broker with a private
    /// CA. Needs `tls: true`. Default none.
    #[serde(default)]
    pub tls_ca_file: Option<String>,
    /// The exchange messages are published to, unless a routing function
    /// sets `exchange`. Required; weft does not declare it.
    pub exchange: String,
    /// Most messages handed to one delivery (1 to 10000). Default 100.
    #[serde(
        default = "RabbitMqConfig::default_batch_size",
        deserialize_with = "bounds::in_range::<_, u32, 1, 10_000>"
    )]
    pub batch_size: u32,
    /// Most deliveries in flight at once for this sink, each on its own
    /// channel (1 to 1000). Default 10.
    #[serde(
        default = "RabbitMqConfig::default_max_in_flight",
        deserialize_with = "bounds::in_range::<_, u32, 1, 1000>"
    )]
    pub max_in_flight: u32,
    /// How long one delivery (connect, publish, confirms) may take before
    /// its messages count as failed and are retried, in milliseconds (100
    /// to 600000). Default 5000.
    #[serde(
        default = "RabbitMqConfig::default_request_timeout_ms",
        deserialize_with = "bounds::in_range::<_, u64, 100, 600_000>"
    )]
    pub request_timeout_ms: u64,
    /// Delay before the first retry of a failed message, in milliseconds
    /// (1 to 3600000); it doubles with each failure, with jitter. Default 1000.
    #[serde(
        default = "RabbitMqConfig::default_retry_backoff_base_ms",
        deserialize_with = "bounds::in_range::<_, u64, 1, 3_600_000>"
    )]
    pub retry_backoff_base_ms: u64,
    /// The longest delay between two attempts, in milliseconds (1 to
    /// 86400000). Default 600000 (10 minutes).
    #[serde(
        default = "RabbitMqConfig::default_retry_backoff_max_ms",
        deserialize_with = "bounds::in_range::<_, u64, 1, 86_400_000>"
    )]
    pub retry_backoff_max_ms: u64,
}

impl RabbitMqConfig {
    /// Default `port`.
    pub const DEFAULT_PORT: u16 = 5672;
    /// Default `virtual_host`.
    pub const DEFAULT_VIRTUAL_HOST: &'static str = "/";
    /// Default `batch_size`.
    pub const DEFAULT_BATCH_SIZE: u32 = 100;
    /// Default `max_in_flight`.
    pub const DEFAULT_MAX_IN_FLIGHT: u32 = 10;
    /// Default `request_timeout_ms`.
    pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 5_000;
    /// Default `retry_backoff_base_ms` (Sequin's 1 s).
    pub const DEFAULT_RETRY_BACKOFF_BASE_MS: u64 = 1_000;
    /// Default `retry_backoff_max_ms` (Sequin's 10 min).
    pub const DEFAULT_RETRY_BACKOFF_MAX_MS: u64 = 600_000;
    /// AMQP's limit on exchange names, routing keys and message ids, in bytes.
    pub const MAX_SHORT_STRING: usize = 255;

    /// The port, or the default.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(Self::DEFAULT_PORT)
    }

    /// The request timeout as a duration.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// Rules between fields: (field, what is wrong and what to do).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if self.host.trim().is_empty() {
            problems.push(("host", "must not be empty, e.g. `host: localhost`".into()));
        }
        if self.exchange.is_empty() {
            problems.push((
                "exchange",
                "must not be empty; name the exchange to publish to (the default exchange \"\" is not supported)".into(),
            ));
        }
        if self.exchange.len() > Self::MAX_SHORT_STRING {
            problems.push((
                "exchange",
                format!(
                    "is {} bytes long; AMQP allows at most {} bytes",
                    self.exchange.len(),
                    Self::MAX_SHORT_STRING
                ),
            ));
        }
        if self.virtual_host.is_empty() {
            problems.push((
                "virtual_host",
                "must not be empty; the default virtual host is `/`".into(),
            ));
        }
        if self.password.is_some() && self.username.is_none() {
            problems.push((
                "password",
                "is set without `username`; set both, or neither for RabbitMQ's guest user".into(),
            ));
        }
        if self.username.is_some() && self.password.is_none() {
            problems.push((
                "username",
                "is set without `password`; set both, or neither for RabbitMQ's guest user".into(),
            ));
        }
        if self.tls_ca_file.is_some() && !self.tls {
            problems.push((
                "tls_ca_file",
                "is only used over TLS; set `tls: true` too".into(),
            ));
        }
        if self.retry_backoff_max_ms < self.retry_backoff_base_ms {
            problems.push((
                "retry_backoff_max_ms",
                format!(
                    "{} is below retry_backoff_base_ms ({}); the cap must be at least the first delay",
                    self.retry_backoff_max_ms, self.retry_backoff_base_ms
                ),
            ));
        }
        problems
    }

    fn default_virtual_host() -> String {
        Self::DEFAULT_VIRTUAL_HOST.to_string()
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

impl fmt::Debug for RabbitMqConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RabbitMqConfig")
            .field("host", &self.host)
            .field("port", &self.port())
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("virtual_host", &self.virtual_host)
            .field("tls", &self.tls)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("exchange", &self.exchange)
            .field("batch_size", &self.batch_size)
            .field("max_in_flight", &self.max_in_flight)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("retry_backoff_base_ms", &self.retry_backoff_base_ms)
            .field("retry_backoff_max_ms", &self.retry_backoff_max_ms)
            .finish()
    }
}
