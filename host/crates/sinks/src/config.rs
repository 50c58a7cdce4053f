//! The config with every sink type known: [`weft_config`]'s model, with its
//! [`Config`] and [`SinkConfig`] named with this layer's
//! [`DestinationConfig`]. Layers above import config types from here; each
//! sink type's own settings are in its folder (`crate::kafka::KafkaConfig`).

pub use weft_config::*;

pub use super::DestinationConfig;

/// A loaded, valid configuration (see [`weft_config::Config`]).
pub type Config = weft_config::Config<DestinationConfig>;

/// A sink of a loaded configuration (see [`weft_config::SinkConfig`]).
pub type SinkConfig = weft_config::SinkConfig<DestinationConfig>;
