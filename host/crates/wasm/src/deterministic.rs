//! Deterministic mode: the clocks and random bytes a guest sees derive from
//! the batch it is called with, so that replaying a change gives the same
//! output.
//!
//! Before each call the host sets the inputs from the batch's first change:
//! the wall clock reads its commit timestamp, the monotonic clock starts at
//! zero, and both random generators (WASI's "secure" and "insecure" ones)
//! restart from a seed derived from its commit LSN and index. Each clock
//! read advances the clocks by one microsecond, so time still moves forward
//! within a call and readings stay distinct, yet a replay makes the same
//! reads and gets the same values. `init` runs with the seed and time zero.
//!
//! The guest sees the same values only if it is called with the same batch
//! (same first change) as before; batches are cut by the pipeline, so for
//! exact replays a deterministic function's output should depend only on its
//! own change and on these inputs, not on its position in the batch.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand_core_010::TryRng;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock};

use weft_core::message::Message;

/// How far one clock read moves both clocks.
const TICK: Duration = Duration::from_micros(1);

/// The shared inputs of one instance in deterministic mode.
#[derive(Clone, Default)]
pub(crate) struct DeterministicInputs {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// Wall-clock reading, since the Unix epoch.
    wall: Duration,
    /// Monotonic reading, in nanoseconds since the call began.
    monotonic: u64,
    /// splitmix64 state.
    random: u64,
}

impl DeterministicInputs {
    /// Resets the clocks and the generators for a call on `batch`.
    pub(crate) fn reset_for(&self, batch: &[Message]) {
        let (wall, seed) = match batch.first() {
            Some(message) => {
                let m = &message.metadata;
                let wall = chrono::DateTime::parse_from_rfc3339(&m.commit_timestamp)
                    .ok()
                    .and_then(|t| {
                        let micros = t.timestamp_micros();
                        u64::try_from(micros).ok().map(Duration::from_micros)
                    })
                    .unwrap_or_default();
                (wall, (m.commit_lsn.0 << 20) ^ u64::from(m.commit_idx))
            }
            None => (Duration::ZERO, 0),
        };
        let mut state = self.lock();
        state.wall = wall;
        state.monotonic = 0;
        state.random = seed;
    }

    /// A wall clock reading these inputs.
    pub(crate) fn wall_clock(&self) -> impl HostWallClock + 'static {
        Clock(self.clone())
    }

    /// A monotonic clock reading these inputs.
    pub(crate) fn monotonic_clock(&self) -> impl HostMonotonicClock + 'static {
        Clock(self.clone())
    }

    /// A random generator drawing from these inputs.
    pub(crate) fn random(&self) -> Random {
        Random(self.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

struct Clock(DeterministicInputs);

impl HostWallClock for Clock {
    fn resolution(&self) -> Duration {
        TICK
    }

    fn now(&self) -> Duration {
        let mut state = self.0.lock();
        let now = state.wall + Duration::from_nanos(state.monotonic);
        state.monotonic += TICK.as_nanos() as u64;
        now
    }
}

impl HostMonotonicClock for Clock {
    fn resolution(&self) -> u64 {
        TICK.as_nanos() as u64
    }

    fn now(&self) -> u64 {
        let mut state = self.0.lock();
        let now = state.monotonic;
        state.monotonic += TICK.as_nanos() as u64;
        now
    }
}

/// splitmix64 over the shared state: tiny, fast and fully determined by the
/// seed. Not cryptographic, which deterministic mode cannot be by design.
pub(crate) struct Random(DeterministicInputs);

impl Random {
    fn next(&self) -> u64 {
        let mut state = self.0.lock();
        state.random = state.random.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state.random;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl TryRng for Random {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        Ok(self.next() as u32)
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(self.next())
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        for chunk in dst.chunks_mut(8) {
            let bytes = self.next().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        Ok(())
    }
}
