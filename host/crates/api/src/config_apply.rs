//! `POST /api/config/plan` and `POST /api/config/apply`, taking
//! `{"yaml": "..."}` as Sequin's do.
//!
//! Plan validates the proposed config exactly as `weft run` would and
//! answers the changes it makes (see [`weft_sinks::config::plan`]). Apply does
//! the same and, when something changes, has the running weft take it (see
//! [`super::Controller::apply`]): the config file is written (a new file
//! renamed over the old, so a crash leaves one or the other), and the
//! change is made in place where it can be, else by restarting weft's
//! pipelines in-process with it. Either way in-flight deliveries finish and
//! every stored message and slot position carries over, so nothing is lost
//! or reordered. Applying the config that runs changes nothing
//! (`"applied": false`).
//!
//! A config that changes only `databases:`, `functions:`, `sinks:`,
//! `http_endpoints:`, `accounts:` and `api_tokens:` entries is applied
//! without a restart, while every sink it does not touch keeps flowing: the
//! answer says `"restarted": false`, names the swapped functions under
//! `"hot_swapped"`, the sinks under `"sinks"` and the database feeds under
//! `"databases"`.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, ApiState};

/// The request body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ConfigBody {
    /// The proposed config, sequin.yml layout.
    yaml: String,
}

/// `POST /api/config/plan`: `{"changes": [...]}`.
#[utoipa::path(post, path = "/api/config/plan", tag = "config", summary = "The changes a config would make", request_body = ConfigBody, responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn plan_config(
    State(state): State<ApiState>,
    Json(body): Json<ConfigBody>,
) -> Result<Json<Value>, ApiError> {
    let changes = state.controller()?.plan(body.yaml).await?;
    Ok(Json(json!({ "changes": changes })))
}

/// `POST /api/config/apply`: `{"changes": [...], "applied": bool}`.
#[utoipa::path(post, path = "/api/config/apply", tag = "config", summary = "Apply a config (hot swap when only functions change)", request_body = ConfigBody, responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn apply_config(
    State(state): State<ApiState>,
    Json(body): Json<ConfigBody>,
) -> Result<Json<Value>, ApiError> {
    let applied = state.apply(move |_| Ok(body.yaml)).await?;
    Ok(Json(json!(applied)))
}
