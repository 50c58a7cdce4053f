//! The error body every API answers with.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

/// The error body's shape, for the OpenAPI document.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // only its schema is used
pub(crate) struct ApiErrorBody {
    /// What went wrong and what to do.
    summary: String,
    /// Per parameter, the list of what is wrong with it.
    validation_errors: std::collections::BTreeMap<String, Vec<String>>,
}

/// An HTTP error answered as `{"summary": "...", "validation_errors": {...}}`,
/// the shape of Sequin's API errors. `validation_errors` maps a parameter
/// to the list of what is wrong with it.
///
/// Boxed: errors are rare and results stay small on the happy path.
#[derive(Debug, Clone)]
pub struct ApiError(Box<Body>);

#[derive(Debug, Clone)]
struct Body {
    status: StatusCode,
    summary: String,
    validation_errors: Map<String, Value>,
    extra: Map<String, Value>,
    retry_after_secs: Option<u32>,
}

impl ApiError {
    /// An error with `status` and a human-readable `summary`.
    pub fn new(status: StatusCode, summary: impl Into<String>) -> ApiError {
        ApiError(Box::new(Body {
            status,
            summary: summary.into(),
            validation_errors: Map::new(),
            extra: Map::new(),
            retry_after_secs: None,
        }))
    }

    /// A 400 about one parameter: `summary` also lands under `validation_errors.<param>`.
    pub fn bad_param(param: &str, summary: impl Into<String>) -> ApiError {
        let summary = summary.into();
        ApiError::new(StatusCode::BAD_REQUEST, summary.clone())
            .with_validation(param, vec![summary])
    }

    /// Adds what is wrong with `param`.
    pub fn with_validation(mut self, param: &str, problems: Vec<String>) -> ApiError {
        self.0
            .validation_errors
            .insert(param.to_string(), json!(problems));
        self
    }

    /// Adds a machine-readable top-level field next to the summary.
    pub fn with_field(mut self, key: &str, value: Value) -> ApiError {
        self.0.extra.insert(key.to_string(), value);
        self
    }

    /// Tells the client to retry after `secs` seconds (`Retry-After`).
    pub fn with_retry_after(mut self, secs: u32) -> ApiError {
        self.0.retry_after_secs = Some(secs);
        self
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.0.status
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.0.summary, self.0.status)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let error = *self.0;
        let mut body = Map::new();
        body.insert("summary".into(), Value::String(error.summary));
        body.insert(
            "validation_errors".into(),
            Value::Object(error.validation_errors),
        );
        body.extend(error.extra);
        let mut response = (error.status, axum::Json(Value::Object(body))).into_response();
        if let Some(secs) = error.retry_after_secs {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
