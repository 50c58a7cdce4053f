//! The document as written: the shape serde reads in the first pass, before
//! the checks that need more than one field (see `validate`).

use serde::Deserialize;
use serde_yaml_ng::Value;

use super::account::AccountConfig;
use super::api_token::ApiTokenConfig;
use super::bounds;
use super::change_retention::ChangeRetentionConfig;
use super::http_endpoint::HttpEndpointConfig;
use super::model::{FunctionConfig, PublicationConfig, SinkConfig, SlotConfig};
use super::plugin_registry::PluginRegistryConfig;
use super::webhook_source::WebhookSourceConfig;

/// A whole config file. Unknown top-level keys are errors that list these.
#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with keys `databases`, `functions`, `http_endpoints`, `sinks`, `webhook_sources`, `change_retentions`, `api_tokens`, `plugin_registry`, `accounts`"
)]
pub(crate) struct Document {
    #[serde(default)]
    pub(crate) databases: Vec<DatabaseDoc>,
    #[serde(default)]
    pub(crate) functions: Vec<FunctionConfig>,
    #[serde(default)]
    pub(crate) http_endpoints: Vec<HttpEndpointConfig>,
    /// Destinations stay raw until `validate` reads them per `type`.
    #[serde(default)]
    pub(crate) sinks: Vec<SinkConfig<Value>>,
    #[serde(default)]
    pub(crate) webhook_sources: Vec<WebhookSourceConfig>,
    #[serde(default)]
    pub(crate) change_retentions: Vec<ChangeRetentionConfig>,
    #[serde(default)]
    pub(crate) api_tokens: Vec<ApiTokenConfig>,
    #[serde(default)]
    pub(crate) plugin_registry: PluginRegistryConfig,
    #[serde(default)]
    pub(crate) accounts: Vec<AccountConfig>,
}

/// A `databases:` entry as written: either `url` or the separate fields.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a database mapping with `name`, a connection, `slot` and `publication`"
)]
pub(crate) struct DatabaseDoc {
    #[serde(deserialize_with = "bounds::resource_name")]
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) account: Option<String>,
    #[serde(default)]
    pub(crate) url: Option<String>,
    #[serde(default)]
    pub(crate) hostname: Option<String>,
    #[serde(default, deserialize_with = "bounds::opt_port")]
    pub(crate) port: Option<u16>,
    #[serde(default)]
    pub(crate) database: Option<String>,
    #[serde(default)]
    pub(crate) username: Option<String>,
    #[serde(default)]
    pub(crate) password: Option<String>,
    #[serde(default)]
    pub(crate) ssl: Option<bool>,
    #[serde(default)]
    pub(crate) sslmode: Option<String>,
    #[serde(default)]
    pub(crate) sslrootcert: Option<String>,
    pub(crate) slot: SlotConfig,
    pub(crate) publication: PublicationConfig,
    #[serde(
        default = "default_heartbeat_interval_ms",
        deserialize_with = "bounds::in_range::<_, u64, 0, 86_400_000>"
    )]
    pub(crate) heartbeat_interval_ms: u64,
}

fn default_heartbeat_interval_ms() -> u64 {
    15_000
}
