//! Postgres logical replication: the replication connection, pgoutput
//! decoding, type mapping, slot and publication management.
//!
//! [`run`] is the entry point: it checks the server, makes sure the
//! publication and slot exist, streams pgoutput from the slot's confirmed
//! position and hands the pipeline committed changes in commit order. It
//! confirms to Postgres only what the pipeline reports durable, and
//! reconnects with capped exponential backoff when the connection drops.
//!
//! * [`protocol`]: the replication connection (startup, auth, CopyBoth).
//! * [`pgoutput`]: the pgoutput message decoder.
//! * [`types`]: text values → JSON as `to_jsonb()` renders them.
//! * [`relation`]: the relations seen on the stream and row rendering.
//! * [`slot`]: server, publication and slot checks and creation.
//! * [`spill`]: streamed in-progress transactions, spilled to disk when big.
//! * [`heartbeat`]: `pg_logical_emit_message` heartbeats for idle databases.
//! * [`stream`]: one replication session: decode, order, emit, confirm.

pub mod heartbeat;
pub mod pgoutput;
pub mod protocol;
pub mod relation;
pub mod slot;
pub mod spill;
pub mod stream;
pub mod types;

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::change::SourceEvent;
use crate::lsn::Lsn;

/// Where and how to replicate from.
#[derive(Debug, Clone)]
pub struct SourceConfig {
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
}

/// The default [`SourceConfig::heartbeat_interval`], as Sequin's.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(15);

/// Connection settings for the source database.
#[derive(Clone, PartialEq, Eq)]
pub struct PgConnectOptions {
    /// Host name or IP address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// The user; needs the REPLICATION attribute.
    pub user: String,
    /// The password, if the server asks for one.
    pub password: Option<String>,
    /// The database name.
    pub database: String,
}

impl TryFrom<&crate::config::PgConnection> for PgConnectOptions {
    type Error = SourceError;

    fn try_from(connection: &crate::config::PgConnection) -> Result<Self, SourceError> {
        if let Some(mode) = connection.param("sslmode")
            && !matches!(mode, "disable" | "allow" | "prefer")
        {
            return Err(SourceError::InvalidUrl {
                reason: format!(
                    "sslmode={mode} needs TLS, which weft's replication connection does not support yet; use sslmode=disable on a trusted network"
                ),
            });
        }
        Ok(PgConnectOptions {
            host: connection.host.clone(),
            port: connection.port,
            user: connection.user.clone(),
            password: connection.password.clone(),
            database: connection.database.clone(),
        })
    }
}

impl std::fmt::Debug for PgConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgConnectOptions")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("database", &self.database)
            .finish()
    }
}

impl PgConnectOptions {
    /// Parses `postgres://user:password@host:port/database?sslmode=disable`
    /// with the config's URL parser. Only `sslmode` values that work without
    /// TLS (`disable`, `allow`, `prefer`) are accepted for now.
    pub fn from_url(url: &str) -> Result<Self, SourceError> {
        let connection = crate::config::PgConnection::from_url(url)
            .map_err(|reason| SourceError::InvalidUrl { reason })?;
        PgConnectOptions::try_from(&connection)
    }

    /// The equivalent `tokio_postgres` configuration for ordinary queries,
    /// with the same deterministic session settings.
    pub fn query_config(&self) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        config
            .host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.database)
            .application_name("weft")
            .options(protocol::SESSION_OPTIONS)
            .connect_timeout(Duration::from_secs(30));
        if let Some(password) = &self.password {
            config.password(password);
        }
        config
    }
}

