//! weft: Postgres change-data-capture with sandboxed WebAssembly functions.
//!
//! The crate is both the library behind the `weft` binary and the home of
//! every runtime module. Data flows one way through it:
//!
//! ```text
//! source (replication) ──► pipeline (functions, grouping) ──► sinks ──► store / brokers
//! ```
//!
//! * [`config`] parses and validates the sequin.yml-style configuration.
//! * [`source`] speaks Postgres logical replication and decodes pgoutput into
//!   [`change::Change`]s.
//! * [`plugins`] hosts user functions as WebAssembly components.
//! * [`pipeline`] runs each sink's function chain and hands messages to sinks.
//! * [`backfill`] replays existing rows into a sink alongside live changes.
//! * [`webhook_source`] accepts messages POSTed to weft and feeds them to
//!   their sinks' pipeline as a source database's changes are.
//! * [`registry`] keeps the plugins uploaded through the API.
//! * [`store`] is weft's durable state (SQLite).
//! * [`api`] serves the HTTP APIs.
//! * [`hot_swap`] swaps a running sink's functions when only they change.
//! * [`http_egress`] keeps an account's HTTP requests off internal addresses.
//! * [`health`] holds the health checks of databases, slots, sinks and plugins.
//! * [`retention`] deletes change retentions' event rows past their age.
//! * [`cli`] is the remote half of the `weft` CLI (contexts, and commands
//!   that call a running weft's API).

pub mod api;
pub mod backfill;
pub use weft_core::change;
pub mod cli;
pub use weft_core::health;
pub use weft_sinks::config;
pub mod hot_swap;
pub use weft_core::lsn;
pub use weft_core::message;
pub use weft_core::metrics;
use weft_core::own_thread;
pub use weft_wasm::http_egress;
pub mod pipeline;
pub mod plugin_project;
pub use weft_wasm as plugins;
pub use weft_wasm::registry;
pub mod server;
pub use weft_sinks as sinks;
pub use weft_source as source;
pub use weft_store as store;
pub mod webhook_source;
