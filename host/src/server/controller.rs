//! The running weft as the API sees it ([`weft_api::Controller`]): the
//! config file and the tokens it runs with, and plans and applies of a new
//! config.
//!
//! An apply validates the proposed config exactly as `weft run` would and,
//! when it changes something, writes the config file (a new file renamed
//! over the old, so a crash leaves one or the other). A config that changes
//! only `databases:`, `functions:`, `sinks:`, `http_endpoints:`,
//! `accounts:` and `api_tokens:` entries is applied in place while every
//! sink it does not touch keeps flowing: the changed functions, the created
//! or updated sinks and the databases that start are loaded and checked
//! first (any failure refuses the apply, nothing changed); then the
//! functions are swapped in, each sink between two of its chain runs (see
//! [`weft_pipeline::hot_swap`]), the API takes the new token set, sinks join, are
//! replaced in or leave their pipelines between two transactions, and a
//! changed database's feed alone restarts (see [`super::live_sinks`]).
//! Anything else restarts weft's pipelines in-process with the new file:
//! in-flight deliveries finish, every stored message and slot position
//! carries over, so nothing is lost or reordered.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::live_plan::LivePlan;
use super::live_sinks::LiveSinks;
use weft_api::auth::ApiTokens;
use weft_api::{
    Applied, ApplyError, ConfigEdit, Controller, DatabasesChanged, HotSwapped, SinksChanged,
};
use weft_pipeline::hot_swap::FunctionRuntime;
use weft_pipeline::{SinkHandles, restore_cpu_shares};
use weft_sinks::config::Config;
use weft_sinks::config::export::REDACTED;
use weft_sinks::config::plan::{PlannedChange, plan};

/// The running weft's config and how a new one is applied. Cheap to
/// clone; clones share it.
#[derive(Clone)]
pub struct LiveController {
    inner: Arc<Inner>,
}

struct Inner {
    /// The config file, which an apply rewrites; `None` without one.
    path: Option<PathBuf>,
    /// Its text as written (before `${VAR}` interpolation).
    text: RwLock<Option<String>>,
    tokens: RwLock<ApiTokens>,
    functions: FunctionRuntime,
    live_sinks: LiveSinks,
    handles: SinkHandles,
    /// Set when an apply needs the pipelines restarted with the new file.
    reload: AtomicBool,
    shutdown: CancellationToken,
}

impl LiveController {
    /// The controller of a weft running the config file at `path`, whose
    /// text is `text`, with `tokens`, `functions` and `live_sinks`; an
    /// apply that needs a restart cancels `shutdown`.
    pub fn new(
        (path, text): (Option<PathBuf>, Option<String>),
        tokens: ApiTokens,
        (functions, live_sinks, handles): (FunctionRuntime, LiveSinks, SinkHandles),
        shutdown: CancellationToken,
    ) -> LiveController {
        LiveController {
            inner: Arc::new(Inner {
                path,
                text: RwLock::new(text),
                tokens: RwLock::new(tokens),
                functions,
                live_sinks,
                handles,
                reload: AtomicBool::new(false),
                shutdown,
            }),
        }
    }

    /// Whether an apply asked for a restart with the (applied) config file.
    pub fn reload_requested(&self) -> bool {
        self.inner.reload.load(Ordering::SeqCst)
    }

    /// Stops everything, as a shutdown does, so that weft starts again with
    /// the config file.
    fn request_reload(&self) {
        self.inner.reload.store(true, Ordering::SeqCst);
        self.inner.shutdown.cancel();
    }

