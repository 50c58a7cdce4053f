//! `accounts:`: tenants sharing one weft. Every resource may name the
//! `account` that owns it (none: the operator's, managed by admin tokens
//! only); an API token of an account sees and changes only that account's
//! resources. An account's limits bound what its functions and sinks may
//! take, and its `allow_hosts` the hosts they may connect to; both are
//! checked when the config loads.

use serde::Deserialize;

use super::bounds;
use super::plugin_registry::Capability;

/// One account.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an account mapping like {name: acme, limits: {max_sinks: 10}}"
)]
pub struct AccountConfig {
    /// The name resources and tokens name in their `account`.
    #[serde(deserialize_with = "bounds::resource_name")]
    pub name: String,
    /// What the account's resources may take.
    #[serde(default)]
    pub limits: AccountLimits,
    /// The host capabilities its functions may be granted and its uploaded
    /// plugins may import. Default none.
    #[serde(default)]
    pub allow_capabilities: Vec<Capability>,
    /// The only hosts (`host` or `host:port`) its databases, HTTP
    /// endpoints, sink destinations and functions' HTTP grants may connect
    /// to (the config's `egress` checks). Unset: any host.
    #[serde(default)]
    pub allow_hosts: Option<Vec<String>>,
    /// Whether its HTTP requests (webhook sinks, functions' outbound HTTP)
    /// may only reach public addresses, checked on the resolved addresses
    /// at each connection (`weft_wasm::http_egress`). Default false.
    #[serde(default)]
    pub deny_internal_http: bool,
}

/// `limits:` of an account; each unset means unbounded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountLimits {
    /// Most sinks the account may have.
    #[serde(
        default,
        deserialize_with = "bounds::opt_in_range::<_, u32, 0, 1_000_000>"
    )]
    pub max_sinks: Option<u32>,
    /// Most memory one of its function instances may be given
    /// (`limits.memory_mb` of each function), in MiB.
    #[serde(default, deserialize_with = "bounds::opt_in_range::<_, u32, 1, 4096>")]
    pub plugin_memory_mb: Option<u32>,
    /// Most CPU time one call into its functions may be given
    /// (`limits.timeout_ms` of each function), in ms.
    #[serde(
        default,
        deserialize_with = "bounds::opt_in_range::<_, u64, 1, 600_000>"
    )]
    pub plugin_timeout_ms: Option<u64>,
    /// Most function instances its sinks may hold at once: a sink's
    /// `function_instances` for each function it uses.
    #[serde(
        default,
        deserialize_with = "bounds::opt_in_range::<_, u32, 0, 100_000>"
    )]
    pub max_plugin_instances: Option<u32>,
    /// Most of one core its functions' guests may use over time, together,
    /// in percent (50: half a core; 200: two cores). Calls beyond it wait
    /// (`weft_wasm::CpuShare`).
    #[serde(default, deserialize_with = "bounds::opt_in_range::<_, u32, 1, 6400>")]
    pub plugin_cpu_percent: Option<u32>,
}
