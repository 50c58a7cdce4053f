//! The life of a guest instance: created from a pre-instantiated component,
//! `init`ed with the function's config, reused across calls, discarded when
//! a call fails, re-created on the next call, and recycled (discarded after
//! a successful call) once it has served `recycle_after_calls` calls or its
//! memory has grown past `recycle_memory_bytes`: a guest that leaks or
//! fragments its heap gets a clean one before it hits the memory cap. Also
//! turns wasmtime failures into typed [`PluginError`]s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Store, Trap};

use super::bindings::types;
use super::cpu_share::thread_cpu_time;
use super::deterministic::DeterministicInputs;
use super::engine::{LoadedComponent, PluginEngine};
pub(crate) use super::guest_state::{GuestState, InstanceOptions};
use super::limits::InstanceLimiter;
use super::message::with_wit_batch;
use super::sandbox::{self, GuestOutput, Stream};
use super::usage::{LiveInstance, PluginUsage};
use super::{Limits, PluginError};
use weft_core::message::Message;

/// Defines `$name`, a loaded component of world `$world` (kind `$kind`,
/// pre-instantiated as `world::$pre`, from the calling module's `world`
/// bindings) with its live instance: its constructor,
/// name, recycle count and `Debug`, and the world's [`WorldBindings`]. Each
/// kind's module adds its own call (`transform`, `filter`, ...) beside it.
macro_rules! guest_function {
    ($(#[$doc:meta])* $name:ident, $world:ty, $pre:ident, $kind:literal) => {
        $(#[$doc])*
        pub struct $name {
            instance: $crate::instance::GuestInstance<$world>,
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("name", &self.name())
                    .finish_non_exhaustive()
            }
        }

        impl $name {
            /// Pre-links `loaded`, then creates and `init`s a first
            /// instance with `config` and `options` (what it gets beyond the
            /// sandbox's defaults), so that a bad config fails here.
            pub(crate) fn new(
                engine: $crate::PluginEngine,
                name: &str,
                loaded: $crate::engine::LoadedComponent,
                config: &std::collections::BTreeMap<String, String>,
                limits: &$crate::Limits,
                options: $crate::instance::InstanceOptions,
            ) -> Result<Self, $crate::PluginError> {
                Ok($name {
                    instance: $crate::instance::GuestInstance::new(
                        engine, name, loaded, config, limits, options,
                    )?,
                })
            }

            /// The plugin's name.
            pub fn name(&self) -> &str {
                self.instance.plugin()
            }

            /// How many instances were recycled so far (after
            /// `recycle_after_calls` calls or past `recycle_memory_bytes`),
            /// not counting failed ones.
            pub fn recycled_instances(&self) -> u64 {
                self.instance.recycled()
            }
        }

        impl $crate::instance::WorldBindings for $world {
            const KIND: &'static str = $kind;

            type Pre = world::$pre<$crate::instance::GuestState>;

            fn pre(
                linker: &wasmtime::component::Linker<$crate::instance::GuestState>,
                component: &wasmtime::component::Component,
            ) -> wasmtime::Result<Self::Pre> {
                world::$pre::new(linker.instantiate_pre(component)?)
            }

            fn instantiate(
                pre: &Self::Pre,
                store: &mut wasmtime::Store<$crate::instance::GuestState>,
            ) -> wasmtime::Result<Self> {
                pre.instantiate(store)
            }

            fn init(
                &self,
                store: &mut wasmtime::Store<$crate::instance::GuestState>,
                config: &[(&str, &str)],
            ) -> wasmtime::Result<Result<(), String>> {
                self.call_init(store, config)
            }
        }
    };
}
pub(crate) use guest_function;

/// The generated bindings of one world.
pub(crate) trait WorldBindings: Sized + Send + 'static {
    /// The function kind (world name), for metrics.
    const KIND: &'static str;

    /// The pre-instantiated component (`<World>Pre`).
    type Pre: Send + Sync;

    /// Type-checks the component against the world and pre-links it.
    fn pre(
        linker: &Linker<GuestState>,
        component: &wasmtime::component::Component,
    ) -> wasmtime::Result<Self::Pre>;

    /// Creates an instance.
    fn instantiate(pre: &Self::Pre, store: &mut Store<GuestState>) -> wasmtime::Result<Self>;

    /// Calls the world's `init` export.
    #[allow(clippy::ptr_arg)] // the generated binding takes `&Vec`
    fn init(
        &self,
        store: &mut Store<GuestState>,
        config: &[(&str, &str)],
    ) -> wasmtime::Result<Result<(), String>>;
}

