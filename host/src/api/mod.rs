//! The HTTP APIs (axum): the Sequin-compatible pull API, sinks' dead
//! letters, webhook sources' ingress, and health.
//!
//! [`router`] builds the routes, [`serve`] runs them until shutdown. Errors
//! use the management API's shape, `{"summary", "validation_errors"}`, see
//! [`ApiError`].

mod accounts;
pub mod auth;
mod backfills;
mod canary;
mod change_retentions;
mod config_apply;
mod config_edit;
mod config_splice;
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
use std::sync::{Arc, RwLock};

use axum::Router;
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::backfill::BackfillLauncher;
use crate::config::change_retention::ChangeRetentionConfig;
use crate::hot_swap::FunctionRuntime;
use crate::message::ConsumerRef;
use crate::pipeline::Breaker;
use crate::sinks::delivery::DeliveryWaker;
use crate::sinks::pause::PauseSwitch;
use crate::sinks::sequin_stream::{SequinStream, SequinStreamSettings};
use crate::store::Store;
use crate::webhook_source::WebhookIngress;

pub use error::ApiError;

/// What the API serves: the store, the Sequin Stream sinks it knows, and
/// the push sinks (webhook) whose delivery workers it can wake. Cheap to
/// clone; sinks can be added and removed while serving.
#[derive(Clone, Debug)]
pub struct PullApiState {
    store: Store,
    sinks: Arc<RwLock<HashMap<String, SequinStream>>>,
    push_sinks: Arc<RwLock<HashMap<String, DeliveryWaker>>>,
    breakers: Arc<RwLock<HashMap<String, Breaker>>>,
    backfills: Arc<RwLock<Option<BackfillLauncher>>>,
    config_text: Arc<RwLock<Option<String>>>,
    config_path: Arc<RwLock<Option<std::path::PathBuf>>>,
    reload: Arc<std::sync::atomic::AtomicBool>,
    change_retentions: Arc<RwLock<Vec<ChangeRetentionConfig>>>,
    api_tokens: Arc<RwLock<auth::ApiTokens>>,
    pauses: Arc<RwLock<HashMap<String, PauseSwitch>>>,
    webhook_sources: Arc<RwLock<HashMap<String, WebhookIngress>>>,
    functions: Arc<RwLock<Option<FunctionRuntime>>>,
    live_sinks: Arc<RwLock<Option<crate::server::live_sinks::LiveSinks>>>,
    shutdown: CancellationToken,
}

impl PullApiState {
    /// Serves the messages in `store`. Long-polling receives return early
    /// (possibly empty) once `shutdown` is cancelled, so that a graceful
    /// shutdown does not wait for their `wait_for`; pass the same token to [`serve`].
    pub fn new(store: Store, shutdown: CancellationToken) -> PullApiState {
        PullApiState {
            store,
            sinks: Arc::default(),
            push_sinks: Arc::default(),
            breakers: Arc::default(),
            backfills: Arc::default(),
            config_text: Arc::default(),
            config_path: Arc::default(),
            reload: Arc::default(),
            change_retentions: Arc::default(),
            api_tokens: Arc::default(),
            pauses: Arc::default(),
            webhook_sources: Arc::default(),
            functions: Arc::default(),
            live_sinks: Arc::default(),
            shutdown,
        }
    }

    /// Serves the Sequin Stream sink `name` with `settings`, replacing any
    /// sink of that name, and returns its handle; call
    /// [`SequinStream::wake`] on it after appending messages for the sink.
    pub fn add_sink(&self, name: &str, settings: SequinStreamSettings) -> SequinStream {
        let stream = SequinStream::new(name, self.store.clone(), settings);
        self.sinks
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(name.to_string(), stream.clone());
        stream
    }

    /// Stops serving the sink `name`; its stored messages stay in the store.
    pub fn remove_sink(&self, name: &str) -> Option<SequinStream> {
        self.sinks
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(name)
    }

    /// The sink called `id_or_name`, or whose consumer id (the
    /// `metadata.consumer.id` of its messages) is `id_or_name`, if served.
    pub fn sink(&self, id_or_name: &str) -> Option<SequinStream> {
        let sinks = self
            .sinks
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(stream) = sinks.get(id_or_name) {
            return Some(stream.clone());
        }
        let id = uuid::Uuid::parse_str(id_or_name).ok()?.to_string();
        sinks
            .iter()
            .find(|(name, _)| *ConsumerRef::for_sink(name).id == *id)
            .map(|(_, stream)| stream.clone())
    }

