//! Reports what the sandbox gives it: wall and monotonic clock readings,
//! random numbers (`getrandom`, which reads `wasi:random`), and how
//! many calls this instance has served. A row `{"hold_mib": n}` makes the instance keep
//! `n` MiB allocated, to push its memory up.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use weft_sdk_guest::serde_json::json;
use weft_sdk_guest::{Change, Config, Error, Payload, Transform, export_transform};

struct Probe {
    calls: u64,
    held: Vec<Vec<u8>>,
    started: Instant,
}

impl Transform for Probe {
    fn init(_config: Config) -> Result<Self, String> {
        Ok(Probe {
            calls: 0,
            held: Vec::new(),
            started: Instant::now(),
        })
    }

    fn transform(&mut self, change: Change) -> Result<Payload, Error> {
        self.calls += 1;
        if let Some(mib) = change.get::<usize>("hold_mib")? {
            self.held.push(vec![1u8; mib << 20]);
        }
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or_default();
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|e| Error::transient(e.to_string()))?;
        Ok(Payload::Json(json!({
            "calls": self.calls,
            "wall_us": wall,
            "monotonic_ns": self.started.elapsed().as_nanos() as u64,
            "random": u64::from_le_bytes(random).to_string(),
        })))
    }
}

export_transform!(Probe);
