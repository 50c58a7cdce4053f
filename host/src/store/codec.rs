//! How a message's payload and route are laid out in the store's columns:
//! `payload` (JSON text), `payload_bytes` and `content_type` (a transform's
//! bytes payload), and `route` (the resolved routing keys as JSON).

use crate::plugins::{Payload, Route};

use super::StoreError;

/// The columns one payload is stored in.
pub(super) struct PayloadColumns {
    /// JSON text; `null` for a bytes payload.
    pub(super) json: String,
    /// The bytes of a bytes payload.
    pub(super) bytes: Option<Vec<u8>>,
    /// The media type of a bytes payload.
    pub(super) content_type: Option<String>,
}

/// Splits `payload` into its columns.
pub(super) fn payload_columns(payload: &Payload) -> PayloadColumns {
    match payload {
        Payload::Json(value) => PayloadColumns {
            json: value.to_string(),
            bytes: None,
            content_type: None,
        },
        Payload::Bytes { content_type, data } => PayloadColumns {
            json: "null".into(),
            bytes: Some(data.clone()),
            content_type: Some(content_type.clone()),
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
            content_type: content_type.unwrap_or_else(|| "application/octet-stream".into()),
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
    if route.keys().is_empty() {
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
    use crate::plugins::KeyAction;

    #[test]
    fn payloads_round_trip_through_their_columns() {
        for payload in [
            Payload::Json(json!({"a": [1, "x", null]})),
            Payload::Bytes {
                content_type: "avro/binary".into(),
                data: vec![0, 159, 146, 150, 255],
            },
        ] {
            let columns = payload_columns(&payload);
            let back =
                payload_from_columns(&columns.json, columns.bytes, columns.content_type, || {
                    "test".into()
                })
                .unwrap();
            assert_eq!(back, payload);
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
