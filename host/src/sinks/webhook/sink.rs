//! HTTP delivery of a webhook sink and its retry logic.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use hmac::{Hmac, Mac};
use reqwest::header::{CONTENT_ENCODING, CONTENT_TYPE, HeaderValue};
use serde_json::Value;
use sha2::Sha256;

use super::WebhookSettings;
use crate::sinks::delivery::{DeliveryOutcome, Destination};
use crate::store::StoredMessage;

/// Header carrying the request's Unix time in seconds, part of the signed text.
pub const TIMESTAMP_HEADER: &str = "x-weft-timestamp";
/// Header carrying `sha256=<hex HMAC-SHA256>`, see [`signature`].
pub const SIGNATURE_HEADER: &str = "x-weft-signature";
/// Header carrying the idempotency key in single-message mode.
const IDEMPOTENCY_HEADER: &str = "x-weft-idempotency-key";

/// The signature header value for a request: `sha256=` and the lowercase
/// hex HMAC-SHA256, keyed with the endpoint's `signing_secret`, of
/// `"<timestamp>.<body>"`, where `timestamp` is the `X-Weft-Timestamp`
/// value and `body` the JSON body before any gzip. Receivers recompute it,
/// compare in constant time, and reject old timestamps to stop replays.
pub fn signature(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Delivers a webhook sink's messages over HTTP.
pub struct WebhookDestination {
    sink: String,
    settings: WebhookSettings,
    client: reqwest::Client,
}

impl WebhookDestination {
    /// The destination of the webhook sink `sink`.
    pub fn new(
        sink: &str,
        settings: WebhookSettings,
    ) -> Result<WebhookDestination, reqwest::Error> {
        let client = reqwest::Client::builder()
            .timeout(settings.request_timeout)
            .connect_timeout(settings.request_timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("weft/", env!("CARGO_PKG_VERSION")))
            .default_headers(settings.headers.clone())
            .build()?;
        Ok(WebhookDestination {
            sink: sink.to_string(),
            settings,
            client,
        })
    }

    /// The settings this destination delivers with.
    pub fn settings(&self) -> &WebhookSettings {
        &self.settings
    }

    /// POSTs `body` (JSON); the outcome of the whole request.
    async fn post(&self, body: Vec<u8>, idempotency_key: Option<&str>) -> DeliveryOutcome {
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut request = self
            .client
            .post(self.settings.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(TIMESTAMP_HEADER, timestamp);
        if let Some(secret) = &self.settings.signing_secret {
            request = request.header(SIGNATURE_HEADER, signature(secret, timestamp, &body));
        }
        if let Some(key) = idempotency_key.and_then(|k| HeaderValue::from_str(k).ok()) {
            request = request.header(IDEMPOTENCY_HEADER, key);
        }
        let body = if self.settings.gzip {
            match gzip(&body) {
                Ok(compressed) => {
                    request = request.header(CONTENT_ENCODING, "gzip");
                    compressed
                }
                Err(e) => return DeliveryOutcome::retry(format!("gzip failed: {e}")),
            }
        } else {
            body
        };
        match request.body(body).send().await {
            Ok(response) if response.status().is_success() => DeliveryOutcome::Delivered,
            Ok(response) => {
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                let excerpt: String = text.chars().take(200).collect();
                DeliveryOutcome::retry(format!(
                    "{} answered HTTP {status}: {excerpt}",
                    self.settings.url
                ))
            }
            Err(e) if e.is_timeout() => DeliveryOutcome::retry(format!(
                "{} did not answer within request_timeout_ms = {}",
                self.settings.url,
                self.settings.request_timeout.as_millis()
            )),
            Err(e) => DeliveryOutcome::retry(format!(
                "request to {} failed: {}",
                self.settings.url,
                error_chain(&e)
            )),
        }
    }
}

#[async_trait]
impl Destination for WebhookDestination {
    fn batch_size(&self) -> u32 {
        self.settings.batch_size
    }

    fn max_in_flight(&self) -> usize {
        self.settings.max_in_flight as usize
    }

    fn max_delivery_time(&self) -> Duration {
        self.settings.request_timeout
    }

    async fn deliver(&self, batch: &[StoredMessage]) -> Vec<DeliveryOutcome> {
        if self.settings.batch {
            let data: Vec<&Value> = batch.iter().map(|m| &m.payload).collect();
            let body = serde_json::to_vec(&serde_json::json!({ "data": data }))
                .expect("JSON values serialize");
            let outcome = self.post(body, None).await;
            tracing::trace!(sink = %self.sink, messages = batch.len(), ?outcome, "webhook batch");
            vec![outcome; batch.len()]
        } else {
            let requests = batch.iter().map(|message| {
                let body = serde_json::to_vec(&message.payload).expect("JSON values serialize");
                self.post(body, Some(&message.idempotency_key))
            });
            futures::future::join_all(requests).await
        }
    }
}

fn gzip(body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 4),
        flate2::Compression::fast(),
    );
    encoder.write_all(body)?;
    encoder.finish()
}

/// The error and its causes, e.g. "error sending request: connection refused".
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_is_hmac_sha256_of_timestamp_dot_body() {
        // From: printf '1700000000.{"a":1}' | openssl dgst -sha256 -hmac secret
        assert_eq!(
            signature(b"secret", 1_700_000_000, br#"{"a":1}"#),
            "sha256=49f24e537407743fa4a0242bb63b94b9a47ee99cbbe071ccd8a22550ae411686"
        );
    }

    #[test]
    fn gzip_round_trips() {
        use std::io::Read;
        let body = br#"{"data":[1,2,3]}"#.repeat(50);
        let compressed = gzip(&body).unwrap();
        assert!(compressed.len() < body.len());
        let mut decoded = Vec::new();
        flate2::read::GzDecoder::new(&compressed[..])
            .read_to_end(&mut decoded)
            .unwrap();
        assert_eq!(decoded, body);
    }
}
