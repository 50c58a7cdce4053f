//! The configuration model: what a valid config file means, after
//! interpolation, parsing and validation. Field docs here are the config
//! reference; `docs/config.md` shows them with examples.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;
use serde::de::{self, Deserializer};

use super::bounds;
use weft_core::change::Action;

/// A source database: where to connect and which slot and publication to
/// stream from (`databases:` entries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseConfig {
    /// The name sinks use to refer to this database; also the
    /// `metadata.database_name` of its messages.
    pub name: String,
    /// The account that owns it (`accounts:`); none: the operator's.
    pub account: Option<String>,
    /// How to connect, from `url` or from `hostname`/`port`/`database`/
    /// `username`/`password`.
    pub connection: PgConnection,
    /// The replication slot to stream from.
    pub slot: SlotConfig,
    /// The publication that selects the tables to stream.
    pub publication: PublicationConfig,
    /// `heartbeat_interval_ms`: how often weft writes a heartbeat
    /// (`pg_logical_emit_message`) into the database so that its slot
    /// advances while nothing replicated changes and ingestion latency can be
    /// measured. Default 15000 (as Sequin); 0 turns heartbeats off.
    pub heartbeat_interval_ms: u64,
}

impl DatabaseConfig {
    /// Where and as whom to connect, whichever way the config spelled it.
    pub fn connection(&self) -> &PgConnection {
        &self.connection
    }

    /// The heartbeat interval, `None` when heartbeats are off.
    pub fn heartbeat_interval(&self) -> Option<std::time::Duration> {
        (self.heartbeat_interval_ms > 0)
            .then(|| std::time::Duration::from_millis(self.heartbeat_interval_ms))
    }
}

/// Connection parameters for one Postgres database.
#[derive(Clone, PartialEq, Eq)]
pub struct PgConnection {
    /// Host name, IP address, or a Unix socket directory (starting with `/`).
    pub host: String,
    /// TCP port; default 5432.
    pub port: u16,
    /// Role to connect as; default `postgres`.
    pub user: String,
    /// Password, if any.
    pub password: Option<String>,
    /// The Postgres database name (not the config's `name`).
    pub database: String,
    /// Query parameters of a `url` (such as `sslmode`), in order, decoded;
    /// empty when the connection was given as fields.
    pub params: Vec<(String, String)>,
}

impl PgConnection {
    /// The value of a URL query parameter such as `sslmode`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// `user@host:port/database`, without the password: for logs and errors.
impl fmt::Display for PgConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(
                f,
                "{}@[{}]:{}/{}",
                self.user, self.host, self.port, self.database
            )
        } else {
            write!(
                f,
                "{}@{}:{}/{}",
                self.user, self.host, self.port, self.database
            )
        }
    }
}

impl fmt::Debug for PgConnection {
    // Keeps the password out of logs and panic messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgConnection")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("database", &self.database)
            .field("params", &self.params)
            .finish()
    }
}

/// `slot:` of a database.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a slot mapping like {name: weft_slot}"
)]
pub struct SlotConfig {
    /// The logical replication slot's name: 1 to 63 lowercase letters,
    /// digits or `_`.
    #[serde(deserialize_with = "bounds::slot_name")]
    pub name: String,
    /// Create the slot (pgoutput) when it does not exist. An existing slot is
    /// used after checking that it is a logical pgoutput slot on this
    /// database. Default `false`: a missing slot is an error.
    #[serde(default)]
    pub create_if_not_exists: bool,
    /// Raise a `slot_lag` health warning on the slot while the WAL it
    /// retains (`sequin_replication_slot_size`) is above this many MiB
    /// (1 to 10,000,000). Default 1024.
    #[serde(
        default = "default_lag_warning_mb",
        deserialize_with = "bounds::in_range::<_, u64, 1, 10_000_000>"
    )]
    pub lag_warning_mb: u64,
}

/// Default `lag_warning_mb` of a slot: 1 GiB of retained WAL.
pub const DEFAULT_LAG_WARNING_MB: u64 = 1024;

fn default_lag_warning_mb() -> u64 {
    DEFAULT_LAG_WARNING_MB
}

/// `publication:` of a database.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a publication mapping like {name: weft_pub}"
)]
pub struct PublicationConfig {
    /// The publication's name (1 to 63 bytes).
    #[serde(deserialize_with = "bounds::publication_name")]
    pub name: String,
    /// Create the publication when it does not exist. Default `false`: a
    /// missing publication is an error.
    #[serde(default)]
    pub create_if_not_exists: bool,
}

