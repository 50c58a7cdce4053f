//! One sink's view of the stream: which changes it takes, the function
//! chain it runs on them (see [`super::chain`]), and what becomes of a
//! change a function fails on: a transient failure holds the change (and
//! its group's later changes) in the store for a retry after a backoff, up
//! to the sink's `max_retry_count`; a permanent failure, or a change a
//! function traps on, becomes a dead letter at once and its group
//! proceeds. Either way the stream, the slot and the other groups go on.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, warn};

use weft_core::change::{Action, Change};
use weft_core::lsn::Lsn;
use weft_core::message::json::{self, JsonCache};
use weft_core::message::{ConsumerRef, Message, SharedTexts};
use weft_sinks::config::SinkConfig;
use weft_sinks::delivery::{DeliveryLimits, RetryPolicy};
use weft_sinks::route;
use weft_sinks::sink::SinkKind;
use weft_store::{
    HeldChange, HeldSettlement, Hold, NewDeadLetter, NewMessage, SinkBatch, Store, StoreError,
    StoredPayload,
};
use weft_wasm::{Payload, Route};

use super::backlog::BacklogGuard;
use super::breaker::Breaker;
use super::chain::{ChainMessage, ChainOutcome, ChainRunError, FunctionChain};

/// Why a sink could not turn a batch of changes into messages. Every
/// variant makes the pipeline retry the batch later; nothing is stored or
/// confirmed until it succeeds. (A function failing on a change is not an
/// error here: that change is held for a retry or dead-lettered.)
#[derive(Debug, thiserror::Error)]
pub enum SinkPipelineError {
    /// A function failed as a whole for a reason no change causes (e.g. an
    /// instance could not be created), or its blocking task died.
    #[error(transparent)]
    Chain(#[from] ChainRunError),
    /// The store could not be read.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// Shutdown came while waiting.
    #[error("shutting down")]
    ShuttingDown,
}

/// The part of a sink that runs in the pipeline.
pub struct SinkPipeline {
    config: SinkConfig,
    consumer: ConsumerRef,
    /// The config's database name, shared by every message.
    database_name: Arc<str>,
    chain: FunctionChain,
    /// Its sink type: its routing keys' defaults, whether it carries bytes.
    kind: &'static SinkKind,
    /// [`SinkPipeline::plugins`].
    plugins: String,
    backlog: Option<BacklogGuard>,
    retry: RetryPolicy,
    breaker: Breaker,
    /// Time the sink owes for whole calls on the feed that trapped (see
    /// [`TRAP_COOLDOWN_FACTOR`]): its next run of held changes waits it out.
    owed: Duration,
    /// The metadata JSON the sink's consecutive messages share.
    json_cache: JsonCache,
}

/// After a run of held changes in which a function trapped (or timed out,
/// ran out of memory, returned bad output), the sink's next run of held
/// changes waits this many times as long as the run took. A hostile
/// function so gets at most a third of a core, leaving the rest to other
/// tenants, until the breaker quarantines it; runs without traps are
/// never slowed, and the feed and the other sinks never wait for it.
pub const TRAP_COOLDOWN_FACTOR: u32 = 2;

/// A sink's changes on their way to becoming messages (see
/// [`SinkPipeline::prepare`]). [`SinkPipeline::process`] leaves them in
/// place until nothing can fail any more, so the pipeline can run them
/// again after a failure without keeping a copy.
pub struct Prepared {
    /// Changes not turned into messages yet, in commit order.
    changes: Vec<Change>,
    /// The messages of the changes before them, made once a step needs
    /// them side by side (functions, holds, the store's held groups).
    /// Without functions, each message goes straight into the batch
    /// instead, and none is kept here.
    pending: Vec<Pending>,
}

impl Prepared {
    fn is_empty(&self) -> bool {
        self.changes.is_empty() && self.pending.is_empty()
    }
}

/// A change on its way through a sink: its message and group.
#[derive(Clone)]
struct Pending {
    message: Message,
    group_id: String,
    /// Function attempts that failed before this one.
    attempts: u32,
}

impl SinkPipeline {
    /// The pipeline of the sink configured as `config`, with its functions
    /// already loaded into `chain`.
    pub fn new(config: SinkConfig, chain: FunctionChain) -> Self {
        let retry = match config.destination.delivery() {
            Some(delivery) => DeliveryLimits::resolve(&config, delivery).retry,
            None => RetryPolicy::default(),
        };
        SinkPipeline {
            kind: config.destination.kind(),
            consumer: ConsumerRef::for_sink(&config.name),
            database_name: config.database_name().into(),
            backlog: BacklogGuard::new(&config),
            breaker: Breaker::new(&config.name, config.quarantine_after_traps),
            retry,
            config,
            plugins: plugin_names(&chain),
            chain,
            owed: Duration::ZERO,
            json_cache: JsonCache::default(),
        }
    }

