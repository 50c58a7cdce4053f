//! `weft run`: assembles sources, pipelines, sinks and the HTTP API from a
//! validated config, and runs them until SIGTERM or SIGINT.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, error, info, info_span};

mod controller;
mod database_feed;
mod feed_runs;
mod live_plan;
pub mod live_sinks;
mod pipeline_threads;
mod sink_changes;
mod supervision;
mod workers;

use controller::LiveController;
use database_feed::BuiltFeed;
use live_sinks::LiveSinks;
use weft_api::{ApiState, Running};
use weft_core::lsn::Lsn;
use weft_pipeline::backfill::{BackfillLauncher, Backfills};
use weft_pipeline::hot_swap::FunctionRuntime;
use weft_pipeline::{BatchLimits, Pipeline, SinkHandles, SinkPipeline};
use weft_sinks::config::{Config, DatabaseConfig, SinkConfig};
use weft_source::events::{self, EventReceiver, EventSender};
use weft_store::Store;
use weft_wasm::registry::PluginRegistry;
use weft_wasm::{EngineSettings, PluginEngine};

/// What `weft run` needs.
pub struct RunOptions {
    /// The validated config.
    pub config: Config,
    /// Where the store and plugin cache live.
    pub data_dir: PathBuf,
    /// Address of the HTTP API.
    pub listen: SocketAddr,
    /// The config file's text as written (before `${VAR}` interpolation),
    /// recorded in the store; `None` when there is no file.
    pub config_text: Option<String>,
    /// Address of the Prometheus metrics listener; `None`: none.
    pub metrics_listen: Option<SocketAddr>,
    /// Credentials the metrics listener asks for; `None`: open.
    pub metrics_auth: Option<weft_api::metrics_listener::BasicAuth>,
    /// The config file, which `POST /api/config/apply` rewrites.
    pub config_path: Option<PathBuf>,
}

/// How a run ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    /// A shutdown signal: exit.
    Stopped,
    /// A config was applied through the API: run again with the file.
    Reload,
}

/// Why weft could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The data directory could not be created.
    #[error("cannot create the data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The store could not be opened.
    #[error("store: {0}")]
    Store(#[from] weft_store::StoreError),
    /// A sink's functions could not be loaded.
    #[error(transparent)]
    Load(#[from] weft_pipeline::LoadError),
    /// A plugin could not be loaded.
    #[error("function {function}: {source}")]
    Plugin {
        /// The function's name in the config.
        function: String,
        /// What went wrong.
        source: weft_wasm::PluginError,
    },
    /// The metrics address could not be bound.
    #[error(
        "cannot listen for metrics on {address}: {source} (choose another address with --metrics-listen, or turn the listener off with --metrics-listen off)"
    )]
    MetricsListen {
        /// The address.
        address: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The API address could not be bound.
    #[error("cannot listen on {address}: {source} (choose another address with --listen)")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A database connection could not be described.
    #[error("database {database}: {source}")]
    Source {
        /// The database's name in the config.
        database: String,
        /// What went wrong.
        source: weft_source::SourceError,
    },
    /// A sink's delivery could not be built.
    #[error("sink {sink}: {source}")]
    Sink {
        /// The sink's name.
        sink: String,
        /// What went wrong.
        source: weft_sinks::sink::BuildError,
    },
    /// A webhook source's feed or pipeline stopped with an error.
    #[error("webhook source {source_name}: {detail}")]
    WebhookSource {
        /// The source's name.
        source_name: String,
        /// What went wrong.
        detail: String,
    },
    /// A function names a registered plugin that is missing or of another
    /// kind.
    #[error("{0}")]
    UnresolvedPlugins(String),
    /// The pipeline stopped with an error.
    #[error("pipeline of database {database}: {source}")]
    Pipeline {
        /// The database's name in the config.
        database: String,
        /// What went wrong.
        source: weft_pipeline::PipelineError,
    },
}

