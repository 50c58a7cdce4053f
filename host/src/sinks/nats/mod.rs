//! The NATS sink: the delivery worker publishes a sink's messages to NATS.
//!
//! - Subject: the message's resolved `route.subject` (by default
//!   `sequin.<database>.<schema>.<table>.<action>`), headers from
//!   `route.headers`, `Nats-Msg-Id` = the idempotency key, and
//!   `Content-Type` for a transform's bytes payload.
//! - JetStream (default): each publish waits for the stream's PubAck, so a
//!   message counts as delivered only once a stream stored it. A redelivery
//!   (retry, or a restart after a crash) carries the same `Nats-Msg-Id`, so
//!   the stream drops it as a duplicate within its `duplicate_window`.
//! - Core NATS (`jetstream: false`): publish then flush; the broker sends
//!   no acknowledgement, so a message is delivered once it left weft.
//!
//! [`NatsConnection`] connects on the first delivery and reconnects on its
//! own; while it is not connected, deliveries fail at once (retriably)
//! rather than queueing in the client: the store is the only buffer.

mod config;
mod connection;
mod sink;

pub use config::{NatsAuth, NatsSettings};
pub use connection::NatsConnection;
pub use sink::{MSG_ID_HEADER, NatsDestination};
