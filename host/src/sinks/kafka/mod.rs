//! The Kafka sink: the delivery worker produces a sink's messages to Kafka.
//!
//! - Topic: the message's `route.topic` (set by a routing function), else
//!   the sink's `topic`. Key: `route.message_key`, by default the message
//!   group (the row's primary key), so that a row's changes land on one
//!   partition. Headers: `idempotency-key` = the idempotency key, and
//!   `content-type` for a transform's bytes payload (sent byte-exact).
//! - The idempotent producer with `acks=all`: a message counts as delivered
//!   only once its delivery report says every in-sync replica has it.
//!   Failed and timed-out reports are retried by the delivery worker; only
//!   an oversized message or an invalid topic name is dead-lettered at once.
//! - Order: the worker sends one message per group per delivery, in commit
//!   order, and the next only after the previous one's report; idempotence
//!   keeps order within a partition across librdkafka's own retries.
//!
//! [`KafkaProducer`] is built at startup and connects in the background;
//! while the brokers are down, messages wait in librdkafka's queue (bounded
//! by `max_memory_mb`) for at most `request_timeout_ms`, then fail and wait
//! in weft's store for their retry.

mod errors;
mod producer;
mod settings;
mod sink;

pub use errors::classify;
pub use producer::{KafkaProducer, SinkContext, SinkProducer};
pub use settings::{KafkaSettings, SaslCredentials};
pub use sink::{CONTENT_TYPE_HEADER, IDEMPOTENCY_KEY_HEADER, KafkaDestination};
