//! The running functions, for the API: the plugin registry, the config the
//! pipelines run, and each sink's loaded function chain, so that a config
//! that changes only `functions:` entries (a new plugin version, a new
//! `config:`, new limits) is applied by swapping the loaded functions in
//! place instead of restarting the pipelines (see
//! [`crate::swap`]).
//!
//! A swap is two-phase: [`FunctionRuntime::prepare`] loads the new
//! functions for every sink that uses one, and fails without effect if any
//! does not load; [`FunctionRuntime::commit`] then puts them in, each sink
//! between two of its chain runs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use crate::shadow::{Shadow, ShadowReport};
use crate::swap::SwitchPoint;
use crate::{FunctionChain, LoadError};
use weft_sinks::config::plugin_registry::PluginRef;
use weft_sinks::config::{Config, FunctionConfig};
use weft_wasm::PluginEngine;
use weft_wasm::registry::PluginRegistry;

/// Why a candidate could not run in shadow.
#[derive(Debug, thiserror::Error)]
pub enum SwapError {
    /// No function of that name runs.
    #[error("no function named {0:?} runs")]
    NoSuchFunction(String),
    /// Only a transform can run in shadow.
    #[error("{name} is a {kind} function; only transforms can run in shadow")]
    NotATransform {
        /// The function.
        name: String,
        /// Its kind.
        kind: &'static str,
    },
    /// The candidate's plugin reference does not resolve: each problem
    /// with the index of the function it is about.
    #[error("{}", .0.iter().map(|(_, problem)| problem.as_str()).collect::<Vec<_>>().join("; "))]
    Unresolved(Vec<(usize, String)>),
    /// A sink that runs the function is not in the running config.
    #[error("sink {0} is not in the running config")]
    SinkNotRunning(String),
    /// A sink that runs the function has no transform.
    #[error("sink {0} has no transform")]
    NoTransform(String),
    /// The candidate does not load.
    #[error(transparent)]
    Load(#[from] LoadError),
}

/// The running functions. Cheap to clone; clones share the state.
#[derive(Clone)]
pub struct FunctionRuntime {
    registry: PluginRegistry,
    engine: PluginEngine,
    running: Arc<RwLock<Arc<Config>>>,
    chains: Arc<RwLock<BTreeMap<String, FunctionChain>>>,
    /// One apply at a time.
    applying: Arc<tokio::sync::Mutex<()>>,
    /// Per function, the candidate running in shadow, as requested.
    candidates: Arc<Mutex<BTreeMap<String, Candidate>>>,
    /// Per function, its `functions:` entry before the last promotion.
    promoted_from: Arc<Mutex<BTreeMap<String, serde_yaml_ng::Value>>>,
}

/// A candidate version of a transform, as the shadow request named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The registered plugin version.
    pub plugin: PluginRef,
    /// Its `config:`; `None` keeps the live function's.
    pub config: Option<BTreeMap<String, String>>,
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
            candidates: Arc::default(),
            promoted_from: Arc::default(),
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
    ///
    /// While a candidate of its transform runs in shadow (see
    /// [`Self::start_shadow`]), the candidate runs in shadow on this chain
    /// too: a sink created, updated or restarted meanwhile is compared
    /// like the others. Blocks while the candidate loads (on a tokio
    /// worker, whose other tasks move to another worker meanwhile).
    pub fn add_chain(&self, sink: &weft_sinks::config::SinkConfig, chain: FunctionChain) {
        self.chains
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(sink.name.clone(), chain.clone());
        let Some(function) = chain.transform.as_ref().map(|t| t.name.clone()) else {
            return;
        };
        let Some(requested) = self.candidate(&function) else {
            return;
        };
        let loaded = allowed_to_block(|| {
            self.with_candidate(&function, &requested)
                .and_then(|(config, label)| {
                    let shadow = self.load_shadow(&config, &function, &label, sink)?;
                    Ok((shadow, label))
                })
        });
        match loaded {
            Ok((shadow, label)) => {
                tracing::info!(sink = %sink.name, %function, candidate = %label, "transform candidate runs in shadow");
                chain.shadow.set(Some(shadow));
            }
            Err(problem) => tracing::warn!(sink = %sink.name, %function, %problem,
                "the transform candidate running in shadow could not load for this sink; it runs without it"),
        }
    }

