//! The replication connection: a thin layer on `postgres-protocol`'s message
//! codecs over a tokio TCP stream.
//!
//! It speaks just what logical replication needs: startup with
//! `replication=database`, authentication (trust, cleartext, md5,
//! SCRAM-SHA-256), the simple-query protocol for replication commands, and
//! CopyBoth framing for the stream itself (XLogData, keepalives, standby
//! status updates). Why not a crate: see `docs/replication.md`.
//!
//! The session pins every setting that changes how values print, so that
//! `types.rs` sees the same text whatever the server's defaults are.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use postgres_protocol::authentication::sasl::{self, ChannelBinding, ScramSha256};
use postgres_protocol::message::{backend, frontend};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::tls::{ChannelBindingMode, SslMode, TlsOptions};
use super::{PgConnectOptions, PgError};
use weft_core::lsn::Lsn;

/// Settings sent as `options` in the startup packet: they make the text
/// output of every type independent of the server's configuration.
pub const SESSION_OPTIONS: &str = "-c TimeZone=UTC -c DateStyle=ISO -c IntervalStyle=postgres \
     -c extra_float_digits=3 -c bytea_output=hex -c client_encoding=UTF8";

/// Seconds between the Unix epoch and Postgres's epoch (2000-01-01).
const PG_EPOCH_OFFSET_SECS: u64 = 946_684_800;

/// A byte stream to the server: plain TCP or TLS over it (negotiated with
/// an SSLRequest before startup, per `sslmode`).
trait Transport: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Transport for T {}

/// One row of a simple-query result; `None` is SQL NULL.
pub type TextRow = Vec<Option<String>>;

/// What `IDENTIFY_SYSTEM` reports.
#[derive(Debug, Clone)]
pub struct SystemIdentity {
    /// The cluster's system identifier.
    pub system_id: String,
    /// The current timeline.
    pub timeline: u32,
    /// The current WAL flush position.
    pub xlog_pos: Lsn,
    /// The database the connection is bound to.
    pub database: String,
}

/// A frame received in CopyBoth mode.
#[derive(Debug)]
pub enum ReplicationFrame {
    /// WAL data: one pgoutput message.
    XLogData {
        /// The WAL position of the data's start.
        wal_start: Lsn,
        /// The server's current end of WAL.
        wal_end: Lsn,
        /// The pgoutput message.
        data: Bytes,
    },
    /// A keepalive from the server.
    Keepalive {
        /// The server's current end of WAL (what it has sent).
        wal_end: Lsn,
        /// Whether the server wants a status update right away.
        reply_requested: bool,
    },
    /// The server ended the stream (CopyDone).
    End,
}

/// A connection in replication mode.
pub struct ReplicationConnection {
    io: Box<dyn Transport>,
    /// `tls-server-end-point` data when the connection uses TLS.
    channel_binding: Option<Vec<u8>>,
    read_buf: BytesMut,
    write_buf: BytesMut,
    server_version: u32,
}

impl ReplicationConnection {
    /// Connects (with TLS as `sslmode` says), authenticates and waits
    /// until the server is ready.
    pub async fn connect(options: &PgConnectOptions) -> Result<Self, PgError> {
        let first = match options.tls.mode {
            SslMode::Disable | SslMode::Allow => Encryption::Plain,
            SslMode::Prefer => Encryption::IfOffered,
            _ => Encryption::Required,
        };
        match Self::connect_with(options, first).await {
            Err(PgError::TlsRequired { .. }) if options.tls.mode == SslMode::Allow => {
                Self::connect_with(options, Encryption::Required).await
            }
            other => other,
        }
    }