/// A user function: a WebAssembly component and its settings
/// (`functions:` entries).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a function mapping with `name`, `type` and `file` (or `plugin`)"
)]
pub struct FunctionConfig {
    /// The name sinks use to refer to this function.
    #[serde(deserialize_with = "bounds::resource_name")]
    pub name: String,
    /// Free text for humans.
    #[serde(default)]
    pub description: Option<String>,
    /// What the function does, which decides where a sink may use it.
    #[serde(rename = "type")]
    pub kind: FunctionKind,
    /// The component file (`.wasm`). A relative path in the file is resolved
    /// against the config file's directory; after loading this is the
    /// resolved path, and the file exists. Empty when the function names a
    /// registered [`FunctionConfig::plugin`] instead, until the server
    /// resolves it to the registry's file.
    #[serde(default)]
    pub file: PathBuf,
    /// A plugin version registered through `POST /api/plugins`, written
    /// `name@version`, in place of `file`.
    #[serde(default)]
    pub plugin: Option<super::plugin_registry::PluginRef>,
    /// The account that owns it (`accounts:`); none: the operator's.
    #[serde(default)]
    pub account: Option<String>,
    /// Settings handed to the component once, when it is instantiated.
    /// Values may be strings, numbers or booleans; numbers and booleans are
    /// passed as their text (quote a value to keep it exactly as written).
    #[serde(default, deserialize_with = "bounds::scalar_map")]
    pub config: BTreeMap<String, String>,
    /// Resource bounds for each instance and call.
    #[serde(default)]
    pub limits: FunctionLimits,
    /// Host capabilities the function may use; none by default. Only
    /// `enrichment` functions may be granted any.
    #[serde(default)]
    pub grants: FunctionGrants,
    /// Deterministic mode: the function's clocks and random bytes derive
    /// from the commit timestamp and LSN of the change it is called with, so
    /// replays give identical output. Default false.
    #[serde(default)]
    pub deterministic: bool,
}

/// `grants:` of a function: the host capabilities it may import.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a grants mapping, e.g. `{source_query: true}` or `{http: {allow_hosts: [api.example.com]}}`"
)]
pub struct FunctionGrants {
    /// A read-only, parameterised query on the sink's source database
    /// (`weft:plugin/source-query`): one `BEGIN READ ONLY` transaction per
    /// call, with the function's `timeout_ms` as statement timeout.
    #[serde(default)]
    pub source_query: bool,
    /// Outbound HTTP requests to the listed hosts only
    /// (`weft:plugin/outbound-http`).
    #[serde(default)]
    pub http: Option<HttpGrant>,
}

impl FunctionGrants {
    /// Whether any capability is granted.
    pub fn any(&self) -> bool {
        self.source_query || self.http.is_some()
    }
}

/// `grants.http:` of a function: where it may send HTTP requests.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an http grant, e.g. `{allow_hosts: [api.example.com, \"127.0.0.1:8080\"]}`"
)]
pub struct HttpGrant {
    /// The hosts requests may go to: `host` (any port) or `host:port` (that
    /// port only; IPv6 in brackets, `[::1]:8080`). Not empty.
    pub allow_hosts: Vec<String>,
}

/// The four kinds of function, as in Sequin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FunctionKind {
    /// Turns a message into the payload the sink sends.
    Transform,
    /// Decides whether a change reaches the sink.
    Filter,
    /// Chooses sink-specific keys (topic, subject, key, path...).
    Routing,
    /// Adds data under `metadata.enrichment`.
    Enrichment,
}

impl FunctionKind {
    /// The name used in config (`type:` and the sink's key).
    pub fn as_str(self) -> &'static str {
        match self {
            FunctionKind::Transform => "transform",
            FunctionKind::Filter => "filter",
            FunctionKind::Routing => "routing",
            FunctionKind::Enrichment => "enrichment",
        }
    }

    /// Every kind, in pipeline order.
    pub const ALL: [FunctionKind; 4] = [
        FunctionKind::Enrichment,
        FunctionKind::Filter,
        FunctionKind::Transform,
        FunctionKind::Routing,
    ];
}

