//! Hot swaps of a sink's functions: a new plugin version or function config
//! replaces the loaded one between two chain runs, never inside one, so
//! every change is processed by exactly one version and the changes after
//! the switch point, in stream order, by the new one. The first change a
//! new version processes is recorded as its switch point.

use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use serde::Serialize;

use weft_core::message::Message;

/// Where a swapped function took over: the first change it processed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FirstChange {
    /// The change's commit LSN.
    pub commit_lsn: String,
    /// Its index in the transaction.
    pub commit_idx: u32,
    /// Its message's idempotency key.
    pub idempotency_key: String,
    /// Its primary key values.
    pub record_pks: Vec<String>,
}

/// One function swap on one sink.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SwitchPoint {
    /// The function's name in the config.
    pub function: String,
    /// What now runs: the `plugin` (name@version) or the component file.
    pub to: String,
    /// When the swap happened, ms since the Unix epoch.
    pub swapped_at: i64,
    /// The first change the new version processed; `None` until one came.
    pub first_change: Option<FirstChange>,
}

/// Serialises a chain's runs with swaps of its functions and records
/// switch points. Cheap to clone; clones share the state.
#[derive(Clone, Default)]
pub struct SwapGate {
    inner: Arc<GateState>,
}

#[derive(Default)]
struct GateState {
    /// Held shared by a chain run, exclusively by a swap.
    turn: RwLock<()>,
    /// Switch points, the last ones possibly still waiting for a change.
    log: Mutex<Vec<SwitchPoint>>,
}

impl SwapGate {
    /// Taken for a whole chain run: a swap waits for it.
    pub(crate) fn run_turn(&self) -> RwLockReadGuard<'_, ()> {
        self.inner
            .turn
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Taken for a swap: no run is in progress while it is held.
    pub(crate) fn swap_turn(&self) -> RwLockWriteGuard<'_, ()> {
        self.inner
            .turn
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn log(&self) -> MutexGuard<'_, Vec<SwitchPoint>> {
        self.inner
            .log
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records swaps that take effect from the next run.
    pub(crate) fn record(&self, switches: Vec<SwitchPoint>) {
        self.log().extend(switches);
    }

    /// Sets the first change of every switch point still waiting for one
    /// to `first`, the first change of the run about to start.
    pub(crate) fn mark_first(&self, first: &Message) {
        let mut log = self.log();
        for switch in log.iter_mut().rev() {
            if switch.first_change.is_some() {
                break;
            }
            switch.first_change = Some(FirstChange {
                commit_lsn: first.metadata.commit_lsn.to_string(),
                commit_idx: first.metadata.commit_idx,
                idempotency_key: first.metadata.idempotency_key.clone(),
                record_pks: first.metadata.record_pks.clone(),
            });
        }
    }

    /// The switch points recorded, oldest first.
    pub fn switches(&self) -> Vec<SwitchPoint> {
        self.log().clone()
    }
}
