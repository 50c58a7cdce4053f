//! Which failures of a RabbitMQ sink a retry can fix.
//!
//! Permanent (dead-lettered at once): a name or value AMQP cannot carry
//! (over 255 bytes), which no retry can shorten. Everything else is retried
//! with backoff: a nack (a full queue with `overflow: reject-publish`), a
//! message returned as unroutable (no queue bound yet: an operator can bind
//! one), a lost connection or a timed-out confirm.

use lapin::Confirmation;
use lapin::types::ShortString;

use crate::delivery::DeliveryOutcome;
use crate::route::MAX_AMQP_SHORT_STRING;

/// `Ok` when the broker confirmed a publish to `exchange` with
/// `routing_key`; otherwise the outcome `confirmation` means.
pub(super) fn confirmed(
    confirmation: Confirmation,
    exchange: &str,
    routing_key: &str,
) -> Result<(), DeliveryOutcome> {
    match confirmation {
        Confirmation::Ack(None) => Ok(()),
        Confirmation::Ack(Some(returned)) => Err(DeliveryOutcome::retry(format!(
            "RabbitMQ returned the message as unroutable ({} {}): no queue is bound to exchange {exchange:?} for routing key {routing_key:?}; bind a queue that matches it (the message is retried until one is)",
            returned.reply_code, returned.reply_text
        ))),
        Confirmation::Nack(_) => Err(DeliveryOutcome::retry(format!(
            "RabbitMQ nacked the message to exchange {exchange:?} (e.g. a queue with `overflow: reject-publish` is full, or the broker failed to store it)"
        ))),
        Confirmation::NotRequested => Err(DeliveryOutcome::retry(
            "the channel is not in confirm mode; this is a bug in weft",
        )),
    }
}

/// A message whose stored route has no routing key.
pub(super) fn no_routing_key() -> DeliveryOutcome {
    DeliveryOutcome::permanent(
        "the message has no routing key (its stored route lacks one); this is a bug in weft",
    )
}

/// `value` as an AMQP short string, or a permanent failure naming `what`.
pub(super) fn short(what: &str, value: &str) -> Result<ShortString, DeliveryOutcome> {
    ShortString::try_new(value).map_err(|_| {
        DeliveryOutcome::permanent(format!(
            "{what} is {} bytes long; AMQP allows at most {MAX_AMQP_SHORT_STRING} bytes (shorten it in the routing function or transform, then replay this dead letter)",
            value.len()
        ))
    })
}
