//! The filter kind: keep (`true`) or drop (`false`) each change.

use std::collections::BTreeMap;

use wasmtime::Store;
use wasmtime::component::{Component, Linker};

use super::bindings::filter as world;
use super::engine::{LoadedComponent, PluginEngine};
use super::instance::{GuestInstance, GuestState, InstanceOptions, WorldBindings};
use super::transform::function_error;
use super::{FunctionError, Limits, PluginError};
use crate::message::Message;

/// A loaded filter component with its live instance.
pub struct FilterFunction {
    instance: GuestInstance<world::Filter>,
}

impl std::fmt::Debug for FilterFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FilterFunction")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

impl FilterFunction {
    pub(crate) fn new(
        engine: PluginEngine,
        name: &str,
        loaded: LoadedComponent,
        config: &BTreeMap<String, String>,
        limits: &Limits,
    ) -> Result<Self, PluginError> {
        Ok(FilterFunction {
            instance: GuestInstance::new(
                engine,
                name,
                loaded,
                config,
                limits,
                InstanceOptions::default(),
            )?,
        })
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        self.instance.plugin()
    }

    /// How many instances were recycled so far (after `recycle_after_calls`
    /// calls or past `recycle_memory_bytes`), not counting failed ones.
    pub fn recycled_instances(&self) -> u64 {
        self.instance.recycled()
    }

    /// Filters a batch: `Ok(true)` keeps a message, `Ok(false)` drops it; one
    /// outcome per message, in order. Blocks; call it from `spawn_blocking` or a plain thread,
    /// never on an async worker thread: WASI output from the guest enters the
    /// ambient tokio runtime with `block_on`.
    pub fn filter(
        &mut self,
        batch: &[Message],
    ) -> Result<Vec<Result<bool, FunctionError>>, PluginError> {
        let outcomes = self
            .instance
            .call_batch(batch, |bindings, store, context, changes| {
                bindings.call_filter(store, context, changes)
            })?;
        Ok(outcomes
            .into_iter()
            .map(|outcome| outcome.map_err(function_error))
            .collect())
    }
}

impl WorldBindings for world::Filter {
    const KIND: &'static str = "filter";

    type Pre = world::FilterPre<GuestState>;

    fn pre(linker: &Linker<GuestState>, component: &Component) -> wasmtime::Result<Self::Pre> {
        world::FilterPre::new(linker.instantiate_pre(component)?)
    }

    fn instantiate(pre: &Self::Pre, store: &mut Store<GuestState>) -> wasmtime::Result<Self> {
        pre.instantiate(store)
    }

    fn init(
        &self,
        store: &mut Store<GuestState>,
        config: &[(&str, &str)],
    ) -> wasmtime::Result<Result<(), String>> {
        self.call_init(store, config)
    }
}
