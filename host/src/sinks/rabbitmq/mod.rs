//! The RabbitMQ sink: the delivery worker publishes a sink's messages to a
//! RabbitMQ exchange.
//!
//! - Exchange: the route's `exchange`, else the sink's `exchange`. Routing
//!   key: the route's `routing_key` (by default
//!   `sequin.<database>.<schema>.<table>.<action>`). Properties:
//!   `message_id` from the route (by default the idempotency key), headers
//!   from the route, delivery mode 2 (persistent), content type
//!   `application/json` or a transform's bytes payload's own.
//! - Publisher confirms: a message counts as delivered only once the broker
//!   acked it; a nack, a timeout or a lost connection is retried.
//! - `mandatory`: a message no queue receives comes back from the broker
//!   and counts as a (retriable) failure instead of being dropped.
//!
//! [`RabbitMqConnection`] connects on the first delivery and again on the
//! first delivery after the connection is lost; while the broker is down,
//! deliveries fail at once (retriably): the store is the only buffer.

mod config;
mod connection;
mod message;
mod sink;

pub use config::RabbitMqSettings;
pub use connection::RabbitMqConnection;
pub use message::Outgoing;
pub use sink::RabbitMqDestination;
