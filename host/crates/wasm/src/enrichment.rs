//! The enrichment kind: extra JSON per change, which lands in the message's
//! `metadata.enrichment`. Enrichment functions are the only kind that may be
//! granted capabilities (see [`super::source_query`] and
//! [`super::outbound_http`]).

use std::collections::BTreeMap;
use std::path::Path;

use super::bindings::enrichment as world;
use super::engine::PluginEngine;
use super::instance::InstanceOptions;
use super::instance::guest_function;
use super::limits::{MAX_OUTPUT_BYTES, output_too_big};
use super::outbound_http::{self, OutboundHttp};
use super::source_query::{self, SourceQuery};
use super::transform::function_error;
use super::{FunctionError, Limits, PluginError};
use weft_core::message::Message;

/// The host capabilities granted to one enrichment function; none by
/// default.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    /// `weft:plugin/source-query`: read-only queries on the source database.
    pub source_query: Option<SourceQuery>,
    /// `weft:plugin/outbound-http`: HTTP requests to the allowed hosts.
    pub http: Option<OutboundHttp>,
}

impl Grants {
    /// The full names of the imports these grants allow.
    pub(crate) fn imports(&self) -> Vec<&'static str> {
        let mut imports = Vec::new();
        if self.source_query.is_some() {
            imports.push(source_query::IMPORT_NAME);
        }
        if self.http.is_some() {
            imports.push(outbound_http::IMPORT_NAME);
        }
        imports
    }
}

guest_function!(
    /// A loaded enrichment component with its live instance.
    EnrichmentFunction,
    world::Enrichment,
    EnrichmentPre,
    "enrichment"
);

impl EnrichmentFunction {
    /// Enriches a batch: per message, the JSON for `metadata.enrichment`
    /// (`None`: no enrichment) or an error, in order. Blocks, also on the
    /// granted capabilities (source query, HTTP); call it from `spawn_blocking` or a plain
    /// thread, never on an async worker thread.
    pub fn enrich(
        &mut self,
        batch: &[Message],
    ) -> Result<Vec<Result<Option<serde_json::Value>, FunctionError>>, PluginError> {
        let outcomes = self
            .instance
            .call_batch(batch, |bindings, store, context, changes| {
                bindings.call_enrich(store, context, changes)
            })?;
        outcomes
            .into_iter()
            .enumerate()
            .map(|(index, outcome)| match outcome {
                Ok(None) => Ok(Ok(None)),
                Ok(Some(text)) if text.len() > MAX_OUTPUT_BYTES => {
                    Ok(Err(output_too_big(text.len())))
                }
                Ok(Some(text)) => serde_json::from_str(&text)
                    .map(|value| Ok(Some(value)))
                    .map_err(|e| PluginError::InvalidJson {
                        plugin: self.name().to_string(),
                        index,
                        message: e.to_string(),
                    }),
                Err(error) => Ok(Err(function_error(error))),
            })
            .collect()
    }
}

impl PluginEngine {
    /// Loads the enrichment component at `wasm_path` as `name`, granting it
    /// the capabilities in `grants`; see [`PluginEngine::load_transform`]. A
    /// component that imports a capability it is not granted is refused with
    /// [`PluginError::Ungranted`].
    pub fn load_enrichment(
        &self,
        name: &str,
        wasm_path: &Path,
        config: &BTreeMap<String, String>,
        limits: &Limits,
        grants: Grants,
    ) -> Result<EnrichmentFunction, PluginError> {
        let loaded =
            self.load_component(name, wasm_path, limits, "enrichment", &grants.imports())?;
        let options = InstanceOptions {
            source_query: grants.source_query,
            outbound_http: grants.http,
        };
        EnrichmentFunction::new(self.clone(), name, loaded, config, limits, options)
    }
}