/// One function's instance slot.
pub(crate) struct GuestInstance<B: WorldBindings> {
    plugin: Arc<str>,
    engine: PluginEngine,
    pre: B::Pre,
    config: Vec<(String, String)>,
    limits: Limits,
    /// Kept across instances so that a crash-looping guest stays rate-limited.
    stdout: GuestOutput,
    stderr: GuestOutput,
    options: InstanceOptions,
    /// Set in deterministic mode; shared with the live instance's clocks.
    deterministic: Option<DeterministicInputs>,
    live: Option<Live<B>>,
    recycled: u64,
    usage: PluginUsage,
}

struct Live<B> {
    store: Store<GuestState>,
    bindings: B,
    /// Successful calls served, for recycling.
    calls: u64,
    _counted: LiveInstance,
}

impl<B: WorldBindings> GuestInstance<B> {
    /// Pre-links `loaded`, then creates and `init`s a first instance so that
    /// a bad config fails at load time.
    pub(crate) fn new(
        engine: PluginEngine,
        plugin: &str,
        loaded: LoadedComponent,
        config: &std::collections::BTreeMap<String, String>,
        limits: &Limits,
        options: InstanceOptions,
    ) -> Result<Self, PluginError> {
        let pre =
            B::pre(&engine.inner().linker, &loaded.component).map_err(|e| PluginError::Link {
                plugin: plugin.to_string(),
                path: loaded.path.clone(),
                message: format!("{e:#}"),
            })?;
        let mut instance = GuestInstance {
            plugin: Arc::from(plugin),
            engine,
            pre,
            config: config.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            limits: limits.clone(),
            stdout: GuestOutput::new(Arc::from(plugin), Stream::Stdout),
            stderr: GuestOutput::new(Arc::from(plugin), Stream::Stderr),
            options,
            deterministic: limits.deterministic.then(DeterministicInputs::default),
            live: None,
            recycled: 0,
            usage: PluginUsage::new(limits.sink.as_deref().unwrap_or("-"), plugin, B::KIND),
        };
        instance.ensure_live()?;
        Ok(instance)
    }

    /// The plugin's name.
    pub(crate) fn plugin(&self) -> &str {
        &self.plugin
    }

    /// Runs `call` for `batch` on the live instance (created first if
    /// needed) under the CPU deadline. On failure the instance is discarded;
    /// after success it is recycled if it is due.
    pub(crate) fn call<R>(
        &mut self,
        batch: &[Message],
        call: impl FnOnce(&B, &mut Store<GuestState>) -> wasmtime::Result<R>,
    ) -> Result<R, PluginError> {
        // Before `ensure_live`: a guest that traps on every call makes each
        // call instantiate it afresh, and that CPU is the account's too.
        if let Some(share) = &self.limits.cpu_share {
            share.wait_turn();
        }
        self.ensure_live()?;
        if let Some(inputs) = &self.deterministic {
            inputs.reset_for(batch);
        }
        let live = self
            .live
            .as_mut()
            .expect("ensure_live created the instance");
        arm(
            &mut live.store,
            self.limits.call_timeout,
            self.engine.inner().settings.epoch_tick,
        );
        let (started, cpu_before) = (Instant::now(), thread_cpu_time());
        let outcome = call(&live.bindings, &mut live.store);
        let took = started.elapsed();
        charge_cpu_since(&self.limits, cpu_before);
        let memory = live.store.data().limiter.memory_bytes;
        self.usage.called(batch.len(), took, memory);
        match outcome {
            Ok(value) => {
                live.calls += 1;
                let by_calls = self
                    .limits
                    .recycle_after_calls
                    .is_some_and(|n| live.calls >= n);
                let by_memory = self.limits.recycle_memory_bytes.is_some_and(|n| memory > n);
                if by_calls || by_memory {
                    tracing::debug!(
                        plugin = &*self.plugin,
                        calls = live.calls,
                        memory,
                        "recycling the instance"
                    );
                    self.live = None;
                    self.recycled += 1;
                }
                Ok(value)
            }
            Err(error) => {
                let live = self.live.take().expect("instance is live");
                let error = classify(&self.plugin, &self.limits, live.store.data(), error);
                self.usage.failed(&error);
                Err(error)
            }
        }
    }

