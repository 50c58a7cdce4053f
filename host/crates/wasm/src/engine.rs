//! The one wasmtime engine shared by every function.
//!
//! * The pooling allocator pre-reserves slots for instances, memories and
//!   tables, making instantiation cheap: a discarded instance is replaced in
//!   microseconds. Where that address space cannot be reserved (a
//!   `ulimit -v`, valgrind), the engine allocates on demand instead.
//! * Epoch interruption bounds CPU per call: a background thread ticks the
//!   epoch every `epoch_tick`; a store's deadline is set before every call.
//!   The thread stops by itself once the engine is dropped.
//! * Compiled components are cached on disk (see the `cache` module).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::{Component, Linker, types::ComponentItem};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::cache::{ComponentCache, Origin};
use super::guest_state::GuestState;
use super::{Limits, PluginError};
use weft_config::plugin_registry::Capability;

/// Engine-wide settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineSettings {
    /// Directory of the compiled-component cache; created if missing. Only
    /// weft must be able to write it.
    pub cache_dir: PathBuf,
    /// How often the epoch advances; the granularity of call timeouts.
    /// Default 10 ms.
    pub epoch_tick: Duration,
    /// Component instances alive at once, across all functions (pool size).
    /// Default 1000.
    pub max_instances: u32,
    /// Upper bound of any function's memory cap ([`Limits::memory_bytes`]).
    /// Default 256 MiB.
    pub max_memory_bytes: usize,
}

impl EngineSettings {
    /// Default settings with the given cache directory.
    pub fn new(cache_dir: impl Into<PathBuf>) -> Self {
        EngineSettings {
            cache_dir: cache_dir.into(),
            epoch_tick: Duration::from_millis(10),
            max_instances: 1000,
            max_memory_bytes: 256 << 20,
        }
    }
}

/// How the engine allocates function instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocation {
    /// From a pool of slots reserved when the engine starts: instantiation
    /// in microseconds, at most `max_instances` live instances.
    Pooled,
    /// Each instance mapped when it is created: what weft falls back to when
    /// the pool's address space cannot be reserved.
    OnDemand,
}

/// The wasmtime config of an engine that allocates as `allocation` says.
fn engine_config(settings: &EngineSettings, allocation: Allocation) -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true).epoch_interruption(true);
    match allocation {
        Allocation::Pooled => {
            let mut pool = PoolingAllocationConfig::new();
            let instances = settings.max_instances;
            pool.total_component_instances(instances)
                .total_core_instances(instances.saturating_mul(4))
                .total_memories(instances.saturating_mul(2))
                .total_tables(instances.saturating_mul(4))
                .max_core_instances_per_component(crate::limits::DEFAULT_INSTANCES as u32 * 2)
                .max_memories_per_component(crate::limits::DEFAULT_MEMORIES as u32 * 2)
                .max_tables_per_component(crate::limits::DEFAULT_TABLES as u32 * 2)
                .max_memory_size(settings.max_memory_bytes);
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        }
        Allocation::OnDemand => {
            // Each memory reserves no more than a function may use (the
            // instance limiter caps it there), so it never moves, and
            // small guards: a few hundred MiB of address space a memory,
            // not 4 GiB, at the price of explicit bounds checks.
            config
                .allocation_strategy(InstanceAllocationStrategy::OnDemand)
                .memory_reservation(settings.max_memory_bytes as u64)
                .memory_reservation_for_growth(0)
                .memory_guard_size(64 << 10);
        }
    }
    config
}

/// Loads functions. Cheap to clone; all clones share the engine, the
/// linker and the cache.
#[derive(Clone)]
pub struct PluginEngine {
    inner: Arc<EngineInner>,
}

impl std::fmt::Debug for PluginEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginEngine")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

pub(crate) struct EngineInner {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<GuestState>,
    pub(crate) settings: EngineSettings,
    allocation: Allocation,
    cache: ComponentCache,
}

/// A component compiled and checked, ready to be pre-instantiated.
pub(crate) struct LoadedComponent {
    pub(crate) component: Component,
    pub(crate) path: PathBuf,
}