    /// The sink's backlog bound, if it has one.
    pub fn backlog_mut(&mut self) -> Option<&mut BacklogGuard> {
        self.backlog.as_mut()
    }

    /// The sink's functions as `kind=name` pairs, for logs; `-` for none.
    pub fn plugins(&self) -> &str {
        &self.plugins
    }

    /// The sink's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The sink's quarantine breaker (shared with the API).
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// The sink's config.
    pub fn config(&self) -> &SinkConfig {
        &self.config
    }

    /// Whether this sink takes `change` (its tables and actions, only its
    /// own backfills' reads, and only its webhook source's messages; the
    /// filter function comes later, in the chain).
    pub fn accepts(&self, change: &Change) -> bool {
        if let Some(read) = &change.backfill
            && read.tag.sink != self.config.name
        {
            return false;
        }
        if let Some(tag) = &change.webhook {
            return self.config.source.webhook.as_ref() == Some(&tag.source)
                && self.config.actions.contains(change.action);
        }
        self.config.accepts(
            &change.relation.schema,
            &change.relation.name,
            change.action,
        ) && self.passes_column_filters(change)
    }

    /// Whether `change` passes the sink's column-value filters: read from
    /// the new row, or from the old row of a delete.
    fn passes_column_filters(&self, change: &Change) -> bool {
        let filters = &self.config.column_filters;
        if filters.is_empty() {
            return true;
        }
        if change.backfill.is_some() {
            return weft_sinks::config::column_filter::all_match(filters, &change.record());
        }
        let row = match change.action {
            Action::Delete => change.old.as_ref(),
            _ => change.new.as_ref(),
        };
        row.is_some_and(|row| weft_sinks::config::column_filter::all_match(filters, row))
    }

    /// `changes`, which the caller found this sink takes (see
    /// [`Self::accepts`]), ready for [`Self::process`].
    pub fn prepare(&self, changes: Vec<Change>) -> Prepared {
        debug_assert!(changes.iter().all(|change| self.accepts(change)));
        Prepared {
            changes,
            pending: Vec::new(),
        }
    }

    /// Turns the changes of `prepared` not yet turned into messages; their
    /// rows move into the messages.
    fn make_messages(&self, prepared: &mut Prepared) {
        let changes = std::mem::take(&mut prepared.changes);
        let mut shared = SharedTexts::default();
        prepared.pending.extend(
            changes
                .into_iter()
                .map(|change| self.pending_of(change, &mut shared)),
        );
    }

    /// The message of `change`, with its group.
    fn pending_of(&self, change: Change, shared: &mut SharedTexts) -> Pending {
        let message = Message::from_change(change, &self.database_name, &self.consumer, shared);
        Pending {
            group_id: group_id(&message),
            message,
            attempts: 0,
        }
    }

