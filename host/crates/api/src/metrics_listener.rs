//! The Prometheus listener: `GET /metrics` on a port of its own (default
//! 8376), optionally behind HTTP basic auth, so that a scraper needs
//! neither the API's address nor its credentials.

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine as _;
use subtle::ConstantTimeEq;

/// The user and password a scraper must present.
#[derive(Clone)]
pub struct BasicAuth {
    /// The user name.
    pub username: String,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BasicAuth")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl BasicAuth {
    /// Whether `headers` carry these credentials (compared in constant time).
    fn admits(&self, headers: &HeaderMap) -> bool {
        let Some(encoded) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Basic "))
        else {
            return false;
        };
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
            return false;
        };
        let expected = format!("{}:{}", self.username, self.password);
        decoded.ct_eq(expected.as_bytes()).into()
    }
}

/// The router of the metrics listener.
pub fn router(auth: Option<BasicAuth>) -> Router {
    Router::new().route(
        "/metrics",
        get(move |headers: HeaderMap| async move {
            if let Some(auth) = &auth
                && !auth.admits(&headers)
            {
                return (
                    StatusCode::UNAUTHORIZED,
                    [(header::WWW_AUTHENTICATE, "Basic realm=\"weft metrics\"")],
                    "the metrics need basic auth: the user and password weft was started with (WEFT_METRICS_USERNAME, WEFT_METRICS_PASSWORD)\n",
                )
                    .into_response();
            }
            render().await
        }),
    )
}

/// Every metric in the Prometheus text format, as a response. Rendering
/// reads queue depths from the store, so it runs off the async workers.
pub(super) async fn render() -> Response {
    let text = match tokio::task::spawn_blocking(weft_core::metrics::render).await {
        Ok(text) => text,
        Err(error) => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot render the metrics: {error}\n"),
            )
                .into_response();
        }
    };
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, value.parse().unwrap());
        headers
    }

    #[test]
    fn only_the_configured_credentials_are_admitted() {
        let auth = BasicAuth {
            username: "prom".into(),
            password: "s3cret".into(),
        };
        let basic = |pair: &str| {
            headers(&format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            ))
        };
        assert!(auth.admits(&basic("prom:s3cret")));
        assert!(!auth.admits(&basic("prom:s3cre")));
        assert!(!auth.admits(&basic("prom:s3cret2")));
        assert!(!auth.admits(&headers("Bearer prom:s3cret")));
        assert!(!auth.admits(&headers("Basic !!!")));
        assert!(!auth.admits(&HeaderMap::new()));
        assert!(!format!("{auth:?}").contains("s3cret"));
    }
}