impl PluginEngine {
    /// Creates the engine, its epoch ticker and its cache directory.
    pub fn new(settings: EngineSettings) -> Result<Self, PluginError> {
        if settings.epoch_tick.is_zero()
            || settings.max_instances == 0
            || settings.max_memory_bytes == 0
        {
            return Err(PluginError::Settings(format!(
                "epoch_tick, max_instances and max_memory_bytes must be above zero (got {settings:?})"
            )));
        }
        let (engine, allocation) = match Engine::new(&engine_config(&settings, Allocation::Pooled))
        {
            Ok(engine) => (engine, Allocation::Pooled),
            // The pool reserves its address space up front (about 8 TB at
            // the defaults); under `ulimit -v` or valgrind that fails, and
            // weft would not start at all, even with no function to run.
            Err(pool_error) => {
                let engine = Engine::new(&engine_config(&settings, Allocation::OnDemand))
                    .map_err(|e| {
                        PluginError::Settings(format!(
                            "cannot create the wasmtime engine: {e:#} (with the pooling allocator: {pool_error:#})"
                        ))
                    })?;
                tracing::warn!(
                    error = format!("{pool_error:#}"),
                    "the plugin engine cannot reserve its instance pool's address space \
                     (a `ulimit -v` set?); functions are instantiated on demand instead, \
                     with bounds-checked memories of at most max_memory_bytes: slower to \
                     replace a discarded instance, and no engine-wide cap on live instances. \
                     Lift the address-space limit to get the pool back"
                );
                (engine, Allocation::OnDemand)
            }
        };

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| PluginError::Settings(format!("cannot link WASI: {e:#}")))?;
        // Linked for every component, but only a component whose function is
        // granted the capability may import it (checked at load), and the
        // host side answers only when the instance holds the grant.
        super::bindings::source_query::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |state| state,
        )
        .map_err(|e| PluginError::Settings(format!("cannot link source-query: {e:#}")))?;
        super::bindings::outbound_http::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |state| state,
        )
        .map_err(|e| PluginError::Settings(format!("cannot link outbound-http: {e:#}")))?;

        let cache = ComponentCache::open(&settings.cache_dir, &engine).map_err(|source| {
            PluginError::CacheDir {
                path: settings.cache_dir.clone(),
                source,
            }
        })?;

        spawn_epoch_ticker(&engine, settings.epoch_tick).map_err(|e| {
            PluginError::Settings(format!("cannot spawn the epoch ticker thread: {e}"))
        })?;
        Ok(PluginEngine {
            inner: Arc::new(EngineInner {
                engine,
                linker,
                settings,
                allocation,
                cache,
            }),
        })
    }

    /// How the engine allocates instances: [`Allocation::Pooled`] unless
    /// the pool's address space could not be reserved.
    pub fn allocation(&self) -> Allocation {
        self.inner.allocation
    }

    pub(crate) fn inner(&self) -> &EngineInner {
        &self.inner
    }

    /// Reads, checks, compiles (or loads from cache) and checks the exports of
    /// a component.
    pub(crate) fn load_component(
        &self,
        plugin: &str,
        path: &Path,
        limits: &Limits,
        kind: &str,
        granted: &[&str],
    ) -> Result<LoadedComponent, PluginError> {
        limits.validate(plugin, self.inner.settings.max_memory_bytes)?;
        let (world, exports) = world_of(kind).expect("the load_* methods pass known kinds");
        let wasm = std::fs::read(path).map_err(|source| PluginError::Read {
            plugin: plugin.to_string(),
            path: path.to_path_buf(),
            source,
        })?;
        let component = self.compile_checked(plugin, path, &wasm, world, exports, granted)?;
        Ok(LoadedComponent {
            component,
            path: path.to_path_buf(),
        })
    }

    /// Checks that `wasm` is a component implementing the world of function
    /// kind `kind` (`transform`, `filter`, `routing` or `enrichment`) that
    /// imports no capability outside `allowed` (full import names, e.g.
    /// [`CAPABILITY_IMPORTS`]) and links against the host; compiles it into
    /// the on-disk cache on the way, so a later load is a cache hit. Answers
    /// the capability imports it declares. `label` names it in errors.
    pub fn inspect(
        &self,
        plugin: &str,
        label: &Path,
        kind: &str,
        wasm: &[u8],
        allowed: &[&str],
    ) -> Result<Vec<String>, PluginError> {
        let (world, exports) = world_of(kind).ok_or_else(|| {
            PluginError::Settings(format!(
                "unknown function kind {kind:?}: expected one of transform, filter, routing, enrichment"
            ))
        })?;
        let component = self.compile_checked(plugin, label, wasm, world, exports, allowed)?;
        let linker = &self.inner.linker;
        // Type-checks the exports against the world's signatures and links
        // every import, as loading it for a sink would.
        let linked: wasmtime::Result<()> = (|| {
            let pre = linker.instantiate_pre(&component)?;
            match kind {
                "transform" => super::bindings::transform::TransformPre::new(pre).map(drop),
                "filter" => super::bindings::filter::FilterPre::new(pre).map(drop),
                "routing" => super::bindings::routing::RoutingPre::new(pre).map(drop),
                _ => super::bindings::enrichment::EnrichmentPre::new(pre).map(drop),
            }
        })();
        linked.map_err(|e| PluginError::Link {
            plugin: plugin.to_string(),
            path: label.to_path_buf(),
            message: format!("{e:#}"),
        })?;
        Ok(component
            .component_type()
            .imports(&self.inner.engine)
            .map(|(import, _)| import.to_string())
            .filter(|import| CAPABILITY_IMPORTS.contains(&import.as_str()))
            .collect())
    }

    /// Checks the preamble, compiles (or loads from cache) and checks the
    /// exports and the capability imports of the component bytes `wasm`.
    fn compile_checked(
        &self,
        plugin: &str,
        path: &Path,
        wasm: &[u8],
        world: &'static str,
        exports: &[&str],
        granted: &[&str],
    ) -> Result<Component, PluginError> {
        check_preamble(wasm).map_err(|reason| PluginError::NotAComponent {
            plugin: plugin.to_string(),
            path: path.to_path_buf(),
            reason,
        })?;

        let started = Instant::now();
        let (component, origin) = self
            .inner
            .cache
            .load(&self.inner.engine, wasm)
            .map_err(|e| PluginError::Compile {
                plugin: plugin.to_string(),
                path: path.to_path_buf(),
                message: format!("{e:#}"),
            })?;
        tracing::info!(
            plugin,
            path = %path.display(),
            cached = origin == Origin::Cached,
            elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
            "loaded component"
        );

        let component_type = component.component_type();
        if let Some(built_for) = component_type
            .imports(&self.inner.engine)
            .filter_map(|(import, _)| import.strip_prefix("weft:plugin/types@"))
            .find(|version| *version != WIT_VERSION)
        {
            return Err(PluginError::WitVersion {
                plugin: plugin.to_string(),
                path: path.to_path_buf(),
                built_for: built_for.to_string(),
            });
        }
        let missing: Vec<String> = exports
            .iter()
            .filter(|name| {
                !matches!(
                    component_type
                        .get_export(&self.inner.engine, name)
                        .map(|export| export.ty),
                    Some(ComponentItem::ComponentFunc(_))
                )
            })
            .map(|name| name.to_string())
            .collect();
        if !missing.is_empty() {
            return Err(PluginError::WrongWorld {
                plugin: plugin.to_string(),
                path: path.to_path_buf(),
                world,
                missing,
            });
        }
        let ungranted: Vec<String> = component_type
            .imports(&self.inner.engine)
            .map(|(import, _)| import)
            // Every weft import but the type-only `types` interface is a
            // capability that must be granted.
            .filter(|import| {
                import.starts_with("weft:plugin/")
                    && !import.starts_with("weft:plugin/types@")
                    && !granted.contains(import)
            })
            .map(str::to_string)
            .collect();
        if !ungranted.is_empty() {
            return Err(PluginError::Ungranted {
                plugin: plugin.to_string(),
                path: path.to_path_buf(),
                imports: ungranted,
            });
        }
        Ok(component)
    }
}

