//! Sending an SQS sink's messages with `SendMessageBatch`, and settling
//! each message by what SQS answered for it.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchError;
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use futures::future::join_all;

use super::errors::{self, MAX_MESSAGE_BYTES, RequestFailure};
use super::message::Outgoing;
use super::{MAX_BATCH_ENTRIES, SqsClient, SqsSettings};
use crate::delivery::{DeliveryLimits, DeliveryOutcome, Destination, within};
use weft_store::StoredMessage;

/// Slack on top of the request timeout for the SDK's own timeout, whose
/// error says more, to end a request before weft's bound does.
const TIMEOUT_SLACK: Duration = Duration::from_secs(1);

/// Sends an SQS sink's messages to its queue.
pub struct SqsDestination {
    settings: SqsSettings,
    client: SqsClient,
}

/// A message of the delivery, by its index in the batch, ready to send.
type Indexed<'a> = (usize, Outgoing<'a>);

impl SqsDestination {
    /// The destination of the SQS sink with `settings`. Builds its client
    /// on the first delivery.
    pub fn new(settings: SqsSettings) -> SqsDestination {
        SqsDestination {
            client: SqsClient::new(settings.clone()),
            settings,
        }
    }

    /// The settings this destination delivers with.
    pub fn settings(&self) -> &SqsSettings {
        &self.settings
    }

    async fn deliver_batch(&self, batch: &[StoredMessage]) -> Vec<DeliveryOutcome> {
        let mut outcomes: Vec<Option<DeliveryOutcome>> = vec![None; batch.len()];
        let mut sendable = Vec::with_capacity(batch.len());
        for (index, message) in batch.iter().enumerate() {
            let outgoing = Outgoing::of(message, self.settings.fifo);
            let size = outgoing.size();
            if size > MAX_MESSAGE_BYTES {
                outcomes[index] = Some(errors::too_large(size));
            } else {
                sendable.push((index, outgoing));
            }
        }
        if !sendable.is_empty() {
            let client = self.client.get().await;
            let requests = requests(sendable);
            let sent = join_all(requests.into_iter().map(|request| self.send(client, request))).await;
            for (index, outcome) in sent.into_iter().flatten() {
                outcomes[index] = Some(outcome);
            }
        }
        outcomes
            .into_iter()
            .map(|outcome| {
                outcome.unwrap_or_else(|| {
                    DeliveryOutcome::retry(
                        "SQS answered neither success nor failure for the message; retrying",
                    )
                })
            })
            .collect()
    }

    /// Sends one request. When SQS refuses a request of several messages
    /// for what it holds, sends each alone, so that only the message at
    /// fault is dead-lettered.
    async fn send(&self, client: &Client, request: Vec<Indexed<'_>>) -> Vec<(usize, DeliveryOutcome)> {
        match self.send_batch(client, &request).await {
            Ok(outcomes) => outcomes,
            Err(RequestFailure::Retry(error)) => {
                tracing::debug!(sink = %self.settings.sink, %error, "SQS request failed");
                request
                    .iter()
                    .map(|(index, _)| (*index, DeliveryOutcome::retry(error.clone())))
                    .collect()
            }
            Err(RequestFailure::Content { code, said }) if request.len() == 1 => {
                vec![(
                    request[0].0,
                    errors::refused(&self.settings.queue_url, &code, &said),
                )]
            }
            Err(RequestFailure::Content { .. }) => {
                let alone = request.into_iter().map(|entry| async move {
                    let index = entry.0;
                    match self.send_batch(client, std::slice::from_ref(&entry)).await {
                        Ok(mut outcomes) => outcomes.pop().unwrap_or((
                            index,
                            DeliveryOutcome::retry("SQS answered nothing for the message"),
                        )),
                        Err(RequestFailure::Content { code, said }) => {
                            (index, errors::refused(&self.settings.queue_url, &code, &said))
                        }
                        Err(RequestFailure::Retry(error)) => (index, DeliveryOutcome::retry(error)),
                    }
                });
                join_all(alone).await
            }
        }
    }

