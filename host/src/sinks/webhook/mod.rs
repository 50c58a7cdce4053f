//! The webhook sink: the delivery worker POSTs a sink's messages to an HTTP
//! endpoint, one per request or batched as `{"data": [...]}`.
//!
//! [`WebhookSettings`] resolves the sink's destination settings against its
//! `http_endpoints` entry; [`WebhookDestination`] does the HTTP and says
//! what is retriable: any 2xx is delivered; any other status, a timeout or a
//! connection failure is retried with backoff by
//! [`crate::sinks::delivery::DeliveryWorker`].
//!
//! Requests carry `X-Weft-Timestamp` (Unix seconds) and, when the endpoint
//! has a `signing_secret`, `X-Weft-Signature: sha256=<hex>`, the
//! HMAC-SHA256 with that secret over `"<timestamp>.<JSON body>"` (the body
//! before any gzip). See [`signature`].

mod config;
mod sink;

pub use config::{WebhookSettings, WebhookSettingsError};
pub use sink::{SIGNATURE_HEADER, TIMESTAMP_HEADER, WebhookDestination, signature};