/// The version of the `weft:plugin` WIT package this host implements.
pub const WIT_VERSION: &str = weft_core::wit_version!();

/// The world of function kind `kind` and the exports it must have.
fn world_of(kind: &str) -> Option<(&'static str, &'static [&'static str])> {
    Some(match kind {
        "transform" => ("transform", &["init", "transform"]),
        "filter" => ("filter", &["init", "filter"]),
        "routing" => ("routing", &["init", "route"]),
        "enrichment" => ("enrichment", &["init", "enrich"]),
        _ => return None,
    })
}

/// The full import names of the host capabilities a function can be
/// granted: `source-query` and `outbound-http`.
pub const CAPABILITY_IMPORTS: &[&str] = &[
    Capability::SourceQuery.import(),
    Capability::OutboundHttp.import(),
];

/// Checks the 8-byte preamble: `\0asm`, then version and layer. A component
/// is layer 1; a core module is layer 0.
fn check_preamble(wasm: &[u8]) -> Result<(), String> {
    if wasm.len() < 8 || &wasm[..4] != b"\0asm" {
        return Err(
            "is not a WebAssembly file (no `\\0asm` header); give the path of a .wasm component"
                .into(),
        );
    }
    if wasm[6..8] == [0, 0] {
        return Err(
            "is a core WebAssembly module, not a component; build it for \
                    `--target wasm32-wasip2` or wrap it with `wasm-tools component new`"
                .into(),
        );
    }
    Ok(())
}

/// Ticks the engine's epoch until the engine is dropped.
fn spawn_epoch_ticker(engine: &Engine, tick: Duration) -> std::io::Result<()> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("weft-plugin-epoch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(tick);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => return,
                }
            }
        })?;
    Ok(())
}
