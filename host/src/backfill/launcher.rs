//! Creates, resumes and cancels backfills: checks the table, records the
//! backfill in the store and runs its [`super::runner`] on a task.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Backfills;
use super::runner::{self, BackfillError};
use crate::change::Action;
use crate::config::{InitialBackfill, SinkConfig, TableRef};
use crate::source::PgConnectOptions;
use crate::store::{Backfill, BackfillState, Store, StoreError};

/// Why a backfill request was refused.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// No such sink.
    #[error("no sink named {0:?}; check the sink's name in the config")]
    UnknownSink(String),
    /// The table is not `schema.table` (the reason, naming it).
    #[error("table {0}")]
    BadTable(String),
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
    /// The table cannot be backfilled.
    #[error(transparent)]
    Table(#[from] BackfillError),
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

struct Target {
    config: SinkConfig,
    connection: PgConnectOptions,
    /// The database's replication slot: watermarks count only once it exists.
    slot: String,
}

/// Starts and stops backfills. Cheap to clone.
#[derive(Clone)]
pub struct BackfillLauncher {
    store: Store,
    backfills: Backfills,
    targets: Arc<HashMap<String, Target>>,
    running: Arc<Mutex<HashMap<String, CancellationToken>>>,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for BackfillLauncher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackfillLauncher").finish_non_exhaustive()
    }
}

impl BackfillLauncher {
    /// A launcher for `sinks`, each with its database's connection and
    /// replication slot; runners
    /// stop at `shutdown`.
    pub fn new(
        store: Store,
        backfills: Backfills,
        sinks: Vec<(SinkConfig, PgConnectOptions, String)>,
        shutdown: CancellationToken,
    ) -> BackfillLauncher {
        let targets = sinks
            .into_iter()
            .map(|(config, connection, slot)| {
                (
                    config.name.clone(),
                    Target {
                        config,
                        connection,
                        slot,
                    },
                )
            })
            .collect();
        BackfillLauncher {
            store,
            backfills,
            targets: Arc::new(targets),
            running: Arc::default(),
            shutdown,
        }
    }

    /// Whether `sink` is one this launcher can backfill.
    pub fn knows_sink(&self, sink: &str) -> bool {
        self.targets.contains_key(sink)
    }

    /// Starts a backfill of `table` (`schema.table`) into `sink`.
    pub async fn create(&self, sink: &str, table: &str) -> Result<Backfill, LaunchError> {
        let target = self
            .targets
            .get(sink)
            .ok_or_else(|| LaunchError::UnknownSink(sink.to_string()))?;
        let parsed = TableRef::parse(table).map_err(LaunchError::BadTable)?;
        let (schema, name) = (parsed.schema.as_str(), parsed.table.as_str());
        if !target.config.accepts(schema, name, Action::Read) {
            return Err(LaunchError::NotInSink {
                sink: sink.to_string(),
                table: table.to_string(),
            });
        }
        let client = runner::connect(&target.connection).await?;
        let (_, estimate) = runner::describe(&client, schema, name).await?;
        let id = uuid::Uuid::new_v4().to_string();
        let backfill = self
            .store
            .create_backfill(&id, sink, schema, name, estimate)?;
        self.spawn(backfill.clone());
        Ok(backfill)
    }

    /// Starts the `initial_backfill` of each sink that has never stored
    /// anything and has no backfill yet (its first start): the listed
    /// tables, or with `true` every table of the database's `publication`
    /// the sink receives. Runs in the background; failures are logged.
    pub fn start_initial(&self, publication_of: HashMap<String, String>) -> Result<(), StoreError> {
        for (sink, target) in self.targets.iter() {
            let tables = match &target.config.initial_backfill {
                None | Some(InitialBackfill::All(false)) => continue,
                Some(InitialBackfill::Tables(tables)) => Some(tables.clone()),
                Some(InitialBackfill::All(true)) => target.config.source.include_tables.clone(),
            };
            if self.store.sink_cursor(sink)?.is_some()
                || !self.store.backfills(Some(sink))?.is_empty()
            {
                continue;
            }
            let (launcher, sink) = (self.clone(), sink.clone());
            let publication = publication_of.get(&sink).cloned().unwrap_or_default();
            tokio::spawn(async move {
                let tables = match tables {
                    Some(tables) => tables.iter().map(ToString::to_string).collect(),
                    None => launcher.publication_tables(&sink, &publication).await,
                };
                for table in tables {
                    match launcher.create(&sink, &table).await {
                        Ok(backfill) => {
                            tracing::info!(%sink, %table, id = %backfill.id, "initial backfill started")
                        }
                        Err(error) => {
                            tracing::warn!(%sink, %table, %error, "initial backfill not started")
                        }
                    }
                }
            });
        }
        Ok(())
    }

    /// The tables of `publication` that `sink` receives `read` changes of,
    /// as `schema.table`; waits (up to a minute) for the source to create
    /// the publication if it does not exist yet.
    async fn publication_tables(&self, sink: &str, publication: &str) -> Vec<String> {
        let Some(target) = self.targets.get(sink) else {
            return Vec::new();
        };
        for _ in 0..60 {
            if let Ok(client) = runner::connect(&target.connection).await
                && let Ok(rows) = client
                    .query(
                        "SELECT schemaname::text, tablename::text FROM pg_publication_tables
                         WHERE pubname = $1 ORDER BY 1, 2",
                        &[&publication],
                    )
                    .await
                && !rows.is_empty()
            {
                return rows
                    .iter()
                    .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
                    .filter(|(schema, table)| target.config.accepts(schema, table, Action::Read))
                    .map(|(schema, table)| TableRef { schema, table }.to_string())
                    .collect();
            }
            tokio::select! {
                _ = self.shutdown.cancelled() => return Vec::new(),
                _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            }
        }
        tracing::warn!(%sink, %publication, "initial backfill: the publication lists no tables");
        Vec::new()
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
        Ok(self.store.backfill(id)?.unwrap_or(backfill))
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
            Ok(self.store.backfill(id)?.unwrap_or(backfill))
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn spawn(&self, backfill: Backfill) {
        let Some(target) = self.targets.get(&backfill.sink) else {
            return;
        };
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
        tokio::spawn(
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
