//! The HTTP APIs (axum): the Sequin-compatible pull API, sinks' dead
//! letters, webhook sources' ingress, and health.
//!
//! [`router`] builds the routes, [`serve`] runs them until shutdown. Errors
//! use the management API's shape, `{"summary", "validation_errors"}`, see
//! [`ApiError`].
//!
//! This layer serves what the layers below hold (the store, the running
//! sinks' handles, the function runtime, the backfill launcher) and asks
//! the running weft for everything else through the [`Controller`] trait,
//! which the server implements. It may import every layer but the server.

mod accounts;
pub mod auth;
mod backfills;
mod canary;
mod change_retentions;
mod config_apply;
mod config_edit;
mod config_splice;
mod control;
mod crud;
mod dead_letters;
mod error;
mod functions;
pub mod metrics_listener;
mod openapi;
mod params;
mod pause;
mod plugins;
mod pull;
mod quarantine;
mod request_metrics;
mod resources;
mod tenancy;
mod test_connection;
mod tokens;
mod webhook_sources;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use weft_pipeline::backfill::BackfillLauncher;
use weft_pipeline::hot_swap::FunctionRuntime;
use weft_pipeline::webhook_source::WebhookIngress;
use weft_pipeline::{Breaker, SinkHandles};
use weft_sinks::config::change_retention::ChangeRetentionConfig;
use weft_sinks::pause::PauseSwitch;
use weft_sinks::sequin_stream::SequinStream;
use weft_store::Store;

pub use control::{
    Applied, ApplyError, ConfigEdit, Controller, DatabasesChanged, HotSwapped, SinksChanged,
};
pub use error::ApiError;

/// What the API serves, built once when weft starts: the store, the
/// running sinks' handles and, in a weft that runs pipelines, the running
/// weft itself. Cheap to clone.
#[derive(Clone)]
pub struct ApiState {
    store: Store,
    sinks: SinkHandles,
    running: Option<Running>,
    shutdown: CancellationToken,
}

/// What a weft that runs pipelines serves beyond its stored messages.
#[derive(Clone)]
pub struct Running {
    /// The running weft: config, tokens, plans and applies.
    pub controller: Arc<dyn Controller>,
    /// The running functions and the plugin registry.
    pub functions: FunctionRuntime,
    /// Backfills of the running sinks.
    pub backfills: BackfillLauncher,
    /// The webhook sources weft accepts requests for, by name.
    pub webhook_sources: HashMap<String, WebhookIngress>,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("runs_pipelines", &self.running.is_some())
            .finish_non_exhaustive()
    }
}

impl ApiState {
    /// Serves the messages in `store` to the sinks `sinks` knows and, when
    /// `running` is set, the running weft's config, functions, backfills and
    /// webhook sources. Long-polling receives return early (possibly empty)
    /// once `shutdown` is cancelled, so that a graceful shutdown does not
    /// wait for their `wait_for`; pass the same token to [`serve`].
    pub fn new(
        store: Store,
        sinks: SinkHandles,
        running: Option<Running>,
        shutdown: CancellationToken,
    ) -> ApiState {
        ApiState {
            store,
            sinks,
            running,
            shutdown,
        }
    }

    /// The pull sink called `id_or_name`, or whose consumer id (the
    /// `metadata.consumer.id` of its messages) is `id_or_name`, if served.
    pub fn sink(&self, id_or_name: &str) -> Option<SequinStream> {
        self.sinks.pull(id_or_name)
    }

    /// The webhook source called `name`, if served.
    pub fn webhook_source(&self, name: &str) -> Option<WebhookIngress> {
        self.running.as_ref()?.webhook_sources.get(name).cloned()
    }

