//! Creating, replacing and deleting one sink, function, database, HTTP
//! endpoint or account through the API: `POST /api/sinks`,
//! `PUT /api/sinks/{name}`, `DELETE /api/sinks/{name}` and the same under
//! `/api/functions`, `/api/postgres_databases`,
//! `/api/destinations/http_endpoints` and `/api/accounts` (admin tokens
//! only). The
//! body is the entry in sequin.yml's keys, as JSON. Each call edits the
//! running config and applies it (see [`super::config_apply`]): validated
//! like `weft run`, written to the config file, sinks, functions,
//! endpoints and accounts changed in place while the other sinks flow, a
//! database change restarting the pipelines.
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
use super::config_edit::{edit_section, position};
use super::{ApiError, ApiState};

/// A resource kind these routes change.
#[derive(Clone, Copy)]
struct Kind {
    /// The config section.
    section: &'static str,
    /// Its name in messages.
    what: &'static str,
    /// Its collection's path under `/api/`.
    route: &'static str,
}

const SINK: Kind = Kind {
    section: "sinks",
    what: "sink",
    route: "sinks",
};
const FUNCTION: Kind = Kind {
    section: "functions",
    what: "function",
    route: "functions",
};
const DATABASE: Kind = Kind {
    section: "databases",
    what: "database",
    route: "postgres_databases",
};
const ACCOUNT: Kind = Kind {
    section: "accounts",
    what: "account",
    route: "accounts",
};
const HTTP_ENDPOINT: Kind = Kind {
    section: "http_endpoints",
    what: "http endpoint",
    route: "destinations/http_endpoints",
};

/// `POST /api/sinks`.
#[utoipa::path(post, path = "/api/sinks", tag = "sinks", summary = "Create a sink (sequin.yml keys)", request_body(content = Object, content_type = "application/json"), responses((status = 201, description = "Created and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn create_sink(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Json(entry): Json<Value>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    create(&state, &caller, SINK, entry).await
}

/// `PUT /api/sinks/{name}`.
#[utoipa::path(put, path = "/api/sinks/{name}", tag = "sinks", summary = "Replace a sink", params(("name" = String, Path, description = "The sink")), request_body(content = Object, content_type = "application/json"), responses((status = 200, description = "Replaced and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn replace_sink(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    Json(entry): Json<Value>,
) -> Result<Json<Value>, ApiError> {
    replace(&state, &caller, SINK, &name, entry).await
}

/// `DELETE /api/sinks/{name}`.
#[utoipa::path(delete, path = "/api/sinks/{name}", tag = "sinks", summary = "Delete a sink", params(("name" = String, Path, description = "The sink")), responses((status = 200, description = "Deleted and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn delete_sink(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    remove(&state, SINK, &name).await
}

/// `POST /api/functions`.
#[utoipa::path(post, path = "/api/functions", tag = "functions", summary = "Create a function (sequin.yml keys)", request_body(content = Object, content_type = "application/json"), responses((status = 201, description = "Created and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn create_function(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Json(entry): Json<Value>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    create(&state, &caller, FUNCTION, entry).await
}

/// `PUT /api/functions/{name}`: a change to a function alone is a hot swap.
#[utoipa::path(put, path = "/api/functions/{name}", tag = "functions", summary = "Replace a function (hot swap)", params(("name" = String, Path, description = "The function")), request_body(content = Object, content_type = "application/json"), responses((status = 200, description = "Replaced and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn replace_function(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    Json(entry): Json<Value>,
) -> Result<Json<Value>, ApiError> {
    replace(&state, &caller, FUNCTION, &name, entry).await
}

/// `DELETE /api/functions/{name}`.
#[utoipa::path(delete, path = "/api/functions/{name}", tag = "functions", summary = "Delete a function no sink uses", params(("name" = String, Path, description = "The function")), responses((status = 200, description = "Deleted and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn delete_function(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    remove(&state, FUNCTION, &name).await
}

/// `POST /api/postgres_databases`: a new database restarts the pipelines.
#[utoipa::path(post, path = "/api/postgres_databases", tag = "postgres_databases", summary = "Create a database (sequin.yml keys)", request_body(content = Object, content_type = "application/json"), responses((status = 201, description = "Created and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn create_database(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Json(entry): Json<Value>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    create(&state, &caller, DATABASE, entry).await
}

/// `PUT /api/postgres_databases/{name}`.
#[utoipa::path(put, path = "/api/postgres_databases/{name}", tag = "postgres_databases", summary = "Replace a database", params(("name" = String, Path, description = "The database")), request_body(content = Object, content_type = "application/json"), responses((status = 200, description = "Replaced and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn replace_database(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    Json(entry): Json<Value>,
) -> Result<Json<Value>, ApiError> {
    replace(&state, &caller, DATABASE, &name, entry).await
}

/// `DELETE /api/postgres_databases/{name}`: refused while a sink uses it.
#[utoipa::path(delete, path = "/api/postgres_databases/{name}", tag = "postgres_databases", summary = "Delete a database no sink uses", params(("name" = String, Path, description = "The database")), responses((status = 200, description = "Deleted and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn delete_database(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    remove(&state, DATABASE, &name).await
}

/// `POST /api/destinations/http_endpoints`.
#[utoipa::path(post, path = "/api/destinations/http_endpoints", tag = "http_endpoints", summary = "Create an HTTP endpoint (sequin.yml keys)", request_body(content = Object, content_type = "application/json"), responses((status = 201, description = "Created and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn create_http_endpoint(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Json(entry): Json<Value>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    create(&state, &caller, HTTP_ENDPOINT, entry).await
}

