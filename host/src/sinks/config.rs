//! The config with every sink type known: [`weft_config`]'s model, its
//! [`Config`] and [`SinkConfig`] named with this layer's
//! [`DestinationConfig`], and every sink type's settings. Layers above
//! import config types from here.

pub use weft_config::*;

pub use super::DestinationConfig;
pub use super::kafka::{Compression, KafkaConfig, SaslMechanism};
pub use super::nats::NatsConfig;
pub use super::postgres::{PostgresConfig, PostgresMode};
pub use super::rabbitmq::RabbitMqConfig;
pub use super::redis::RedisConnectionConfig;
pub use super::redis_stream::RedisStreamConfig;
pub use super::redis_string::RedisStringConfig;
pub use super::sequin_stream::SequinStreamConfig;
pub use super::webhook::WebhookConfig;

/// A loaded, valid configuration (see [`weft_config::Config`]).
pub type Config = weft_config::Config<DestinationConfig>;

/// A sink of a loaded configuration (see [`weft_config::SinkConfig`]).
pub type SinkConfig = weft_config::SinkConfig<DestinationConfig>;

/// `destination:` of a sink: what every type shares (from
/// [`weft_config::destination`]) and each sink type's settings.
pub mod destination {
    pub use weft_config::destination::*;

    pub use super::{
        Compression, DestinationConfig, KafkaConfig, NatsConfig, PostgresConfig, PostgresMode,
        RabbitMqConfig, RedisConnectionConfig, RedisStreamConfig, RedisStringConfig, SaslMechanism,
        SequinStreamConfig, WebhookConfig,
    };
}