impl fmt::Display for FunctionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `limits:` of a function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a limits mapping with `memory_mb`, `timeout_ms`, `recycle_after_calls` and/or `recycle_memory_mb`"
)]
pub struct FunctionLimits {
    /// Most linear memory one instance may grow to, in MiB (1 to 4096).
    /// Default 64.
    #[serde(
        default = "FunctionLimits::default_memory_mb",
        deserialize_with = "bounds::in_range::<_, u32, 1, 4096>"
    )]
    pub memory_mb: u32,
    /// Most wall-clock time one call into the function may take, in
    /// milliseconds (1 to 600000); a call that runs longer is interrupted
    /// and fails. Default 1000.
    #[serde(
        default = "FunctionLimits::default_timeout_ms",
        deserialize_with = "bounds::in_range::<_, u64, 1, 600_000>"
    )]
    pub timeout_ms: u64,
    /// Replace the instance with a fresh one after this many calls (1 to
    /// 10^9). Default: never.
    #[serde(
        default,
        deserialize_with = "bounds::opt_in_range::<_, u64, 1, 1_000_000_000>"
    )]
    pub recycle_after_calls: Option<u64>,
    /// Replace the instance with a fresh one after a call that left its
    /// memory above this many MiB (1 to 4096; keep it below `memory_mb`).
    /// Default: never.
    #[serde(default, deserialize_with = "bounds::opt_in_range::<_, u32, 1, 4096>")]
    pub recycle_memory_mb: Option<u32>,
}

impl FunctionLimits {
    /// Default `memory_mb`.
    pub const DEFAULT_MEMORY_MB: u32 = 64;
    /// Default `timeout_ms`.
    pub const DEFAULT_TIMEOUT_MS: u64 = 1000;

    fn default_memory_mb() -> u32 {
        Self::DEFAULT_MEMORY_MB
    }

    fn default_timeout_ms() -> u64 {
        Self::DEFAULT_TIMEOUT_MS
    }
}

impl Default for FunctionLimits {
    fn default() -> Self {
        FunctionLimits {
            memory_mb: Self::DEFAULT_MEMORY_MB,
            timeout_ms: Self::DEFAULT_TIMEOUT_MS,
            recycle_after_calls: None,
            recycle_memory_mb: None,
        }
    }
}

/// A sink: which changes of which database go where, through which
/// functions (`sinks:` entries).
///
/// `D` is the destination; loading first reads it as raw YAML and then
/// checks it per `type`, so that its errors name exact paths. Every sink a
/// loaded [`Config<D>`](super::Config) holds is a `SinkConfig<D>`, where `D`
/// is the sinks layer's [`Destination`](super::Destination).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a sink mapping with `name`, `database` (or `source: {webhook: NAME}`) and `destination`"
)]
pub struct SinkConfig<D> {
    /// The sink's name: the consumer name in messages and the `{name}` of
    /// its API routes.
    #[serde(deserialize_with = "bounds::resource_name")]
    pub name: String,
    /// The account that owns it (`accounts:`); none: the operator's.
    #[serde(default)]
    pub account: Option<String>,
    /// The `name` of the database whose changes this sink receives; `None`
    /// (and required to be) for a sink that takes a webhook source.
    #[serde(default)]
    pub database: Option<String>,
    /// Which tables' changes the sink receives (default all tables in the
    /// database's publication), or which webhook source's messages.
    #[serde(default)]
    pub source: SourceConfig,
    /// Which actions the sink receives; default all.
    #[serde(default)]
    pub actions: ActionSet,
    /// A `transform` function that shapes the payload.
    #[serde(default)]
    pub transform: Option<String>,
    /// A `filter` function that decides which changes pass.
    #[serde(default)]
    pub filter: Option<String>,
    /// A `routing` function that picks sink-specific keys.
    #[serde(default)]
    pub routing: Option<String>,
    /// An `enrichment` function that adds `metadata.enrichment`.
    #[serde(default)]
    pub enrichment: Option<String>,
    /// Retries of a failed message after its first attempt before it becomes
    /// a dead letter (push sinks such as `webhook`). Default unlimited, as in
    /// Sequin; 0 dead-letters on the first failure.
    #[serde(default)]
    pub max_retry_count: Option<u32>,
    /// Most payload bytes a push sink's delivery holds in memory at once, in
    /// MiB (1 to 65536). Default 128, as in Sequin. Messages beyond it wait
    /// in the store (on disk), never in memory; a single message bigger than
    /// this becomes a dead letter with that reason.
    #[serde(
        default = "default_max_memory_mb",
        deserialize_with = "bounds::in_range::<_, u32, 1, 65_536>"
    )]
    pub max_memory_mb: u32,
    /// Most undelivered messages the sink may hold in weft's store (1 to
    /// 10^9). Default unbounded: the store is on disk and the slot keeps
    /// advancing whatever the backlog. At the bound,
    /// `load_shedding_policy` decides what happens.
    #[serde(
        default,
        deserialize_with = "bounds::opt_in_range::<_, u64, 1, 1_000_000_000>"
    )]
    pub max_backlog_messages: Option<u64>,
    /// What happens when the backlog reaches `max_backlog_messages`.
    #[serde(default)]
    pub load_shedding_policy: LoadSheddingPolicy,
    /// Quarantine the sink when its functions trap (or time out, run out of
    /// memory, return bad output) on this many changes within a minute
    /// (0 to 1,000,000; 0 never quarantines). Default 10.
    #[serde(
        default = "default_quarantine_after_traps",
        deserialize_with = "bounds::in_range::<_, u32, 0, 1_000_000>"
    )]
    pub quarantine_after_traps: u32,
    /// How many instances of each of the sink's functions run side by side
    /// (1 to 8; default 1). With more than one, a batch is split by group:
    /// each instance takes the groups whose key hashes to it, so the
    /// changes of one row stay in order and the batch's calls use more than
    /// one core. Each instance has its function's `memory_mb` of its own;
    /// functions that keep state between calls see only their groups.
    #[serde(
        default = "default_function_instances",
        deserialize_with = "bounds::in_range::<_, u32, 1, 8>"
    )]
    pub function_instances: u32,
    /// What the sink gets for a TRUNCATE of one of its tables: nothing
    /// (`skip`, the default, as Sequin) or a `truncate` message per table
    /// (`deliver`).
    #[serde(default)]
    pub truncate: TruncatePolicy,
    /// Backfill these tables when the sink is created (its first start):
    /// `true` for every table the sink receives, or a list of
    /// `schema.table`. Default none.
    #[serde(default)]
    pub initial_backfill: Option<InitialBackfill>,
    /// Column-value filters every change must pass (from a change
    /// retention's `filters:`; sinks have no such key of their own).
    #[serde(skip)]
    pub column_filters: Vec<super::column_filter::ColumnFilter>,
    /// Where messages go; `type` selects the kind of destination.
    pub destination: D,
}

