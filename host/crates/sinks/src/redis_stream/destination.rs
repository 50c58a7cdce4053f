//! `redis_stream`: each message is `XADD`ed to its stream, one field per
//! top-level key of the message, plus `idempotency_key`.

use async_trait::async_trait;
use redis::Cmd;
use serde_json::Value;

use super::errors;
use crate::delivery::{DeliveryLimits, DeliveryOutcome, Destination};
use crate::redis::RedisConnection;
use weft_core::payload::Payload;
use weft_store::StoredMessage;

/// The entry field carrying the message's idempotency key.
pub const IDEMPOTENCY_FIELD: &str = "idempotency_key";

/// Delivers a `redis_stream` sink's messages.
pub struct RedisStreamDestination {
    connection: RedisConnection,
    stream_key: String,
}

impl RedisStreamDestination {
    /// The destination adding to `stream_key` (unless routed elsewhere)
    /// over `connection`.
    pub fn new(connection: RedisConnection, stream_key: String) -> RedisStreamDestination {
        RedisStreamDestination {
            connection,
            stream_key,
        }
    }

    fn command(&self, message: &StoredMessage) -> Result<Cmd, DeliveryOutcome> {
        let stream_key = message
            .route
            .stream_key
            .as_ref()
            .unwrap_or(&self.stream_key);
        let mut command = redis::cmd("XADD");
        command.arg(stream_key).arg("*");
        let payload = message.payload.to_payload().map_err(errors::unreadable)?;
        for (field, value) in fields(&payload)? {
            command.arg(field).arg(value);
        }
        command.arg(IDEMPOTENCY_FIELD).arg(&message.idempotency_key);
        Ok(command)
    }
}

/// An entry's fields for `payload`, without the idempotency key: a JSON
/// object's keys, string values as their text and others as JSON text (as
/// Sequin does); a bytes payload as `data` and `content_type`.
fn fields(payload: &Payload) -> Result<Vec<(&str, Vec<u8>)>, DeliveryOutcome> {
    match payload {
        Payload::Json(Value::Object(object)) => Ok(object
            .iter()
            .filter(|(field, _)| field.as_str() != IDEMPOTENCY_FIELD)
            .map(|(field, value)| {
                let value = match value {
                    Value::String(text) => text.as_bytes().to_vec(),
                    other => serde_json::to_vec(other).expect("JSON values serialize"),
                };
                (field.as_str(), value)
            })
            .collect()),
        Payload::Json(other) => Err(errors::not_an_object(json_kind(other))),
        Payload::Bytes { content_type, data } => Ok(vec![
            ("data", data.clone()),
            ("content_type", content_type.as_bytes().to_vec()),
        ]),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[async_trait]
impl Destination for RedisStreamDestination {
    fn limits(&self) -> &DeliveryLimits {
        &self.connection.settings().limits
    }

    async fn deliver(&self, batch: &[StoredMessage]) -> Vec<DeliveryOutcome> {
        self.connection
            .deliver(batch, |message| self.command(message))
            .await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn object_keys_become_fields_with_strings_raw_and_the_rest_json() {
        let message = Payload::Json(json!({
            "action": "insert",
            "record": {"id": 1},
            "idempotency_key": "spoofed",
        }));
        let got = fields(&message).unwrap();
        assert!(got.contains(&("action", b"insert".to_vec())));
        assert!(got.contains(&("record", br#"{"id":1}"#.to_vec())));
        assert_eq!(
            got.len(),
            2,
            "the payload cannot supply the idempotency key"
        );
        let bytes = Payload::Bytes {
            content_type: "application/x-test".into(),
            data: vec![0, 255],
        };
        assert_eq!(
            fields(&bytes).unwrap(),
            vec![
                ("data", vec![0, 255]),
                ("content_type", b"application/x-test".to_vec())
            ]
        );
        let refused = fields(&Payload::Json(json!([1]))).unwrap_err();
        assert!(
            matches!(&refused, DeliveryOutcome::Failed { error, retriable: false } if error.contains("an array")),
            "{refused:?}"
        );
    }
}
