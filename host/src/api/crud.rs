//! Creating, replacing and deleting one sink or function through the API:
//! `POST /api/sinks`, `PUT /api/sinks/{name}`, `DELETE /api/sinks/{name}`
//! and the same under `/api/functions`. The body is the entry in
//! sequin.yml's keys, as JSON. Each call edits the running config and
//! applies it (see [`super::config_apply`]): validated like `weft run`,
//! written to the config file, a function change hot-swapped, any other
//! change restarting the pipelines.
//!
//! An account token may change its own account's entries only: the entry
//! gets the token's `account`, and a function must name a registered
//! `plugin` rather than a `file` on the host.

use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};
use serde_yaml_ng::Value as Yaml;

use super::auth::Caller;
use super::config_apply::apply_edit;
use super::config_edit::{edit_section, position};
use super::{ApiError, PullApiState};

/// A resource kind these routes change.
#[derive(Clone, Copy)]
struct Kind {
    /// The config section.
    section: &'static str,
    /// Its name in messages.
    what: &'static str,
}

const SINK: Kind = Kind {
    section: "sinks",
    what: "sink",
};
const FUNCTION: Kind = Kind {
    section: "functions",
    what: "function",
};

/// `POST /api/sinks`.
#[utoipa::path(post, path = "/api/sinks", tag = "sinks", summary = "Create a sink (sequin.yml keys)", request_body(content = Object, content_type = "application/json"), responses((status = 201, description = "Created and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::api::error::ApiErrorBody)))]
pub(super) async fn create_sink(
    State(state): State<PullApiState>,
    Extension(caller): Extension<Caller>,
    Json(entry): Json<Value>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    create(&state, &caller, SINK, entry).await
}

/// `PUT /api/sinks/{name}`.
#[utoipa::path(put, path = "/api/sinks/{name}", tag = "sinks", summary = "Replace a sink", params(("name" = String, Path, description = "The sink")), request_body(content = Object, content_type = "application/json"), responses((status = 200, description = "Replaced and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::api::error::ApiErrorBody)))]
pub(super) async fn replace_sink(
    State(state): State<PullApiState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    Json(entry): Json<Value>,
) -> Result<Json<Value>, ApiError> {
    replace(&state, &caller, SINK, &name, entry).await
}

/// `DELETE /api/sinks/{name}`.
#[utoipa::path(delete, path = "/api/sinks/{name}", tag = "sinks", summary = "Delete a sink", params(("name" = String, Path, description = "The sink")), responses((status = 200, description = "Deleted and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::api::error::ApiErrorBody)))]
pub(super) async fn delete_sink(
    State(state): State<PullApiState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    remove(&state, SINK, &name).await
}

/// `POST /api/functions`.
#[utoipa::path(post, path = "/api/functions", tag = "functions", summary = "Create a function (sequin.yml keys)", request_body(content = Object, content_type = "application/json"), responses((status = 201, description = "Created and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::api::error::ApiErrorBody)))]
pub(super) async fn create_function(
    State(state): State<PullApiState>,
    Extension(caller): Extension<Caller>,
    Json(entry): Json<Value>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    create(&state, &caller, FUNCTION, entry).await
}

/// `PUT /api/functions/{name}`: a change to a function alone is a hot swap.
#[utoipa::path(put, path = "/api/functions/{name}", tag = "functions", summary = "Replace a function (hot swap)", params(("name" = String, Path, description = "The function")), request_body(content = Object, content_type = "application/json"), responses((status = 200, description = "Replaced and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::api::error::ApiErrorBody)))]
pub(super) async fn replace_function(
    State(state): State<PullApiState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    Json(entry): Json<Value>,
) -> Result<Json<Value>, ApiError> {
    replace(&state, &caller, FUNCTION, &name, entry).await
}

/// `DELETE /api/functions/{name}`.
#[utoipa::path(delete, path = "/api/functions/{name}", tag = "functions", summary = "Delete a function no sink uses", params(("name" = String, Path, description = "The function")), responses((status = 200, description = "Deleted and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::api::error::ApiErrorBody)))]
pub(super) async fn delete_function(
    State(state): State<PullApiState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    remove(&state, FUNCTION, &name).await
}

async fn create(
    state: &PullApiState,
    caller: &Caller,
    kind: Kind,
    entry: Value,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let (name, entry) = owned_entry(caller, kind, entry, None)?;
    let applied = apply_edit(state, |text| {
        edit_section(text, kind.section, |entries| {
            if position(entries, &name).is_some() {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    format!(
                        "a {} named {name:?} exists; PUT /api/{}/{name} replaces it",
                        kind.what, kind.section
                    ),
                ));
            }
            entries.push(entry);
            Ok(())
        })
    })
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "name": name, "apply": applied })),
    ))
}

async fn replace(
    state: &PullApiState,
    caller: &Caller,
    kind: Kind,
    name: &str,
    entry: Value,
) -> Result<Json<Value>, ApiError> {
    let (_, entry) = owned_entry(caller, kind, entry, Some(name))?;
    let applied = apply_edit(state, |text| {
        edit_section(text, kind.section, |entries| {
            let at = position(entries, name).ok_or_else(|| missing(kind, name))?;
            entries[at] = entry;
            Ok(())
        })
    })
    .await?;
    Ok(Json(json!({ "name": name, "apply": applied })))
}

async fn remove(state: &PullApiState, kind: Kind, name: &str) -> Result<Json<Value>, ApiError> {
    let applied = apply_edit(state, |text| {
        edit_section(text, kind.section, |entries| {
            let at = position(entries, name).ok_or_else(|| missing(kind, name))?;
            entries.remove(at);
            Ok(())
        })
    })
    .await?;
    Ok(Json(
        json!({ "name": name, "deleted": true, "apply": applied }),
    ))
}

fn missing(kind: Kind, name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "no {} named {name:?}; GET /api/{} lists them",
            kind.what, kind.section
        ),
    )
}

/// The entry as YAML with its name, owned by the caller's account:
/// `expected` is the name in the path, if any.
fn owned_entry(
    caller: &Caller,
    kind: Kind,
    entry: Value,
    expected: Option<&str>,
) -> Result<(String, Yaml), ApiError> {
    let Value::Object(mut fields) = entry else {
        return Err(ApiError::bad_param(
            "body",
            format!(
                "the body must be a {} entry as a JSON object, in sequin.yml's keys",
                kind.what
            ),
        ));
    };
    let name = match (fields.get("name"), expected) {
        (Some(Value::String(name)), Some(expected)) if name != expected => {
            return Err(ApiError::bad_param(
                "name",
                format!(
                    "is {name:?} but the path names {expected:?}; a rename is a delete and a create"
                ),
            ));
        }
        (Some(Value::String(name)), _) => name.clone(),
        (None, Some(expected)) => expected.to_string(),
        _ => return Err(ApiError::bad_param("name", "is missing or not a string")),
    };
    fields.insert("name".into(), json!(name));
    if let Some(account) =
        caller.account_for(fields.get("account").and_then(Value::as_str), "resources")?
    {
        fields.insert("account".into(), json!(account));
    }
    if caller.account.is_some() && kind.section == FUNCTION.section && fields.contains_key("file") {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "an account's functions name a registered plugin (`plugin: name@version`, uploaded with POST /api/plugins), not a file on the host",
        ));
    }
    let entry = serde_yaml_ng::to_value(Value::Object(fields))
        .map_err(|error| ApiError::bad_param("body", error.to_string()))?;
    Ok((name, entry))
}