/// `initial_backfill:` of a sink.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged, expecting = "true, false, or a list of schema.table names")]
pub enum InitialBackfill {
    /// `true`: every table the sink receives; `false`: none.
    All(bool),
    /// These tables.
    Tables(Vec<TableRef>),
}

/// What a sink does when its backlog is full (Sequin's names).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(
    rename_all = "snake_case",
    expecting = "pause_on_full or discard_on_full"
)]
pub enum LoadSheddingPolicy {
    /// Stop reading the replication stream until the backlog drains below
    /// the bound: nothing is lost, and Postgres retains the WAL meanwhile.
    #[default]
    PauseOnFull,
    /// Discard the sink's new messages while the backlog is full; each
    /// discard is logged and counted. Other sinks are not affected.
    DiscardOnFull,
}

/// What a sink does with a TRUNCATE of a table it takes (`truncate:`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", expecting = "skip or deliver")]
pub enum TruncatePolicy {
    /// No message; a warning is logged (Sequin's messages have no truncate
    /// action, so its consumers see nothing new).
    #[default]
    Skip,
    /// One message with `action: "truncate"` per truncated table, in commit
    /// order among the table's changes (see `docs/replication.md`).
    Deliver,
}

/// Default `max_memory_mb` of a sink (Sequin's).
pub const DEFAULT_MAX_MEMORY_MB: u32 = 128;

fn default_max_memory_mb() -> u32 {
    DEFAULT_MAX_MEMORY_MB
}

/// Default `quarantine_after_traps` of a sink.
pub const DEFAULT_QUARANTINE_AFTER_TRAPS: u32 = 10;

fn default_quarantine_after_traps() -> u32 {
    DEFAULT_QUARANTINE_AFTER_TRAPS
}

fn default_function_instances() -> u32 {
    1
}

impl<D> SinkConfig<D> {
    /// The name of the function this sink uses for `kind`, if any.
    pub fn function(&self, kind: FunctionKind) -> Option<&str> {
        match kind {
            FunctionKind::Transform => self.transform.as_deref(),
            FunctionKind::Filter => self.filter.as_deref(),
            FunctionKind::Routing => self.routing.as_deref(),
            FunctionKind::Enrichment => self.enrichment.as_deref(),
        }
    }

