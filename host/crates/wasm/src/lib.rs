//! The WebAssembly function host: engine, sandbox limits and bindings to the
//! `weft:plugin` WIT package (`wit/` at the repository root), the plugin
//! registry ([`registry`]), and where HTTP clients may connect on an
//! account's behalf ([`http_egress`]).
//!
//! This layer sits on `weft-core`, `weft-config` and `weft-store`; it knows
//! nothing of sources, sinks or pipelines, which call functions through it.
//!
//! A user function is a WebAssembly component exporting one world of that
//! package. The host compiles it once (cached on disk by content hash),
//! pre-links it against a WASI context that grants nothing ambient, and keeps
//! one live instance per loaded function, reused across calls. Each call
//! takes a whole batch and returns one outcome per change, index-aligned.
//!
//! Why this shape:
//! * Calls are synchronous: a synchronous component call costs ~140 ns, an
//!   async one ~10x that. The pipeline calls from `spawn_blocking`.
//! * A trap, a timeout (epoch interruption) or a memory-cap hit fails the
//!   call as a whole with a [`PluginError`] naming the plugin and the reason,
//!   and the instance is discarded; the next call gets a fresh one. Nothing a
//!   guest does can take down the host.
//! * Per-change failures the guest reports itself are [`FunctionError`]s:
//!   permanent (bad data, dead-letter) or transient (retry).
//!
//! Modules: [`engine`] (wasmtime engine, epoch ticker, compiled cache),
//! [`limits`] (memory, CPU and table caps), `sandbox` (WASI context and guest
//! output to logs), `instance` (instance lifecycle and failure
//! classification), [`transform`], [`filter`], [`routing`] and
//! [`enrichment`] (typed bindings per world), [`source_query`] and
//! [`outbound_http`] (the capabilities an enrichment may be granted) and `deterministic` (clocks and
//! random derived from the change, for replayable output).

mod bindings;
mod cache;
pub mod cpu_share;
mod deterministic;
pub mod engine;
pub mod enrichment;
mod error;
pub mod filter;
mod guest_state;
mod instance;
pub mod limits;
mod message;
pub mod outbound_http;
pub mod routing;
mod sandbox;
pub mod source_query;
pub mod transform;
mod usage;

pub mod http_egress;
pub mod registry;
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;

#[cfg(test)]
mod http_tests;
#[cfg(test)]
mod tests;

pub use cpu_share::CpuShare;
pub use engine::{Allocation, EngineSettings, PluginEngine};
pub use enrichment::{EnrichmentFunction, Grants};
pub use error::{FunctionError, PluginError};
pub use filter::FilterFunction;
pub use limits::Limits;
pub use outbound_http::OutboundHttp;
pub use routing::RoutingFunction;
pub use source_query::SourceQuery;
pub use transform::TransformFunction;
pub use weft_config::hosts::AllowedHost;
pub use weft_core::payload::Payload;
pub use weft_core::route::{KeyAction, Route};
