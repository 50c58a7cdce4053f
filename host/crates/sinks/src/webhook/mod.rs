//! The webhook sink (`type: webhook`): the delivery worker POSTs a sink's
//! messages to an HTTP endpoint, one per request or batched as
//! `{"data": [...]}`.
//!
//! [`WebhookSettings`] resolves the sink's destination settings against its
//! `http_endpoints` entry; [`WebhookDestination`] does the HTTP and says
//! what is retriable: any 2xx is delivered; any other status, a timeout or a
//! connection failure is retried with backoff by
//! [`crate::delivery::DeliveryWorker`].
//!
//! Requests carry `X-Weft-Timestamp` (Unix seconds) and, when the endpoint
//! has a `signing_secret`, `X-Weft-Signature: sha256=<hex>`, the
//! HMAC-SHA256 with that secret over `"<timestamp>.<JSON body>"` (the body
//! before any gzip). See [`signature`].

mod config;
mod destination;
mod errors;

pub use config::{WebhookConfig, WebhookSettings, WebhookSettingsError};
pub use destination::{SIGNATURE_HEADER, TIMESTAMP_HEADER, WebhookDestination, signature};

use std::sync::Arc;

use serde_yaml_ng::Value;
use weft_config::destination::{
    DeliveryConfig, DestinationProblem, Entries, Reference, push_settings_of,
};
use weft_config::path::DocPath;

use super::config::{Config, SinkConfig};
use super::sink::{BuildError, Built, Sink};
use weft_wasm::http_egress::HttpEgress;

/// The `webhook` sink type.
pub struct WebhookSink;

impl Sink for WebhookSink {
    const TYPE: &'static str = "webhook";
    const ROUTING_KEYS: &'static [&'static str] = &["method", "endpoint_path", "headers"];
    type Config = WebhookConfig;

    fn read(settings: Value) -> Result<WebhookConfig, DestinationProblem> {
        push_settings_of(settings)
    }

    fn delivery(config: &WebhookConfig) -> Option<&DeliveryConfig> {
        Some(&config.delivery)
    }

    fn references(config: &WebhookConfig) -> Vec<Reference> {
        vec![Reference::HttpEndpoint(config.http_endpoint.clone())]
    }

    fn problems(
        config: &WebhookConfig,
        _sink: &SinkConfig,
        entries: &Entries<'_>,
    ) -> Vec<(DocPath, String)> {
        let names = entries.http_endpoints;
        if names.contains(&config.http_endpoint.as_str()) {
            return Vec::new();
        }
        vec![(
            DocPath::root().key("destination").key("http_endpoint"),
            format!(
                "no http endpoint named {:?}; defined http_endpoints: {names:?}",
                config.http_endpoint
            ),
        )]
    }

    fn build(
        config: &WebhookConfig,
        sink: &SinkConfig,
        whole: &Config,
    ) -> Result<Built, BuildError> {
        let endpoint = whole
            .http_endpoint(&config.http_endpoint)
            .expect("config validation guarantees the endpoint exists");
        let settings = WebhookSettings::resolve(sink, config, endpoint)
            .map_err(|error| BuildError::caused_by(&error, error.clone()))?;
        let retry = settings.limits.retry;
        let egress = HttpEgress::of_account(whole, sink.account.as_deref());
        let destination = WebhookDestination::new(&sink.name, settings, egress)
            .map_err(|e| BuildError::caused_by(format!("cannot build the HTTP client: {e}"), e))?;
        Ok(Built::Push {
            destination: Arc::new(destination),
            retry,
        })
    }
}
