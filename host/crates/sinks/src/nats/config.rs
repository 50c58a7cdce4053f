//! The settings of a NATS sink: `destination:` as written ([`NatsConfig`]:
//! publish through JetStream, acknowledged by the stream, or core NATS),
//! and resolved for delivery ([`NatsSettings`]).

use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;
use weft_config::bounds;
use weft_config::destination::{DeliveryConfig, DeliveryDefaults, PushSettings, rules};

use crate::config::SinkConfig;
use crate::delivery::DeliveryLimits;

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

/// How the sink authenticates. `Debug` hides the secrets.
#[derive(Clone, PartialEq, Eq)]
pub enum NatsAuth {
    /// No credentials.
    None,
    /// User and password.
    UserPassword {
        /// The user.
        user: String,
        /// The password.
        password: String,
    },
    /// An NKey seed alone.
    NKey {
        /// The seed.
        seed: String,
    },
    /// A user JWT whose challenge is signed with the NKey seed.
    Jwt {
        /// The JWT.
        jwt: String,
        /// The seed.
        seed: String,
    },
}

impl fmt::Debug for NatsAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NatsAuth::None => f.write_str("None"),
            NatsAuth::UserPassword { user, .. } => write!(f, "UserPassword({user}, <redacted>)"),
            NatsAuth::NKey { .. } => f.write_str("NKey(<redacted>)"),
            NatsAuth::Jwt { .. } => f.write_str("Jwt(<redacted>)"),
        }
    }
}

/// Everything a NATS sink needs to deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsSettings {
    /// `host:port` of the server.
    pub address: String,
    /// Credentials.
    pub auth: NatsAuth,
    /// Require TLS and verify the server's certificate.
    pub tls: bool,
    /// Extra CA certificates (PEM) to trust.
    pub tls_ca_file: Option<PathBuf>,
    /// Publish through JetStream and await the PubAck.
    pub jetstream: bool,
    /// Batch size, parallelism, timeout and retries.
    pub limits: DeliveryLimits,
}

impl NatsSettings {
    /// The settings of the NATS sink `sink`, whose destination is `nats`.
    /// Config validation has checked the rules between fields.
    pub fn resolve(sink: &SinkConfig, nats: &NatsConfig) -> NatsSettings {
        let auth = match (&nats.username, &nats.password, &nats.jwt, &nats.nkey_seed) {
            (Some(user), Some(password), _, _) => NatsAuth::UserPassword {
                user: user.clone(),
                password: password.clone(),
            },
            (_, _, Some(jwt), Some(seed)) => NatsAuth::Jwt {
                jwt: jwt.clone(),
                seed: seed.clone(),
            },
            (_, _, None, Some(seed)) => NatsAuth::NKey { seed: seed.clone() },
            _ => NatsAuth::None,
        };
        let host = nats.host.trim();
        // An IPv6 literal needs brackets in an address with a port.
        let address = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{}", nats.port())
        } else {
            format!("{host}:{}", nats.port())
        };
        NatsSettings {
            address,
            auth,
            tls: nats.tls,
            tls_ca_file: nats.tls_ca_file.as_ref().map(PathBuf::from),
            jetstream: nats.jetstream,
            limits: DeliveryLimits::resolve(sink, &nats.delivery),
        }
    }
}
