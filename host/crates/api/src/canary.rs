//! Canary (shadow) versions of a transform, and their promotion:
//!
//! * `POST /api/functions/{name}/shadow` with `{"plugin": "name@version",
//!   "config": {...}}` (`config` optional: the live one by default) runs the
//!   registered version in shadow on every sink using the transform;
//! * `GET …/shadow` reports, per sink, how its payloads differ from the live
//!   ones (counts and the first differing messages); `DELETE …/shadow`
//!   stops it and answers the last report;
//! * `POST …/promote` makes the candidate live through a config apply that
//!   changes only this function (so a hot swap: atomic between two chain
//!   runs, nothing lost or reordered) and stops the shadow run;
//! * `POST …/rollback` restores the function's entry from before the last
//!   promotion the same way.
//!
//! Promotion and rollback edit the function's entry of the config file
//! in place ([`super::config_edit`]); the rest of the file stays as written.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use serde_yaml_ng::Value as Yaml;

use super::config_edit::edit_entry;
use super::{ApiError, ApiState};
use weft_pipeline::hot_swap::{Candidate, FunctionRuntime, SwapError};
use weft_sinks::config::plugin_registry::PluginRef;

/// The body of `POST …/shadow`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ShadowBody {
    /// The candidate: a registered version, `name@version`.
    plugin: String,
    /// Its `config:`; the live function's when absent.
    #[serde(default)]
    config: Option<BTreeMap<String, String>>,
}

/// `POST /api/functions/{name}/shadow`.
#[utoipa::path(post, path = "/api/functions/{name}/shadow", tag = "functions", summary = "Run a candidate version in shadow", params(("name" = String, Path, description = "The function")), request_body = ShadowBody, responses((status = 201, description = "Running in shadow", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn start(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    Json(body): Json<ShadowBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let functions = state.running_functions()?;
    let plugin: PluginRef = body
        .plugin
        .parse()
        .map_err(|problem: String| ApiError::bad_param("plugin", problem))?;
    let candidate = Candidate {
        plugin: plugin.clone(),
        config: body.config,
    };
    let loader = functions.clone();
    let function = name.clone();
    let sinks = tokio::task::spawn_blocking(move || loader.start_shadow(&function, candidate))
        .await
        .map_err(|error| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the candidate loading task failed: {error}"),
            )
        })?
        .map_err(|problem| {
            let status = match problem {
                SwapError::NoSuchFunction(_) => StatusCode::NOT_FOUND,
                _ => StatusCode::UNPROCESSABLE_ENTITY,
            };
            ApiError::new(status, format!("cannot run {plugin} in shadow: {problem}"))
        })?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "function": name, "candidate": plugin.to_string(), "sinks": sinks })),
    ))
}

/// `GET /api/functions/{name}/shadow`.
#[utoipa::path(get, path = "/api/functions/{name}/shadow", tag = "functions", summary = "The shadow report", params(("name" = String, Path, description = "The function")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn report(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    shadow_state(&state, &name, false).map(Json)
}

/// `DELETE /api/functions/{name}/shadow`.
#[utoipa::path(delete, path = "/api/functions/{name}/shadow", tag = "functions", summary = "Stop the shadow run", params(("name" = String, Path, description = "The function")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn stop(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    shadow_state(&state, &name, true).map(Json)
}

/// The shadow run of `name` and its reports, after stopping it if `stop`.
fn shadow_state(state: &ApiState, name: &str, stop: bool) -> Result<Value, ApiError> {
    let functions = state.running_functions()?;
    let candidate = running_candidate(&functions, name)?;
    let sinks = if stop {
        functions.stop_shadow(name)
    } else {
        functions.shadow_reports(name)
    };
    Ok(json!({
        "function": name,
        "candidate": candidate.plugin.to_string(),
        "stopped": stop,
        "sinks": sinks,
    }))
}

/// `POST /api/functions/{name}/promote`.
#[utoipa::path(post, path = "/api/functions/{name}/promote", tag = "functions", summary = "Make the candidate live", params(("name" = String, Path, description = "The function")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn promote(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let functions = state.running_functions()?;
    let candidate = running_candidate(&functions, &name)?;
    let mut before = None;
    let applied = state
        .apply(|text| {
            edit_entry(text, "functions", &name, |entry| {
                before = Some(entry.clone());
                let fields = entry
                    .as_mapping_mut()
                    .expect("edit_entry hands out mappings");
                fields.remove("file");
                fields.insert("plugin".into(), candidate.plugin.to_string().into());
                if let Some(config) = &candidate.config {
                    let config: serde_yaml_ng::Mapping = config
                        .iter()
                        .map(|(k, v)| (Yaml::from(k.as_str()), Yaml::from(v.as_str())))
                        .collect();
                    fields.insert("config".into(), Yaml::Mapping(config));
                }
            })
        })
        .await?;
    if let Some(before) = before {
        functions.remember_promoted_from(&name, before);
    }
    let report = functions.stop_shadow(&name);
    Ok(Json(json!({
        "function": name,
        "promoted": candidate.plugin.to_string(),
        "apply": applied,
        "shadow_report": report,
    })))
}

/// `POST /api/functions/{name}/rollback`.
#[utoipa::path(post, path = "/api/functions/{name}/rollback", tag = "functions", summary = "Restore the version before the last promotion", params(("name" = String, Path, description = "The function")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn rollback(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let functions = state.running_functions()?;
    let previous = functions.promoted_from(&name).ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            format!("function {name:?} was not promoted since weft started; there is nothing to roll back"),
        )
    })?;
    let applied = state
        .apply(|text| edit_entry(text, "functions", &name, |entry| *entry = previous.clone()))
        .await?;
    functions.forget_promoted_from(&name);
    Ok(Json(
        json!({ "function": name, "rolled_back": true, "apply": applied }),
    ))
}

fn running_candidate(functions: &FunctionRuntime, name: &str) -> Result<Candidate, ApiError> {
    functions.candidate(name).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no candidate of function {name:?} runs in shadow; start one with POST /api/functions/{name}/shadow"),
        )
    })
}
