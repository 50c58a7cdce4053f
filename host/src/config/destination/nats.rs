//! Settings of `type: nats`: publish messages to NATS, through JetStream
//! (acknowledged by the stream) or core NATS.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

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
    /// Most messages handed to one delivery (1 to 10000). Default 100.
    #[serde(
        default = "NatsConfig::default_batch_size",
        deserialize_with = "bounds::in_range::<_, u32, 1, 10_000>"
    )]
    pub batch_size: u32,
    /// Most deliveries in flight at once for this sink (1 to 1000). Default 10.
    #[serde(
        default = "NatsConfig::default_max_in_flight",
        deserialize_with = "bounds::in_range::<_, u32, 1, 1000>"
    )]
    pub max_in_flight: u32,
    /// How long one delivery (connect, publish, acknowledgement) may take
    /// before its messages count as failed and are retried, in milliseconds
    /// (100 to 600000). Default 5000.
    #[serde(
        default = "NatsConfig::default_request_timeout_ms",
        deserialize_with = "bounds::in_range::<_, u64, 100, 600_000>"
    )]
    pub request_timeout_ms: u64,
    /// Delay before the first retry of a failed message, in milliseconds
    /// (1 to 3600000); it doubles with each failure, with jitter. Default 1000.
    #[serde(
        default = "NatsConfig::default_retry_backoff_base_ms",
        deserialize_with = "bounds::in_range::<_, u64, 1, 3_600_000>"
    )]
    pub retry_backoff_base_ms: u64,
    /// The longest delay between two attempts, in milliseconds (1 to
    /// 86400000). Default 600000 (10 minutes).
    #[serde(
        default = "NatsConfig::default_retry_backoff_max_ms",
        deserialize_with = "bounds::in_range::<_, u64, 1, 86_400_000>"
    )]
    pub retry_backoff_max_ms: u64,
}

impl NatsConfig {
    /// Default `port`.
    pub const DEFAULT_PORT: u16 = 4222;
    /// Default `batch_size`.
    pub const DEFAULT_BATCH_SIZE: u32 = 100;
    /// Default `max_in_flight`.
    pub const DEFAULT_MAX_IN_FLIGHT: u32 = 10;
    /// Default `request_timeout_ms`.
    pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 5_000;
    /// Default `retry_backoff_base_ms` (Sequin's 1 s).
    pub const DEFAULT_RETRY_BACKOFF_BASE_MS: u64 = 1_000;
    /// Default `retry_backoff_max_ms` (Sequin's 10 min).
    pub const DEFAULT_RETRY_BACKOFF_MAX_MS: u64 = 600_000;

    /// The port, or the default.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(Self::DEFAULT_PORT)
    }

    /// The request timeout as a duration.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// Rules between fields: (field, what is wrong and what to do).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if self.host.trim().is_empty() {
            problems.push(("host", "must not be empty, e.g. `host: localhost`".into()));
        }
        if self.password.is_some() && self.username.is_none() {
            problems.push((
                "password",
                "is set without `username`; set both for user/password authentication".into(),
            ));
        }
        if self.username.is_some() && self.password.is_none() {
            problems.push((
                "username",
                "is set without `password`; set both for user/password authentication".into(),
            ));
        }
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
        if self.tls_ca_file.is_some() && !self.tls {
            problems.push((
                "tls_ca_file",
                "is only used over TLS; set `tls: true` too".into(),
            ));
        }
        if self.retry_backoff_max_ms < self.retry_backoff_base_ms {
            problems.push((
                "retry_backoff_max_ms",
                format!(
                    "{} is below retry_backoff_base_ms ({}); the cap must be at least the first delay",
                    self.retry_backoff_max_ms, self.retry_backoff_base_ms
                ),
            ));
        }
        problems
    }

    fn default_batch_size() -> u32 {
        Self::DEFAULT_BATCH_SIZE
    }

    fn default_max_in_flight() -> u32 {
        Self::DEFAULT_MAX_IN_FLIGHT
    }

    fn default_request_timeout_ms() -> u64 {
        Self::DEFAULT_REQUEST_TIMEOUT_MS
    }

    fn default_retry_backoff_base_ms() -> u64 {
        Self::DEFAULT_RETRY_BACKOFF_BASE_MS
    }

    fn default_retry_backoff_max_ms() -> u64 {
        Self::DEFAULT_RETRY_BACKOFF_MAX_MS
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
            .field("batch_size", &self.batch_size)
            .field("max_in_flight", &self.max_in_flight)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("retry_backoff_base_ms", &self.retry_backoff_base_ms)
            .field("retry_backoff_max_ms", &self.retry_backoff_max_ms)
            .finish()
    }
}

fn yes() -> bool {
    true
}
