//! Creates, resumes and cancels backfills: checks the table, records the
//! backfill in the store and runs its [`super::runner`] on a task of the
//! runners' own runtime.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::runner;
use super::scope::{ChunkQuery, ScopeRules};
use super::table::{self, BackfillError};
use super::{BackfillScope, Backfills};
use weft_core::change::Action;
use weft_postgres::PgConnectOptions;
use weft_sinks::config::model::TableRefError;
use weft_sinks::config::{InitialBackfill, SinkConfig, TableRef};
use weft_store::{Backfill, BackfillState, Store, StoreError};

/// The runtime backfill runners run on: one worker thread of their own,
/// shared by every runner. On the process's workers, a runner (and its
/// connection's task) waited behind the pipeline's batches, each processed
/// for milliseconds without yielding, while the chunk's rows backed up in
/// the socket: Postgres and the runner took turns instead of working at
/// once. On a thread of its own the OS shares the cores between them, and
/// a backfill stores ~1.08x as fast (BENCHMARKS.md, "Seventeenth round").
/// Never dropped: runners stop through their cancellation tokens.
fn runner_runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| weft_core::own_thread::runtime("weft-backfill".into()))
}

/// Why a backfill request was refused.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// No such sink.
    #[error("no sink named {0:?}; check the sink's name in the config")]
    UnknownSink(String),
    /// The table is not `schema.table` (the reason, naming it).
    #[error("table {0}")]
    BadTable(#[source] TableRefError),
    /// The sink does not take this table's `read` changes.
    #[error(
        "sink {sink} does not receive `read` changes of {table}; add the table to its `source` and `read` to its `actions`"
    )]
    NotInSink {
        /// The sink.
        sink: String,
        /// The table.
        table: String,
    },
    /// The database could not be reached, or the scope is wrong whatever
    /// the table.
    #[error(transparent)]
    Table(#[from] BackfillError),
    /// One of the tables cannot be backfilled as asked.
    #[error("{table}: {error}")]
    InTable {
        /// The table.
        table: String,
        /// Why.
        error: BackfillError,
    },
    /// "All tables" found none.
    #[error(
        "sink {sink} receives no tables to backfill: publication {publication} lists none it takes; add tables to the publication or name them with `tables`"
    )]
    NoTables {
        /// The sink.
        sink: String,
        /// The database's publication.
        publication: String,
    },
    /// No such backfill.
    #[error("sink {sink} has no backfill {id}")]
    UnknownBackfill {
        /// The sink.
        sink: String,
        /// The backfill id.
        id: String,
    },
    /// The backfill is not in the state the request needs.
    #[error("backfill {id} is {}; this needs it {}", state.as_str(), wanted.as_str())]
    WrongState {
        /// The backfill id.
        id: String,
        /// Its state.
        state: BackfillState,
        /// The state the request needs.
        wanted: BackfillState,
    },
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

/// A sink a launcher can backfill, with its database.
#[derive(Debug, Clone)]
pub struct BackfillTarget {
    /// The sink.
    pub config: SinkConfig,
    /// Its database.
    pub connection: PgConnectOptions,
    /// The database's replication slot: watermarks count only once it exists.
    pub slot: String,
    /// The database's publication: "all tables" means its tables.
    pub publication: String,
}

/// Which of a sink's tables a request backfills.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableSelection {
    /// These tables (`schema.table`).
    Tables(Vec<String>),
    /// Every table the sink receives `read` changes of.
    All,
}

/// Starts and stops backfills. Cheap to clone.
#[derive(Clone)]
pub struct BackfillLauncher {
    store: Store,
    backfills: Backfills,
    targets: Arc<std::sync::RwLock<HashMap<String, BackfillTarget>>>,
    running: Arc<Mutex<HashMap<String, CancellationToken>>>,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for BackfillLauncher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackfillLauncher").finish_non_exhaustive()
    }
}

impl BackfillLauncher {
    /// A launcher for `sinks`; runners stop at `shutdown`.
    pub fn new(
        store: Store,
        backfills: Backfills,
        sinks: Vec<BackfillTarget>,
        shutdown: CancellationToken,
    ) -> BackfillLauncher {
        let targets = sinks
            .into_iter()
            .map(|target| (target.config.name.clone(), target))
            .collect();
        BackfillLauncher {
            store,
            backfills,
            targets: Arc::new(std::sync::RwLock::new(targets)),
            running: Arc::default(),
            shutdown,
        }
    }

    /// Whether `sink` is one this launcher can backfill.
    pub fn knows_sink(&self, sink: &str) -> bool {
        self.targets().contains_key(sink)
    }