    /// Turns `prepared` into what to store for this sink: the messages its
    /// functions produce (none for changes the filter drops), dead letters
    /// for changes a function failed on for good, and held changes (a
    /// transient failure, a group with an earlier held change, or a
    /// quarantined sink). Without functions, and with nothing held, the
    /// messages move out of `prepared` into the batch.
    ///
    /// `behind_a_run`: a run of the sink's held changes is under way (see
    /// [`Self::held_run`]); every change is held behind it, so that the
    /// feed never calls a function that may be bisecting a hostile batch.
    pub async fn process(
        &mut self,
        prepared: &mut Prepared,
        store: &Store,
        behind_a_run: bool,
    ) -> Result<SinkBatch, SinkPipelineError> {
        let mut batch = SinkBatch::of(self.name(), Vec::new());
        if prepared.is_empty() {
            return Ok(batch);
        }
        if self.breaker.is_open() || behind_a_run {
            self.make_messages(prepared);
            batch.holds = prepared.pending.iter().map(|p| hold(p, None)).collect();
            return Ok(batch);
        }
        // Changes of groups with a held change wait behind it.
        let (reader, sink) = (store.clone(), self.name().to_string());
        let held_groups = if tokio::task::spawn_blocking(move || reader.has_held(&sink))
            .await
            .map_err(ChainRunError::Task)??
        {
            self.make_messages(prepared);
            let groups: Vec<String> = prepared
                .pending
                .iter()
                .map(|p| p.group_id.clone())
                .collect();
            let (reader, sink) = (store.clone(), self.name().to_string());
            tokio::task::spawn_blocking(move || {
                reader.held_groups(&sink, groups.iter().map(String::as_str))
            })
            .await
            .map_err(ChainRunError::Task)??
        } else {
            HashSet::new()
        };
        if self.chain.is_empty() && held_groups.is_empty() {
            // Nothing can fail from here on: each change becomes its stored
            // message at once, its group and key moved, not copied.
            let made = std::mem::take(&mut prepared.pending);
            let changes = std::mem::take(&mut prepared.changes);
            let mut shared = SharedTexts::default();
            batch.messages.reserve(made.len() + changes.len());
            batch
                .messages
                .extend(made.into_iter().map(|p| self.message_as_it_is(p)));
            for change in changes {
                let pending = self.pending_of(change, &mut shared);
                batch.messages.push(self.message_as_it_is(pending));
            }
            return Ok(batch);
        }
        self.make_messages(prepared);
        let (run, wait): (Vec<&Pending>, Vec<&Pending>) = prepared
            .pending
            .iter()
            .partition(|p| !held_groups.contains(&p.group_id));
        batch.holds = wait.into_iter().map(|p| hold(p, None)).collect();
        if run.is_empty() {
            return Ok(batch);
        }
        // One call for the whole batch, never a bisection: that would hold
        // the feed, and every other sink of it, for as many calls as it
        // takes. A batch some change makes the call fail on is held whole,
        // and the sink's next run of held changes bisects it off the feed.
        let messages = run.iter().map(|p| p.message.clone()).collect();
        let started = std::time::Instant::now();
        let groups = run.iter().map(|p| p.group_id.as_str());
        let outcomes = match self.chain.run(messages, groups).await {
            Ok(outcomes) => outcomes,
            Err(ChainRunError::Chain(failure)) if failure.source.is_caused_by_input() => {
                self.owed += started.elapsed() * TRAP_COOLDOWN_FACTOR;
                warn!(sink = self.name(), changes = run.len(), error = %failure, "a function failed on the batch as a whole; its changes are held and run again off the feed, one part at a time, to find the changes it fails on");
                let why = format!("held while its batch is run again: {failure}");
                batch.holds.extend(
                    run.into_iter()
                        .map(|p| hold(p, Some((why.clone(), Duration::ZERO)))),
                );
                return Ok(batch);
            }
            Err(error) => return Err(error.into()),
        };
        let settled = self.sort_outcomes(&run, outcomes);
        batch.messages = settled.messages;
        batch.dead_letters = settled.dead_letters;
        batch.holds.extend(settled.retries);
        batch.holds.extend(settled.behind);
        Ok(batch)
    }

    /// Up to `limit` of the sink's held changes that are due to run again,
    /// in commit order; none while the sink is quarantined.
    pub async fn due_held(
        &self,
        store: &Store,
        limit: u32,
    ) -> Result<Vec<HeldChange>, SinkPipelineError> {
        if self.breaker.is_open() {
            return Ok(Vec::new());
        }
        let (reader, sink) = (store.clone(), self.name().to_string());
        Ok(
            tokio::task::spawn_blocking(move || reader.due_held(&sink, limit))
                .await
                .map_err(ChainRunError::Task)??,
        )
    }

