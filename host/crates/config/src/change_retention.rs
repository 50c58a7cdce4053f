//! `change_retentions:` entries (Sequin's "WAL pipelines"): every change of
//! a source table, optionally narrowed by actions, column filters and a
//! filter function, written as one row into an event table in Postgres.
//!
//! A change retention runs as a sink of type `postgres` in `append` mode
//! (see `docs/sinks/postgres.md`): the same delivery, retries, dead letters,
//! metrics and health. [`ChangeRetentionConfig::sink`] builds that sink.

use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer};

use super::bounds;
use super::column_filter::ColumnFilter;
use super::destination::Destination;
use super::model::{
    ActionSet, DEFAULT_MAX_MEMORY_MB, DEFAULT_QUARANTINE_AFTER_TRAPS, LoadSheddingPolicy,
    SinkConfig, SourceConfig, TableRef, TruncatePolicy,
};
use weft_core::change::Action;

/// A `change_retentions:` entry, as written (Sequin's keys).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a change retention with `name`, `source_database`, `source_table_name`, `destination_database`"
)]
pub struct ChangeRetentionConfig {
    /// Its name; also the name of the sink that runs it (unique among sinks).
    #[serde(deserialize_with = "bounds::resource_name")]
    pub name: String,
    /// The `databases` entry whose table's changes are kept.
    pub source_database: String,
    /// The source table's schema; default `public`.
    #[serde(default = "public")]
    pub source_table_schema: String,
    /// The source table.
    pub source_table_name: String,
    /// The `databases` entry that holds the event table.
    pub destination_database: String,
    /// The event table's schema; default `public`.
    #[serde(default = "public")]
    pub destination_table_schema: String,
    /// The event table; default `weft_events`.
    #[serde(default = "events_table")]
    pub destination_table_name: String,
    /// Which actions are kept; default insert, update and delete.
    #[serde(default = "changes_only")]
    pub actions: ActionSet,
    /// Column-value filters, all of which must hold.
    #[serde(default)]
    pub filters: Vec<ColumnFilter>,
    /// A `filter` function (WASM) that decides which changes are kept.
    #[serde(default)]
    pub filter: Option<String>,
    /// Create the event table (and its indexes) when missing; default true.
    #[serde(default = "yes")]
    pub create_table: bool,
    /// Delete event rows committed longer ago than this (`90s`, `30m`,
    /// `12h`, `7d`); default: keep them forever.
    #[serde(default, deserialize_with = "retain_for")]
    pub retain_for: Option<Duration>,
}

impl ChangeRetentionConfig {
    /// The source table.
    pub fn source_table(&self) -> TableRef {
        TableRef {
            schema: self.source_table_schema.clone(),
            table: self.source_table_name.clone(),
        }
    }

    /// The event table.
    pub fn destination_table(&self) -> TableRef {
        TableRef {
            schema: self.destination_table_schema.clone(),
            table: self.destination_table_name.clone(),
        }
    }

    /// The sink that runs this change retention: the source table's
    /// changes, narrowed by actions, filters and filter function, appended
    /// to the event table by a `postgres` sink; `None` in a build without
    /// that sink type.
    pub fn sink<D: Destination>(&self) -> Option<SinkConfig<D>> {
        let destination = D::event_log(
            &self.destination_database,
            self.destination_table(),
            self.create_table,
        )?;
        Some(SinkConfig {
            account: None,
            name: self.name.clone(),
            database: Some(self.source_database.clone()),
            source: SourceConfig {
                include_tables: Some(vec![self.source_table()]),
                ..SourceConfig::default()
            },
            actions: self.actions,
            transform: None,
            filter: self.filter.clone(),
            routing: None,
            enrichment: None,
            max_retry_count: None,
            max_memory_mb: DEFAULT_MAX_MEMORY_MB,
            max_backlog_messages: None,
            load_shedding_policy: LoadSheddingPolicy::default(),
            quarantine_after_traps: DEFAULT_QUARANTINE_AFTER_TRAPS,
            function_instances: 1,
            truncate: TruncatePolicy::Skip,
            initial_backfill: None,
            column_filters: self.filters.clone(),
            destination,
        })
    }
}

fn public() -> String {
    "public".into()
}

fn events_table() -> String {
    "weft_events".into()
}

fn changes_only() -> ActionSet {
    [Action::Insert, Action::Update, Action::Delete]
        .into_iter()
        .collect()
}

fn yes() -> bool {
    true
}

/// Parses a duration like `90s`, `30m`, `12h` or `7d` (at least a second).
pub(crate) fn parse_age(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "{text:?} is not a duration; write a whole number with s, m, h or d, like 90s, 30m, 12h or 7d"
        )
    };
    let text = text.trim();
    let unit = text.chars().last().ok_or_else(bad)?;
    let seconds: u64 = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return Err(bad()),
    };
    let count: u64 = text[..text.len() - 1].parse().map_err(|_| bad())?;
    if count == 0 {
        return Err(format!(
            "{text:?} keeps nothing; give at least 1s, or remove retain_for to keep every row"
        ));
    }
    count
        .checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(bad)
}

fn retain_for<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_age(&text).map(Some).map_err(de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_take_a_unit_and_a_positive_count() {
        assert_eq!(parse_age("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_age("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_age("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(parse_age("7d"), Ok(Duration::from_secs(604_800)));
        for bad in ["", "7", "d", "1.5h", "-1d", "3w", "0s"] {
            assert!(parse_age(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sequins_layout_reads_with_defaults() {
        let entry: ChangeRetentionConfig = serde_yaml_ng::from_str(
            "name: orders-log\nsource_database: shop\nsource_table_name: orders\ndestination_database: shop\n\
             filters: [{column_name: status, operator: \"=\", comparison_value: paid}]\n",
        )
        .unwrap();
        assert_eq!(entry.source_table().to_string(), "public.orders");
        assert_eq!(entry.destination_table().to_string(), "public.weft_events");
        assert!(entry.actions.contains(Action::Delete));
        assert!(!entry.actions.contains(Action::Read));
        assert!(entry.create_table);
        assert_eq!(entry.retain_for, None);
        assert_eq!(entry.filters.len(), 1);
    }
}
