//! Settings of `type: webhook`: POST messages to an `http_endpoints` entry.

use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer};

use crate::config::bounds;

/// How a webhook sink delivers. Defaults follow Sequin's where it has one.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, expecting = "webhook settings")]
pub struct WebhookConfig {
    /// The `name` of the `http_endpoints` entry to deliver to.
    pub http_endpoint: String,
    /// Appended to the endpoint's URL, e.g. `/orders`. Default none; must
    /// start with `/` and be at most 2000 characters.
    #[serde(default, deserialize_with = "endpoint_path")]
    pub http_endpoint_path: String,
    /// `true` (default): each request carries `{"data": [message, ...]}` with
    /// up to `batch_size` messages. `false`: each request carries one message
    /// as its body.
    #[serde(default = "yes")]
    pub batch: bool,
    /// Most messages in one request when `batch` is on (1 to 10000). Default 1.
    #[serde(
        default = "WebhookConfig::default_batch_size",
        deserialize_with = "bounds::in_range::<_, u32, 1, 10_000>"
    )]
    pub batch_size: u32,
    /// How long a request may take before it counts as failed and is
    /// retried, in milliseconds (100 to 600000). Default 30000.
    #[serde(
        default = "WebhookConfig::default_request_timeout_ms",
        deserialize_with = "bounds::in_range::<_, u64, 100, 600_000>"
    )]
    pub request_timeout_ms: u64,
    /// Most requests in flight at once for this sink (1 to 1000). Default 10.
    #[serde(
        default = "WebhookConfig::default_max_in_flight",
        deserialize_with = "bounds::in_range::<_, u32, 1, 1000>"
    )]
    pub max_in_flight: u32,
    /// Compress request bodies with gzip (`Content-Encoding: gzip`). Default false.
    #[serde(default)]
    pub gzip: bool,
    /// Delay before the first retry of a failed message, in milliseconds
    /// (1 to 3600000); it doubles with each failure, with jitter. Default 1000.
    #[serde(
        default = "WebhookConfig::default_retry_backoff_base_ms",
        deserialize_with = "bounds::in_range::<_, u64, 1, 3_600_000>"
    )]
    pub retry_backoff_base_ms: u64,
    /// The longest delay between two attempts, in milliseconds (1 to
    /// 86400000). Default 600000 (10 minutes).
    #[serde(
        default = "WebhookConfig::default_retry_backoff_max_ms",
        deserialize_with = "bounds::in_range::<_, u64, 1, 86_400_000>"
    )]
    pub retry_backoff_max_ms: u64,
}

impl WebhookConfig {
    /// Default `batch_size` (Sequin's).
    pub const DEFAULT_BATCH_SIZE: u32 = 1;
    /// Default `request_timeout_ms`.
    pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
    /// Default `max_in_flight`.
    pub const DEFAULT_MAX_IN_FLIGHT: u32 = 10;
    /// Default `retry_backoff_base_ms` (Sequin's 1 s).
    pub const DEFAULT_RETRY_BACKOFF_BASE_MS: u64 = 1_000;
    /// Default `retry_backoff_max_ms` (Sequin's 10 min).
    pub const DEFAULT_RETRY_BACKOFF_MAX_MS: u64 = 600_000;

    /// The request timeout as a duration.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    fn default_batch_size() -> u32 {
        Self::DEFAULT_BATCH_SIZE
    }

    fn default_request_timeout_ms() -> u64 {
        Self::DEFAULT_REQUEST_TIMEOUT_MS
    }

    fn default_max_in_flight() -> u32 {
        Self::DEFAULT_MAX_IN_FLIGHT
    }

    fn default_retry_backoff_base_ms() -> u64 {
        Self::DEFAULT_RETRY_BACKOFF_BASE_MS
    }

    fn default_retry_backoff_max_ms() -> u64 {
        Self::DEFAULT_RETRY_BACKOFF_MAX_MS
    }
}

fn yes() -> bool {
    true
}

fn endpoint_path<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let path = String::deserialize(deserializer)?;
    if path.is_empty() {
        return Ok(path);
    }
    if !path.starts_with('/') {
        return Err(de::Error::custom(format!(
            "{path:?} must start with `/`, e.g. \"/orders\""
        )));
    }
    if path.chars().count() > 2000 {
        return Err(de::Error::custom("must be at most 2000 characters"));
    }
    if path.chars().any(|c| c.is_control() || c == ' ') {
        return Err(de::Error::custom(format!(
            "{path:?} contains spaces or control characters; percent-encode them"
        )));
    }
    Ok(path)
}
