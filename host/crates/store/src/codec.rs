//! How a message's payload and route are laid out in the store's columns:
//! `payload` (JSON text), `payload_bytes` and `content_type` (a transform's
//! bytes payload), and `route` (the resolved routing keys as JSON).

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};

use weft_core::{payload::Payload, route::Route};

use super::{NewMessage, StoreError, lsn_to_sql};

/// The largest payload size [`StoredPayload::json_of`] sizes the next
/// buffer from: after a huge message, the next starts no bigger than this.
const MAX_LEN_HINT: usize = 64 * 1024;

/// The unused bytes a rendered payload may keep.
const MAX_SLACK: usize = 4096;

/// The media type of a bytes payload stored without one.
const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

/// A payload as the store keeps it: JSON already rendered to text, or a
/// transform's bytes. Push sinks get it as stored, so that those which
/// send the JSON text on (webhook, Kafka, NATS, RabbitMQ, Redis strings)
/// neither parse it nor write it out again.
#[derive(Debug, Clone, PartialEq)]
pub enum StoredPayload {
    /// JSON text.
    Json(String),
    /// Opaque bytes with their media type.
    Bytes {
        /// The media type.
        content_type: String,
        /// The encoded bytes.
        data: Vec<u8>,
    },
}

impl StoredPayload {
    /// `value` rendered as JSON text by serde, without a
    /// `serde_json::Value` in between, in a buffer trimmed as
    /// [`StoredPayload::written`] trims it (a TRUNCATE's message).
    pub fn json_of(value: &impl Serialize) -> StoredPayload {
        let json = serde_json::to_string(value).expect("a payload always serialises");
        StoredPayload::written(|text| text.push_str(&json))
    }

    /// The JSON text `write` appends to an empty buffer. Written into a
    /// `String`, it is never checked for UTF-8 again: that check of every
    /// payload cost a backfill 2-3% of weft's CPU.
    pub fn written(write: impl FnOnce(&mut String)) -> StoredPayload {
        // Sized from the last message rendered (a sink's messages are much
        // alike) with some room, so that the buffer rarely grows and holds
        // little it does not use: a backfill renders millions of them, and
        // every byte of slack is memory touched and given back.
        static LAST_LEN: AtomicUsize = AtomicUsize::new(1024);
        let mut text = String::with_capacity(LAST_LEN.load(Ordering::Relaxed) + 64);
        write(&mut text);
        LAST_LEN.store(text.len().min(MAX_LEN_HINT), Ordering::Relaxed);
        // A small message after a big one (or a big one that grew the
        // buffer by doubling) would hold the slack until it is stored.
        if text.capacity() - text.len() > MAX_SLACK {
            text.shrink_to_fit();
        }
        StoredPayload::Json(text)
    }

    /// The payload of a row's `payload`, `payload_bytes` and `content_type`
    /// columns, as stored.
    pub(super) fn from_columns(
        json: String,
        bytes: Option<Vec<u8>>,
        content_type: Option<String>,
    ) -> StoredPayload {
        match bytes {
            None => StoredPayload::Json(json),
            Some(data) => StoredPayload::Bytes {
                content_type: content_type.unwrap_or_else(|| DEFAULT_CONTENT_TYPE.into()),
                data,
            },
        }
    }

    /// What a sink sends as the message body: the JSON text as stored, or
    /// the bytes.
    pub fn body(&self) -> &[u8] {
        match self {
            StoredPayload::Json(text) => text.as_bytes(),
            StoredPayload::Bytes { data, .. } => data,
        }
    }

    /// The media type of a bytes payload; `None` for JSON.
    pub fn bytes_content_type(&self) -> Option<&str> {
        match self {
            StoredPayload::Json(_) => None,
            StoredPayload::Bytes { content_type, .. } => Some(content_type),
        }
    }

    /// The payload parsed, for sinks that take the message apart (Postgres,
    /// Redis streams). Fails only on text that is not JSON, which weft never
    /// stores: the row was modified outside weft.
    pub fn to_payload(&self) -> Result<Payload, StoreError> {
        let (json, bytes, content_type) = match self {
            StoredPayload::Json(text) => (text.as_str(), None, None),
            StoredPayload::Bytes { content_type, data } => {
                ("null", Some(data.clone()), Some(content_type.clone()))
            }
        };
        payload_from_columns(json, bytes, content_type, || "a message".into())
    }
}

impl From<Payload> for StoredPayload {
    fn from(payload: Payload) -> StoredPayload {
        match payload {
            Payload::Json(value) => StoredPayload::Json(value.to_string()),
            Payload::Bytes { content_type, data } => StoredPayload::Bytes { content_type, data },
        }
    }
}

