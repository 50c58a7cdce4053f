//! End-to-end tests: the real `weft` binary against real services.
//! The harness that starts those services lives in `tests/harness/`.

#[path = "../harness/mod.rs"]
mod harness;

mod config_errors;
mod first_slice;
mod functions;
mod source;
