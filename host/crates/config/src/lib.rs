//! The sequin.yml-style configuration: model, `${VAR:-default}` interpolation
//! and validation with precise errors.
//!
//! This layer sits on `weft-core` alone. It owns the document's shape and
//! every rule that spans its entries; it does not know the sink types. A
//! loaded config is a [`Config<D>`], where `D` is the [`Destination`] enum
//! of every sink type, which the sinks layer defines and names (see
//! `weft_sinks::config`). It may not import any weft crate but
//! `weft-core`.
//!
//! Loading runs in stages, each reporting problems by document path
//! (`sinks[0].destination.type`) and, where known, line and column:
//!
//! 1. `interpolate` substitutes environment variables in the raw text and
//!    reports every unset one.
//! 2. serde reads the text into the document shape (`document`), with
//!    `deny_unknown_fields` at every level; `serde_path_to_error` supplies the
//!    path and serde_yaml_ng the position. serde stops at the first problem.
//! 3. `validate` checks what spans fields and entries — the connection
//!    form, each destination by its `type`, unique names, references between
//!    sinks, databases and functions, component files — and reports all of
//!    them, located in the text by `locate`.

pub mod account;
pub mod api_token;
pub mod bounds;
pub mod change_retention;
pub mod column_filter;
pub mod destination;
mod document;
mod egress;
mod error;
pub mod export;
pub mod hosts;
mod http_endpoint;
mod interpolate;
mod locate;
pub mod model;
pub mod path;
mod pg_url;
pub mod plan;
pub mod plugin_registry;
mod validate;
mod webhook_source;

use std::path::{Path, PathBuf};

pub use destination::{DeliveryConfig, Destination};
pub use error::{ConfigError, ConfigIssue, Location};
pub use http_endpoint::HttpEndpointConfig;
pub use model::{
    ActionSet, DatabaseConfig, FunctionConfig, FunctionGrants, FunctionKind, FunctionLimits,
    HttpGrant, InitialBackfill, LoadSheddingPolicy, PgConnection, PublicationConfig, SinkConfig,
    SlotConfig, SourceConfig, TableRef, TruncatePolicy,
};
pub use pg_url::UrlError;
pub use webhook_source::{
    DEFAULT_IDEMPOTENCY_KEY_RETENTION_MS, DEFAULT_MAX_BODY_BYTES, WebhookAuth, WebhookSourceConfig,
};

use document::Document;
use path::DocPath;

/// A loaded, valid configuration: every reference resolves, every name is
/// unique, every component file exists. `D` is the sinks' destination
/// type (see [`Destination`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Config<D> {
    /// Source databases (`databases:`).
    pub databases: Vec<DatabaseConfig>,
    /// User functions (`functions:`).
    pub functions: Vec<FunctionConfig>,
    /// Sinks (`sinks:`).
    pub sinks: Vec<SinkConfig<D>>,
    /// HTTP endpoints webhook sinks deliver to (`http_endpoints:`).
    pub http_endpoints: Vec<HttpEndpointConfig>,
    /// Endpoints that accept messages POSTed to weft (`webhook_sources:`).
    pub webhook_sources: Vec<WebhookSourceConfig>,
    /// Event logs of source tables (`change_retentions:`); each also runs
    /// as the `postgres` sink of its name in [`Config::sinks`].
    pub change_retentions: Vec<change_retention::ChangeRetentionConfig>,
    /// Bearer tokens the HTTP API accepts (`api_tokens:`); none leaves it open.
    pub api_tokens: Vec<api_token::ApiTokenConfig>,
    /// What plugins uploaded through the API may be (`plugin_registry:`).
    pub plugin_registry: plugin_registry::PluginRegistryConfig,
    /// Tenants (`accounts:`).
    pub accounts: Vec<account::AccountConfig>,
}

impl<D> Default for Config<D> {
    fn default() -> Self {
        Config {
            databases: Vec::new(),
            functions: Vec::new(),
            sinks: Vec::new(),
            http_endpoints: Vec::new(),
            webhook_sources: Vec::new(),
            change_retentions: Vec::new(),
            api_tokens: Vec::new(),
            plugin_registry: plugin_registry::PluginRegistryConfig::default(),
            accounts: Vec::new(),
        }
    }
}

impl<D: Destination> Config<D> {
    /// Reads, interpolates (from the process environment) and validates the
    /// config file at `path`. Relative component paths resolve against the
    /// file's directory. Errors name the file on every line.
    pub fn load(path: &Path) -> Result<Config<D>, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let base_dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
            _ => PathBuf::from("."),
        };
        let base_dir = std::path::absolute(&base_dir).unwrap_or(base_dir);
        Config::from_yaml(&text, &base_dir, &|name| std::env::var(name).ok())
            .map_err(|error| error.in_file(path.to_owned()))
    }

    /// Interpolates `text` with `env` (which returns a variable's value, or
    /// `None` when unset), parses and validates it. Relative component paths
    /// resolve against `base_dir`.
    pub fn from_yaml(
        text: &str,
        base_dir: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config<D>, ConfigError> {
        let text = interpolate::interpolate(text, env).map_err(ConfigError::invalid)?;
        let document = parse(&text)?;
        validate::resolve(document, base_dir).map_err(|problems| {
            ConfigError::invalid(
                problems
                    .into_iter()
                    .map(|problem| {
                        let location = locate::locate(&text, &problem.path);
                        ConfigIssue::at(&problem.path, problem.message).with_location(location)
                    })
                    .collect(),
            )
        })
    }
}

