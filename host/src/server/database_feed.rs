//! One database's feed, built but not running: its sinks' function chains
//! loaded and its source described. [`super::live_sinks::LiveSinks`]
//! starts it (a source and a pipeline) at start-up, or while weft runs
//! when a config adds the database's first sink or changes the database.

use std::path::Path;

use weft_pipeline::FunctionChain;
use weft_pipeline::backfill::BackfillTarget;
use weft_sinks::config::{Config, DatabaseConfig, SinkConfig};
use weft_source::SourceConfig;
use weft_wasm::PluginEngine;

use super::{ServerError, source_config};

/// A database's source and its sinks, ready to run.
pub struct BuiltFeed {
    /// The database.
    pub database: DatabaseConfig,
    /// Its sinks, each with its loaded function chain.
    pub sinks: Vec<(SinkConfig, FunctionChain)>,
    /// Its source.
    pub source: SourceConfig,
}

impl BuiltFeed {
    /// Loads the feed of `database` as `config` defines it; `None` when no
    /// sink takes the database (nothing to replicate). Blocks while
    /// components compile.
    pub fn build(
        config: &Config,
        database: &DatabaseConfig,
        engine: &PluginEngine,
        data_dir: &Path,
    ) -> Result<Option<BuiltFeed>, ServerError> {
        let sinks: Vec<&SinkConfig> = config
            .sinks
            .iter()
            .filter(|sink| sink.takes_database(&database.name))
            .collect();
        if sinks.is_empty() {
            return Ok(None);
        }
        let source = source_config(database, &sinks, data_dir)?;
        let sinks = sinks
            .into_iter()
            .map(|sink| {
                weft_pipeline::load_chain(config, engine, sink, |_| true)
                    .map(|chain| (sink.clone(), chain))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(BuiltFeed {
            database: database.clone(),
            sinks,
            source,
        }))
    }

    /// What backfills of its sinks read from.
    pub fn backfill_targets(&self) -> Vec<BackfillTarget> {
        self.sinks
            .iter()
            .map(|(sink, _)| BackfillTarget {
                config: sink.clone(),
                connection: self.source.connection.clone(),
                slot: self.database.slot.name.clone(),
                publication: self.database.publication.name.clone(),
            })
            .collect()
    }
}

/// Checks that weft can replicate from `database`: it connects (TLS
/// included), `wal_level` is logical and the user may replicate.
pub async fn check_reachable(database: &DatabaseConfig) -> Result<(), String> {
    let options = super::connect_options(database).map_err(|e| e.to_string())?;
    let (client, _connection) = options
        .connect_query()
        .await
        .map_err(|error| format!("database {}: {error}", database.name))?;
    weft_postgres::check_server(&client, &options.user)
        .await
        .map_err(|error| format!("database {}: {error}", database.name))
}
