//! Runs each sink's function chain over the change stream and stores the
//! resulting messages durably, then tells the source how far it may confirm.
//!
//! The loop takes committed transactions from the source, groups as many as
//! are ready into one batch, runs every matching sink's functions on the
//! batch, and writes all sinks' messages in one store transaction together
//! with each sink's cursor. Only then is the batch's last commit reported as
//! durable, so a crash at any point replays from the slot and the cursors
//! drop what was already stored. The store transaction of a batch runs
//! while the next batch goes through the functions (two cores at work
//! instead of one); the next transaction starts only when it is done, and
//! a batch that held a change is stored before the next one is looked at.
//!
//! A transaction bigger than the batch limits is stored in chunks as it
//! arrives (the source only sends committed transactions), so its size does
//! not cost memory here. The cursors and the slot move only at its Commit: a
//! crash in the middle replays the whole transaction, and the store ignores
//! the chunks it already holds (`UNIQUE (sink, commit_lsn, commit_idx)`).
//! A message of the stored part that a consumer acked before the replay
//! got past it is stored and delivered again, with the same idempotency key.
//!
//! A push sink with a memory lane gets its messages in memory instead (see
//! [`weft_sinks::lane`]): they are not stored, the sink's cursor stays, and
//! the slot is confirmed no further than the oldest batch that some lane
//! has not settled yet. A lane that lost messages (its worker failed with
//! deliveries in flight) stops the pipeline, and its feed starts again
//! from the confirmed LSN, which sends them again.
//!
//! A sink with `max_backlog_messages` applies its `load_shedding_policy`
//! before its messages are stored (see `backlog`); such a sink's messages
//! always go through the store, where its backlog is counted.
//!
//! A change a sink's function fails on never stops the stream: it is held
//! in the store for a retry or dead-lettered (see `sink`), and the loop
//! releases due held changes after each batch and once a second.
//!
//! TRUNCATE is skipped or delivered as a message per table, by each sink's
//! `truncate` option (see `truncate`); skips are counted in
//! [`Pipeline::truncates_skipped`].
//!
//! Beside the pipeline loop, this layer owns what feeds it or changes it
//! while it runs: [`backfill`] (existing rows replayed between live
//! changes), [`webhook_source`] (messages POSTed to weft), [`hot_swap`]
//! (functions replaced in place) and loading a sink's function chain
//! ([`load_chain`]). It sits on every layer below (core, config, store,
//! postgres, wasm, source, sinks) and may not import the API or the
//! server, which drive it.

mod append;
pub mod backfill;
mod backlog;
mod batch;
pub mod breaker;
pub mod chain;
mod handles;
mod handout;
pub mod hot_swap;
mod load;
pub mod shadow;
mod sink;
pub mod sink_set;
pub mod swap;
mod truncate;
pub mod webhook_source;

pub use backlog::{Admitted, BacklogGuard};
pub use batch::{Batch, BatchLimits, CommitPoint, Taken};
pub use breaker::{Breaker, Quarantine};
pub use chain::{ChainMessage, ChainOutcome, FunctionChain, Named};
pub use handles::SinkHandles;
pub use load::{LoadError, load_chain, restore_cpu_shares};
pub use sink::{HeldRun, Prepared, SinkPipeline, SinkPipelineError, group_id};
pub use sink_set::{SinkSetChange, SinkSetHandle};

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use crate::backfill::{Backfills, ChunkStored, Watermarks};
use append::{Appended, InFlightAppend};
use handout::Handout;
use weft_core::change::SourceEvent;
use weft_core::lsn::Lsn;
use weft_sinks::lane::Lane;
use weft_source::events::EventReceiver;
use weft_store::{Store, StoredUpTo};

/// How long a batch waits for a full memory lane before that lane spills.
const LANE_PATIENCE: Duration = Duration::from_secs(2);
/// How often the loop looks for held changes that are due again.
const HELD_RELEASE_INTERVAL: Duration = Duration::from_secs(1);
/// Most held changes run through a sink's functions in one run.
const HELD_RELEASE_BATCH: u32 = 1000;

/// A sink's run of held changes, once it is done: the sink, the
/// [`Pipeline::sink_generation`] it started in, and what it came to.
type HeldRunDone = (String, u64, Result<HeldRun, SinkPipelineError>);

/// Why the pipeline stopped.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The store could not be read or written.
    #[error("store: {0}")]
    Store(#[from] weft_store::StoreError),
    /// A blocking task panicked or was cancelled.
    #[error("pipeline task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// A push sink's memory lane lost messages: the feed must start again
    /// from the confirmed LSN, which Postgres sends again from.
    #[error(
        "sink {0}: its delivery worker failed with messages in memory; the feed starts again from the confirmed position so that Postgres sends them again"
    )]
    LaneLost(String),
}

