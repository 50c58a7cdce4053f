//! The transform kind: one payload per change.

use std::collections::BTreeMap;
use std::path::Path;

use super::bindings::{transform as world, types};
use super::engine::PluginEngine;
use super::instance::InstanceOptions;
use super::instance::guest_function;
use super::limits::{MAX_OUTPUT_BYTES, output_too_big};
use super::{FunctionError, Limits, PluginError};
use weft_core::message::Message;
use weft_core::payload::Payload;

guest_function!(
    /// A loaded transform component with its live instance.
    TransformFunction,
    world::Transform,
    TransformPre,
    "transform"
);

impl TransformFunction {
    /// Transforms a batch: one outcome per message, in order. Blocks for up
    /// to the call timeout; call it from `spawn_blocking` or a plain thread,
    /// never on an async worker thread: WASI output from the guest enters the
    /// ambient tokio runtime with `block_on`.
    pub fn transform(
        &mut self,
        batch: &[Message],
    ) -> Result<Vec<Result<Payload, FunctionError>>, PluginError> {
        let outcomes = self
            .instance
            .call_batch(batch, |bindings, store, context, changes| {
                bindings.call_transform(store, context, changes)
            })?;
        outcomes
            .into_iter()
            .enumerate()
            .map(|(index, outcome)| match outcome {
                Ok(types::Payload::Json(text)) if text.len() > MAX_OUTPUT_BYTES => {
                    Ok(Err(output_too_big(text.len())))
                }
                Ok(types::Payload::Bytes(bytes)) if bytes.data.len() > MAX_OUTPUT_BYTES => {
                    Ok(Err(output_too_big(bytes.data.len())))
                }
                Ok(types::Payload::Json(text)) => serde_json::from_str(&text)
                    .map(|v| Ok(Payload::Json(v)))
                    .map_err(|e| PluginError::InvalidJson {
                        plugin: self.name().to_string(),
                        index,
                        message: e.to_string(),
                    }),
                Ok(types::Payload::Bytes(bytes)) => Ok(Ok(Payload::Bytes {
                    content_type: bytes.content_type,
                    data: bytes.data,
                })),
                Err(error) => Ok(Err(function_error(error))),
            })
            .collect()
    }
}

pub(crate) fn function_error(error: types::FunctionError) -> FunctionError {
    match error {
        types::FunctionError::Permanent(reason) => FunctionError::Permanent(reason),
        types::FunctionError::Transient(reason) => FunctionError::Transient(reason),
    }
}

impl PluginEngine {
    /// Loads the transform component at `wasm_path` as `name`, checks that it
    /// implements the `transform` world, creates an instance and calls its
    /// `init` with `config`.
    pub fn load_transform(
        &self,
        name: &str,
        wasm_path: &Path,
        config: &BTreeMap<String, String>,
        limits: &Limits,
    ) -> Result<TransformFunction, PluginError> {
        let loaded = self.load_component(name, wasm_path, limits, "transform", &[])?;
        let options = InstanceOptions::default();
        TransformFunction::new(self.clone(), name, loaded, config, limits, options)
    }
}
