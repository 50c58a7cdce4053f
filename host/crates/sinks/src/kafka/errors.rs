//! Which Kafka errors a retry can fix, and what each means for the user.
//!
//! Permanent (the message is dead-lettered at once): the message is too
//! large, or its topic name is invalid. Everything else is retried with
//! backoff, including a topic that does not exist and an authorization or
//! authentication failure: an operator can create the topic or fix the ACL
//! or the credentials, and delivery then continues without replaying dead
//! letters. Those errors say what to fix.

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::delivery::DeliveryOutcome;

/// The outcome of producing a message to `topic` that failed with `error`;
/// `timeout_ms` is the sink's `request_timeout_ms`, `hosts` its brokers.
pub fn classify(error: &KafkaError, topic: &str, hosts: &str, timeout_ms: u128) -> DeliveryOutcome {
    let Some(code) = error.rdkafka_error_code() else {
        return DeliveryOutcome::retry(format!(
            "producing to Kafka topic {topic:?} failed: {error}"
        ));
    };
    use RDKafkaErrorCode as C;
    match code {
        C::MessageSizeTooLarge | C::InvalidMessageSize | C::MessageBatchTooLarge => {
            DeliveryOutcome::permanent(format!(
                "the message to Kafka topic {topic:?} is larger than the broker or topic allows ({code}); raise `message.max.bytes` on the broker (or `max.message.bytes` on the topic) or shrink the message with a transform, then replay this dead letter"
            ))
        }
        C::InvalidTopic => DeliveryOutcome::permanent(format!(
            "{topic:?} is not a valid Kafka topic name; fix the sink's `topic` or the routing function, then replay this dead letter"
        )),
        C::InvalidRecord | C::PolicyViolation | C::UnsupportedCompressionType => {
            DeliveryOutcome::permanent(format!(
                "Kafka rejected the message to topic {topic:?}: {code}; check the topic's settings and the sink's `compression`, then replay this dead letter"
            ))
        }
        C::UnknownTopicOrPartition | C::UnknownTopic | C::UnknownPartition | C::UnknownTopicId => {
            DeliveryOutcome::retry(format!(
                "Kafka topic {topic:?} does not exist; create it (e.g. `kafka-topics.sh --create --topic {topic}`) or enable auto-creation on the brokers; delivery continues once it exists"
            ))
        }
        C::TopicAuthorizationFailed => DeliveryOutcome::retry(format!(
            "not authorized to produce to Kafka topic {topic:?}; grant the sink's user WRITE (and DESCRIBE) on the topic; delivery continues once it is allowed"
        )),
        C::ClusterAuthorizationFailed | C::TransactionalIdAuthorizationFailed => {
            DeliveryOutcome::retry(format!(
                "the Kafka cluster refused the idempotent producer ({code}); grant the sink's user IDEMPOTENT_WRITE on the cluster (needed for the idempotent producer before Kafka 2.8)"
            ))
        }
        C::Authentication | C::SaslAuthenticationFailed => DeliveryOutcome::retry(format!(
            "the Kafka brokers at {hosts} refused the sink's credentials ({code}); check `username`, `password` and `sasl_mechanism`"
        )),
        C::SSL => DeliveryOutcome::retry(format!(
            "TLS with the Kafka brokers at {hosts} failed ({error}); check `tls`, `tls_ca_file` and that the brokers' certificates name the hosts in `hosts`"
        )),
        C::MessageTimedOut => DeliveryOutcome::retry(format!(
            "Kafka did not acknowledge the message to topic {topic:?} within request_timeout_ms = {timeout_ms}; are the brokers at {hosts} reachable?"
        )),
        C::AllBrokersDown | C::BrokerTransportFailure => DeliveryOutcome::retry(format!(
            "cannot reach the Kafka brokers at {hosts} ({code}); is Kafka running?"
        )),
        C::QueueFull => DeliveryOutcome::retry(
            "the Kafka producer's queue is full (the sink's max_memory_mb bounds it); retrying once earlier messages are acknowledged",
        ),
        _ => DeliveryOutcome::retry(format!("producing to Kafka topic {topic:?} failed: {code}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(code: RDKafkaErrorCode) -> (bool, String) {
        match classify(
            &KafkaError::MessageProduction(code),
            "orders",
            "k:9092",
            5000,
        ) {
            DeliveryOutcome::Failed { error, retriable } => (retriable, error),
            DeliveryOutcome::Delivered => panic!("a failure is not a delivery"),
        }
    }

    #[test]
    fn oversized_messages_and_bad_topics_are_permanent() {
        for code in [
            RDKafkaErrorCode::MessageSizeTooLarge,
            RDKafkaErrorCode::InvalidTopic,
        ] {
            let (retriable, error) = outcome(code);
            assert!(!retriable, "{code:?}");
            assert!(error.contains("replay this dead letter"), "{error}");
        }
    }

    #[test]
    fn missing_topics_and_refused_access_are_retried_with_advice() {
        let (retriable, error) = outcome(RDKafkaErrorCode::UnknownTopicOrPartition);
        assert!(retriable);
        assert!(
            error.contains("Kafka topic \"orders\" does not exist; create it"),
            "{error}"
        );
        let (retriable, error) = outcome(RDKafkaErrorCode::TopicAuthorizationFailed);
        assert!(retriable);
        assert!(
            error.contains("not authorized to produce to Kafka topic \"orders\""),
            "{error}"
        );
        let (retriable, error) = outcome(RDKafkaErrorCode::SaslAuthenticationFailed);
        assert!(retriable);
        assert!(error.contains("refused the sink's credentials"), "{error}");
        let (retriable, error) = outcome(RDKafkaErrorCode::MessageTimedOut);
        assert!(retriable);
        assert!(
            error.contains("within request_timeout_ms = 5000"),
            "{error}"
        );
    }
}
