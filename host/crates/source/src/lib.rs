//! Postgres logical replication: pgoutput decoding, relations and rows,
//! slot and publication management, reconnects and confirmation.
//!
//! This layer sits on `weft-core` and `weft-postgres` (the connection, its
//! protocol and the rendering of values); it may not import the store, the
//! function host, the sinks or anything above them: it hands changes to
//! whoever calls [`run`].
//!
//! [`run`] is the entry point: it checks the server, makes sure the
//! publication and slot exist, streams pgoutput from the slot's confirmed
//! position and hands the pipeline committed changes in commit order. It
//! confirms to Postgres only what the pipeline reports durable, and
//! reconnects with capped exponential backoff when the connection drops.
//!
//! * [`pgoutput`]: the pgoutput message decoder.
//! * [`relation`]: the relations seen on the stream and row rendering.
//! * [`slot`]: server, publication and slot checks and creation.
//! * [`spill`]: streamed in-progress transactions, spilled to disk when big.
//! * [`heartbeat`]: `pg_logical_emit_message` heartbeats for idle databases.
//! * [`slot_stats`]: the slot's retained WAL and confirmed lag, as metrics.
//! * [`stream`]: one replication session: decode, order, emit, confirm.
//! * [`unchanged_toast`]: metric and health warning for unchanged TOAST
//!   values shown as `"unchanged_toast"`.

pub mod events;
pub mod heartbeat;
pub mod pgoutput;
pub mod relation;
pub mod slot;
pub mod slot_stats;
pub mod spill;
pub mod stream;
pub mod unchanged_toast;

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use weft_core::health::{self, EntityKind, Status};
use weft_core::lsn::Lsn;
use weft_postgres::{PgConnectOptions, PgError};

/// Where and how to replicate from.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// The database's `name` in the config: the `database` label of its
    /// metrics and the entity of its health checks.
    pub name: String,
    /// How to reach the database.
    pub connection: PgConnectOptions,
    /// The logical replication slot to stream from.
    pub slot_name: String,
    /// Create the slot when it does not exist.
    pub create_slot_if_not_exists: bool,
    /// The publication that selects the tables.
    pub publication_name: String,
    /// Create the publication when it does not exist.
    pub create_publication_if_not_exists: bool,
    /// Tables as `schema.table`; the publication is created `FOR TABLE`
    /// these, or `FOR ALL TABLES` when empty, and an existing one must
    /// include them.
    pub tables: Vec<String>,
    /// A directory of this source's own where streamed transactions larger
    /// than [`spill::SPILL_THRESHOLD_BYTES`] wait on disk for their commit.
    /// Its `*.spill` files are deleted when the source starts.
    pub spill_dir: PathBuf,
    /// How often to write a heartbeat (`pg_logical_emit_message`) into the
    /// database, so that the slot of an idle database advances; `None`
    /// writes none.
    pub heartbeat_interval: Option<Duration>,
    /// Raise the slot's [`slot_stats::SLOT_LAG_CHECK`] warning while it
    /// retains more WAL than this, in bytes.
    pub lag_warning_bytes: u64,
}

/// The default [`SourceConfig::heartbeat_interval`], as Sequin's.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(15);

