//! The running sinks: how each one's messages leave the store (a pull
//! stream or a push delivery worker) and which pipeline feeds it, so that
//! a config that creates, updates or deletes sinks is applied while every
//! other sink keeps flowing.
//!
//! Such a change is planned ([`LiveSinks::plan`], see [`super::live_plan`]),
//! prepared — every
//! function loaded, every destination built, the publication checked,
//! nothing running yet, so that any failure refuses the config with
//! nothing changed ([`LiveSinks::prepare`]) — and then committed
//! ([`LiveSinks::commit`], both in [`super::sink_changes`]):
//!
//! - a created sink starts delivering and joins its pipeline between two
//!   transactions; it receives every transaction stored after that point
//!   (and its `initial_backfill`, if it has one);
//! - an updated sink is replaced in its pipeline between two transactions,
//!   keeping its cursor, so nothing is lost or reordered; its delivery
//!   worker finishes the deliveries in flight and a new one, with the new
//!   destination, carries on from the store;
//! - a deleted sink leaves its pipeline, stops delivering, and its stored
//!   messages, dead letters and cursor are deleted.
//!
//! - a database's first sink starts its feed (source and pipeline); a
//!   changed database's feed alone stops and starts again
//!   ([`super::database_feed`]).
//!
//! Anything else (webhook sources, change retentions, the plugin
//! registry's settings) still needs the in-process restart of every
//! pipeline.
//!
//! Each sink's delivery (a pull stream, or a push delivery worker that
//! restarts alone when it fails) is in [`super::workers`]; each feed's run
//! in [`super::feed_runs`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::ServerError;
use weft_core::health::EntityKind;
use weft_pipeline::backfill::{BackfillLauncher, Backfills};
use weft_pipeline::hot_swap::FunctionRuntime;
use weft_pipeline::{FunctionChain, SinkHandles, SinkPipeline, SinkSetHandle};
use weft_sinks::config::{Config, SinkConfig};
use weft_store::Store;

/// What feeds a sink: a database's pipeline or a webhook source's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Feed {
    /// The pipeline of the database of this name.
    Database(String),
    /// The pipeline of the webhook source of this name.
    Webhook(String),
}

impl Feed {
    /// The feed of `sink`; config validation gives every sink one.
    pub fn of(sink: &SinkConfig) -> Option<Feed> {
        match (&sink.database, &sink.source.webhook) {
            (Some(database), _) => Some(Feed::Database(database.clone())),
            (None, Some(source)) => Some(Feed::Webhook(source.clone())),
            (None, None) => None,
        }
    }
}
/// A running push sink's delivery worker.
pub(super) struct Worker {
    pub(super) stop: CancellationToken,
    pub(super) done: JoinHandle<()>,
    /// Which run of the sink's worker this is (a failed one restarts as a new run).
    pub(super) run: u64,
}

impl Worker {
    /// Stops it once its deliveries in flight finish.
    pub(super) async fn stop(self) {
        self.stop.cancel();
        let _ = self.done.await;
    }
}

/// A running feed: the handle its sinks change through and what stops it.
pub(super) struct FeedUnit {
    pub(super) sinks: SinkSetHandle,
    /// A database feed's replication slot.
    pub(super) slot: Option<String>,
    /// Stops the source and the pipeline.
    pub(super) stop: CancellationToken,
    /// What to await once stopped: the feed's supervisor, which ends
    /// after its source and pipeline.
    pub(super) supervisor: JoinHandle<()>,
    /// Which run of the feed this is (a failed feed restarts as a new run).
    pub(super) run: u64,
}

/// The next run's number, of a feed or a delivery worker.
pub(super) static NEXT_RUN: AtomicU64 = AtomicU64::new(0);

/// The running sinks. Cheap to clone; clones share the state.
#[derive(Clone)]
pub struct LiveSinks {
    pub(super) store: Store,
    /// The running sinks' handles, which the API and the pipelines share.
    pub(super) handles: SinkHandles,
    /// Backfills of the running sinks.
    pub(super) launcher: BackfillLauncher,
    pub(super) functions: FunctionRuntime,
    pub(super) data_dir: PathBuf,
    pub(super) shutdown: CancellationToken,
    pub(super) backfills: Backfills,
    pub(super) feeds: Arc<Mutex<HashMap<Feed, FeedUnit>>>,
    pub(super) workers: Arc<Mutex<HashMap<String, Worker>>>,
}

