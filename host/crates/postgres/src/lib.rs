//! Talking to Postgres: connection settings, TLS with every libpq
//! `sslmode`, ordinary query connections, the replication connection's
//! protocol (startup, SCRAM, CopyBoth), the server checks that replication
//! needs, SQL identifiers, and the rendering of Postgres values as
//! `to_jsonb()` renders them.
//!
//! * [`protocol`]: the replication connection (startup, auth, CopyBoth).
//! * [`tls`]: `sslmode` and certificate verification for both connections.
//! * [`types`]: text values → JSON as `to_jsonb()` renders them.
//! * [`type_catalog`]: definitions of non-built-in types from the catalog.
//!
//! This layer sits on `weft-core` and `weft-config`; the source, the
//! backfill, the postgres sink and a function's source query all connect
//! through it.

pub mod protocol;
pub mod tls;
pub mod type_catalog;
pub mod types;

use std::time::Duration;

use protocol::quote_ident;
use tokio_postgres::Client;
use weft_config::PgConnection;

/// Connection settings for a Postgres database.
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

impl TryFrom<&PgConnection> for PgConnectOptions {
    type Error = PgError;

    fn try_from(connection: &PgConnection) -> Result<Self, PgError> {
        let tls = tls::TlsOptions::from_params(&connection.params)
            .map_err(|reason| PgError::InvalidUrl { reason })?;
        if connection.host.starts_with('/') {
            return Err(PgError::InvalidUrl {
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
    pub fn from_url(url: &str) -> Result<Self, PgError> {
        let connection =
            PgConnection::from_url(url).map_err(|error| PgError::InvalidUrl { reason: error.0 })?;
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
    pub async fn connect_query(&self) -> Result<(Client, tokio::task::JoinHandle<()>), PgError> {
        use tokio_postgres::config::SslMode as Mode;
        let first = match self.tls.mode {
            tls::SslMode::Disable | tls::SslMode::Allow => Mode::Disable,
            tls::SslMode::Prefer => Mode::Prefer,
            _ => Mode::Require,
        };
        match self.connect_query_with(first).await {
            Err(PgError::TlsRequired { .. }) if self.tls.mode == tls::SslMode::Allow => {
                self.connect_query_with(Mode::Require).await
            }
            other => other,
        }
    }

    async fn connect_query_with(
        &self,
        mode: tokio_postgres::config::SslMode,
    ) -> Result<(Client, tokio::task::JoinHandle<()>), PgError> {
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
            .map_err(|e| PgError::Tls {
                address: self.address(),
                reason: e.to_string(),
            })?;
        let (client, connection) = config
            .connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls_config))
            .await
            .map_err(|e| self.query_connect_error(e))?;
        Ok((client, drive(connection)))
    }

    fn query_connect_error(&self, e: tokio_postgres::Error) -> PgError {
        if let Some(db) = e.as_db_error() {
            if is_no_encryption_rejection(db.code().code(), db.message()) {
                return PgError::TlsRequired {
                    address: self.address(),
                };
            }
            return PgError::Query {
                context: "opening the query connection".into(),
                source: e,
            };
        }
        if let Some(reason) = tls::explain_handshake(&e, &self.host, &self.tls) {
            return PgError::Tls {
                address: self.address(),
                reason,
            };
        }
        let text = weft_core::error::with_causes(&e);
        if text.contains("server does not support TLS") {
            return PgError::Tls {
                address: self.address(),
                reason: server_without_tls(self.tls.mode),
            };
        }
        PgError::Connect {
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
pub fn is_no_encryption_rejection(code: &str, message: &str) -> bool {
    code == "28000" && message.contains("no encryption")
}

/// Why a server that answers an SSLRequest with "no" cannot be used.
pub fn server_without_tls(mode: tls::SslMode) -> String {
    format!(
        "sslmode={} needs TLS but the server does not offer it: set ssl = on (with ssl_cert_file \
         and ssl_key_file) in postgresql.conf, or use sslmode=prefer on a trusted network",
        mode.as_str()
    )
}

/// Why talking to Postgres failed: connecting, authenticating, TLS, a
/// query, or the replication connection's protocol.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
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
}

impl PgError {
    /// Whether connecting again may help: lost connections and server-side
    /// conditions that pass (shutdown, restart, slot briefly in use).
    pub fn is_retryable(&self) -> bool {
        match self {
            PgError::Connect { .. } | PgError::Io(_) => true,
            PgError::Query { source, .. } => {
                source.is_closed()
                    || source.code().is_none_or(|code| {
                        code.code().starts_with("08") || code.code().starts_with("57")
                    })
            }
            PgError::Server { error, .. } => {
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

/// A table named in the config, split into schema and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    /// The schema; `public` when the config gave none.
    pub schema: String,
    /// The table.
    pub name: String,
}

impl TableName {
    /// Parses `schema.table` or `table` (schema `public`).
    pub fn parse(text: &str) -> TableName {
        match text.split_once('.') {
            Some((schema, name)) => TableName {
                schema: schema.to_string(),
                name: name.to_string(),
            },
            None => TableName {
                schema: "public".into(),
                name: text.to_string(),
            },
        }
    }

    /// `"schema"."table"`, quoted for SQL.
    pub fn quoted(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.name))
    }

    /// `schema.table`, unquoted.
    pub fn display(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }
}

/// The error of a query that failed while `context`.
pub fn query_error(context: &str) -> impl FnOnce(tokio_postgres::Error) -> PgError + '_ {
    move |e| PgError::Query {
        context: context.to_string(),
        source: e,
    }
}

/// Checks `wal_level` and the user's REPLICATION privilege.
pub async fn check_server(client: &Client, user: &str) -> Result<(), PgError> {
    let wal_level: String = client
        .query_one("SHOW wal_level", &[])
        .await
        .map_err(query_error("reading wal_level"))?
        .get(0);
    if wal_level != "logical" {
        return Err(PgError::WalLevel { actual: wal_level });
    }
    let row = client
        .query_one(
            "SELECT rolreplication OR rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user",
            &[],
        )
        .await
        .map_err(query_error("reading the user's REPLICATION privilege"))?;
    if !row.get::<_, bool>(0) {
        return Err(PgError::NoReplicationPrivilege {
            user: user.to_string(),
        });
    }
    Ok(())
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
