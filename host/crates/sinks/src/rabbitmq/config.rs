//! The settings of a RabbitMQ sink: `destination:` as written
//! ([`RabbitMqConfig`]: publish to an exchange with publisher confirms),
//! and resolved for delivery ([`RabbitMqSettings`]).

use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;
use weft_config::bounds;
use weft_config::destination::{DeliveryConfig, DeliveryDefaults, PushSettings, rules};

use crate::config::SinkConfig;
use crate::delivery::DeliveryLimits;
use crate::route::MAX_AMQP_SHORT_STRING;

/// How a RabbitMQ sink connects and publishes. Names follow Sequin's.
/// `Debug` hides `password`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, expecting = "rabbitmq settings")]
pub struct RabbitMqConfig {
    /// The broker's host name or IP address. Required.
    pub host: String,
    /// The broker's AMQP port (1 to 65535). Default 5672.
    #[serde(default, deserialize_with = "bounds::opt_port")]
    pub port: Option<u16>,
    /// User name. Default none: RabbitMQ's `guest` (which RabbitMQ accepts
    /// only from localhost).
    #[serde(default)]
    pub username: Option<String>,
    /// Password for `username`. Default none (`guest`); never logged.
    #[serde(default)]
    pub password: Option<String>,
    /// The virtual host. Default `/`.
    #[serde(default = "RabbitMqConfig::default_virtual_host")]
    pub virtual_host: String,
    /// Connect over TLS (AMQPS) and verify the server's certificate against
    /// the system's roots (plus `tls_ca_file`). Default false.
    #[serde(default)]
    pub tls: bool,
    /// A PEM file of CA certificates to trust, for a broker with a private
    /// CA. Needs `tls: true`. Default none.
    #[serde(default)]
    pub tls_ca_file: Option<String>,
    /// The exchange messages are published to, unless a routing function
    /// sets `exchange`. Required; weft does not declare it.
    pub exchange: String,
    /// The shared delivery fields; RabbitMQ defaults: `batch_size` 100,
    /// `max_in_flight` 10 (one channel each), `request_timeout_ms` 5000.
    #[serde(skip)]
    pub delivery: DeliveryConfig,
}

impl RabbitMqConfig {
    /// Default `port`.
    pub const DEFAULT_PORT: u16 = 5672;
    /// Default `virtual_host`.
    pub const DEFAULT_VIRTUAL_HOST: &'static str = "/";

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
        if self.exchange.is_empty() {
            problems.push((
                "exchange",
                "must not be empty; name the exchange to publish to (the default exchange \"\" is not supported)".into(),
            ));
        }
        if self.exchange.len() > MAX_AMQP_SHORT_STRING {
            problems.push((
                "exchange",
                format!(
                    "is {} bytes long; AMQP allows at most {} bytes",
                    self.exchange.len(),
                    MAX_AMQP_SHORT_STRING
                ),
            ));
        }
        if self.virtual_host.is_empty() {
            problems.push((
                "virtual_host",
                "must not be empty; the default virtual host is `/`".into(),
            ));
        }
        rules::credentials_together(
            self.username.is_some(),
            self.password.is_some(),
            "set both, or neither for RabbitMQ's guest user",
            &mut problems,
        );
        rules::ca_file_needs_tls(self.tls, self.tls_ca_file.is_some(), &mut problems);
        problems
    }

    fn default_virtual_host() -> String {
        Self::DEFAULT_VIRTUAL_HOST.to_string()
    }
}

impl PushSettings for RabbitMqConfig {
    const DELIVERY_DEFAULTS: DeliveryDefaults = DeliveryDefaults {
        batch_size: 100,
        max_in_flight: 10,
        request_timeout_ms: 5_000,
    };

    fn delivery_mut(&mut self) -> &mut DeliveryConfig {
        &mut self.delivery
    }
}

impl fmt::Debug for RabbitMqConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RabbitMqConfig")
            .field("host", &self.host)
            .field("port", &self.port())
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("virtual_host", &self.virtual_host)
            .field("tls", &self.tls)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("exchange", &self.exchange)
            .field("delivery", &self.delivery)
            .finish()
    }
}

/// Everything a RabbitMQ sink needs to deliver. `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct RabbitMqSettings {
    /// The broker's host.
    pub host: String,
    /// The broker's AMQP port.
    pub port: u16,
    /// User name.
    pub username: String,
    /// Password.
    pub password: String,
    /// Virtual host.
    pub virtual_host: String,
    /// Connect over TLS and verify the server's certificate.
    pub tls: bool,
    /// Extra CA certificates (PEM) to trust.
    pub tls_ca_file: Option<PathBuf>,
    /// The exchange of messages whose route sets none.
    pub exchange: String,
    /// Batch size, parallelism (and idle channels kept), timeout and
    /// retries.
    pub limits: DeliveryLimits,
}

impl RabbitMqSettings {
    /// RabbitMQ's default user, used when the config names none.
    pub const GUEST: &'static str = "guest";

    /// The settings of the RabbitMQ sink `sink`, whose destination is
    /// `rabbitmq`. Config validation has checked the rules between fields.
    pub fn resolve(sink: &SinkConfig, rabbitmq: &RabbitMqConfig) -> RabbitMqSettings {
        RabbitMqSettings {
            host: rabbitmq.host.trim().to_string(),
            port: rabbitmq.port(),
            username: rabbitmq
                .username
                .clone()
                .unwrap_or_else(|| Self::GUEST.into()),
            password: rabbitmq
                .password
                .clone()
                .unwrap_or_else(|| Self::GUEST.into()),
            virtual_host: rabbitmq.virtual_host.clone(),
            tls: rabbitmq.tls,
            tls_ca_file: rabbitmq.tls_ca_file.as_ref().map(PathBuf::from),
            exchange: rabbitmq.exchange.clone(),
            limits: DeliveryLimits::resolve(sink, &rabbitmq.delivery),
        }
    }

    /// `host:port`, with brackets around an IPv6 literal, for messages.
    pub fn address(&self) -> String {
        if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Debug for RabbitMqSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RabbitMqSettings")
            .field("address", &self.address())
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("virtual_host", &self.virtual_host)
            .field("tls", &self.tls)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("exchange", &self.exchange)
            .field("limits", &self.limits)
            .finish()
    }
}
