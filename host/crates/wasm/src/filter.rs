//! The filter kind: keep (`true`) or drop (`false`) each change.

use std::collections::BTreeMap;
use std::path::Path;

use super::bindings::filter as world;
use super::engine::PluginEngine;
use super::instance::InstanceOptions;
use super::instance::guest_function;
use super::transform::function_error;
use super::{FunctionError, Limits, PluginError};
use weft_core::message::Message;

guest_function!(
    /// A loaded filter component with its live instance.
    FilterFunction,
    world::Filter,
    FilterPre,
    "filter"
);

impl FilterFunction {
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

impl PluginEngine {
    /// Loads the filter component at `wasm_path` as `name`; see
    /// [`PluginEngine::load_transform`].
    pub fn load_filter(
        &self,
        name: &str,
        wasm_path: &Path,
        config: &BTreeMap<String, String>,
        limits: &Limits,
    ) -> Result<FilterFunction, PluginError> {
        let loaded = self.load_component(name, wasm_path, limits, "filter", &[])?;
        let options = InstanceOptions::default();
        FilterFunction::new(self.clone(), name, loaded, config, limits, options)
    }
}
