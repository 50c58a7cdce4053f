//! `POST /api/postgres_databases/{name}/test_connection`, as in Sequin:
//! connects as the database entry says and checks what replication needs,
//! answering `{"success": true, "checks": [...]}` or `{"success": false,
//! "reason": "..."}` with the first problem and how to fix it.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::{ApiError, ApiState};
use weft_postgres::PgConnectOptions;
use weft_sinks::config::DatabaseConfig;

/// `POST /api/postgres_databases/{name}/test_connection`.
#[utoipa::path(post, path = "/api/postgres_databases/{name}/test_connection", tag = "postgres_databases", summary = "Check that weft can connect and replicate", params(("name" = String, Path, description = "The database")), responses((status = 200, description = "{\"success\": bool, ...}", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::error::ApiErrorBody)))]
pub(super) async fn test_connection(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let running = state.running_functions()?.running();
    let database = running.database(&name).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no database named {name:?}; GET /api/postgres_databases lists them"),
        )
    })?;
    Ok(Json(match check(database).await {
        Ok(checks) => json!({ "success": true, "checks": checks }),
        Err(reason) => json!({ "success": false, "reason": reason }),
    }))
}

/// The checks that passed, or the first problem.
async fn check(database: &DatabaseConfig) -> Result<Vec<&'static str>, String> {
    let options =
        PgConnectOptions::try_from(database.connection()).map_err(|error| error.to_string())?;
    let (client, _connection) = options
        .connect_query()
        .await
        .map_err(|error| weft_core::error::with_causes(&error))?;
    let mut passed = vec!["connect"];
    weft_postgres::check_server(&client, &options.user)
        .await
        .map_err(|error| weft_core::error::with_causes(&error))?;
    passed.push("wal_level and REPLICATION privilege");

    let slot = &database.slot.name;
    let plugin: Option<String> = client
        .query_opt(
            "SELECT plugin FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
            &[slot],
        )
        .await
        .map_err(|error| format!("cannot look up slot {slot}: {error}"))?
        .map(|row| row.get(0));
    match plugin.as_deref() {
        Some("pgoutput") => passed.push("replication slot"),
        Some(other) => {
            return Err(format!(
                "replication slot {slot} uses the {other} plugin; weft needs pgoutput: drop it or name another slot"
            ));
        }
        None if database.slot.create_if_not_exists => {
            passed.push("replication slot (to be created)")
        }
        None => {
            return Err(format!(
                "replication slot {slot} does not exist: run SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput'); or set slot.create_if_not_exists"
            ));
        }
    }
    let publication = &database.publication.name;
    let exists = client
        .query_opt(
            "SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = $1",
            &[publication],
        )
        .await
        .map_err(|error| format!("cannot look up publication {publication}: {error}"))?
        .is_some();
    match (exists, database.publication.create_if_not_exists) {
        (true, _) => passed.push("publication"),
        (false, true) => passed.push("publication (to be created)"),
        (false, false) => {
            return Err(format!(
                "publication {publication} does not exist: run CREATE PUBLICATION {publication} FOR ALL TABLES; (or for the sinks' tables) or set publication.create_if_not_exists"
            ));
        }
    }
    Ok(passed)
}
