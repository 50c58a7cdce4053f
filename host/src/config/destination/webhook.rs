//! Settings of `type: webhook`: POST messages to an `http_endpoints` entry.

use serde::Deserialize;
use serde::de::{self, Deserializer};

use super::delivery::{DeliveryConfig, DeliveryDefaults, PushSettings};

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
    /// up to `delivery.batch_size` messages. `false`: each request carries one message
    /// as its body.
    #[serde(default = "yes")]
    pub batch: bool,
    /// Compress request bodies with gzip (`Content-Encoding: gzip`). Default false.
    #[serde(default)]
    pub gzip: bool,
    /// The shared delivery fields; webhook defaults: `batch_size` 1
    /// (Sequin's), `max_in_flight` 10, `request_timeout_ms` 30000.
    #[serde(skip)]
    pub delivery: DeliveryConfig,
}

impl PushSettings for WebhookConfig {
    const DELIVERY_DEFAULTS: DeliveryDefaults = DeliveryDefaults {
        batch_size: 1,
        max_in_flight: 10,
        request_timeout_ms: 30_000,
    };

    fn delivery_mut(&mut self) -> &mut DeliveryConfig {
        &mut self.delivery
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
