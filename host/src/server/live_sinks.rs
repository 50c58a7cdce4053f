//! The running sinks: how each one's messages leave the store (a pull
//! stream or a push delivery worker) and which pipeline feeds it, so that
//! a config that creates, updates or deletes sinks is applied while every
//! other sink keeps flowing.
//!
//! Such a change is planned ([`LiveSinks::plan`]), prepared — every
//! function loaded, every destination built, the publication checked,
//! nothing running yet, so that any failure refuses the config with
//! nothing changed ([`LiveSinks::prepare`]) — and then committed
//! ([`LiveSinks::commit`]):
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

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span};

use super::database_feed::{BuiltFeed, check_reachable};
use super::supervision::{Restarts, Supervised};
use super::{ServerError, source_config};
use weft_core::health::EntityKind;
use weft_core::lsn::Lsn;
use weft_pipeline::backfill::{BackfillLauncher, BackfillTarget, Backfills};
use weft_pipeline::hot_swap::FunctionRuntime;
use weft_pipeline::{FunctionChain, SinkHandles, SinkPipeline, SinkSetChange, SinkSetHandle};
use weft_sinks::config::destination::Reference;
use weft_sinks::config::{Config, Destination as _, HttpEndpointConfig, SinkConfig};
use weft_sinks::delivery::{DeliveryWaker, DeliveryWorker};
use weft_sinks::pause::PauseSwitch;
use weft_sinks::sequin_stream::{SequinStream, SequinStreamSettings};
use weft_sinks::sink::Built;
use weft_store::Store;
use weft_wasm::http_egress::HttpEgress;

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

/// How a sink's messages leave the store, built but not started.
pub enum Delivery {
    /// Consumers pull them over HTTP.
    Pull {
        /// The stream's settings.
        settings: SequinStreamSettings,
        /// Whether the sink is paused.
        paused: bool,
    },
    /// A delivery worker pushes them to the destination.
    Push {
        /// The worker, not yet running.
        worker: DeliveryWorker,
        /// Wakes it when messages are stored.
        waker: DeliveryWaker,
        /// Pauses it.
        pause: PauseSwitch,
    },
}

/// A running push sink's delivery worker.
struct Worker {
    stop: CancellationToken,
    done: JoinHandle<()>,
    /// Which run of the sink's worker this is (a failed one restarts as a new run).
    run: u64,
}

impl Worker {
    /// Stops it once its deliveries in flight finish.
    async fn stop(self) {
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

/// What a config changes in place: its sink changes, and the databases
/// whose feed stops (deleted or changed) or starts (a first sink, or
/// changed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LivePlan {
    /// Sinks created, updated and deleted.
    pub sinks: Vec<SinkOp>,
    /// Databases whose running feed stops.
    pub stop: Vec<String>,
    /// Databases whose feed starts.
    pub start: Vec<String>,
}

impl LivePlan {
    /// Whether `feed` stops or starts, so that its sinks change with it.
    fn restarts(&self, feed: &Feed) -> bool {
        matches!(feed, Feed::Database(name) if self.stop.contains(name) || self.start.contains(name))
    }
}

/// One change to the set of sinks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkOp {
    /// A new sink.
    Create {
        /// Its name.
        sink: String,
    },
    /// A sink whose config (or http endpoint) changed.
    Update {
        /// Its name.
        sink: String,
        /// Its old feed, when it moved to another one.
        moved_from: Option<Feed>,
    },
    /// A sink that goes away.
    Delete {
        /// Its name.
        sink: String,
        /// The feed it leaves.
        feed: Feed,
    },
}

/// A created or updated sink, ready to start.
struct ReadySink {
    config: SinkConfig,
    feed: Feed,
    created: bool,
    moved_from: Option<Feed>,
    /// Its chain and backfill target; `None` on a feed that starts, which
    /// brings its own.
    joins: Option<(FunctionChain, Option<BackfillTarget>)>,
    delivery: Delivery,
}

/// Changes loaded and checked, not yet in effect.
pub struct PreparedSinks {
    plan: LivePlan,
    /// The stopping databases the config no longer has.
    deleted_databases: Vec<String>,
    ready: Vec<ReadySink>,
    deleted: Vec<(String, Feed)>,
    feeds: Vec<BuiltFeed>,
}