    /// Stops serving the sink `name` in every way: its pull stream or
    /// delivery waker, pause switch and quarantine breaker (a sink deleted
    /// while weft runs).
    pub fn forget_sink(&self, name: &str) {
        self.remove_sink(name);
        self.remove_push_sink(name);
        self.pauses
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(name);
        self.breakers
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(name);
    }

    /// Forgets the push sink `name`'s delivery waker.
    pub fn remove_push_sink(&self, name: &str) {
        self.push_sinks
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(name);
    }

    /// Knows the push sink `name`, whose delivery worker `waker` wakes.
    pub fn add_push_sink(&self, name: &str, waker: DeliveryWaker) {
        self.push_sinks
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(name.to_string(), waker);
    }

    /// Accepts requests for the webhook source `ingress` describes.
    pub fn add_webhook_source(&self, ingress: WebhookIngress) {
        self.webhook_sources
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(ingress.config().name.clone(), ingress);
    }

    /// The webhook source called `name`, if served.
    pub fn webhook_source(&self, name: &str) -> Option<WebhookIngress> {
        self.webhook_sources
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(name)
            .cloned()
    }

    /// The names of the webhook sources served, sorted.
    pub fn webhook_source_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .webhook_sources
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// Serves backfills through `launcher`.
    pub fn set_backfills(&self, launcher: BackfillLauncher) {
        *self
            .backfills
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(launcher);
    }

