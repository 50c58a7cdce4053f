//! A sink's function chain: enrichment → filter → transform → routing, each
//! step optional, the same for every sink type (the pull sink included:
//! Sequin skips filters on its pull path, weft does not).
//!
//! The chain runs on a batch of messages and returns one [`ChainOutcome`]
//! per message, index-aligned: a message to deliver, a change the filter
//! dropped, or a change a function failed on. Each step is called once per
//! batch with the changes still alive, so a dropped or failed change costs
//! the later steps nothing.
//!
//! A whole-call failure that a change can cause (trap, timeout, out of
//! memory, bad output) is narrowed down to the changes that cause it: the
//! batch is bisected and each half run again on a fresh instance, until
//! the failing changes stand alone. Only they get a `Failed` outcome
//! (`trapped`); the rest of the batch goes on. Other whole-call failures
//! (an instance that cannot be created) fail the batch with [`ChainError`]
//! for the caller to retry.

use std::sync::{Arc, Mutex};

use weft_core::message::Message;
use weft_wasm::{
    EnrichmentFunction, FilterFunction, FunctionError, Payload, PluginError, Route,
    RoutingFunction, TransformFunction,
};

use super::shadow::Shadow;
use super::swap::{SwapGate, SwitchPoint};
use weft_sinks::route as routing_keys;

/// A loaded function with its config name, shareable with blocking tasks:
/// one instance per part of a batch (see [`FunctionChain::run`]).
pub struct Named<F> {
    /// The function's name in the config.
    pub name: String,
    /// The loaded component's instances, at least one.
    instances: Arc<Vec<Mutex<F>>>,
}

impl<F> Named<F> {
    /// Wraps `function`, loaded as `name`: one instance.
    pub fn new(name: &str, function: F) -> Self {
        Self::of_instances(name, vec![function])
    }

    /// Wraps `instances` of one function loaded as `name`, which run side
    /// by side on parts of a batch. Panics on none.
    pub fn of_instances(name: &str, instances: Vec<F>) -> Self {
        assert!(!instances.is_empty(), "a function has an instance");
        Named {
            name: name.to_string(),
            instances: Arc::new(instances.into_iter().map(Mutex::new).collect()),
        }
    }

    /// How many instances run side by side.
    pub fn instances(&self) -> usize {
        self.instances.len()
    }

    /// The loaded instances, once no clone shares them (a freshly loaded
    /// chain's).
    pub fn into_inner(self) -> Option<Vec<F>> {
        Arc::try_unwrap(self.instances).ok().map(|instances| {
            instances
                .into_iter()
                .map(|f| {
                    f.into_inner()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                })
                .collect()
        })
    }

    /// The instance that serves `part` of a batch.
    fn lock(&self, part: usize) -> std::sync::MutexGuard<'_, F> {
        // A panic inside a call leaves the instance slot consistent (the
        // instance is discarded on failure); keep using it.
        self.instances[part % self.instances.len()]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<F> Clone for Named<F> {
    fn clone(&self) -> Self {
        Named {
            name: self.name.clone(),
            instances: Arc::clone(&self.instances),
        }
    }
}

/// The functions of one sink, in pipeline order. Cheap to clone: clones
/// share the loaded functions.
#[derive(Clone, Default)]
pub struct FunctionChain {
    /// Adds `metadata.enrichment`.
    pub enrichment: Option<Named<EnrichmentFunction>>,
    /// Keeps or drops each change.
    pub filter: Option<Named<FilterFunction>>,
    /// Produces the payload; without one, the payload is the message JSON.
    pub transform: Option<Named<TransformFunction>>,
    /// Picks sink-specific keys, validated against `sink_type`.
    pub routing: Option<Named<RoutingFunction>>,
    /// The sink's destination type (`sequin_stream`, `kafka`, ...).
    pub sink_type: &'static str,
    /// Orders runs with hot swaps and records switch points.
    pub swaps: SwapGate,
    /// A candidate transform running in shadow, if any.
    pub shadow: ShadowSlot,
}

/// Where a chain's candidate transform runs in shadow (see
/// [`super::shadow`]). Cheap to clone; clones share it.
#[derive(Clone, Default)]
pub struct ShadowSlot(Arc<Mutex<Option<Shadow>>>);

impl ShadowSlot {
    /// Runs `shadow` from the next chain run on, replacing any.
    pub fn set(&self, shadow: Option<Shadow>) {
        *self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = shadow;
    }