/// `PUT /api/destinations/http_endpoints/{name}`: the webhook sinks using
/// it are updated in place.
#[utoipa::path(put, path = "/api/destinations/http_endpoints/{name}", tag = "http_endpoints", summary = "Replace an HTTP endpoint", params(("name" = String, Path, description = "The endpoint")), request_body(content = Object, content_type = "application/json"), responses((status = 200, description = "Replaced and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn replace_http_endpoint(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    Json(entry): Json<Value>,
) -> Result<Json<Value>, ApiError> {
    replace(&state, &caller, HTTP_ENDPOINT, &name, entry).await
}

/// `DELETE /api/destinations/http_endpoints/{name}`: refused while a sink
/// uses it.
#[utoipa::path(delete, path = "/api/destinations/http_endpoints/{name}", tag = "http_endpoints", summary = "Delete an HTTP endpoint no sink uses", params(("name" = String, Path, description = "The endpoint")), responses((status = 200, description = "Deleted and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn delete_http_endpoint(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    remove(&state, HTTP_ENDPOINT, &name).await
}

/// `POST /api/accounts`: admin tokens only.
#[utoipa::path(post, path = "/api/accounts", tag = "accounts", summary = "Create an account (admin tokens only)", request_body(content = Object, content_type = "application/json"), responses((status = 201, description = "Created and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn create_account(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Json(entry): Json<Value>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    create(&state, &caller, ACCOUNT, entry).await
}

/// `PUT /api/accounts/{name}`: new limits or capabilities, checked against
/// what the account's resources take; admin tokens only.
#[utoipa::path(put, path = "/api/accounts/{name}", tag = "accounts", summary = "Replace an account (admin tokens only)", params(("name" = String, Path, description = "The account")), request_body(content = Object, content_type = "application/json"), responses((status = 200, description = "Replaced and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn replace_account(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    Json(entry): Json<Value>,
) -> Result<Json<Value>, ApiError> {
    replace(&state, &caller, ACCOUNT, &name, entry).await
}

/// `DELETE /api/accounts/{name}`: refused while it owns resources; admin
/// tokens only.
#[utoipa::path(delete, path = "/api/accounts/{name}", tag = "accounts", summary = "Delete an account that owns nothing (admin tokens only)", params(("name" = String, Path, description = "The account")), responses((status = 200, description = "Deleted and applied", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn delete_account(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    admin_only(&caller, ACCOUNT)?;
    remove(&state, ACCOUNT, &name).await
}

/// Refuses an account token the kinds only admins manage.
fn admin_only(caller: &Caller, kind: Kind) -> Result<(), ApiError> {
    match &caller.account {
        Some(account) if kind.section == ACCOUNT.section => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "accounts are managed with an admin token (one without `account`); this token belongs to account {account:?}"
            ),
        )),
        _ => Ok(()),
    }
}

async fn create(
    state: &ApiState,
    caller: &Caller,
    kind: Kind,
    entry: Value,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let (name, entry) = owned_entry(caller, kind, entry, None)?;
    let applied = state
        .apply(|text| {
            edit_section(text, kind.section, |entries| {
                if position(entries, &name).is_some() {
                    return Err(ApiError::new(
                        StatusCode::CONFLICT,
                        format!(
                            "a {} named {name:?} exists; PUT /api/{}/{name} replaces it",
                            kind.what, kind.route
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
    state: &ApiState,
    caller: &Caller,
    kind: Kind,
    name: &str,
    entry: Value,
) -> Result<Json<Value>, ApiError> {
    let (_, entry) = owned_entry(caller, kind, entry, Some(name))?;
    let applied = state
        .apply(|text| {
            edit_section(text, kind.section, |entries| {
                let at = position(entries, name).ok_or_else(|| missing(kind, name))?;
                entries[at] = entry;
                Ok(())
            })
        })
        .await?;
    Ok(Json(json!({ "name": name, "apply": applied })))
}

async fn remove(state: &ApiState, kind: Kind, name: &str) -> Result<Json<Value>, ApiError> {
    let applied = state
        .apply(|text| {
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
            kind.what, kind.route
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
    admin_only(caller, kind)?;
    if kind.section != ACCOUNT.section
        && let Some(account) =
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
    Ok((name, to_yaml(Value::Object(fields))))
}

/// `json` as a YAML value. Numbers are converted by value: serialising a
/// `serde_json::Number` (with `arbitrary_precision`) would give a map.
fn to_yaml(json: Value) -> Yaml {
    match json {
        Value::Null => Yaml::Null,
        Value::Bool(b) => Yaml::Bool(b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Yaml::Number(i.into())
            } else if let Some(u) = n.as_u64() {
                Yaml::Number(u.into())
            } else {
                Yaml::Number(n.as_f64().unwrap_or(f64::NAN).into())
            }
        }
        Value::String(s) => Yaml::String(s),
        Value::Array(items) => Yaml::Sequence(items.into_iter().map(to_yaml).collect()),
        Value::Object(fields) => Yaml::Mapping(
            fields
                .into_iter()
                .map(|(key, value)| (Yaml::String(key), to_yaml(value)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_numbers_become_yaml_numbers() {
        let yaml = to_yaml(
            json!({"port": 5432, "big": 18446744073709551615u64, "ratio": 0.5, "enabled": true, "list": [1, "a", null]}),
        );
        let text = serde_yaml_ng::to_string(&yaml).unwrap();
        assert_eq!(
            text,
            "port: 5432\nbig: 18446744073709551615\nratio: 0.5\nenabled: true\nlist:\n- 1\n- a\n- null\n"
        );
    }
}
