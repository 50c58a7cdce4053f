//! `GET /api/accounts[/{name}]`: each account's limits and capabilities
//! next to what it uses (sinks, function instances, registered plugin
//! versions). An admin token sees every account; an account token its own.

use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::auth::Caller;
use super::{ApiError, ApiState};
use weft_pipeline::hot_swap::FunctionRuntime;
use weft_sinks::config::Config;
use weft_sinks::config::account::AccountConfig;

/// `GET /api/accounts`.
#[utoipa::path(get, path = "/api/accounts", tag = "accounts", summary = "The accounts, with their limits and usage", responses((status = 200, description = "The accounts", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    let functions = state.running_functions()?;
    let running = functions.running();
    let data = running
        .accounts
        .iter()
        .filter(|account| caller.owns(Some(&account.name)))
        .map(|account| render(&functions, &running, account))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Json(json!({ "data": data })))
}

/// `GET /api/accounts/{name}`.
#[utoipa::path(get, path = "/api/accounts/{name}", tag = "accounts", summary = "One account, with its limits and usage", params(("name" = String, Path, description = "The account")), responses((status = 200, description = "The account", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn get(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let functions = state.running_functions()?;
    let running = functions.running();
    let account = running
        .account(&name)
        .filter(|account| caller.owns(Some(&account.name)))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no account named {name:?}; GET /api/accounts lists them"),
            )
        })?;
    render(&functions, &running, account).map(Json)
}

fn render(
    functions: &FunctionRuntime,
    running: &Config,
    account: &AccountConfig,
) -> Result<Value, ApiError> {
    let owned = |owner: &Option<String>| owner.as_deref() == Some(account.name.as_str());
    let sinks: Vec<_> = running.sinks.iter().filter(|s| owned(&s.account)).collect();
    let instances: usize = sinks.iter().map(|s| s.function_count()).sum();
    let plugins = functions
        .registry()
        .list(Some(&account.name))
        .map_err(|error| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()))?
        .len();
    let limits = &account.limits;
    Ok(json!({
        "name": account.name,
        "limits": {
            "max_sinks": limits.max_sinks,
            "plugin_memory_mb": limits.plugin_memory_mb,
            "plugin_timeout_ms": limits.plugin_timeout_ms,
            "max_plugin_instances": limits.max_plugin_instances,
            "plugin_cpu_percent": limits.plugin_cpu_percent,
        },
        "allow_capabilities": account.allow_capabilities.iter().map(|c| c.name()).collect::<Vec<_>>(),
        "allow_hosts": account.allow_hosts,
        "deny_internal_http": account.deny_internal_http,
        "usage": {
            "sinks": sinks.len(),
            "functions": running.functions.iter().filter(|f| owned(&f.account)).count(),
            "plugin_instances": instances,
            "plugin_versions": plugins,
        },
    }))
}
