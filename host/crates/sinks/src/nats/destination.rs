//! Publishing a NATS sink's messages and its retry logic.

use async_nats::HeaderMap;
use async_trait::async_trait;
use bytes::Bytes;

use super::errors;
use super::{NatsConnection, NatsSettings};
use crate::delivery::{DeliveryLimits, DeliveryOutcome, Destination, within};
use weft_store::StoredMessage;

/// The header carrying the idempotency key; JetStream drops a message
/// whose id it has seen within the stream's `duplicate_window`.
pub const MSG_ID_HEADER: &str = "Nats-Msg-Id";

/// Publishes a NATS sink's messages.
pub struct NatsDestination {
    sink: String,
    settings: NatsSettings,
    connection: NatsConnection,
}

/// One message ready to publish.
struct Outgoing {
    subject: String,
    headers: HeaderMap,
    payload: Bytes,
}

impl NatsDestination {
    /// The destination of the NATS sink `sink`. Connects on first delivery.
    pub fn new(sink: &str, settings: NatsSettings) -> NatsDestination {
        NatsDestination {
            sink: sink.to_string(),
            connection: NatsConnection::new(sink, settings.clone()),
            settings,
        }
    }

    /// The settings this destination delivers with.
    pub fn settings(&self) -> &NatsSettings {
        &self.settings
    }

    /// The subject, headers and payload of `message`.
    fn outgoing(message: &StoredMessage) -> Result<Outgoing, DeliveryOutcome> {
        let subject = message.route.subject.clone().ok_or_else(|| {
            DeliveryOutcome::permanent(
                "the message has no subject (its stored route lacks one); this is a bug in weft",
            )
        })?;
        let mut headers = HeaderMap::new();
        for (name, value) in message.route.headers.iter().flatten() {
            headers.insert(name.as_str(), value.as_str());
        }
        // After the routing headers, so that they cannot replace it.
        headers.insert(MSG_ID_HEADER, message.idempotency_key.as_str());
        if let Some(content_type) = message.payload.bytes_content_type() {
            headers.insert("Content-Type", content_type);
        }
        let payload = Bytes::copy_from_slice(message.payload.body());
        Ok(Outgoing {
            subject,
            headers,
            payload,
        })
    }

    async fn deliver_within_timeout(&self, batch: &[StoredMessage]) -> Vec<DeliveryOutcome> {
        let connected = match self.connection.get().await {
            Ok(connected) => connected,
            Err(error) => return vec![DeliveryOutcome::retry(error); batch.len()],
        };
        let outgoing: Vec<Result<Outgoing, DeliveryOutcome>> =
            batch.iter().map(Self::outgoing).collect();
        if self.settings.jetstream {
            // Publish all, then await the acks together: one round trip per
            // batch, not per message (each message is its group's only one).
            let mut pending = Vec::with_capacity(batch.len());
            for message in outgoing {
                pending.push(match message {
                    Err(outcome) => Err(outcome),
                    Ok(m) => match connected
                        .jetstream
                        .publish_with_headers(m.subject.clone(), m.headers, m.payload)
                        .await
                    {
                        Ok(ack) => Ok((m.subject, ack)),
                        Err(e) => Err(errors::publish_failed(
                            &m.subject,
                            e.kind(),
                            &e,
                            self.settings.limits.request_timeout,
                        )),
                    },
                });
            }
            let acks = pending.into_iter().map(|sent| async move {
                let (subject, ack) = sent?;
                match ack.await {
                    Ok(_) => Ok(()),
                    Err(e) => Err(errors::publish_failed(
                        &subject,
                        e.kind(),
                        &e,
                        self.settings.limits.request_timeout,
                    )),
                }
            });
            futures::future::join_all(acks)
                .await
                .into_iter()
                .map(|result| result.err().unwrap_or(DeliveryOutcome::Delivered))
                .collect()
        } else {
            let mut outcomes = Vec::with_capacity(batch.len());
            for message in outgoing {
                outcomes.push(match message {
                    Err(outcome) => Some(outcome),
                    Ok(m) => connected
                        .client
                        .publish_with_headers(m.subject.clone(), m.headers, m.payload)
                        .await
                        .err()
                        .map(|e| errors::core_publish_failed(&m.subject, &e)),
                });
            }
            let flushed = connected
                .client
                .flush()
                .await
                .map_err(|e| errors::flush_failed(&self.settings.address, &e));
            outcomes
                .into_iter()
                .map(|outcome| match (outcome, &flushed) {
                    (Some(failed), _) => failed,
                    (None, Err(failed)) => failed.clone(),
                    (None, Ok(())) => DeliveryOutcome::Delivered,
                })
                .collect()
        }
    }
}

#[async_trait]
impl Destination for NatsDestination {
    fn limits(&self) -> &DeliveryLimits {
        &self.settings.limits
    }

    async fn deliver(&self, batch: &[StoredMessage]) -> Vec<DeliveryOutcome> {
        let timeout = self.settings.limits.request_timeout;
        within(timeout, batch.len(), self.deliver_within_timeout(batch), || {
            let error = format!(
                "delivery to NATS at {} did not finish within request_timeout_ms = {}",
                self.settings.address,
                timeout.as_millis()
            );
            tracing::debug!(sink = %self.sink, %error, "NATS delivery timed out");
            error
        })
        .await
    }
}
