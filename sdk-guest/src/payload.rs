use serde::Serialize;

use crate::Error;

/// What a transform produces for one change.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// A JSON value; JSON sinks send it as is.
    Json(serde_json::Value),
    /// Opaque bytes with their media type (e.g. Avro or Protobuf).
    Bytes {
        /// The media type, e.g. `application/x-protobuf`.
        content_type: String,
        /// The encoded bytes.
        data: Vec<u8>,
    },
}

impl Payload {
    /// A JSON payload from any serializable value.
    pub fn json<T: Serialize>(value: &T) -> Result<Payload, Error> {
        Ok(Payload::Json(serde_json::to_value(value)?))
    }
}
