//! Creates, resumes and cancels backfills: checks the table, records the
//! backfill in the store and runs its [`super::runner`] on a task.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Backfills;
use super::runner::{self, BackfillError};
use crate::change::Action;
use crate::config::SinkConfig;
use crate::source::PgConnectOptions;
use crate::store::{Backfill, BackfillState, Store, StoreError};

/// Why a backfill request was refused.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// No such sink.
    #[error("no sink named {0:?}; check the sink's name in the config")]
    UnknownSink(String),
    /// The table is not `schema.table`.
    #[error("table {0:?} is not schema-qualified; write it as schema.table, e.g. public.orders")]
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
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

struct Target {
    config: SinkConfig,
    connection: PgConnectOptions,
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
    /// A launcher for `sinks`, each with its database's connection; runners
    /// stop at `shutdown`.
    pub fn new(
        store: Store,
        backfills: Backfills,
        sinks: Vec<(SinkConfig, PgConnectOptions)>,
        shutdown: CancellationToken,
    ) -> BackfillLauncher {
        let targets = sinks
            .into_iter()
            .map(|(config, connection)| (config.name.clone(), Target { config, connection }))
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
        let (schema, name) = table
            .split_once('.')
            .filter(|(s, t)| !s.is_empty() && !t.is_empty())
            .ok_or_else(|| LaunchError::BadTable(table.to_string()))?;
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

    /// Cancels the backfill `id` of `sink`; returns it as it is now.
    pub fn cancel(&self, sink: &str, id: &str) -> Result<Backfill, LaunchError> {
        let unknown = || LaunchError::UnknownBackfill {
            sink: sink.to_string(),
            id: id.to_string(),
        };
        let backfill = self
            .store
            .backfill(id)?
            .filter(|b| b.sink == sink)
            .ok_or_else(unknown)?;
        self.store
            .end_backfill(id, BackfillState::Cancelled, None)?;
        if let Some(token) = self.lock().remove(id) {
            token.cancel();
        }
        Ok(self.store.backfill(id)?.unwrap_or(backfill))
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
        let (connection, backfills, store, running) = (
            target.connection.clone(),
            self.backfills.clone(),
            self.store.clone(),
            Arc::clone(&self.running),
        );
        tokio::spawn(
            async move {
                let id = backfill.id.clone();
                runner::run(backfill, connection, backfills, store, cancel).await;
                running
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .remove(&id);
            }
            .instrument(span),
        );
    }
}
