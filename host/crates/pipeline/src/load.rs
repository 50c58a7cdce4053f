//! Loading a sink's function chain from the config: each function's
//! component, sandbox limits and granted capabilities.

use crate::{FunctionChain, Named};
use weft_postgres::{PgConnectOptions, PgError};
use weft_sinks::config::{Config, FunctionConfig, SinkConfig};
use weft_wasm::http_egress::HttpEgress;
use weft_wasm::{
    AllowedHost, CpuShare, Grants, Limits, OutboundHttp, PluginEngine, PluginError, SourceQuery,
};

/// Why a sink's functions could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A function's component could not be loaded.
    #[error("function {function}: {source}")]
    Plugin {
        /// The function's name in the config.
        function: String,
        /// What went wrong.
        source: PluginError,
    },
    /// The database a function's source query reads could not be described.
    #[error("database {database}: {source}")]
    Source {
        /// The database's name in the config.
        database: String,
        /// What went wrong.
        source: PgError,
    },
}

/// Loads the functions `sink` uses whose name is `wanted`, as `config`
/// defines them; the other steps of the chain stay empty.
pub fn load_chain(
    config: &Config,
    engine: &PluginEngine,
    sink: &SinkConfig,
    wanted: impl Fn(&str) -> bool,
) -> Result<FunctionChain, LoadError> {
    let wanted = |name: &&String| wanted(name);
    let function = |name: &str| {
        config
            .function(name)
            .expect("config validation guarantees the function exists")
    };
    let failed = |function: &FunctionConfig| {
        let name = function.name.clone();
        move |source| LoadError::Plugin {
            function: name,
            source,
        }
    };
    let mut chain = FunctionChain {
        sink_type: sink.destination.type_name(),
        ..FunctionChain::default()
    };
    if let Some(name) = sink.enrichment.as_ref().filter(wanted) {
        let f = function(name);
        let limits = plugin_limits(config, f, &sink.name);
        let loaded = load_instances(sink.function_instances, || {
            let grants = Grants {
                source_query: if f.grants.source_query {
                    Some(source_query(config, sink, f)?)
                } else {
                    None
                },
                http: f
                    .grants
                    .http
                    .as_ref()
                    .map(|grant| outbound_http(config, f, grant))
                    .transpose()
                    .map_err(failed(f))?,
            };
            engine
                .load_enrichment(&f.name, &f.file, &f.config, &limits, grants)
                .map_err(failed(f))
        })?;
        chain.enrichment = Some(Named::of_instances(&f.name, loaded));
    }
    if let Some(name) = sink.filter.as_ref().filter(wanted) {
        let f = function(name);
        let limits = plugin_limits(config, f, &sink.name);
        let loaded = load_instances(sink.function_instances, || {
            engine.load_filter(&f.name, &f.file, &f.config, &limits)
        })
        .map_err(failed(f))?;
        chain.filter = Some(Named::of_instances(&f.name, loaded));
    }
    if let Some(name) = sink.transform.as_ref().filter(wanted) {
        let f = function(name);
        let limits = plugin_limits(config, f, &sink.name);
        let loaded = load_instances(sink.function_instances, || {
            engine.load_transform(&f.name, &f.file, &f.config, &limits)
        })
        .map_err(failed(f))?;
        chain.transform = Some(Named::of_instances(&f.name, loaded));
    }
    if let Some(name) = sink.routing.as_ref().filter(wanted) {
        let f = function(name);
        let limits = plugin_limits(config, f, &sink.name);
        let loaded = load_instances(sink.function_instances, || {
            engine.load_routing(&f.name, &f.file, &f.config, &limits)
        })
        .map_err(failed(f))?;
        chain.routing = Some(Named::of_instances(&f.name, loaded));
    }
    Ok(chain)
}

/// `count` instances of one function, each loaded on its own: its own
/// grants (a source-query connection, say) and state. The compiled
/// component is cached on disk, so each further one costs a cache read
/// and an instantiation.
fn load_instances<F, E>(count: u32, load: impl Fn() -> Result<F, E>) -> Result<Vec<F>, E> {
    (0..count.max(1)).map(|_| load()).collect()
}

/// The source-query capability of `function` on `sink`'s database: its own
/// connection, as the source's user, with the function's call timeout as
/// statement timeout.
fn source_query(
    config: &Config,
    sink: &SinkConfig,
    function: &FunctionConfig,
) -> Result<SourceQuery, LoadError> {
    let database = config
        .databases
        .iter()
        .find(|d| sink.takes_database(&d.name))
        .expect("config validation guarantees the database exists");
    let connection =
        PgConnectOptions::try_from(database.connection()).map_err(|source| LoadError::Source {
            database: database.name.clone(),
            source,
        })?;
    Ok(SourceQuery::new(
        &function.name,
        connection.query_config(),
        std::time::Duration::from_millis(function.limits.timeout_ms),
        tokio::runtime::Handle::current(),
    ))
}

/// The outbound-http capability of `function`, limited to its allow-list
/// and, if its account denies internal HTTP, to public addresses.
fn outbound_http(
    config: &Config,
    function: &FunctionConfig,
    grant: &weft_sinks::config::HttpGrant,
) -> Result<OutboundHttp, PluginError> {
    let allow = grant
        .allow_hosts
        .iter()
        .map(|entry| AllowedHost::parse(entry))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|reason| {
            // Config validation already refused bad entries.
            PluginError::Settings(format!("grants.http.allow_hosts: {reason}"))
        })?;
    let egress = HttpEgress::of_account(config, function.account.as_deref());
    OutboundHttp::new(
        &function.name,
        allow,
        egress,
        tokio::runtime::Handle::current(),
    )
    .map_err(PluginError::Settings)
}

/// Sets every account's CPU share back to its rate in `config`, the
/// config that runs: loading a proposed config's functions sets their
/// accounts' shares to its rates (see [`CpuShare::of_account`]), which a
/// refused apply must undo.
pub fn restore_cpu_shares(config: &Config) {
    for account in &config.accounts {
        if let Some(percent) = account.limits.plugin_cpu_percent {
            CpuShare::of_account(&account.name, percent);
        }
    }
}

/// The sandbox settings of a function serving `sink`, from its config and
/// its account's CPU share.
fn plugin_limits(config: &Config, function: &FunctionConfig, sink: &str) -> Limits {
    let limits = &function.limits;
    let account = function.account.as_deref();
    let cpu_share = config
        .plugin_cpu_percent(account)
        .zip(account)
        .map(|(percent, account)| CpuShare::of_account(account, percent));
    Limits {
        memory_bytes: limits.memory_mb as usize * 1024 * 1024,
        call_timeout: std::time::Duration::from_millis(limits.timeout_ms),
        recycle_after_calls: limits.recycle_after_calls,
        recycle_memory_bytes: limits.recycle_memory_mb.map(|mb| mb as usize * 1024 * 1024),
        deterministic: function.deterministic,
        sink: Some(sink.to_string()),
        cpu_share,
        ..Limits::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_apply_puts_the_running_cpu_share_back() {
        let running = Config::from_yaml(
            "accounts:\n  - {name: chains-share-test, limits: {plugin_cpu_percent: 50}}\n",
            std::path::Path::new("."),
            &|_| None,
        )
        .unwrap();
        // What a running function holds; loading a proposed config's
        // functions then set the account's share to the proposal's rate.
        let held = CpuShare::of_account("chains-share-test", 50);
        CpuShare::of_account("chains-share-test", 5);
        assert_eq!(held.cores(), 0.05);

        restore_cpu_shares(&running);
        assert_eq!(held.cores(), 0.5);
    }
}
