//! How one stored message becomes an AMQP publish: exchange, routing key,
//! properties and body.

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable};

use super::errors::{self, short};
use crate::delivery::DeliveryOutcome;
use weft_store::StoredMessage;

/// Delivery mode 2: the broker writes the message to disk in durable queues.
pub const PERSISTENT: u8 = 2;

/// The content type of a JSON message.
pub const JSON: &str = "application/json";

/// One message ready to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    /// The exchange: the route's, else the sink's.
    pub exchange: String,
    /// The routing key.
    pub routing_key: String,
    /// `message_id`, headers, persistence and content type.
    pub properties: BasicProperties,
    /// The message JSON, or a transform's bytes as they are.
    pub body: Vec<u8>,
}

impl Outgoing {
    /// The publish of `message`, whose route sets no exchange if the sink's
    /// `default_exchange` applies. A value AMQP cannot carry (over 255
    /// bytes) is a permanent failure: no retry can shorten it.
    pub fn of(
        message: &StoredMessage,
        default_exchange: &str,
    ) -> Result<Outgoing, DeliveryOutcome> {
        let route = &message.route;
        let exchange = route
            .exchange
            .clone()
            .unwrap_or_else(|| default_exchange.to_string());
        let routing_key = route
            .routing_key
            .clone()
            .ok_or_else(errors::no_routing_key)?;
        short("exchange", &exchange)?;
        short("routing_key", &routing_key)?;
        let message_id = route
            .message_id
            .clone()
            .unwrap_or_else(|| message.idempotency_key.clone());
        let mut headers = FieldTable::default();
        for (name, value) in route.headers.iter().flatten() {
            headers.insert(
                short("a header name", name)?,
                AMQPValue::LongString(value.as_str().into()),
            );
        }
        let content_type = message.payload.bytes_content_type().unwrap_or(JSON);
        let body = message.payload.body().to_vec();
        let properties = BasicProperties::default()
            .with_message_id(short("message_id", &message_id)?)
            .with_content_type(short("the content type", content_type)?)
            .with_delivery_mode(PERSISTENT)
            .with_headers(headers);
        Ok(Outgoing {
            exchange,
            routing_key,
            properties,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_core::{payload::Payload, route::Route};
    use weft_store::AckId;

    fn stored(route: Route, payload: Payload) -> StoredMessage {
        StoredMessage {
            ack_id: AckId::new(),
            commit_lsn: weft_core::lsn::Lsn(1),
            commit_idx: 0,
            group_id: "g".into(),
            idempotency_key: "idem-1".into(),
            size_bytes: 0,
            payload: payload.into(),
            route,
            attempt: 1,
        }
    }

    #[test]
    fn the_route_and_payload_become_exchange_key_and_properties() {
        let route = Route {
            routing_key: Some("sequin.shop.public.items.insert".into()),
            headers: Some(vec![("X-Table".into(), "public.items".into())]),
            ..Route::default()
        };
        let json = Outgoing::of(
            &stored(route.clone(), Payload::Json(serde_json::json!({"a": 1}))),
            "cdc",
        )
        .unwrap();
        assert_eq!(json.exchange, "cdc");
        assert_eq!(json.routing_key, "sequin.shop.public.items.insert");
        assert_eq!(json.body, br#"{"a":1}"#);
        let p = &json.properties;
        assert_eq!(p.message_id().as_ref().map(|m| m.as_str()), Some("idem-1"));
        assert_eq!(p.content_type().as_ref().map(|m| m.as_str()), Some(JSON));
        assert_eq!(*p.delivery_mode(), Some(PERSISTENT));
        let headers = p.headers().clone().unwrap();
        assert_eq!(
            headers.inner().get("X-Table"),
            Some(&AMQPValue::LongString("public.items".into()))
        );

        let routed = Route {
            exchange: Some("other".into()),
            message_id: Some("mine".into()),
            ..route
        };
        let bytes = Outgoing::of(
            &stored(
                routed,
                Payload::Bytes {
                    content_type: "application/octet-stream".into(),
                    data: vec![0, 255],
                },
            ),
            "cdc",
        )
        .unwrap();
        assert_eq!(bytes.exchange, "other");
        assert_eq!(bytes.body, vec![0, 255]);
        let p = &bytes.properties;
        assert_eq!(p.message_id().as_ref().map(|m| m.as_str()), Some("mine"));
        assert_eq!(
            p.content_type().as_ref().map(|m| m.as_str()),
            Some("application/octet-stream")
        );
    }

    #[test]
    fn values_amqp_cannot_carry_fail_permanently() {
        let route = Route {
            routing_key: Some("k".repeat(256)),
            ..Route::default()
        };
        match Outgoing::of(&stored(route, Payload::Json(serde_json::json!({}))), "cdc") {
            Err(DeliveryOutcome::Failed { error, retriable }) => {
                assert!(!retriable);
                assert!(
                    error.starts_with("routing_key is 256 bytes long"),
                    "{error}"
                );
            }
            other => panic!("expected a permanent failure, got {other:?}"),
        }
    }
}