    /// A run of the held changes `due` through the sink's functions,
    /// bisecting a batch a function fails on as a whole until the changes
    /// it fails on stand alone. It needs nothing of the pipeline, so that
    /// it runs beside the feed: a function that times out on every part of
    /// a bisection costs this sink's held changes alone. After a run in
    /// which a function trapped, it waits [`TRAP_COOLDOWN_FACTOR`] times as
    /// long as the run took before it returns, and first for what the
    /// feed's trapping whole calls owe.
    pub fn held_run(
        &mut self,
        due: Vec<HeldChange>,
    ) -> impl std::future::Future<Output = Result<HeldRun, SinkPipelineError>> + Send + 'static
    {
        let (chain, consumer) = (self.chain.clone(), self.consumer.clone());
        let owed = std::mem::take(&mut self.owed);
        async move {
            if !owed.is_zero() {
                debug!(
                    pause_ms = owed.as_millis() as u64,
                    "pausing the sink's held changes after a trapping call on the feed"
                );
                tokio::time::sleep(owed).await;
            }
            let mut run = HeldRun::default();
            for held in due {
                match serde_json::from_value::<Message>(held.message.clone()) {
                    Ok(mut message) => {
                        // A replayed dead letter goes to this sink as it is now.
                        message.metadata.consumer = consumer.clone();
                        run.pending.push(Pending {
                            message,
                            group_id: held.group_id,
                            attempts: held.attempts,
                        });
                    }
                    Err(error) => {
                        run.unreadable
                            .released
                            .push((held.commit_lsn, held.commit_idx));
                        run.unreadable.dead_letters.push(NewDeadLetter {
                            commit_lsn: held.commit_lsn,
                            commit_idx: held.commit_idx,
                            group_id: held.group_id,
                            idempotency_key: weft_core::message::idempotency_key(
                                held.commit_lsn,
                                held.commit_idx,
                            ),
                            message: held.message,
                            attempts: held.attempts,
                            error: format!(
                                "the held change is not a message weft can read: {error}"
                            ),
                        });
                    }
                }
            }
            if chain.is_empty() || run.pending.is_empty() {
                return Ok(run);
            }
            let messages = run.pending.iter().map(|p| p.message.clone()).collect();
            let started = std::time::Instant::now();
            run.outcomes = chain.run_bisecting(messages).await?;
            if run
                .outcomes
                .iter()
                .any(|o| matches!(o, ChainOutcome::Failed { trapped: true, .. }))
            {
                let pause = started.elapsed() * TRAP_COOLDOWN_FACTOR;
                debug!(
                    pause_ms = pause.as_millis() as u64,
                    "pausing the sink's held changes after trapping function calls"
                );
                tokio::time::sleep(pause).await;
            }
            Ok(run)
        }
    }

    /// Stores what `run` (see [`Self::held_run`]) made of the held changes
    /// it ran: messages, dead letters, and changes held again. Returns how
    /// many held changes were settled.
    pub async fn settle_held_run(
        &mut self,
        run: HeldRun,
        store: &Store,
    ) -> Result<usize, SinkPipelineError> {
        let HeldRun {
            pending,
            unreadable: mut settlement,
            outcomes,
        } = run;
        let keys: Vec<(Lsn, u32)> = pending
            .iter()
            .map(|p| (p.message.metadata.commit_lsn, p.message.metadata.commit_idx))
            .collect();
        let pending: Vec<&Pending> = pending.iter().collect();
        let settled = if self.chain.is_empty() {
            // Nothing can fail without functions: the messages are stored
            // as they are (copies: the held changes' path, seldom taken).
            Settled {
                messages: pending
                    .iter()
                    .map(|&p| self.message_as_it_is(p.clone()))
                    .collect(),
                ..Settled::default()
            }
        } else if outcomes.len() != pending.len() {
            // Outcomes that do not match the changes (a run made without
            // the functions the sink has now) settle nothing: zipping them
            // would release changes without their messages. The changes
            // stay held, for the next run.
            return Ok(0);
        } else {
            self.sort_outcomes(&pending, outcomes)
        };
        // Every change run is settled, except those held again (a retry,
        // or behind one): their rows stay, updated or untouched.
        let still_held: HashSet<(Lsn, u32)> = settled
            .retries
            .iter()
            .chain(&settled.behind)
            .map(|h| (h.change.commit_lsn, h.change.commit_idx))
            .collect();
        let count = keys.len() + settlement.released.len() - still_held.len();
        settlement
            .released
            .extend(keys.into_iter().filter(|k| !still_held.contains(k)));
        settlement.messages = settled.messages;
        settlement.dead_letters.extend(settled.dead_letters);
        // Those behind a retry keep their row as it is.
        settlement.holds = settled.retries;
        let (writer, sink) = (store.clone(), self.name().to_string());
        tokio::task::spawn_blocking(move || writer.settle_held(&sink, &settlement))
            .await
            .map_err(ChainRunError::Task)??;
        Ok(count)
    }

