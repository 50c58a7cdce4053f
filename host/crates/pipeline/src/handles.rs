//! The handles of the running sinks, by name: how a sink's consumers learn
//! of new messages (a pull sink's long-polling receivers, or a push sink's
//! delivery worker), a push sink's memory lane, its pause switch and its
//! quarantine breaker.
//!
//! The server puts a sink's handles here as it starts the sink and takes
//! them out as it stops it; the pipeline wakes sinks and registers their
//! breakers; the API serves pulls, pauses, quarantines and replays through
//! them. Nothing else of the API or the server is shared this way.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio::sync::watch;

use weft_core::message::ConsumerRef;
use weft_sinks::delivery::DeliveryWaker;
use weft_sinks::lane::Lane;
use weft_sinks::pause::PauseSwitch;
use weft_sinks::sequin_stream::SequinStream;

use super::Breaker;

/// The running sinks' handles. Cheap to clone; clones share them.
#[derive(Clone, Debug)]
pub struct SinkHandles {
    inner: Arc<RwLock<Handles>>,
    /// Bumped by every lane when what it holds back moves.
    lanes_moved: Arc<watch::Sender<u64>>,
}

impl Default for SinkHandles {
    fn default() -> Self {
        SinkHandles {
            inner: Arc::default(),
            lanes_moved: Arc::new(watch::channel(0).0),
        }
    }
}

#[derive(Debug, Default)]
struct Handles {
    pull: HashMap<String, SequinStream>,
    push: HashMap<String, DeliveryWaker>,
    lanes: HashMap<String, Lane>,
    pauses: HashMap<String, PauseSwitch>,
    breakers: HashMap<String, Breaker>,
}

impl SinkHandles {
    /// No sinks yet.
    pub fn new() -> SinkHandles {
        SinkHandles::default()
    }

    fn read(&self) -> RwLockReadGuard<'_, Handles> {
        self.inner
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Handles> {
        self.inner
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Serves the pull sink `name` through `stream`, in place of how it
    /// delivered before; its pause switch is the stream's.
    pub fn put_pull(&self, name: &str, stream: SequinStream) {
        let mut handles = self.write();
        handles.push.remove(name);
        handles.lanes.remove(name);
        handles
            .pauses
            .insert(name.to_string(), stream.pause_switch());
        handles.pull.insert(name.to_string(), stream);
    }

    /// Knows the push sink `name`, whose delivery worker `waker` wakes and
    /// `pause` pauses, in place of how it delivered before.
    pub fn put_push(&self, name: &str, waker: DeliveryWaker, pause: PauseSwitch) {
        let mut handles = self.write();
        handles.pull.remove(name);
        handles.pauses.insert(name.to_string(), pause);
        handles.push.insert(name.to_string(), waker);
    }

    /// The memory lane of the push sink `name`, spilling above
    /// `budget` payload bytes (made if it has none): a lane outlives the workers
    /// that deliver from it (see [`weft_sinks::lane`]).
    pub fn lane_for(&self, name: &str, budget: usize) -> Lane {
        let lane = self
            .write()
            .lanes
            .entry(name.to_string())
            .or_insert_with(|| Lane::new(budget, Arc::clone(&self.lanes_moved)))
            .clone();
        lane.set_budget(budget);
        lane
    }

    /// The memory lane of the push sink `name`, if it delivers from one.
    pub fn lane(&self, name: &str) -> Option<Lane> {
        self.read().lanes.get(name).cloned()
    }

    /// Every push sink's memory lane, by sink.
    pub fn lanes(&self) -> Vec<(String, Lane)> {
        self.read()
            .lanes
            .iter()
            .map(|(name, lane)| (name.clone(), lane.clone()))
            .collect()
    }

    /// Changes whenever a lane's hold on its feed moves or a lane is lost.
    pub fn lanes_moved(&self) -> watch::Receiver<u64> {
        self.lanes_moved.subscribe()
    }

    /// Knows the quarantine breaker of the sink `name`.
    pub fn put_breaker(&self, name: &str, breaker: Breaker) {
        self.write().breakers.insert(name.to_string(), breaker);
    }

    /// Forgets every handle of the sink `name` (a sink deleted while weft
    /// runs).
    pub fn forget(&self, name: &str) {
        let mut handles = self.write();
        handles.pull.remove(name);
        handles.push.remove(name);
        handles.lanes.remove(name);
        handles.pauses.remove(name);
        handles.breakers.remove(name);
    }

    /// The pull sink called `id_or_name`, or whose consumer id (the
    /// `metadata.consumer.id` of its messages) is `id_or_name`.
    pub fn pull(&self, id_or_name: &str) -> Option<SequinStream> {
        let handles = self.read();
        if let Some(stream) = handles.pull.get(id_or_name) {
            return Some(stream.clone());
        }
        let id = uuid::Uuid::parse_str(id_or_name).ok()?.to_string();
        handles
            .pull
            .iter()
            .find(|(name, _)| *ConsumerRef::for_sink(name).id == *id)
            .map(|(_, stream)| stream.clone())
    }

    /// The pause switch of the sink `name`.
    pub fn pause_switch(&self, name: &str) -> Option<PauseSwitch> {
        self.read().pauses.get(name).cloned()
    }

    /// The quarantine breaker of the sink `name`.
    pub fn breaker(&self, name: &str) -> Option<Breaker> {
        self.read().breakers.get(name).cloned()
    }

    /// Whether `name` is a running sink (pull or push).
    pub fn knows(&self, name: &str) -> bool {
        let handles = self.read();
        handles.push.contains_key(name) || handles.pull.contains_key(name)
    }

    /// Wakes the long-polling receivers, or the delivery worker, of the
    /// sink `name`: messages were stored for it.
    pub fn wake(&self, name: &str) {
        let handles = self.read();
        if let Some(stream) = handles.pull.get(name) {
            stream.wake();
        }
        if let Some(waker) = handles.push.get(name) {
            waker.wake();
        }
    }
}