    /// The candidate running, if any.
    pub fn get(&self) -> Option<Shadow> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// Runs the candidate in `shadow` on the changes the live transform made a
/// message of, and compares.
fn compare_in_shadow(shadow: &Shadow, outcomes: &[ChainOutcome]) {
    let delivered: Vec<&ChainMessage> = outcomes
        .iter()
        .filter_map(|outcome| match outcome {
            ChainOutcome::Message(message) => Some(message.as_ref()),
            _ => None,
        })
        .collect();
    let inputs: Vec<Message> = delivered.iter().map(|m| m.message.clone()).collect();
    let payloads: Vec<_> = delivered.iter().map(|m| m.payload()).collect();
    let live: Vec<&Payload> = payloads.iter().map(|p| p.as_ref()).collect();
    shadow.compare(&inputs, &live);
}

/// Puts `fresh`'s instances into `slot` when the slot's function is one of
/// `changed`. Both come from the same sink config, so they hold as many
/// instances.
fn replace<F>(slot: &Option<Named<F>>, fresh: Option<Named<F>>, changed: &[String]) {
    if let (Some(slot), Some(fresh)) = (slot, fresh)
        && changed.contains(&slot.name)
        && let Some(instances) = fresh.into_inner()
    {
        for (part, function) in instances.into_iter().enumerate() {
            *slot.lock(part) = function;
        }
    }
}

/// A message that made it through the chain.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainMessage {
    /// The message after enrichment (its `metadata.enrichment` set).
    pub message: Message,
    /// The transform's payload; `None` without a transform: the message
    /// JSON is delivered, rendered once when it is stored.
    pub payload: Option<Payload>,
    /// The routing function's keys, validated for the sink; `None` without
    /// a routing function.
    pub route: Option<Route>,
}

impl ChainMessage {
    /// The payload to deliver: the transform's, or the message JSON.
    pub fn payload(&self) -> std::borrow::Cow<'_, Payload> {
        match &self.payload {
            Some(payload) => std::borrow::Cow::Borrowed(payload),
            None => std::borrow::Cow::Owned(Payload::Json(
                serde_json::to_value(&self.message).expect("a message always serialises"),
            )),
        }
    }
}

/// What the chain made of one change.
#[derive(Debug, Clone, PartialEq)]
pub enum ChainOutcome {
    /// Deliver this.
    Message(Box<ChainMessage>),
    /// The filter dropped the change: no message, but the cursor advances.
    Dropped {
        /// The filter's name in the config.
        filter: String,
    },
    /// A function failed on this change.
    Failed {
        /// The function's name in the config.
        function: String,
        /// The function's kind (`enrichment`, `filter`, ...).
        kind: &'static str,
        /// The reason, for logs and dead letters.
        error: String,
        /// Whether a retry may succeed (`false`: dead-letter it).
        transient: bool,
        /// The whole call failed (trap, timeout, out of memory, bad output)
        /// and bisection isolated this change as its cause.
        trapped: bool,
    },
}

/// A function failed as a whole on a batch.
#[derive(Debug, thiserror::Error)]
#[error("{kind} function {function}: {source}")]
pub struct ChainError {
    /// The function's name in the config.
    pub function: String,
    /// The function's kind.
    pub kind: &'static str,
    /// What went wrong (boxed: plugin errors are large).
    #[source]
    pub source: Box<PluginError>,
}

/// The changes still alive between steps: their positions in the input and
/// their messages, in the same order.
struct Alive {
    positions: Vec<usize>,
    messages: Vec<Message>,
}

impl Alive {
    /// Records the decided outcomes (`Some`) in `outcomes` and keeps only
    /// the undecided changes alive. `decisions` is aligned with `self`.
    fn settle(
        &mut self,
        decisions: Vec<Option<ChainOutcome>>,
        outcomes: &mut [Option<ChainOutcome>],
    ) {
        let mut keep = Vec::with_capacity(decisions.len());
        for (position, decision) in self.positions.iter().zip(decisions) {
            keep.push(decision.is_none());
            if decision.is_some() {
                outcomes[*position] = decision;
            }
        }
        let mut flags = keep.iter();
        self.positions
            .retain(|_| *flags.next().expect("one flag per change"));
        let mut flags = keep.iter();
        self.messages
            .retain(|_| *flags.next().expect("one flag per change"));
    }
}

