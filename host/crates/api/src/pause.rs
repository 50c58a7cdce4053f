//! `POST /api/sinks/{sink}/pause` and `POST /api/sinks/{sink}/resume` (see
//! [`weft_sinks::pause`]): answer `{"name": ..., "status": "paused" |
//! "active"}`. Both are idempotent.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::dead_letters::known;
use super::{ApiError, ApiState};

/// `POST …/pause`.
#[utoipa::path(post, path = "/api/sinks/{name}/pause", tag = "sinks", summary = "Stop a sink's deliveries", params(("name" = String, Path, description = "The sink")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn pause(
    State(state): State<ApiState>,
    Path(sink): Path<String>,
) -> Result<Json<Value>, ApiError> {
    set(&state, &sink, true).await
}

/// `POST …/resume`.
#[utoipa::path(post, path = "/api/sinks/{name}/resume", tag = "sinks", summary = "Resume a sink's deliveries", params(("name" = String, Path, description = "The sink")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn resume(
    State(state): State<ApiState>,
    Path(sink): Path<String>,
) -> Result<Json<Value>, ApiError> {
    set(&state, &sink, false).await
}

async fn set(state: &ApiState, sink: &str, paused: bool) -> Result<Json<Value>, ApiError> {
    known(state, sink)?;
    let switch = state.pause_switch(sink).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("sink {sink:?} cannot be paused"),
        )
    })?;
    // Durable first: a paused sink must stay paused after a crash.
    let store = state.store.clone();
    let name = sink.to_string();
    tokio::task::spawn_blocking(move || store.set_paused(&name, paused))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    switch.set(paused);
    if !paused {
        state.wake(sink);
    }
    tracing::info!(%sink, paused, "sink {} through the API", if paused { "paused" } else { "resumed" });
    Ok(Json(json!({
        "name": sink,
        "status": if paused { "paused" } else { "active" },
    })))
}
