//! Which failures of a NATS sink a retry can fix.
//!
//! Permanent (the message is dead-lettered at once): a message larger than
//! the server's `max_payload`. Everything else is retried with backoff,
//! including a subject no JetStream stream captures: an operator can create
//! the stream, and delivery then continues without replaying dead letters.

use std::fmt::Display;
use std::time::Duration;

use async_nats::jetstream::context::PublishErrorKind;

use crate::delivery::DeliveryOutcome;

/// The outcome of a JetStream publish to `subject` that failed with
/// `kind`; `request_timeout` is the sink's.
pub(super) fn publish_failed(
    subject: &str,
    kind: PublishErrorKind,
    error: &dyn Display,
    request_timeout: Duration,
) -> DeliveryOutcome {
    match kind {
        // Retriable: the stream may be created later.
        PublishErrorKind::StreamNotFound => DeliveryOutcome::retry(format!(
            "no JetStream stream captures subject {subject:?}; create a stream whose subjects cover it (e.g. `nats stream add --subjects 'sequin.>'`), or set `jetstream: false` on this sink for core NATS publishes"
        )),
        PublishErrorKind::TimedOut => DeliveryOutcome::retry(format!(
            "JetStream did not acknowledge the publish to {subject:?} within request_timeout_ms = {}",
            request_timeout.as_millis()
        )),
        PublishErrorKind::MaxPayloadExceeded => DeliveryOutcome::permanent(format!(
            "the message to {subject:?} exceeds the NATS server's max_payload ({error}); raise max_payload on the server or shrink the message with a transform, then replay this dead letter"
        )),
        _ => DeliveryOutcome::retry(format!("JetStream publish to {subject:?} failed: {error}")),
    }
}

/// The outcome of a core NATS publish to `subject` that failed.
pub(super) fn core_publish_failed(subject: &str, error: &dyn Display) -> DeliveryOutcome {
    DeliveryOutcome::retry(format!(
        "publishing to NATS subject {subject:?} failed: {error}"
    ))
}

/// The outcome of a flush to the server at `address` that failed: every
/// core publish of the batch may be lost.
pub(super) fn flush_failed(address: &str, error: &dyn Display) -> DeliveryOutcome {
    DeliveryOutcome::retry(format!("flushing to NATS at {address} failed: {error}"))
}