    async fn connect_with(
        options: &PgConnectOptions,
        encryption: Encryption,
    ) -> Result<Self, PgError> {
        let address = options.address();
        let mut stream =
            tokio::time::timeout(Duration::from_secs(30), TcpStream::connect(&address))
                .await
                .map_err(|_| PgError::Connect {
                    address: address.clone(),
                    reason: "timed out after 30 s".into(),
                })?
                .map_err(|e| PgError::Connect {
                    address: address.clone(),
                    reason: e.to_string(),
                })?;
        stream.set_nodelay(true).ok();
        let mut channel_binding = None;
        let io: Box<dyn Transport> = if encryption == Encryption::Plain {
            Box::new(stream)
        } else if request_tls(&mut stream).await? {
            let tls = tls_handshake(options, stream).await?;
            channel_binding = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|certs| certs.first())
                .and_then(|cert| super::tls::server_end_point(cert));
            Box::new(tls)
        } else if encryption == Encryption::Required {
            return Err(PgError::Tls {
                address,
                reason: super::server_without_tls(options.tls.mode),
            });
        } else {
            Box::new(stream)
        };
        let mut conn = ReplicationConnection {
            io,
            channel_binding,
            read_buf: BytesMut::with_capacity(64 * 1024),
            write_buf: BytesMut::with_capacity(1024),
            server_version: 0,
        };
        match conn.startup(options).await {
            Err(PgError::Server { error, .. })
                if super::is_no_encryption_rejection(&error.code, &error.message) =>
            {
                Err(PgError::TlsRequired { address })
            }
            Err(e) => Err(e),
            Ok(()) => Ok(conn),
        }
    }

    /// The server's major*10000+minor version (`server_version_num` form).
    pub fn server_version(&self) -> u32 {
        self.server_version
    }

    async fn startup(&mut self, options: &PgConnectOptions) -> Result<(), PgError> {
        let params = [
            ("user", options.user.as_str()),
            ("database", options.database.as_str()),
            ("replication", "database"),
            ("application_name", "weft"),
            ("options", SESSION_OPTIONS),
        ];
        frontend::startup_message(params.iter().copied(), &mut self.write_buf)
            .map_err(PgError::Io)?;
        self.flush().await?;
        self.authenticate(options).await?;
        loop {
            match self.read_message().await? {
                Incoming::Message(backend::Message::ReadyForQuery(_)) => return Ok(()),
                Incoming::Message(backend::Message::ParameterStatus(p))
                    if p.name().ok() == Some("server_version") =>
                {
                    self.server_version = parse_server_version(p.value().unwrap_or(""));
                }
                _ => {}
            }
        }
    }

    async fn authenticate(&mut self, options: &PgConnectOptions) -> Result<(), PgError> {
        let password = || {
            options.password.as_deref().ok_or_else(|| PgError::Auth {
                user: options.user.clone(),
                reason: "the server asks for a password but none is configured; \
                             put it in the connection URL"
                    .into(),
            })
        };
        let mut scram: Option<ScramSha256> = None;
        let mut bound = false;
        loop {
            let Incoming::Message(message) = self.read_message().await? else {
                return Err(protocol_error("unexpected frame during authentication"));
            };
            match message {
                backend::Message::AuthenticationOk => {
                    if options.tls.channel_binding == ChannelBindingMode::Require && !bound {
                        return Err(PgError::Auth {
                            user: options.user.clone(),
                            reason: "channel_binding=require, but the server authenticated \
                                     without SCRAM channel binding: use scram-sha-256 for this \
                                     user in pg_hba.conf over TLS, or lower channel_binding"
                                .into(),
                        });
                    }
                    return Ok(());
                }
                backend::Message::AuthenticationCleartextPassword => {
                    frontend::password_message(password()?.as_bytes(), &mut self.write_buf)
                        .map_err(PgError::Io)?;
                    self.flush().await?;
                }
                backend::Message::AuthenticationMd5Password(body) => {
                    let hash = postgres_protocol::authentication::md5_hash(
                        options.user.as_bytes(),
                        password()?.as_bytes(),
                        body.salt(),
                    );
                    frontend::password_message(hash.as_bytes(), &mut self.write_buf)
                        .map_err(PgError::Io)?;
                    self.flush().await?;
                }
                backend::Message::AuthenticationSasl(body) => {
                    let mechanisms = sasl_mechanisms(body.mechanisms());
                    let (mechanism, binding) = self.choose_scram(options, &mechanisms)?;
                    bound = mechanism == sasl::SCRAM_SHA_256_PLUS;
                    let state = ScramSha256::new(password()?.as_bytes(), binding);
                    frontend::sasl_initial_response(
                        mechanism,
                        state.message(),
                        &mut self.write_buf,
                    )
                    .map_err(PgError::Io)?;
                    self.flush().await?;
                    scram = Some(state);
                }
                backend::Message::AuthenticationSaslContinue(body) => {
                    let state = scram
                        .as_mut()
                        .ok_or_else(|| protocol_error("SASL continue before SASL start"))?;
                    state.update(body.data()).map_err(|e| PgError::Auth {
                        user: options.user.clone(),
                        reason: format!("SCRAM exchange failed: {e}"),
                    })?;
                    frontend::sasl_response(state.message(), &mut self.write_buf)
                        .map_err(PgError::Io)?;
                    self.flush().await?;
                }
                backend::Message::AuthenticationSaslFinal(body) => {
                    let state = scram
                        .as_mut()
                        .ok_or_else(|| protocol_error("SASL final before SASL start"))?;
                    state.finish(body.data()).map_err(|e| PgError::Auth {
                        user: options.user.clone(),
                        reason: format!("the server's SCRAM signature did not verify: {e}"),
                    })?;
                }
                _ => {
                    return Err(PgError::Auth {
                        user: options.user.clone(),
                        reason: "the server asks for an authentication method weft does not \
                                 support (GSS/SSPI/Kerberos); use scram-sha-256, md5, password or trust"
                            .into(),
                    });
                }
            }
        }
    }

    /// Picks the SCRAM variant: SCRAM-SHA-256-PLUS with
    /// `tls-server-end-point` when TLS gives binding data, the server offers
    /// it and `channel_binding` allows it; plain SCRAM-SHA-256 otherwise.
    fn choose_scram(
        &self,
        options: &PgConnectOptions,
        mechanisms: &[String],
    ) -> Result<(&'static str, ChannelBinding), PgError> {
        let offers = |m: &str| mechanisms.iter().any(|offered| offered == m);
        let mode = options.tls.channel_binding;
        if mode != ChannelBindingMode::Disable
            && offers(sasl::SCRAM_SHA_256_PLUS)
            && let Some(data) = &self.channel_binding
        {
            return Ok((
                sasl::SCRAM_SHA_256_PLUS,
                ChannelBinding::tls_server_end_point(data.clone()),
            ));
        }
        if mode == ChannelBindingMode::Require {
            return Err(PgError::Auth {
                user: options.user.clone(),
                reason: format!(
                    "channel_binding=require, but channel binding is not possible here (server \
                     offers {mechanisms:?}, TLS {}): connect over TLS to a server with \
                     scram-sha-256 for this user, or lower channel_binding",
                    if self.channel_binding.is_some() {
                        "in use"
                    } else {
                        "without binding data"
                    }
                ),
            });
        }
        if !offers(sasl::SCRAM_SHA_256) {
            return Err(PgError::Auth {
                user: options.user.clone(),
                reason: format!(
                    "the server offers SASL mechanisms {mechanisms:?}; weft supports \
                     SCRAM-SHA-256 and SCRAM-SHA-256-PLUS"
                ),
            });
        }
        // 'y' tells the server we could bind but it did not offer to, which
        // lets it detect a downgrade; 'n' when we cannot bind at all.
        let binding = if self.channel_binding.is_some()
            && mode != ChannelBindingMode::Disable
            && !offers(sasl::SCRAM_SHA_256_PLUS)
        {
            ChannelBinding::unrequested()
        } else {
            ChannelBinding::unsupported()
        };
        Ok((sasl::SCRAM_SHA_256, binding))
    }

    /// Runs a simple query (replication commands included) and returns its
    /// rows as text.
    pub async fn simple_query(&mut self, sql: &str) -> Result<Vec<TextRow>, PgError> {
        frontend::query(sql, &mut self.write_buf).map_err(PgError::Io)?;
        self.flush().await?;
        let mut rows = Vec::new();
        let mut error = None;
        loop {
            match self.read_message_or_error().await? {
                Err(e) => error = Some(e),
                Ok(Incoming::Message(backend::Message::DataRow(row))) => {
                    rows.push(data_row(&row)?);
                }
                Ok(Incoming::Message(backend::Message::ReadyForQuery(_))) => break,
                Ok(Incoming::CopyBothResponse) => {
                    return Err(protocol_error("unexpected CopyBoth response to a query"));
                }
                Ok(_) => {}
            }
        }
        match error {
            Some(server) => Err(PgError::Server {
                context: sql.to_string(),
                error: server,
            }),
            None => Ok(rows),
        }
    }

    /// `IDENTIFY_SYSTEM`.
    pub async fn identify_system(&mut self) -> Result<SystemIdentity, PgError> {
        let rows = self.simple_query("IDENTIFY_SYSTEM").await?;
        let row = rows
            .first()
            .filter(|r| r.len() >= 4)
            .ok_or_else(|| protocol_error("IDENTIFY_SYSTEM returned no row"))?;
        let text = |i: usize| row[i].clone().unwrap_or_default();
        Ok(SystemIdentity {
            system_id: text(0),
            timeline: text(1).parse().unwrap_or(0),
            xlog_pos: text(2)
                .parse()
                .map_err(|_| protocol_error("IDENTIFY_SYSTEM returned an invalid LSN"))?,
            database: text(3),
        })
    }

    /// Creates a logical slot with the pgoutput plugin, without exporting a
    /// snapshot. Returns the slot's consistent point.
    pub async fn create_logical_slot(&mut self, slot: &str) -> Result<Lsn, PgError> {
        let sql = format!(
            "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput NOEXPORT_SNAPSHOT",
            quote_ident(slot)
        );
        let rows = self.simple_query(&sql).await?;
        rows.first()
            .and_then(|r| r.get(1).cloned().flatten())
            .and_then(|lsn| lsn.parse().ok())
            .ok_or_else(|| protocol_error("CREATE_REPLICATION_SLOT returned no consistent point"))
    }

    /// `START_REPLICATION SLOT ... LOGICAL start (options)` and waits for
    /// the CopyBoth response.
    pub async fn start_replication(
        &mut self,
        slot: &str,
        start: Lsn,
        plugin_options: &[(&str, String)],
    ) -> Result<(), PgError> {
        let options = plugin_options
            .iter()
            .map(|(k, v)| format!("{} {}", quote_ident(k), quote_literal(v)))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "START_REPLICATION SLOT {} LOGICAL {start} ({options})",
            quote_ident(slot)
        );
        frontend::query(&sql, &mut self.write_buf).map_err(PgError::Io)?;
        self.flush().await?;
        loop {
            match self.read_message_or_error().await? {
                Ok(Incoming::CopyBothResponse) => return Ok(()),
                Err(error) => {
                    // Drain to ReadyForQuery so the error is the whole story.
                    return Err(PgError::Server {
                        context: sql,
                        error,
                    });
                }
                Ok(_) => {}
            }
        }
    }

    /// Reads the next frame of the replication stream.
    pub async fn next_frame(&mut self) -> Result<ReplicationFrame, PgError> {
        loop {
            match self.read_message_or_error().await? {
                Ok(Incoming::CopyData(mut data)) => {
                    if data.is_empty() {
                        return Err(protocol_error("empty CopyData"));
                    }
                    match data.get_u8() {
                        b'w' => {
                            if data.len() < 24 {
                                return Err(protocol_error("truncated XLogData header"));
                            }
                            let wal_start = Lsn(data.get_u64());
                            let wal_end = Lsn(data.get_u64());
                            let _send_time = data.get_i64();
                            return Ok(ReplicationFrame::XLogData {
                                wal_start,
                                wal_end,
                                data,
                            });
                        }
                        b'k' => {
                            if data.len() < 17 {
                                return Err(protocol_error("truncated primary keepalive"));
                            }
                            let wal_end = Lsn(data.get_u64());
                            let _send_time = data.get_i64();
                            return Ok(ReplicationFrame::Keepalive {
                                wal_end,
                                reply_requested: data.get_u8() == 1,
                            });
                        }
                        other => {
                            return Err(protocol_error(&format!(
                                "unknown replication message type {other:#04x}"
                            )));
                        }
                    }
                }
                Ok(Incoming::Message(backend::Message::CopyDone)) => {
                    return Ok(ReplicationFrame::End);
                }
                Ok(_) => {}
                Err(error) => {
                    return Err(PgError::Server {
                        context: "the replication stream".into(),
                        error,
                    });
                }
            }
        }
    }

    /// Sends a standby status update. `flushed` is what weft has stored
    /// durably; the server may discard WAL before it.
    pub async fn send_status(
        &mut self,
        written: Lsn,
        flushed: Lsn,
        reply_requested: bool,
    ) -> Result<(), PgError> {
        let mut body = BytesMut::with_capacity(34);
        body.put_u8(b'r');
        body.put_u64(written.0);
        body.put_u64(flushed.0);
        body.put_u64(flushed.0);
        body.put_i64(pg_now());
        body.put_u8(u8::from(reply_requested));
        frontend::CopyData::new(body.freeze())
            .map_err(PgError::Io)?
            .write(&mut self.write_buf);
        self.flush().await
    }

    /// Ends the session politely (best effort).
    pub async fn close(mut self) {
        frontend::copy_done(&mut self.write_buf);
        frontend::terminate(&mut self.write_buf);
        let _ = self.flush().await;
        let _ = self.io.shutdown().await;
    }

    async fn flush(&mut self) -> Result<(), PgError> {
        self.io
            .write_all(&self.write_buf)
            .await
            .map_err(PgError::Io)?;
        self.write_buf.clear();
        self.io.flush().await.map_err(PgError::Io)
    }

    async fn read_frame(&mut self) -> Result<(u8, BytesMut), PgError> {
        loop {
            if let Some(header) = backend::Header::parse(&self.read_buf)
                .map_err(|e| protocol_error(&e.to_string()))?
            {
                let total = header.len() as usize + 1;
                if self.read_buf.len() >= total {
                    let frame = self.read_buf.split_to(total);
                    return Ok((header.tag(), frame));
                }
                self.read_buf.reserve(total - self.read_buf.len());
            }
            let n = self
                .io
                .read_buf(&mut self.read_buf)
                .await
                .map_err(PgError::Io)?;
            if n == 0 {
                return Err(PgError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                )));
            }
        }
    }

    async fn read_message_or_error(
        &mut self,
    ) -> Result<Result<Incoming, Box<ServerError>>, PgError> {
        loop {
            let (tag, mut frame) = self.read_frame().await?;
            match tag {
                backend::COPY_DATA_TAG => {
                    frame.advance(5);
                    return Ok(Ok(Incoming::CopyData(frame.freeze())));
                }
                // CopyBothResponse: postgres-protocol does not know it.
                b'W' => return Ok(Ok(Incoming::CopyBothResponse)),
                backend::ERROR_RESPONSE_TAG => {
                    frame.advance(5);
                    return Ok(Err(Box::new(ServerError::parse(&frame))));
                }
                backend::NOTICE_RESPONSE_TAG => {
                    frame.advance(5);
                    let notice = ServerError::parse(&frame);
                    tracing::info!(severity = %notice.severity, "server notice: {}", notice.message);
                }
                _ => {
                    let message = backend::Message::parse(&mut frame)
                        .map_err(|e| protocol_error(&e.to_string()))?
                        .ok_or_else(|| protocol_error("incomplete message"))?;
                    return Ok(Ok(Incoming::Message(message)));
                }
            }
        }
    }

    async fn read_message(&mut self) -> Result<Incoming, PgError> {
        match self.read_message_or_error().await? {
            Ok(incoming) => Ok(incoming),
            Err(error) => Err(PgError::Server {
                context: "connection startup".into(),
                error,
            }),
        }
    }
}

