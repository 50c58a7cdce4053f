//! Producing a Kafka sink's messages and awaiting their delivery reports.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureRecord};

use super::KafkaSettings;
use super::config::topic_name_problem;
use super::errors::classify;
use super::producer::{KafkaProducer, SinkProducer};
use crate::delivery::{DeliveryLimits, DeliveryOutcome, Destination, within};
use weft_store::StoredMessage;

/// The header carrying the message's idempotency key, for consumers that
/// drop redeliveries.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";

/// The header carrying a transform's bytes payload's media type.
pub const CONTENT_TYPE_HEADER: &str = "content-type";

/// Slack on top of `message.timeout.ms` for librdkafka to hand over the
/// last delivery reports, so that they, not weft's timer, end a delivery.
const REPORT_SLACK: Duration = Duration::from_secs(5);

/// Produces a Kafka sink's messages.
pub struct KafkaDestination {
    settings: KafkaSettings,
    producer: KafkaProducer,
}

/// One message ready to produce.
struct Outgoing<'a> {
    topic: &'a str,
    key: Option<&'a str>,
    headers: OwnedHeaders,
    payload: Vec<u8>,
}

impl KafkaDestination {
    /// The destination of a Kafka sink; builds its producer, which connects
    /// in the background.
    pub fn new(settings: KafkaSettings) -> Result<KafkaDestination, String> {
        let producer = KafkaProducer::new(settings.clone())?;
        Ok(KafkaDestination { settings, producer })
    }

    /// The topic, key, headers and payload of `message`.
    fn outgoing<'a>(&'a self, message: &'a StoredMessage) -> Result<Outgoing<'a>, DeliveryOutcome> {
        let topic = message
            .route
            .topic
            .as_deref()
            .or(self.settings.topic.as_deref())
            .ok_or_else(|| {
                DeliveryOutcome::permanent(
                    "the message has no topic: the sink's routing function did not set `topic` and the sink has no `topic`; set one of them, then replay this dead letter",
                )
            })?;
        if let Some(problem) = topic_name_problem(topic) {
            return Err(DeliveryOutcome::permanent(format!(
                "{problem}; fix the sink's `topic` or its routing function, then replay this dead letter"
            )));
        }
        let mut headers = OwnedHeaders::new().insert(Header {
            key: IDEMPOTENCY_KEY_HEADER,
            value: Some(message.idempotency_key.as_str()),
        });
        if let Some(content_type) = message.payload.bytes_content_type() {
            headers = headers.insert(Header {
                key: CONTENT_TYPE_HEADER,
                value: Some(content_type),
            });
        }
        let payload = message.payload.body().to_vec();
        Ok(Outgoing {
            topic,
            key: message.route.message_key.as_deref(),
            headers,
            payload,
        })
    }

    /// Hands `batch` to the producer, then awaits every delivery report.
    async fn deliver_batch(&self, batch: &[StoredMessage]) -> Vec<DeliveryOutcome> {
        let producer = self.producer.get();
        let mut pending: Vec<Result<(&str, DeliveryFuture), DeliveryOutcome>> =
            Vec::with_capacity(batch.len());
        for message in batch {
            pending.push(self.outgoing(message).and_then(|m| {
                let mut record = FutureRecord::to(m.topic)
                    .payload(&m.payload)
                    .headers(m.headers);
                if let Some(key) = m.key {
                    record = record.key(key);
                }
                producer
                    .send_result(record)
                    .map(|report| (m.topic, report))
                    .map_err(|(error, _)| self.failed(&producer, &error, m.topic))
            }));
        }
        let reports = pending.into_iter().map(|sent| {
            let producer = Arc::clone(&producer);
            async move {
                let (topic, report) = sent.map_err(|outcome| (outcome, None))?;
                match report.await {
                    Ok(Ok(_delivery)) => Ok(()),
                    Ok(Err((error, _message))) => Err((
                        self.failed(&producer, &error, topic),
                        error.rdkafka_error_code(),
                    )),
                    Err(_canceled) => Err((
                        DeliveryOutcome::retry(
                            "the Kafka producer was shut down before reporting the delivery",
                        ),
                        None,
                    )),
                }
            }
        });
        let results = futures::future::join_all(reports).await;
        let delivered = results.iter().any(Result::is_ok);
        let all_timed_out = !results.is_empty()
            && results
                .iter()
                .all(|r| matches!(r, Err((_, Some(RDKafkaErrorCode::MessageTimedOut)))));
        self.producer
            .observe(&producer, delivered, all_timed_out)
            .await;
        if !self.producer.is_current(&producer) {
            // Dropping the last handle of a replaced producer purges and
            // flushes it, which blocks for up to half a second.
            tokio::task::spawn_blocking(move || drop(producer));
        }
        results
            .into_iter()
            .map(|result| match result {
                Ok(()) => DeliveryOutcome::Delivered,
                Err((outcome, _)) => outcome,
            })
            .collect()
    }

    /// The outcome of `error` from `producer`, replacing the producer when
    /// librdkafka declared it unusable.
    fn failed(
        &self,
        producer: &Arc<SinkProducer>,
        error: &KafkaError,
        topic: &str,
    ) -> DeliveryOutcome {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal)
            && let Some(fatal) = self.producer.replace_if_fatal(producer)
        {
            return DeliveryOutcome::retry(format!(
                "the Kafka producer failed fatally ({fatal}); a new producer retries the message"
            ));
        }
        let outcome = classify(
            error,
            topic,
            &self.settings.bootstrap_servers,
            self.settings.limits.request_timeout.as_millis(),
        );
        match (outcome, self.producer.last_client_error()) {
            (
                DeliveryOutcome::Failed {
                    error: what,
                    retriable,
                },
                Some(client),
            ) if error.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageTimedOut) => {
                DeliveryOutcome::Failed {
                    error: format!("{what}; last client error: {client}"),
                    retriable,
                }
            }
            (outcome, _) => outcome,
        }
    }
}

#[async_trait]
impl Destination for KafkaDestination {
    fn limits(&self) -> &DeliveryLimits {
        &self.settings.limits
    }

    fn max_delivery_time(&self) -> Duration {
        self.settings.limits.request_timeout + REPORT_SLACK
    }

    async fn deliver(&self, batch: &[StoredMessage]) -> Vec<DeliveryOutcome> {
        within(
            self.max_delivery_time(),
            batch.len(),
            self.deliver_batch(batch),
            || {
                format!(
                    "Kafka delivery reports from {} did not arrive within request_timeout_ms = {}",
                    self.settings.bootstrap_servers,
                    self.settings.limits.request_timeout.as_millis()
                )
            },
        )
        .await
    }
}