/// What a commit changed.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct SinkChanges {
    /// Created sinks.
    pub created: Vec<String>,
    /// Updated sinks.
    pub updated: Vec<String>,
    /// Deleted sinks.
    pub deleted: Vec<String>,
    /// Databases whose source and pipeline stopped.
    #[serde(skip)]
    pub databases_stopped: Vec<String>,
    /// Databases whose source and pipeline started.
    #[serde(skip)]
    pub databases_started: Vec<String>,
}

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
    workers: Arc<Mutex<HashMap<String, Worker>>>,
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

    /// Builds how `sink` delivers, as `config` says; starts nothing.
    pub fn delivery(&self, config: &Config, sink: &SinkConfig) -> Result<Delivery, ServerError> {
        let paused = self.store.is_paused(&sink.name)?;
        let built = sink
            .destination
            .build(sink, config)
            .map_err(|source| ServerError::Sink {
                sink: sink.name.clone(),
                source,
            })?;
        match built {
            Built::Pull(settings) => Ok(Delivery::Pull { settings, paused }),
            Built::Push { destination, retry } => {
                let waker = DeliveryWaker::new();
                let pause = PauseSwitch::new(paused);
                let worker = DeliveryWorker::new(
                    &sink.name,
                    self.store.clone(),
                    destination,
                    retry,
                    waker.clone(),
                )
                .with_memory_budget(sink.max_memory_mb as usize * 1024 * 1024)
                .with_pause(pause.clone());
                Ok(Delivery::Push {
                    worker,
                    waker,
                    pause,
                })
            }
        }
    }

    /// Starts `delivery` for the sink `name`, in place of how it delivered
    /// before: a replaced delivery worker first finishes its deliveries in
    /// flight.
    pub async fn start_delivery(&self, name: &str, delivery: Delivery) {
        self.stop_worker(name).await;
        match delivery {
            Delivery::Pull { settings, paused } => {
                let stream = SequinStream::new(name, self.store.clone(), settings);
                stream.pause_switch().set(paused);
                self.handles.put_pull(name, stream);
            }
            Delivery::Push {
                worker,
                waker,
                pause,
            } => {
                self.handles.put_push(name, waker, pause);
                self.run_worker(name, worker, Restarts::default());
            }
        }
    }

    /// Runs `worker`, the delivery worker of the sink `name`, `restarts`
    /// into a row of failures. A failure (the store, or a delivery task
    /// that panicked) restarts this worker alone after a backoff; every
    /// other sink keeps delivering.
    fn run_worker(&self, name: &str, worker: DeliveryWorker, restarts: Restarts) {
        let stop = self.shutdown.child_token();
        let run = NEXT_RUN.fetch_add(1, Ordering::Relaxed);
        let done = tokio::spawn({
            let (live, sink, until) = (self.clone(), name.to_string(), stop.clone());
            async move {
                let (ended, restarts) = Supervised::worker(&sink)
                    .outlast(worker.run(until.clone()), restarts)
                    .await;
                if let Err(error) = ended {
                    live.after_worker_failed(sink, run, error.to_string(), restarts, until)
                        .await;
                }
            }
            .instrument(info_span!("delivery", sink = %name))
        });
        lock(&self.workers).insert(name.to_string(), Worker { stop, done, run });
    }

    /// After the run `run` of the delivery worker of `sink` failed with
    /// `failure`: reports it and, after the backoff of `restarts`, starts
    /// a worker again as the running config defines the sink, unless
    /// `stop` ends it meanwhile or another worker replaced it.
    async fn after_worker_failed(
        &self,
        sink: String,
        run: u64,
        mut failure: String,
        mut restarts: Restarts,
        stop: CancellationToken,
    ) {
        let supervised = Supervised::worker(&sink);
        while !stop.is_cancelled() {
            restarts = restarts.after_failure();
            supervised.failed(&failure, restarts);
            let Some(_turn) = self.restart_turn(&stop, restarts).await else {
                return;
            };
            if lock(&self.workers).get(&sink).is_none_or(|w| w.run != run) {
                return;
            }
            let config = self.functions.running();
            let Some(sink_config) = config.sinks.iter().find(|s| s.name == sink) else {
                return;
            };
            match self.delivery(&config, sink_config) {
                Ok(Delivery::Push {
                    worker,
                    waker,
                    pause,
                }) => {
                    self.handles.put_push(&sink, waker, pause);
                    supervised.restarted(&failure, restarts);
                    self.run_worker(&sink, worker, restarts);
                    return;
                }
                // Now a pull sink: the apply that made it one started its stream.
                Ok(Delivery::Pull { .. }) => return,
                Err(error) => failure = error.to_string(),
            }
        }
    }

    /// Waits out `restarts`' backoff, then for the turn between config
    /// applies (an apply may stop or replace what restarts); `None` when
    /// `stop` ends it first.
    pub(super) async fn restart_turn(
        &self,
        stop: &CancellationToken,
        restarts: Restarts,
    ) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        tokio::select! {
            _ = stop.cancelled() => return None,
            _ = tokio::time::sleep(restarts.backoff) => {}
        }
        let turn = tokio::select! {
            _ = stop.cancelled() => return None,
            turn = self.functions.apply_turn() => turn,
        };
        (!stop.is_cancelled()).then_some(turn)
    }

    /// Stops the delivery worker of `name`, if it has one, once its
    /// deliveries in flight finish.
    async fn stop_worker(&self, name: &str) {
        let worker = lock(&self.workers).remove(name);
        if let Some(worker) = worker {
            worker.stop().await;
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

    /// The changes from `running` to `proposed`, when they can be applied
    /// without a restart: nothing but databases, sinks, functions, API
    /// tokens, http endpoints and accounts differs.
    pub fn plan(&self, running: &Config, proposed: &Config) -> Option<LivePlan> {
        let feeds = lock(&self.feeds);
        live_plan(running, proposed, |feed| feeds.contains_key(feed))
    }

    /// Loads and checks everything `plan` needs from `proposed`: each
    /// starting database (reachable, its sinks' functions loaded), each
    /// created or updated sink's functions, destination and published
    /// tables. Nothing changes; the first problem is the error.
    pub async fn prepare(
        &self,
        proposed: &Config,
        plan: LivePlan,
    ) -> Result<PreparedSinks, String> {
        let mut prepared = PreparedSinks {
            plan: LivePlan::default(),
            deleted_databases: plan
                .stop
                .iter()
                .filter(|name| proposed.database(name).is_none())
                .cloned()
                .collect(),
            ready: Vec::new(),
            deleted: Vec::new(),
            feeds: Vec::new(),
        };
        for name in &plan.start {
            let database = proposed
                .database(name)
                .ok_or_else(|| format!("no database {name}"))?
                .clone();
            check_reachable(&database).await?;
            let (proposed, engine, data_dir) = (
                proposed.clone(),
                self.functions.engine().clone(),
                self.data_dir.clone(),
            );
            let built = tokio::task::spawn_blocking(move || {
                BuiltFeed::build(&proposed, &database, &engine, &data_dir)
            })
            .await
            .map_err(|error| format!("the function loading task failed: {error}"))?
            .map_err(|error| error.to_string())?;
            prepared.feeds.extend(built);
        }
        for op in plan.sinks.iter().cloned() {
            let (name, created, moved_from) = match op {
                SinkOp::Delete { sink, feed } => {
                    prepared.deleted.push((sink, feed));
                    continue;
                }
                SinkOp::Create { sink } => (sink, true, None),
                SinkOp::Update { sink, moved_from } => (sink, false, moved_from),
            };
            let config = proposed
                .sinks
                .iter()
                .find(|s| s.name == name)
                .cloned()
                .ok_or_else(|| format!("sink {name} is not in the config"))?;
            let feed = Feed::of(&config).ok_or_else(|| format!("sink {name} has no source"))?;
            let joins = if plan.restarts(&feed) {
                None
            } else {
                Some(self.prepare_joining(proposed, &config, &feed).await?)
            };
            let delivery = self
                .delivery(proposed, &config)
                .map_err(|error| error.to_string())?;
            prepared.ready.push(ReadySink {
                config,
                feed,
                created,
                moved_from,
                joins,
                delivery,
            });
        }
        prepared.plan = plan;
        Ok(prepared)
    }

    /// The chain and backfill target of `sink`, joining the running
    /// `feed`: its functions loaded, its tables checked to be published.
    async fn prepare_joining(
        &self,
        proposed: &Config,
        sink: &SinkConfig,
        feed: &Feed,
    ) -> Result<(FunctionChain, Option<BackfillTarget>), String> {
        let backfill = match feed {
            Feed::Database(database) => Some(self.check_published(proposed, sink, database).await?),
            Feed::Webhook(_) => None,
        };
        let (proposed, engine, config) = (
            proposed.clone(),
            self.functions.engine().clone(),
            sink.clone(),
        );
        let name = sink.name.clone();
        let chain = tokio::task::spawn_blocking(move || {
            weft_pipeline::load_chain(&proposed, &engine, &config, |_| true)
        })
        .await
        .map_err(|error| format!("the function loading task failed: {error}"))?
        .map_err(|error| format!("sink {name}: {error}"))?;
        Ok((chain, backfill))
    }

    /// Checks that `database`'s publication covers the tables `sink`
    /// lists; answers the sink's backfill target.
    async fn check_published(
        &self,
        proposed: &Config,
        sink: &SinkConfig,
        database: &str,
    ) -> Result<BackfillTarget, String> {
        let database = proposed
            .database(database)
            .ok_or_else(|| format!("sink {}: no database {database}", sink.name))?;
        let mut source =
            source_config(database, &[sink], &self.data_dir).map_err(|e| e.to_string())?;
        source.create_publication_if_not_exists = false;
        let (client, _connection) =
            source.connection.connect_query().await.map_err(|error| {
                format!("sink {}: database {}: {error}", sink.name, database.name)
            })?;
        weft_source::slot::ensure_publication(&client, &source)
            .await
            .map_err(|error| format!("sink {}: {error}", sink.name))?;
        Ok(BackfillTarget {
            config: sink.clone(),
            connection: source.connection.clone(),
            slot: database.slot.name.clone(),
            publication: database.publication.name.clone(),
        })
    }

    /// Puts `prepared` into effect (see the module's documentation);
    /// answers what changed. An error means a pipeline stopped meanwhile:
    /// only a restart applies the rest.
    pub async fn commit(&self, prepared: PreparedSinks) -> Result<SinkChanges, String> {
        let PreparedSinks {
            plan,
            deleted_databases,
            ready,
            deleted,
            feeds,
        } = prepared;
        let mut changes = SinkChanges::default();
        for (name, feed) in deleted {
            if !plan.restarts(&feed) {
                self.change_feed(&feed, SinkSetChange::Remove(name.clone()))
                    .await?;
            }
            self.forget(&name).await?;
            changes.deleted.push(name);
        }
        for database in &plan.stop {
            self.stop_database(database, deleted_databases.contains(database))
                .await;
            changes.databases_stopped.push(database.clone());
        }
        let mut created = Vec::new();
        for ready in ready {
            let name = ready.config.name.clone();
            if let Some(old) = ready.moved_from.as_ref().filter(|old| !plan.restarts(old)) {
                self.change_feed(old, SinkSetChange::Remove(name.clone()))
                    .await?;
            }
            weft_core::health::global().forget_sink(&name, true);
            // A new sink delivers before its first messages are stored; an
            // updated one switches delivery after its new version stores.
            let mut delivery = Some(ready.delivery);
            if ready.created
                && let Some(delivery) = delivery.take()
            {
                self.start_delivery(&name, delivery).await;
            }
            let joins_running_feed = ready.joins.is_some();
            if let Some((chain, backfill)) = ready.joins {
                self.register_chain(&ready.config, &chain);
                let pipeline = SinkPipeline::new(ready.config.clone(), chain);
                let put = SinkSetChange::Put {
                    sink: Box::new(pipeline),
                    starts_here: ready.created || ready.moved_from.is_some(),
                };
                self.change_feed(&ready.feed, put).await?;
                if let Some(target) = backfill {
                    self.launcher.set_target(target);
                }
            }
            if !joins_running_feed && ready.moved_from.is_some() {
                // Its cursor is a position of the database it left; the
                // starting feed reads it, so it must not hold one.
                let (store, sink) = (self.store.clone(), name.clone());
                tokio::task::spawn_blocking(move || store.start_sink_at(&sink, Lsn::ZERO))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())?;
            }
            if let Some(delivery) = delivery {
                self.start_delivery(&name, delivery).await;
            }
            if ready.created {
                info!(sink = %name, "sink created without a restart");
                created.push(name.clone());
                changes.created.push(name);
            } else {
                info!(sink = %name, "sink updated without a restart");
                changes.updated.push(name);
            }
        }
        for built in feeds {
            let database = built.database.name.clone();
            for target in built.backfill_targets() {
                self.launcher.set_target(target);
            }
            self.spawn_database(built);
            info!(%database, "database feed started without a restart");
            changes.databases_started.push(database);
        }
        for sink in &created {
            self.launcher.start_initial_of(sink);
        }
        Ok(changes)
    }

    /// Forgets the deleted sink `name`, out of its pipeline already: stops
    /// its delivery, cancels its backfills and deletes what the store
    /// holds for it.
    async fn forget(&self, name: &str) -> Result<(), String> {
        self.stop_worker(name).await;
        self.handles.forget(name);
        self.functions.remove_chain(name);
        weft_core::health::global().forget_sink(name, false);
        weft_core::metrics::forget_sink(name);
        self.launcher.forget_sink(name).map_err(|e| e.to_string())?;
        let (store, sink) = (self.store.clone(), name.to_string());
        let deleted = tokio::task::spawn_blocking(move || store.remove_sink(&sink))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        info!(sink = %name, messages_deleted = deleted, "sink deleted without a restart");
        Ok(())
    }

    /// Makes `change` to the sinks of `feed`'s pipeline, between two of
    /// its transactions. A feed whose pipeline failed and waits to restart
    /// ([`super::supervision`]) takes none: its restart waits for this
    /// apply to end and builds it from the running config, which has the
    /// change by then.
    async fn change_feed(&self, feed: &Feed, change: SinkSetChange) -> Result<(), String> {
        let handle = lock(&self.feeds)
            .get(feed)
            .map(|unit| unit.sinks.clone())
            .ok_or_else(|| format!("no running pipeline reads {feed:?}"))?;
        match handle.apply(change).await {
            Ok(()) => Ok(()),
            Err(_) if !self.shutdown.is_cancelled() => {
                info!(
                    ?feed,
                    "the feed is waiting to restart; it restarts with the change"
                );
                Ok(())
            }
            Err(stopped) => Err(stopped.to_string()),
        }
    }
}

