//! Backfills of a sink (see [`weft_pipeline::backfill`]):
//! `POST /api/sinks/{sink}/backfills` with `{"table": "schema.table"}`
//! (or `{"tables": [...] | "all"}`, optionally partial) starts them, `GET` lists them, `GET …/{id}` shows one with its progress,
//! `POST …/{id}/pause` and `…/resume` pause and resume it, `DELETE …/{id}`
//! cancels it.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, ApiState};
use weft_pipeline::backfill::launcher::LaunchError;
use weft_pipeline::backfill::{BackfillLauncher, BackfillScope, RowFilter, TableSelection};
use weft_store::{Backfill, BackfillState};

fn launcher(state: &ApiState, sink: &str) -> Result<BackfillLauncher, ApiError> {
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
        LaunchError::Table(error) | LaunchError::InTable { error, .. } if error.is_transient() => {
            StatusCode::BAD_GATEWAY
        }
        LaunchError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
        LaunchError::WrongState { .. } => StatusCode::CONFLICT,
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    };
    ApiError::new(status, error.to_string())
}

/// The body of `POST …/backfills`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateRequest {
    /// One table, `schema.table`: the answer is that backfill.
    table: Option<String>,
    /// A list of tables, or `"all"` for every table the sink receives: the
    /// answer is `{"data": [...]}`.
    tables: Option<Value>,
    sort_column: Option<String>,
    /// A string or a number.
    start_position: Option<Value>,
    filter: Option<RowFilter>,
}

/// `POST …/backfills`: `{"table": "public.orders"}`, or `{"tables": [...]}`
/// or `{"tables": "all"}`, each optionally partial (`sort_column`,
/// `start_position`, `filter`).
#[utoipa::path(post, path = "/api/sinks/{name}/backfills", tag = "backfills", summary = "Start backfills", params(("name" = String, Path, description = "The sink")), request_body(content = Object, content_type = "application/json"), responses((status = 201, description = "Started", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn create(
    State(state): State<ApiState>,
    Path(sink): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let launcher = launcher(&state, &sink)?;
    let request: CreateRequest =
        serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(&body))
            .map_err(|e| {
                let field = e.path().to_string();
                ApiError::bad_param(
                    if field == "." { "body" } else { &field },
                    format!(
                        "{e}; send {{\"table\": \"schema.table\"}} or {{\"tables\": [...] | \"all\"}}, with optional \"sort_column\", \"start_position\" and \"filter\": {{\"where\": \"...\", \"params\": [...]}}"
                    ),
                )
            })?;
    let start_position = match &request.start_position {
        None => None,
        Some(value) => Some(BackfillScope::position_text(value).ok_or_else(|| {
            ApiError::bad_param(
                "start_position",
                "`start_position` is a string or a number: the first sort_column value to read",
            )
        })?),
    };
    let scope = BackfillScope {
        sort_column: request.sort_column,
        start_position,
        filter: request.filter,
    };
    let (tables, single) = match (request.table, request.tables) {
        (Some(table), None) => (TableSelection::Tables(vec![table]), true),
        (None, Some(Value::String(all))) if all == "all" => (TableSelection::All, false),
        (None, Some(Value::Array(list)))
            if !list.is_empty() && list.iter().all(Value::is_string) =>
        {
            let names = list
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            (TableSelection::Tables(names), false)
        }
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_param(
                "tables",
                "give either `table` or `tables`, not both",
            ));
        }
        (None, None) => {
            return Err(ApiError::bad_param(
                "table",
                "`table` is required: the schema-qualified table to backfill, e.g. \"public.orders\" (or `tables`: a list, or \"all\" for every table of the sink)",
            ));
        }
        (None, Some(_)) => {
            return Err(ApiError::bad_param(
                "tables",
                "`tables` is a non-empty list of \"schema.table\" names, or \"all\"",
            ));
        }
    };
    let created = launcher
        .create(&sink, tables, scope)
        .await
        .map_err(launch_error)?;
    let body = if single {
        render(&created[0])
    } else {
        json!({"data": created.iter().map(render).collect::<Vec<_>>()})
    };
    Ok((StatusCode::CREATED, Json(body)))
}

/// `GET …/backfills`: `{"data": [...]}`, oldest first.
#[utoipa::path(get, path = "/api/sinks/{name}/backfills", tag = "backfills", summary = "A sink's backfills", params(("name" = String, Path, description = "The sink")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn list(
    State(state): State<ApiState>,
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
#[utoipa::path(get, path = "/api/sinks/{name}/backfills/{id}", tag = "backfills", summary = "One backfill", params(("name" = String, Path, description = "The sink"), ("id" = String, Path, description = "The backfill")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn get(
    State(state): State<ApiState>,
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
#[utoipa::path(post, path = "/api/sinks/{name}/backfills/{id}/pause", tag = "backfills", summary = "Pause a backfill", params(("name" = String, Path, description = "The sink"), ("id" = String, Path, description = "The backfill")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn pause(
    State(state): State<ApiState>,
    Path((sink, id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let launcher = launcher(&state, &sink)?;
    let backfill = launcher
        .pause_or_resume(&sink, &id, false)
        .map_err(launch_error)?;
    Ok(Json(render(&backfill)))
}

/// `POST …/backfills/{id}/resume`.
#[utoipa::path(post, path = "/api/sinks/{name}/backfills/{id}/resume", tag = "backfills", summary = "Resume a backfill", params(("name" = String, Path, description = "The sink"), ("id" = String, Path, description = "The backfill")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn resume(
    State(state): State<ApiState>,
    Path((sink, id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let launcher = launcher(&state, &sink)?;
    let backfill = launcher
        .pause_or_resume(&sink, &id, true)
        .map_err(launch_error)?;
    Ok(Json(render(&backfill)))
}

/// `DELETE …/backfills/{id}`: cancels it.
#[utoipa::path(delete, path = "/api/sinks/{name}/backfills/{id}", tag = "backfills", summary = "Cancel a backfill", params(("name" = String, Path, description = "The sink"), ("id" = String, Path, description = "The backfill")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn cancel(
    State(state): State<ApiState>,
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
        "kind": backfill.scope.kind(),
        "sort_column": backfill.scope.sort_column,
        "start_position": backfill.scope.start_position,
        "filter": backfill.scope.filter,
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
