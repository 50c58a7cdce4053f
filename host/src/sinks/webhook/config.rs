//! A webhook sink's settings, resolved against its HTTP endpoint.

use std::fmt;
use std::time::Duration;

use reqwest::Url;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::config::{HttpEndpointConfig, SinkConfig, WebhookConfig};
use crate::sinks::delivery::RetryPolicy;

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
    /// Most messages per request in batch mode.
    pub batch_size: u32,
    /// Longest a request may take.
    pub request_timeout: Duration,
    /// Most requests in flight at once.
    pub max_in_flight: u32,
    /// Compress bodies with gzip.
    pub gzip: bool,
    /// Backoff and retry limit.
    pub retry: RetryPolicy,
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
            .field("batch_size", &self.batch_size)
            .field("request_timeout", &self.request_timeout)
            .field("max_in_flight", &self.max_in_flight)
            .field("gzip", &self.gzip)
            .field("retry", &self.retry)
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
        Ok(WebhookSettings {
            url,
            endpoint_url: endpoint.url.trim_end_matches('/').to_string(),
            headers,
            signing_secret: endpoint
                .signing_secret
                .as_ref()
                .map(|s| s.as_bytes().to_vec()),
            batch: webhook.batch,
            batch_size: if webhook.batch { webhook.batch_size } else { 1 },
            request_timeout: webhook.request_timeout(),
            max_in_flight: webhook.max_in_flight,
            gzip: webhook.gzip,
            retry: RetryPolicy {
                backoff_base: Duration::from_millis(webhook.retry_backoff_base_ms),
                backoff_max: Duration::from_millis(webhook.retry_backoff_max_ms),
                max_retry_count: sink.max_retry_count,
            },
        })
    }
}
