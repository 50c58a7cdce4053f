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
//! * [`type_catalog`]: definitions of non-built-in types from the catalog.
//! * [`relation`]: the relations seen on the stream and row rendering.
//! * [`slot`]: server, publication and slot checks and creation.
//! * [`spill`]: streamed in-progress transactions, spilled to disk when big.
//! * [`heartbeat`]: `pg_logical_emit_message` heartbeats for idle databases.
//! * [`slot_stats`]: the slot's retained WAL and confirmed lag, as metrics.
//! * [`stream`]: one replication session: decode, order, emit, confirm.
//! * [`tls`]: `sslmode` and certificate verification for both connections.
//! * [`unchanged_toast`]: metric and health warning for unchanged TOAST
//!   values shown as `"unchanged_toast"`.

pub mod events;
pub mod heartbeat;
pub mod pgoutput;
pub mod protocol;
pub mod relation;
pub mod slot;
pub mod slot_stats;
pub mod spill;
pub mod stream;
pub mod tls;
pub mod type_catalog;
pub mod types;
pub mod unchanged_toast;

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::health::{self, EntityKind, Status};
use crate::lsn::Lsn;

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
    /// `sslmode`, `sslrootcert`, `sslcert`, `sslkey`.
    pub tls: tls::TlsOptions,
}

impl TryFrom<&crate::config::PgConnection> for PgConnectOptions {
    type Error = SourceError;

    fn try_from(connection: &crate::config::PgConnection) -> Result<Self, SourceError> {
        let tls = tls::TlsOptions::from_params(&connection.params)
            .map_err(|reason| SourceError::InvalidUrl { reason })?;
        if connection.host.starts_with('/') {
            return Err(SourceError::InvalidUrl {
                reason: format!(
                    "host {} is a Unix socket directory; weft connects over TCP: use the server's \
                     address, e.g. 127.0.0.1",
                    connection.host
                ),
            });
        }
        Ok(PgConnectOptions {
            host: connection.host.clone(),
            port: connection.port,
            user: connection.user.clone(),
            password: connection.password.clone(),
            database: connection.database.clone(),
            tls,
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
            .field("tls", &self.tls)
            .finish()
    }
}

impl PgConnectOptions {
    /// Parses `postgres://user:password@host:port/database?sslmode=disable`
    /// with the config's URL parser; `sslmode`, `sslrootcert`, `sslcert`
    /// and `sslkey` work as in libpq (see [`tls`]).
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

    /// `host:port`, for errors.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// Opens an ordinary (query) connection with the configured TLS and
    /// drives it on a spawned task, which ends when the client is dropped.
    pub async fn connect_query(
        &self,
    ) -> Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), SourceError> {
        use tokio_postgres::config::SslMode as Mode;
        let first = match self.tls.mode {
            tls::SslMode::Disable | tls::SslMode::Allow => Mode::Disable,
            tls::SslMode::Prefer => Mode::Prefer,
            _ => Mode::Require,
        };
        match self.connect_query_with(first).await {
            Err(SourceError::TlsRequired { .. }) if self.tls.mode == tls::SslMode::Allow => {
                self.connect_query_with(Mode::Require).await
            }
            other => other,
        }
    }

    async fn connect_query_with(
        &self,
        mode: tokio_postgres::config::SslMode,
    ) -> Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), SourceError> {
        let mut config = self.query_config();
        config.ssl_mode(mode);
        config.channel_binding(match self.tls.channel_binding {
            tls::ChannelBindingMode::Disable => tokio_postgres::config::ChannelBinding::Disable,
            tls::ChannelBindingMode::Prefer => tokio_postgres::config::ChannelBinding::Prefer,
            tls::ChannelBindingMode::Require => tokio_postgres::config::ChannelBinding::Require,
        });
        if mode == tokio_postgres::config::SslMode::Disable {
            let (client, connection) = config
                .connect(tokio_postgres::NoTls)
                .await
                .map_err(|e| self.query_connect_error(e))?;
            return Ok((client, drive(connection)));
        }
        let tls_config = self
            .tls
            .client_config(&self.host)
            .map_err(|e| SourceError::Tls {
                address: self.address(),
                reason: e.to_string(),
            })?;
        let (client, connection) = config
            .connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls_config))
            .await
            .map_err(|e| self.query_connect_error(e))?;
        Ok((client, drive(connection)))
    }

    fn query_connect_error(&self, e: tokio_postgres::Error) -> SourceError {
        if let Some(db) = e.as_db_error() {
            if is_no_encryption_rejection(db.code().code(), db.message()) {
                return SourceError::TlsRequired {
                    address: self.address(),
                };
            }
            return SourceError::Query {
                context: "opening the query connection".into(),
                source: e,
            };
        }
        if let Some(reason) = tls::explain_handshake(&e, &self.host, &self.tls) {
            return SourceError::Tls {
                address: self.address(),
                reason,
            };
        }
        let text = weft_core::error::with_causes(&e);
        if text.contains("server does not support TLS") {
            return SourceError::Tls {
                address: self.address(),
                reason: server_without_tls(self.tls.mode),
            };
        }
        SourceError::Connect {
            address: self.address(),
            reason: text,
        }
    }
}

/// Runs a query connection's I/O on its own task.
fn drive<S, T>(connection: tokio_postgres::Connection<S, T>) -> tokio::task::JoinHandle<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    T: tokio_postgres::tls::TlsStream + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "query connection ended");
        }
    })
}

/// Whether a startup error is pg_hba.conf refusing a connection because it
/// is not encrypted (only `hostssl` lines match this client).
pub(crate) fn is_no_encryption_rejection(code: &str, message: &str) -> bool {
    code == "28000" && message.contains("no encryption")
}

/// Why a server that answers an SSLRequest with "no" cannot be used.
pub(crate) fn server_without_tls(mode: tls::SslMode) -> String {
    format!(
        "sslmode={} needs TLS but the server does not offer it: set ssl = on (with ssl_cert_file \
         and ssl_key_file) in postgresql.conf, or use sslmode=prefer on a trusted network",
        mode.as_str()
    )
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
    /// TLS could not be set up or the handshake failed.
    #[error("TLS to Postgres at {address} failed: {reason}")]
    Tls {
        /// host:port.
        address: String,
        /// Why, and what to do.
        reason: String,
    },
    /// The server accepts only TLS connections and sslmode forbids TLS.
    #[error(
        "Postgres at {address} accepts only TLS connections from here (pg_hba.conf has no \
         plain `host` line for this client): set sslmode=require, or better \
         sslmode=verify-full with sslrootcert=<CA file>"
    )]
    TlsRequired {
        /// host:port.
        address: String,
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

/// The health check (on the slot's entity) that replication is streaming;
/// `GET /health/ready` waits for every slot to pass it.
pub const REPLICATION_CHECK: &str = "replication";

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
        let o = PgConnectOptions::from_url("postgres://u@h/db?sslmode=require").unwrap();
        assert_eq!(o.tls.mode, tls::SslMode::Require);
        let e = PgConnectOptions::from_url("postgres://u@h/db?sslmode=verify-full").unwrap_err();
        assert!(e.to_string().contains("sslrootcert"), "{e}");
        assert!(PgConnectOptions::from_url("mysql://u@h/db").is_err());
        assert!(PgConnectOptions::from_url("postgres://u@h:99999/db").is_err());
    }
}
