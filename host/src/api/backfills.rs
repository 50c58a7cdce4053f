//! Backfills of a sink (see [`crate::backfill`]):
//! `POST /api/sinks/{sink}/backfills` with `{"table": "schema.table"}`
//! starts one, `GET` lists them, `GET …/{id}` shows one with its progress,
//! `POST …/{id}/pause` and `…/resume` pause and resume it, `DELETE …/{id}`
//! cancels it.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use super::{ApiError, PullApiState};
use crate::backfill::BackfillLauncher;
use crate::backfill::launcher::LaunchError;
use crate::store::{Backfill, BackfillState};

fn launcher(state: &PullApiState, sink: &str) -> Result<BackfillLauncher, ApiError> {
    state
        .backfills()
        .filter(|l| l.knows_sink(sink))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no sink named {sink:?}; check the sink's name in the config"),
            )
        })
}

fn launch_error(error: LaunchError) -> ApiError {
    let status = match &error {
        LaunchError::UnknownSink(_) | LaunchError::UnknownBackfill { .. } => StatusCode::NOT_FOUND,
        LaunchError::Table(crate::backfill::runner::BackfillError::Database(_)) => {
            StatusCode::BAD_GATEWAY
        }
        LaunchError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
        LaunchError::WrongState { .. } => StatusCode::CONFLICT,
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    };
    ApiError::new(status, error.to_string())
}

/// `POST …/backfills`: `{"table": "public.orders"}`.
pub(super) async fn create(
    State(state): State<PullApiState>,
    Path(sink): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let launcher = launcher(&state, &sink)?;
    let request: Value = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_param(
            "body",
            format!("the body is not JSON ({e}); send {{\"table\": \"schema.table\"}}"),
        )
    })?;
    let table = request
        .get("table")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_param("table", "`table` is required: the schema-qualified table to backfill, e.g. \"public.orders\""))?;
    let backfill = launcher.create(&sink, table).await.map_err(launch_error)?;
    Ok((StatusCode::CREATED, Json(render(&backfill))))
}

/// `GET …/backfills`: `{"data": [...]}`, oldest first.
pub(super) async fn list(
    State(state): State<PullApiState>,
    Path(sink): Path<String>,
) -> Result<Json<Value>, ApiError> {
    launcher(&state, &sink)?;
    let store = state.store.clone();
    let all = tokio::task::spawn_blocking(move || store.backfills(Some(&sink)))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(Json(
        json!({"data": all.iter().map(render).collect::<Vec<_>>()}),
    ))
}

/// `GET …/backfills/{id}`.
pub(super) async fn get(
    State(state): State<PullApiState>,
    Path((sink, id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    launcher(&state, &sink)?;
    let found = state
        .store
        .backfill(&id)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .filter(|b| b.sink == sink)
        .ok_or_else(|| launch_error(LaunchError::UnknownBackfill { sink, id }))?;
    Ok(Json(render(&found)))
}

/// `POST …/backfills/{id}/pause`.
pub(super) async fn pause(
    State(state): State<PullApiState>,
    Path((sink, id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let launcher = launcher(&state, &sink)?;
    let backfill = launcher
        .pause_or_resume(&sink, &id, false)
        .map_err(launch_error)?;
    Ok(Json(render(&backfill)))
}

/// `POST …/backfills/{id}/resume`.
pub(super) async fn resume(
    State(state): State<PullApiState>,
    Path((sink, id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let launcher = launcher(&state, &sink)?;
    let backfill = launcher
        .pause_or_resume(&sink, &id, true)
        .map_err(launch_error)?;
    Ok(Json(render(&backfill)))
}

/// `DELETE …/backfills/{id}`: cancels it.
pub(super) async fn cancel(
    State(state): State<PullApiState>,
    Path((sink, id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let launcher = launcher(&state, &sink)?;
    let backfill = launcher.cancel(&sink, &id).map_err(launch_error)?;
    Ok(Json(render(&backfill)))
}

fn iso(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A backfill with its progress: rows per second since it started and,
/// while active, the estimated seconds left.
fn render(backfill: &Backfill) -> Value {
    let end = backfill.completed_at.unwrap_or(backfill.updated_at);
    let seconds = ((end - backfill.created_at) as f64 / 1000.0).max(0.001);
    let rate = backfill.rows_processed as f64 / seconds;
    let eta = match (backfill.state, backfill.rows_estimated) {
        (BackfillState::Active, Some(total)) if rate > 0.0 => {
            Some((total.saturating_sub(backfill.rows_processed) as f64 / rate).round())
        }
        _ => None,
    };
    json!({
        "id": backfill.id,
        "sink": backfill.sink,
        "table": format!("{}.{}", backfill.table_schema, backfill.table_name),
        "state": backfill.state,
        "rows_processed_count": backfill.rows_processed,
        "rows_initial_count": backfill.rows_estimated,
        "rows_per_second": (rate * 10.0).round() / 10.0,
        "eta_seconds": eta,
        "cursor": backfill.cursor,
        "last_error": backfill.last_error,
        "inserted_at": iso(backfill.created_at),
        "updated_at": iso(backfill.updated_at),
        "completed_at": backfill.completed_at.map(iso),
    })
}
