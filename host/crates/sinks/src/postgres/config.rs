//! The settings of a Postgres sink: `destination:` as written
//! ([`PostgresConfig`]: write changes into a Postgres table, as a mirror of
//! the source rows or as an append-only event log), and resolved against
//! the config's databases ([`PostgresSettings`]).

use serde::Deserialize;
use weft_config::destination::{DeliveryConfig, DeliveryDefaults, PushSettings};
use weft_config::model::TableRef;

use crate::config::{Config, SinkConfig};
use crate::delivery::DeliveryLimits;
use weft_postgres::PgConnectOptions;

/// What a Postgres sink does with each message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", expecting = "mirror or append")]
pub enum PostgresMode {
    /// Upsert the row on insert, update and read; delete it on delete;
    /// keyed by the target table's primary key.
    #[default]
    Mirror,
    /// Insert one event row per message into an event table (the schema in
    /// `docs/sinks/postgres.md`), deduplicated by idempotency key.
    Append,
}

impl PostgresMode {
    /// The name used in config.
    pub fn as_str(self) -> &'static str {
        match self {
            PostgresMode::Mirror => "mirror",
            PostgresMode::Append => "append",
        }
    }
}

/// How a Postgres sink connects and writes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, expecting = "postgres settings")]
pub struct PostgresConfig {
    /// The `databases` entry to write into (its connection only: a database
    /// no sink reads from is not replicated). Required.
    pub database: String,
    /// `mirror` (default) or `append`.
    #[serde(default)]
    pub mode: PostgresMode,
    /// The target table, `schema.table`. Default: in mirror mode, the
    /// source table's own name; in append mode, `public.weft_events`. A
    /// routing function's `table` overrides it per message.
    #[serde(default)]
    pub table: Option<TableRef>,
    /// Create a missing target table: in mirror mode with the source
    /// table's columns, types and primary key; in append mode with the
    /// event-table schema. Default false: a missing table is an error.
    #[serde(default)]
    pub create_table: bool,
    /// The shared delivery fields; Postgres defaults: `batch_size` 1000,
    /// `max_in_flight` 1 (one transaction at a time keeps an event table's
    /// ids in delivery order), `request_timeout_ms` 30000.
    #[serde(skip)]
    pub delivery: DeliveryConfig,
}

impl PostgresConfig {
    /// The append-mode settings of a change retention writing into
    /// `table` of the database `database`, with the default delivery fields.
    pub fn event_log(database: &str, table: TableRef, create_table: bool) -> PostgresConfig {
        PostgresConfig {
            database: database.to_string(),
            mode: PostgresMode::Append,
            table: Some(table),
            create_table,
            delivery: DeliveryConfig::with_defaults(Self::DELIVERY_DEFAULTS),
        }
    }

    /// The event table an append sink writes when no `table` is given.
    pub fn default_event_table() -> TableRef {
        TableRef {
            schema: "public".into(),
            table: "weft_events".into(),
        }
    }
}

impl PushSettings for PostgresConfig {
    const DELIVERY_DEFAULTS: DeliveryDefaults = DeliveryDefaults {
        batch_size: 1000,
        max_in_flight: 1,
        request_timeout_ms: 30_000,
    };

    fn delivery_mut(&mut self) -> &mut DeliveryConfig {
        &mut self.delivery
    }
}

/// Everything a Postgres sink needs, resolved from the config.
#[derive(Debug, Clone)]
pub struct PostgresSettings {
    /// Mirror or append.
    pub mode: PostgresMode,
    /// The target database.
    pub target: PgConnectOptions,
    /// The sink's source database, for creating mirror tables.
    pub source: Option<PgConnectOptions>,
    /// `table:` of the config.
    pub table: Option<TableRef>,
    /// Create missing target tables.
    pub create_table: bool,
    /// Batch size, parallelism, timeout and retries.
    pub limits: DeliveryLimits,
}

impl PostgresSettings {
    /// The settings of `sink`, whose destination is `postgres`.
    pub fn resolve(
        config: &Config,
        sink: &SinkConfig,
        postgres: &PostgresConfig,
    ) -> Result<PostgresSettings, String> {
        let options = |name: &str| {
            let database = config
                .database(name)
                .ok_or_else(|| format!("no database named {name:?}"))?;
            PgConnectOptions::try_from(database.connection()).map_err(|e| e.to_string())
        };
        Ok(PostgresSettings {
            mode: postgres.mode,
            target: options(&postgres.database)?,
            source: sink.database.as_deref().map(options).transpose()?,
            table: postgres.table.clone(),
            create_table: postgres.create_table,
            limits: DeliveryLimits::resolve(sink, &postgres.delivery),
        })
    }
}
