//! Parsing and validating pull API parameters, with errors that name the
//! parameter and its allowed range.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{Map, Value};

use super::ApiError;
use weft_store::AckId;

/// The largest `batch_size` a receive accepts.
pub(super) const MAX_BATCH_SIZE: u32 = 1000;
/// The allowed `wait_for`, in milliseconds.
pub(super) const WAIT_FOR_MS: std::ops::RangeInclusive<u64> = 500..=300_000;
/// The most ack ids one ack or nack accepts.
pub(super) const MAX_ACK_IDS: usize = 10_000;

/// What a receive asks for.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ReceiveParams {
    pub batch_size: u32,
    pub wait_for: Option<Duration>,
}

/// Reads `batch_size` (alias `max_batch_size`) and `wait_for` from the
/// query string and the JSON body (if any). The body wins over the query for
/// the same name, and `batch_size` wins over its alias `max_batch_size`.
pub(super) fn receive_params(
    query: Map<String, Value>,
    body: &[u8],
) -> Result<ReceiveParams, ApiError> {
    let mut params = query;
    if let Some(body) = json_object(body)? {
        params.extend(body);
    }
    let batch_size = ["batch_size", "max_batch_size"]
        .into_iter()
        .find_map(|name| params.get(name).map(|value| (name, value)))
        .map(|(name, value)| batch_size(name, value))
        .transpose()?
        .unwrap_or(1);
    let wait_for = params.get("wait_for").map(wait_for).transpose()?;
    Ok(ReceiveParams {
        batch_size,
        wait_for,
    })
}

/// Reads the `ack_ids` of an ack or nack body, without duplicates.
pub(super) fn ack_ids(body: &[u8]) -> Result<Vec<AckId>, ApiError> {
    const SHAPE: &str = "`ack_ids` must be a non-empty list of ack id strings (UUIDs) as returned by receive, e.g. {\"ack_ids\": [\"…\"]}";
    let body = json_object(body)?.ok_or_else(|| ApiError::bad_param("ack_ids", SHAPE))?;
    let list = match body.get("ack_ids") {
        Some(Value::Array(list)) if !list.is_empty() => list,
        _ => return Err(ApiError::bad_param("ack_ids", SHAPE)),
    };
    if list.len() > MAX_ACK_IDS {
        return Err(ApiError::bad_param(
            "ack_ids",
            format!(
                "`ack_ids` holds {} ids but at most {MAX_ACK_IDS} are accepted per request; split it",
                list.len()
            ),
        ));
    }
    let mut seen = HashSet::new();
    let mut ids = Vec::with_capacity(list.len());
    let mut invalid = Vec::new();
    for item in list {
        match item.as_str().map(str::parse::<AckId>) {
            Some(Ok(id)) => {
                if seen.insert(id) {
                    ids.push(id);
                }
            }
            _ => invalid.push(format!("{item} is not an ack id (a UUID string)")),
        }
    }
    if !invalid.is_empty() {
        return Err(ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            format!(
                "{} of the `ack_ids` are not valid ack ids; nothing was processed. {SHAPE}",
                invalid.len()
            ),
        )
        .with_validation("ack_ids", invalid));
    }
    Ok(ids)
}

/// An empty body is `None`; anything else must be a JSON object.
fn json_object(body: &[u8]) -> Result<Option<Map<String, Value>>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(Some(map)),
        Ok(_) => Err(ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "the request body must be a JSON object",
        )),
        Err(e) => Err(ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            format!("the request body is not valid JSON: {e}"),
        )),
    }
}

fn batch_size(name: &str, value: &Value) -> Result<u32, ApiError> {
    integer(value)
        .filter(|n| (1..=u64::from(MAX_BATCH_SIZE)).contains(n))
        .map(|n| n as u32)
        .ok_or_else(|| {
            ApiError::bad_param(
                name,
                format!(
                    "invalid `{name}` {value}: must be an integer between 1 and {MAX_BATCH_SIZE}"
                ),
            )
        })
}

