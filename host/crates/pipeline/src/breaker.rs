//! The circuit breaker that quarantines a sink whose functions keep
//! trapping.
//!
//! Every change a function traps on (isolated by bisection, see
//! [`super::chain`]) counts. When `threshold` of them fall within
//! [`WINDOW`], the sink is quarantined: its changes are held in the store
//! (the slot keeps advancing, other sinks keep flowing), the reason shows
//! in `/api/health` and at `GET /api/sinks/{sink}/quarantine`, and nothing
//! runs through its functions until an operator resets the breaker
//! (`DELETE /api/sinks/{sink}/quarantine`) or restarts weft with a fixed
//! component; then the held changes go through, in order.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;

use weft_core::health::{self, EntityKind, Status};

/// How far back traps count towards the threshold.
pub const WINDOW: Duration = Duration::from_secs(60);

/// Why a sink is quarantined.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Quarantine {
    /// The function that kept trapping.
    pub function: String,
    /// Its last failure.
    pub last_error: String,
    /// Traps counted within the window when the breaker tripped.
    pub traps: usize,
    /// When the breaker tripped.
    pub since: DateTime<Utc>,
}

/// A sink's breaker. Clones share state: the pipeline records traps, the
/// API reads and resets it.
#[derive(Debug, Clone)]
pub struct Breaker {
    sink: String,
    threshold: u32,
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    recent: VecDeque<Instant>,
    quarantine: Option<Quarantine>,
}

impl Breaker {
    /// The breaker of `sink`, tripping at `threshold` traps within
    /// [`WINDOW`]; 0 never trips.
    pub fn new(sink: &str, threshold: u32) -> Breaker {
        Breaker {
            sink: sink.to_string(),
            threshold,
            state: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts one change `function` trapped on with `error`; returns true
    /// when this trips the breaker.
    pub fn record_trap(&self, function: &str, error: &str) -> bool {
        let plugin = format!("{}/{}", self.sink, function);
        health::global().fail(
            EntityKind::Plugin,
            &plugin,
            "last_trap",
            Status::Warning,
            format!("a change was dead-lettered because the function failed on it: {error}"),
        );
        let now = Instant::now();
        let mut state = self.lock();
        if state.quarantine.is_some() || self.threshold == 0 {
            return false;
        }
        state.recent.push_back(now);
        while state
            .recent
            .front()
            .is_some_and(|at| now.duration_since(*at) > WINDOW)
        {
            state.recent.pop_front();
        }
        if state.recent.len() < self.threshold as usize {
            return false;
        }
        let quarantine = Quarantine {
            function: function.to_string(),
            last_error: error.to_string(),
            traps: state.recent.len(),
            since: Utc::now(),
        };
        let message = format!(
            "quarantined: function {function} failed on {} changes within {}s (last: {error}); \
             the sink's changes are held until the function is fixed: replace the component and \
             restart, or reset with DELETE /api/sinks/{}/quarantine",
            quarantine.traps,
            WINDOW.as_secs(),
            self.sink
        );
        health::global().fail(
            EntityKind::Sink,
            &self.sink,
            "quarantined",
            Status::Error,
            message.clone(),
        );
        health::global().fail(
            EntityKind::Plugin,
            &plugin,
            "quarantined",
            Status::Error,
            message,
        );
        state.recent.clear();
        state.quarantine = Some(quarantine);
        true
    }

    /// Why the sink is quarantined, if it is.
    pub fn quarantine(&self) -> Option<Quarantine> {
        self.lock().quarantine.clone()
    }

    /// Whether the sink is quarantined.
    pub fn is_open(&self) -> bool {
        self.lock().quarantine.is_some()
    }

    /// Lifts the quarantine; returns what it was, if any.
    pub fn reset(&self) -> Option<Quarantine> {
        let lifted = self.lock().quarantine.take();
        if let Some(quarantine) = &lifted {
            health::global().clear(EntityKind::Sink, &self.sink, "quarantined");
            health::global().clear(
                EntityKind::Plugin,
                &format!("{}/{}", self.sink, quarantine.function),
                "quarantined",
            );
        }
        lifted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trips_at_the_threshold_and_resets() {
        let breaker = Breaker::new("breaker-test-sink", 3);
        assert!(!breaker.record_trap("f", "boom 1"));
        assert!(!breaker.record_trap("f", "boom 2"));
        assert!(!breaker.is_open());
        assert!(breaker.record_trap("f", "boom 3"));
        let quarantine = breaker.quarantine().expect("quarantined");
        assert_eq!(
            (quarantine.traps, quarantine.last_error.as_str()),
            (3, "boom 3")
        );
        let checks = health::global().checks(EntityKind::Sink, "breaker-test-sink");
        assert!(
            checks
                .iter()
                .any(|c| c.id == "quarantined" && c.status == Status::Error)
        );
        assert!(breaker.reset().is_some());
        assert!(!breaker.is_open());
        assert!(
            health::global()
                .checks(EntityKind::Sink, "breaker-test-sink")
                .is_empty()
        );
        // After a reset the count starts again.
        assert!(!breaker.record_trap("f", "boom 4"));
    }

    #[test]
    fn zero_never_trips() {
        let breaker = Breaker::new("breaker-test-never", 0);
        for _ in 0..100 {
            assert!(!breaker.record_trap("f", "boom"));
        }
        assert!(!breaker.is_open());
    }
}