/// Why running the chain from an async task failed.
#[derive(Debug, thiserror::Error)]
pub enum ChainRunError {
    /// A function failed as a whole.
    #[error(transparent)]
    Chain(#[from] ChainError),
    /// The blocking task panicked or was cancelled.
    #[error("function chain task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl FunctionChain {
    /// The chain's functions in pipeline order, as `(kind, name)`.
    pub fn steps(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            (
                "enrichment",
                self.enrichment.as_ref().map(|f| f.name.as_str()),
            ),
            ("filter", self.filter.as_ref().map(|f| f.name.as_str())),
            (
                "transform",
                self.transform.as_ref().map(|f| f.name.as_str()),
            ),
            ("routing", self.routing.as_ref().map(|f| f.name.as_str())),
        ]
        .into_iter()
        .filter_map(|(kind, name)| name.map(|name| (kind, name)))
    }

    /// Whether the chain calls no function at all.
    pub fn is_empty(&self) -> bool {
        self.enrichment.is_none()
            && self.filter.is_none()
            && self.transform.is_none()
            && self.routing.is_none()
    }

    /// How many instances each of the chain's functions has (the sink's
    /// `function_instances`); 1 without functions.
    pub fn instances(&self) -> usize {
        [
            self.enrichment.as_ref().map(Named::instances),
            self.filter.as_ref().map(Named::instances),
            self.transform.as_ref().map(Named::instances),
            self.routing.as_ref().map(Named::instances),
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(1)
    }

    /// Runs the chain on `messages` from an async task, in one call per
    /// function and instance: a function that fails as a whole fails the
    /// run (see [`Self::run_bisecting`] for the run that finds the changes
    /// it fails on). Function calls run on the blocking pool, never on an
    /// async worker thread.
    ///
    /// With more than one instance per function, the batch is split by
    /// `groups` (each message's group key, in order): each instance takes
    /// the groups whose key hashes to it, the parts run side by side on
    /// threads of their own, and the outcomes come back in the batch's
    /// order. A group's changes stay in one part, in order.
    pub async fn run<'g>(
        &self,
        messages: Vec<Message>,
        groups: impl IntoIterator<Item = &'g str>,
    ) -> Result<Vec<ChainOutcome>, ChainRunError> {
        let instances = self.instances();
        if instances == 1 || messages.len() < MIN_SPLIT {
            return self.run_on_pool(messages, Self::run_blocking).await;
        }
        let parts: Vec<usize> = groups
            .into_iter()
            .map(|group| part_of(group, instances))
            .collect();
        assert_eq!(parts.len(), messages.len(), "one group per message");
        self.run_on_pool(messages, move |chain, messages| {
            chain.run_split(messages, &parts)
        })
        .await
    }

    /// Runs the chain on `messages` from an async task like [`Self::run`],
    /// but isolates the changes a whole-call failure comes from (see
    /// [`Self::run_isolating`]), on the first instance alone.
    pub async fn run_bisecting(
        &self,
        messages: Vec<Message>,
    ) -> Result<Vec<ChainOutcome>, ChainRunError> {
        self.run_on_pool(messages, |chain, messages| chain.run_isolating(&messages))
            .await
    }

    /// Runs `run` on the chain and `messages` on the blocking pool, in a
    /// turn between hot swaps, and compares the outcomes in shadow.
    async fn run_on_pool(
        &self,
        messages: Vec<Message>,
        run: impl FnOnce(&FunctionChain, Vec<Message>) -> Result<Vec<ChainOutcome>, ChainError>
        + Send
        + 'static,
    ) -> Result<Vec<ChainOutcome>, ChainRunError> {
        if self.is_empty() || messages.is_empty() {
            return Ok(self.run_blocking(messages)?);
        }
        let chain = self.clone();
        Ok(tokio::task::spawn_blocking(move || {
            let _turn = chain.swaps.run_turn();
            chain.swaps.mark_first(&messages[0]);
            let outcomes = run(&chain, messages)?;
            if let Some(shadow) = chain.shadow.get() {
                compare_in_shadow(&shadow, &outcomes);
            }
            Ok::<_, ChainError>(outcomes)
        })
        .await??)
    }