/// The changes from `running` to `proposed`, or `None` when they need a
/// restart: something beyond databases, sinks, functions, tokens,
/// endpoints and accounts differs, or a sink's webhook source does not
/// `runs`. A database feed that `runs` stops when its entry changes or
/// goes; one that does not run starts when it has sinks (again, for a
/// changed one).
fn live_plan(
    running: &Config,
    proposed: &Config,
    runs: impl Fn(&Feed) -> bool,
) -> Option<LivePlan> {
    if without_live_parts(running) != without_live_parts(proposed) {
        return None;
    }
    let mut plan = LivePlan::default();
    for old in &running.databases {
        let feed = Feed::Database(old.name.clone());
        if runs(&feed) && proposed.database(&old.name) != Some(old) {
            plan.stop.push(old.name.clone());
        }
    }
    for database in &proposed.databases {
        let feed = Feed::Database(database.name.clone());
        let has_sinks = proposed
            .sinks
            .iter()
            .any(|s| s.takes_database(&database.name));
        if has_sinks && (!runs(&feed) || plan.stop.contains(&database.name)) {
            plan.start.push(database.name.clone());
        }
    }
    for old in &running.sinks {
        if !proposed.sinks.iter().any(|s| s.name == old.name) {
            plan.sinks.push(SinkOp::Delete {
                sink: old.name.clone(),
                feed: Feed::of(old)?,
            });
        }
    }
    for new in &proposed.sinks {
        let feed = Feed::of(new)?;
        if !runs(&feed) && !plan.restarts(&feed) {
            return None;
        }
        match running.sinks.iter().find(|s| s.name == new.name) {
            None => plan.sinks.push(SinkOp::Create {
                sink: new.name.clone(),
            }),
            Some(old)
                if old != new
                    || http_endpoint(running, old) != http_endpoint(proposed, new)
                    || http_egress(running, old) != http_egress(proposed, new) =>
            {
                let old_feed = Feed::of(old)?;
                plan.sinks.push(SinkOp::Update {
                    sink: new.name.clone(),
                    moved_from: (old_feed != feed).then_some(old_feed),
                });
            }
            Some(_) => {}
        }
    }
    Some(plan)
}

