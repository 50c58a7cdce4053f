//! The routing kind: sink-specific destination keys per change.
//!
//! The guest returns a [`Route`] with the keys it sets; which keys a sink
//! accepts, and the rules on their values, live in
//! `weft_sinks::route`.

use std::collections::BTreeMap;
use std::path::Path;

use super::bindings::routing as world;
use super::engine::PluginEngine;
use super::instance::InstanceOptions;
use super::instance::guest_function;
use super::transform::function_error;
use super::{FunctionError, Limits, PluginError};
use weft_core::message::Message;
use weft_core::route::{KeyAction, Route};

impl From<world::Route> for Route {
    fn from(route: world::Route) -> Self {
        Route {
            topic: route.topic,
            message_key: route.message_key,
            subject: route.subject,
            headers: route.headers,
            key: route.key,
            action: route.action.map(|action| match action {
                world::KeyAction::Set => KeyAction::Set,
                world::KeyAction::Del => KeyAction::Del,
            }),
            expire_ms: route.expire_ms,
            stream_key: route.stream_key,
            method: route.method,
            endpoint_path: route.endpoint_path,
            exchange: route.exchange,
            routing_key: route.routing_key,
            message_id: route.message_id,
            table: route.table,
        }
    }
}

guest_function!(
    /// A loaded routing component with its live instance.
    RoutingFunction,
    world::Routing,
    RoutingPre,
    "routing"
);

impl RoutingFunction {
    /// Routes a batch: one [`Route`] (or error) per message, in order. The
    /// routes are not validated against a sink here; see
    /// `weft_sinks::route`. Blocks; call it from
    /// `spawn_blocking` or a plain thread, never on an async worker thread.
    pub fn route(
        &mut self,
        batch: &[Message],
    ) -> Result<Vec<Result<Route, FunctionError>>, PluginError> {
        let outcomes = self
            .instance
            .call_batch(batch, |bindings, store, context, changes| {
                bindings.call_route(store, context, changes)
            })?;
        Ok(outcomes
            .into_iter()
            .map(|outcome| outcome.map(Route::from).map_err(function_error))
            .collect())
    }
}

impl PluginEngine {
    /// Loads the routing component at `wasm_path` as `name`; see
    /// [`PluginEngine::load_transform`].
    pub fn load_routing(
        &self,
        name: &str,
        wasm_path: &Path,
        config: &BTreeMap<String, String>,
        limits: &Limits,
    ) -> Result<RoutingFunction, PluginError> {
        let loaded = self.load_component(name, wasm_path, limits, "routing", &[])?;
        let options = InstanceOptions::default();
        RoutingFunction::new(self.clone(), name, loaded, config, limits, options)
    }
}
