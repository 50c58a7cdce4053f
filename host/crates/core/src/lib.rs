//! weft's core: the types every layer shares, and nothing that does I/O.
//!
//! It owns the change model ([`change`]), the positions in the WAL
//! ([`lsn`]), the message every sink delivers in Sequin's shape
//! ([`message`]), what functions produce for a message ([`payload`],
//! [`route`]), and the process-wide health registry and metrics names
//! ([`health`], [`metrics`]).
//!
//! This crate is the bottom layer: it imports no other weft crate, so that
//! every layer above can use its types without depending on each other.

/// The version of the `weft:plugin` WIT package (`wit/`) this host
/// implements, as a literal, so that import names can be `concat!`ed from
/// it.
#[macro_export]
macro_rules! wit_version {
    () => {
        "0.2.0"
    };
}

pub mod change;
pub mod error;
pub mod fs;
pub mod health;
pub mod lsn;
pub mod message;
pub mod metrics;
pub mod own_thread;
pub mod payload;
pub mod record;
pub mod route;