/// What the connection attempt does about TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encryption {
    Plain,
    IfOffered,
    Required,
}

/// Sends an SSLRequest; true when the server agrees to TLS.
async fn request_tls(stream: &mut TcpStream) -> Result<bool, PgError> {
    let mut buf = BytesMut::new();
    frontend::ssl_request(&mut buf);
    stream.write_all(&buf).await.map_err(PgError::Io)?;
    let answer = stream.read_u8().await.map_err(PgError::Io)?;
    match answer {
        b'S' => Ok(true),
        b'N' => Ok(false),
        other => Err(protocol_error(&format!(
            "unexpected answer {other:#04x} to SSLRequest"
        ))),
    }
}

async fn tls_handshake(
    options: &PgConnectOptions,
    stream: TcpStream,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, PgError> {
    let tls_error = |reason: String| PgError::Tls {
        address: options.address(),
        reason,
    };
    let config = options
        .tls
        .client_config(&options.host)
        .map_err(|e| tls_error(e.to_string()))?;
    let name = TlsOptions::server_name(&options.host).map_err(|e| tls_error(e.to_string()))?;
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, stream)
        .await
        .map_err(
            // A handshake cut short by the network is worth a retry; one
            // the server or the certificate check refused is not.
            |e| match super::tls::explain_handshake(&e, &options.host, &options.tls) {
                Some(reason) => tls_error(reason),
                None => PgError::Io(e),
            },
        )
}

