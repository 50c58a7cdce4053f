//! The Redis sinks: `redis_string` (`SET`/`DEL` one key per message) and
//! `redis_stream` (`XADD` one entry per message).
//!
//! Both share [`RedisConnection`]: one lazily connected, self-reconnecting
//! multiplexed connection per sink, over which each delivery sends its
//! batch as one plain pipeline (one round trip) and reads one reply per
//! command, so that every message gets its own outcome. A connection
//! failure or timeout fails the whole batch retriably; an error reply fails
//! only its message, retriably (e.g. `WRONGTYPE` until an operator fixes
//! the key). See `docs/sinks/redis_string.md` and `docs/sinks/redis_stream.md`.

mod connection;
mod stream;
mod string;

pub use connection::{RedisConnection, RedisSettings};
pub use stream::RedisStreamDestination;
pub use string::RedisStringDestination;
