//! The NATS sink (`type: nats`): the delivery worker publishes a sink's messages to NATS.
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
mod destination;
mod errors;

pub use config::{NatsAuth, NatsConfig, NatsSettings};
pub use connection::NatsConnection;
pub use destination::{MSG_ID_HEADER, NatsDestination};

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

/// The `nats` sink type.
pub struct NatsSink;

impl Sink for NatsSink {
    const TYPE: &'static str = "nats";
    const ROUTING_KEYS: &'static [&'static str] = &["subject", "headers"];
    type Config = NatsConfig;

    fn read(settings: Value) -> Result<NatsConfig, DestinationProblem> {
        push_settings_of(settings)
    }

    fn delivery(config: &NatsConfig) -> Option<&DeliveryConfig> {
        Some(&config.delivery)
    }

    fn egress_targets(config: &NatsConfig) -> Vec<(&'static str, Result<AllowedHost, HostError>)> {
        vec![("host", AllowedHost::address(&config.host, config.port()))]
    }

    fn problems(
        config: &NatsConfig,
        _sink: &SinkConfig,
        _entries: &Entries<'_>,
    ) -> Vec<(DocPath, String)> {
        under_destination(config.problems())
    }

    const DEFAULT_ROUTE: Option<DefaultRoute> = Some(default_route);

    fn build(config: &NatsConfig, sink: &SinkConfig, _whole: &Config) -> Result<Built, BuildError> {
        let settings = NatsSettings::resolve(sink, config);
        let retry = settings.limits.retry;
        Ok(Built::Push {
            destination: Arc::new(NatsDestination::new(&sink.name, settings)),
            retry,
        })
    }
}

/// `subject`: `sequin.<database>.<schema>.<table>.<action>`.
fn default_route(action: &str, metadata: &Metadata, _group_id: &str) -> Route {
    Route {
        subject: Some(default_subject(metadata, action)),
        ..Route::default()
    }
}
