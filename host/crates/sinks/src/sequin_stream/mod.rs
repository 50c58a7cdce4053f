//! The Sequin Stream sink (`type: sequin_stream`): messages are stored
//! durably and consumers pull them over HTTP with receive, ack and nack.
//!
//! The pipeline stores a sink's messages with [`weft_store::Store::append`]
//! and then calls [`SequinStream::wake`] so that long-polling receivers
//! return at once. The storage rules (commit order, one message per group in
//! flight, leases) live in [`weft_store`]; this module adds the settings
//! and the waiting: long polls and the `max_waiting` limit.

mod config;
mod destination;
mod errors;

pub use crate::pull::{SequinStreamSettings, SettingsError};
pub use config::SequinStreamConfig;
pub use destination::SequinStream;
pub use errors::PullError;

use serde_yaml_ng::Value;
use weft_config::destination::{DeliveryConfig, DestinationProblem, Entries, settings_of};
use weft_config::path::DocPath;

use super::config::{Config, SinkConfig};
use super::sink::{BuildError, Built, Sink};

/// The `sequin_stream` sink type.
pub struct SequinStreamSink;

impl Sink for SequinStreamSink {
    const TYPE: &'static str = "sequin_stream";
    const ROUTING_KEYS: &'static [&'static str] = &[];
    /// The pull API shows messages as JSON only.
    const CARRIES_BYTES: bool = false;
    type Config = SequinStreamConfig;

    fn read(settings: Value) -> Result<SequinStreamConfig, DestinationProblem> {
        settings_of(settings)
    }

    fn delivery(_config: &SequinStreamConfig) -> Option<&DeliveryConfig> {
        None
    }

    fn problems(
        _config: &SequinStreamConfig,
        sink: &SinkConfig,
        _entries: &Entries<'_>,
    ) -> Vec<(DocPath, String)> {
        let mut problems = Vec::new();
        if sink.max_retry_count.is_some() {
            problems.push((
                DocPath::root().key("max_retry_count"),
                "applies to push sinks (webhook); for a sequin_stream sink set `destination.max_deliver`".into(),
            ));
        }
        problems
    }

    fn build(
        config: &SequinStreamConfig,
        _sink: &SinkConfig,
        _whole: &Config,
    ) -> Result<Built, BuildError> {
        Ok(Built::Pull(config.settings()))
    }
}
