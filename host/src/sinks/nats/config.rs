//! A NATS sink's settings, resolved from its config.

use std::fmt;
use std::path::PathBuf;

use crate::config::SinkConfig;
use crate::config::destination::NatsConfig;
use crate::sinks::delivery::DeliveryLimits;

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
