//! Which failures of a `redis_string` sink a retry can fix.
//!
//! A lost connection, a timeout or an error reply is retried with backoff
//! by the shared connection ([`crate::redis`]): an error reply such
//! as `WRONGTYPE` lasts only until an operator fixes the key. Permanent
//! (dead-lettered at once): a message no command can be made of.

use crate::delivery::DeliveryOutcome;

/// A message left without a key to `SET` or `DEL`.
pub(super) fn no_key() -> DeliveryOutcome {
    DeliveryOutcome::permanent(
        "the message has no Redis key; a routing function must not clear `key`",
    )
}