/// `config` without the parts a running weft changes in place.
fn without_live_parts(config: &Config) -> Config {
    Config {
        databases: Vec::new(),
        sinks: Vec::new(),
        functions: Vec::new(),
        api_tokens: Vec::new(),
        http_endpoints: Vec::new(),
        // Account limits and capabilities bound what the config may hold,
        // checked as it loads; what running sinks and functions read of
        // them (deny_internal_http) makes those change with them.
        accounts: Vec::new(),
        ..config.clone()
    }
}

/// Where the requests of a sink that delivers to an http endpoint may
/// connect, by its account; `None` for other sinks, which make no HTTP
/// requests.
fn http_egress(config: &Config, sink: &SinkConfig) -> Option<HttpEgress> {
    endpoint_name(sink).map(|_| HttpEgress::of_account(config, sink.account.as_deref()))
}

/// The http endpoint a sink delivers to, if it delivers to one.
fn http_endpoint<'a>(config: &'a Config, sink: &SinkConfig) -> Option<&'a HttpEndpointConfig> {
    endpoint_name(sink).and_then(|name| config.http_endpoint(&name))
}

/// The name of the http endpoint a sink's destination uses, if any.
fn endpoint_name(sink: &SinkConfig) -> Option<String> {
    sink.destination
        .references()
        .into_iter()
        .find_map(|reference| match reference {
            Reference::HttpEndpoint(name) => Some(name),
            Reference::Database(_) => None,
        })
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATABASES: &str = "databases:\n  - { name: a, hostname: localhost, database: a, username: u, slot: { name: sa }, publication: { name: pa } }\n  - { name: b, hostname: localhost, database: b, username: u, slot: { name: sb }, publication: { name: pb } }\n";

    fn config(sinks: &str, more: &str) -> Config {
        let sinks = if sinks.is_empty() { " []\n" } else { "\n" }.to_string() + sinks;
        let text = format!("{DATABASES}{more}sinks:{sinks}");
        Config::from_yaml(&text, std::path::Path::new("."), &|_| None)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn sink(name: &str, database: &str, table: &str) -> String {
        format!(
            "  - {{ name: {name}, database: {database}, source: {{ include_tables: [public.{table}] }}, destination: {{ type: sequin_stream }} }}\n"
        )
    }

    fn hook(name: &str, url: &str) -> (String, String) {
        (
            format!(
                "  - {{ name: {name}, database: a, destination: {{ type: webhook, http_endpoint: ep }} }}\n"
            ),
            format!("http_endpoints:\n  - {{ name: ep, url: \"{url}\" }}\n"),
        )
    }

    /// Every feed runs but `b`'s.
    fn all_but_b(feed: &Feed) -> bool {
        *feed != Feed::Database("b".into())
    }

    #[test]
    fn created_updated_moved_and_deleted_sinks_apply_in_place() {
        let running = config(
            &[
                sink("kept", "a", "t"),
                sink("changed", "a", "t"),
                sink("moved", "a", "t"),
                sink("gone", "a", "t"),
                sink("on-b", "b", "t"),
            ]
            .concat(),
            "",
        );
        let proposed = config(
            &[
                sink("kept", "a", "t"),
                sink("changed", "a", "u"),
                sink("moved", "b", "t"),
                sink("new", "b", "t"),
                sink("on-b", "b", "t"),
            ]
            .concat(),
            "",
        );
        let plan = live_plan(&running, &proposed, |_| true).unwrap();
        assert_eq!(
            plan,
            LivePlan {
                sinks: vec![
                    SinkOp::Delete {
                        sink: "gone".into(),
                        feed: Feed::Database("a".into())
                    },
                    SinkOp::Update {
                        sink: "changed".into(),
                        moved_from: None
                    },
                    SinkOp::Update {
                        sink: "moved".into(),
                        moved_from: Some(Feed::Database("a".into()))
                    },
                    SinkOp::Create { sink: "new".into() },
                ],
                stop: vec![],
                start: vec![],
            }
        );
        assert_eq!(
            live_plan(&running, &running, |_| true),
            Some(LivePlan::default())
        );
    }

    #[test]
    fn a_changed_http_endpoint_updates_the_webhook_sinks_using_it() {
        let (sinks, old) = hook("h", "http://127.0.0.1:1/old");
        let (_, new) = hook("h", "http://127.0.0.1:1/new");
        let plan = live_plan(&config(&sinks, &old), &config(&sinks, &new), |_| true).unwrap();
        assert_eq!(
            plan.sinks,
            vec![SinkOp::Update {
                sink: "h".into(),
                moved_from: None
            }]
        );
    }

    #[test]
    fn an_accounts_deny_internal_http_updates_its_webhook_sinks_only() {
        let (hook_sink, endpoint) = hook("h", "http://hooks.example/in");
        let sinks = [hook_sink, sink("s", "a", "t")].concat();
        let running = config(&sinks, &endpoint);
        let mut denied = running.clone();
        denied
            .accounts
            .push(weft_sinks::config::account::AccountConfig {
                name: "acme".into(),
                limits: Default::default(),
                allow_capabilities: Vec::new(),
                allow_hosts: None,
                deny_internal_http: true,
            });
        // The account owns nothing yet: nothing running changes.
        assert_eq!(
            live_plan(&running, &denied, |_| true),
            Some(LivePlan::default())
        );
        let mut owned = running.clone();
        for sink in &mut owned.sinks {
            sink.account = Some("acme".into());
        }
        owned.accounts = denied.accounts.clone();
        let mut allowed = owned.clone();
        allowed.accounts[0].deny_internal_http = false;
        let plan = live_plan(&allowed, &owned, |_| true).unwrap();
        assert_eq!(
            plan.sinks,
            vec![SinkOp::Update {
                sink: "h".into(),
                moved_from: None
            }],
            "the webhook sink connects anew; the pull sink makes no requests"
        );
    }

    #[test]
    fn a_first_sink_starts_its_database_and_a_changed_database_restarts_alone() {
        let running = config(&sink("s", "a", "t"), "");
        let first_on_b = config(&[sink("s", "a", "t"), sink("n", "b", "t")].concat(), "");
        let plan = live_plan(&running, &first_on_b, all_but_b).unwrap();
        assert_eq!((plan.stop, plan.start), (vec![], vec!["b".to_string()]));
        assert_eq!(plan.sinks, vec![SinkOp::Create { sink: "n".into() }]);

        let mut moved_port = running.clone();
        moved_port.databases[0].connection.port = 5433;
        moved_port.databases[1].connection.port = 5433;
        let plan = live_plan(&running, &moved_port, all_but_b).unwrap();
        assert_eq!(
            (plan.stop, plan.start, plan.sinks),
            (vec!["a".to_string()], vec!["a".to_string()], vec![]),
            "only the running feed restarts; b has no sinks to start"
        );

        let gone = config("", "");
        let plan = live_plan(&running, &gone, all_but_b).unwrap();
        assert_eq!(
            (plan.stop, plan.start),
            (vec![], vec![]),
            "a keeps running without sinks"
        );
    }

    #[test]
    fn other_sections_need_a_restart() {
        let running = config(&sink("s", "a", "t"), "");
        let mut registry = running.clone();
        registry.plugin_registry.max_component_mb += 1;
        assert_eq!(live_plan(&running, &registry, |_| true), None);
    }
}
