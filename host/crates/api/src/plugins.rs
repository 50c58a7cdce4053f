//! The plugin registry (see [`weft_wasm::registry`]):
//!
//! * `POST /api/plugins?name=…&version=…&kind=…` with the component as the
//!   body: 201 and the registered version, or 200 when the same bytes are
//!   registered under that version already;
//! * `GET /api/plugins`, `GET /api/plugins/{name}` (its versions) and
//!   `GET /api/plugins/{name}/{version}`;
//! * `DELETE /api/plugins/{name}/{version}`: 409 while a function of the
//!   running config names it.
//!
//! An account token works in its account's name space; an admin token in
//! the operator's, or in an account's with `?account=NAME` on the upload,
//! get and delete routes.

use std::collections::HashMap;

use axum::Json;
use axum::body::Body;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use super::auth::Caller;
use super::webhook_sources::{Unread, read_limited};
use super::{ApiError, ApiState};
use weft_sinks::config::plugin_registry::PluginRef;
use weft_store::{RegisteredPlugin, Registration};
use weft_wasm::registry::{RegistryError, Upload};

/// `POST /api/plugins`.
#[utoipa::path(post, path = "/api/plugins", tag = "plugins", summary = "Register a component", params(("name" = String, Query, description = "The plugin name"), ("version" = String, Query, description = "Its version"), ("kind" = String, Query, description = "transform, filter, routing or enrichment"), ("account" = Option<String>, Query, description = "An admin's upload into this account's name space")), request_body(content = ComponentBytes, content_type = "application/octet-stream", description = "The component (.wasm); any content type is accepted, application/wasm is conventional"), responses((status = 201, description = "Registered", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn upload(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let functions = state.running_functions()?;
    let field = |name: &str| {
        query.get(name).cloned().ok_or_else(|| {
            ApiError::bad_param(
                name,
                "is missing: upload with POST /api/plugins?name=<name>&version=<version>&kind=<transform|filter|routing|enrichment> and the component as the body",
            )
        })
    };
    let (name, version, kind) = (field("name")?, field("version")?, field("kind")?);
    let running = functions.running();
    let account = namespace(&caller, &query)?;
    let mut policy = running.plugin_registry.clone();
    if !account.is_empty() {
        // An account's uploads may import what the account may be granted.
        policy.allow_capabilities = running
            .account(&account)
            .map(|a| a.allow_capabilities.clone())
            .ok_or_else(|| {
                ApiError::bad_param(
                    "account",
                    format!("no account named {account:?}; GET /api/accounts lists them"),
                )
            })?;
    }
    let bytes = match read_limited(body, &headers, policy.max_component_bytes() as u64).await {
        Ok(bytes) => bytes,
        Err(Unread::TooLarge) => {
            return Err(registry_error(RegistryError::TooLarge {
                bytes: headers
                    .get(axum::http::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok()?.parse().ok())
                    .unwrap_or(policy.max_component_bytes() + 1),
                limit: policy.max_component_bytes(),
            }));
        }
        Err(Unread::Broken(error)) => {
            return Err(ApiError::bad_param(
                "body",
                format!("the upload broke off: {error}"),
            ));
        }
    };
    let upload = Upload {
        account,
        name,
        version,
        kind,
        bytes,
    };
    let registry = functions.registry().clone();
    let registered = tokio::task::spawn_blocking(move || registry.register(upload, &policy))
        .await
        .map_err(|error| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the registration task failed: {error}"),
            )
        })?
        .map_err(registry_error)?;
    Ok(match registered {
        Registration::Created(plugin) => (StatusCode::CREATED, Json(render(&plugin))),
        Registration::Unchanged(plugin) | Registration::Conflict(plugin) => {
            (StatusCode::OK, Json(render(&plugin)))
        }
    })
}

/// The upload body, for the OpenAPI document: the component's bytes.
#[derive(utoipa::ToSchema)]
#[schema(value_type = String, format = Binary)]
#[allow(dead_code)] // only its schema is used
pub(super) struct ComponentBytes(Vec<u8>);

/// `GET /api/plugins`: `{"data": [version, ...]}`.
#[utoipa::path(get, path = "/api/plugins", tag = "plugins", summary = "List registered versions", responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    let data = registered(&state, &caller, |_| true)?;
    Ok(Json(json!({ "data": data })))
}

