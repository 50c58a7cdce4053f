//! Dead letters of a sink: list, inspect, replay, discard.
//!
//! `GET /api/sinks/{sink}/dead_letters?after=ID&limit=N`,
//! `GET|DELETE /api/sinks/{sink}/dead_letters/{id}`,
//! `POST /api/sinks/{sink}/dead_letters/{id}/replay` and
//! `POST /api/sinks/{sink}/dead_letters/replay` (all, or `{"ids": [...]}`).

use std::collections::HashMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use super::{ApiError, ApiState};
use weft_store::{DeadLetter, Store, StoreError};

const DEFAULT_LIMIT: u32 = 100;
const MAX_LIMIT: u32 = 1000;

/// `GET …/dead_letters`: `{"data": [dead letter, ...], "count": N}`, oldest
/// first; page with `after=<last id seen>`.
#[utoipa::path(get, path = "/api/sinks/{name}/dead_letters", tag = "dead_letters", summary = "A sink's dead letters", params(("name" = String, Path, description = "The sink"), ("after" = Option<i64>, Query, description = "Page after this id"), ("limit" = Option<u32>, Query, description = "At most this many (1 to 1000)")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    Path(sink): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    known(&state, &sink)?;
    let after = int_param(&query, "after", 0, 0, i64::MAX)?;
    let limit = int_param(&query, "limit", DEFAULT_LIMIT.into(), 1, MAX_LIMIT.into())? as u32;
    let (letters, count) = blocking(&state, &sink, move |store, sink| {
        Ok((
            store.dead_letters(sink, after, limit)?,
            store.dead_letter_count(sink)?,
        ))
    })
    .await?;
    let data: Vec<Value> = letters.iter().map(|l| render(&sink, l)).collect();
    Ok(Json(json!({"data": data, "count": count})))
}

/// `GET …/dead_letters/{id}`.
#[utoipa::path(get, path = "/api/sinks/{name}/dead_letters/{id}", tag = "dead_letters", summary = "One dead letter", params(("name" = String, Path, description = "The sink"), ("id" = String, Path, description = "The dead letter")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn get(
    State(state): State<ApiState>,
    Path((sink, id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    known(&state, &sink)?;
    let id = letter_id(&id)?;
    let letter = blocking(&state, &sink, move |store, sink| {
        store.dead_letter_by_id(sink, id)
    })
    .await?
    .ok_or_else(|| missing(&sink, id))?;
    Ok(Json(render(&sink, &letter)))
}

/// `POST …/dead_letters/{id}/replay`: back in line for delivery.
#[utoipa::path(post, path = "/api/sinks/{name}/dead_letters/{id}/replay", tag = "dead_letters", summary = "Replay one dead letter", params(("name" = String, Path, description = "The sink"), ("id" = String, Path, description = "The dead letter")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn replay_one(
    State(state): State<ApiState>,
    Path((sink, id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    known(&state, &sink)?;
    let id = letter_id(&id)?;
    let replayed = blocking(&state, &sink, move |store, sink| {
        store.replay_dead_letters(sink, Some(&[id]))
    })
    .await?;
    if replayed.is_empty() {
        return Err(missing(&sink, id));
    }
    state.wake(&sink);
    Ok(Json(json!({"success": true, "replayed": replayed})))
}

/// `POST …/dead_letters/replay`: replays the dead letters listed in
/// `{"ids": [...]}`, or all of them with no body.
#[utoipa::path(post, path = "/api/sinks/{name}/dead_letters/replay", tag = "dead_letters", summary = "Replay dead letters (the listed ids, or all)", params(("name" = String, Path, description = "The sink")), request_body(content = Option<Object>, content_type = "application/json"), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn replay_many(
    State(state): State<ApiState>,
    Path(sink): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    known(&state, &sink)?;
    let ids = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let parsed: Value = serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad_param(
                "ids",
                format!(
                    "the body is not JSON ({e}); send {{\"ids\": [1, 2]}} or no body to replay all"
                ),
            )
        })?;
        let ids = parsed
            .get("ids")
            .and_then(Value::as_array)
            .and_then(|ids| ids.iter().map(Value::as_i64).collect::<Option<Vec<i64>>>())
            .ok_or_else(|| {
                ApiError::bad_param(
                    "ids",
                    "expected {\"ids\": [dead letter id, ...]} with integer ids",
                )
            })?;
        Some(ids)
    };
    let replayed = blocking(&state, &sink, move |store, sink| {
        store.replay_dead_letters(sink, ids.as_deref())
    })
    .await?;
    if !replayed.is_empty() {
        state.wake(&sink);
    }
    Ok(Json(json!({"success": true, "replayed": replayed})))
}

/// `DELETE …/dead_letters/{id}`: gone for good.
#[utoipa::path(delete, path = "/api/sinks/{name}/dead_letters/{id}", tag = "dead_letters", summary = "Discard a dead letter", params(("name" = String, Path, description = "The sink"), ("id" = String, Path, description = "The dead letter")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn discard(
    State(state): State<ApiState>,
    Path((sink, id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    known(&state, &sink)?;
    let id = letter_id(&id)?;
    let deleted = blocking(&state, &sink, move |store, sink| {
        store.discard_dead_letter(sink, id)
    })
    .await?;
    if !deleted {
        return Err(missing(&sink, id));
    }
    Ok(Json(json!({"success": true})))
}

fn render(sink: &str, letter: &DeadLetter) -> Value {
    json!({
        "id": letter.id,
        "sink": sink,
        "idempotency_key": letter.idempotency_key,
        "commit_lsn": letter.commit_lsn,
        "commit_idx": letter.commit_idx,
        "group_id": letter.group_id,
        "attempts": letter.attempts,
        "last_error": letter.last_error,
        "first_attempt_at": letter.first_attempt_at.map(iso),
        "last_attempt_at": letter.last_attempt_at.map(iso),
        "dead_at": iso(letter.dead_at),
        "stage": letter.stage.as_str(),
        "message": letter.payload.clone().into_json_view(),
        "route": letter.route,
    })
}

fn iso(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub(super) fn known(state: &ApiState, sink: &str) -> Result<(), ApiError> {
    if state.knows_sink(sink) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no sink named {sink:?}; check the sink's name in the config"),
        ))
    }
}

fn letter_id(text: &str) -> Result<i64, ApiError> {
    text.parse::<i64>().map_err(|_| {
        ApiError::bad_param(
            "id",
            format!("dead letter id {text:?} is not an integer; ids come from the list"),
        )
    })
}

fn missing(sink: &str, id: i64) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "sink {sink:?} has no dead letter {id}; it may have been replayed or discarded already"
        ),
    )
}

fn int_param(
    query: &HashMap<String, String>,
    name: &str,
    default: i64,
    min: i64,
    max: i64,
) -> Result<i64, ApiError> {
    let Some(text) = query.get(name) else {
        return Ok(default);
    };
    match text.parse::<i64>() {
        Ok(value) if (min..=max).contains(&value) => Ok(value),
        _ => Err(ApiError::bad_param(
            name,
            format!("{name} must be an integer from {min} to {max}, got {text:?}"),
        )),
    }
}

async fn blocking<T, F>(state: &ApiState, sink: &str, call: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Store, &str) -> Result<T, StoreError> + Send + 'static,
{
    let store = state.store.clone();
    let name = sink.to_string();
    let result = tokio::task::spawn_blocking(move || call(&store, &name)).await;
    match result {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => {
            tracing::error!(sink, %error, "dead letter request failed");
            Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("store: {error}; nothing was changed, retry the request"),
            ))
        }
        Err(error) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the store call panicked: {error}; retry the request"),
        )),
    }
}
