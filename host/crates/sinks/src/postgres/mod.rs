//! The `postgres` sink (`type: postgres`): each delivery is one transaction on the target
//! database, in `mirror` mode (upsert and delete by primary key, see
//! [`mirror`]) or `append` mode (one event row per message, see
//! [`append`]).
//!
//! Both are idempotent, so a batch written again after a crash or a lost
//! commit acknowledgement changes nothing. When a batch's transaction is
//! refused, its messages are written one per transaction, so that only the
//! refused ones fail: a data error (bad value, check or unique violation)
//! fails its message permanently (a dead letter, with Postgres's message),
//! anything else retriably. A connection failure fails the whole batch
//! retriably. See `docs/sinks/postgres.md`.

pub mod append;
mod config;
pub mod create;
mod destination;
mod errors;
pub mod item;
pub mod mirror;
pub mod retention;
pub mod target;

pub use config::{PostgresConfig, PostgresMode, PostgresSettings};
pub use destination::PostgresDestination;

use std::sync::Arc;

use serde_yaml_ng::Value;
use weft_config::destination::{
    DeliveryConfig, DestinationProblem, Entries, Reference, push_settings_of,
};
use weft_config::path::DocPath;
use weft_core::change::Action;

use super::config::{Config, SinkConfig};
use super::sink::{BuildError, Built, Sink};

/// The `postgres` sink type.
pub struct PostgresSink;

impl Sink for PostgresSink {
    const TYPE: &'static str = "postgres";
    const ROUTING_KEYS: &'static [&'static str] = &["table"];
    /// Rows are JSON: a bytes payload has no columns to write.
    const CARRIES_BYTES: bool = false;
    type Config = PostgresConfig;

    fn read(settings: Value) -> Result<PostgresConfig, DestinationProblem> {
        push_settings_of(settings)
    }

    fn delivery(config: &PostgresConfig) -> Option<&DeliveryConfig> {
        Some(&config.delivery)
    }

    fn references(config: &PostgresConfig) -> Vec<Reference> {
        vec![Reference::Database(config.database.clone())]
    }

    fn problems(
        config: &PostgresConfig,
        sink: &SinkConfig,
        entries: &Entries<'_>,
    ) -> Vec<(DocPath, String)> {
        let destination = DocPath::root().key("destination");
        let mut problems = Vec::new();
        if let Some(problem) = feeds_itself(sink, config) {
            problems.push((destination.key("table"), problem));
        }
        let databases = entries.databases;
        if !databases.contains(&config.database) {
            problems.push((
                destination.key("database"),
                format!(
                    "no database named {:?}; defined databases: {databases:?} (a postgres sink writes into a `databases` entry)",
                    config.database
                ),
            ));
        }
        problems
    }

    fn build(
        config: &PostgresConfig,
        sink: &SinkConfig,
        whole: &Config,
    ) -> Result<Built, BuildError> {
        let settings = PostgresSettings::resolve(whole, sink, config).map_err(BuildError::new)?;
        let retry = settings.limits.retry;
        Ok(Built::Push {
            destination: Arc::new(PostgresDestination::new(&sink.name, settings)),
            retry,
        })
    }
}

/// Why a postgres sink would write into a table it reads from itself, so
/// that each write becomes a new change of it, endlessly.
fn feeds_itself(sink: &SinkConfig, postgres: &PostgresConfig) -> Option<String> {
    if sink.database.as_deref() != Some(postgres.database.as_str()) {
        return None;
    }
    let Some(table) = postgres.table.clone().or_else(|| {
        (postgres.mode == PostgresMode::Append).then(PostgresConfig::default_event_table)
    }) else {
        return Some(
            "a mirror into the sink's own database needs `table`: without it each row is written back into its own source table; name another table".into(),
        );
    };
    sink.accepts(&table.schema, &table.table, Action::Insert)
        .then(|| format!(
            "{table} is one of the tables this sink reads, so every row written would come back as a new change; name another table, or narrow the sink's `source` (e.g. `include_tables`)"
        ))
}