    /// The names of the webhook sources served, sorted.
    pub fn webhook_source_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .running
            .iter()
            .flat_map(|running| running.webhook_sources.keys().cloned())
            .collect();
        names.sort();
        names
    }

    /// The backfill launcher, in a weft that runs pipelines.
    pub fn backfills(&self) -> Option<BackfillLauncher> {
        self.running
            .as_ref()
            .map(|running| running.backfills.clone())
    }

    /// The pause switch of the sink `name`.
    fn pause_switch(&self, name: &str) -> Option<PauseSwitch> {
        self.sinks.pause_switch(name)
    }

    /// The tokens the API accepts; none (an open API) in a weft that runs
    /// no pipelines.
    fn api_tokens(&self) -> auth::ApiTokens {
        self.running
            .as_ref()
            .map(|running| running.controller.api_tokens())
            .unwrap_or_default()
    }

    /// The running weft, or a 409 in a weft that runs no pipelines.
    fn controller(&self) -> Result<&dyn Controller, ApiError> {
        self.running
            .as_ref()
            .map(|running| running.controller.as_ref())
            .ok_or_else(no_pipelines)
    }

    /// The config file and its text as weft runs it, when it has one.
    fn config_file(&self) -> Option<(std::path::PathBuf, String)> {
        self.running.as_ref()?.controller.config_file()
    }

    /// The change retentions served.
    fn change_retentions(&self) -> Vec<ChangeRetentionConfig> {
        self.functions()
            .map(|functions| functions.running().change_retentions.clone())
            .unwrap_or_default()
    }

    /// The running functions and the plugin registry; `None` in a weft
    /// serving no pipelines (tests of the bare API).
    fn functions(&self) -> Option<FunctionRuntime> {
        self.running
            .as_ref()
            .map(|running| running.functions.clone())
    }

    /// The running functions, or a 409 in a weft that runs no pipelines.
    fn running_functions(&self) -> Result<FunctionRuntime, ApiError> {
        self.functions().ok_or_else(no_pipelines)
    }

    /// Applies the config `edit` makes of the running config's text.
    async fn apply(
        &self,
        edit: impl FnOnce(&str) -> Result<String, ApiError> + Send,
    ) -> Result<Applied, ApiError> {
        Ok(self.controller()?.apply(Box::new(edit)).await?)
    }

    /// The running config as JSON, secrets redacted; `None` without a
    /// config file.
    fn exported_config(&self) -> Result<Option<serde_json::Value>, ApiError> {
        let Some(text) = self.config_text() else {
            return Ok(None);
        };
        let yaml = redacted(&text)?;
        serde_yaml_ng::from_str(&yaml).map(Some).map_err(|error| {
            ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot read the running config: {error}"),
            )
        })
    }

    /// The config file as written, when weft runs one.
    fn config_text(&self) -> Option<String> {
        self.config_file().map(|(_, text)| text)
    }

    /// The quarantine breaker of the sink `name`, if known.
    pub fn breaker(&self, name: &str) -> Option<Breaker> {
        self.sinks.breaker(name)
    }

    /// Whether `name` is a sink this API serves (pull or push).
    pub fn knows_sink(&self, name: &str) -> bool {
        self.sinks.knows(name)
    }

    /// Wakes the long-polling receivers, or the delivery worker, of the
    /// sink `name`: messages were stored for it.
    pub fn wake(&self, name: &str) {
        self.sinks.wake(name);
    }
}

/// The answer of a management route in a weft that runs no pipelines.
fn no_pipelines() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::CONFLICT,
        "this weft runs no pipelines, so it has no plugin registry or functions to manage",
    )
}

/// The pull API under both `/api/http_pull_consumers/{name}/` and
/// `/api/sequin_streams/{name}/`, dead letters under
/// `/api/sinks/{sink}/dead_letters`, backfills under
/// `/api/sinks/{sink}/backfills`, a sink's quarantine at
/// `/api/sinks/{sink}/quarantine`, webhook sources at
/// `POST /api/webhook_sources/{name}`, plus `GET /health` (liveness),
/// `GET /health/ready` (readiness: every replication slot streams),
/// `GET /api/health` (each entity's checks, see [`weft_core::health`]) and
/// `GET /api/config/export` (the running config, secrets redacted),
/// `GET /api/change_retentions[/{name}]`, the read-only management
/// resources `GET /api/sinks`, `/api/postgres_databases` and
/// `/api/destinations/http_endpoints` (see `resources`) and
/// `GET /metrics` (Prometheus text format).
pub fn router(state: ApiState) -> Router {
    let (documented, document) = OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(health))
        .routes(routes!(readiness))
        .routes(routes!(metrics))
        .routes(routes!(entity_health))
        .routes(routes!(export_config))
        .routes(routes!(config_apply::plan_config))
        .routes(routes!(config_apply::apply_config))
        .routes(routes!(resources::sinks, crud::create_sink))
        .routes(routes!(
            resources::sink,
            crud::replace_sink,
            crud::delete_sink
        ))
        .routes(routes!(resources::databases, crud::create_database))
        .routes(routes!(
            resources::database,
            crud::replace_database,
            crud::delete_database
        ))
        .routes(routes!(test_connection::test_connection))
        .routes(routes!(
            resources::http_endpoints,
            crud::create_http_endpoint
        ))
        .routes(routes!(
            resources::http_endpoint,
            crud::replace_http_endpoint,
            crud::delete_http_endpoint
        ))
        .routes(without_body_limit(routes!(plugins::list, plugins::upload)))
        .routes(routes!(plugins::versions))
        .routes(routes!(plugins::get, plugins::delete))
        .routes(routes!(functions::list, crud::create_function))
        .routes(routes!(
            functions::get,
            crud::replace_function,
            crud::delete_function
        ))
        .routes(routes!(canary::report, canary::start, canary::stop))
        .routes(routes!(canary::promote))
        .routes(routes!(canary::rollback))
        .routes(routes!(accounts::list, crud::create_account))
        .routes(routes!(
            accounts::get,
            crud::replace_account,
            crud::delete_account
        ))
        .routes(routes!(tokens::list, tokens::create))
        .routes(routes!(tokens::delete))
        .routes(routes!(change_retentions::list))
        .routes(routes!(change_retentions::get))
        .routes(routes!(dead_letters::list))
        .routes(routes!(dead_letters::replay_many))
        .routes(routes!(dead_letters::get, dead_letters::discard))
        .routes(routes!(dead_letters::replay_one))
        .routes(routes!(backfills::list, backfills::create))
        .routes(routes!(backfills::get, backfills::cancel))
        .routes(routes!(backfills::pause))
        .routes(routes!(backfills::resume))
        .routes(routes!(pause::pause))
        .routes(routes!(pause::resume))
        .routes(routes!(quarantine::get, quarantine::reset))
        // The handler enforces each source's own `max_body_bytes`.
        .routes(without_body_limit(routes!(webhook_sources::post)))
        .routes(routes!(pull::receive))
        .routes(routes!(pull::ack))
        .routes(routes!(pull::nack))
        .split_for_parts();
    let document =
        Arc::new(serde_json::to_value(&document).expect("the OpenAPI document serializes"));
    documented
        .route(
            "/api/openapi.json",
            get(move || {
                let document = Arc::clone(&document);
                async move { axum::Json((*document).clone()) }
            }),
        )
        // Sequin's older name of the pull routes, the same handlers.
        .nest(
            "/api/sequin_streams/{name}",
            Router::new()
                .route("/receive", get(pull::receive).post(pull::receive))
                .route("/ack", post(pull::ack))
                .route("/nack", post(pull::nack)),
        )
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            tenancy::scope_to_account,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ))
        .layer(axum::middleware::from_fn(request_metrics::record))
        .with_state(state)
}

