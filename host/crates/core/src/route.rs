//! The destination keys of one message: a sink's defaults, overridden key
//! by key by what a routing function chose.

use serde::{Deserialize, Serialize};

/// What a Redis string sink does with its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyAction {
    /// `SET` the key to the message.
    Set,
    /// `DEL` the key.
    Del,
}

/// The destination keys a routing function chose for one change. A `None`
/// field keeps the sink's default. Serialises with only the set keys, in
/// Sequin's names (`topic`, `message_key`, `endpoint_path`, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Kafka: the topic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// Kafka: the message key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_key: Option<String>,
    /// NATS: the subject.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// NATS, webhook and RabbitMQ: extra headers, in the guest's order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<Vec<(String, String)>>,
    /// Redis string: the key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Redis string: set or delete the key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<KeyAction>,
    /// Redis string: expiry in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expire_ms: Option<u64>,
    /// Redis stream: the stream key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_key: Option<String>,
    /// Webhook: the HTTP method.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Webhook: the path appended to the endpoint's base URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint_path: Option<String>,
    /// RabbitMQ: the exchange.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exchange: Option<String>,
    /// RabbitMQ: the routing key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing_key: Option<String>,
    /// RabbitMQ: the message id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// Postgres: the target table, `schema.table`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
}

impl Route {
    /// The names of the keys this route sets, in declaration order.
    pub fn keys(&self) -> Vec<&'static str> {
        self.flags()
            .into_iter()
            .filter_map(|(name, is_set)| is_set.then_some(name))
            .collect()
    }

    /// Whether this route sets no key (a sink without routing).
    pub fn is_empty(&self) -> bool {
        self.flags().iter().all(|&(_, is_set)| !is_set)
    }

    /// This route boxed, or `None` when it sets no key: what a stored
    /// message carries (see the store's `NewMessage::route`).
    pub fn boxed_unless_empty(self) -> Option<Box<Route>> {
        (!self.is_empty()).then(|| Box::new(self))
    }

    /// Each key's name and whether this route sets it.
    fn flags(&self) -> [(&'static str, bool); 14] {
        [
            ("topic", self.topic.is_some()),
            ("message_key", self.message_key.is_some()),
            ("subject", self.subject.is_some()),
            ("headers", self.headers.is_some()),
            ("key", self.key.is_some()),
            ("action", self.action.is_some()),
            ("expire_ms", self.expire_ms.is_some()),
            ("stream_key", self.stream_key.is_some()),
            ("method", self.method.is_some()),
            ("endpoint_path", self.endpoint_path.is_some()),
            ("exchange", self.exchange.is_some()),
            ("routing_key", self.routing_key.is_some()),
            ("message_id", self.message_id.is_some()),
            ("table", self.table.is_some()),
        ]
    }
}
