//! Which failures of a webhook sink a retry can fix.
//!
//! Any 2xx answer is delivered. Any other status, a timeout or a
//! connection failure is retried with backoff: the receiver may be down, or
//! answer 4xx until its operator fixes it. Permanent (dead-lettered at
//! once): what no retry changes, as a routing function's method or path
//! that makes no valid request, or a bytes payload for a JSON batch.

use std::time::Duration;

use reqwest::Url;
use weft_wasm::http_egress::EgressRefused;

use crate::delivery::DeliveryOutcome;

/// The outcome of a `method` request to `url` that was `sent`; a request
/// that failed took at most `request_timeout`.
pub(super) async fn outcome(
    method: &str,
    url: &Url,
    sent: reqwest::Result<reqwest::Response>,
    request_timeout: Duration,
) -> DeliveryOutcome {
    match sent {
        Ok(response) if response.status().is_success() => DeliveryOutcome::Delivered,
        Ok(response) => {
            let status = response.status();
            let text = response.text().await.unwrap_or_default();
            let excerpt: String = text.chars().take(200).collect();
            DeliveryOutcome::retry(format!("{method} {url} answered HTTP {status}: {excerpt}"))
        }
        Err(e) if e.is_timeout() => DeliveryOutcome::retry(format!(
            "{url} did not answer within request_timeout_ms = {}",
            request_timeout.as_millis()
        )),
        Err(e) => DeliveryOutcome::retry(format!(
            "request to {url} failed: {}",
            weft_core::error::with_causes(&e)
        )),
    }
}

/// A routing function's `endpoint_path` that makes no valid URL with the
/// endpoint's (`joined`).
pub(super) fn bad_endpoint_path(
    path: &str,
    joined: &str,
    error: url::ParseError,
) -> DeliveryOutcome {
    DeliveryOutcome::permanent(format!(
        "the routing function's endpoint_path {path:?} does not make a valid URL with the endpoint ({joined:?}): {error}"
    ))
}

/// A routing function's `method` that HTTP does not have.
pub(super) fn bad_method(method: &str) -> DeliveryOutcome {
    DeliveryOutcome::permanent(format!(
        "invalid HTTP method {method:?} from the routing function"
    ))
}

/// A URL at an internal address on a sink whose account denies internal
/// HTTP: no retry makes it public.
pub(super) fn refused_egress(refused: EgressRefused) -> DeliveryOutcome {
    DeliveryOutcome::permanent(refused.to_string())
}

/// A transform's bytes payload on a sink that sends JSON batches.
pub(super) fn bytes_in_batch(content_type: &str) -> DeliveryOutcome {
    DeliveryOutcome::permanent(format!(
        "the transform returned a {content_type} bytes payload, which cannot go in a JSON batch; set `batch: false` on this webhook sink to send bytes as the request body"
    ))
}
