//! Sink adapters, one folder per destination type, and the delivery worker
//! that drives push sinks from the store.

pub mod delivery;
pub mod sequin_stream;
pub mod webhook;
