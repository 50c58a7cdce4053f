//! `api_tokens` as a resource: `GET /api/api_tokens` lists their names and
//! accounts (never a token), `POST /api/api_tokens` with `{"name"}` creates
//! one with a random secret, answered once (the config keeps only its
//! SHA-256), and `DELETE
//! /api/api_tokens/{name}` revokes one. Changes go through config apply
//! and take effect at once, without a restart. An account token manages
//! its own account's tokens.

use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use rand::RngCore;
use serde_json::{Value, json};

use super::auth::Caller;
use super::config_edit::{edit_section, position};
use super::{ApiError, ApiState};
use weft_sinks::config::api_token::ApiTokenConfig;

/// `GET /api/api_tokens`.
#[utoipa::path(get, path = "/api/api_tokens", tag = "api_tokens", summary = "List the API tokens (names and accounts only)", responses((status = 200, description = "The tokens", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    let running = state.running_functions()?.running();
    let data: Vec<Value> = running
        .api_tokens
        .iter()
        .filter(|token| caller.owns(token.account.as_deref()))
        .map(|token| json!({ "name": token.name, "account": token.account }))
        .collect();
    Ok(Json(json!({ "data": data })))
}

/// `POST /api/api_tokens` with `{"name": "..."}` (an admin may add
/// `"account"`): the new token, whose secret is shown this once.
#[utoipa::path(post, path = "/api/api_tokens", tag = "api_tokens", summary = "Create an API token; its secret is answered once", request_body(content = Object, content_type = "application/json"), responses((status = 201, description = "The token, with its secret", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn create(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<Value>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let name = body["name"]
        .as_str()
        .ok_or_else(|| ApiError::bad_param("name", "is missing or not a string"))?
        .to_string();
    let account = caller.account_for(body["account"].as_str(), "tokens")?;
    let mut secret = [0u8; 24];
    rand::rng().fill_bytes(&mut secret);
    let token = format!("weft_{}", hex::encode(secret));
    let mut entry = serde_yaml_ng::Mapping::new();
    entry.insert("name".into(), name.as_str().into());
    // Only the secret's hash goes into the config file.
    entry.insert(
        "token_sha256".into(),
        ApiTokenConfig::sha256_hex(&token).into(),
    );
    if let Some(account) = &account {
        entry.insert("account".into(), account.as_str().into());
    }
    state
        .apply(|text| {
            edit_section(text, "api_tokens", |entries| {
                if position(entries, &name).is_some() {
                    return Err(ApiError::new(
                        StatusCode::CONFLICT,
                        format!(
                            "an API token named {name:?} exists; delete it first to replace it"
                        ),
                    ));
                }
                entries.push(serde_yaml_ng::Value::Mapping(entry));
                Ok(())
            })
        })
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "name": name, "account": account, "token": token })),
    ))
}

/// `DELETE /api/api_tokens/{name}`; not the token of this request.
#[utoipa::path(delete, path = "/api/api_tokens/{name}", tag = "api_tokens", summary = "Revoke an API token", params(("name" = String, Path, description = "The token's name")), responses((status = 200, description = "Revoked", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn delete(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if caller.token.as_deref() == Some(name.as_str()) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "this request is authenticated with that token; revoke it with another one",
        ));
    }
    state
        .apply(|text| {
            edit_section(text, "api_tokens", |entries| {
                let at = position(entries, &name).ok_or_else(|| {
                    ApiError::new(
                        StatusCode::NOT_FOUND,
                        format!("no API token named {name:?}; GET /api/api_tokens lists them"),
                    )
                })?;
                entries.remove(at);
                Ok(())
            })
        })
        .await?;
    Ok(Json(json!({ "name": name, "deleted": true })))
}
