//! `POST /api/webhook_sources/{name}`: accepts messages for a webhook source
//! (see [`weft_pipeline::webhook_source`]). Answers 202 once the request is stored
//! (200 for a duplicate `Idempotency-Key`), 404 for an unknown source, 401
//! for a missing or wrong token or signature, 413 for a body over the
//! source's `max_body_bytes`, 400 for a body that is not a message or a
//! batch. Nothing is stored unless the answer is 2xx.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::json;
use tracing::{debug, error};

use super::{ApiError, ApiState};
use weft_pipeline::webhook_source::{auth, body};
use weft_store::Acceptance;

/// The header that makes a retried request a duplicate.
const IDEMPOTENCY_HEADER: &str = "idempotency-key";
/// Longest `Idempotency-Key` accepted.
const MAX_IDEMPOTENCY_KEY: usize = 255;

/// `POST /api/webhook_sources/{name}`.
#[utoipa::path(post, path = "/api/webhook_sources/{name}", tag = "webhook_sources", summary = "Post messages to a webhook source", params(("name" = String, Path, description = "The webhook source")), request_body(content = Object, content_type = "application/json"), responses((status = 202, description = "Accepted", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn post(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    request_body: Body,
) -> Result<Response, ApiError> {
    let Some(ingress) = state.webhook_source(&name) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "no webhook source named {name:?}; configured webhook_sources: {:?}",
                state.webhook_source_names()
            ),
        ));
    };
    let outcome = |outcome: &'static str| {
        metrics::counter!(weft_core::metrics::WEBHOOK_REQUESTS, "source" => name.clone(), "outcome" => outcome)
            .increment(1);
    };
    let source = ingress.config();
    let refuse = |failure: auth::AuthFailure| {
        outcome("unauthorized");
        debug!(source = %name, %failure, "webhook request refused");
        ApiError::new(StatusCode::UNAUTHORIZED, failure.to_string())
    };
    auth::verify_headers(&source.auth, &headers).map_err(refuse)?;
    let bytes = match read_limited(request_body, &headers, source.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(Unread::TooLarge) => {
            outcome("too_large");
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the body is larger than this webhook source's max_body_bytes ({} bytes); send smaller batches",
                    source.max_body_bytes
                ),
            ));
        }
        Err(Unread::Broken(problem)) => {
            outcome("malformed");
            return Err(ApiError::bad_param(
                "body",
                format!("the body could not be read: {problem}"),
            ));
        }
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    auth::verify_body(&source.auth, &headers, &bytes, now).map_err(refuse)?;
    let key = idempotency_key(&headers).inspect_err(|_| outcome("malformed"))?;
    let records = body::records(&bytes).map_err(|problem| {
        outcome("malformed");
        ApiError::bad_param(problem.field(), problem.to_string())
    })?;
    let count = records.len();
    let request_id = uuid::Uuid::new_v4().to_string();
    let (store, source_name, id, retention) = (
        state.store.clone(),
        name.clone(),
        request_id.clone(),
        source.idempotency_key_retention_ms,
    );
    let accepted = tokio::task::spawn_blocking(move || {
        store.accept_webhook(&source_name, &id, &records, key.as_deref(), retention)
    })
    .await;
    match accepted {
        Ok(Ok(Acceptance::Stored { seq })) => {
            outcome("accepted");
            ingress.wake();
            debug!(source = %name, seq, messages = count, "webhook request accepted");
            Ok((
                StatusCode::ACCEPTED,
                Json(json!({"accepted": count, "duplicate": false, "request_id": request_id})),
            )
                .into_response())
        }
        Ok(Ok(Acceptance::Duplicate { messages })) => {
            outcome("duplicate");
            Ok((
                StatusCode::OK,
                Json(json!({"accepted": messages, "duplicate": true})),
            )
                .into_response())
        }
        Ok(Err(failure)) => {
            outcome("error");
            error!(source = %name, error = %failure, "cannot store a webhook request");
            Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("store: {failure}; nothing was stored, retry the request"),
            )
            .with_retry_after(1))
        }
        Err(panicked) => {
            outcome("error");
            Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the store call panicked: {panicked}; retry the request"),
            ))
        }
    }
}

/// The request's `Idempotency-Key`, if it sent one that is usable.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_HEADER) else {
        return Ok(None);
    };
    let bad = || {
        ApiError::bad_param(
            "Idempotency-Key",
            format!(
                "must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters, e.g. a UUID; leave the header out to send no key"
            ),
        )
    };
    let key = value.to_str().map_err(|_| bad())?.trim();
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY {
        return Err(bad());
    }
    Ok(Some(key.to_string()))
}

/// Why a body was not read.
pub(super) enum Unread {
    /// Longer than the limit.
    TooLarge,
    /// The upload broke off or was not valid HTTP framing.
    Broken(axum::Error),
}

/// The whole body, unless it is longer than `limit` bytes (known from
/// `Content-Length` before reading, else found while reading).
pub(super) async fn read_limited(
    body: Body,
    headers: &HeaderMap,
    limit: u64,
) -> Result<Vec<u8>, Unread> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(Unread::TooLarge);
    }
    let mut bytes = Vec::with_capacity(declared.unwrap_or(0) as usize);
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(Unread::Broken)?;
        if (bytes.len() + chunk.len()) as u64 > limit {
            return Err(Unread::TooLarge);
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}