/// `routes` without axum's default 2 MB request body limit: their handlers
/// enforce a limit of their own.
fn without_body_limit(
    routes: utoipa_axum::router::UtoipaMethodRouter<ApiState>,
) -> utoipa_axum::router::UtoipaMethodRouter<ApiState> {
    let (schemas, paths, method_router) = routes;
    (
        schemas,
        paths,
        method_router.layer(axum::extract::DefaultBodyLimit::disable()),
    )
}

/// Serves `router` on `listener` until `shutdown` is cancelled, then waits
/// for open requests to finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}

#[utoipa::path(get, path = "/health", tag = "probes", summary = "Liveness", responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = error::ApiErrorBody)))]
async fn health() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({"status": "ok"}))
}

/// Readiness: `200 {"status": "ready"}` once every replication slot
/// streams; `503` with the slots still waiting (and why) before that, or
/// while one is reconnecting.
#[utoipa::path(get, path = "/health/ready", tag = "probes", summary = "Readiness: every replication slot streams", responses((status = 200, description = "Ready", body = Object), (status = 503, description = "Slots still waiting", body = Object)))]
async fn readiness() -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let waiting: Vec<serde_json::Value> = weft_core::health::global()
        .snapshot()
        .into_iter()
        .filter(|e| e.kind == weft_core::health::EntityKind::Slot)
        .filter_map(|e| {
            e.checks
                .iter()
                .find(|c| c.id == weft_source::REPLICATION_CHECK)
                .map(|c| serde_json::json!({"slot": e.name, "reason": c.message}))
        })
        .collect();
    if waiting.is_empty() {
        axum::Json(serde_json::json!({"status": "ready"})).into_response()
    } else {
        (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(serde_json::json!({"status": "not_ready", "waiting_for": waiting})),
        )
            .into_response()
    }
}

/// Every entity's health; the overall status is the worst of them.
#[utoipa::path(get, path = "/api/health", tag = "health", summary = "Health checks of every entity", responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = error::ApiErrorBody)))]
async fn entity_health() -> axum::Json<serde_json::Value> {
    let entities = weft_core::health::global().snapshot();
    let status = entities
        .iter()
        .map(|e| e.status)
        .max()
        .unwrap_or(weft_core::health::Status::Healthy);
    axum::Json(serde_json::json!({"status": status, "entities": entities}))
}

/// `{"yaml": ...}`: the running config with every secret redacted. The API
/// never shows secrets (use `weft config export --show-secrets` on the
/// host instead).
#[utoipa::path(get, path = "/api/config/export", tag = "config", summary = "The running config, secrets redacted", responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = error::ApiErrorBody)))]
async fn export_config(
    axum::extract::State(state): axum::extract::State<ApiState>,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    let text = state.config_text().ok_or_else(|| {
        ApiError::new(
            axum::http::StatusCode::NOT_FOUND,
            "this weft was started without a config file, so there is nothing to export",
        )
    })?;
    Ok(axum::Json(serde_json::json!({ "yaml": redacted(&text)? })))
}

/// The config `text` as YAML with every secret redacted.
fn redacted(text: &str) -> Result<String, ApiError> {
    weft_sinks::config::export::export(text, weft_sinks::config::export::Secrets::Redact, &|name| {
        std::env::var(name).ok()
    })
    .map_err(|error| {
        ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot export the running config: {error}"),
        )
    })
}

#[utoipa::path(get, path = "/metrics", tag = "probes", summary = "Prometheus metrics", responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain")))]
async fn metrics() -> axum::response::Response {
    metrics_listener::render().await
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::NOT_FOUND,
        format!(
            "no route for {}; the pull API serves /api/sequin_streams/{{name}}/receive, /ack and /nack (also under /api/http_pull_consumers/)",
            uri.path()
        ),
    )
}

#[cfg(test)]
mod tests;