enum Incoming {
    Message(backend::Message),
    CopyData(Bytes),
    CopyBothResponse,
}

/// An ErrorResponse from the server.
#[derive(Debug, Clone)]
pub struct ServerError {
    /// `ERROR`, `FATAL`, ...
    pub severity: String,
    /// The SQLSTATE code.
    pub code: String,
    /// The primary message.
    pub message: String,
    /// The detail, if any.
    pub detail: Option<String>,
    /// The hint, if any.
    pub hint: Option<String>,
}

impl ServerError {
    fn parse(mut body: &[u8]) -> ServerError {
        let mut error = ServerError {
            severity: String::new(),
            code: String::new(),
            message: String::new(),
            detail: None,
            hint: None,
        };
        while let Some((&kind, rest)) = body.split_first() {
            if kind == 0 {
                break;
            }
            let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            let value = String::from_utf8_lossy(&rest[..end]).into_owned();
            body = rest.get(end + 1..).unwrap_or(&[]);
            match kind {
                b'V' => error.severity = value,
                b'S' if error.severity.is_empty() => error.severity = value,
                b'C' => error.code = value,
                b'M' => error.message = value,
                b'D' => error.detail = Some(value),
                b'H' => error.hint = Some(value),
                _ => {}
            }
        }
        error
    }
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.severity, self.code, self.message)?;
        if let Some(detail) = &self.detail {
            write!(f, " (detail: {detail})")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, " (hint: {hint})")?;
        }
        Ok(())
    }
}

