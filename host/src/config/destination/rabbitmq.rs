//! Settings of `type: rabbitmq`: publish messages to a RabbitMQ exchange
//! with publisher confirms.

use std::fmt;

use serde::Deserialize;

use super::delivery::{DeliveryConfig, DeliveryDefaults, PushSettings};
use super::rules;
use crate::config::bounds;
use crate::pipeline::routing_keys::MAX_AMQP_SHORT_STRING;

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