/// Runs weft until a shutdown signal or an applied config, or until a
/// source or pipeline fails.
pub async fn run(options: RunOptions) -> Result<RunOutcome, ServerError> {
    let RunOptions {
        config,
        data_dir,
        listen,
        config_text,
        metrics_listen,
        metrics_auth,
        config_path,
    } = options;
    weft_core::metrics::install();
    weft_core::metrics::keep_only_sinks(config.sinks.iter().map(|sink| sink.name.as_str()));
    weft_core::health::global().reset();
    std::fs::create_dir_all(&data_dir).map_err(|source| ServerError::DataDir {
        path: data_dir.clone(),
        source,
    })?;
    let store = Store::open(&data_dir.join("weft.db"))?;
    let engine = PluginEngine::new(EngineSettings::new(data_dir.join("plugin-cache"))).map_err(
        |source| ServerError::Plugin {
            function: "(engine)".into(),
            source,
        },
    )?;
    let registry = PluginRegistry::open(&data_dir.join("plugins"), store.clone(), engine.clone())
        .map_err(|source| ServerError::DataDir {
        path: data_dir.join("plugins"),
        source,
    })?;
    let mut config = config;
    registry.resolve(&mut config).map_err(|problems| {
        ServerError::UnresolvedPlugins(
            problems
                .into_iter()
                .map(|(i, problem)| format!("functions[{i}].plugin: {problem}"))
                .collect::<Vec<_>>()
                .join("; "),
        )
    })?;
    record_inventory(&store, &config, config_text.as_deref())?;
    let functions = FunctionRuntime::new(registry, engine, config.clone());
    let shutdown = CancellationToken::new();
    let mut tasks = JoinSet::new();

    let tokens = weft_api::auth::ApiTokens::new(config.api_tokens.clone());
    if !tokens.enabled() {
        tracing::warn!(
            "no api_tokens configured: the HTTP API (pull, dead letters, backfills, config export) answers anyone who can reach {listen}; add api_tokens to require `Authorization: Bearer <token>`"
        );
    }
    let handles = SinkHandles::new();
    collect_queue_depths(store.clone(), functions.clone(), handles.clone());
    let backfills = Backfills::new();
    // Targets are set as each feed is built, below and whenever one starts.
    let launcher = BackfillLauncher::new(
        store.clone(),
        backfills.clone(),
        Vec::new(),
        shutdown.clone(),
    );
    let live_sinks = LiveSinks::new(
        store.clone(),
        (handles.clone(), launcher.clone()),
        functions.clone(),
        (data_dir.clone(), backfills),
        shutdown.clone(),
    );
    let controller = LiveController::new(
        (config_path, config_text),
        tokens,
        (functions.clone(), live_sinks.clone(), handles.clone()),
        shutdown.clone(),
    );
    for sink in &config.sinks {
        let delivery = live_sinks.delivery(&config, sink)?;
        live_sinks.start_delivery(&sink.name, delivery).await;
    }
    for retention in &config.change_retentions {
        if let Some(job) = retention_job(&config, retention)? {
            let shutdown = shutdown.clone();
            tasks.spawn(
                async move {
                    job.run(shutdown).await;
                    Ok(())
                }
                .instrument(info_span!("retention", retention = %retention.name)),
            );
        }
    }
    // Served from the start: what a source accepts waits in the store for
    // its pipeline.
    let mut webhook_sources = HashMap::new();
    let webhook_feeds: Vec<_> = config
        .webhook_sources
        .iter()
        .map(|source| {
            let (ingress, feed) =
                weft_pipeline::webhook_source::WebhookIngress::new(source, store.clone());
            webhook_sources.insert(source.name.clone(), ingress);
            (source, feed)
        })
        .collect();
    let api = ApiState::new(
        store.clone(),
        handles,
        Some(Running {
            controller: Arc::new(controller.clone()),
            functions: functions.clone(),
            backfills: launcher.clone(),
            webhook_sources,
        }),
        shutdown.clone(),
    );
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| ServerError::Listen {
            address: listen,
            source,
        })?;
    info!(address = %listener.local_addr().unwrap_or(listen), "HTTP API listening");
    {
        let shutdown = shutdown.clone();
        let router = weft_api::router(api);
        tasks.spawn(
            async move {
                weft_api::serve(listener, router, shutdown)
                    .await
                    .map_err(|source| ServerError::Listen {
                        address: listen,
                        source,
                    })
            }
            .instrument(info_span!("api")),
        );
    }

    if let Some(address) = metrics_listen {
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|source| ServerError::MetricsListen { address, source })?;
        info!(address = %listener.local_addr().unwrap_or(address), auth = metrics_auth.is_some(), "metrics listening");
        let shutdown = shutdown.clone();
        let router = weft_api::metrics_listener::router(metrics_auth);
        tasks.spawn(
            async move {
                weft_api::serve(listener, router, shutdown)
                    .await
                    .map_err(|source| ServerError::MetricsListen { address, source })
            }
            .instrument(info_span!("metrics")),
        );
    }

    for database in &config.databases {
        let Some(built) = BuiltFeed::build(&config, database, functions.engine(), &data_dir)?
        else {
            info!(database = %database.name, "no sinks on this database; not replicating it");
            continue;
        };
        for target in built.backfill_targets() {
            launcher.set_target(target);
        }
        live_sinks.spawn_database(built);
    }

    for (source, feed) in webhook_feeds {
        let sinks: Vec<&SinkConfig> = config.sinks_of_webhook(&source.name).collect();
        if sinks.is_empty() {
            info!(source = %source.name, "no sinks take this webhook source; its messages are accepted and dropped");
        }
        let pipelines = sinks
            .iter()
            .map(|sink| live_sinks.pipeline(&config, sink))
            .collect::<Result<Vec<_>, _>>()?;
        live_sinks.spawn_webhook_source(feed, pipelines);
    }

    let resumed = launcher.resume_all().map_err(ServerError::Store)?;
    if resumed > 0 {
        info!(resumed, "active backfills resumed");
    }
    launcher.start_initial().map_err(ServerError::Store)?;

    let signals = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        info!("shutdown requested");
        signals.cancel();
    });

    let mut result = Ok(());
    loop {
        let failure = match tasks.join_next().await {
            None => break,
            Some(Ok(Ok(()))) => continue,
            Some(Ok(Err(failure))) => failure,
            Some(Err(join_error)) => {
                error!("task failed: {join_error}");
                shutdown.cancel();
                continue;
            }
        };
        error!("{failure}");
        if result.is_ok() {
            result = Err(failure);
        }
        shutdown.cancel();
    }
    live_sinks.join_all().await;
    result.map(|()| {
        if controller.reload_requested() {
            RunOutcome::Reload
        } else {
            RunOutcome::Stopped
        }
    })
}

