//! What a transform produces for one change: JSON, or bytes with their
//! media type, so that Avro or Protobuf encoders can be plugins.

/// What a transform produced for one change.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// A JSON value; JSON sinks send it as is.
    Json(serde_json::Value),
    /// Opaque bytes with their media type (e.g. Avro, Protobuf).
    Bytes {
        /// The media type.
        content_type: String,
        /// The encoded bytes.
        data: Vec<u8>,
    },
}

impl Payload {
    /// The payload as JSON for places that show JSON only (the pull API, the
    /// dead-letter API): a JSON payload as is, a bytes payload as
    /// `{"content_type": ..., "data_base64": ...}`.
    pub fn into_json_view(self) -> serde_json::Value {
        match self {
            Payload::Json(value) => value,
            Payload::Bytes { content_type, data } => {
                use base64::Engine as _;
                serde_json::json!({
                    "content_type": content_type,
                    "data_base64": base64::engine::general_purpose::STANDARD.encode(data),
                })
            }
        }
    }
}