/// A message as its `pull_messages` row holds it, before any delivery: the
/// values its insert binds, and what a segment encodes for each message
/// (`store::segments`), so that a message written through a segment lands
/// in `pull_messages` exactly as one inserted directly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct MessageColumns<'a> {
    /// The commit LSN, as SQLite's signed integer.
    pub(super) commit_lsn: i64,
    /// The position within the transaction.
    pub(super) commit_idx: u32,
    /// The message's group.
    #[serde(borrow)]
    pub(super) group_id: Cow<'a, str>,
    /// The message's idempotency key.
    #[serde(borrow)]
    pub(super) idempotency_key: Cow<'a, str>,
    /// The `payload` column: JSON text, `null` for a bytes payload.
    #[serde(borrow)]
    pub(super) payload: Cow<'a, str>,
    /// The `payload_bytes` column.
    pub(super) payload_bytes: Option<Cow<'a, [u8]>>,
    /// The `content_type` column.
    #[serde(borrow)]
    pub(super) content_type: Option<Cow<'a, str>>,
    /// The `route` column.
    #[serde(borrow)]
    pub(super) route: Option<Cow<'a, str>>,
}

impl<'a> MessageColumns<'a> {
    /// About how many bytes the message's columns hold.
    pub(super) fn approx_bytes(&self) -> usize {
        self.payload.len()
            + self.payload_bytes.as_ref().map_or(0, |bytes| bytes.len())
            + self.group_id.len()
            + self.idempotency_key.len()
            + self.route.as_ref().map_or(0, |route| route.len())
    }

    /// The columns of `message`, borrowing its text.
    pub(super) fn of(message: &'a NewMessage) -> Result<MessageColumns<'a>, StoreError> {
        let payload = payload_columns(&message.payload);
        Ok(MessageColumns {
            commit_lsn: lsn_to_sql(message.commit_lsn)?,
            commit_idx: message.commit_idx,
            group_id: Cow::Borrowed(&message.group_id),
            idempotency_key: Cow::Borrowed(&message.idempotency_key),
            payload: Cow::Borrowed(payload.json),
            payload_bytes: payload.bytes.map(Cow::Borrowed),
            content_type: payload.content_type.map(Cow::Borrowed),
            route: message
                .route
                .as_deref()
                .and_then(route_column)
                .map(Cow::Owned),
        })
    }
}

/// The columns one payload is stored in.
pub(super) struct PayloadColumns<'a> {
    /// JSON text; `null` for a bytes payload.
    pub(super) json: &'a str,
    /// The bytes of a bytes payload.
    pub(super) bytes: Option<&'a [u8]>,
    /// The media type of a bytes payload.
    pub(super) content_type: Option<&'a str>,
}

/// Splits `payload` into its columns.
pub(super) fn payload_columns(payload: &StoredPayload) -> PayloadColumns<'_> {
    match payload {
        StoredPayload::Json(text) => PayloadColumns {
            json: text,
            bytes: None,
            content_type: None,
        },
        StoredPayload::Bytes { content_type, data } => PayloadColumns {
            json: "null",
            bytes: Some(data),
            content_type: Some(content_type),
        },
    }
}

/// Rebuilds a payload from its columns; `what` names the row in errors.
pub(super) fn payload_from_columns(
    json: &str,
    bytes: Option<Vec<u8>>,
    content_type: Option<String>,
    what: impl FnOnce() -> String,
) -> Result<Payload, StoreError> {
    match bytes {
        Some(data) => Ok(Payload::Bytes {
            content_type: content_type.unwrap_or_else(|| DEFAULT_CONTENT_TYPE.into()),
            data,
        }),
        None => serde_json::from_str(json)
            .map(Payload::Json)
            .map_err(|e| StoreError::Corrupt {
                what: "payload",
                detail: format!("{}: {e}", what()),
            }),
    }
}

/// The `route` column of `route`: NULL when it sets no key.
pub(super) fn route_column(route: &Route) -> Option<String> {
    if route.is_empty() {
        None
    } else {
        Some(serde_json::to_string(route).expect("routes serialize"))
    }
}

/// Rebuilds a route from its column; `what` names the row in errors.
pub(super) fn route_from_column(
    text: Option<String>,
    what: impl FnOnce() -> String,
) -> Result<Route, StoreError> {
    match text {
        None => Ok(Route::default()),
        Some(text) => serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
            what: "route",
            detail: format!("{}: {e}", what()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use weft_core::route::KeyAction;

    #[test]
    fn payloads_round_trip_through_their_columns() {
        for payload in [
            Payload::Json(json!({"a": [1, "x", null]})),
            Payload::Bytes {
                content_type: "avro/binary".into(),
                data: vec![0, 159, 146, 150, 255],
            },
        ] {
            let stored = StoredPayload::from(payload.clone());
            let columns = payload_columns(&stored);
            let back = payload_from_columns(
                columns.json,
                columns.bytes.map(<[u8]>::to_vec),
                columns.content_type.map(str::to_string),
                || "test".into(),
            )
            .unwrap();
            assert_eq!(back, payload);
            assert_eq!(stored.to_payload().unwrap(), payload);
        }
    }

    #[test]
    fn routes_round_trip_and_empty_ones_store_null() {
        assert_eq!(route_column(&Route::default()), None);
        let route = Route {
            key: Some("sequin:t:1".into()),
            action: Some(KeyAction::Del),
            headers: Some(vec![("a".into(), "1".into())]),
            ..Route::default()
        };
        let text = route_column(&route);
        assert_eq!(route_from_column(text, || "x".into()).unwrap(), route);
        assert!(route_from_column(Some("{\"bogus\":1}".into()), || "row 7".into()).is_err());
    }
}
