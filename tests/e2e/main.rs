//! End-to-end tests: the real `weft` binary against real services.

#[path = "../harness/mod.rs"]
mod harness;
mod source;