    /// Forgets the chain of `sink` (deleted while weft runs).
    pub fn remove_chain(&self, sink: &str) {
        self.chains
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(sink);
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
    /// differently (or whose account changes `plugin_cpu_percent`, or, for
    /// one with an HTTP grant, `deny_internal_http`) and keeps its own
    /// entry, those functions from `config` (whose plugin references are
    /// resolved). Blocks while components compile. Fails, with nothing
    /// changed, on the first function that does not load.
    pub fn prepare(&self, config: Config) -> Result<PreparedSwap, LoadError> {
        let running = self.running();
        // A function with an HTTP grant also loads anew when its account's
        // deny_internal_http changes: its HTTP client holds the setting.
        let egress = |config: &Config, function: &FunctionConfig| {
            function.grants.http.as_ref().map(|_| {
                weft_wasm::http_egress::HttpEgress::of_account(config, function.account.as_deref())
            })
        };
        // And when its account's CPU share changes: the instances hold
        // the share (or none), and loading them anew sets the account's
        // shared debt to the new rate.
        let cpu_percent = |config: &Config, function: &FunctionConfig| {
            config.plugin_cpu_percent(function.account.as_deref())
        };
        let changed: Vec<String> = config
            .functions
            .iter()
            .filter(|new| {
                running
                    .function(&new.name)
                    .is_some_and(|old: &FunctionConfig| {
                        old != *new
                            || egress(&running, old) != egress(&config, new)
                            || cpu_percent(&running, old) != cpu_percent(&config, new)
                    })
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
            let uses_changed = weft_sinks::config::FunctionKind::ALL.iter().any(|kind| {
                sink.function(*kind)
                    .is_some_and(|name| changed.iter().any(|c| c == name))
            });
            // A sink whose own entry changes gets a whole new chain from
            // the new config (see `server::live_sinks`): nothing to swap.
            let replaced = running.sinks.iter().find(|s| s.name == sink.name) != Some(sink);
            if !uses_changed || replaced || !chains.contains_key(&sink.name) {
                continue;
            }
            let chain = crate::load_chain(&config, &self.engine, sink, |name| {
                changed.iter().any(|c| c == name)
            })?;
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
        let now = weft_store::now_ms();
        let chains = self
            .chains
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        for (sink, fresh) in prepared.fresh {
            let Some(chain) = chains.get(&sink) else {
                continue;
            };
            let switches = chain
                .steps()
                .filter(|(_, name)| prepared.changed.iter().any(|c| c == name))
                .filter_map(|(_, name)| prepared.config.function(name))
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
            .filter(|(_, chain)| chain.steps().any(|(_, name)| name == function))
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

impl FunctionRuntime {
    /// Runs `requested` (a registered version of the transform `function`,
    /// with the live config unless it gives one) in shadow on every sink
    /// using that transform, replacing any candidate there. Blocks while it
    /// loads. Answers the sinks.
    pub fn start_shadow(
        &self,
        function: &str,
        requested: Candidate,
    ) -> Result<Vec<String>, SwapError> {
        let (config, label) = self.with_candidate(function, &requested)?;
        let mut loaded = Vec::new();
        for (sink, chain) in self.chains_transforming_with(function) {
            let sink_config = config
                .sinks
                .iter()
                .find(|s| s.name == sink)
                .ok_or_else(|| SwapError::SinkNotRunning(sink.clone()))?;
            let shadow = self.load_shadow(&config, function, &label, sink_config)?;
            loaded.push((sink, chain, shadow));
        }
        let sinks = loaded.iter().map(|(sink, _, _)| sink.clone()).collect();
        for (sink, chain, shadow) in loaded {
            tracing::info!(%sink, %function, candidate = %label, "transform candidate runs in shadow");
            chain.shadow.set(Some(shadow));
        }
        lock(&self.candidates).insert(function.to_string(), requested);
        Ok(sinks)
    }

    /// The running config with `requested` in place of the transform
    /// `function`, plugin references resolved, and what runs as it.
    fn with_candidate(
        &self,
        function: &str,
        requested: &Candidate,
    ) -> Result<(Config, String), SwapError> {
        let running = self.running();
        let live = running
            .function(function)
            .ok_or_else(|| SwapError::NoSuchFunction(function.to_string()))?;
        if live.kind != weft_sinks::config::FunctionKind::Transform {
            return Err(SwapError::NotATransform {
                name: live.name.clone(),
                kind: live.kind.as_str(),
            });
        }
        let mut candidate = live.clone();
        candidate.plugin = Some(requested.plugin.clone());
        candidate.file = Default::default();
        if let Some(config) = &requested.config {
            candidate.config = config.clone();
        }
        let label = describe(&candidate);
        let mut config = (*running).clone();
        if let Some(slot) = config.functions.iter_mut().find(|f| f.name == function) {
            *slot = candidate;
        }
        self.registry
            .resolve(&mut config)
            .map_err(SwapError::Unresolved)?;
        Ok((config, label))
    }

    /// The candidate transform `function` of `config`, labelled `label`,
    /// loaded to run in shadow on `sink`. Blocks while it loads.
    fn load_shadow(
        &self,
        config: &Config,
        function: &str,
        label: &str,
        sink: &weft_sinks::config::SinkConfig,
    ) -> Result<Shadow, SwapError> {
        // A shadow compares on one instance, however many the sink runs.
        let one = weft_sinks::config::SinkConfig {
            function_instances: 1,
            ..sink.clone()
        };
        let fresh = crate::load_chain(config, &self.engine, &one, |name| name == function)?;
        let transform = fresh
            .transform
            .and_then(|t| t.into_inner())
            .and_then(|instances| instances.into_iter().next())
            .ok_or_else(|| SwapError::NoTransform(sink.name.clone()))?;
        Ok(Shadow::new(label, transform))
    }

    /// Stops the shadow runs of `function`; answers their last reports.
    pub fn stop_shadow(&self, function: &str) -> BTreeMap<String, ShadowReport> {
        lock(&self.candidates).remove(function);
        let reports = self.shadow_reports(function);
        for (_, chain) in self.chains_transforming_with(function) {
            chain.shadow.set(None);
        }
        reports
    }

    /// The shadow reports of `function`, per sink running a candidate.
    pub fn shadow_reports(&self, function: &str) -> BTreeMap<String, ShadowReport> {
        self.chains_transforming_with(function)
            .into_iter()
            .filter_map(|(sink, chain)| Some((sink, chain.shadow.get()?.report())))
            .collect()
    }

    /// The candidate of `function` running in shadow, if any.
    pub fn candidate(&self, function: &str) -> Option<Candidate> {
        lock(&self.candidates).get(function).cloned()
    }

    /// Remembers `entry`, the `functions:` entry of `function` before a
    /// promotion, for a rollback.
    pub fn remember_promoted_from(&self, function: &str, entry: serde_yaml_ng::Value) {
        lock(&self.promoted_from).insert(function.to_string(), entry);
    }

    /// The entry of `function` before its last promotion, if any.
    pub fn promoted_from(&self, function: &str) -> Option<serde_yaml_ng::Value> {
        lock(&self.promoted_from).get(function).cloned()
    }

    /// Forgets the entry before the last promotion (after a rollback).
    pub fn forget_promoted_from(&self, function: &str) {
        lock(&self.promoted_from).remove(function);
    }

    /// The sinks whose chain's transform is `function`, with their chains.
    fn chains_transforming_with(&self, function: &str) -> Vec<(String, FunctionChain)> {
        self.chains
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .filter(|(_, chain)| chain.transform.as_ref().is_some_and(|t| t.name == function))
            .map(|(sink, chain)| (sink.clone(), chain.clone()))
            .collect()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What runs as `function`: its plugin (name@version) or component file.
pub fn describe(function: &FunctionConfig) -> String {
    match &function.plugin {
        Some(plugin) => plugin.to_string(),
        None => function.file.display().to_string(),
    }
}

/// Runs `work`, which blocks, so that it does not stall the tasks of the
/// tokio worker it may be called on: in place on a multi-thread runtime's
/// worker (its other tasks move to another worker), directly elsewhere.
fn allowed_to_block<T>(work: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}
