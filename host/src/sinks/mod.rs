//! Sink adapters, one folder per destination type.

pub mod sequin_stream;
