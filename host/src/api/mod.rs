//! The HTTP APIs (axum): the Sequin-compatible pull API for now.
