//! Which failures of a `redis_stream` sink a retry can fix.
//!
//! A lost connection, a timeout or an error reply is retried with backoff
//! by the shared connection ([`crate::redis`]). Permanent
//! (dead-lettered at once): a message that cannot become a stream entry.

use std::fmt::Display;

use crate::delivery::DeliveryOutcome;

/// A stored payload that cannot be read back.
pub(super) fn unreadable(error: impl Display) -> DeliveryOutcome {
    DeliveryOutcome::permanent(error.to_string())
}

/// A JSON payload of kind `kind` (not an object), which has no fields.
pub(super) fn not_an_object(kind: &str) -> DeliveryOutcome {
    DeliveryOutcome::permanent(format!(
        "a redis_stream message must be a JSON object, whose keys become the entry's fields; the transform returned {kind}; return an object, or bytes (sent as the `data` field)"
    ))
}
