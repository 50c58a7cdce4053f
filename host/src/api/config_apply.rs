//! `POST /api/config/plan` and `POST /api/config/apply`, taking
//! `{"yaml": "..."}` as Sequin's do.
//!
//! Plan validates the proposed config exactly as `weft run` would and
//! answers the changes it makes (see [`crate::config::plan`]). Apply does
//! the same and, when something changes, writes the config file (a new
//! file renamed over the old, so a crash leaves one or the other) and
//! restarts weft's pipelines in-process with it: in-flight deliveries
//! finish, every stored message and slot position carries over, so nothing
//! is lost or reordered. Applying the config that runs changes nothing
//! (`"applied": false`).
//!
//! A config that changes only `databases:`, `functions:`, `sinks:`,
//! `http_endpoints:`, `accounts:` and `api_tokens:` entries is applied
//! without a restart, while every sink it does not touch keeps flowing:
//! the changed functions, the created or updated sinks and the databases
//! that start are loaded and checked first (any failure refuses the apply,
//! nothing changed); then the functions are swapped in, each sink between
//! two of its chain runs (see [`crate::hot_swap`]), the API takes the new
//! token set, sinks join, are replaced in or leave their pipelines between
//! two transactions, and a changed database's feed alone restarts (see
//! [`crate::server::live_sinks`]). The answer says `"restarted": false`,
//! names the swapped functions under `"hot_swapped"`, the sinks under
//! `"sinks"` and the database feeds under `"databases"`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, PullApiState};
use crate::config::plan::{PlannedChange, plan};
use crate::config::{Config, ConfigError, export::REDACTED};
use crate::hot_swap::FunctionRuntime;
use crate::server::live_sinks::{LivePlan, LiveSinks};

/// The request body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ConfigBody {
    /// The proposed config, sequin.yml layout.
    yaml: String,
}

/// `POST /api/config/plan`: `{"changes": [...]}`.
#[utoipa::path(post, path = "/api/config/plan", tag = "config", summary = "The changes a config would make", request_body = ConfigBody, responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::api::error::ApiErrorBody)))]
pub(super) async fn plan_config(
    State(state): State<PullApiState>,
    Json(body): Json<ConfigBody>,
) -> Result<Json<Value>, ApiError> {
    let (_, changes, _) = checked_plan(&state, &body.yaml)?;
    Ok(Json(json!({ "changes": changes })))
}

/// `POST /api/config/apply`: `{"changes": [...], "applied": bool}`.
#[utoipa::path(post, path = "/api/config/apply", tag = "config", summary = "Apply a config (hot swap when only functions change)", request_body = ConfigBody, responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::api::error::ApiErrorBody)))]
pub(super) async fn apply_config(
    State(state): State<PullApiState>,
    Json(body): Json<ConfigBody>,
) -> Result<Json<Value>, ApiError> {
    apply_edit(&state, |_| Ok(body.yaml)).await.map(Json)
}

/// Applies the config `edit` makes of the running config's text (as
/// written), one apply at a time; answers the apply's JSON.
pub(super) async fn apply_edit(
    state: &PullApiState,
    edit: impl FnOnce(&str) -> Result<String, ApiError>,
) -> Result<Value, ApiError> {
    let functions = state.functions();
    // One apply at a time, from the plan to the swap or restart.
    let serialised = functions.clone();
    let _turn = match &serialised {
        Some(functions) => Some(functions.apply_turn().await),
        None => None,
    };
    let yaml = edit(&state.config_text().unwrap_or_default())?;
    let (path, changes, config) = checked_plan(state, &yaml)?;
    if changes.is_empty() {
        return Ok(json!({ "changes": changes, "applied": false }));
    }
    if let (Some(functions), Some(live_sinks)) = (functions, state.live_sinks())
        && let Some(ops) = live_sinks.plan(&functions.running(), &config)
    {
        return apply_live(
            state,
            (functions, live_sinks),
            ops,
            config,
            (path, yaml),
            changes,
        )
        .await;
    }
    write_config(&path, &yaml)?;
    tracing::info!(changes = changes.len(), file = %path.display(), "config applied through the API; restarting the pipelines with it");
    state.request_reload();
    Ok(json!({ "changes": changes, "applied": true, "restarted": true }))
}

