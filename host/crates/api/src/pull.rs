//! Handlers of the pull API: receive, ack and nack.

use std::collections::HashMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::{ApiError, ApiState, params};
use weft_sinks::sequin_stream::{PullError, SequinStream};
use weft_store::{AckId, AckOutcome};

/// `GET|POST …/receive`: `{"data": [{"ack_id": "…", "data": {message}}]}`.
#[utoipa::path(method(get, post), path = "/api/http_pull_consumers/{name}/receive", tag = "pull", summary = "Receive messages (also under /api/sequin_streams/{name})", params(("name" = String, Path, description = "The sink"), ("batch_size" = Option<u32>, Query, description = "1 to 1000"), ("wait_for" = Option<u64>, Query, description = "Long-poll ms, 500 to 300000")), request_body(content = Option<Object>, content_type = "application/json"), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn receive(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
    body: Bytes,
) -> Result<Json<Received>, ApiError> {
    let stream = sink(&state, &name)?;
    let Query(query) = query.map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("invalid query string: {}", e.body_text()),
        )
    })?;
    let query = query
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let params = params::receive_params(query, &body)?;
    let delivered = stream
        .receive(params.batch_size, params.wait_for, &state.shutdown)
        .await
        .map_err(|e| pull_error(&name, e))?;
    Ok(Json(Received {
        data: delivered
            .into_iter()
            .map(|d| ReceivedMessage {
                ack_id: d.ack_id,
                data: d.payload,
            })
            .collect(),
    }))
}

/// The answer of `receive`.
#[derive(serde::Serialize)]
pub(super) struct Received {
    data: Vec<ReceivedMessage>,
}

/// One message of a `receive` answer.
#[derive(serde::Serialize)]
struct ReceivedMessage {
    ack_id: AckId,
    /// The message JSON as stored.
    data: Box<serde_json::value::RawValue>,
}

/// `POST …/ack` with `{"ack_ids": […]}`: deletes the acked messages.
#[utoipa::path(post, path = "/api/http_pull_consumers/{name}/ack", tag = "pull", summary = "Ack messages", params(("name" = String, Path, description = "The sink")), request_body = AckIds, responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn ack(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let stream = sink(&state, &name)?;
    let ids = params::ack_ids(&body)?;
    let outcome = stream.ack(ids).await.map_err(|e| pull_error(&name, e))?;
    settled(&stream, "acked", outcome)
}

/// `POST …/nack` with `{"ack_ids": […]}`: makes the messages visible again.
#[utoipa::path(post, path = "/api/http_pull_consumers/{name}/nack", tag = "pull", summary = "Nack messages", params(("name" = String, Path, description = "The sink")), request_body = AckIds, responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn nack(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let stream = sink(&state, &name)?;
    let ids = params::ack_ids(&body)?;
    let outcome = stream.nack(ids).await.map_err(|e| pull_error(&name, e))?;
    settled(&stream, "nacked", outcome)
}

fn sink(state: &ApiState, name: &str) -> Result<SequinStream, ApiError> {
    state.sink(name).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no Sequin Stream sink named {name:?} (or with that consumer id); check the name of a sink of type sequin_stream in the config"),
        )
    })
}

/// `{"success": true}`, or 422 listing the ack ids that matched nothing
/// (the others were processed).
fn settled(
    stream: &SequinStream,
    verb: &str,
    outcome: AckOutcome,
) -> Result<Json<Value>, ApiError> {
    if outcome.unknown.is_empty() {
        return Ok(Json(json!({"success": true})));
    }
    let unknown: Vec<String> = outcome.unknown.iter().map(AckId::to_string).collect();
    let problems = unknown
        .iter()
        .map(|id| format!("{id} matches no message in flight"))
        .collect();
    Err(ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        format!(
            "{} ack id(s) match no message in flight for sink {:?} and were ignored; the other {} message(s) were {verb}. \
             An ack id is void once its message is acked or nacked, or handed out again after the visibility timeout \
             (ack_wait_ms = {}); such messages will be or were delivered again.",
            unknown.len(),
            stream.name(),
            outcome.processed,
            stream.settings().ack_wait.as_millis()
        ),
    )
    .with_validation("ack_ids", problems)
    .with_field("unknown_ack_ids", json!(unknown))
    .with_field("processed", json!(outcome.processed)))
}

fn pull_error(name: &str, error: PullError) -> ApiError {
    match error {
        PullError::TooManyWaiting { .. } => {
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, error.to_string()).with_retry_after(1)
        }
        PullError::Store(_) | PullError::Panicked { .. } => {
            tracing::error!(sink = name, %error, "pull API request failed");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("{error}; nothing was lost, retry the request"),
            )
        }
    }
}

/// The body of ack and nack, for the OpenAPI document.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // only its schema is used
pub(super) struct AckIds {
    /// The ack ids receive handed out (UUIDs), 1 to 10,000.
    ack_ids: Vec<String>,
}
