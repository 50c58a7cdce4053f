//! Per-function resource caps, and the `ResourceLimiter` that enforces the
//! memory and table caps inside a store.
//!
//! The CPU cap is enforced by epoch interruption (see [`crate::engine`]):
//! each call gets a deadline of `call_timeout`, rounded up to the engine's
//! epoch tick.

use std::time::Duration;

use super::PluginError;

/// Default memory cap per instance: 64 MiB. JSON rows of a few KiB need far
/// less; the cap bounds what a runaway guest can take.
pub const DEFAULT_MEMORY_BYTES: usize = 64 << 20;
/// Default CPU deadline per call (a whole batch): 1 s, as Sequin's functions.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(1);
/// Default cap on elements per table (function-pointer tables).
pub const DEFAULT_TABLE_ELEMENTS: usize = 20_000;
/// Default cap on core instances per component instance.
pub const DEFAULT_INSTANCES: usize = 16;
/// Default cap on tables per component instance.
pub const DEFAULT_TABLES: usize = 16;
/// Default cap on linear memories per component instance.
pub const DEFAULT_MEMORIES: usize = 4;

/// The largest output a function may return for one change (a transform's
/// payload, an enrichment's JSON): 16 MiB. A bigger one fails that change
/// permanently, so one runaway output cannot flood the store and the sinks.
pub const MAX_OUTPUT_BYTES: usize = 16 << 20;

/// The per-change error for an output of `len` bytes over [`MAX_OUTPUT_BYTES`].
pub(crate) fn output_too_big(len: usize) -> super::FunctionError {
    super::FunctionError::Permanent(format!(
        "the function returned {len} bytes for this change, more than the {} MiB a function may return per change; return less (e.g. drop big columns)",
        MAX_OUTPUT_BYTES >> 20
    ))
}

/// Resource caps for one function's instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest size one linear memory may grow to, in bytes. Growing past it
    /// fails the call with [`PluginError::OutOfMemory`]. Must not exceed the
    /// engine's `max_memory_bytes`.
    pub memory_bytes: usize,
    /// CPU deadline for one call (`init` or a whole batch). Running past it
    /// fails the call with [`PluginError::Timeout`].
    pub call_timeout: Duration,
    /// Largest number of elements one table may grow to.
    pub table_elements: usize,
    /// Most core instances one component instance may create.
    pub instances: usize,
    /// Most tables one component instance may create.
    pub tables: usize,
    /// Most linear memories one component instance may create.
    pub memories: usize,
    /// Replace the instance with a fresh one after this many successful
    /// calls. `None`: never.
    pub recycle_after_calls: Option<u64>,
    /// Replace the instance with a fresh one after a call that left its
    /// memory above this many bytes. `None`: never.
    pub recycle_memory_bytes: Option<usize>,
    /// Deterministic mode: clocks and random bytes derive from the batch's
    /// first change (commit timestamp, LSN, index), so replays give
    /// identical output. See the `deterministic` module.
    pub deterministic: bool,
    /// The sink the function serves; labels its `weft_plugin_*` metrics
    /// (`-` when unset, as in benchmarks).
    pub sink: Option<String>,
    /// The CPU share of the function's account, which its calls wait
    /// for; `None`: calls never wait.
    pub cpu_share: Option<super::CpuShare>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: DEFAULT_MEMORY_BYTES,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            table_elements: DEFAULT_TABLE_ELEMENTS,
            instances: DEFAULT_INSTANCES,
            tables: DEFAULT_TABLES,
            memories: DEFAULT_MEMORIES,
            recycle_after_calls: None,
            recycle_memory_bytes: None,
            deterministic: false,
            sink: None,
            cpu_share: None,
        }
    }
}

impl Limits {
    /// Checks the limits against the engine's pool bounds.
    pub(crate) fn validate(
        &self,
        plugin: &str,
        max_memory_bytes: usize,
    ) -> Result<(), PluginError> {
        if self.memory_bytes > max_memory_bytes {
            return Err(PluginError::Settings(format!(
                "plugin `{plugin}`: memory limit {} bytes is above the engine's maximum of {max_memory_bytes} bytes; \
                 lower the limit or raise the engine's max_memory_bytes",
                self.memory_bytes
            )));
        }
        if self.recycle_after_calls == Some(0) {
            return Err(PluginError::Settings(format!(
                "plugin `{plugin}`: recycle_after_calls must be at least 1 (leave it unset to never recycle)"
            )));
        }
        if self.call_timeout.is_zero() {
            return Err(PluginError::Settings(format!(
                "plugin `{plugin}`: call timeout must be above zero"
            )));
        }
        Ok(())
    }
}

/// The memory cap was hit; carried as the trap's error so the host can tell
/// an out-of-memory from any other trap.
#[derive(Debug, thiserror::Error)]
#[error("memory cap of {limit} bytes exceeded: the guest asked for {requested} bytes")]
pub(crate) struct MemoryCapExceeded {
    pub(crate) limit: usize,
    pub(crate) requested: usize,
}

/// Enforces [`Limits`] inside one store.
pub(crate) struct InstanceLimiter {
    limits: Limits,
    /// Set when the memory cap was hit during the current call.
    pub(crate) memory_exceeded: Option<MemoryCapExceeded>,
    /// Largest linear memory size granted so far, in bytes.
    pub(crate) memory_bytes: usize,
}

impl InstanceLimiter {
    pub(crate) fn new(limits: &Limits) -> Self {
        InstanceLimiter {
            limits: limits.clone(),
            memory_exceeded: None,
            memory_bytes: 0,
        }
    }
}

impl wasmtime::ResourceLimiter for InstanceLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limits.memory_bytes {
            // An error (not `Ok(false)`) traps the guest right here: a Rust
            // guest would otherwise abort with an opaque `unreachable`.
            self.memory_exceeded = Some(MemoryCapExceeded {
                limit: self.limits.memory_bytes,
                requested: desired,
            });
            return Err(wasmtime::Error::new(MemoryCapExceeded {
                limit: self.limits.memory_bytes,
                requested: desired,
            }));
        }
        self.memory_bytes = self.memory_bytes.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= self.limits.table_elements)
    }

    fn instances(&self) -> usize {
        self.limits.instances
    }

    fn tables(&self) -> usize {
        self.limits.tables
    }

    fn memories(&self) -> usize {
        self.limits.memories
    }
}