    /// Starts a backfill of each selected table of `sink`, reading the
    /// rows in `scope`. Every table is checked first; if one is refused,
    /// none starts.
    pub async fn create(
        &self,
        sink: &str,
        tables: TableSelection,
        scope: BackfillScope,
    ) -> Result<Vec<Backfill>, LaunchError> {
        let target = self.target(sink)?;
        scope.check()?;
        let tables = match tables {
            TableSelection::Tables(tables) => tables,
            TableSelection::All => {
                let all = self.publication_tables(sink, false).await?;
                if all.is_empty() {
                    return Err(LaunchError::NoTables {
                        sink: sink.to_string(),
                        publication: target.publication.clone(),
                    });
                }
                all
            }
        };
        let client = table::connect(&target.connection).await?;
        let mut checked = Vec::with_capacity(tables.len());
        for table in &tables {
            let parsed = TableRef::parse(table).map_err(LaunchError::BadTable)?;
            if !target
                .config
                .accepts(&parsed.schema, &parsed.table, Action::Read)
            {
                return Err(LaunchError::NotInSink {
                    sink: sink.to_string(),
                    table: table.to_string(),
                });
            }
            let in_table = |error: BackfillError| LaunchError::InTable {
                table: table.to_string(),
                error,
            };
            let (described, reltuples) = table::describe(&client, &parsed.schema, &parsed.table)
                .await
                .map_err(in_table)?;
            let query = ChunkQuery::build(&client, &described, &scope)
                .await
                .map_err(in_table)?;
            let estimate = if scope == BackfillScope::default() {
                reltuples
            } else {
                query.estimate(&client).await.map_err(in_table)?
            };
            checked.push((parsed, estimate));
        }
        let mut created = Vec::with_capacity(checked.len());
        for (table, estimate) in checked {
            let id = uuid::Uuid::new_v4().to_string();
            let backfill = self.store.create_backfill(
                &id,
                sink,
                (&table.schema, &table.table),
                &scope,
                estimate,
            )?;
            self.spawn(backfill.clone());
            created.push(backfill);
        }
        Ok(created)
    }

    /// Starts the `initial_backfill` of each sink that has never stored
    /// anything and has no backfill yet (its first start): the listed
    /// tables, or with `true` every table the sink receives. Runs in the
    /// background; failures are logged.
    pub fn start_initial(&self) -> Result<(), StoreError> {
        let sinks: Vec<String> = self.targets().keys().cloned().collect();
        for sink in sinks {
            if self.store.sink_cursor(&sink)?.is_some()
                || !self.store.backfills(Some(&sink))?.is_empty()
            {
                continue;
            }
            self.start_initial_of(&sink);
        }
        Ok(())
    }

    /// Starts the `initial_backfill` of `sink`, if it has one, in the
    /// background (a sink created while weft runs); failures are logged.
    pub fn start_initial_of(&self, sink: &str) {
        let Ok(target) = self.target(sink) else {
            return;
        };
        let tables = match &target.config.initial_backfill {
            None | Some(InitialBackfill::All(false)) => return,
            Some(InitialBackfill::Tables(tables)) => {
                TableSelection::Tables(tables.iter().map(ToString::to_string).collect())
            }
            Some(InitialBackfill::All(true)) => TableSelection::All,
        };
        let (launcher, sink) = (self.clone(), sink.to_string());
        tokio::spawn(async move {
            // On a first start the source may not have created the
            // publication yet.
            let tables = match tables {
                TableSelection::All => match launcher.publication_tables(&sink, true).await {
                    Ok(tables) => TableSelection::Tables(tables),
                    Err(error) => {
                        tracing::warn!(%sink, %error, "initial backfill not started");
                        return;
                    }
                },
                listed => listed,
            };
            match launcher
                .create(&sink, tables, BackfillScope::default())
                .await
            {
                Ok(created) => {
                    for backfill in created {
                        tracing::info!(%sink, table = %format!("{}.{}", backfill.table_schema, backfill.table_name), id = %backfill.id, "initial backfill started");
                    }
                }
                Err(error) => tracing::warn!(%sink, %error, "initial backfill not started"),
            }
        });
    }

    /// The target of `sink`.
    fn target(&self, sink: &str) -> Result<BackfillTarget, LaunchError> {
        self.targets()
            .get(sink)
            .cloned()
            .ok_or_else(|| LaunchError::UnknownSink(sink.to_string()))
    }

