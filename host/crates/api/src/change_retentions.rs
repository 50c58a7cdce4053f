//! Change retentions, read-only: `GET /api/change_retentions` lists them
//! and `GET /api/change_retentions/{name}` shows one, each with the health
//! checks of the sink that runs it (delivery, retention rounds). They are
//! configured in YAML (`change_retentions:`); see `docs/change_retention.md`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::{ApiError, ApiState};
use weft_core::health::EntityKind;
use weft_sinks::config::change_retention::ChangeRetentionConfig;

/// `GET /api/change_retentions`: `{"data": [...]}`.
#[utoipa::path(get, path = "/api/change_retentions", tag = "change_retentions", summary = "List the change retentions", responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn list(State(state): State<ApiState>) -> Json<Value> {
    let data: Vec<Value> = state.change_retentions().iter().map(describe).collect();
    Json(json!({ "data": data }))
}

/// `GET /api/change_retentions/{name}`.
#[utoipa::path(get, path = "/api/change_retentions/{name}", tag = "change_retentions", summary = "One change retention", params(("name" = String, Path, description = "The change retention")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn get(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    state
        .change_retentions()
        .iter()
        .find(|r| r.name == name)
        .map(|r| Json(describe(r)))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!(
                    "no change retention named {name:?}; GET /api/change_retentions lists them"
                ),
            )
        })
}

/// A change retention in Sequin's keys, plus its sink's health checks.
fn describe(retention: &ChangeRetentionConfig) -> Value {
    json!({
        "name": retention.name,
        "source_database": retention.source_database,
        "source_table_schema": retention.source_table_schema,
        "source_table_name": retention.source_table_name,
        "destination_database": retention.destination_database,
        "destination_table_schema": retention.destination_table_schema,
        "destination_table_name": retention.destination_table_name,
        "actions": retention.actions.iter().map(|a| a.as_str()).collect::<Vec<_>>(),
        "filters": retention.filters,
        "filter": retention.filter,
        "create_table": retention.create_table,
        "retain_for_seconds": retention.retain_for.map(|age| age.as_secs()),
        "health": weft_core::health::global().checks(EntityKind::Sink, &retention.name),
    })
}