/// How to connect to `database`.
fn connect_options(
    database: &DatabaseConfig,
) -> Result<weft_postgres::PgConnectOptions, ServerError> {
    weft_postgres::PgConnectOptions::try_from(database.connection()).map_err(|source| {
        ServerError::Source {
            database: database.name.clone(),
            source: source.into(),
        }
    })
}

/// The task deleting `retention`'s old event rows, when it has `retain_for`.
fn retention_job(
    config: &Config,
    retention: &weft_sinks::config::change_retention::ChangeRetentionConfig,
) -> Result<Option<weft_sinks::postgres::retention::RetentionJob>, ServerError> {
    let Some(retain_for) = retention.retain_for else {
        return Ok(None);
    };
    let database = config
        .database(&retention.destination_database)
        .expect("config validation guarantees the database exists");
    let target = connect_options(database)?;
    let table = retention.destination_table();
    Ok(Some(weft_sinks::postgres::retention::RetentionJob {
        name: retention.name.clone(),
        target,
        table: weft_postgres::TableName {
            schema: table.schema,
            name: table.table,
        },
        retain_for,
    }))
}

/// The pipeline of `pipelines`, the channel its source sends events on,
/// and the watch on which it reports what is stored.
fn wire_pipeline(
    pipelines: Vec<SinkPipeline>,
    store: &Store,
    handles: &SinkHandles,
) -> (Pipeline, EventSender, EventReceiver, watch::Receiver<Lsn>) {
    let (events_tx, events_rx) = events::channel(events::CAPACITY, events::MAX_BYTES);
    let (durable_tx, durable_rx) = watch::channel(Lsn::ZERO);
    let pipeline = Pipeline::new(
        pipelines,
        store.clone(),
        durable_tx,
        handles.clone(),
        BatchLimits::default(),
    );
    (pipeline, events_tx, events_rx, durable_rx)
}

