//! The `redis_string` sink (`type: redis_string`): each message `SET`s one
//! Redis key to the message (with `PX` when it expires), or `DEL`s it on a
//! delete. Commands are pipelined over the shared [`crate::redis`]
//! connection.

mod config;
mod destination;
mod errors;

pub use config::RedisStringConfig;
pub use destination::RedisStringDestination;

use std::sync::Arc;

use serde_yaml_ng::Value;
use weft_config::TruncatePolicy;
use weft_config::destination::{DeliveryConfig, DestinationProblem, Entries};
use weft_config::hosts::{AllowedHost, HostError};
use weft_config::path::DocPath;
use weft_core::change::Action;
use weft_core::message::Metadata;
use weft_core::route::{KeyAction, Route};

use super::config::{Config, SinkConfig};
use super::redis::{RedisConnection, RedisSettings};
use super::sink::{BuildError, Built, DefaultRoute, Sink};

/// The `redis_string` sink type.
pub struct RedisStringSink;

impl Sink for RedisStringSink {
    const TYPE: &'static str = "redis_string";
    const ROUTING_KEYS: &'static [&'static str] = &["key", "action", "expire_ms"];
    type Config = RedisStringConfig;

    fn read(settings: Value) -> Result<RedisStringConfig, DestinationProblem> {
        RedisStringConfig::from_settings(settings)
    }

    fn delivery(config: &RedisStringConfig) -> Option<&DeliveryConfig> {
        Some(&config.connection.delivery)
    }

    fn egress_targets(
        config: &RedisStringConfig,
    ) -> Vec<(&'static str, Result<AllowedHost, HostError>)> {
        config.connection.egress_targets()
    }

    fn problems(
        _config: &RedisStringConfig,
        sink: &SinkConfig,
        _entries: &Entries<'_>,
    ) -> Vec<(DocPath, String)> {
        let mut problems = Vec::new();
        if sink.truncate == TruncatePolicy::Deliver {
            problems.push((
                DocPath::root().key("truncate"),
                "deliver is not possible on a redis_string sink: a truncate message has no row key to SET or DEL; use `truncate: skip` (the default), and clear the table's keys yourself".into(),
            ));
        }
        problems
    }

    const DEFAULT_ROUTE: Option<DefaultRoute> = Some(default_route);

    fn build(
        config: &RedisStringConfig,
        sink: &SinkConfig,
        _whole: &Config,
    ) -> Result<Built, BuildError> {
        let settings = RedisSettings::resolve(sink, &config.connection);
        let retry = settings.limits.retry;
        let connection = RedisConnection::new(settings).map_err(BuildError::new)?;
        Ok(Built::Push {
            destination: Arc::new(RedisStringDestination::new(connection, config.expire_ms)),
            retry,
        })
    }
}

/// `key`: `sequin:<table>:<primary key values joined by "-">`;
/// `action`: `del` for deletes, `set` otherwise.
fn default_route(action: &str, metadata: &Metadata, _group_id: &str) -> Route {
    Route {
        key: Some(format!(
            "sequin:{}:{}",
            metadata.table_name,
            metadata.record_pks.join("-")
        )),
        action: Some(if action == Action::Delete.as_str() {
            KeyAction::Del
        } else {
            KeyAction::Set
        }),
        ..Route::default()
    }
}
