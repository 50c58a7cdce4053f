//! `redis_string`: each message `SET`s its route's key to the payload, or
//! `DEL`s it.

use async_trait::async_trait;
use redis::Cmd;

use super::errors;
use crate::delivery::{DeliveryLimits, DeliveryOutcome, Destination};
use crate::redis::RedisConnection;
use weft_core::route::KeyAction;
use weft_store::{StoredMessage, StoredPayload};

/// Delivers a `redis_string` sink's messages.
pub struct RedisStringDestination {
    connection: RedisConnection,
    expire_ms: Option<u64>,
}

impl RedisStringDestination {
    /// The destination writing over `connection`; keys set without a
    /// routed `expire_ms` expire after `expire_ms` (config), if set.
    pub fn new(connection: RedisConnection, expire_ms: Option<u64>) -> RedisStringDestination {
        RedisStringDestination {
            connection,
            expire_ms,
        }
    }

    fn command(&self, message: &StoredMessage) -> Result<Cmd, DeliveryOutcome> {
        let route = &message.route;
        let Some(key) = &route.key else {
            return Err(errors::no_key());
        };
        if route.action == Some(KeyAction::Del) {
            let mut command = redis::cmd("DEL");
            command.arg(key);
            return Ok(command);
        }
        let mut command = redis::cmd("SET");
        command.arg(key).arg(value(&message.payload));
        if let Some(ms) = route.expire_ms.or(self.expire_ms) {
            command.arg("PX").arg(ms);
        }
        Ok(command)
    }
}

/// The bytes a key is set to: a bytes payload as is, a JSON string as its
/// text (as Sequin does), any other JSON value as JSON text.
fn value(payload: &StoredPayload) -> Vec<u8> {
    match payload {
        // Only a string's text differs from its JSON text.
        StoredPayload::Json(text) if text.starts_with('"') => serde_json::from_str::<String>(text)
            .map(String::into_bytes)
            .unwrap_or_else(|_| text.as_bytes().to_vec()),
        other => other.body().to_vec(),
    }
}

#[async_trait]
impl Destination for RedisStringDestination {
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
    use weft_core::payload::Payload;

    fn stored(payload: Payload) -> StoredPayload {
        payload.into()
    }

    #[test]
    fn values_follow_sequins_encoding() {
        assert_eq!(value(&stored(Payload::Json(json!("plain")))), b"plain");
        assert_eq!(
            value(&stored(Payload::Json(json!("a \"quoted\" é")))),
            "a \"quoted\" é".as_bytes()
        );
        assert_eq!(
            value(&stored(Payload::Json(json!({"a": 1})))),
            br#"{"a":1}"#
        );
        assert_eq!(value(&stored(Payload::Json(json!(7)))), b"7");
        let bytes = stored(Payload::Bytes {
            content_type: "application/octet-stream".into(),
            data: vec![0, 255],
        });
        assert_eq!(value(&bytes), vec![0, 255]);
    }
}