    /// Runs a batch export: converts `batch` to WIT changes, calls `call`
    /// with them, and checks the guest returned exactly one outcome per
    /// change (index-aligned results are the contract); a guest that breaks
    /// it is discarded and the call fails with [`PluginError::OutcomeCount`].
    pub(crate) fn call_batch<O>(
        &mut self,
        batch: &[Message],
        call: impl FnOnce(
            &B,
            &mut Store<GuestState>,
            types::BatchContext<'_>,
            &[types::Change<'_>],
        ) -> wasmtime::Result<Vec<O>>,
    ) -> Result<Vec<O>, PluginError> {
        // Converted before the call, so that the host's work neither counts
        // against the guest's deadline nor shows in its usage.
        let outcomes = with_wit_batch(batch, |context, changes| {
            self.call(batch, |bindings, store| {
                call(bindings, store, context, changes)
            })
        })?;
        if outcomes.len() != batch.len() {
            self.discard();
            let error = PluginError::OutcomeCount {
                plugin: self.plugin.to_string(),
                expected: batch.len(),
                got: outcomes.len(),
            };
            self.usage.failed(&error);
            return Err(error);
        }
        Ok(outcomes)
    }

    /// How many instances were recycled (not counting failures).
    pub(crate) fn recycled(&self) -> u64 {
        self.recycled
    }

    /// Drops the live instance, if any; the next call creates a fresh one.
    pub(crate) fn discard(&mut self) {
        self.live = None;
    }

    /// Creates and `init`s an instance unless one is live, charging the
    /// guest's start-up CPU to the account's share.
    fn ensure_live(&mut self) -> Result<(), PluginError> {
        if self.live.is_some() {
            return Ok(());
        }
        let cpu_before = thread_cpu_time();
        let created = self.create_live();
        charge_cpu_since(&self.limits, cpu_before);
        created
    }

    fn create_live(&mut self) -> Result<(), PluginError> {
        let state = GuestState {
            wasi: sandbox::wasi_context(&self.stdout, &self.stderr, self.deterministic.as_ref()),
            table: ResourceTable::new(),
            limiter: InstanceLimiter::new(&self.limits),
            stderr: self.stderr.clone(),
            source_query: self.options.source_query.clone(),
            outbound_http: self.options.outbound_http.clone(),
            call_deadline: Instant::now(),
            call_timeout: self.limits.call_timeout,
        };
        if let Some(inputs) = &self.deterministic {
            inputs.reset_for(&[]);
        }
        let inner = self.engine.inner();
        let mut store = Store::new(&inner.engine, state);
        store.limiter(|state| &mut state.limiter);
        arm(
            &mut store,
            self.limits.call_timeout,
            inner.settings.epoch_tick,
        );

        let bindings = B::instantiate(&self.pre, &mut store).map_err(|error| {
            if store.data().limiter.memory_exceeded.is_some() || error.is::<Trap>() {
                classify(&self.plugin, &self.limits, store.data(), error)
            } else {
                PluginError::Instantiate {
                    plugin: self.plugin.to_string(),
                    message: format!("{error:#}"),
                }
            }
        })?;
        let config: Vec<(&str, &str)> = self
            .config
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
            .collect();
        match bindings.init(&mut store, &config) {
            Ok(Ok(())) => {
                self.live = Some(Live {
                    store,
                    bindings,
                    calls: 0,
                    _counted: self.usage.instance(),
                });
                Ok(())
            }
            Ok(Err(message)) => Err(PluginError::Init {
                plugin: self.plugin.to_string(),
                message,
            }),
            Err(error) => Err(classify(&self.plugin, &self.limits, store.data(), error)),
        }
    }
}

/// Adds the CPU the calling thread used since `before` to the account's
/// share, if `limits` have one.
fn charge_cpu_since(limits: &Limits, before: Duration) {
    if let Some(share) = &limits.cpu_share {
        share.spent(thread_cpu_time().saturating_sub(before));
    }
}

/// Sets the CPU deadline for the next call and clears per-call state.
///
/// The epoch keeps ticking while the guest waits in a host call, so that
/// time counts against the deadline too; `call_deadline` lets such host
/// calls stop waiting in time.
fn arm(store: &mut Store<GuestState>, timeout: Duration, tick: Duration) {
    let armed_at = Instant::now();
    // +1: the next tick may come right away, so `n` ticks guarantee only
    // `(n - 1) * tick` of running time.
    let ticks = timeout.as_nanos().div_ceil(tick.as_nanos()) as u64 + 1;
    store.set_epoch_deadline(ticks);
    store.epoch_deadline_trap();
    let state = store.data_mut();
    state.limiter.memory_exceeded = None;
    state.call_deadline = armed_at + timeout;
    store.data().stderr.clear_tail();
}

/// Names why a call failed: out of memory, timeout, or another trap.
fn classify(
    plugin: &str,
    limits: &Limits,
    state: &GuestState,
    error: wasmtime::Error,
) -> PluginError {
    if let Some(exceeded) = &state.limiter.memory_exceeded {
        return PluginError::OutOfMemory {
            plugin: plugin.to_string(),
            limit: exceeded.limit,
            requested: exceeded.requested,
        };
    }
    if let Some(Trap::Interrupt) = error.downcast_ref::<Trap>() {
        return PluginError::Timeout {
            plugin: plugin.to_string(),
            limit: limits.call_timeout,
        };
    }
    tracing::debug!(plugin, error = ?error, "guest call failed");
    let message = match error.downcast_ref::<Trap>() {
        Some(trap) => format!("{trap}"),
        None => format!("{error:#}"),
    };
    PluginError::Trap {
        plugin: plugin.to_string(),
        message,
        guest_stderr: state.stderr.tail(),
    }
}