/// Records the config weft starts with and each function's component in
/// the store (`store::inventory`).
fn record_inventory(
    store: &Store,
    config: &Config,
    config_text: Option<&str>,
) -> Result<(), ServerError> {
    if let Some(text) = config_text {
        store.record_config(text)?;
    }
    for function in &config.functions {
        // A file that cannot be read fails the load right after, with the
        // plugin error that names it.
        if let Ok(bytes) = std::fs::read(&function.file) {
            store.record_plugin(&weft_store::PluginRecord::of(
                &function.name,
                function.kind.as_str(),
                &function.file.display().to_string(),
                &bytes,
            ))?;
        }
    }
    Ok(())
}

/// Reads each running sink's queue depths from the store, and from its
/// memory lane if it has one, into the queue gauges before every scrape of
/// `/metrics`.
fn collect_queue_depths(store: Store, functions: FunctionRuntime, handles: SinkHandles) {
    weft_core::metrics::on_render(move || {
        for sink in functions.running().sinks.iter().map(|s| &s.name) {
            let (queued, in_flight) = handles.lane(sink).map_or((0, 0), |lane| {
                let depth = lane.depth();
                (depth.queued as u64, depth.in_flight as u64)
            });
            match store.queue_depths(sink) {
                Ok(depths) => weft_core::metrics::set_queue_depths(
                    sink,
                    depths.buffered + queued,
                    depths.in_delivery + in_flight,
                    depths.held,
                ),
                Err(error) => tracing::debug!(%sink, %error, "cannot read the queue depths"),
            }
        }
    });
}

/// The source of `database` for `sinks`, spilling under `data_dir`.
fn source_config(
    database: &DatabaseConfig,
    sinks: &[&SinkConfig],
    data_dir: &std::path::Path,
) -> Result<weft_source::SourceConfig, ServerError> {
    // The publication lists the sinks' tables, unless a sink selects whole
    // schemas: then it covers all tables and the sinks pick theirs.
    let mut tables: Vec<String> = Vec::new();
    for sink in sinks {
        match (&sink.source.include_tables, &sink.source.include_schemas) {
            (Some(listed), None) => tables.extend(listed.iter().map(ToString::to_string)),
            _ => {
                tables.clear();
                break;
            }
        }
    }
    tables.sort();
    tables.dedup();
    let connection = connect_options(database)?;
    Ok(weft_source::SourceConfig {
        name: database.name.clone(),
        connection,
        slot_name: database.slot.name.clone(),
        create_slot_if_not_exists: database.slot.create_if_not_exists,
        publication_name: database.publication.name.clone(),
        create_publication_if_not_exists: database.publication.create_if_not_exists,
        tables,
        // One directory per database: a source deletes its stale spill
        // files at start and must not touch another's.
        spill_dir: data_dir.join("spill").join(&database.name),
        heartbeat_interval: database.heartbeat_interval(),
        lag_warning_bytes: database.slot.lag_warning_mb.saturating_mul(1 << 20),
    })
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler installs");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler installs");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
