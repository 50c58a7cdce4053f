//! One NATS client per sink: connected on first use, then reconnected by
//! the client itself for as long as the sink runs.

use std::time::Duration;

use async_nats::connection::State;
use async_nats::{Client, ConnectErrorKind, ConnectOptions, jetstream};
use tokio::sync::Mutex;
use tracing::{info, warn};

use super::{NatsAuth, NatsSettings};

/// A connected client and its JetStream context.
#[derive(Clone)]
pub struct Connected {
    /// The core client.
    pub client: Client,
    /// JetStream on that client; its timeout is the request timeout.
    pub jetstream: jetstream::Context,
}

/// The lazily connected client of one NATS sink.
pub struct NatsConnection {
    sink: String,
    settings: NatsSettings,
    connected: Mutex<Option<Connected>>,
}

impl NatsConnection {
    /// A connection for `sink` that connects on the first [`Self::get`].
    pub fn new(sink: &str, settings: NatsSettings) -> NatsConnection {
        NatsConnection {
            sink: sink.to_string(),
            settings,
            connected: Mutex::new(None),
        }
    }

    /// The client, connecting first if no connection was ever made. Fails
    /// (to be retried) while the server is unreachable: a client that lost
    /// its connection reconnects in the background, and publishing on it
    /// meanwhile would only queue messages inside the client.
    pub async fn get(&self) -> Result<Connected, String> {
        let mut slot = self.connected.lock().await;
        if let Some(connected) = &*slot {
            return match connected.client.connection_state() {
                State::Connected => Ok(connected.clone()),
                State::Pending | State::Disconnected => Err(format!(
                    "not connected to NATS at {}; reconnecting in the background",
                    self.settings.address
                )),
            };
        }
        let client = self.connect().await?;
        let mut jetstream = jetstream::new(client.clone());
        jetstream.set_timeout(self.settings.limits.request_timeout);
        let connected = Connected { client, jetstream };
        *slot = Some(connected.clone());
        Ok(connected)
    }

    async fn connect(&self) -> Result<Client, String> {
        let settings = &self.settings;
        let sink = self.sink.clone();
        // Commands a client queues while it reconnects: weft never has
        // more publishes out than its deliveries in flight.
        let capacity = (settings.limits.max_in_flight as usize
            * settings.limits.batch_size as usize)
            .saturating_add(64)
            .min(65_536);
        let mut options = ConnectOptions::new()
            .name(format!("weft sink {}", self.sink))
            .connection_timeout(settings.limits.request_timeout.min(Duration::from_secs(10)))
            .request_timeout(Some(settings.limits.request_timeout))
            .client_capacity(capacity)
            .max_reconnects(None)
            .reconnect_delay_callback(|attempts| {
                Duration::from_millis((attempts as u64).saturating_mul(250).min(2_000))
            })
            .event_callback(move |event| {
                let sink = sink.clone();
                async move {
                    match event {
                        async_nats::Event::Connected => info!(%sink, "NATS connected"),
                        other => warn!(%sink, event = %other, "NATS connection event"),
                    }
                }
            })
            .require_tls(settings.tls);
        if let Some(ca) = &settings.tls_ca_file {
            options = options.add_root_certificates(ca.clone());
        }
        options = match &settings.auth {
            NatsAuth::None => options,
            NatsAuth::UserPassword { user, password } => {
                options.user_and_password(user.clone(), password.clone())
            }
            NatsAuth::NKey { seed } => options.nkey(seed.clone()),
            NatsAuth::Jwt { jwt, seed } => options
                .credentials(&credentials(jwt, seed))
                .map_err(|_| {
                    "the nats sink's `jwt` or `nkey_seed` is malformed: `jwt` is a user JWT, `nkey_seed` a user seed starting with SU".to_string()
                })?,
        };
        let client = options
            .connect(settings.address.as_str())
            .await
            .map_err(|e| self.describe(e))?;
        info!(sink = %self.sink, address = %settings.address, "connected to NATS");
        Ok(client)
    }

    /// What went wrong connecting and what to do about it.
    fn describe(&self, error: async_nats::ConnectError) -> String {
        let address = &self.settings.address;
        // async-nats reports a rejected server certificate as an I/O error
        // of the handshake, not as ConnectErrorKind::Tls.
        let certificate = error.to_string().contains("certificate");
        match error.kind() {
            ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => format!(
                "NATS at {address} refused the credentials ({error}); check the sink's username/password, jwt or nkey_seed"
            ),
            ConnectErrorKind::Tls => format!(
                "TLS with NATS at {address} failed ({error}); check `tls`, `tls_ca_file` and that the server speaks TLS"
            ),
            _ if certificate => format!(
                "TLS with NATS at {address} failed: the server's certificate was refused ({error}); for a private CA set `tls_ca_file`, and check that the certificate names the host"
            ),
            ConnectErrorKind::TimedOut => {
                format!("connecting to NATS at {address} timed out; is the server reachable?")
            }
            _ => format!("cannot connect to NATS at {address}: {error}; is the server running?"),
        }
    }
}

/// The credentials-file text for a user JWT and its seed, the form
/// async-nats parses into a signer.
fn credentials(jwt: &str, seed: &str) -> String {
    format!(
        "-----BEGIN NATS USER JWT-----\n{}\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
        jwt.trim(),
        seed.trim()
    )
}
