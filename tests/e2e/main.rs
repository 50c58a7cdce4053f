//! End-to-end tests: the real `weft` binary against real services.
//! The harness that starts those services lives in `tests/harness/`.

#[path = "../harness/mod.rs"]
mod harness;

mod accounts;
mod api_auth;
mod backfill;
mod backlog;
mod change_retention;
mod cli;
mod config_apply;
mod config_errors;
mod crash;
mod dashboard;
mod databases;
mod first_party;
mod first_slice;
mod functions;
mod idle;
mod kafka;
mod languages;
mod live_sinks;
mod metrics;
mod nats;
mod openapi;
mod pause;
mod plugins;
mod poison;
mod postgres_sink;
mod rabbitmq;
mod redis;
mod scaffold;
mod schema_changes;
mod secrets;
mod setup_errors;
mod source;
mod tls;
mod toast;
mod truncate;
mod types;
mod webhook;
mod webhook_source;
mod workload;