    /// Runs the chain on the parts of `messages` that `parts` (aligned)
    /// names, each on its own instance: part 0 on this thread, the others
    /// on scoped threads beside it, all within the caller's turn between
    /// hot swaps. Fails with the first part's failure, in part order.
    /// Blocks.
    fn run_split(
        &self,
        messages: Vec<Message>,
        parts: &[usize],
    ) -> Result<Vec<ChainOutcome>, ChainError> {
        let count = messages.len();
        let mut split: Vec<(Vec<usize>, Vec<Message>)> =
            (0..self.instances()).map(|_| Default::default()).collect();
        for (position, (message, part)) in messages.into_iter().zip(parts).enumerate() {
            split[*part].0.push(position);
            split[*part].1.push(message);
        }
        // Guests' WASI output and granted capabilities enter the runtime
        // the pool thread belongs to; the scoped threads need it too.
        let runtime = tokio::runtime::Handle::try_current().ok();
        let results: Vec<(usize, Result<Vec<ChainOutcome>, ChainError>)> =
            std::thread::scope(|scope| {
                let mut others = Vec::new();
                for (part, (_, messages)) in split.iter_mut().enumerate().skip(1) {
                    let messages = std::mem::take(messages);
                    if !messages.is_empty() {
                        let runtime = runtime.clone();
                        others.push((
                            part,
                            scope.spawn(move || {
                                let _entered = runtime.as_ref().map(|r| r.enter());
                                self.run_part(part, messages)
                            }),
                        ));
                    }
                }
                let own = std::mem::take(&mut split[0].1);
                let mut results = vec![(0, self.run_part(0, own))];
                for (part, other) in others {
                    let result = other
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                    results.push((part, result));
                }
                results
            });
        let mut outcomes: Vec<Option<ChainOutcome>> = vec![None; count];
        for (part, result) in results {
            for (position, outcome) in split[part].0.iter().zip(result?) {
                outcomes[*position] = Some(outcome);
            }
        }
        Ok(outcomes
            .into_iter()
            .map(|outcome| outcome.expect("every change gets an outcome"))
            .collect())
    }

    /// Replaces the functions named in `changed` with their counterparts in
    /// `fresh` (this sink's changed functions loaded anew from the new
    /// config), between two runs, and records `switches`. Steps not named keep their live
    /// instances.
    pub fn swap_in(&self, fresh: FunctionChain, changed: &[String], switches: Vec<SwitchPoint>) {
        let _exclusive = self.swaps.swap_turn();
        replace(&self.enrichment, fresh.enrichment, changed);
        replace(&self.filter, fresh.filter, changed);
        replace(&self.transform, fresh.transform, changed);
        replace(&self.routing, fresh.routing, changed);
        self.swaps.record(switches);
    }

    /// Runs the chain on `messages` like [`Self::run_blocking`], but when a
    /// function fails as a whole in a way a change can cause (see
    /// [`PluginError::is_caused_by_input`]), bisects the batch, each part
    /// on a fresh instance, until the failing changes stand alone: they get
    /// `Failed { trapped: true }` with the failure, the others their normal
    /// outcome. A batch of `n` with `k` such changes costs about
    /// `2k·log2(n)` extra calls. Blocks.
    pub fn run_isolating(&self, messages: &[Message]) -> Result<Vec<ChainOutcome>, ChainError> {
        let mut outcomes = Vec::with_capacity(messages.len());
        self.isolate(messages, &mut outcomes)?;
        Ok(outcomes)
    }

    fn isolate(
        &self,
        messages: &[Message],
        outcomes: &mut Vec<ChainOutcome>,
    ) -> Result<(), ChainError> {
        match self.run_blocking(messages.to_vec()) {
            Ok(done) => {
                outcomes.extend(done);
                Ok(())
            }
            Err(failure) if failure.source.is_caused_by_input() => {
                if messages.len() == 1 {
                    outcomes.push(ChainOutcome::Failed {
                        error: failure.source.to_string(),
                        function: failure.function,
                        kind: failure.kind,
                        transient: false,
                        trapped: true,
                    });
                    return Ok(());
                }
                let (left, right) = messages.split_at(messages.len() / 2);
                self.isolate(left, outcomes)?;
                self.isolate(right, outcomes)
            }
            Err(failure) => Err(failure),
        }
    }

    /// Runs the chain on `messages` on each function's first instance: one
    /// outcome per message, in order. Blocks; call it from `spawn_blocking`
    /// or a plain thread.
    pub fn run_blocking(&self, messages: Vec<Message>) -> Result<Vec<ChainOutcome>, ChainError> {
        self.run_part(0, messages)
    }

