//! Sink adapters, one folder per destination type, and the delivery worker
//! that drives push sinks from the store.
//!
//! Adding a push sink: a folder with its settings and a
//! [`delivery::Destination`], and an arm in [`push_destination`].

pub mod delivery;
pub mod kafka;
pub mod nats;
pub mod pause;
pub mod postgres;
pub mod rabbitmq;
pub mod redis;
pub mod sequin_stream;
pub mod webhook;

use std::sync::Arc;

use crate::config::{Config, DestinationConfig, SinkConfig};
use crate::http_egress::HttpEgress;
use delivery::{Destination, RetryPolicy};

/// The destination and retry policy of the push sink `sink`, or why it
/// cannot be built. Pull sinks (`sequin_stream`) have no push destination.
pub fn push_destination(
    config: &Config,
    sink: &SinkConfig,
) -> Result<(Arc<dyn Destination>, RetryPolicy), String> {
    match &sink.destination {
        DestinationConfig::SequinStream(_) => {
            Err("sequin_stream sinks are pulled over HTTP; they have no push destination".into())
        }
        DestinationConfig::Webhook(webhook) => {
            let endpoint = config
                .http_endpoint(&webhook.http_endpoint)
                .expect("config validation guarantees the endpoint exists");
            let settings = webhook::WebhookSettings::resolve(sink, webhook, endpoint)
                .map_err(|e| e.to_string())?;
            let retry = settings.limits.retry;
            let egress = HttpEgress::of_account(config, sink.account.as_deref());
            let destination = webhook::WebhookDestination::new(&sink.name, settings, egress)
                .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
            Ok((Arc::new(destination), retry))
        }
        DestinationConfig::Nats(settings) => {
            let settings = nats::NatsSettings::resolve(sink, settings);
            let retry = settings.limits.retry;
            Ok((
                Arc::new(nats::NatsDestination::new(&sink.name, settings)),
                retry,
            ))
        }
        DestinationConfig::RabbitMq(rabbitmq) => {
            let settings = rabbitmq::RabbitMqSettings::resolve(sink, rabbitmq);
            let retry = settings.limits.retry;
            let destination = rabbitmq::RabbitMqDestination::new(&sink.name, settings)?;
            Ok((Arc::new(destination), retry))
        }
        DestinationConfig::RedisString(string) => {
            let settings = redis::RedisSettings::resolve(sink, &string.connection);
            let retry = settings.limits.retry;
            let connection = redis::RedisConnection::new(settings)?;
            let destination = redis::RedisStringDestination::new(connection, string.expire_ms);
            Ok((Arc::new(destination), retry))
        }
        DestinationConfig::RedisStream(stream) => {
            let settings = redis::RedisSettings::resolve(sink, &stream.connection);
            let retry = settings.limits.retry;
            let connection = redis::RedisConnection::new(settings)?;
            let destination =
                redis::RedisStreamDestination::new(connection, stream.stream_key.clone());
            Ok((Arc::new(destination), retry))
        }
        DestinationConfig::Kafka(kafka) => {
            let settings = kafka::KafkaSettings::resolve(sink, kafka)?;
            let retry = settings.limits.retry;
            Ok((Arc::new(kafka::KafkaDestination::new(settings)?), retry))
        }
        DestinationConfig::Postgres(settings) => {
            let settings = postgres::PostgresSettings::resolve(config, sink, settings)?;
            let retry = settings.limits.retry;
            Ok((
                Arc::new(postgres::PostgresDestination::new(&sink.name, settings)),
                retry,
            ))
        }
    }
}
