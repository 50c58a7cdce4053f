//! The RabbitMQ sink (`type: rabbitmq`): the delivery worker publishes a sink's messages to a
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
mod destination;
mod errors;
mod message;

pub use config::{RabbitMqConfig, RabbitMqSettings};
pub use connection::RabbitMqConnection;
pub use destination::RabbitMqDestination;
pub use message::Outgoing;

use std::sync::Arc;

use serde_yaml_ng::Value;
use weft_config::destination::{DeliveryConfig, DestinationProblem, Entries, push_settings_of};
use weft_config::hosts::{AllowedHost, HostError};
use weft_config::path::DocPath;
use weft_core::message::Metadata;
use weft_core::route::Route;

use super::config::{Config, SinkConfig};
use super::route::default_subject;
use super::sink::{BuildError, Built, DefaultRoute, Sink, under_destination};

/// The `rabbitmq` sink type.
pub struct RabbitMqSink;

impl Sink for RabbitMqSink {
    const TYPE: &'static str = "rabbitmq";
    const ROUTING_KEYS: &'static [&'static str] =
        &["exchange", "routing_key", "headers", "message_id"];
    type Config = RabbitMqConfig;

    fn read(settings: Value) -> Result<RabbitMqConfig, DestinationProblem> {
        push_settings_of(settings)
    }

    fn delivery(config: &RabbitMqConfig) -> Option<&DeliveryConfig> {
        Some(&config.delivery)
    }

    fn egress_targets(
        config: &RabbitMqConfig,
    ) -> Vec<(&'static str, Result<AllowedHost, HostError>)> {
        vec![("host", AllowedHost::address(&config.host, config.port()))]
    }

    fn problems(
        config: &RabbitMqConfig,
        _sink: &SinkConfig,
        _entries: &Entries<'_>,
    ) -> Vec<(DocPath, String)> {
        under_destination(config.problems())
    }

    const DEFAULT_ROUTE: Option<DefaultRoute> = Some(default_route);

    fn build(
        config: &RabbitMqConfig,
        sink: &SinkConfig,
        _whole: &Config,
    ) -> Result<Built, BuildError> {
        let settings = RabbitMqSettings::resolve(sink, config);
        let retry = settings.limits.retry;
        let destination =
            RabbitMqDestination::new(&sink.name, settings).map_err(BuildError::new)?;
        Ok(Built::Push {
            destination: Arc::new(destination),
            retry,
        })
    }
}

/// `routing_key`: the NATS sink's subject; `message_id`: the
/// idempotency key. The exchange comes from the sink's config.
fn default_route(action: &str, metadata: &Metadata, _group_id: &str) -> Route {
    Route {
        routing_key: Some(default_subject(metadata, action)),
        message_id: Some(metadata.idempotency_key.clone()),
        ..Route::default()
    }
}
