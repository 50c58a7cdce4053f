//! A webhook request's body as messages: one JSON object is one message;
//! `{"data": [...]}` (an object whose only key is `data`, holding an array)
//! is a batch with one message per element, each an object.

use weft_core::change::Row;

/// Most messages one batch may carry.
pub const MAX_BATCH: usize = 10_000;

/// Why a body is not a message or a batch (answered 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// Not JSON at all.
    #[error("the body is not valid JSON: {0}")]
    NotJson(String),
    /// JSON, but not an object.
    #[error(
        "the body must be a JSON object (one message) or {{\"data\": [...]}} (a batch); got {0}"
    )]
    NotObject(&'static str),
    /// A batch element is not an object.
    #[error("data[{index}] must be a JSON object; got {kind}")]
    ElementNotObject {
        /// The element's position.
        index: usize,
        /// What it is instead.
        kind: &'static str,
    },
    /// An empty batch.
    #[error("`data` is empty; send at least one message")]
    EmptyBatch,
    /// A batch over [`MAX_BATCH`].
    #[error("`data` holds {0} messages; a batch holds at most {MAX_BATCH}")]
    TooMany(usize),
}

impl BodyError {
    /// The request field the problem is about, for `validation_errors`.
    pub fn field(&self) -> &'static str {
        match self {
            BodyError::ElementNotObject { .. } | BodyError::EmptyBatch | BodyError::TooMany(_) => {
                "data"
            }
            BodyError::NotJson(_) | BodyError::NotObject(_) => "body",
        }
    }
}

/// The records of the messages `body` carries, in order.
pub fn records(body: &[u8]) -> Result<Vec<Row>, BodyError> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| BodyError::NotJson(e.to_string()))?;
    let serde_json::Value::Object(mut object) = value else {
        return Err(BodyError::NotObject(kind(&value)));
    };
    let is_batch = object.len() == 1 && object.get("data").is_some_and(|d| d.is_array());
    if !is_batch {
        return Ok(vec![object]);
    }
    let Some(serde_json::Value::Array(elements)) = object.remove("data") else {
        unreachable!("checked above");
    };
    if elements.is_empty() {
        return Err(BodyError::EmptyBatch);
    }
    if elements.len() > MAX_BATCH {
        return Err(BodyError::TooMany(elements.len()));
    }
    elements
        .into_iter()
        .enumerate()
        .map(|(index, element)| match element {
            serde_json::Value::Object(record) => Ok(record),
            other => Err(BodyError::ElementNotObject {
                index,
                kind: kind(&other),
            }),
        })
        .collect()
}

fn kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_is_one_message_and_data_alone_is_a_batch() {
        let one = records(br#"{"id": 1, "data": [1]}"#).unwrap();
        assert_eq!(
            one.len(),
            1,
            "an object with more than `data` is one message"
        );
        assert_eq!(one[0]["data"], serde_json::json!([1]));
        let batch = records(br#"{"data": [{"id": 1}, {"id": 2}]}"#).unwrap();
        let ids: Vec<_> = batch.iter().map(|r| r["id"].clone()).collect();
        assert_eq!(ids, vec![serde_json::json!(1), serde_json::json!(2)]);
        // Numbers keep their digits.
        let exact = records(br#"{"n": 12345678901234567890.000000001}"#).unwrap();
        assert_eq!(exact[0]["n"].to_string(), "12345678901234567890.000000001");
    }

    #[test]
    fn what_is_not_a_message_is_named() {
        assert!(matches!(records(b"{\"id\": 1"), Err(BodyError::NotJson(_))));
        assert_eq!(records(b"[1]"), Err(BodyError::NotObject("an array")));
        assert_eq!(records(br#"{"data": []}"#), Err(BodyError::EmptyBatch));
        assert_eq!(
            records(br#"{"data": [{"id": 1}, 7]}"#),
            Err(BodyError::ElementNotObject {
                index: 1,
                kind: "a number"
            })
        );
    }
}