/// The next change to the set of sinks; never, without a channel or once
/// every handle is gone.
async fn next_sink_change(
    changes: &mut Option<sink_set::SinkSetReceiver>,
) -> Option<sink_set::SinkSetRequest> {
    match changes {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// The pipeline of one source (one replication slot) and its sinks.
pub struct Pipeline {
    sinks: Vec<SinkPipeline>,
    store: Store,
    durable: watch::Sender<Lsn>,
    handles: SinkHandles,
    limits: BatchLimits,
    truncates_skipped: u64,
    watermarks: Watermarks,
    /// Backfill chunks whose rows are in the batch being gathered.
    chunks: Vec<ChunkStored>,
    /// Changes to the set of sinks, from the API.
    sink_changes: Option<sink_set::SinkSetReceiver>,
    /// Changes received, applied at the next transaction boundary.
    pending_sink_changes: Vec<sink_set::SinkSetRequest>,
    /// The commit LSN of the last transaction stored: where a sink that
    /// joins starts.
    last_commit: Lsn,
    /// The last batch's store transaction, if it is still running.
    in_flight: Option<InFlightAppend>,
    /// The memory lanes this pipeline sent messages to, by sink.
    lanes: HashMap<String, Lane>,
    /// Changes whenever a lane's hold on the feed moves.
    lanes_moved: watch::Receiver<u64>,
    /// Where everything the pipeline stored ends: the most it may confirm
    /// for the store's sake.
    stored_through: Lsn,
    /// Where every change handed to the sinks so far ends (a commit or an
    /// idle position): what a lane holds the feed back at while the next
    /// batch's messages are in it.
    handed_through: Lsn,
    /// Runs of held changes under way beside the feed, at most one per
    /// sink (see [`Pipeline::start_held_runs`]).
    held_runs: JoinSet<HeldRunDone>,
    /// The sinks with a run of held changes under way: their new changes
    /// are held behind it (a sink that left and joined again meanwhile
    /// too, so that no second run takes the same held changes).
    releasing: std::collections::HashSet<String>,
    /// Bumped whenever a sink joins or leaves: a run of held changes that
    /// started before belongs to a sink as it was, and is not settled.
    sink_generation: u64,
}

impl Pipeline {
    /// A pipeline for `sinks`, storing into `store`, reporting durable
    /// positions through `durable` and waking sinks through `handles`.
    pub fn new(
        sinks: Vec<SinkPipeline>,
        store: Store,
        durable: watch::Sender<Lsn>,
        handles: SinkHandles,
        limits: BatchLimits,
    ) -> Self {
        for sink in &sinks {
            handles.put_breaker(sink.name(), sink.breaker().clone());
        }
        let lanes_moved = handles.lanes_moved();
        Pipeline {
            sinks,
            store,
            durable,
            handles,
            limits,
            truncates_skipped: 0,
            watermarks: Watermarks::new(Backfills::new()),
            chunks: Vec::new(),
            sink_changes: None,
            pending_sink_changes: Vec::new(),
            last_commit: Lsn::ZERO,
            in_flight: None,
            lanes: HashMap::new(),
            lanes_moved,
            stored_through: Lsn::ZERO,
            handed_through: Lsn::ZERO,
            held_runs: JoinSet::new(),
            releasing: std::collections::HashSet::new(),
            sink_generation: 0,
        }
    }

    /// Takes changes to its set of sinks from `changes` (see [`sink_set`]).
    pub fn with_sink_changes(mut self, changes: sink_set::SinkSetReceiver) -> Self {
        self.sink_changes = Some(changes);
        self
    }

    /// Emits the chunks of backfills registered in `backfills` at their
    /// watermarks (see [`crate::backfill`]).
    pub fn with_backfills(mut self, backfills: Backfills) -> Self {
        self.watermarks = Watermarks::new(backfills);
        self
    }

    /// Adds `event` to `batch`; a backfill watermark adds its chunk's rows.
    fn push(&mut self, batch: &mut Batch, event: SourceEvent) {
        match event {
            SourceEvent::Watermark(watermark) => {
                let (reads, chunk) = self.watermarks.on_watermark(&watermark);
                batch.push_changes(reads);
                self.chunks.extend(chunk);
            }
            event => {
                if let SourceEvent::Change(change) = &event {
                    self.watermarks.observe(change);
                }
                batch.push(event);
            }
        }
    }

    /// How many TRUNCATEs some sink skipped since the pipeline started.
    pub fn truncates_skipped(&self) -> u64 {
        self.truncates_skipped
    }

    /// Consumes `events` until the channel closes or `shutdown` fires.
    pub async fn run(
        mut self,
        mut events: EventReceiver,
        shutdown: CancellationToken,
    ) -> Result<(), PipelineError> {
        let mut cursors = HashMap::new();
        for sink in &self.sinks {
            let store = self.store.clone();
            let name = sink.name().to_string();
            // Also the stored part of a transaction whose Commit the sink
            // had not stored when weft stopped: Postgres sends it again.
            let stored = tokio::task::spawn_blocking(move || store.sink_stored_up_to(&name))
                .await??
                .unwrap_or_default();
            let open = stored.open.map_or("none".to_string(), |(lsn, idx)| {
                format!("{lsn} through idx {idx}")
            });
            info!(sink = sink.name(), cursor = %stored.cursor, %open, "sink resumes after what it stored");
            cursors.insert(sink.name().to_string(), stored);
            // What a lane held is sent again from the confirmed position.
            if let Some(lane) = self.handles.lane(sink.name()) {
                lane.reset();
            }
        }
        self.last_commit = cursors
            .values()
            .map(|stored| stored.cursor)
            .max()
            .unwrap_or(Lsn::ZERO);
        let mut sink_changes = self.sink_changes.take();
        info!(sinks = self.sinks.len(), "pipeline started");
        let mut batch = Batch::default();
        let mut held_tick = tokio::time::interval(HELD_RELEASE_INTERVAL);
        held_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let event = tokio::select! {
                _ = shutdown.cancelled() => break,
                event = events.recv() => event,
                stored = append::finished(&mut self.in_flight) => {
                    self.after_append(stored, &shutdown).await?;
                    continue;
                }
                _ = held_tick.tick() => {
                    self.finish_append(&shutdown).await?;
                    self.start_held_runs().await;
                    continue;
                }
                Some(done) = self.held_runs.join_next(), if !self.held_runs.is_empty() => {
                    self.finish_append(&shutdown).await?;
                    self.settle_held_run(done).await;
                    self.start_held_runs().await;
                    continue;
                }
                Ok(()) = self.lanes_moved.changed() => {
                    self.confirm_held()?;
                    continue;
                }
                Some(request) = next_sink_change(&mut sink_changes) => {
                    self.pending_sink_changes.push(request);
                    if batch.at_transaction_boundary() {
                        self.apply_sink_changes(&mut cursors, &shutdown).await?;
                    }
                    continue;
                }
            };
            let Some(event) = event else { break };
            self.push(&mut batch, event);
            // Take whatever else is already waiting, up to the batch limits.
            while !batch.is_full(&self.limits) {
                match events.try_recv() {
                    Some(event) => self.push(&mut batch, event),
                    None => break,
                }
            }
            if batch.has_work(&self.limits) {
                let taken = batch.take();
                if !self.flush(taken, &mut cursors, &shutdown).await? {
                    break;
                }
            }
            if let Some(wal_end) = batch.take_idle_position() {
                // Past an idle position lies nothing to store, but the last
                // batch must be durable before anything after it is confirmed.
                self.finish_append(&shutdown).await?;
                self.handed_through = self.handed_through.max(wal_end);
                self.confirm(wal_end)?;
            }
            if !self.pending_sink_changes.is_empty() && batch.at_transaction_boundary() {
                self.apply_sink_changes(&mut cursors, &shutdown).await?;
            }
        }
        self.finish_append(&shutdown).await?;
        info!("pipeline stopped");
        Ok(())
    }

    /// Stores one batch for every sink and, once it is stored, confirms it
    /// (a clean batch stores while the next one is processed: see
    /// [`append`]); `false` when shutdown came while a full backlog paused
    /// it (nothing stored). Runs
    /// in a `batch` span with the batch's LSN range, inside the pipeline's
    /// span (database, slot); each sink's functions run in a `sink` span.
    async fn flush(
        &mut self,
        taken: Taken,
        cursors: &mut HashMap<String, StoredUpTo>,
        shutdown: &CancellationToken,
    ) -> Result<bool, PipelineError> {
        let span = info_span!(
            "batch",
            first_lsn = %taken.changes.first().map_or(Lsn::ZERO, |c| c.commit_lsn),
            last_lsn = %taken.changes.last().map_or(Lsn::ZERO, |c| c.commit_lsn),
            changes = taken.changes.len(),
        );
        self.flush_batch(taken, cursors, shutdown)
            .instrument(span)
            .await
    }

    async fn flush_batch(
        &mut self,
        taken: Taken,
        cursors: &mut HashMap<String, StoredUpTo>,
        shutdown: &CancellationToken,
    ) -> Result<bool, PipelineError> {
        truncate::warn_skipped(
            self.sinks.iter().map(SinkPipeline::config),
            &taken.truncates,
            &mut self.truncates_skipped,
        );
        let mut sink_batches = Vec::with_capacity(self.sinks.len());
        let mut any_held = false;
        let ingested_at = append::commit_times_of(&taken.changes);
        let stored: Vec<StoredUpTo> = self
            .sinks
            .iter()
            .map(|sink| cursors.get(sink.name()).copied().unwrap_or_default())
            .collect();
        // A sink takes the changes it accepts that it has not stored yet
        // (it stored older ones before a restart).
        let mut handout = Handout::new(taken.changes, self.sinks.len(), |index, change| {
            !stored[index].holds(change.commit_lsn, change.commit_idx)
                && self.sinks[index].accepts(change)
        });
        for (index, stored) in stored.iter().copied().enumerate() {
            let mut prepared = self.sinks[index].prepare(handout.serve(index));
            let behind_a_run = self.releasing.contains(self.sinks[index].name());
            let sink_span = {
                let sink = &self.sinks[index];
                info_span!("sink", sink = sink.name(), plugins = %sink.plugins())
            };
            let mut sink_batch = loop {
                match self.sinks[index]
                    .process(&mut prepared, &self.store, behind_a_run)
                    .instrument(sink_span.clone())
                    .await
                {
                    Ok(sink_batch) => break sink_batch,
                    Err(error) => {
                        // Nothing is lost: the batch is not stored and the
                        // slot is not confirmed until the sink can take it.
                        // What is stored already is confirmed meanwhile.
                        warn!(sink = self.sinks[index].name(), %error, "cannot run the sink's functions; retrying in 1s");
                        self.finish_append(shutdown).await?;
                        tokio::select! {
                            _ = shutdown.cancelled() => return Ok(false),
                            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        }
                    }
                }
            };
            let sink = &mut self.sinks[index];
            truncate::add_messages(
                &mut sink_batch.messages,
                sink.config(),
                &taken.truncates,
                stored,
            );
            if sink.backlog_mut().is_some() {
                // Admission may wait for consumers for as long as they take:
                // the batch before must be stored and its backfill chunks
                // recorded first, or a backfill would wait on itself.
                self.finish_append(shutdown).await?;
                let sink = &mut self.sinks[index];
                let backlog = sink.backlog_mut().expect("checked above");
                let messages = std::mem::take(&mut sink_batch.messages);
                sink_batch.messages = match backlog.admit(&self.store, messages, shutdown).await? {
                    Admitted::Store(messages) => messages,
                    Admitted::ShuttingDown => return Ok(false),
                };
            }
            any_held |= !sink_batch.holds.is_empty();
            sink_batches.push(sink_batch);
        }
        // Without a Commit (a chunk of a big transaction) the cursors stay
        // where they are: the lowest cursor moves none of them.
        let cursor = match taken.commit {
            Some(commit) => commit.commit_lsn,
            None => cursors
                .values()
                .map(|stored| stored.cursor)
                .min()
                .unwrap_or(Lsn::ZERO),
        };
        let ingested = append::commit_times(&ingested_at, &sink_batches);
        self.room_in_lanes(&sink_batches, shutdown).await;
        self.hand_to_lanes(
            &mut sink_batches,
            taken.commit.map(|commit| commit.commit_lsn),
        );
        if let Some(commit) = taken.commit {
            self.handed_through = self.handed_through.max(commit.end_lsn);
        }
        // What is left for the store (lanes took the rest).
        let any_message = sink_batches.iter().any(|batch| !batch.messages.is_empty());
        let after = Appended {
            ingested,
            commit: taken.commit,
            any_message,
            chunks: std::mem::take(&mut self.chunks),
        };
        // Appends go one at a time, in order.
        self.finish_append(shutdown).await?;
        if taken.commit.is_some() {
            for sink in &self.sinks {
                let stored = cursors.entry(sink.name().to_string()).or_default();
                *stored = stored.after_commit(cursor);
            }
        }
        if sink_batches.is_empty() && after.chunks.is_empty()
            || !(any_message || any_held || taken.commit.is_some() || !after.chunks.is_empty())
        {
            self.after_stored(after, shutdown).await?;
            return Ok(true);
        }
        // A clean batch stores while the next one is processed. One that
        // held a change or dead-lettered one is finished at once, as the
        // next batch must see its holds.
        let clean = !any_held && sink_batches.iter().all(|b| b.dead_letters.is_empty());
        self.in_flight = Some(InFlightAppend::start(
            &self.store,
            sink_batches,
            (cursor, taken.open_through),
            after,
        ));
        if !clean {
            self.finish_append(shutdown).await?;
        }
        Ok(true)
    }

    /// Waits for the last batch's store transaction, if one is running, and
    /// does what had to wait for it.
    async fn finish_append(&mut self, shutdown: &CancellationToken) -> Result<(), PipelineError> {
        if self.in_flight.is_none() {
            return Ok(());
        }
        let stored = append::finished(&mut self.in_flight).await;
        self.after_append(stored, shutdown).await
    }

    /// Once the running store transaction is `stored`: fails the pipeline
    /// if it failed, else does what waited for it.
    async fn after_append(
        &mut self,
        stored: Result<Result<(), weft_store::StoreError>, tokio::task::JoinError>,
        shutdown: &CancellationToken,
    ) -> Result<(), PipelineError> {
        let Some(append) = self.in_flight.take() else {
            return Ok(());
        };
        stored??;
        self.after_stored(append.after, shutdown).await
    }

    /// What waits until a batch is durable: latency metrics, waking pull
    /// consumers, recording backfill chunks, confirming the batch's commit
    /// to Postgres; then starting runs of due held changes.
    async fn after_stored(
        &mut self,
        after: Appended,
        shutdown: &CancellationToken,
    ) -> Result<(), PipelineError> {
        for (sink, committed) in after.ingested {
            weft_core::metrics::record_ingestion_latency(&sink, committed);
        }
        if after.any_message {
            for sink in &self.sinks {
                self.handles.wake(sink.name());
            }
        }
        self.record_stored_chunks(after.chunks).await?;
        if let Some(commit) = after.commit {
            self.last_commit = self.last_commit.max(commit.commit_lsn);
            self.confirm(commit.end_lsn)?;
        }
        if !shutdown.is_cancelled() {
            self.start_held_runs().await;
        }
        Ok(())
    }

    /// Records the progress of backfill chunks whose rows are stored.
    async fn record_stored_chunks(&self, chunks: Vec<ChunkStored>) -> Result<(), PipelineError> {
        if chunks.is_empty() {
            return Ok(());
        }
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            chunks
                .into_iter()
                .try_for_each(|chunk| chunk.record(&store))
        })
        .await??;
        Ok(())
    }

    /// Starts a run of due held changes (see [`SinkPipeline::held_run`])
    /// for each sink without one under way. The runs go on beside the feed,
    /// and the loop settles each once it is done; meanwhile the sink's new
    /// changes are held behind it. A failure to read the held changes is
    /// logged and left for the next round: held changes stay held.
    async fn start_held_runs(&mut self) {
        for index in 0..self.sinks.len() {
            let sink = &self.sinks[index];
            if self.releasing.contains(sink.name()) {
                continue;
            }
            let due = match sink.due_held(&self.store, HELD_RELEASE_BATCH).await {
                Ok(due) if due.is_empty() => continue,
                Ok(due) => due,
                Err(error) => {
                    warn!(sink = sink.name(), %error, "cannot read the sink's held changes; trying again later");
                    continue;
                }
            };
            let (name, generation) = (sink.name().to_string(), self.sink_generation);
            let lane = self.lane_of(&name);
            let run = self.sinks[index].held_run(due);
            self.releasing.insert(name.clone());
            self.held_runs.spawn(async move {
                let run = run.await;
                // The lane may still hold an older message of a group the
                // run releases, and the worker delivers the lane and the
                // store side by side: stored first, the released message
                // could overtake it. While the run is under way the lane
                // gets nothing new (the sink's new changes are held), so
                // this wait ends.
                if let Some(lane) = lane {
                    lane.emptied().await;
                }
                (name, generation, run)
            });
        }
    }

    /// Stores what a finished run of held changes came to, unless its sink
    /// left or was replaced meanwhile (its changes stay held, for the next
    /// run). A run that failed is logged; its changes stay held too.
    async fn settle_held_run(&mut self, done: Result<HeldRunDone, tokio::task::JoinError>) {
        let (name, generation, run) = match done {
            Ok(done) => done,
            Err(error) => {
                // A run's future only awaits; a panic in it is a bug. No
                // sink can be named: every sink may start a run again.
                warn!(%error, "a run of held changes failed; they stay held");
                self.releasing.clear();
                return;
            }
        };
        self.releasing.remove(&name);
        if generation != self.sink_generation {
            return;
        }
        let Some(sink) = self.sinks.iter_mut().find(|sink| sink.name() == name) else {
            return;
        };
        let settled = match run {
            Ok(run) => sink.settle_held_run(run, &self.store).await,
            Err(error) => Err(error),
        };
        match settled {
            Ok(0) => {}
            Ok(_) => {
                // The released messages are in the store, and their
                // groups are held no longer: the groups' next messages
                // must follow them through the store, not overtake them
                // through memory. The lane spills until the store is
                // drained.
                if let Some(lane) = self.lane_of(&name) {
                    lane.spill();
                }
                self.handles.wake(&name);
            }
            Err(error) => {
                warn!(sink = %name, %error, "cannot release held changes; trying again later");
            }
        }
    }

    /// Applies the changes to the set of sinks received so far; the
    /// pipeline is between two transactions.
    async fn apply_sink_changes(
        &mut self,
        cursors: &mut HashMap<String, StoredUpTo>,
        shutdown: &CancellationToken,
    ) -> Result<(), PipelineError> {
        // A joining sink starts after the last stored transaction.
        self.finish_append(shutdown).await?;
        for request in std::mem::take(&mut self.pending_sink_changes) {
            self.sink_generation += 1;
            match request.change {
                SinkSetChange::Put { sink, starts_here } => {
                    let name = sink.name().to_string();
                    self.handles.put_breaker(&name, sink.breaker().clone());
                    if starts_here {
                        let (store, at) = (self.store.clone(), self.last_commit);
                        let sink_name = name.clone();
                        tokio::task::spawn_blocking(move || store.start_sink_at(&sink_name, at))
                            .await??;
                        cursors.insert(name.clone(), StoredUpTo::through(at));
                    } else if !cursors.contains_key(&name) {
                        // Read as at start: a sink joining while Postgres
                        // resends the transactions before one it had stored
                        // part of must not store that part twice.
                        let (store, sink_name) = (self.store.clone(), name.clone());
                        let stored = tokio::task::spawn_blocking(move || {
                            store.sink_stored_up_to(&sink_name)
                        })
                        .await??;
                        cursors.insert(
                            name.clone(),
                            stored.unwrap_or(StoredUpTo::through(self.last_commit)),
                        );
                    }
                    match self.sinks.iter_mut().find(|s| s.name() == name) {
                        Some(running) => *running = *sink,
                        None => self.sinks.push(*sink),
                    }
                    info!(sink = %name, starts_here, at = %cursors[&name].cursor, "sink joined the pipeline");
                }
                SinkSetChange::Remove(name) => {
                    self.sinks.retain(|sink| sink.name() != name);
                    // What this feed handed over says nothing of where the
                    // sink is in the stream it reads next.
                    if let Some(lane) = self.lanes.remove(&name) {
                        lane.forget_through();
                    }
                    cursors.remove(&name);
                    info!(sink = %name, "sink left the pipeline");
                }
            }
            // The requester may have given up waiting; the change stands.
            let _ = request.applied.send(());
        }
        Ok(())
    }

    /// Moves the sinks whose messages go through memory lanes to them:
    /// each such sink's messages leave `sink_batches` for its lane, and its
    /// batch stays only for what must be stored anyway (held changes and
    /// function dead letters), without moving its cursor. A lane that is
    /// closed (its worker stopping) refuses them, and they are stored.
    /// `through` is the commit LSN of the transaction the batch ends, if
    /// it ends one.
    fn hand_to_lanes(
        &mut self,
        sink_batches: &mut Vec<weft_store::SinkBatch>,
        through: Option<Lsn>,
    ) {
        let after = self.handed_through;
        sink_batches.retain_mut(|batch| {
            let Some(lane) = self.lane_of(&batch.sink) else {
                return true;
            };
            let messages = std::mem::take(&mut batch.messages);
            let count = messages.len();
            // Even when the lane refuses them, the cursor stays: the lane's
            // older messages may not be stored yet, and a cursor past them
            // would make a restart skip them.
            batch.leaves_cursor = true;
            match lane.send(messages, after, through) {
                Ok(()) => {
                    weft_core::metrics::count(
                        weft_core::metrics::MESSAGES_INGESTED,
                        &batch.sink,
                        count,
                    );
                    self.lanes.insert(batch.sink.clone(), lane);
                    !(batch.holds.is_empty() && batch.dead_letters.is_empty())
                }
                Err(refused) => {
                    batch.messages = refused;
                    true
                }
            }
        });
    }

    /// The memory lane the messages of `sink` go to, if any: a push sink's,
    /// unless its backlog is counted in the store (`max_backlog_messages`).
    fn lane_of(&self, sink: &str) -> Option<Lane> {
        self.sinks
            .iter()
            .find(|running| running.name() == sink)
            .is_some_and(|running| running.config().max_backlog_messages.is_none())
            .then(|| self.handles.lane(sink))
            .flatten()
    }

    /// Waits until each lane that `sink_batches` sends messages to has
    /// room (see [`Lane::room`]): a destination slower than the feed slows
    /// the feed rather than filling memory, for up to [`LANE_PATIENCE`]
    /// per batch; a lane that stays full that long spills to the store.
    async fn room_in_lanes(
        &self,
        sink_batches: &[weft_store::SinkBatch],
        shutdown: &CancellationToken,
    ) {
        for batch in sink_batches
            .iter()
            .filter(|batch| !batch.messages.is_empty())
        {
            if let Some(lane) = self.lane_of(&batch.sink) {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    made = lane.room(LANE_PATIENCE) => if !made {
                        warn!(sink = %batch.sink, "the sink's memory lane stayed full for {LANE_PATIENCE:?} (its destination is slower than the feed); its messages wait in the store until it catches up");
                    },
                }
            }
        }
    }

    /// Confirms what every store transaction and every lane allow: up to
    /// `stored`, which the store now holds everything before.
    fn confirm(&mut self, stored: Lsn) -> Result<(), PipelineError> {
        self.stored_through = self.stored_through.max(stored);
        self.confirm_held()
    }

    /// Confirms up to where the store and the lanes hold the feed back;
    /// fails when a lane lost messages.
    fn confirm_held(&mut self) -> Result<(), PipelineError> {
        let mut lsn = self.stored_through;
        for (sink, lane) in &self.lanes {
            if lane.is_lost() {
                return Err(PipelineError::LaneLost(sink.clone()));
            }
            if let Some(held) = lane.holds_back() {
                lsn = lsn.min(held);
            }
        }
        self.publish(lsn);
        Ok(())
    }

    fn publish(&self, lsn: Lsn) {
        self.durable.send_if_modified(|current| {
            if lsn > *current {
                *current = lsn;
                true
            } else {
                false
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use weft_core::change::{Action, Change, Column, Relation};
    use weft_sinks::config::Config;

    fn change(commit_lsn: u64, commit_idx: u32) -> SourceEvent {
        let relation = Arc::new(Relation {
            oid: 1,
            schema: "public".into(),
            name: "orders".into(),
            columns: vec![Column {
                name: "id".into(),
                type_oid: 23,
                type_modifier: -1,
                is_identity_key: true,
            }],
            primary_key: vec!["id".into()],
        });
        let mut new = weft_core::change::Row::new();
        new.insert("id".into(), serde_json::json!(commit_idx));
        SourceEvent::Change(Change {
            relation,
            action: Action::Insert,
            commit_lsn: Lsn(commit_lsn),
            commit_idx,
            xid: 7,
            commit_timestamp: chrono::Utc::now(),
            new: Some(new),
            old: None,
            backfill: None,
            webhook: None,
        })
    }

    /// One database and the pull sink `orders`, with `settings` (YAML
    /// flow-map entries, each ending in a comma) on the sink.
    fn orders_config(dir: &std::path::Path, settings: &str) -> Config {
        Config::from_yaml(
            &format!(
                "databases:
  - {{name: db, hostname: h, database: d, slot: {{name: s}}, publication: {{name: p}}}}
sinks:
  - {{name: orders, database: db, {settings} destination: {{type: sequin_stream}}}}
"
            ),
            dir,
            &|_| None,
        )
        .unwrap()
    }

    /// A pipeline of the one sink of `config`, in batches of 10 changes.
    fn orders_pipeline(config: &Config, store: &Store, durable: watch::Sender<Lsn>) -> Pipeline {
        Pipeline::new(
            vec![SinkPipeline::new(
                config.sinks[0].clone(),
                FunctionChain::default(),
            )],
            store.clone(),
            durable,
            SinkHandles::new(),
            BatchLimits {
                max_changes: 10,
                max_bytes: usize::MAX,
            },
        )
    }

    /// The Commit of the transaction at `lsn`.
    fn commit(lsn: u64) -> SourceEvent {
        SourceEvent::Commit {
            commit_lsn: Lsn(lsn),
            end_lsn: Lsn(lsn + 1),
        }
    }

    fn watermark(token: &str, mark: &str, lsn: u64) -> SourceEvent {
        SourceEvent::Watermark(weft_core::change::Watermark {
            content: serde_json::json!({"token": token, "mark": mark}).to_string(),
            commit_lsn: Lsn(lsn),
            commit_idx: 0,
            xid: 9,
            commit_timestamp: chrono::Utc::now(),
        })
    }

    #[tokio::test]
    async fn a_backfill_chunk_counts_as_stored_with_its_rows_before_its_watermark_commits() {
        let dir = tempfile::tempdir().unwrap();
        let config = orders_config(dir.path(), "max_backlog_messages: 5,");
        let store = Store::open(&dir.path().join("weft.db")).unwrap();
        store
            .create_backfill(
                "b",
                "orders",
                ("public", "orders"),
                &Default::default(),
                None,
            )
            .unwrap();
        let backfills = Backfills::new();
        let relation = match change(0, 0) {
            SourceEvent::Change(change) => change.relation,
            _ => unreachable!(),
        };
        let tag = Arc::new(weft_core::change::BackfillTag {
            id: "b".into(),
            sink: "orders".into(),
        });
        let generation = backfills.restart("b");
        let stored = backfills.expect("t1", tag, generation, relation);
        let shutdown = CancellationToken::new();
        let (durable_tx, _durable) = watch::channel(Lsn::ZERO);
        let pipeline =
            orders_pipeline(&config, &store, durable_tx).with_backfills(backfills.clone());
        let (events, rx) = weft_source::events::channel(64, weft_source::events::MAX_BYTES);
        let running = tokio::spawn(pipeline.run(rx, shutdown.clone()));
        let rows = (1..=12)
            .map(|id| {
                let row = serde_json::json!({ "id": id }).to_string();
                (vec![id.to_string()], row.into())
            })
            .collect();
        backfills.fill(
            "t1",
            (rows, Vec::new()),
            (None, Some(vec!["12".into()])),
            false,
        );
        events.send(watermark("t1", "low", 50)).await.unwrap();
        events.send(watermark("t1", "high", 100)).await.unwrap();
        // The next batch (the watermark's Commit and a later transaction)
        // meets a full backlog and waits for consumers, which never come:
        // the chunk must count as stored all the same.
        events.send(commit(100)).await.unwrap();
        for idx in 0..10 {
            events.send(change(200, idx)).await.unwrap();
        }
        tokio::time::timeout(Duration::from_secs(10), stored)
            .await
            .expect("the chunk counts as stored once its 12 rows are")
            .unwrap();
        let progress = store.backfill("b").unwrap().unwrap();
        assert_eq!(progress.cursor, Some(vec!["12".to_string()]));
        assert_eq!(store.message_counts("orders").unwrap().stored, 12);
        assert_eq!(
            store.sink_cursor("orders").unwrap().unwrap_or(Lsn::ZERO),
            Lsn::ZERO,
            "the cursor waits for the commit"
        );
        shutdown.cancel();
        running.await.unwrap().unwrap();
    }

    /// When the sink `orders` joins the pipeline of [`run_until`].
    #[derive(Clone, Copy)]
    enum OrdersJoins {
        /// It is in the pipeline when it starts.
        AtStart,
        /// The pipeline starts with no sink; `orders` joins through a
        /// sink-set change that carries on from what it stored, before the
        /// events.
        Later,
    }

    /// Sends `events` to a pipeline over `store` until `done` holds for
    /// the store, then stops it.
    async fn run_until(
        config: &Config,
        store: &Store,
        joins: OrdersJoins,
        events: Vec<SourceEvent>,
        done: impl Fn(&Store) -> bool,
    ) {
        let shutdown = CancellationToken::new();
        let (durable_tx, _durable) = watch::channel(Lsn::ZERO);
        let mut pipeline = orders_pipeline(config, store, durable_tx);
        let joining = match joins {
            OrdersJoins::AtStart => None,
            OrdersJoins::Later => {
                let (sink_set, sink_changes) = SinkSetHandle::channel();
                pipeline.sinks.clear();
                pipeline = pipeline.with_sink_changes(sink_changes);
                Some(sink_set)
            }
        };
        let (sender, rx) = weft_source::events::channel(4, weft_source::events::MAX_BYTES);
        let running = tokio::spawn(pipeline.run(rx, shutdown.clone()));
        if let Some(sink_set) = joining {
            let sink = SinkPipeline::new(config.sinks[0].clone(), FunctionChain::default());
            sink_set
                .apply(SinkSetChange::Put {
                    sink: Box::new(sink),
                    starts_here: false,
                })
                .await
                .unwrap();
        }
        for event in events {
            sender.send(event).await.unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done(store) {
            assert!(std::time::Instant::now() < deadline, "not done in 10 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        shutdown.cancel();
        running.await.unwrap().unwrap();
    }

    /// Two small transactions, at 50 and 60. (`change` writes row id =
    /// commit_idx: distinct rows, so all of them go out at once.)
    fn small_transactions() -> Vec<SourceEvent> {
        vec![change(50, 100), commit(50), change(60, 101), commit(60)]
    }

    /// The small transactions, then the first chunks of a big one (at
    /// 300), as weft stored them before a crash.
    fn before_the_crash() -> Vec<SourceEvent> {
        let mut events = small_transactions();
        events.extend((0..35).map(|idx| change(300, idx)));
        events
    }

    /// What Postgres sends after the crash, from the slot's confirmed
    /// position, which trails the store: the small transactions again,
    /// then the big one whole (40 changes) with its Commit.
    fn after_the_crash() -> Vec<SourceEvent> {
        let mut events = small_transactions();
        events.extend((0..40).map(|idx| change(300, idx)));
        events.push(commit(300));
        events
    }

    /// Runs [`before_the_crash`] into `store` and acks everything stored
    /// (so that storing any of it again would show); returns how many
    /// changes of the big transaction were stored.
    async fn store_and_ack_before_the_crash(config: &Config, store: &Store) -> usize {
        let stored = |store: &Store| store.message_counts("orders").unwrap().stored;
        run_until(
            config,
            store,
            OrdersJoins::AtStart,
            before_the_crash(),
            |store| stored(store) >= 32,
        )
        .await;
        let limits = weft_store::ReceiveLimits {
            ack_wait: Duration::from_secs(60),
            max_ack_pending: u32::MAX,
            max_deliver: None,
        };
        let acked: Vec<_> = store
            .receive("orders", 1000, limits)
            .unwrap()
            .into_iter()
            .map(|delivered| delivered.ack_id)
            .collect();
        let big_part = acked.len() - 2;
        store.ack("orders", &acked).unwrap();
        assert_eq!(
            store.sink_stored_up_to("orders").unwrap(),
            Some(StoredUpTo {
                cursor: Lsn(60),
                open: Some((Lsn(300), big_part as u32 - 1))
            })
        );
        big_part
    }

    #[tokio::test]
    async fn after_a_restart_replayed_transactions_store_nothing_twice() {
        for joins in [OrdersJoins::AtStart, OrdersJoins::Later] {
            let dir = tempfile::tempdir().unwrap();
            let config = orders_config(dir.path(), "");
            let store = Store::open(&dir.path().join("weft.db")).unwrap();
            let big_part = store_and_ack_before_the_crash(&config, &store).await;
            run_until(&config, &store, joins, after_the_crash(), |store| {
                store.sink_cursor("orders").unwrap() == Some(Lsn(300))
            })
            .await;
            assert_eq!(
                store.message_counts("orders").unwrap().stored,
                40 - big_part as u64,
                "only the part of the big transaction not stored before ({})",
                match joins {
                    OrdersJoins::AtStart => "the sink in the pipeline from its start",
                    OrdersJoins::Later => "the sink joining the running pipeline",
                }
            );
        }
    }

    #[tokio::test]
    async fn a_crash_while_the_stored_part_is_replayed_stores_nothing_twice() {
        let dir = tempfile::tempdir().unwrap();
        let config = orders_config(dir.path(), "");
        let store = Store::open(&dir.path().join("weft.db")).unwrap();
        let big_part = store_and_ack_before_the_crash(&config, &store).await;
        // After the first crash weft gets as far as one batch: the small
        // transactions again and the first changes of the big one, all
        // stored before. Queued before the pipeline starts, they make one
        // batch, which commits 60 and ends inside the stored part.
        let mut replayed = small_transactions();
        replayed.extend((0..5).map(|idx| change(300, idx)));
        let shutdown = CancellationToken::new();
        let (durable_tx, mut durable) = watch::channel(Lsn::ZERO);
        let pipeline = orders_pipeline(&config, &store, durable_tx);
        let (sender, rx) =
            weft_source::events::channel(replayed.len(), weft_source::events::MAX_BYTES);
        for event in replayed {
            sender.send(event).await.unwrap();
        }
        let running = tokio::spawn(pipeline.run(rx, shutdown.clone()));
        tokio::time::timeout(
            Duration::from_secs(10),
            durable.wait_for(|confirmed| *confirmed == Lsn(61)),
        )
        .await
        .expect("the batch with the replayed Commit is stored")
        .unwrap();
        shutdown.cancel();
        running.await.unwrap().unwrap();
        assert_eq!(
            store.sink_stored_up_to("orders").unwrap().unwrap().open,
            Some((Lsn(300), big_part as u32 - 1)),
            "the stored part is remembered whole"
        );
        // The second crash; then Postgres sends everything again.
        run_until(
            &config,
            &store,
            OrdersJoins::AtStart,
            after_the_crash(),
            |store| store.sink_cursor("orders").unwrap() == Some(Lsn(300)),
        )
        .await;
        assert_eq!(
            store.message_counts("orders").unwrap().stored,
            40 - big_part as u64,
            "only the part of the big transaction not stored before"
        );
    }

    #[tokio::test]
    async fn a_big_transaction_is_stored_in_chunks_and_confirmed_only_at_its_commit() {
        let dir = tempfile::tempdir().unwrap();
        let config = orders_config(dir.path(), "");
        let store = Store::open(&dir.path().join("weft.db")).unwrap();
        let shutdown = CancellationToken::new();
        let (durable_tx, mut durable) = watch::channel(Lsn::ZERO);
        let pipeline = orders_pipeline(&config, &store, durable_tx);
        let (events, rx) = weft_source::events::channel(4, weft_source::events::MAX_BYTES);
        let running = tokio::spawn(pipeline.run(rx, shutdown.clone()));
        // 35 changes of one transaction pass through a 4-slot channel and
        // 10-change batches: they are stored before the commit arrives.
        for idx in 0..35 {
            events.send(change(100, idx)).await.unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while store.message_counts("orders").unwrap().stored < 30 {
            assert!(
                std::time::Instant::now() < deadline,
                "chunks were not stored"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            store.sink_cursor("orders").unwrap().unwrap_or(Lsn::ZERO),
            Lsn::ZERO
        );
        assert_eq!(
            *durable.borrow(),
            Lsn::ZERO,
            "nothing confirmed before the commit"
        );
        // An Idle in the middle of the transaction confirms nothing either.
        events
            .send(SourceEvent::Idle { wal_end: Lsn(500) })
            .await
            .unwrap();
        // A reconnect re-sends the transaction from its start.
        for idx in 0..40 {
            events.send(change(100, idx)).await.unwrap();
        }
        events.send(commit(100)).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), durable.changed())
            .await
            .expect("confirmed after the commit")
            .unwrap();
        assert_eq!(*durable.borrow(), Lsn(101));
        assert_eq!(store.sink_cursor("orders").unwrap(), Some(Lsn(100)));
        assert_eq!(store.message_counts("orders").unwrap().stored, 40);
        shutdown.cancel();
        running.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_lane_takes_the_messages_and_holds_the_confirmation_until_they_settle() {
        let dir = tempfile::tempdir().unwrap();
        let config = orders_config(dir.path(), "");
        let store = Store::open(&dir.path().join("weft.db")).unwrap();
        let shutdown = CancellationToken::new();
        let (durable_tx, mut durable) = watch::channel(Lsn::ZERO);
        let handles = SinkHandles::new();
        let lane = handles.lane_for("orders", 1 << 20);
        let pipeline = Pipeline::new(
            vec![SinkPipeline::new(
                config.sinks[0].clone(),
                FunctionChain::default(),
            )],
            store.clone(),
            durable_tx,
            handles,
            BatchLimits {
                max_changes: 10,
                max_bytes: usize::MAX,
            },
        );
        let (events, rx) = weft_source::events::channel(16, weft_source::events::MAX_BYTES);
        let running = tokio::spawn(pipeline.run(rx, shutdown.clone()));
        for idx in 0..3 {
            events.send(change(100, idx)).await.unwrap();
        }
        events.send(commit(100)).await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while lane.depth().queued < 3 {
            assert!(std::time::Instant::now() < deadline, "the lane got nothing");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Give a wrong confirmation time to happen.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(*durable.borrow(), Lsn::ZERO, "the lane holds the slot back");
        assert_eq!(
            store.message_counts("orders").unwrap().stored,
            0,
            "nothing stored"
        );
        let taken = lane.take(10, usize::MAX);
        assert_eq!(taken.messages.len(), 3);
        lane.settle(
            taken,
            vec![weft_sinks::delivery::DeliveryOutcome::Delivered; 3],
        );
        tokio::time::timeout(
            Duration::from_secs(10),
            durable.wait_for(|lsn| *lsn == Lsn(101)),
        )
        .await
        .expect("confirmed once the lane settled")
        .unwrap();
        assert_eq!(
            store.sink_cursor("orders").unwrap(),
            None,
            "the cursor stays: the lane's messages were never stored"
        );
        shutdown.cancel();
        running.await.unwrap().unwrap();
    }
}
