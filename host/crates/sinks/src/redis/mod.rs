//! What the Redis sink types (`redis_string`, `redis_stream`) share: their
//! connection settings and [`RedisConnection`]: one lazily connected,
//! self-reconnecting multiplexed connection per sink, over which each
//! delivery sends its batch as one plain pipeline (one round trip) and
//! reads one reply per command, so that every message gets its own
//! outcome. A connection failure or timeout fails the whole batch
//! retriably; an error reply fails only its message, retriably (e.g.
//! `WRONGTYPE` until an operator fixes the key). See
//! `docs/sinks/redis_string.md` and `docs/sinks/redis_stream.md`.
//!
//! This folder is no sink type of its own: `redis_string/` and
//! `redis_stream/` are.

mod config;
mod connection;

pub use config::RedisConnectionConfig;
pub(crate) use config::non_empty;
pub use connection::{RedisConnection, RedisSettings};

use weft_config::hosts::{AllowedHost, HostError};

impl RedisConnectionConfig {
    /// Where it connects, for the account's `allow_hosts` check.
    pub fn egress_targets(&self) -> Vec<(&'static str, Result<AllowedHost, HostError>)> {
        vec![("host", AllowedHost::address(&self.host, self.port))]
    }
}
