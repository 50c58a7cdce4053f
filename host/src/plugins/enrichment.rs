//! The enrichment kind: extra JSON per change, which lands in the message's
//! `metadata.enrichment`. Enrichment functions are the only kind that may be
//! granted capabilities (see [`super::source_query`] and
//! [`super::outbound_http`]).

use std::collections::BTreeMap;

use wasmtime::Store;
use wasmtime::component::{Component, Linker};

use super::bindings::enrichment as world;
use super::engine::{LoadedComponent, PluginEngine};
use super::instance::{GuestInstance, GuestState, InstanceOptions, WorldBindings};
use super::limits::{MAX_OUTPUT_BYTES, output_too_big};
use super::outbound_http::{self, OutboundHttp};
use super::source_query::{self, SourceQuery};
use super::transform::function_error;
use super::{FunctionError, Limits, PluginError};
use crate::message::Message;

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

/// A loaded enrichment component with its live instance.
pub struct EnrichmentFunction {
    instance: GuestInstance<world::Enrichment>,
}

impl std::fmt::Debug for EnrichmentFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnrichmentFunction")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

impl EnrichmentFunction {
    pub(crate) fn new(
        engine: PluginEngine,
        name: &str,
        loaded: LoadedComponent,
        config: &BTreeMap<String, String>,
        limits: &Limits,
        grants: Grants,
    ) -> Result<Self, PluginError> {
        Ok(EnrichmentFunction {
            instance: GuestInstance::new(
                engine,
                name,
                loaded,
                config,
                limits,
                InstanceOptions {
                    source_query: grants.source_query,
                    outbound_http: grants.http,
                },
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

impl WorldBindings for world::Enrichment {
    const KIND: &'static str = "enrichment";

    type Pre = world::EnrichmentPre<GuestState>;

    fn pre(linker: &Linker<GuestState>, component: &Component) -> wasmtime::Result<Self::Pre> {
        world::EnrichmentPre::new(linker.instantiate_pre(component)?)
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
