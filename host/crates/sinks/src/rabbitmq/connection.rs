//! One AMQP connection per sink, opened on first use and again on the
//! first use after it was lost, with a pool of confirm-mode channels.

use std::collections::HashSet;
use std::sync::{Arc, Mutex as SyncMutex};

use lapin::options::{ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::protocol::{AMQPErrorKind, AMQPHardError, AMQPSoftError};
use lapin::tcp::OwnedTLSConfig;
use lapin::types::FieldTable;
use lapin::uri::{AMQPAuthority, AMQPQueryString, AMQPScheme, AMQPUri, AMQPUserInfo};
use lapin::{Channel, Connection, ConnectionProperties, ErrorKind, ExchangeKind};
use tokio::sync::Mutex;
use tracing::info;

use super::RabbitMqSettings;

/// Seconds between heartbeats, so that a broker that vanished without
/// closing the socket is noticed within a few of them.
const HEARTBEAT_SECS: u16 = 10;

/// The lazily (re)connected AMQP connection of one RabbitMQ sink.
pub struct RabbitMqConnection {
    sink: String,
    settings: RabbitMqSettings,
    tls: OwnedTLSConfig,
    connection: Mutex<Option<Arc<Connection>>>,
    /// Confirm-mode channels not in use, of the current connection.
    idle: SyncMutex<Vec<Channel>>,
    /// Exchanges known to exist on the current connection.
    exchanges: SyncMutex<HashSet<String>>,
}

/// A channel lent to one delivery. Dropped without [`ChannelLease::release`]
/// (a delivery that timed out), its channel is closed rather than reused:
/// a late confirm must not be mistaken for a later publish's.
pub struct ChannelLease<'a> {
    channel: Option<Channel>,
    owner: &'a RabbitMqConnection,
}

impl ChannelLease<'_> {
    /// The leased channel.
    pub fn channel(&self) -> &Channel {
        self.channel.as_ref().expect("a lease holds its channel")
    }

    /// Returns the channel to the pool if it is still open.
    pub fn release(mut self) {
        if let Some(channel) = self.channel.take()
            && channel.status().connected()
        {
            let mut idle = self.owner.idle.lock().expect("idle channels");
            if idle.len() < self.owner.settings.limits.max_in_flight as usize {
                idle.push(channel);
                return;
            }
            drop(idle);
            close_later(channel);
        }
    }
}

impl Drop for ChannelLease<'_> {
    fn drop(&mut self) {
        if let Some(channel) = self.channel.take() {
            close_later(channel);
        }
    }
}

/// Closes `channel` in the background, if it is open and a runtime runs.
fn close_later(channel: Channel) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current()
        && channel.status().connected()
    {
        runtime.spawn(async move {
            let _ = channel.close(200, "weft: channel released".into()).await;
        });
    }
}

