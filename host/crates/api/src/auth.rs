//! Bearer-token authentication of the HTTP API (`api_tokens:` in the
//! config): every route asks for `Authorization: Bearer <token>` with one
//! of the configured tokens, compared in constant time. Not asked of:
//! `/health` and `/health/ready` (probes), and `POST
//! /api/webhook_sources/{name}`, which each source authenticates itself.
//! With no token configured the API is open, and weft warns at start.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, ApiState};
pub use weft_pipeline::webhook_source::auth::bearer;
use weft_sinks::config::api_token::ApiTokenConfig;

/// The tokens the API accepts. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ApiTokens(Arc<Vec<ApiTokenConfig>>);

impl ApiTokens {
    /// Accepts exactly `tokens` (none: the API is open).
    pub fn new(tokens: Vec<ApiTokenConfig>) -> ApiTokens {
        ApiTokens(Arc::new(tokens))
    }

    /// Whether any token is configured.
    pub fn enabled(&self) -> bool {
        !self.0.is_empty()
    }

    /// The token `given` is, if any. Every token is compared, in constant
    /// time, so timing tells nothing about which one is close.
    fn find(&self, given: &str) -> Option<&ApiTokenConfig> {
        let mut found = None;
        for token in self.0.iter() {
            if token.matches(given) {
                found = Some(token);
            }
        }
        found
    }
}

/// Who a request comes from: the token it was authenticated with and that
/// token's account. Every request past [`require_token`] carries one.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The token's name; `None` when the API is open (no `api_tokens`).
    pub token: Option<String>,
    /// The token's account; `None` for an admin token (or an open API),
    /// which manages every account's resources.
    pub account: Option<String>,
}

impl Caller {
    /// Whether the caller may see and change a resource owned by `owner`.
    pub fn owns(&self, owner: Option<&str>) -> bool {
        match &self.account {
            None => true,
            Some(account) => owner == Some(account.as_str()),
        }
    }

    /// The account a resource the caller creates belongs to, given the
    /// `account` its entry names: an account token's own (403 when the
    /// entry names another); for an admin, whatever the entry names.
    pub fn account_for(&self, given: Option<&str>, what: &str) -> Result<Option<String>, ApiError> {
        match (&self.account, given) {
            (Some(own), Some(other)) if own != other => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "this token belongs to account {own:?}; it cannot create {what} of account {other:?}"
                ),
            )),
            (Some(own), _) => Ok(Some(own.clone())),
            (None, given) => Ok(given.map(str::to_string)),
        }
    }
}

/// Middleware: refuses a request without a known token with 401.
pub async fn require_token(
    State(state): State<ApiState>,
    mut request: Request,
    next: Next,
) -> Response {
    let tokens = state.api_tokens();
    if !tokens.enabled() || exempt(request.method(), request.uri().path()) {
        request.extensions_mut().insert(Caller::default());
        return next.run(request).await;
    }
    let found = bearer(request.headers()).and_then(|given| tokens.find(given));
    match found {
        Some(token) => {
            let caller = Caller {
                token: Some(token.name.clone()),
                account: token.account.clone(),
            };
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        None => {
            let summary = if bearer(request.headers()).is_some() {
                "unknown API token; send `Authorization: Bearer <token>` with one of the config's `api_tokens`"
            } else {
                "missing API token; send `Authorization: Bearer <token>` with one of the config's `api_tokens`"
            };
            let mut response = ApiError::new(StatusCode::UNAUTHORIZED, summary).into_response();
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            response
        }
    }
}

/// Routes that never ask for an API token.
fn exempt(method: &Method, path: &str) -> bool {
    matches!(path, "/health" | "/health/ready")
        || (method == Method::POST && path.starts_with("/api/webhook_sources/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> ApiTokens {
        ApiTokens::new(vec![
            ApiTokenConfig {
                account: None,
                name: "ci".into(),
                token: Some("0123456789abcdef".into()),
                token_sha256: None,
            },
            ApiTokenConfig {
                account: None,
                name: "ops".into(),
                token: None,
                token_sha256: Some(ApiTokenConfig::sha256_hex("fedcba9876543210")),
            },
        ])
    }

    #[test]
    fn a_token_is_found_by_its_whole_value_only_plain_or_hashed() {
        let tokens = tokens();
        assert_eq!(
            tokens.find("fedcba9876543210").map(|t| t.name.as_str()),
            Some("ops")
        );
        assert_eq!(
            tokens.find("0123456789abcdef").map(|t| t.name.as_str()),
            Some("ci")
        );
        assert!(tokens.find("fedcba987654321").is_none());
        assert!(tokens.find("0123456789abcde").is_none());
        assert!(tokens.find("").is_none());
        assert!(!ApiTokens::default().enabled());
    }

    #[test]
    fn probes_and_webhook_posts_are_exempt() {
        assert!(exempt(&Method::GET, "/health/ready"));
        assert!(exempt(&Method::POST, "/api/webhook_sources/orders"));
        assert!(!exempt(&Method::GET, "/api/webhook_sources/orders"));
        assert!(!exempt(&Method::GET, "/metrics"));
        assert!(!exempt(&Method::POST, "/api/http_pull_consumers/s/receive"));
    }
}