/// Applies `config` (the file at `path` with the text `yaml`) to the
/// running weft without a restart: loads every changed function, created
/// or updated sink and starting database first (any failure refuses the
/// apply, nothing changed), writes the file, then swaps the functions in,
/// takes the new API tokens, and creates, updates and deletes the sinks
/// and stops and starts the database feeds `plan` names.
async fn apply_live(
    state: &PullApiState,
    (functions, live_sinks): (FunctionRuntime, LiveSinks),
    plan: LivePlan,
    config: Config,
    (path, yaml): (std::path::PathBuf, String),
    changes: Vec<PlannedChange>,
) -> Result<Value, ApiError> {
    let running = functions.running();
    let refused = |error: String| {
        crate::server::restore_cpu_shares(&running);
        ApiError::bad_param("yaml", format!("{error}; nothing was applied"))
    };
    let tokens = config.api_tokens.clone();
    let sinks = live_sinks.prepare(&config, plan).await.map_err(refused)?;
    let prepared = tokio::task::spawn_blocking({
        let functions = functions.clone();
        move || functions.prepare(config)
    })
    .await
    .map_err(|error| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the function loading task failed: {error}"),
        )
    })?
    .map_err(|error| refused(format!("a changed function does not load: {error}")))?;
    write_config(&path, &yaml).inspect_err(|_| crate::server::restore_cpu_shares(&running))?;
    state.set_config_text(yaml);
    let swapped_sinks = prepared.sinks();
    let swapped = prepared.functions().to_vec();
    functions.commit(prepared);
    state.set_api_tokens(super::auth::ApiTokens::new(tokens));
    for sink in &swapped_sinks {
        // A quarantine is about the function that was just replaced.
        if let Some(breaker) = state.breaker(sink) {
            breaker.reset();
        }
    }
    let sink_changes = match live_sinks.commit(sinks).await {
        Ok(sink_changes) => sink_changes,
        Err(error) => {
            tracing::warn!(%error, file = %path.display(), "config applied through the API, but a sink change could not be made in place; restarting the pipelines with it");
            state.request_reload();
            return Ok(json!({ "changes": changes, "applied": true, "restarted": true }));
        }
    };
    tracing::info!(functions = ?swapped, sinks = ?sink_changes, file = %path.display(), "config applied through the API without a restart");
    Ok(json!({
        "changes": changes,
        "applied": true,
        "restarted": false,
        "hot_swapped": { "functions": swapped, "sinks": swapped_sinks },
        "sinks": sink_changes,
        "databases": {
            "stopped": sink_changes.databases_stopped,
            "started": sink_changes.databases_started,
        },
    }))
}

/// Writes the applied config file, or answers why it could not.
fn write_config(path: &std::path::Path, yaml: &str) -> Result<(), ApiError> {
    write_atomically(path, yaml).map_err(|error| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "cannot write the config file {}: {error}; nothing was applied",
                path.display()
            ),
        )
    })
}

/// The config file, the changes `yaml` makes to it and the config it
/// holds (plugin references resolved), once `yaml` is a valid config.
fn checked_plan(
    state: &PullApiState,
    yaml: &str,
) -> Result<(std::path::PathBuf, Vec<PlannedChange>, Config), ApiError> {
    let (path, current) = state.config_file().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "this weft was started without a config file, so there is none to plan against or apply to",
        )
    })?;
    if yaml.contains(REDACTED) {
        return Err(ApiError::bad_param(
            "yaml",
            format!(
                "the config holds {REDACTED:?} in place of secrets (as `config export` writes it); put the secrets, or `${{VAR}}` references to them, back first"
            ),
        ));
    }
    let base_dir = path
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let mut config = Config::from_yaml(yaml, base_dir, &|name| std::env::var(name).ok())
        .map_err(invalid_config)?;
    if let Some(functions) = state.functions() {
        functions.registry().resolve(&mut config).map_err(|problems| {
            problems.into_iter().fold(
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "the config names plugins that cannot be used; nothing was applied (see validation_errors)",
                ),
                |error, (i, problem)| {
                    error.with_validation(&format!("functions[{i}].plugin"), vec![problem])
                },
            )
        })?;
    }
    let changes = plan(&current, yaml).map_err(|error| ApiError::bad_param("yaml", error))?;
    Ok((path, changes, config))
}

/// A 400 listing every problem under its config path.
fn invalid_config(error: ConfigError) -> ApiError {
    let mut api_error = ApiError::new(
        StatusCode::BAD_REQUEST,
        "the config is not valid; nothing was applied (see validation_errors)",
    );
    for issue in error.issues() {
        let at = issue
            .location
            .map(|l| format!(" (line {}, column {})", l.line, l.column))
            .unwrap_or_default();
        let key = if issue.path.is_empty() {
            "yaml"
        } else {
            &issue.path
        };
        api_error = api_error.with_validation(key, vec![format!("{}{at}", issue.message)]);
    }
    api_error
}

/// Writes `text` to `path` through a temporary file in the same directory,
/// synced, then renamed over it.
fn write_atomically(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "config".into());
    let temporary = path.with_file_name(format!(".{name}.applying"));
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)
}
