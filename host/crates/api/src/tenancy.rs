//! Account scoping of the API (see [`weft_sinks::config::account`]): a token of
//! an account reaches only that account's resources. A named resource of
//! another account answers 404, as one that does not exist, so that names
//! do not leak across accounts; the routes that show or change the whole
//! weft (config plan, apply and export, health, metrics, change
//! retentions) answer 403. Lists are filtered by their handlers, and the
//! plugin registry keeps one name space per account.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::auth::Caller;
use super::{ApiError, ApiState};
use weft_sinks::config::Config;

/// Middleware (after [`super::auth::require_token`]): refuses an account's
/// request for a resource it does not own.
pub async fn scope_to_account(
    State(state): State<ApiState>,
    request: Request,
    next: Next,
) -> Response {
    let caller = request
        .extensions()
        .get::<Caller>()
        .cloned()
        .unwrap_or_default();
    let Some(account) = caller.account.as_deref() else {
        return next.run(request).await;
    };
    let running = state.functions().map(|functions| functions.running());
    match check(running.as_deref(), account, request.uri().path()) {
        Ok(()) => next.run(request).await,
        Err(error) => error.into_response(),
    }
}

/// Whether `account` may reach `path`.
fn check(running: Option<&Config>, account: &str, path: &str) -> Result<(), ApiError> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let owner = |what: &str, name: &str, found: Option<Option<&str>>| match found {
        Some(owner) if owner == Some(account) => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no {what} named {name:?} in account {account:?}"),
        )),
    };
    let Some(config) = running else {
        return Ok(());
    };
    match segments.as_slice() {
        ["metrics"]
        | ["api", "health"]
        | ["api", "config", ..]
        | ["api", "change_retentions", ..] => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "{path} shows or changes the whole weft, so it takes an admin token (one without `account`); this token belongs to account {account:?}"
            ),
        )),
        [
            "api",
            "sinks" | "http_pull_consumers" | "sequin_streams",
            name,
            ..,
        ] => owner(
            "sink",
            name,
            config
                .sinks
                .iter()
                .find(|s| s.name == *name)
                .map(|s| s.account.as_deref()),
        ),
        ["api", "accounts", name, ..] => owner(
            "account",
            name,
            config.account(name).map(|a| Some(a.name.as_str())),
        ),
        ["api", "api_tokens", name, ..] => owner(
            "API token",
            name,
            config
                .api_tokens
                .iter()
                .find(|t| t.name == *name)
                .map(|t| t.account.as_deref()),
        ),
        ["api", "functions", name, ..] => owner(
            "function",
            name,
            config.function(name).map(|f| f.account.as_deref()),
        ),
        ["api", "postgres_databases", name, ..] => owner(
            "database",
            name,
            config.database(name).map(|d| d.account.as_deref()),
        ),
        ["api", "destinations", "http_endpoints", name, ..] => owner(
            "http endpoint",
            name,
            config.http_endpoint(name).map(|e| e.account.as_deref()),
        ),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        let dir = tempfile::tempdir().unwrap();
        Config::from_yaml(
            "accounts: [{name: a}, {name: b}]\n\
             databases:\n  - {name: db-b, account: b, url: postgres://h/x, slot: {name: s}, publication: {name: p}}\n\
             sinks:\n  - {name: sink-b, account: b, database: db-b, destination: {type: sequin_stream}}\n",
            dir.path(),
            &|_| None,
        )
        .unwrap()
    }

    #[test]
    fn an_account_reaches_its_own_resources_only() {
        let config = config();
        let status = |account: &str, path: &str| {
            check(Some(&config), account, path)
                .err()
                .map(|e| e.status().as_u16())
        };
        assert_eq!(status("b", "/api/sinks/sink-b/dead_letters"), None);
        assert_eq!(status("b", "/api/http_pull_consumers/sink-b/receive"), None);
        assert_eq!(status("b", "/api/postgres_databases/db-b"), None);
        assert_eq!(status("a", "/api/sinks/sink-b"), Some(404));
        assert_eq!(status("a", "/api/sequin_streams/sink-b/ack"), Some(404));
        assert_eq!(status("a", "/api/postgres_databases/db-b"), Some(404));
        assert_eq!(status("a", "/api/sinks/nope/pause"), Some(404));
        assert_eq!(status("b", "/api/config/export"), Some(403));
        assert_eq!(status("b", "/metrics"), Some(403));
        assert_eq!(
            status("a", "/api/sinks"),
            None,
            "lists are filtered by their handlers"
        );
    }
}
