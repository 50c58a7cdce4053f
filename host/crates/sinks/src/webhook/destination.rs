//! HTTP delivery of a webhook sink and its retry logic.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use hmac::{Hmac, Mac};
use reqwest::header::{CONTENT_ENCODING, CONTENT_TYPE, HeaderValue};
use reqwest::{Method, Url};
use sha2::Sha256;

use super::{WebhookSettings, errors};
use crate::delivery::{DeliveryLimits, DeliveryOutcome, Destination};
use weft_core::route::Route;
use weft_store::{StoredMessage, StoredPayload};
use weft_wasm::http_egress::HttpEgress;

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
    egress: HttpEgress,
    client: reqwest::Client,
}

impl WebhookDestination {
    /// The destination of the webhook sink `sink`, connecting to the
    /// addresses `egress` allows.
    pub fn new(
        sink: &str,
        settings: WebhookSettings,
        egress: HttpEgress,
    ) -> Result<WebhookDestination, reqwest::Error> {
        let builder = reqwest::Client::builder()
            .timeout(settings.limits.request_timeout)
            .connect_timeout(settings.limits.request_timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("weft/", env!("CARGO_PKG_VERSION")))
            .default_headers(settings.headers.clone());
        let client = egress.configure(builder).build()?;
        Ok(WebhookDestination {
            sink: sink.to_string(),
            settings,
            egress,
            client,
        })
    }

    /// The settings this destination delivers with.
    pub fn settings(&self) -> &WebhookSettings {
        &self.settings
    }

    /// Where a message with `route` goes: the routing function's method,
    /// path and headers where it set them, the sink's settings otherwise.
    fn target(&self, route: &Route) -> Result<Target, DeliveryOutcome> {
        let url = match &route.endpoint_path {
            None => self.settings.url.clone(),
            Some(path) => {
                let joined = format!("{}{path}", self.settings.endpoint_url);
                Url::parse(&joined).map_err(|e| errors::bad_endpoint_path(path, &joined, e))?
            }
        };
        // Config validation refuses an endpoint at an internal address
        // already; this keeps the sink from ever sending to one.
        self.egress
            .check_url(&url)
            .map_err(errors::refused_egress)?;
        let method = match &route.method {
            None => Method::POST,
            Some(method) => Method::from_bytes(method.to_ascii_uppercase().as_bytes())
                .map_err(|_| errors::bad_method(method))?,
        };
        Ok(Target {
            method,
            url,
            headers: route.headers.clone().unwrap_or_default(),
        })
    }

    /// Sends `body` with `content_type` to `target`; the outcome of the
    /// whole request.
    async fn send(
        &self,
        target: &Target,
        body: Vec<u8>,
        content_type: &str,
        idempotency_key: Option<&str>,
    ) -> DeliveryOutcome {
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut request = self
            .client
            .request(target.method.clone(), target.url.clone())
            .header(CONTENT_TYPE, content_type)
            .header(TIMESTAMP_HEADER, timestamp);
        // Routing headers come first, so that they cannot replace the
        // signature, timestamp or idempotency headers set after them.
        for (name, value) in &target.headers {
            request = request.header(name.as_str(), value.as_str());
        }
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
        let sent = request.body(body).send().await;
        errors::outcome(
            target.method.as_str(),
            &target.url,
            sent,
            self.settings.limits.request_timeout,
        )
        .await
    }
}

#[async_trait]
impl Destination for WebhookDestination {
    fn limits(&self) -> &DeliveryLimits {
        &self.settings.limits
    }

