//! What can go wrong with a function: per change, or for a whole call.

use std::path::PathBuf;
use std::time::Duration;

/// Why a function could not handle one change, as the guest reported it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FunctionError {
    /// The change itself is bad; retrying will not help: dead-letter it.
    #[error("permanent function error: {0}")]
    Permanent(String),
    /// Something outside the change went wrong: retry it later.
    #[error("transient function error: {0}")]
    Transient(String),
}

/// A function failed as a whole: it could not be loaded, or a call did not
/// produce a valid outcome for every change. After a call-time failure the
/// instance is discarded and the next call runs on a fresh one.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The engine settings or a function's limits are invalid.
    #[error("invalid plugin settings: {0}")]
    Settings(String),
    /// The compiled-component cache directory is unusable.
    #[error(
        "plugin cache directory {path}: {source}; make it writable or choose another cache dir"
    )]
    CacheDir {
        /// The cache directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The component file could not be read.
    #[error("plugin `{plugin}`: cannot read {path}: {source}")]
    Read {
        /// The plugin's name.
        plugin: String,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a WebAssembly component.
    #[error("plugin `{plugin}`: {path} {reason}")]
    NotAComponent {
        /// The plugin's name.
        plugin: String,
        /// The file.
        path: PathBuf,
        /// What the file is instead, and how to fix it.
        reason: String,
    },
    /// The component failed validation or compilation.
    #[error("plugin `{plugin}`: {path} is not a valid component: {message}")]
    Compile {
        /// The plugin's name.
        plugin: String,
        /// The file.
        path: PathBuf,
        /// wasmtime's explanation.
        message: String,
    },
    /// The component does not implement the expected world.
    #[error(
        "plugin `{plugin}`: {path} does not implement the weft:plugin/{world} world: \
         missing export{} {}; build it against wit/ with the `{world}` world \
         (weft-sdk-guest: `export_{world}!`)",
        if missing.len() == 1 { "" } else { "s" },
        missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
    )]
    WrongWorld {
        /// The plugin's name.
        plugin: String,
        /// The file.
        path: PathBuf,
        /// The world the host expected.
        world: &'static str,
        /// The exports the component lacks, or has with the wrong type.
        missing: Vec<String>,
    },
    /// The component was built against another version of the WIT package.
    #[error(
        "plugin `{plugin}`: {path} was built against weft:plugin@{built_for}, but this weft \
         speaks weft:plugin@{}; rebuild it against this release's wit/ (Rust: \
         weft-sdk-guest of the same release; docs/plugins.md lists what changed)",
        super::engine::WIT_VERSION
    )]
    WitVersion {
        /// The plugin's name.
        plugin: String,
        /// The file.
        path: PathBuf,
        /// The version the component imports `weft:plugin/types` at.
        built_for: String,
    },
    /// The component imports host capabilities its config does not grant.
    #[error(
        "plugin `{plugin}`: {path} imports capabilities it is not granted: {}; \
         grant them on the function in the config (`grants: {{source_query: true}}` for \
         source-query, `grants: {{http: {{allow_hosts: [...]}}}}` for outbound-http; \
         enrichment functions only) or rebuild the component without them",
        imports.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
    )]
    Ungranted {
        /// The plugin's name.
        plugin: String,
        /// The file.
        path: PathBuf,
        /// The imports that are not granted.
        imports: Vec<String>,
    },
    /// The component imports something the sandbox does not grant, or its
    /// exports have the wrong types.
    #[error("plugin `{plugin}`: {path} cannot be linked: {message}")]
    Link {
        /// The plugin's name.
        plugin: String,
        /// The file.
        path: PathBuf,
        /// wasmtime's explanation (names the import or export).
        message: String,
    },
    /// An instance could not be created (e.g. the engine's instance pool is
    /// exhausted).
    #[error(
        "plugin `{plugin}`: cannot create an instance: {message}; if the instance pool is exhausted, raise the engine's max_instances"
    )]
    Instantiate {
        /// The plugin's name.
        plugin: String,
        /// wasmtime's explanation.
        message: String,
    },
    /// The guest's `init` rejected its configuration.
    #[error("plugin `{plugin}` rejected its config: {message}")]
    Init {
        /// The plugin's name.
        plugin: String,
        /// The guest's message.
        message: String,
    },
    /// A call ran past the CPU deadline.
    #[error(
        "plugin `{plugin}` timed out: a call ran longer than {limit:?}; raise the call timeout or make the function cheaper"
    )]
    Timeout {
        /// The plugin's name.
        plugin: String,
        /// The per-call deadline.
        limit: Duration,
    },
    /// The guest tried to grow its memory past the cap.
    #[error(
        "plugin `{plugin}` ran out of memory: it asked for {requested} bytes, above its cap of {limit} bytes"
    )]
    OutOfMemory {
        /// The plugin's name.
        plugin: String,
        /// The memory cap, in bytes.
        limit: usize,
        /// The size the guest asked to grow to, in bytes.
        requested: usize,
    },
    /// The guest trapped (a panic, `unreachable`, an out-of-bounds access...).
    #[error("plugin `{plugin}` trapped: {message}{}", guest_stderr.as_deref().map(|s| format!("; guest stderr: {s}")).unwrap_or_default())]
    Trap {
        /// The plugin's name.
        plugin: String,
        /// The trap, as wasmtime describes it.
        message: String,
        /// The last lines the guest wrote to stderr during the call (a Rust
        /// panic message lands here).
        guest_stderr: Option<String>,
    },
    /// The guest returned a different number of outcomes than changes.
    #[error(
        "plugin `{plugin}` returned {got} outcomes for a batch of {expected} changes; it must return exactly one per change, in order"
    )]
    OutcomeCount {
        /// The plugin's name.
        plugin: String,
        /// The batch size.
        expected: usize,
        /// The number of outcomes returned.
        got: usize,
    },
    /// The guest returned a JSON payload that does not parse.
    #[error("plugin `{plugin}` returned invalid JSON for change {index} of the batch: {message}")]
    InvalidJson {
        /// The plugin's name.
        plugin: String,
        /// Position of the change in the batch.
        index: usize,
        /// The parser's explanation.
        message: String,
    },
}

