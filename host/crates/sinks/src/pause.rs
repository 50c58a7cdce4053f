//! Pausing a sink (`POST /api/sinks/{name}/pause`, `…/resume`): its
//! deliveries stop — a push sink's worker leases nothing, a pull sink's
//! receive returns nothing — while its pipeline keeps storing its messages
//! and the slot keeps advancing. The state is kept in the store, so a
//! paused sink stays paused across restarts.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether a sink's deliveries are paused. Cheap to clone; every clone
/// sees the same switch.
#[derive(Debug, Clone, Default)]
pub struct PauseSwitch(Arc<AtomicBool>);

impl PauseSwitch {
    /// A switch in the state `paused`.
    pub fn new(paused: bool) -> PauseSwitch {
        PauseSwitch(Arc::new(AtomicBool::new(paused)))
    }

    /// Whether deliveries are paused.
    pub fn is_paused(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Pauses (`true`) or resumes (`false`) deliveries.
    pub fn set(&self, paused: bool) {
        self.0.store(paused, Ordering::SeqCst);
    }
}