fn wait_for(value: &Value) -> Result<Duration, ApiError> {
    let ms = match value {
        Value::String(text) => duration_ms(text.trim()),
        other => integer(other),
    };
    ms.filter(|ms| WAIT_FOR_MS.contains(ms))
        .map(Duration::from_millis)
        .ok_or_else(|| {
            ApiError::bad_param(
                "wait_for",
                format!(
                    "invalid `wait_for` {value}: must be between {} and {} milliseconds, or a duration such as \"60s\", \"5m\" or \"1000ms\"",
                    WAIT_FOR_MS.start(),
                    WAIT_FOR_MS.end()
                ),
            )
        })
}

/// A non-negative integer given as a JSON number or a string of digits.
fn integer(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// `1500`, `1500ms`, `60s`, `5m` or `1h`, in milliseconds.
fn duration_ms(text: &str) -> Option<u64> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let scale = match unit.trim() {
        "" | "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return None,
    };
    number.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn query(pairs: &[(&str, &str)]) -> Map<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect()
    }

    #[test]
    fn receive_params_from_query_body_and_defaults() {
        let none = receive_params(Map::new(), b"").unwrap();
        assert_eq!(
            none,
            ReceiveParams {
                batch_size: 1,
                wait_for: None
            }
        );
        let q = receive_params(query(&[("batch_size", "10"), ("wait_for", "60s")]), b"").unwrap();
        assert_eq!(
            q,
            ReceiveParams {
                batch_size: 10,
                wait_for: Some(Duration::from_secs(60))
            }
        );
        let body = receive_params(
            query(&[("batch_size", "10")]),
            br#"{"max_batch_size": 5, "wait_for": 2500}"#,
        );
        // The body's alias does not override the query's canonical name.
        assert_eq!(
            body.unwrap(),
            ReceiveParams {
                batch_size: 10,
                wait_for: Some(Duration::from_millis(2500))
            }
        );
        let alias = receive_params(
            Map::new(),
            br#"{"max_batch_size": "7", "wait_for": "1000ms"}"#,
        )
        .unwrap();
        assert_eq!(
            alias,
            ReceiveParams {
                batch_size: 7,
                wait_for: Some(Duration::from_secs(1))
            }
        );
        assert_eq!(duration_ms("5m"), Some(300_000));
        assert_eq!(duration_ms("5 parsecs"), None);
    }

    #[test]
    fn receive_params_out_of_range_name_the_param_and_range() {
        for (q, param) in [
            (query(&[("batch_size", "0")]), "batch_size"),
            (query(&[("max_batch_size", "1001")]), "max_batch_size"),
            (query(&[("batch_size", "ten")]), "batch_size"),
            (query(&[("wait_for", "499")]), "wait_for"),
            (query(&[("wait_for", "6m")]), "wait_for"),
            (query(&[("wait_for", "soon")]), "wait_for"),
        ] {
            let err = receive_params(q, b"").unwrap_err();
            let body = format!("{err:?}");
            assert!(body.contains(param), "{body}");
            assert_eq!(err.status(), axum::http::StatusCode::BAD_REQUEST);
        }
        assert!(receive_params(Map::new(), b"[1]").is_err());
    }

    #[test]
    fn ack_ids_are_validated_and_deduplicated() {
        let id = AckId::new();
        let body = json!({"ack_ids": [id.to_string(), id.to_string().to_uppercase()]}).to_string();
        assert_eq!(ack_ids(body.as_bytes()).unwrap(), vec![id]);
        for bad in [
            &b""[..],
            b"{}",
            br#"{"ack_ids": []}"#,
            br#"{"ack_ids": "x"}"#,
            br#"{"ack_ids": ["nope", 3]}"#,
        ] {
            assert_eq!(
                ack_ids(bad).unwrap_err().status(),
                axum::http::StatusCode::BAD_REQUEST
            );
        }
    }
}