impl PluginError {
    /// Whether a change in the batch can cause this whole-call failure
    /// (trap, timeout, out of memory, bad output), so that bisecting the
    /// batch can find it. Loading and instantiation failures are not.
    pub fn is_caused_by_input(&self) -> bool {
        matches!(
            self,
            PluginError::Timeout { .. }
                | PluginError::OutOfMemory { .. }
                | PluginError::Trap { .. }
                | PluginError::OutcomeCount { .. }
                | PluginError::InvalidJson { .. }
        )
    }

    /// A short, bounded label for a call failure, for metrics:
    /// `timeout`, `oom`, `trap`, `bad_output` or `other`.
    pub fn reason_label(&self) -> &'static str {
        match self {
            PluginError::Timeout { .. } => "timeout",
            PluginError::OutOfMemory { .. } => "oom",
            PluginError::Trap { .. } => "trap",
            PluginError::OutcomeCount { .. } | PluginError::InvalidJson { .. } => "bad_output",
            _ => "other",
        }
    }

    /// Whether the failure came from running the guest (trap, timeout,
    /// out of memory, bad outcomes) rather than from loading it.
    pub fn is_call_failure(&self) -> bool {
        matches!(
            self,
            PluginError::Timeout { .. }
                | PluginError::OutOfMemory { .. }
                | PluginError::Trap { .. }
                | PluginError::OutcomeCount { .. }
                | PluginError::InvalidJson { .. }
                | PluginError::Init { .. }
                | PluginError::Instantiate { .. }
        )
    }
}
