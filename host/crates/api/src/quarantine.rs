//! A sink's quarantine (see [`weft_pipeline::breaker`]):
//! `GET /api/sinks/{sink}/quarantine` shows it, `DELETE` lifts it, after
//! which the sink's held changes run through its functions again, in order.

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::dead_letters::known;
use super::{ApiError, ApiState};

/// `GET …/quarantine`: `{"quarantined": bool, "quarantine": {...} | null}`.
#[utoipa::path(get, path = "/api/sinks/{name}/quarantine", tag = "sinks", summary = "A sink's quarantine", params(("name" = String, Path, description = "The sink")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn get(
    State(state): State<ApiState>,
    Path(sink): Path<String>,
) -> Result<Json<Value>, ApiError> {
    known(&state, &sink)?;
    let quarantine = state.breaker(&sink).and_then(|b| b.quarantine());
    Ok(Json(json!({
        "quarantined": quarantine.is_some(),
        "quarantine": quarantine,
    })))
}

/// `DELETE …/quarantine`: lifts it; `{"lifted": {...} | null}`.
#[utoipa::path(delete, path = "/api/sinks/{name}/quarantine", tag = "sinks", summary = "Release a quarantined sink", params(("name" = String, Path, description = "The sink")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn reset(
    State(state): State<ApiState>,
    Path(sink): Path<String>,
) -> Result<Json<Value>, ApiError> {
    known(&state, &sink)?;
    let lifted = state.breaker(&sink).and_then(|b| b.reset());
    if lifted.is_some() {
        tracing::info!(%sink, "quarantine lifted through the API; held changes go through the functions again");
    }
    Ok(Json(json!({ "lifted": lifted })))
}
