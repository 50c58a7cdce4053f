//! A webhook sink's settings, resolved against its HTTP endpoint.

use std::fmt;

use reqwest::Url;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::config::{HttpEndpointConfig, SinkConfig, WebhookConfig};
use crate::sinks::delivery::DeliveryLimits;

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
