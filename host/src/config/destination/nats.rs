//! Settings of `type: nats`: publish messages to NATS, through JetStream
//! (acknowledged by the stream) or core NATS.

use serde::Deserialize;
use std::fmt;

use super::delivery::{DeliveryConfig, DeliveryDefaults, PushSettings};
use super::rules;
use crate::config::bounds;

/// How a NATS sink connects and delivers. Names follow Sequin's where it
/// has one. `Debug` hides `password`, `jwt` and `nkey_seed`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, expecting = "nats settings")]
pub struct NatsConfig {
    /// The server's host name or IP address. Required.
    pub host: String,
    /// The server's port (1 to 65535). Default 4222.
    #[serde(default, deserialize_with = "bounds::opt_port")]
    pub port: Option<u16>,
    /// User name for user/password authentication. Default none.
    #[serde(default)]
    pub username: Option<String>,
    /// Password for `username`. Default none; never logged.
    #[serde(default)]
    pub password: Option<String>,
    /// User JWT for decentralized (JWT) authentication; needs `nkey_seed`
    /// to sign the server's nonce. Default none; never logged.
    #[serde(default)]
    pub jwt: Option<String>,
    /// NKey seed (`SU...`): alone for NKey authentication, with `jwt` for
    /// JWT authentication. Default none; never logged.
    #[serde(default)]
    pub nkey_seed: Option<String>,
    /// Connect over TLS and verify the server's certificate against the
    /// system's roots (plus `tls_ca_file`). Default false.
    #[serde(default)]
    pub tls: bool,
    /// A PEM file of CA certificates to trust in addition to the system's,
    /// for a server with a private CA. Needs `tls: true`. Default none.
    #[serde(default)]
    pub tls_ca_file: Option<String>,
    /// `true` (default): publish through JetStream and wait for the
    /// stream's acknowledgement. `false`: core NATS publish and flush, with
    /// no acknowledgement from the broker (at most once on the broker side).
    #[serde(default = "yes")]
    pub jetstream: bool,
    /// The shared delivery fields; NATS defaults: `batch_size` 100,
    /// `max_in_flight` 10, `request_timeout_ms` 5000.
    #[serde(skip)]
    pub delivery: DeliveryConfig,
}

impl NatsConfig {
    /// Default `port`.
    pub const DEFAULT_PORT: u16 = 4222;
    /// The port, or the default.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(Self::DEFAULT_PORT)
    }

    /// Rules between fields: (field, what is wrong and what to do).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if self.host.trim().is_empty() {
            problems.push(("host", "must not be empty, e.g. `host: localhost`".into()));
        }
        rules::credentials_together(
            self.username.is_some(),
            self.password.is_some(),
            "set both for user/password authentication",
            &mut problems,
        );
        if self.jwt.is_some() && self.nkey_seed.is_none() {
            problems.push((
                "jwt",
                "needs `nkey_seed`, the user's NKey seed that signs the server's challenge".into(),
            ));
        }
        if self.username.is_some() && (self.jwt.is_some() || self.nkey_seed.is_some()) {
            problems.push((
                "username",
                "choose one authentication: `username`/`password`, `nkey_seed`, or `jwt` with `nkey_seed`".into(),
            ));
        }
        rules::ca_file_needs_tls(self.tls, self.tls_ca_file.is_some(), &mut problems);
        problems
    }
}

impl PushSettings for NatsConfig {
    const DELIVERY_DEFAULTS: DeliveryDefaults = DeliveryDefaults {
        batch_size: 100,
        max_in_flight: 10,
        request_timeout_ms: 5_000,
    };

    fn delivery_mut(&mut self) -> &mut DeliveryConfig {
        &mut self.delivery
    }
}

impl fmt::Debug for NatsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hidden = |set: bool| if set { Some("<redacted>") } else { None };
        f.debug_struct("NatsConfig")
            .field("host", &self.host)
            .field("port", &self.port())
            .field("username", &self.username)
            .field("password", &hidden(self.password.is_some()))
            .field("jwt", &hidden(self.jwt.is_some()))
            .field("nkey_seed", &hidden(self.nkey_seed.is_some()))
            .field("tls", &self.tls)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("jetstream", &self.jetstream)
            .field("delivery", &self.delivery)
            .finish()
    }
}

fn yes() -> bool {
    true
}
