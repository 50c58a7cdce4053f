//! A [`SourceConfig`] for tests that drive `weft_source::run` directly.

use weft_postgres::PgConnectOptions;
use weft_source::SourceConfig;

/// Streams `tables` (all tables when empty) from the database at `url`
/// through `slot` and `publication`, creating both. Heartbeats are off so
/// that tests see only their own transactions. The database is named after
/// the slot in metrics and health.
pub fn source_config(url: &str, slot: &str, publication: &str, tables: &[&str]) -> SourceConfig {
    SourceConfig {
        name: slot.into(),
        connection: PgConnectOptions::from_url(url).expect("a valid test URL"),
        slot_name: slot.into(),
        create_slot_if_not_exists: true,
        publication_name: publication.into(),
        create_publication_if_not_exists: true,
        tables: tables.iter().map(|t| t.to_string()).collect(),
        spill_dir: std::env::temp_dir().join(format!("weft-spill-{slot}-{}", std::process::id())),
        heartbeat_interval: None,
        lag_warning_bytes: u64::MAX,
    }
}
