//! Counts and times every API request by route pattern, method and status
//! ([`weft_core::metrics::API_REQUESTS`], [`weft_core::metrics::API_REQUEST_DURATION`]).
//! The route label is the matched pattern (`/api/sinks/{name}/backfills`),
//! never the raw path, so the label set stays bounded.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;

use weft_core::metrics::{API_REQUEST_DURATION, API_REQUESTS};

/// Middleware: runs the request, then records it.
pub async fn record(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |path| path.as_str().to_string());
    // Bounded: any other (extension) method counts as `other`.
    let method = match request.method().as_str() {
        m @ ("GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "HEAD" | "OPTIONS") => m,
        _ => "other",
    }
    .to_string();
    let response = next.run(request).await;
    let labels = [
        ("route", route),
        ("method", method),
        ("status", response.status().as_u16().to_string()),
    ];
    metrics::counter!(API_REQUESTS, &labels).increment(1);
    metrics::histogram!(API_REQUEST_DURATION, &labels).record(started.elapsed().as_secs_f64());
    response
}
