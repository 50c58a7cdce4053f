//! A RabbitMQ sink's settings, resolved from its config.

use std::fmt;
use std::path::PathBuf;

use crate::config::SinkConfig;
use crate::config::destination::RabbitMqConfig;
use crate::sinks::delivery::DeliveryLimits;

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