    fn targets(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, BackfillTarget>> {
        self.targets
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Backfills `target`'s sink from now on, as `target` says (a sink
    /// created or updated while weft runs).
    pub fn set_target(&self, target: BackfillTarget) {
        self.targets
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(target.config.name.clone(), target);
    }

    /// Stops backfilling `sink` (deleted while weft runs): cancels its
    /// active and paused backfills and forgets its target.
    pub fn forget_sink(&self, sink: &str) -> Result<(), LaunchError> {
        self.targets
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(sink);
        for backfill in self.store.backfills(Some(sink))? {
            if matches!(
                backfill.state,
                BackfillState::Active | BackfillState::Paused
            ) {
                self.cancel(sink, &backfill.id)?;
            }
        }
        Ok(())
    }

    /// The tables of `sink`'s publication (or its `include_tables`) that it
    /// receives `read` changes of, as `schema.table`. With `wait`, waits up
    /// to a minute for the source to create the publication.
    async fn publication_tables(&self, sink: &str, wait: bool) -> Result<Vec<String>, LaunchError> {
        let target = self.target(sink)?;
        if let Some(tables) = &target.config.source.include_tables {
            return Ok(tables.iter().map(ToString::to_string).collect());
        }
        for _ in 0..60 {
            let client = table::connect(&target.connection).await?;
            let rows = client
                .query(
                    "SELECT schemaname::text, tablename::text FROM pg_publication_tables
                     WHERE pubname = $1 ORDER BY 1, 2",
                    &[&target.publication],
                )
                .await
                .map_err(table::db_error)?;
            if !rows.is_empty() || !wait {
                return Ok(rows
                    .iter()
                    .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
                    .filter(|(schema, table)| target.config.accepts(schema, table, Action::Read))
                    .map(|(schema, table)| TableRef { schema, table }.to_string())
                    .collect());
            }
            tokio::select! {
                _ = self.shutdown.cancelled() => return Ok(Vec::new()),
                _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            }
        }
        Ok(Vec::new())
    }

    /// Resumes every active backfill of a known sink (after a restart).
    pub fn resume_all(&self) -> Result<usize, StoreError> {
        let mut resumed = 0;
        for backfill in self.store.backfills(None)? {
            if backfill.state == BackfillState::Active && self.knows_sink(&backfill.sink) {
                self.spawn(backfill);
                resumed += 1;
            }
        }
        Ok(resumed)
    }

    /// The backfill `id` of `sink`.
    fn find(&self, sink: &str, id: &str) -> Result<Backfill, LaunchError> {
        self.store
            .backfill(id)?
            .filter(|b| b.sink == sink)
            .ok_or_else(|| LaunchError::UnknownBackfill {
                sink: sink.to_string(),
                id: id.to_string(),
            })
    }

    /// Cancels the backfill `id` of `sink`; returns it as it is now.
    pub fn cancel(&self, sink: &str, id: &str) -> Result<Backfill, LaunchError> {
        let backfill = self.find(sink, id)?;
        self.store
            .end_backfill(id, BackfillState::Cancelled, None)?;
        if let Some(token) = self.lock().remove(id) {
            token.cancel();
        }
        let now = self.store.backfill(id)?.unwrap_or(backfill);
        super::publish_progress(&now);
        Ok(now)
    }

    /// Pauses the active backfill `id` of `sink` (`resume: false`) or
    /// resumes it after a pause (`resume: true`); returns it as it is now.
    pub fn pause_or_resume(
        &self,
        sink: &str,
        id: &str,
        resume: bool,
    ) -> Result<Backfill, LaunchError> {
        let backfill = self.find(sink, id)?;
        let (from, to) = if resume {
            (BackfillState::Paused, BackfillState::Active)
        } else {
            (BackfillState::Active, BackfillState::Paused)
        };
        if !self.store.move_backfill(id, from, to)? {
            return Err(LaunchError::WrongState {
                id: id.to_string(),
                state: backfill.state,
                wanted: from,
            });
        }
        if resume {
            let resumed = self.find(sink, id)?;
            self.spawn(resumed.clone());
            Ok(resumed)
        } else {
            if let Some(token) = self.lock().remove(id) {
                token.cancel();
            }
            let now = self.store.backfill(id)?.unwrap_or(backfill);
            super::publish_progress(&now);
            Ok(now)
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn spawn(&self, backfill: Backfill) {
        let Ok(target) = self.target(&backfill.sink) else {
            return;
        };
        super::publish_progress(&backfill);
        // A new run of the table's backfill starts from a clean slate.
        weft_core::health::global().clear(
            weft_core::health::EntityKind::Backfill,
            &super::health_name(&backfill.sink, &backfill.table_schema, &backfill.table_name),
            runner::FAILED,
        );
        let cancel = self.shutdown.child_token();
        self.lock().insert(backfill.id.clone(), cancel.clone());
        let span = tracing::info_span!("backfill", id = %backfill.id, sink = %backfill.sink);
        let (connection, slot, backfills, store, running) = (
            target.connection.clone(),
            target.slot.clone(),
            self.backfills.clone(),
            self.store.clone(),
            Arc::clone(&self.running),
        );
        runner_runtime().spawn(
            async move {
                let id = backfill.id.clone();
                runner::run(backfill, connection, slot, backfills, store, cancel.clone()).await;
                // A pause or cancel already removed this runner's entry,
                // and a resume may have put a new one there.
                if !cancel.is_cancelled() {
                    running
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .remove(&id);
                }
            }
            .instrument(span),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runners run on the one thread of their own runtime, whichever
    /// runtime launches them.
    #[tokio::test]
    async fn runners_run_on_their_own_thread() {
        let thread_of = || std::thread::current().name().map(str::to_string);
        let first = runner_runtime().spawn(async move { thread_of() });
        let second = runner_runtime().spawn(async move { thread_of() });
        let first = first.await.unwrap();
        assert_eq!(first.as_deref(), Some("weft-backfill"));
        assert_eq!(second.await.unwrap(), first);
        assert_ne!(thread_of(), first, "not the launching runtime's thread");
    }
}