/// Everything that can stop the source.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The connection URL could not be parsed.
    #[error("invalid database URL: {reason}")]
    InvalidUrl {
        /// What is wrong.
        reason: String,
    },
    /// The TCP connection failed.
    #[error("cannot connect to Postgres at {address}: {reason}")]
    Connect {
        /// host:port.
        address: String,
        /// Why.
        reason: String,
    },
    /// Authentication failed.
    #[error("authentication as {user:?} failed: {reason}")]
    Auth {
        /// The user.
        user: String,
        /// Why, and what to do.
        reason: String,
    },
    /// The server answered with an error.
    #[error("Postgres rejected {context}: {error}")]
    Server {
        /// What weft was doing.
        context: String,
        /// The server's error.
        error: Box<protocol::ServerError>,
    },
    /// An ordinary query failed.
    #[error("query failed while {context}: {source}")]
    Query {
        /// What weft was doing.
        context: String,
        /// The driver's error.
        source: tokio_postgres::Error,
    },
    /// Reading or writing the socket failed.
    #[error("replication connection I/O failed: {0}")]
    Io(std::io::Error),
    /// The server sent something the protocol does not allow.
    #[error("replication protocol violation: {0}")]
    Protocol(String),
    /// A pgoutput message could not be decoded.
    #[error(transparent)]
    Decode(#[from] pgoutput::DecodeError),
    /// `wal_level` is not `logical`.
    #[error(
        "the server runs with wal_level = {actual}, logical replication needs logical: \
         run ALTER SYSTEM SET wal_level = logical; and restart Postgres"
    )]
    WalLevel {
        /// The current setting.
        actual: String,
    },
    /// The user may not replicate.
    #[error(
        "user {user:?} lacks the REPLICATION attribute: run ALTER ROLE \"{user}\" WITH REPLICATION; \
         as a superuser (on managed services, grant the provider's replication role)"
    )]
    NoReplicationPrivilege {
        /// The user.
        user: String,
    },
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
            SourceError::Connect { .. } | SourceError::Io(_) => true,
            SourceError::Query { source, .. } => {
                source.is_closed()
                    || source.code().is_none_or(|code| {
                        code.code().starts_with("08") || code.code().starts_with("57")
                    })
            }
            SourceError::Server { error, .. } => {
                // 08: connection exceptions; 57: operator intervention
                // (admin shutdown, terminated backend); 55006: the slot is
                // active for another process (e.g. our previous session).
                error.code.starts_with("08")
                    || error.code.starts_with("57")
                    || error.code == "55006"
            }
            _ => false,
        }
    }
}

/// Streams committed changes from the slot into `events` until `shutdown`
/// is cancelled.
///
/// Emits, per transaction in commit order, its changes (with `commit_lsn`,
/// `commit_idx`, `xid`, `commit_timestamp` set) then a
/// [`SourceEvent::Commit`]; and [`SourceEvent::Idle`] on keepalives when no
/// transaction is open. Confirms to Postgres (standby status flush/apply
/// LSN) exactly the latest value of `durable`. Setup problems (wal_level,
/// privileges, slot or publication that do not fit) end it with an error;
/// lost connections are retried with capped exponential backoff, resuming
/// from the slot's confirmed position and skipping transactions already
/// emitted in this run.
pub async fn run(
    config: SourceConfig,
    events: mpsc::Sender<SourceEvent>,
    durable: watch::Receiver<Lsn>,
    shutdown: CancellationToken,
) -> Result<(), SourceError> {
    let span = tracing::info_span!("source", slot = %config.slot_name, database = %config.connection.database);
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
                    return Err(e);
                }
            }
        }
    }
    .instrument(span)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let o =
            PgConnectOptions::from_url("postgres://weft:p%40ss@db.local:6543/app?sslmode=disable")
                .unwrap();
        assert_eq!(o.user, "weft");
        assert_eq!(o.password.as_deref(), Some("p@ss"));
        assert_eq!((o.host.as_str(), o.port), ("db.local", 6543));
        assert_eq!(o.database, "app");
        let o = PgConnectOptions::from_url("postgresql://u@[::1]/app").unwrap();
        assert_eq!(
            (o.host.as_str(), o.port, o.database.as_str()),
            ("::1", 5432, "app")
        );
        assert!(format!("{o:?}").contains("None"));
        let e = PgConnectOptions::from_url("postgres://u@h/db?sslmode=require").unwrap_err();
        assert!(e.to_string().contains("sslmode=require"));
        assert!(PgConnectOptions::from_url("mysql://u@h/db").is_err());
        assert!(PgConnectOptions::from_url("postgres://u@h:99999/db").is_err());
    }
}