impl std::fmt::Debug for LiveSinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveSinks").finish_non_exhaustive()
    }
}

impl LiveSinks {
    /// The sinks of a run, whose handles go into `handles` and whose
    /// backfills `launcher` runs; delivery workers and database feeds stop
    /// at `shutdown`, and database pipelines emit the backfill chunks of
    /// `backfills`. A failed feed or worker restarts alone
    /// ([`super::supervision`]).
    pub fn new(
        store: Store,
        (handles, launcher): (SinkHandles, BackfillLauncher),
        functions: FunctionRuntime,
        (data_dir, backfills): (PathBuf, Backfills),
        shutdown: CancellationToken,
    ) -> LiveSinks {
        LiveSinks {
            store,
            handles,
            launcher,
            functions,
            data_dir,
            shutdown,
            backfills,
            feeds: Arc::default(),
            workers: Arc::default(),
        }
    }

    /// Stops the source and pipeline of `database`, waiting until both
    /// have (the slot is released, stored batches are confirmed); when it
    /// is `deleted`, its health entries go too.
    pub async fn stop_database(&self, database: &str, deleted: bool) {
        let unit = lock(&self.feeds).remove(&Feed::Database(database.to_string()));
        if let Some(unit) = unit {
            unit.stop.cancel();
            let _ = unit.supervisor.await;
            if deleted {
                let health = weft_core::health::global();
                health.forget(EntityKind::Database, database);
                if let Some(slot) = &unit.slot {
                    health.forget(EntityKind::Slot, slot);
                }
            }
            info!(%database, deleted, "database feed stopped");
        }
    }

    /// Waits for every database feed and delivery worker to finish
    /// (after shutdown).
    pub async fn join_all(&self) {
        let feeds: Vec<FeedUnit> = lock(&self.feeds).drain().map(|(_, f)| f).collect();
        for feed in feeds {
            let _ = feed.supervisor.await;
        }
        let workers: Vec<Worker> = lock(&self.workers).drain().map(|(_, w)| w).collect();
        for worker in workers {
            worker.stop().await;
        }
        self.record_settled_lanes().await;
    }

    /// Moves each push sink's cursor to where its lane settled everything
    /// the feed handed over (see [`weft_sinks::lane::Lane::settled_through`]):
    /// with the feeds and workers stopped, nothing more can arrive, and the
    /// slot's last confirmation may not have reached Postgres, which would
    /// otherwise send delivered changes again at the next start.
    async fn record_settled_lanes(&self) {
        for (sink, lane) in self.handles.lanes() {
            let Some(through) = lane.settled_through() else {
                continue;
            };
            let store = self.store.clone();
            let recorded = tokio::task::spawn_blocking({
                let sink = sink.clone();
                move || store.append(&[weft_store::SinkBatch::of(sink, Vec::new())], through)
            })
            .await
            .map_err(|error| error.to_string())
            .and_then(|stored| stored.map_err(|error| error.to_string()));
            match recorded {
                Ok(()) => info!(sink = %sink, %through, "delivered through the sink's memory lane"),
                // Only a redelivery after the restart: the slot sends again
                // what was delivered since its last confirmation.
                Err(error) => {
                    warn!(sink = %sink, %error, "cannot record what the sink delivered through its memory lane; a restart may deliver it again")
                }
            }
        }
    }

    /// The pipeline of `sink`, its function chain loaded as `config` says
    /// and registered for hot swaps and metrics.
    pub fn pipeline(
        &self,
        config: &Config,
        sink: &SinkConfig,
    ) -> Result<SinkPipeline, ServerError> {
        let chain = weft_pipeline::load_chain(config, self.functions.engine(), sink, |_| true)?;
        self.register_chain(sink, &chain);
        Ok(SinkPipeline::new(sink.clone(), chain))
    }

    pub(super) fn register_chain(&self, sink: &SinkConfig, chain: &FunctionChain) {
        let kinds: Vec<(&str, &'static str)> = weft_sinks::config::FunctionKind::ALL
            .iter()
            .filter_map(|kind| sink.function(*kind).map(|name| (name, kind.as_str())))
            .collect();
        weft_core::metrics::register_sink(&sink.name, &kinds);
        self.functions.add_chain(sink, chain.clone());
    }
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