/// Everything that can stop the source.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Talking to Postgres failed: connecting, TLS, authentication, a
    /// query or the replication connection.
    #[error(transparent)]
    Postgres(#[from] PgError),
    /// The replication stream broke the rules of logical replication.
    #[error("replication protocol violation: {0}")]
    Protocol(String),
    /// A pgoutput message could not be decoded.
    #[error(transparent)]
    Decode(#[from] pgoutput::DecodeError),
    /// A configured table does not exist.
    #[error("table {table} does not exist: create it or remove it from the configured tables")]
    TableMissing {
        /// `schema.table`.
        table: String,
    },
    /// The publication does not exist and may not be created.
    #[error(
        "publication {publication:?} does not exist: run {fix}; or set create_if_not_exists: true"
    )]
    PublicationMissing {
        /// The publication.
        publication: String,
        /// The SQL that creates it.
        fix: String,
    },
    /// The publication exists but does not fit.
    #[error("publication {publication:?} does not fit: {reason}; run {fix}")]
    PublicationMismatch {
        /// The publication.
        publication: String,
        /// What does not fit.
        reason: String,
        /// The SQL that fixes it.
        fix: String,
    },
    /// The slot does not exist and may not be created.
    #[error(
        "replication slot {slot:?} does not exist: run {fix}; or set create_if_not_exists: true"
    )]
    SlotMissing {
        /// The slot.
        slot: String,
        /// The SQL that creates it.
        fix: String,
    },
    /// The slot exists but does not fit.
    #[error("replication slot {slot:?} does not fit: {reason}; fix: {fix}")]
    SlotMismatch {
        /// The slot.
        slot: String,
        /// What does not fit.
        reason: String,
        /// What to do.
        fix: String,
    },
    /// Another process streams from the slot.
    #[error(
        "replication slot {slot:?} is in use by another process (PID {pid}, application_name \
         {application_name:?}, client {client}): a slot serves one consumer at a time. Stop that \
         consumer (see SELECT * FROM pg_stat_replication WHERE pid = {pid}), or end it with \
         SELECT pg_terminate_backend({pid}); or give this database its own slot name"
    )]
    SlotActive {
        /// The slot.
        slot: String,
        /// The walsender holding it.
        pid: i32,
        /// That walsender's application_name.
        application_name: String,
        /// Its client address.
        client: String,
    },
    /// A spill file of a big streamed transaction could not be written or read.
    #[error(
        "spill file {path}: {source}; check that the data directory's disk has space and is writable"
    )]
    Spill {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The pipeline dropped its receiver while the source was running.
    #[error("the pipeline stopped receiving source events")]
    PipelineClosed,
}

impl SourceError {
    /// Whether reconnecting may help: lost connections and server-side
    /// conditions that pass (shutdown, restart, slot briefly in use).
    pub fn is_retryable(&self) -> bool {
        match self {
            SourceError::Postgres(error) => error.is_retryable(),
            _ => false,
        }
    }
}

/// The health check (on the slot's entity) that replication is streaming;
/// `GET /health/ready` waits for every slot to pass it.
pub const REPLICATION_CHECK: &str = "replication";

/// Streams committed changes from the slot into `events` until `shutdown`
/// is cancelled.
///
/// Emits, per transaction in commit order, its changes (with `commit_lsn`,
/// `commit_idx`, `xid`, `commit_timestamp` set) then a
/// [`SourceEvent::Commit`](weft_core::change::SourceEvent::Commit); and
/// [`SourceEvent::Idle`](weft_core::change::SourceEvent::Idle) on
/// keepalives when no transaction is open. Confirms to Postgres (standby status flush/apply
/// LSN) exactly the latest value of `durable`. Setup problems (wal_level,
/// privileges, slot or publication that do not fit) end it with an error;
/// lost connections are retried with capped exponential backoff, resuming
/// from the slot's confirmed position and skipping transactions already
/// emitted in this run.
pub async fn run(
    config: SourceConfig,
    events: events::EventSender,
    durable: watch::Receiver<Lsn>,
    shutdown: CancellationToken,
) -> Result<(), SourceError> {
    let span = tracing::info_span!("source", slot = %config.slot_name, database = %config.connection.database);
    let slot = config.slot_name.clone();
    let report = move |status: Status, message: String| {
        health::global().fail(EntityKind::Slot, &slot, REPLICATION_CHECK, status, message);
    };
    report(
        Status::Warning,
        "connecting: replication has not started yet".into(),
    );
    async move {
        spill::clean_spill_dir(&config.spill_dir)?;
        let mut progress = stream::Progress::default();
        let mut backoff = Duration::from_secs(1);
        const MAX_BACKOFF: Duration = Duration::from_secs(60);
        loop {
            let result = stream::Session::run(
                &config,
                &events,
                durable.clone(),
                &shutdown,
                &mut progress,
            )
            .await;
            match result {
                Ok(()) => return Ok(()),
                Err(e) if e.is_retryable() && !shutdown.is_cancelled() => {
                    if progress.take_streamed() {
                        backoff = Duration::from_secs(1);
                    }
                    tracing::warn!(error = %e, retry_in = ?backoff, "replication interrupted; reconnecting");
                    report(
                        Status::Error,
                        format!("replication interrupted: {e}; reconnecting in {backoff:?}"),
                    );
                    tokio::select! {
                        _ = shutdown.cancelled() => return Ok(()),
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(e) => {
                    if shutdown.is_cancelled() {
                        return Ok(());
                    }
                    tracing::error!(error = %e, "replication stopped");
                    report(Status::Error, format!("replication stopped: {e}"));
                    return Err(e);
                }
            }
        }
    }
    .instrument(span)
    .await
}