fn sasl_mechanisms(mut mechanisms: backend::SaslMechanisms<'_>) -> Vec<String> {
    use fallible_iterator::FallibleIterator;
    let mut out = Vec::new();
    while let Ok(Some(m)) = mechanisms.next() {
        out.push(m.to_string());
    }
    out
}

fn data_row(row: &backend::DataRowBody) -> Result<TextRow, PgError> {
    use fallible_iterator::FallibleIterator;
    let buffer = row.buffer();
    let mut ranges = row.ranges();
    let mut out = Vec::new();
    while let Some(range) = ranges.next().map_err(|e| protocol_error(&e.to_string()))? {
        out.push(range.map(|r| String::from_utf8_lossy(&buffer[r]).into_owned()));
    }
    Ok(out)
}

fn protocol_error(what: &str) -> PgError {
    PgError::Protocol(what.to_string())
}

fn parse_server_version(text: &str) -> u32 {
    let mut parts = text
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty());
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    major * 10000 + minor
}

/// Now, in microseconds since 2000-01-01 UTC.
fn pg_now() -> i64 {
    let since_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    since_unix.as_micros() as i64 - (PG_EPOCH_OFFSET_SECS as i64) * 1_000_000
}

/// Quotes an identifier for replication commands.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Quotes a string literal.
pub fn quote_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_error_fields_and_versions() {
        let body =
            b"SERROR\0VERROR\0C42704\0Mreplication slot \"x\" does not exist\0HCreate it\0\0";
        let e = ServerError::parse(body);
        assert_eq!(e.code, "42704");
        assert_eq!(e.hint.as_deref(), Some("Create it"));
        assert!(e.to_string().contains("does not exist"));
        assert_eq!(
            parse_server_version("15.20 (Debian 15.20-0+deb12u1)"),
            150020
        );
        assert_eq!(parse_server_version("17devel"), 170000);
    }

    #[test]
    fn quoting() {
        assert_eq!(quote_ident("my\"slot"), "\"my\"\"slot\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
    }
}
