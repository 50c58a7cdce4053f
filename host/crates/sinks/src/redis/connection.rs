//! Connection settings shared by both Redis sinks, and the pipelined
//! round trip that turns a batch of commands into per-message outcomes.

use std::fmt;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo, RedisError};
use tokio::sync::OnceCell;

use super::RedisConnectionConfig;
use crate::config::SinkConfig;
use crate::delivery::{DeliveryLimits, DeliveryOutcome};
use weft_store::StoredMessage;

/// A Redis sink's connection and delivery settings, resolved from config.
/// `Debug` hides the password.
#[derive(Clone)]
pub struct RedisSettings {
    /// Server host name or address.
    pub host: String,
    /// Server port.
    pub port: u16,
    /// Database selected on connect.
    pub database: u32,
    /// ACL user, if any.
    pub username: Option<String>,
    /// Password, if any.
    pub password: Option<String>,
    /// TLS with certificate and host name verification.
    pub tls: bool,
    /// Batch size (messages per pipeline), pipelines in flight, timeout
    /// (connecting included) and retries.
    pub limits: DeliveryLimits,
}

impl fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSettings")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("database", &self.database)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .field("limits", &self.limits)
            .finish()
    }
}

impl RedisSettings {
    /// The settings of `sink`, whose destination's shared fields are `config`.
    pub fn resolve(sink: &SinkConfig, config: &RedisConnectionConfig) -> RedisSettings {
        RedisSettings {
            host: config.host.clone(),
            port: config.port,
            database: config.database,
            username: config.username.clone(),
            password: config.password.clone(),
            tls: config.tls,
            limits: DeliveryLimits::resolve(sink, &config.delivery),
        }
    }
}

/// One Redis sink's connection: made on the first delivery (weft starts
/// while Redis is down) and re-made by the `redis` crate after it breaks.
pub struct RedisConnection {
    settings: RedisSettings,
    client: redis::Client,
    manager: OnceCell<ConnectionManager>,
}

impl RedisConnection {
    /// A connection to the server `settings` name; nothing is dialled yet.
    pub fn new(settings: RedisSettings) -> Result<RedisConnection, String> {
        let addr = if settings.tls {
            ConnectionAddr::TcpTls {
                host: settings.host.clone(),
                port: settings.port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(settings.host.clone(), settings.port)
        };
        let mut redis_info = RedisConnectionInfo::default().set_db(i64::from(settings.database));
        if let Some(username) = &settings.username {
            redis_info = redis_info.set_username(username);
        }
        if let Some(password) = &settings.password {
            redis_info = redis_info.set_password(password);
        }
        let info = addr
            .into_connection_info()
            .map_err(|e| format!("invalid Redis address: {e}"))?
            .set_redis_settings(redis_info);
        let client = redis::Client::open(info)
            .map_err(|e| format!("cannot set up the Redis client: {e}"))?;
        Ok(RedisConnection {
            settings,
            client,
            manager: OnceCell::new(),
        })
    }

    /// The settings this connection was made with.
    pub fn settings(&self) -> &RedisSettings {
        &self.settings
    }

    /// Sends `batch` as one pipeline, each message encoded by `encode` into
    /// one command (or refused with an outcome), and returns one outcome
    /// per message, index-aligned, within the request timeout.
    pub async fn deliver(
        &self,
        batch: &[StoredMessage],
        encode: impl Fn(&StoredMessage) -> Result<Cmd, DeliveryOutcome>,
    ) -> Vec<DeliveryOutcome> {
        let mut outcomes: Vec<Option<DeliveryOutcome>> = vec![None; batch.len()];
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        let mut sent = Vec::new();
        for (index, message) in batch.iter().enumerate() {
            match encode(message) {
                Ok(command) => {
                    pipe.add_command(command);
                    sent.push(index);
                }
                Err(outcome) => outcomes[index] = Some(outcome),
            }
        }
        if !sent.is_empty() {
            let replies =
                tokio::time::timeout(self.settings.limits.request_timeout, self.send(&pipe))
                    .await
                    .unwrap_or_else(|_| Err(self.timed_out()));
            match replies {
                Ok(replies) if replies.len() == sent.len() => {
                    for (&index, reply) in sent.iter().zip(replies) {
                        outcomes[index] = Some(match reply {
                            Ok(_) => DeliveryOutcome::Delivered,
                            Err(e) => DeliveryOutcome::retry(format!(
                                "Redis at {} refused the command: {e}",
                                self.address()
                            )),
                        });
                    }
                }
                Ok(replies) => {
                    let error = format!(
                        "Redis at {} answered {} replies to {} commands",
                        self.address(),
                        replies.len(),
                        sent.len()
                    );
                    for &index in &sent {
                        outcomes[index] = Some(DeliveryOutcome::retry(error.clone()));
                    }
                }
                Err(error) => {
                    for &index in &sent {
                        outcomes[index] = Some(DeliveryOutcome::retry(error.clone()));
                    }
                }
            }
        }
        outcomes
            .into_iter()
            .map(|o| o.expect("every message got an outcome"))
            .collect()
    }

    async fn send(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<Vec<redis::RedisResult<redis::Value>>, String> {
        let manager = self
            .manager
            .get_or_try_init(|| async {
                let wait = self
                    .settings
                    .limits
                    .request_timeout
                    .min(Duration::from_secs(10));
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(wait))
                    .set_response_timeout(Some(self.settings.limits.request_timeout))
                    .set_number_of_retries(1)
                    .set_min_delay(Duration::from_millis(100))
                    .set_max_delay(Duration::from_secs(1));
                ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            })
            .await
            .map_err(|e| self.explain(&e))?;
        let mut connection = manager.clone();
        pipe.query_async(&mut connection)
            .await
            .map_err(|e| self.explain(&e))
    }

    fn address(&self) -> String {
        format!("{}:{}", self.settings.host, self.settings.port)
    }

    fn timed_out(&self) -> String {
        format!(
            "Redis at {} did not answer within request_timeout_ms = {}",
            self.address(),
            self.settings.limits.request_timeout.as_millis()
        )
    }

    /// What went wrong with the connection and what to do, without secrets.
    fn explain(&self, error: &RedisError) -> String {
        let address = self.address();
        let auth_refused = error.kind() == redis::ErrorKind::AuthenticationFailed
            || matches!(error.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"));
        if auth_refused {
            let user = self.settings.username.as_deref().unwrap_or("default");
            format!(
                "Redis at {address} refused user {user:?}: {error}; check the sink's `username` and `password`"
            )
        } else if error.is_timeout() {
            self.timed_out()
        } else if error.is_connection_refusal() || error.is_io_error() {
            format!("cannot reach Redis at {address}: {error}; is it running and reachable?")
        } else {
            format!("Redis at {address}: {error}")
        }
    }
}
