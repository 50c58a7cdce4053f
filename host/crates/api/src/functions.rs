//! `GET /api/functions[/{name}]`: each function entry of the running config
//! as written (secrets redacted), with what runs as it (`running`: its
//! plugin's name@version or its component file), the sinks that use it and,
//! per sink, its hot-swap switch points (see [`weft_pipeline::swap`]).

use axum::Json;
use axum::extract::{Extension, Path, State};
use serde_json::{Value, json};

use super::auth::Caller;
use super::resources::{named, section};
use super::{ApiError, ApiState};

/// `GET /api/functions`.
#[utoipa::path(get, path = "/api/functions", tag = "functions", summary = "List the functions", responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    let data: Vec<Value> = section(&state, &caller, "functions")?
        .into_iter()
        .map(|entry| with_runtime(&state, entry))
        .collect();
    Ok(Json(json!({ "data": data })))
}

/// `GET /api/functions/{name}`.
#[utoipa::path(get, path = "/api/functions/{name}", tag = "functions", summary = "One function, with its switch points", params(("name" = String, Path, description = "The function")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn get(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let entry = named(
        section(&state, &caller, "functions")?,
        "function",
        "/api/functions",
        &name,
    )?;
    Ok(Json(with_runtime(&state, entry)))
}

fn with_runtime(state: &ApiState, mut entry: Value) -> Value {
    let name = entry["name"].as_str().unwrap_or_default().to_string();
    let Some(functions) = state.functions() else {
        return entry;
    };
    let running = functions.running();
    let switches = functions.switches(&name);
    if let (Value::Object(fields), Some(function)) = (&mut entry, running.function(&name)) {
        fields.insert(
            "running".into(),
            json!(weft_pipeline::hot_swap::describe(function)),
        );
        fields.insert("sinks".into(), json!(switches.keys().collect::<Vec<_>>()));
        fields.insert("switches".into(), json!(switches));
    }
    entry
}
