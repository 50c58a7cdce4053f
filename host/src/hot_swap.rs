//! The running functions, for the API: the plugin registry, the config the
//! pipelines run, and each sink's loaded function chain, so that a config
//! that changes only `functions:` entries (a new plugin version, a new
//! `config:`, new limits) is applied by swapping the loaded functions in
//! place instead of restarting the pipelines (see
//! [`crate::pipeline::swap`]).
//!
//! A swap is two-phase: [`FunctionRuntime::prepare`] loads the new
//! functions for every sink that uses one, and fails without effect if any
//! does not load; [`FunctionRuntime::commit`] then puts them in, each sink
//! between two of its chain runs.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use crate::config::{Config, FunctionConfig};
use crate::pipeline::FunctionChain;
use crate::pipeline::swap::SwitchPoint;
use crate::plugins::PluginEngine;
use crate::registry::PluginRegistry;

/// The running functions. Cheap to clone; clones share the state.
#[derive(Clone)]
pub struct FunctionRuntime {
    registry: PluginRegistry,
    engine: PluginEngine,
    running: Arc<RwLock<Arc<Config>>>,
    chains: Arc<RwLock<BTreeMap<String, FunctionChain>>>,
    /// One apply at a time.
    applying: Arc<tokio::sync::Mutex<()>>,
}

impl std::fmt::Debug for FunctionRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FunctionRuntime").finish_non_exhaustive()
    }
}

/// New functions loaded for a swap, not yet in use.
pub struct PreparedSwap {
    config: Config,
    /// The functions that change.
    changed: Vec<String>,
    /// Per sink using one of them, its chain loaded from the new config.
    fresh: Vec<(String, FunctionChain)>,
}

impl PreparedSwap {
    /// The sinks whose functions change.
    pub fn sinks(&self) -> Vec<String> {
        self.fresh.iter().map(|(sink, _)| sink.clone()).collect()
    }

    /// The functions that change.
    pub fn functions(&self) -> &[String] {
        &self.changed
    }
}

impl FunctionRuntime {
    /// The runtime of pipelines running `config` (its plugin references
    /// resolved) with functions loaded by `engine`.
    pub fn new(registry: PluginRegistry, engine: PluginEngine, config: Config) -> Self {
        FunctionRuntime {
            registry,
            engine,
            running: Arc::new(RwLock::new(Arc::new(config))),
            chains: Arc::default(),
            applying: Arc::default(),
        }
    }

    /// The plugin registry.
    pub fn registry(&self) -> &PluginRegistry {
        &self.registry
    }

    /// The engine functions load with.
    pub fn engine(&self) -> &PluginEngine {
        &self.engine
    }

    /// Registers the loaded chain of `sink`.
    pub fn add_chain(&self, sink: &str, chain: FunctionChain) {
        self.chains
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(sink.to_string(), chain);
    }

    /// The config the pipelines run, plugin references resolved.
    pub fn running(&self) -> Arc<Config> {
        Arc::clone(
            &self
                .running
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        )
    }

    /// Waits for other applies to finish; hold the guard until done.
    pub async fn apply_turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.applying.lock().await
    }

    /// Loads, for every running sink that uses a function `config` defines
    /// differently, that sink's chain from `config` (whose plugin
    /// references are resolved). Blocks while components compile. Fails,
    /// with nothing changed, on the first function that does not load.
    pub fn prepare(&self, config: Config) -> Result<PreparedSwap, String> {
        let running = self.running();
        let changed: Vec<String> = config
            .functions
            .iter()
            .filter(|new| {
                running
                    .function(&new.name)
                    .is_some_and(|old: &FunctionConfig| old != *new)
            })
            .map(|f| f.name.clone())
            .collect();
        let chains = self
            .chains
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        let mut fresh = Vec::new();
        for sink in &config.sinks {
            let uses_changed = crate::config::FunctionKind::ALL.iter().any(|kind| {
                sink.function(*kind)
                    .is_some_and(|name| changed.iter().any(|c| c == name))
            });
            if !uses_changed || !chains.contains_key(&sink.name) {
                continue;
            }
            let chain = crate::server::load_chain(&config, &self.engine, sink)
                .map_err(|error| error.to_string())?;
            fresh.push((sink.name.clone(), chain));
        }
        Ok(PreparedSwap {
            config,
            changed,
            fresh,
        })
    }

    /// Puts `prepared`'s functions in, each sink between two chain runs, and
    /// makes its config the running one.
    pub fn commit(&self, prepared: PreparedSwap) {
        let now = crate::store::now_ms();
        let chains = self
            .chains
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        for (sink, fresh) in prepared.fresh {
            let Some(chain) = chains.get(&sink) else {
                continue;
            };
            let switches = chain_functions(chain)
                .into_iter()
                .filter(|name| prepared.changed.contains(name))
                .filter_map(|name| prepared.config.function(&name))
                .map(|function| SwitchPoint {
                    function: function.name.clone(),
                    to: describe(function),
                    swapped_at: now,
                    first_change: None,
                })
                .collect::<Vec<_>>();
            for switch in &switches {
                tracing::info!(%sink, function = %switch.function, to = %switch.to, "function hot-swapped");
            }
            chain.swap_in(fresh, &prepared.changed, switches);
        }
        *self
            .running
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(prepared.config);
    }

    /// The sinks using `function` and their switch points for it, oldest
    /// first.
    pub fn switches(&self, function: &str) -> BTreeMap<String, Vec<SwitchPoint>> {
        self.chains
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .filter(|(_, chain)| chain_functions(chain).iter().any(|f| f == function))
            .map(|(sink, chain)| {
                let switches = chain
                    .swaps
                    .switches()
                    .into_iter()
                    .filter(|s| s.function == function)
                    .collect();
                (sink.clone(), switches)
            })
            .collect()
    }
}

/// What runs as `function`: its plugin (name@version) or component file.
pub fn describe(function: &FunctionConfig) -> String {
    match &function.plugin {
        Some(plugin) => plugin.to_string(),
        None => function.file.display().to_string(),
    }
}

/// The names of the functions in `chain`.
fn chain_functions(chain: &FunctionChain) -> Vec<String> {
    [
        chain.enrichment.as_ref().map(|f| f.name.clone()),
        chain.filter.as_ref().map(|f| f.name.clone()),
        chain.transform.as_ref().map(|f| f.name.clone()),
        chain.routing.as_ref().map(|f| f.name.clone()),
    ]
    .into_iter()
    .flatten()
    .collect()
}