    async fn deliver(&self, batch: &[StoredMessage]) -> Vec<DeliveryOutcome> {
        let mut outcomes: Vec<Option<DeliveryOutcome>> = vec![None; batch.len()];
        // Messages bound for the same method, URL and headers share a
        // request in batch mode; in single mode each has its own.
        let mut requests: Vec<(Target, Vec<usize>)> = Vec::new();
        for (index, message) in batch.iter().enumerate() {
            let target = match self.target(&message.route) {
                Ok(target) => target,
                Err(outcome) => {
                    outcomes[index] = Some(outcome);
                    continue;
                }
            };
            if self.settings.batch {
                if let Some(content_type) = message.payload.bytes_content_type() {
                    outcomes[index] = Some(errors::bytes_in_batch(content_type));
                    continue;
                }
                if let Some((_, members)) = requests.iter_mut().find(|(t, _)| *t == target) {
                    members.push(index);
                    continue;
                }
            }
            requests.push((target, vec![index]));
        }
        let sends = requests.iter().map(|(target, members)| async move {
            let outcome = if self.settings.batch {
                let body = batch_body(members.iter().map(|&i| &batch[i].payload));
                self.send(target, body, "application/json", None).await
            } else {
                let message = &batch[members[0]];
                let content_type = message
                    .payload
                    .bytes_content_type()
                    .unwrap_or("application/json");
                let body = message.payload.body().to_vec();
                self.send(target, body, content_type, Some(&message.idempotency_key))
                    .await
            };
            tracing::trace!(sink = %self.sink, messages = members.len(), ?outcome, "webhook request");
            (members, outcome)
        });
        for (members, outcome) in futures::future::join_all(sends).await {
            for &index in members {
                outcomes[index] = Some(outcome.clone());
            }
        }
        outcomes
            .into_iter()
            .map(|o| o.expect("every message got an outcome"))
            .collect()
    }
}

/// The method, URL and extra headers of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    method: Method,
    url: Url,
    headers: Vec<(String, String)>,
}

/// A batch request's body, `{"data": [...]}`, written from the stored JSON
/// texts as they are. Bytes payloads never reach a batch (they are refused
/// before it is formed) and are left out.
fn batch_body<'a>(payloads: impl Iterator<Item = &'a StoredPayload>) -> Vec<u8> {
    let mut body = b"{\"data\":[".to_vec();
    let texts = payloads.filter_map(|payload| match payload {
        StoredPayload::Json(text) => Some(text),
        StoredPayload::Bytes { .. } => None,
    });
    for (i, text) in texts.enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(text.as_bytes());
    }
    body.extend_from_slice(b"]}");
    body
}

fn gzip(body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 4),
        flate2::Compression::fast(),
    );
    encoder.write_all(body)?;
    encoder.finish()
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
    fn a_batch_body_is_the_stored_texts_in_a_data_array() {
        let messages = [
            serde_json::json!({"record": {"id": 1, "name": "a \"q\" é"}, "action": "insert"}),
            serde_json::json!({"record": {"id": 2}, "n": 1.50}),
        ];
        let stored: Vec<StoredPayload> = messages
            .iter()
            .map(|m| StoredPayload::Json(m.to_string()))
            .collect();
        let body = batch_body(stored.iter());
        let expected = serde_json::to_vec(&serde_json::json!({ "data": messages })).unwrap();
        assert_eq!(
            String::from_utf8(body).unwrap(),
            String::from_utf8(expected).unwrap()
        );
        assert_eq!(batch_body(std::iter::empty()), br#"{"data":[]}"#);
    }

    /// The settings of a webhook sink delivering to `url`.
    fn settings(url: &str) -> WebhookSettings {
        let yaml = format!(
            "databases:\n  - {{ name: db, hostname: localhost, database: d, slot: {{ name: s }}, publication: {{ name: p }} }}\n\
             http_endpoints:\n  - {{ name: ep, url: \"{url}\" }}\n\
             sinks:\n  - {{ name: h, database: db, destination: {{ type: webhook, http_endpoint: ep }} }}\n"
        );
        let config = crate::config::Config::from_yaml(&yaml, std::path::Path::new("."), &|_| None)
            .unwrap_or_else(|e| panic!("{e}"));
        let sink = &config.sinks[0];
        let crate::config::DestinationConfig::Webhook(webhook) = &sink.destination else {
            panic!("a webhook sink");
        };
        WebhookSettings::resolve(sink, webhook, config.http_endpoint("ep").unwrap()).unwrap()
    }

    #[test]
    fn an_internal_address_in_the_url_fails_for_good_when_the_account_denies_it() {
        let denied = HttpEgress::PublicOnly {
            account: "acme".into(),
        };
        for url in ["http://127.0.0.1:9/in", "http://[::1]:9/in"] {
            let destination = WebhookDestination::new("h", settings(url), denied.clone()).unwrap();
            match destination.target(&Route::default()).err() {
                Some(DeliveryOutcome::Failed {
                    error,
                    retriable: false,
                }) => assert!(
                    error.contains("is an internal address") && error.contains("\"acme\""),
                    "{error}"
                ),
                other => panic!("{url}: expected a permanent failure, got {other:?}"),
            }
            let open = WebhookDestination::new("h", settings(url), HttpEgress::Any).unwrap();
            assert!(open.target(&Route::default()).is_ok(), "{url}");
        }
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