/// `GET /api/plugins/{name}`: `{"data": [version, ...]}`, 404 when none.
#[utoipa::path(get, path = "/api/plugins/{name}", tag = "plugins", summary = "A plugin's versions", params(("name" = String, Path, description = "The plugin")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn versions(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let data = registered(&state, &caller, |plugin| plugin.name == name)?;
    if data.is_empty() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no plugin named {name:?} is registered; GET /api/plugins lists them"),
        ));
    }
    Ok(Json(json!({ "data": data })))
}

/// The registered versions the caller sees that `keep`, rendered: an
/// account's own, or every account's for an admin.
fn registered(
    state: &ApiState,
    caller: &Caller,
    keep: impl Fn(&RegisteredPlugin) -> bool,
) -> Result<Vec<Value>, ApiError> {
    Ok(state
        .running_functions()?
        .registry()
        .list(caller.account.as_deref())
        .map_err(registry_error)?
        .iter()
        .filter(|plugin| keep(plugin))
        .map(render)
        .collect())
}

/// `GET /api/plugins/{name}/{version}`.
#[utoipa::path(get, path = "/api/plugins/{name}/{version}", tag = "plugins", summary = "One version", params(("name" = String, Path, description = "The plugin"), ("version" = String, Path, description = "The version"), ("account" = Option<String>, Query, description = "For an admin: the account whose name space")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn get(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path((name, version)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let functions = state.running_functions()?;
    let plugin = functions
        .registry()
        .get(&namespace(&caller, &query)?, &PluginRef { name, version })
        .map_err(registry_error)?;
    Ok(Json(render(&plugin)))
}

/// `DELETE /api/plugins/{name}/{version}`.
#[utoipa::path(delete, path = "/api/plugins/{name}/{version}", tag = "plugins", summary = "Delete a version not in use", params(("name" = String, Path, description = "The plugin"), ("version" = String, Path, description = "The version"), ("account" = Option<String>, Query, description = "For an admin: the account whose name space")), responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn delete(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path((name, version)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let functions = state.running_functions()?;
    let running = functions.running();
    let deleted = functions
        .registry()
        .delete(
            &namespace(&caller, &query)?,
            &PluginRef { name, version },
            Some(&running),
        )
        .map_err(registry_error)?;
    let mut body = render(&deleted);
    body["deleted"] = json!(true);
    Ok(Json(body))
}

/// The name space a request works in: an account token's own account
/// (403 when `?account=` names another), or for an admin the `?account=`
/// it names, the operator's (empty) without one.
fn namespace(caller: &Caller, query: &HashMap<String, String>) -> Result<String, ApiError> {
    Ok(caller
        .account_for(query.get("account").map(String::as_str), "or reach plugins")?
        .unwrap_or_default())
}

/// A registered version as the API shows it.
fn render(plugin: &RegisteredPlugin) -> Value {
    json!({
        "name": plugin.name,
        "version": plugin.version,
        "reference": format!("{}@{}", plugin.name, plugin.version),
        "kind": plugin.kind,
        "sha256": plugin.sha256,
        "bytes": plugin.bytes,
        "imports": plugin.imports,
        "registered_at": plugin.registered_at,
        "account": (!plugin.account.is_empty()).then_some(&plugin.account),
    })
}

/// The HTTP answer to a registry error.
fn registry_error(error: RegistryError) -> ApiError {
    let status = match &error {
        RegistryError::Invalid { .. } => StatusCode::BAD_REQUEST,
        RegistryError::Rejected(_) | RegistryError::Capabilities { .. } => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
        RegistryError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        RegistryError::Conflict { .. } | RegistryError::InUse { .. } => StatusCode::CONFLICT,
        RegistryError::NotFound(_) => StatusCode::NOT_FOUND,
        RegistryError::Store(_) | RegistryError::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let field = match &error {
        RegistryError::Invalid { field, .. } => Some(*field),
        RegistryError::Rejected(_)
        | RegistryError::Capabilities { .. }
        | RegistryError::TooLarge { .. } => Some("body"),
        _ => None,
    };
    let mut api_error = ApiError::new(status, error.to_string());
    if let Some(field) = field {
        api_error = api_error.with_validation(field, vec![error.to_string()]);
    }
    match error {
        RegistryError::Capabilities { imports } => {
            api_error.with_field("offending_imports", json!(imports))
        }
        RegistryError::InUse { functions, .. } => api_error.with_field("used_by", json!(functions)),
        _ => api_error,
    }
}