impl<D> Config<D> {
    /// The account named `name`.
    pub fn account(&self, name: &str) -> Option<&account::AccountConfig> {
        self.accounts.iter().find(|a| a.name == name)
    }

    /// The CPU share (`limits.plugin_cpu_percent`) of the account named
    /// `account`, if it has one.
    pub fn plugin_cpu_percent(&self, account: Option<&str>) -> Option<u32> {
        self.account(account?)?.limits.plugin_cpu_percent
    }

    /// The database named `name`.
    pub fn database(&self, name: &str) -> Option<&DatabaseConfig> {
        self.databases.iter().find(|d| d.name == name)
    }

    /// The function named `name`.
    pub fn function(&self, name: &str) -> Option<&FunctionConfig> {
        self.functions.iter().find(|f| f.name == name)
    }

    /// The HTTP endpoint named `name`.
    pub fn http_endpoint(&self, name: &str) -> Option<&HttpEndpointConfig> {
        self.http_endpoints.iter().find(|e| e.name == name)
    }

    /// The sink named `name`.
    pub fn sink(&self, name: &str) -> Option<&SinkConfig<D>> {
        self.sinks.iter().find(|s| s.name == name)
    }

    /// The sinks that stream from the database named `database`.
    pub fn sinks_of<'a>(
        &'a self,
        database: &'a str,
    ) -> impl Iterator<Item = &'a SinkConfig<D>> + 'a {
        self.sinks
            .iter()
            .filter(move |s| s.takes_database(database))
    }

    /// The webhook source named `name`.
    pub fn webhook_source(&self, name: &str) -> Option<&WebhookSourceConfig> {
        self.webhook_sources.iter().find(|w| w.name == name)
    }

    /// The sinks that take the webhook source named `source`.
    pub fn sinks_of_webhook<'a>(
        &'a self,
        source: &'a str,
    ) -> impl Iterator<Item = &'a SinkConfig<D>> + 'a {
        self.sinks
            .iter()
            .filter(move |s| s.source.webhook.as_deref() == Some(source))
    }
}

/// The first pass: YAML text to document shape.
fn parse(text: &str) -> Result<Document, ConfigError> {
    if is_blank(text) {
        return Ok(Document::default());
    }
    let deserializer = serde_yaml_ng::Deserializer::from_str(text);
    serde_path_to_error::deserialize(deserializer).map_err(|error| {
        let path = DocPath::from_tracked(error.path());
        let inner = error.into_inner();
        let parser_location = inner.location().map(|l| Location {
            line: l.line(),
            column: l.column(),
        });
        let mut message = bare_message(&inner, parser_location, &path.to_string());
        if let [path::Step::Key(key)] = path.steps()
            && SEQUIN_ONLY_SECTIONS.contains(&key.as_str())
        {
            message.push_str(&format!(
                " (`{key}` is a sequin.yml section that weft does not support yet)"
            ));
        }
        // serde_yaml_ng stamps the node it was reading, which for checks made
        // after reading a value is the enclosing mapping; the tracked path is
        // exact, so locate it when the text parses that far.
        let location = match path.steps() {
            [] => parser_location,
            _ => locate::locate(text, &path).or(parser_location),
        };
        ConfigError::invalid(vec![
            ConfigIssue::at(&path, message).with_location(location),
        ])
    })
}

/// Top-level sections of sequin.yml that weft does not have (yet).
const SEQUIN_ONLY_SECTIONS: &[&str] = &["account", "users", "transforms"];

/// Whether the text holds no YAML content at all.
fn is_blank(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .all(|line| line.is_empty() || line.starts_with('#') || line == "---")
}

/// serde_yaml_ng's message without the path it prefixes and the position it
/// appends, both of which the issue carries separately. Its path is that of
/// the node being read, so an ancestor of (or equal to) `tracked`.
fn bare_message(error: &serde_yaml_ng::Error, location: Option<Location>, tracked: &str) -> String {
    let full = error.to_string();
    let mut message = full.as_str();
    if let Some(Location { line, column }) = location {
        message = message
            .strip_suffix(&format!(" at line {line} column {column}"))
            .unwrap_or(message);
    }
    if let Some((prefix, rest)) = message.split_once(": ") {
        let is_ancestor = tracked
            .strip_prefix(prefix)
            .is_some_and(|tail| tail.is_empty() || tail.starts_with(['.', '[']));
        if is_ancestor {
            message = rest;
        }
    }
    message.to_owned()
}