impl RabbitMqConnection {
    /// A connection for `sink` that connects on the first [`Self::channel`].
    /// Fails if `tls_ca_file` cannot be read.
    pub fn new(sink: &str, settings: RabbitMqSettings) -> Result<RabbitMqConnection, String> {
        let cert_chain = match &settings.tls_ca_file {
            None => None,
            Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
                format!(
                    "cannot read the rabbitmq sink's tls_ca_file {}: {e}",
                    path.display()
                )
            })?),
        };
        Ok(RabbitMqConnection {
            sink: sink.to_string(),
            tls: OwnedTLSConfig {
                identity: None,
                cert_chain,
            },
            settings,
            connection: Mutex::new(None),
            idle: SyncMutex::new(Vec::new()),
            exchanges: SyncMutex::new(HashSet::new()),
        })
    }

    /// An open confirm-mode channel: an idle one, or a new one on the
    /// current connection, connecting first if there is none or it was
    /// lost. Fails (to be retried) while the broker is unreachable.
    pub async fn channel(&self) -> Result<ChannelLease<'_>, String> {
        let reused = {
            let mut idle = self.idle.lock().expect("idle channels");
            idle.retain(|c| c.status().connected());
            idle.pop()
        };
        let channel = match reused {
            Some(channel) => channel,
            None => {
                let connection = self.connection().await?;
                let channel = connection
                    .create_channel()
                    .await
                    .map_err(|e| self.describe("opening a channel", &e))?;
                channel
                    .confirm_select(ConfirmSelectOptions::default())
                    .await
                    .map_err(|e| self.describe("enabling publisher confirms", &e))?;
                channel
            }
        };
        Ok(ChannelLease {
            channel: Some(channel),
            owner: self,
        })
    }

    /// Whether `exchange` exists, checked once per connection with a
    /// passive declare on a throwaway channel (a missing exchange closes
    /// the channel that names it, and would fail a whole batch).
    pub async fn exchange_exists(&self, exchange: &str) -> Result<bool, String> {
        if self.exchanges.lock().expect("exchanges").contains(exchange) {
            return Ok(true);
        }
        let connection = self.connection().await?;
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| self.describe("opening a channel", &e))?;
        let declared = channel
            .exchange_declare(
                exchange.into(),
                ExchangeKind::Direct,
                ExchangeDeclareOptions {
                    passive: true,
                    ..ExchangeDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await;
        match declared {
            Ok(()) => {
                close_later(channel);
                self.exchanges
                    .lock()
                    .expect("exchanges")
                    .insert(exchange.to_string());
                Ok(true)
            }
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => {
                close_later(channel);
                Err(self.describe(&format!("checking exchange {exchange:?}"), &e))
            }
        }
    }

    /// Whether the broker blocked this connection's publishes (a memory or
    /// disk alarm): publishing now would only wait for the timeout.
    pub async fn blocked(&self) -> bool {
        let slot = self.connection.lock().await;
        slot.as_ref().is_some_and(|c| c.status().blocked())
    }

    /// Forgets that `exchange` exists, after the broker said it does not.
    pub fn forget_exchange(&self, exchange: &str) {
        self.exchanges.lock().expect("exchanges").remove(exchange);
    }

    /// The settings this connection uses.
    pub fn settings(&self) -> &RabbitMqSettings {
        &self.settings
    }

    async fn connection(&self) -> Result<Arc<Connection>, String> {
        let mut slot = self.connection.lock().await;
        if let Some(connection) = &*slot {
            if connection.status().connected() {
                return Ok(Arc::clone(connection));
            }
            *slot = None;
            self.idle.lock().expect("idle channels").clear();
            self.exchanges.lock().expect("exchanges").clear();
        }
        let connection = Arc::new(self.connect().await?);
        *slot = Some(Arc::clone(&connection));
        Ok(connection)
    }

    async fn connect(&self) -> Result<Connection, String> {
        let settings = &self.settings;
        let uri = AMQPUri {
            scheme: if settings.tls {
                AMQPScheme::AMQPS
            } else {
                AMQPScheme::AMQP
            },
            authority: AMQPAuthority {
                userinfo: AMQPUserInfo {
                    username: settings.username.clone(),
                    password: settings.password.clone(),
                },
                host: settings.host.clone(),
                port: settings.port,
            },
            vhost: settings.virtual_host.clone(),
            query: AMQPQueryString {
                heartbeat: Some(HEARTBEAT_SECS),
                connection_timeout: Some(settings.limits.request_timeout.as_millis() as u64),
                ..AMQPQueryString::default()
            },
        };
        let properties = ConnectionProperties::default()
            .with_connection_name(format!("weft sink {}", self.sink).into());
        let runtime = lapin::runtime::default_runtime()
            .map_err(|e| format!("no async runtime for the RabbitMQ client: {e}"))?;
        let connection =
            Connection::connect_uri_with_config(uri, properties, self.tls.clone(), runtime)
                .await
                .map_err(|e| self.describe_connect(&e))?;
        info!(sink = %self.sink, address = %settings.address(), vhost = %settings.virtual_host, "connected to RabbitMQ");
        Ok(connection)
    }

    /// What went wrong connecting and what to do about it.
    fn describe_connect(&self, error: &lapin::Error) -> String {
        let address = self.settings.address();
        let vhost = &self.settings.virtual_host;
        if let ErrorKind::ProtocolError(amqp) = error.kind() {
            match amqp.kind() {
                AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED) => {
                    return format!(
                        "RabbitMQ at {address} refused the credentials ({amqp}); check the sink's username and password (RabbitMQ's guest user may only connect from localhost)"
                    );
                }
                AMQPErrorKind::Hard(AMQPHardError::NOTALLOWED) => {
                    return format!(
                        "RabbitMQ at {address} did not allow virtual host {vhost:?} ({amqp}); create it (`rabbitmqctl add_vhost`) or grant the user permissions on it"
                    );
                }
                _ => {}
            }
        }
        format!(
            "cannot connect to RabbitMQ at {address} (virtual host {vhost:?}): {error}; is the broker running and reachable{}?",
            if self.settings.tls {
                ", does it speak TLS on this port, and is its certificate trusted (tls_ca_file)"
            } else {
                ""
            }
        )
    }

    /// What failed while `doing` something on an open connection.
    pub fn describe(&self, doing: &str, error: &lapin::Error) -> String {
        format!(
            "{doing} on RabbitMQ at {} failed: {error}",
            self.settings.address()
        )
    }
}

/// Whether the broker answered 404 NOT_FOUND (a missing exchange).
pub fn is_not_found(error: &lapin::Error) -> bool {
    matches!(error.kind(), ErrorKind::ProtocolError(amqp)
        if *amqp.kind() == AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND))
}
