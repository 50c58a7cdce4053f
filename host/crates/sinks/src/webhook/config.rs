//! The settings of a webhook sink: `destination:` as written
//! ([`WebhookConfig`]: POST messages to an `http_endpoints` entry), and
//! resolved against that endpoint ([`WebhookSettings`]).

use std::fmt;

use reqwest::Url;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde::de::{self, Deserializer};
use weft_config::HttpEndpointConfig;
use weft_config::destination::{DeliveryConfig, DeliveryDefaults, PushSettings};

use crate::config::SinkConfig;
use crate::delivery::DeliveryLimits;

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

/// Everything a webhook sink needs to deliver. `Debug` hides secret header
/// values and the signing secret.
#[derive(Clone)]
pub struct WebhookSettings {
    /// The endpoint's base URL plus the sink's path.
    pub url: Url,
    /// The endpoint's base URL alone: a routing function's `endpoint_path`
    /// is appended to it instead of the sink's path.
    pub endpoint_url: String,
    /// Headers sent with every request (plain and secret ones).
    pub headers: HeaderMap,
    /// Key of the HMAC-SHA256 signature, if the endpoint has one.
    pub signing_secret: Option<Vec<u8>>,
    /// `{"data": [...]}` batches (true) or one message per request.
    pub batch: bool,
    /// Compress bodies with gzip.
    pub gzip: bool,
    /// Batch size (1 unless in batch mode), requests in flight, request
    /// timeout and retries.
    pub limits: DeliveryLimits,
}

impl fmt::Debug for WebhookSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(name, value)| {
                let shown = if value.is_sensitive() {
                    "<redacted>"
                } else {
                    value.to_str().unwrap_or("<binary>")
                };
                (name.as_str(), shown)
            })
            .collect();
        f.debug_struct("WebhookSettings")
            .field("url", &self.url.as_str())
            .field("headers", &headers)
            .field("signed", &self.signing_secret.is_some())
            .field("batch", &self.batch)
            .field("gzip", &self.gzip)
            .field("limits", &self.limits)
            .finish()
    }
}

/// The settings cannot be resolved. Config validation rules these out; the
/// error exists for settings built by hand.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookSettingsError {
    /// The endpoint URL plus the path is not a URL.
    #[error("http endpoint {endpoint}: {url:?} plus path {path:?} is not a valid URL: {reason}")]
    Url {
        /// The endpoint's name.
        endpoint: String,
        /// Its base URL.
        url: String,
        /// The sink's path.
        path: String,
        /// Why.
        reason: String,
    },
    /// A header name or value cannot be sent.
    #[error("http endpoint {endpoint}: header {header:?} has an invalid name or value")]
    Header {
        /// The endpoint's name.
        endpoint: String,
        /// The header's name.
        header: String,
    },
}

impl WebhookSettings {
    /// Resolves the webhook sink `sink` (whose destination is `webhook`)
    /// against `endpoint`.
    pub fn resolve(
        sink: &SinkConfig,
        webhook: &WebhookConfig,
        endpoint: &HttpEndpointConfig,
    ) -> Result<WebhookSettings, WebhookSettingsError> {
        let joined = format!("{}{}", endpoint.url, webhook.http_endpoint_path);
        let url = Url::parse(&joined).map_err(|e| WebhookSettingsError::Url {
            endpoint: endpoint.name.clone(),
            url: endpoint.url.clone(),
            path: webhook.http_endpoint_path.clone(),
            reason: e.to_string(),
        })?;
        let mut headers = HeaderMap::new();
        for (plain, secret) in [
            (&endpoint.headers, false),
            (&endpoint.encrypted_headers, true),
        ] {
            for (name, value) in plain {
                let bad = || WebhookSettingsError::Header {
                    endpoint: endpoint.name.clone(),
                    header: name.clone(),
                };
                let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?;
                let mut value = HeaderValue::from_str(value).map_err(|_| bad())?;
                // reqwest and our Debug leave sensitive values out of logs.
                value.set_sensitive(secret);
                headers.insert(header, value);
            }
        }
        let mut limits = DeliveryLimits::resolve(sink, &webhook.delivery);
        if !webhook.batch {
            limits.batch_size = 1;
        }
        Ok(WebhookSettings {
            url,
            endpoint_url: endpoint.url.trim_end_matches('/').to_string(),
            headers,
            signing_secret: endpoint
                .signing_secret
                .as_ref()
                .map(|s| s.as_bytes().to_vec()),
            batch: webhook.batch,
            gzip: webhook.gzip,
            limits,
        })
    }
}
