//! Tests that measure throughput, so must not share the machine with other
//! tests: cargo runs test binaries one after another, and this one holds a
//! single test, so it runs alone.

// This binary uses only part of the shared harness.
#[allow(dead_code)]
#[path = "../harness/mod.rs"]
mod harness;

mod hostile;