    /// How many function instances the sink holds: `function_instances`
    /// of each function it uses.
    pub fn function_count(&self) -> usize {
        FunctionKind::ALL
            .iter()
            .filter(|kind| self.function(**kind).is_some())
            .count()
            * self.function_instances as usize
    }

    /// Whether a change of `action` to `schema.table` reaches this sink
    /// (before its filter function, if any).
    pub fn accepts(&self, schema: &str, table: &str, action: Action) -> bool {
        self.actions.contains(action) && self.source.includes(schema, table)
    }

    /// `metadata.database_name` of this sink's messages: its database's
    /// name, or [`weft_core::message::WEBHOOK_DATABASE_NAME`] for a sink that
    /// takes a webhook source.
    pub fn database_name(&self) -> &str {
        self.database
            .as_deref()
            .unwrap_or(weft_core::message::WEBHOOK_DATABASE_NAME)
    }

    /// Whether this sink takes the database named `database`'s changes.
    pub fn takes_database(&self, database: &str) -> bool {
        self.database.as_deref() == Some(database)
    }

    pub(crate) fn with_destination<E>(self, destination: E) -> SinkConfig<E> {
        SinkConfig {
            name: self.name,
            account: self.account,
            database: self.database,
            source: self.source,
            actions: self.actions,
            transform: self.transform,
            filter: self.filter,
            routing: self.routing,
            enrichment: self.enrichment,
            max_retry_count: self.max_retry_count,
            max_memory_mb: self.max_memory_mb,
            max_backlog_messages: self.max_backlog_messages,
            load_shedding_policy: self.load_shedding_policy,
            quarantine_after_traps: self.quarantine_after_traps,
            function_instances: self.function_instances,
            truncate: self.truncate,
            initial_backfill: self.initial_backfill,
            column_filters: self.column_filters,
            destination,
        }
    }
}

/// `source:` of a sink: which tables it receives, or which webhook source.
///
/// A table is received when it is not excluded (its schema is in
/// `exclude_schemas` or it is in `exclude_tables`) and either no include
/// list is given or it is included (its schema is in `include_schemas` or
/// it is in `include_tables`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a source mapping with include_/exclude_ lists, or `{webhook: NAME}`"
)]
pub struct SourceConfig {
    /// Schemas whose tables are received.
    #[serde(default, deserialize_with = "non_empty_list")]
    pub include_schemas: Option<Vec<String>>,
    /// Schemas whose tables are not received.
    #[serde(default, deserialize_with = "non_empty_list")]
    pub exclude_schemas: Option<Vec<String>>,
    /// Tables received, each `schema.table`.
    #[serde(default, deserialize_with = "non_empty_list")]
    pub include_tables: Option<Vec<TableRef>>,
    /// Tables not received, each `schema.table`.
    #[serde(default, deserialize_with = "non_empty_list")]
    pub exclude_tables: Option<Vec<TableRef>>,
    /// The `name` of the webhook source whose messages the sink receives,
    /// instead of a database's changes (then the lists above stay unset).
    #[serde(default)]
    pub webhook: Option<String>,
}

impl SourceConfig {
    /// Whether changes to `schema.table` reach the sink (never for a sink
    /// that takes a webhook source).
    pub fn includes(&self, schema: &str, table: &str) -> bool {
        if self.webhook.is_some() {
            return false;
        }
        let is_table = |t: &TableRef| t.schema == schema && t.table == table;
        let has = |list: &Option<Vec<String>>| list.iter().flatten().any(|s| s == schema);
        let excluded =
            has(&self.exclude_schemas) || self.exclude_tables.iter().flatten().any(is_table);
        let restricted = self.include_schemas.is_some() || self.include_tables.is_some();
        let included =
            has(&self.include_schemas) || self.include_tables.iter().flatten().any(is_table);
        !excluded && (!restricted || included)
    }
}

fn non_empty_list<'de, D, T>(deserializer: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    let list = Vec::<T>::deserialize(deserializer)?;
    if list.is_empty() {
        return Err(de::Error::custom(
            "must not be empty; remove the key to leave this filter off",
        ));
    }
    Ok(Some(list))
}

/// A table named `schema.table`. Names are taken exactly as written (Postgres
/// folds unquoted SQL names to lowercase, so `CREATE TABLE Orders` is
/// `public.orders`). A part containing `.` is written in double quotes:
/// `"my.schema".orders`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableRef {
    /// The schema.
    pub schema: String,
    /// The table.
    pub table: String,
}