    /// One `SendMessageBatch` of `request`: each entry's outcome, or why
    /// the request as a whole failed.
    async fn send_batch(
        &self,
        client: &Client,
        request: &[Indexed<'_>],
    ) -> Result<Vec<(usize, DeliveryOutcome)>, RequestFailure> {
        let mut entries = Vec::with_capacity(request.len());
        for (position, (_, outgoing)) in request.iter().enumerate() {
            entries.push(entry(position, outgoing).map_err(|e| {
                RequestFailure::Retry(format!(
                    "cannot build the SQS request ({e}); this is a bug in weft"
                ))
            })?);
        }
        let answer = client
            .send_message_batch()
            .queue_url(&self.settings.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|error| self.request_failed(error))?;
        let by_position = |id: &str| id.parse::<usize>().ok().and_then(|p| request.get(p));
        let mut outcomes = Vec::with_capacity(request.len());
        for done in answer.successful() {
            if let Some((index, _)) = by_position(done.id()) {
                outcomes.push((*index, DeliveryOutcome::Delivered));
            }
        }
        for failed in answer.failed() {
            if let Some((index, _)) = by_position(failed.id()) {
                outcomes.push((
                    *index,
                    errors::entry_failed(
                        &self.settings.queue_url,
                        failed.code(),
                        failed.sender_fault(),
                        failed.message(),
                    ),
                ));
            }
        }
        Ok(outcomes)
    }

    /// What a failed request means, and what to do about it.
    fn request_failed(
        &self,
        error: SdkError<SendMessageBatchError, aws_sdk_sqs::config::http::HttpResponse>,
    ) -> RequestFailure {
        let endpoint = &self.settings.endpoint;
        let context = causes(&error);
        match &error {
            SdkError::ServiceError(service) => errors::request_refused(
                &self.settings.queue_url,
                service.err().code(),
                service.err().message(),
                service.raw().status().as_u16(),
            ),
            SdkError::TimeoutError(_) => RequestFailure::Retry(format!(
                "SQS at {endpoint} did not answer within request_timeout_ms = {}",
                self.settings.limits.request_timeout.as_millis()
            )),
            SdkError::DispatchFailure(failure) if failure.is_timeout() => RequestFailure::Retry(
                format!("connecting to SQS at {endpoint} timed out; is it reachable from here?"),
            ),
            SdkError::DispatchFailure(failure) if failure.is_io() => RequestFailure::Retry(format!(
                "cannot reach SQS at {endpoint} ({context}); check the network, and with `use_emulator` that the emulator runs"
            )),
            SdkError::DispatchFailure(_) => RequestFailure::Retry(format!(
                "the request to SQS at {endpoint} failed before it was sent ({context}); with `use_task_role`, check that the AWS credential chain finds credentials here (environment, profile, ECS task role, EC2 instance role)"
            )),
            _ => RequestFailure::Retry(format!("the request to SQS at {endpoint} failed: {context}")),
        }
    }
}

/// `error` and its causes, each once, as one line: the SDK's own
/// rendering adds each error's `Debug` form too, which repeats them all.
fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

/// The SDK's entry of `outgoing`, the `position`-th of its request.
fn entry(
    position: usize,
    outgoing: &Outgoing<'_>,
) -> Result<SendMessageBatchRequestEntry, aws_sdk_sqs::error::BuildError> {
    let mut entry = SendMessageBatchRequestEntry::builder()
        .id(position.to_string())
        .message_body(outgoing.body.as_ref());
    for (name, value) in &outgoing.attributes {
        entry = entry.message_attributes(
            *name,
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value(value)
                .build()?,
        );
    }
    if let Some(ids) = &outgoing.fifo_ids {
        entry = entry
            .message_group_id(&ids.group_id)
            .message_deduplication_id(&ids.deduplication_id);
    }
    entry.build()
}

/// `messages` cut into `SendMessageBatch` requests: at most
/// [`MAX_BATCH_ENTRIES`] each, and at most [`MAX_MESSAGE_BYTES`] in all,
/// which SQS also limits a batch to. Each message fits alone (checked
/// before).
fn requests(messages: Vec<Indexed<'_>>) -> Vec<Vec<Indexed<'_>>> {
    let mut requests: Vec<Vec<Indexed<'_>>> = Vec::new();
    let mut bytes = 0;
    for message in messages {
        let size = message.1.size();
        let full = requests.last().is_none_or(|last| {
            last.len() >= MAX_BATCH_ENTRIES as usize || bytes + size > MAX_MESSAGE_BYTES
        });
        if full {
            requests.push(Vec::new());
            bytes = 0;
        }
        bytes += size;
        requests.last_mut().expect("pushed above").push(message);
    }
    requests
}

#[async_trait]
impl Destination for SqsDestination {
    fn limits(&self) -> &DeliveryLimits {
        &self.settings.limits
    }

    /// Two requests' worth: a request SQS refuses for its content is
    /// followed by one request per message.
    fn max_delivery_time(&self) -> Duration {
        self.settings.limits.request_timeout * 2 + TIMEOUT_SLACK
    }

    async fn deliver(&self, batch: &[StoredMessage]) -> Vec<DeliveryOutcome> {
        within(
            self.max_delivery_time(),
            batch.len(),
            self.deliver_batch(batch),
            || {
                format!(
                    "delivery to SQS at {} did not finish within twice request_timeout_ms = {}",
                    self.settings.endpoint,
                    self.settings.limits.request_timeout.as_millis()
                )
            },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    fn sized(index: usize, bytes: usize) -> Indexed<'static> {
        (
            index,
            Outgoing {
                body: Cow::Owned("x".repeat(bytes)),
                attributes: Vec::new(),
                fifo_ids: None,
            },
        )
    }

    fn shape(requests: &[Vec<Indexed<'_>>]) -> Vec<Vec<usize>> {
        requests
            .iter()
            .map(|r| r.iter().map(|(i, _)| *i).collect())
            .collect()
    }

    #[test]
    fn a_request_holds_at_most_ten_messages() {
        let messages = (0..23).map(|i| sized(i, 10)).collect();
        let requests = requests(messages);
        assert_eq!(
            requests.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![10, 10, 3]
        );
    }

    #[test]
    fn a_request_holds_at_most_256_kib() {
        let kib = 1024;
        let messages = vec![
            sized(0, 200 * kib),
            sized(1, 50 * kib),
            sized(2, 10 * kib),
            sized(3, 256 * kib),
            sized(4, 1),
        ];
        assert_eq!(
            shape(&requests(messages)),
            vec![vec![0, 1], vec![2], vec![3], vec![4]]
        );
    }

    #[test]
    fn an_entry_carries_its_attributes_and_fifo_ids() {
        let outgoing = Outgoing {
            body: Cow::Borrowed("Zm9v"),
            attributes: vec![("content_type", "application/avro".into())],
            fifo_ids: Some(super::super::message::FifoIds::of("g", "k")),
        };
        let entry = entry(3, &outgoing).unwrap();
        assert_eq!(entry.id(), "3");
        assert_eq!(entry.message_body(), "Zm9v");
        assert_eq!(
            entry.message_attributes().unwrap()["content_type"].string_value(),
            Some("application/avro")
        );
        assert_eq!(
            entry.message_group_id(),
            Some(super::super::message::md5_hex("g").as_str())
        );
        assert_eq!(
            entry.message_deduplication_id(),
            Some(super::super::message::md5_hex("k").as_str())
        );
    }
}