    /// The config file and the changes `yaml` makes to it, with the config
    /// `yaml` holds (plugin references resolved), once it is valid.
    fn checked_plan(
        &self,
        yaml: &str,
    ) -> Result<(PathBuf, Vec<PlannedChange>, Config), ApplyError> {
        let (path, current) = self.config_file().ok_or(ApplyError::NoConfigFile)?;
        if yaml.contains(REDACTED) {
            return Err(ApplyError::Redacted(REDACTED));
        }
        let base_dir = path
            .parent()
            .filter(|dir| !dir.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let mut config = Config::from_yaml(yaml, base_dir, &|name| std::env::var(name).ok())
            .map_err(ApplyError::Invalid)?;
        self.inner
            .functions
            .registry()
            .resolve(&mut config)
            .map_err(ApplyError::UnresolvedPlugins)?;
        let changes = plan(&current, yaml).map_err(ApplyError::Unplannable)?;
        Ok((path, changes, config))
    }

    /// Applies `config` (the file at `path` with the text `yaml`) without a
    /// restart: loads every changed function, created or updated sink and
    /// starting database first (any failure refuses the apply, nothing
    /// changed), writes the file, then swaps the functions in, takes the
    /// new API tokens, and creates, updates and deletes the sinks and stops
    /// and starts the database feeds `plan` names.
    async fn apply_live(
        &self,
        plan: LivePlan,
        config: Config,
        (path, yaml): (PathBuf, String),
        changes: Vec<PlannedChange>,
    ) -> Result<Applied, ApplyError> {
        let Inner {
            functions,
            live_sinks,
            handles,
            ..
        } = &*self.inner;
        let running = functions.running();
        let refused = |error: String| {
            restore_cpu_shares(&running);
            ApplyError::Refused(error)
        };
        let tokens = config.api_tokens.clone();
        let sinks = live_sinks.prepare(&config, plan).await.map_err(refused)?;
        let prepared = tokio::task::spawn_blocking({
            let functions = functions.clone();
            move || functions.prepare(config)
        })
        .await
        .map_err(|error| ApplyError::Task(format!("the function loading task failed: {error}")))?
        .map_err(|error| refused(format!("a changed function does not load: {error}")))?;
        write_config(&path, &yaml).inspect_err(|_| restore_cpu_shares(&running))?;
        *write(&self.inner.text) = Some(yaml);
        let swapped_sinks = prepared.sinks();
        let swapped = prepared.functions().to_vec();
        functions.commit(prepared);
        *write(&self.inner.tokens) = ApiTokens::new(tokens);
        for sink in &swapped_sinks {
            // A quarantine is about the function that was just replaced.
            if let Some(breaker) = handles.breaker(sink) {
                breaker.reset();
            }
        }
        let sink_changes = match live_sinks.commit(sinks).await {
            Ok(sink_changes) => sink_changes,
            Err(error) => {
                tracing::warn!(%error, file = %path.display(), "config applied through the API, but a sink change could not be made in place; restarting the pipelines with it");
                self.request_reload();
                return Ok(Applied::by_restart(changes));
            }
        };
        tracing::info!(functions = ?swapped, sinks = ?sink_changes, file = %path.display(), "config applied through the API without a restart");
        Ok(Applied {
            changes,
            applied: true,
            restarted: Some(false),
            hot_swapped: Some(HotSwapped {
                functions: swapped,
                sinks: swapped_sinks,
            }),
            sinks: Some(SinksChanged {
                created: sink_changes.created,
                updated: sink_changes.updated,
                deleted: sink_changes.deleted,
            }),
            databases: Some(DatabasesChanged {
                stopped: sink_changes.databases_stopped,
                started: sink_changes.databases_started,
            }),
        })
    }
}

#[async_trait]
impl Controller for LiveController {
    fn config_file(&self) -> Option<(PathBuf, String)> {
        let path = self.inner.path.clone()?;
        Some((path, read(&self.inner.text).clone()?))
    }

    fn api_tokens(&self) -> ApiTokens {
        read(&self.inner.tokens).clone()
    }

    async fn plan(&self, yaml: String) -> Result<Vec<PlannedChange>, ApplyError> {
        self.checked_plan(&yaml).map(|(_, changes, _)| changes)
    }

    async fn apply(&self, edit: ConfigEdit<'_>) -> Result<Applied, ApplyError> {
        let functions = &self.inner.functions;
        // One apply at a time, from the plan to the swap or restart.
        let _turn = functions.apply_turn().await;
        let current = read(&self.inner.text).clone().unwrap_or_default();
        let yaml = edit(&current).map_err(ApplyError::Edit)?;
        let (path, changes, config) = self.checked_plan(&yaml)?;
        if changes.is_empty() {
            return Ok(Applied::nothing(changes));
        }
        if let Some(plan) = self.inner.live_sinks.plan(&functions.running(), &config) {
            return self.apply_live(plan, config, (path, yaml), changes).await;
        }
        write_config(&path, &yaml)?;
        tracing::info!(changes = changes.len(), file = %path.display(), "config applied through the API; restarting the pipelines with it");
        self.request_reload();
        Ok(Applied::by_restart(changes))
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Writes the applied config file.
fn write_config(path: &Path, yaml: &str) -> Result<(), ApplyError> {
    weft_core::fs::write_atomically(path, yaml.as_bytes()).map_err(|source| ApplyError::Write {
        path: path.to_owned(),
        source,
    })
}
