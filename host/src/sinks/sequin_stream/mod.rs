//! The Sequin Stream sink: messages are stored durably and consumers pull
//! them over HTTP with receive, ack and nack.
//!
//! The pipeline stores a sink's messages with [`crate::store::Store::append`]
//! and then calls [`SequinStream::wake`] so that long-polling receivers
//! return at once. The storage rules (commit order, one message per group in
//! flight, leases) live in [`crate::store`]; this module adds the settings
//! and the waiting: long polls and the `max_waiting` limit.

mod config;
mod stream;

pub use config::{SequinStreamSettings, SettingsError};
pub use stream::{PullError, SequinStream};
