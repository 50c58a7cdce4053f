//! Publishing a RabbitMQ sink's messages with publisher confirms, and what
//! each outcome means for retries.

use std::collections::BTreeSet;

use async_trait::async_trait;
use lapin::options::BasicPublishOptions;

use super::connection::is_not_found;
use super::errors;
use super::{Outgoing, RabbitMqConnection, RabbitMqSettings};
use crate::delivery::{DeliveryLimits, DeliveryOutcome, Destination, within};
use weft_store::StoredMessage;

/// Publishes a RabbitMQ sink's messages.
pub struct RabbitMqDestination {
    sink: String,
    connection: RabbitMqConnection,
}

impl RabbitMqDestination {
    /// The destination of the RabbitMQ sink `sink`. Connects on first
    /// delivery; fails only if `tls_ca_file` cannot be read.
    pub fn new(sink: &str, settings: RabbitMqSettings) -> Result<RabbitMqDestination, String> {
        Ok(RabbitMqDestination {
            sink: sink.to_string(),
            connection: RabbitMqConnection::new(sink, settings)?,
        })
    }

    /// The settings this destination delivers with.
    pub fn settings(&self) -> &RabbitMqSettings {
        self.connection.settings()
    }

    async fn deliver_within_timeout(&self, batch: &[StoredMessage]) -> Vec<DeliveryOutcome> {
        let settings = self.settings();
        let mut outgoing: Vec<Result<Outgoing, DeliveryOutcome>> = batch
            .iter()
            .map(|m| Outgoing::of(m, &settings.exchange))
            .collect();
        // A publish to a missing exchange closes its channel and would fail
        // the whole batch: check each exchange first, and hold back only
        // the messages bound for a missing one.
        let exchanges: BTreeSet<String> = outgoing
            .iter()
            .flatten()
            .map(|m| m.exchange.clone())
            .collect();
        for exchange in exchanges {
            let missing = match self.connection.exchange_exists(&exchange).await {
                Ok(true) => continue,
                Ok(false) => DeliveryOutcome::retry(format!(
                    "exchange {exchange:?} does not exist in virtual host {:?}; declare it (e.g. `rabbitmqadmin declare exchange name={exchange} type=topic durable=true`) and bind a queue to it",
                    settings.virtual_host
                )),
                Err(error) => return vec![DeliveryOutcome::retry(error); batch.len()],
            };
            for slot in outgoing.iter_mut() {
                if matches!(slot, Ok(m) if m.exchange == exchange) {
                    *slot = Err(missing.clone());
                }
            }
        }
        if outgoing.iter().all(Result::is_err) {
            return outgoing.into_iter().map(|o| o.unwrap_err()).collect();
        }
        // A blocked connection stops reading: a publish (or even a new
        // channel) would only wait for the timeout.
        if self.connection.blocked().await {
            let error = format!(
                "RabbitMQ at {} blocked publishing (a memory or disk alarm on the broker); free memory or disk on the broker",
                settings.address()
            );
            return vec![DeliveryOutcome::retry(error); batch.len()];
        }
        let lease = match self.connection.channel().await {
            Ok(lease) => lease,
            Err(error) => return vec![DeliveryOutcome::retry(error); batch.len()],
        };

        let channel = lease.channel();
        // Publish all, then await the confirms together: one round trip per
        // batch (each message is its group's only one, so order holds).
        let mut pending = Vec::with_capacity(batch.len());
        for message in outgoing {
            pending.push(match message {
                Err(outcome) => Err(outcome),
                Ok(m) => match channel
                    .basic_publish(
                        m.exchange.as_str().into(),
                        m.routing_key.as_str().into(),
                        BasicPublishOptions {
                            mandatory: true,
                            immediate: false,
                        },
                        &m.body,
                        m.properties,
                    )
                    .await
                {
                    Ok(confirm) => Ok((m.exchange, m.routing_key, confirm)),
                    Err(e) => Err(self.failed(&m.exchange, &e)),
                },
            });
        }
        let confirms = pending.into_iter().map(|sent| async move {
            let (exchange, routing_key, confirm) = sent?;
            match confirm.await {
                Ok(confirmation) => errors::confirmed(confirmation, &exchange, &routing_key),
                Err(e) => Err(self.failed(&exchange, &e)),
            }
        });
        let outcomes = futures::future::join_all(confirms)
            .await
            .into_iter()
            .map(|result| result.err().unwrap_or(DeliveryOutcome::Delivered))
            .collect();
        lease.release();
        outcomes
    }

    /// The outcome of a publish to `exchange` that failed with `error`.
    fn failed(&self, exchange: &str, error: &lapin::Error) -> DeliveryOutcome {
        if is_not_found(error) {
            // Deleted since it was checked: check it again next time.
            self.connection.forget_exchange(exchange);
        }
        DeliveryOutcome::retry(
            self.connection
                .describe(&format!("publishing to exchange {exchange:?}"), error),
        )
    }
}

#[async_trait]
impl Destination for RabbitMqDestination {
    fn limits(&self) -> &DeliveryLimits {
        &self.settings().limits
    }

    async fn deliver(&self, batch: &[StoredMessage]) -> Vec<DeliveryOutcome> {
        let timeout = self.settings().limits.request_timeout;
        within(timeout, batch.len(), self.deliver_within_timeout(batch), || {
            let error = format!(
                "delivery to RabbitMQ at {} did not finish within request_timeout_ms = {} (no publisher confirm; is the broker blocked by a memory or disk alarm?)",
                self.settings().address(),
                timeout.as_millis()
            );
            tracing::debug!(sink = %self.sink, %error, "RabbitMQ delivery timed out");
            error
        })
        .await
    }
}
