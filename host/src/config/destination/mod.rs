//! `destination:` of a sink. `type` picks the kind; each kind has its own
//! settings struct in its own module, read only after `type` is known so
//! that unknown keys and bad values are reported with their exact path.
//!
//! Adding a kind: a module with its settings struct
//! (`#[serde(deny_unknown_fields)]`; a push kind also implements
//! `delivery::PushSettings` and is read with `push_settings_of`), a variant
//! here, arms in `DestinationConfig::from_yaml` and `delivery`, and its name
//! moved from `PLANNED` to `SUPPORTED`.

mod delivery;
mod kafka;
mod nats;
mod postgres;
mod rabbitmq;
mod redis;
mod rules;
mod sequin_stream;
mod webhook;

pub use delivery::{DeliveryConfig, DeliveryDefaults};
pub use kafka::{Compression, KafkaConfig, SaslMechanism, topic_name_problem};
pub use nats::NatsConfig;
pub use postgres::{PostgresConfig, PostgresMode};
pub use rabbitmq::RabbitMqConfig;
pub use redis::{RedisConnectionConfig, RedisStreamConfig, RedisStringConfig};
pub use sequin_stream::SequinStreamConfig;
pub use webhook::WebhookConfig;

use serde::de::DeserializeOwned;
use serde_yaml_ng::Value;

use super::path::DocPath;
use delivery::push_settings_of;

/// Where a sink delivers, with that destination's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DestinationConfig {
    /// `type: sequin_stream`: messages are stored in weft and pulled by
    /// consumers over HTTP (receive, ack, nack).
    SequinStream(SequinStreamConfig),
    /// `type: webhook`: messages are POSTed to an `http_endpoints` entry by
    /// the sink's delivery worker, with retries and dead letters.
    Webhook(WebhookConfig),
    /// `type: nats`: messages are published to NATS (JetStream by default)
    /// by the sink's delivery worker, with retries and dead letters.
    Nats(NatsConfig),
    /// `type: redis_string`: each message `SET`s (or `DEL`s) one Redis key.
    RedisString(RedisStringConfig),
    /// `type: redis_stream`: each message is `XADD`ed to a Redis stream.
    RedisStream(RedisStreamConfig),
    /// `type: kafka`: messages are produced to a Kafka topic by the
    /// idempotent producer (`acks=all`).
    Kafka(KafkaConfig),
    /// `type: rabbitmq`: messages are published to a RabbitMQ exchange with
    /// publisher confirms by the sink's delivery worker.
    RabbitMq(RabbitMqConfig),
    /// `type: postgres`: rows are mirrored into (or events appended to) a
    /// Postgres table, one transaction per delivery.
    Postgres(PostgresConfig),
}

/// `type` values accepted today.
pub(crate) const SUPPORTED: &[&str] = &[
    "sequin_stream",
    "webhook",
    "nats",
    "redis_string",
    "redis_stream",
    "kafka",
    "rabbitmq",
    "postgres",
];

/// Sequin's other destination types, which weft does not have (yet); named
/// in the error so that users know it is not a typo.
const PLANNED: &[&str] = &[
    "sqs",
    "sns",
    "kinesis",
    "gcp_pubsub",
    "azure_event_hub",
    "elasticsearch",
    "typesense",
    "meilisearch",
    "s2",
];

/// A problem inside `destination:`, with its path relative to it.
pub(crate) struct DestinationProblem {
    pub(crate) path: DocPath,
    pub(crate) message: String,
}

impl DestinationConfig {
    /// The `type` this destination was configured with.
    pub fn type_name(&self) -> &'static str {
        match self {
            DestinationConfig::SequinStream(_) => "sequin_stream",
            DestinationConfig::Webhook(_) => "webhook",
            DestinationConfig::Nats(_) => "nats",
            DestinationConfig::RedisString(_) => "redis_string",
            DestinationConfig::RedisStream(_) => "redis_stream",
            DestinationConfig::Kafka(_) => "kafka",
            DestinationConfig::RabbitMq(_) => "rabbitmq",
            DestinationConfig::Postgres(_) => "postgres",
        }
    }

    /// The shared delivery fields of a push destination; `None` for a pull
    /// sink.
    pub fn delivery(&self) -> Option<&DeliveryConfig> {
        match self {
            DestinationConfig::SequinStream(_) => None,
            DestinationConfig::Webhook(webhook) => Some(&webhook.delivery),
            DestinationConfig::Nats(nats) => Some(&nats.delivery),
            DestinationConfig::RabbitMq(rabbitmq) => Some(&rabbitmq.delivery),
            DestinationConfig::RedisString(string) => Some(&string.connection.delivery),
            DestinationConfig::RedisStream(stream) => Some(&stream.connection.delivery),
            DestinationConfig::Kafka(kafka) => Some(&kafka.delivery),
            DestinationConfig::Postgres(postgres) => Some(&postgres.delivery),
        }
    }

    /// Reads a destination from its YAML mapping.
    pub(crate) fn from_yaml(value: Value) -> Result<Self, DestinationProblem> {
        let here = DocPath::root();
        let Value::Mapping(mut fields) = value else {
            return Err(DestinationProblem {
                path: here,
                message: format!(
                    "expected a mapping with a `type` key, e.g. `type: sequin_stream`; allowed types: {}",
                    SUPPORTED.join(", ")
                ),
            });
        };
        let type_path = here.key("type");
        let kind = match fields.remove("type") {
            None => {
                return Err(DestinationProblem {
                    path: here,
                    message: format!(
                        "missing field `type`; allowed types: {}",
                        SUPPORTED.join(", ")
                    ),
                });
            }
            Some(Value::String(kind)) => kind,
            Some(_) => {
                return Err(DestinationProblem {
                    path: type_path,
                    message: format!("expected a string; allowed types: {}", SUPPORTED.join(", ")),
                });
            }
        };
        let settings = Value::Mapping(fields);
        match kind.as_str() {
            "sequin_stream" => settings_of(settings).map(DestinationConfig::SequinStream),
            "webhook" => push_settings_of(settings).map(DestinationConfig::Webhook),
            "nats" => push_settings_of(settings).map(DestinationConfig::Nats),
            "redis_string" => {
                RedisStringConfig::from_settings(settings).map(DestinationConfig::RedisString)
            }
            "redis_stream" => {
                RedisStreamConfig::from_settings(settings).map(DestinationConfig::RedisStream)
            }
            "kafka" => push_settings_of(settings).map(DestinationConfig::Kafka),
            "rabbitmq" => push_settings_of(settings).map(DestinationConfig::RabbitMq),
            "postgres" => push_settings_of(settings).map(DestinationConfig::Postgres),
            planned if PLANNED.contains(&planned) => Err(DestinationProblem {
                path: type_path,
                message: format!(
                    "destination type `{planned}` is not supported yet; supported types: {}",
                    SUPPORTED.join(", ")
                ),
            }),
            unknown => Err(DestinationProblem {
                path: type_path,
                message: format!(
                    "unknown destination type `{unknown}`; allowed types: {}",
                    SUPPORTED.join(", ")
                ),
            }),
        }
    }
}

/// Reads one kind's settings (everything but `type`), keeping the path of
/// the offending key.
fn settings_of<T: DeserializeOwned>(settings: Value) -> Result<T, DestinationProblem> {
    serde_path_to_error::deserialize(settings).map_err(|error| DestinationProblem {
        path: DocPath::from_tracked(error.path()),
        message: error.into_inner().to_string(),
    })
}
