//! The remote half of the `weft` CLI: commands that talk to a running
//! weft's HTTP API (Sequin's CLI shape): contexts holding a server URL and
//! token, `config plan|apply|export`, `sink ls|show`, `backfill
//! start|ls|cancel` and `dead-letters ls|replay|discard`. Human tables by
//! default, the API's JSON with `--json`.

pub mod client;
pub mod commands;
pub mod context;
pub mod table;