    /// Runs the chain on `messages` on each function's instance `part`.
    fn run_part(
        &self,
        part: usize,
        messages: Vec<Message>,
    ) -> Result<Vec<ChainOutcome>, ChainError> {
        let count = messages.len();
        let mut outcomes: Vec<Option<ChainOutcome>> = vec![None; count];
        let mut alive = Alive {
            positions: (0..count).collect(),
            messages,
        };

        if let Some(step) = &self.enrichment
            && !alive.messages.is_empty()
        {
            let results = step
                .lock(part)
                .enrich(&alive.messages)
                .map_err(|source| whole(step, "enrichment", source))?;
            let decisions = results
                .into_iter()
                .zip(alive.messages.iter_mut())
                .map(|(result, message)| match result {
                    Ok(enrichment) => {
                        message.metadata.enrichment = enrichment;
                        None
                    }
                    Err(error) => Some(failed(step, "enrichment", error)),
                })
                .collect();
            alive.settle(decisions, &mut outcomes);
        }

        if let Some(step) = &self.filter
            && !alive.messages.is_empty()
        {
            let results = step
                .lock(part)
                .filter(&alive.messages)
                .map_err(|source| whole(step, "filter", source))?;
            let decisions = results
                .into_iter()
                .map(|result| match result {
                    Ok(true) => None,
                    Ok(false) => Some(ChainOutcome::Dropped {
                        filter: step.name.clone(),
                    }),
                    Err(error) => Some(failed(step, "filter", error)),
                })
                .collect();
            alive.settle(decisions, &mut outcomes);
        }

        let mut payloads: Vec<Option<Payload>> = match &self.transform {
            Some(step) if !alive.messages.is_empty() => {
                let results = step
                    .lock(part)
                    .transform(&alive.messages)
                    .map_err(|source| whole(step, "transform", source))?;
                let mut payloads = Vec::with_capacity(results.len());
                let decisions = results
                    .into_iter()
                    .map(|result| match result {
                        Ok(payload) => {
                            payloads.push(Some(payload));
                            None
                        }
                        Err(error) => {
                            payloads.push(None);
                            Some(failed(step, "transform", error))
                        }
                    })
                    .collect();
                let mut keep = payloads
                    .iter()
                    .map(Option::is_some)
                    .collect::<Vec<_>>()
                    .into_iter();
                alive.settle(decisions, &mut outcomes);
                payloads.retain(|_| keep.next().expect("one flag per change"));
                payloads
            }
            _ => vec![None; alive.messages.len()],
        };

        let mut routes: Vec<Option<Route>> = vec![None; alive.messages.len()];
        if let Some(step) = &self.routing
            && !alive.messages.is_empty()
        {
            let results = step
                .lock(part)
                .route(&alive.messages)
                .map_err(|source| whole(step, "routing", source))?;
            let mut kept_routes = Vec::with_capacity(results.len());
            let mut kept_payloads = Vec::with_capacity(results.len());
            let decisions = results
                .into_iter()
                .zip(payloads.drain(..))
                .map(|(result, payload)| {
                    let route = result
                        .map_err(|error| failed(step, "routing", error))
                        .and_then(
                            |route| match routing_keys::validate(&route, self.sink_type) {
                                Ok(()) => Ok(route),
                                Err(error) => Err(ChainOutcome::Failed {
                                    function: step.name.clone(),
                                    kind: "routing",
                                    error: error.to_string(),
                                    transient: false,
                                    trapped: false,
                                }),
                            },
                        );
                    match route {
                        Ok(route) => {
                            kept_routes.push(Some(route));
                            kept_payloads.push(payload);
                            None
                        }
                        Err(outcome) => Some(outcome),
                    }
                })
                .collect();
            alive.settle(decisions, &mut outcomes);
            routes = kept_routes;
            payloads = kept_payloads;
        }

        for ((position, message), (payload, route)) in alive
            .positions
            .into_iter()
            .zip(alive.messages)
            .zip(payloads.into_iter().zip(routes))
        {
            outcomes[position] = Some(ChainOutcome::Message(Box::new(ChainMessage {
                message,
                payload,
                route,
            })));
        }
        Ok(outcomes
            .into_iter()
            .map(|outcome| outcome.expect("every change gets an outcome"))
            .collect())
    }
}

/// Batches smaller than this run on the first instance alone: a thread
/// for a part costs more than such a part's calls save.
const MIN_SPLIT: usize = 64;

/// The part of a batch `group`'s changes go to, of `parts`: the same for
/// every batch, so that each instance sees the same groups.
fn part_of(group: &str, parts: usize) -> usize {
    use std::hash::{BuildHasher, BuildHasherDefault};
    let hasher = BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default();
    (hasher.hash_one(group) % parts as u64) as usize
}

fn whole<F>(step: &Named<F>, kind: &'static str, source: PluginError) -> ChainError {
    ChainError {
        function: step.name.clone(),
        kind,
        source: Box::new(source),
    }
}

fn failed<F>(step: &Named<F>, kind: &'static str, error: FunctionError) -> ChainOutcome {
    let (error, transient) = match error {
        FunctionError::Permanent(reason) => (reason, false),
        FunctionError::Transient(reason) => (reason, true),
    };
    ChainOutcome::Failed {
        function: step.name.clone(),
        kind,
        error,
        transient,
        trapped: false,
    }
}

#[cfg(test)]
#[path = "chain_tests.rs"]
mod tests;