    /// The backfill launcher, once set.
    pub fn backfills(&self) -> Option<BackfillLauncher> {
        self.backfills
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Lets the API pause and resume the sink `name` through `switch`.
    pub fn add_pause_switch(&self, name: &str, switch: PauseSwitch) {
        self.pauses
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(name.to_string(), switch);
    }

    /// The pause switch of the sink `name`.
    fn pause_switch(&self, name: &str) -> Option<PauseSwitch> {
        self.pauses
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(name)
            .cloned()
    }

    /// Asks every request (but probes and webhook-source posts) for one
    /// of `tokens`; see [`auth`].
    pub fn set_api_tokens(&self, tokens: auth::ApiTokens) {
        *self
            .api_tokens
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = tokens;
    }

    /// The tokens the API accepts.
    fn api_tokens(&self) -> auth::ApiTokens {
        self.api_tokens
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Plans and applies configs against the file at `path`
    /// (`/api/config/plan`, `/api/config/apply`).
    pub fn set_config_path(&self, path: std::path::PathBuf) {
        *self
            .config_path
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(path);
    }

    /// The config file and its text as weft runs it, when it has one.
    fn config_file(&self) -> Option<(std::path::PathBuf, String)> {
        let path = self
            .config_path
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()?;
        Some((path, self.config_text()?))
    }

    /// Stops everything, as a shutdown does, so that weft starts again
    /// with the config file (see [`PullApiState::reload_requested`]).
    fn request_reload(&self) {
        self.reload.store(true, std::sync::atomic::Ordering::SeqCst);
        self.shutdown.cancel();
    }

    /// Whether the API asked for a restart with the (applied) config file.
    pub fn reload_requested(&self) -> bool {
        self.reload.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Serves `retentions` at `/api/change_retentions`.
    pub fn set_change_retentions(&self, retentions: Vec<ChangeRetentionConfig>) {
        *self
            .change_retentions
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = retentions;
    }

    /// The change retentions served.
    fn change_retentions(&self) -> Vec<ChangeRetentionConfig> {
        self.change_retentions
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Serves the plugin registry and hot swaps of `functions`.
    pub fn set_functions(&self, functions: FunctionRuntime) {
        *self
            .functions
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(functions);
    }

    /// Applies configs that create, update or delete sinks through
    /// `live_sinks`, without a restart.
    pub fn set_live_sinks(&self, live_sinks: crate::server::live_sinks::LiveSinks) {
        *self
            .live_sinks
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(live_sinks);
    }

    /// The running sinks, in a weft that runs pipelines.
    fn live_sinks(&self) -> Option<crate::server::live_sinks::LiveSinks> {
        self.live_sinks
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The running functions and the plugin registry; `None` in a weft
    /// serving no pipelines (tests of the bare API).
    fn functions(&self) -> Option<FunctionRuntime> {
        self.functions
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The running functions, or a 409 in a weft that runs no pipelines.
    fn running_functions(&self) -> Result<FunctionRuntime, ApiError> {
        self.functions().ok_or_else(|| {
            ApiError::new(
                axum::http::StatusCode::CONFLICT,
                "this weft runs no pipelines, so it has no plugin registry or functions to manage",
            )
        })
    }

    /// Serves `text`, the config file as written, at `/api/config/export`.
    pub fn set_config_text(&self, text: String) {
        *self
            .config_text
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(text);
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

    /// The config file as written, once set.
    fn config_text(&self) -> Option<String> {
        self.config_text
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Knows the quarantine breaker of the sink `name`.
    pub fn add_breaker(&self, name: &str, breaker: Breaker) {
        self.breakers
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(name.to_string(), breaker);
    }

    /// The quarantine breaker of the sink `name`, if known.
    pub fn breaker(&self, name: &str) -> Option<Breaker> {
        self.breakers
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(name)
            .cloned()
    }

    /// Whether `name` is a sink this API serves (pull or push).
    pub fn knows_sink(&self, name: &str) -> bool {
        self.push_sinks
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .contains_key(name)
            || self
                .sinks
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .contains_key(name)
    }

    /// Wakes the long-polling receivers, or the delivery worker, of the
    /// sink `name`: messages were stored for it.
    pub fn wake(&self, name: &str) {
        if let Some(stream) = self.sink(name) {
            stream.wake();
        }
        let push = self
            .push_sinks
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(name)
            .cloned();
        if let Some(waker) = push {
            waker.wake();
        }
    }
}

/// The pull API under both `/api/http_pull_consumers/{name}/` and
/// `/api/sequin_streams/{name}/`, dead letters under
/// `/api/sinks/{sink}/dead_letters`, backfills under
/// `/api/sinks/{sink}/backfills`, a sink's quarantine at
/// `/api/sinks/{sink}/quarantine`, webhook sources at
/// `POST /api/webhook_sources/{name}`, plus `GET /health` (liveness),
/// `GET /health/ready` (readiness: every replication slot streams),
/// `GET /api/health` (each entity's checks, see [`crate::health`]) and
/// `GET /api/config/export` (the running config, secrets redacted),
/// `GET /api/change_retentions[/{name}]`, the read-only management
/// resources `GET /api/sinks`, `/api/postgres_databases` and
/// `/api/destinations/http_endpoints` (see [`resources`]) and
/// `GET /metrics` (Prometheus text format).
pub fn router(state: PullApiState) -> Router {
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
    routes: utoipa_axum::router::UtoipaMethodRouter<PullApiState>,
) -> utoipa_axum::router::UtoipaMethodRouter<PullApiState> {
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

#[utoipa::path(get, path = "/health", tag = "probes", summary = "Liveness", responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::api::error::ApiErrorBody)))]
async fn health() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({"status": "ok"}))
}

/// Readiness: `200 {"status": "ready"}` once every replication slot
/// streams; `503` with the slots still waiting (and why) before that, or
/// while one is reconnecting.
#[utoipa::path(get, path = "/health/ready", tag = "probes", summary = "Readiness: every replication slot streams", responses((status = 200, description = "Ready", body = Object), (status = 503, description = "Slots still waiting", body = Object)))]
async fn readiness() -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let waiting: Vec<serde_json::Value> = crate::health::global()
        .snapshot()
        .into_iter()
        .filter(|e| e.kind == crate::health::EntityKind::Slot)
        .filter_map(|e| {
            e.checks
                .iter()
                .find(|c| c.id == crate::source::REPLICATION_CHECK)
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
#[utoipa::path(get, path = "/api/health", tag = "health", summary = "Health checks of every entity", responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::api::error::ApiErrorBody)))]
async fn entity_health() -> axum::Json<serde_json::Value> {
    let entities = crate::health::global().snapshot();
    let status = entities
        .iter()
        .map(|e| e.status)
        .max()
        .unwrap_or(crate::health::Status::Healthy);
    axum::Json(serde_json::json!({"status": status, "entities": entities}))
}

/// `{"yaml": ...}`: the running config with every secret redacted. The API
/// never shows secrets (use `weft config export --show-secrets` on the
/// host instead).
#[utoipa::path(get, path = "/api/config/export", tag = "config", summary = "The running config, secrets redacted", responses((status = 200, description = "The answer", body = Object), (status = "4XX", description = "What was wrong, as {\"summary\", \"validation_errors\"}", body = crate::api::error::ApiErrorBody)))]
async fn export_config(
    axum::extract::State(state): axum::extract::State<PullApiState>,
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
    crate::config::export::export(text, crate::config::export::Secrets::Redact, &|name| {
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
