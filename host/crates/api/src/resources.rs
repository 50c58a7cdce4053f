//! Read-only management resources in Sequin's routes: `GET /api/sinks`,
//! `GET /api/postgres_databases` and `GET /api/destinations/http_endpoints`
//! (each also `/{name}`). Each entry is the config entry as written (the
//! sequin.yml keys, `${VAR}` references kept, every secret redacted, as
//! `config export` shows it); a sink adds its consumer `id`, its `status`
//! (`paused`, `quarantined` or `active`) and its health checks.

use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::auth::Caller;
use super::{ApiError, ApiState};
use weft_core::health::EntityKind;
use weft_core::message::ConsumerRef;

/// `GET /api/sinks`.
#[utoipa::path(get, path = "/api/sinks", tag = "sinks", summary = "List the sinks", responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn sinks(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    let data: Vec<Value> = section(&state, &caller, "sinks")?
        .into_iter()
        .map(|sink| with_status(&state, sink))
        .collect();
    Ok(Json(json!({ "data": data })))
}

/// `GET /api/sinks/{name}`.
#[utoipa::path(get, path = "/api/sinks/{name}", tag = "sinks", summary = "One sink", params(("name" = String, Path, description = "The sink")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn sink(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let sink = named(
        section(&state, &caller, "sinks")?,
        "sink",
        "/api/sinks",
        &name,
    )?;
    Ok(Json(with_status(&state, sink)))
}

/// `GET /api/postgres_databases`.
#[utoipa::path(get, path = "/api/postgres_databases", tag = "postgres_databases", summary = "List the databases", responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn databases(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(
        json!({ "data": section(&state, &caller, "databases")? }),
    ))
}

/// `GET /api/postgres_databases/{name}`.
#[utoipa::path(get, path = "/api/postgres_databases/{name}", tag = "postgres_databases", summary = "One database", params(("name" = String, Path, description = "The database")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn database(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let databases = section(&state, &caller, "databases")?;
    named(databases, "database", "/api/postgres_databases", &name).map(Json)
}

/// `GET /api/destinations/http_endpoints`.
#[utoipa::path(get, path = "/api/destinations/http_endpoints", tag = "http_endpoints", summary = "List the HTTP endpoints", responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn http_endpoints(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(
        json!({ "data": section(&state, &caller, "http_endpoints")? }),
    ))
}

/// `GET /api/destinations/http_endpoints/{name}`.
#[utoipa::path(get, path = "/api/destinations/http_endpoints/{name}", tag = "http_endpoints", summary = "One HTTP endpoint", params(("name" = String, Path, description = "The endpoint")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn http_endpoint(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let endpoints = section(&state, &caller, "http_endpoints")?;
    named(
        endpoints,
        "http endpoint",
        "/api/destinations/http_endpoints",
        &name,
    )
    .map(Json)
}

/// The entries of the top-level `key` of the running config that
/// `caller` owns (every one for an admin), redacted.
pub(super) fn section(
    state: &ApiState,
    caller: &Caller,
    key: &str,
) -> Result<Vec<Value>, ApiError> {
    let Some(document) = state.exported_config()? else {
        return Ok(Vec::new());
    };
    Ok(document
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|entry| caller.owns(entry.get("account").and_then(Value::as_str)))
        .cloned()
        .collect())
}

/// The entry named `name`, or a 404 that says where to list them.
pub(super) fn named(
    entries: Vec<Value>,
    what: &str,
    list: &str,
    name: &str,
) -> Result<Value, ApiError> {
    entries
        .into_iter()
        .find(|entry| entry["name"] == name)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no {what} named {name:?}; GET {list} lists them"),
            )
        })
}

/// A sink entry with its consumer id, status and health checks.
fn with_status(state: &ApiState, mut sink: Value) -> Value {
    let name = sink["name"].as_str().unwrap_or_default().to_string();
    let quarantined = state.breaker(&name).and_then(|b| b.quarantine()).is_some();
    let paused = state.pause_switch(&name).is_some_and(|p| p.is_paused());
    if let Value::Object(fields) = &mut sink {
        fields.insert("id".into(), json!(ConsumerRef::for_sink(&name).id));
        fields.insert(
            "status".into(),
            json!(if paused {
                "paused"
            } else if quarantined {
                "quarantined"
            } else {
                "active"
            }),
        );
        fields.insert(
            "health".into(),
            json!(weft_core::health::global().checks(EntityKind::Sink, &name)),
        );
    }
    sink
}