    /// Sorts the chain's `outcomes` for `pending` (commit order, aligned):
    /// messages to store, dead letters, and holds. After a transient
    /// failure, the later changes of its group are held behind it.
    fn sort_outcomes(&mut self, pending: &[&Pending], outcomes: Vec<ChainOutcome>) -> Settled {
        let mut settled = Settled::default();
        let mut blocked: HashSet<&str> = HashSet::new();
        for (original, outcome) in pending.iter().copied().zip(outcomes) {
            let group_id = original.group_id.as_str();
            if blocked.contains(group_id) {
                settled.behind.push(hold(original, None));
                continue;
            }
            match outcome {
                ChainOutcome::Message(done) => {
                    let position = (
                        done.message.metadata.commit_lsn,
                        done.message.metadata.commit_idx,
                    );
                    let ChainMessage {
                        message,
                        payload,
                        route,
                    } = *done;
                    match self.new_message(position, group_id, &message, payload, route) {
                        Ok(message) => settled.messages.push(message),
                        Err(error) => settled.dead_letters.push(dead_letter(
                            original,
                            original.attempts,
                            error,
                        )),
                    }
                }
                ChainOutcome::Dropped { .. } => {}
                ChainOutcome::Failed {
                    function,
                    kind,
                    error,
                    transient,
                    trapped,
                } => {
                    let error = format!("{kind} function {function}: {error}");
                    let attempt = original.attempts + 1;
                    metrics::counter!(
                        weft_core::metrics::FUNCTION_FAILURES,
                        "sink" => self.config.name.clone(),
                        "function" => function.clone(),
                        "kind" => kind,
                        "reason" => if trapped { "trap" } else if transient { "transient" } else { "permanent" },
                    )
                    .increment(1);
                    if trapped && self.breaker.record_trap(&function, &error) {
                        warn!(sink = self.name(), %function, "sink quarantined: its function keeps failing; its changes are held");
                    }
                    if transient && self.retry.may_retry(attempt) {
                        let delay = self.retry.delay(attempt);
                        debug!(sink = self.name(), %error, attempt, retry_in_ms = delay.as_millis() as u64, "function failed transiently; the change is held for a retry");
                        blocked.insert(group_id);
                        let mut retry = original.clone();
                        retry.attempts = attempt;
                        settled.retries.push(hold(&retry, Some((error, delay))));
                    } else {
                        warn!(sink = self.name(), idempotency_key = %original.message.metadata.idempotency_key, attempts = attempt, %error, "function failed on a change; it is dead-lettered and its group proceeds");
                        settled
                            .dead_letters
                            .push(dead_letter(original, attempt, error));
                    }
                }
            }
        }
        settled
    }

    /// The stored message for `message` as the chain left it, with the
    /// transform's `payload` and the routing function's `route` if any, or
    /// why the sink cannot carry it.
    fn new_message(
        &mut self,
        (commit_lsn, commit_idx): (Lsn, u32),
        group_id: &str,
        message: &Message,
        payload: Option<Payload>,
        route: Option<Route>,
    ) -> Result<NewMessage, String> {
        if let Some(Payload::Bytes { content_type, .. }) = &payload
            && !self.kind.carries_bytes
        {
            let transform = self
                .chain
                .transform
                .as_ref()
                .map(|t| t.name.as_str())
                .unwrap_or_default();
            return Err(format!(
                "transform {transform} returned a {content_type} bytes payload, but {} sinks carry JSON only; return JSON from the transform, or use a broker or webhook sink",
                self.kind.name
            ));
        }
        let route = self.route_of(message, group_id, route);
        let payload = match payload {
            Some(payload) => payload.into(),
            None => self.rendered(message),
        };
        Ok(NewMessage {
            commit_lsn,
            commit_idx,
            group_id: group_id.to_string(),
            idempotency_key: message.metadata.idempotency_key.clone(),
            payload,
            route,
        })
    }