/// A table name that is not `schema.table`; it explains the expected form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TableRefError(pub String);

impl TableRef {
    /// Parses `schema.table`; the error explains the expected form.
    pub fn parse(text: &str) -> Result<TableRef, TableRefError> {
        Self::parse_text(text).map_err(TableRefError)
    }

    fn parse_text(text: &str) -> Result<TableRef, String> {
        let bad = || {
            format!(
                "{text:?} is not a schema-qualified table name; write it as \"schema.table\", \
                 e.g. \"public.orders\""
            )
        };
        let (schema, rest) = identifier(text).ok_or_else(bad)?;
        let rest = rest.strip_prefix('.').ok_or_else(bad)?;
        let (table, rest) = identifier(rest).ok_or_else(bad)?;
        if !rest.is_empty() {
            return Err(bad());
        }
        for part in [&schema, &table] {
            if part.len() > 63 {
                return Err(format!(
                    "{text:?}: {part:?} is longer than the 63 bytes Postgres keeps"
                ));
            }
        }
        Ok(TableRef { schema, table })
    }
}

/// One identifier at the start of `text`: `"quoted"` (with `""` for a quote)
/// or a run without `.` and `"`. Returns it and what follows.
fn identifier(text: &str) -> Option<(String, &str)> {
    if let Some(quoted) = text.strip_prefix('"') {
        let mut name = String::new();
        let mut chars = quoted.char_indices();
        while let Some((i, c)) = chars.next() {
            if c != '"' {
                name.push(c);
            } else if quoted[i + 1..].starts_with('"') {
                name.push('"');
                chars.next();
            } else {
                return (!name.is_empty()).then_some((name, &quoted[i + 1..]));
            }
        }
        None
    } else {
        let end = text.find(['.', '"']).unwrap_or(text.len());
        let name = text[..end].trim();
        (!name.is_empty() && name == &text[..end]).then(|| (name.to_owned(), &text[end..]))
    }
}

impl fmt::Display for TableRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let part = |f: &mut fmt::Formatter<'_>, s: &str| {
            if s.contains(['.', '"']) {
                write!(f, "\"{}\"", s.replace('"', "\"\""))
            } else {
                f.write_str(s)
            }
        };
        part(f, &self.schema)?;
        f.write_str(".")?;
        part(f, &self.table)
    }
}

impl<'de> Deserialize<'de> for TableRef {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        TableRef::parse(&text).map_err(de::Error::custom)
    }
}

/// The actions a sink receives (`actions:`); default all four.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActionSet {
    insert: bool,
    update: bool,
    delete: bool,
    read: bool,
}

impl ActionSet {
    /// Every action.
    pub const ALL: ActionSet = ActionSet {
        insert: true,
        update: true,
        delete: true,
        read: true,
    };

    /// The actions in the set, in the order insert, update, delete, read.
    pub fn iter(&self) -> impl Iterator<Item = Action> + '_ {
        [Action::Insert, Action::Update, Action::Delete, Action::Read]
            .into_iter()
            .filter(|action| self.contains(*action))
    }

    /// Whether the sink receives `action`.
    pub fn contains(&self, action: Action) -> bool {
        match action {
            Action::Insert => self.insert,
            Action::Update => self.update,
            Action::Delete => self.delete,
            Action::Read => self.read,
        }
    }

    fn slot(&mut self, action: Action) -> &mut bool {
        match action {
            Action::Insert => &mut self.insert,
            Action::Update => &mut self.update,
            Action::Delete => &mut self.delete,
            Action::Read => &mut self.read,
        }
    }
}

impl Default for ActionSet {
    fn default() -> Self {
        ActionSet::ALL
    }
}

impl FromIterator<Action> for ActionSet {
    fn from_iter<I: IntoIterator<Item = Action>>(iter: I) -> Self {
        let mut set = ActionSet {
            insert: false,
            update: false,
            delete: false,
            read: false,
        };
        for action in iter {
            *set.slot(action) = true;
        }
        set
    }
}

impl<'de> Deserialize<'de> for ActionSet {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let actions = Vec::<Action>::deserialize(deserializer)?;
        if actions.is_empty() {
            return Err(de::Error::custom(
                "must list at least one of insert, update, delete, read; remove the key to receive all",
            ));
        }
        Ok(actions.into_iter().collect())
    }
}
