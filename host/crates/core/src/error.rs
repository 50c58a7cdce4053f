//! Error text for people: an error with its causes.

/// `error` and each of its causes, joined by `: `. A library's top-level
/// text alone rarely says why (reqwest's "error sending request" hides
/// "connection refused"; tokio-postgres's "db error" hides Postgres's own
/// message).
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}