    /// The stored message for `pending` when no function runs: the message
    /// JSON as it is, its group and key moved, not copied.
    fn message_as_it_is(&mut self, pending: Pending) -> NewMessage {
        let Pending {
            mut message,
            group_id,
            ..
        } = pending;
        let route = self.route_of(&message, &group_id, None);
        let payload = self.rendered(&message);
        let metadata = &mut message.metadata;
        NewMessage {
            commit_lsn: metadata.commit_lsn,
            commit_idx: metadata.commit_idx,
            group_id,
            idempotency_key: std::mem::take(&mut metadata.idempotency_key),
            payload,
            route,
        }
    }

    /// The sink type's default routing keys for `message`, with those the
    /// routing function `chose` (if any) in their place.
    fn route_of(
        &self,
        message: &Message,
        group_id: &str,
        chose: Option<Route>,
    ) -> Option<Box<Route>> {
        let defaults = self
            .kind
            .default_route
            .map(|default| default(message.action.as_str(), &message.metadata, group_id));
        if chose.is_none() && defaults.is_none() {
            return None;
        }
        route::merge(defaults.unwrap_or_default(), chose).boxed_unless_empty()
    }

    /// `message` as the JSON consumers receive.
    fn rendered(&mut self, message: &Message) -> StoredPayload {
        StoredPayload::written(|text| json::write_message(text, message, &mut self.json_cache))
    }
}

/// A run of a sink's held changes through its functions, waiting to be
/// settled (see [`SinkPipeline::held_run`]).
#[derive(Default)]
pub struct HeldRun {
    /// The held changes run, in commit order.
    pending: Vec<Pending>,
    /// Held changes no message could be read from: dead-lettered.
    unreadable: HeldSettlement,
    /// What the functions made of `pending` (aligned); empty without
    /// functions.
    outcomes: Vec<ChainOutcome>,
}

/// What one chain run over pending changes came to.
#[derive(Default)]
struct Settled {
    messages: Vec<NewMessage>,
    dead_letters: Vec<NewDeadLetter>,
    /// Changes a function failed on transiently: held for a retry.
    retries: Vec<Hold>,
    /// Later changes of those changes' groups: held behind them.
    behind: Vec<Hold>,
}

/// Holds `pending`: after a failure `(error, retry in)`, or until its
/// group's earlier changes are through.
fn hold(pending: &Pending, failure: Option<(String, Duration)>) -> Hold {
    let (last_error, retry_in) = match failure {
        Some((error, delay)) => (Some(error), delay),
        None => (None, Duration::ZERO),
    };
    Hold {
        change: HeldChange {
            commit_lsn: pending.message.metadata.commit_lsn,
            commit_idx: pending.message.metadata.commit_idx,
            group_id: pending.group_id.clone(),
            message: serde_json::to_value(&pending.message).expect("a message always serialises"),
            attempts: pending.attempts,
            last_error,
        },
        retry_in,
    }
}

/// The dead letter of `pending` after `attempts` failed function calls.
fn dead_letter(pending: &Pending, attempts: u32, error: String) -> NewDeadLetter {
    NewDeadLetter {
        commit_lsn: pending.message.metadata.commit_lsn,
        commit_idx: pending.message.metadata.commit_idx,
        idempotency_key: pending.message.metadata.idempotency_key.clone(),
        message: serde_json::to_value(&pending.message).expect("a message always serialises"),
        group_id: pending.group_id.clone(),
        attempts: attempts.max(1),
        error,
    }
}

/// The message group of a message: its table and primary-key values.
/// Messages of one group are delivered one at a time, in commit order.
pub fn group_id(message: &Message) -> String {
    let metadata = &message.metadata;
    let mut id = String::with_capacity(
        metadata.table_schema.len()
            + metadata.table_name.len()
            + 2
            + weft_core::message::key_values_len(&metadata.record_pks),
    );
    id.push_str(&metadata.table_schema);
    id.push('.');
    id.push_str(&metadata.table_name);
    id.push(':');
    weft_core::message::push_key_values(&mut id, &metadata.record_pks);
    id
}

/// `chain`'s functions as `kind=name` pairs, `-` for none (computed once:
/// every stored batch's `sink` span carries it).
fn plugin_names(chain: &FunctionChain) -> String {
    let names: Vec<String> = chain
        .steps()
        .map(|(kind, name)| format!("{kind}={name}"))
        .collect();
    if names.is_empty() {
        "-".into()
    } else {
        names.join(",")
    }
}

#[cfg(test)]
#[path = "sink_tests.rs"]
mod tests;
