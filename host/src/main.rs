//! The `weft` binary: the command-line interface, and `weft run`, the
//! composition root that builds every layer (see `docs/architecture.md`).

mod cli;
mod plugin_project;
mod server;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::cli::commands;
use clap::{Parser, Subcommand, ValueEnum};
use tracing_subscriber::EnvFilter;

/// Postgres change-data-capture with sandboxed WebAssembly functions.
#[derive(Parser)]
#[command(name = "weft", version, about)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "WEFT_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Start weft with a config file.
    Run {
        /// The YAML config (sequin.yml layout).
        #[arg(long, short, env = "WEFT_CONFIG")]
        config: PathBuf,
        /// Where weft keeps its durable state (the SQLite store and the
        /// compiled-plugin cache).
        #[arg(long, env = "WEFT_DATA_DIR", default_value = ".weft")]
        data_dir: PathBuf,
        /// Address of the HTTP API (the pull API is served here).
        #[arg(long, env = "WEFT_LISTEN", default_value = "127.0.0.1:7376")]
        listen: SocketAddr,
        /// Address of the Prometheus listener (`GET /metrics`), or `off`.
        #[arg(long, env = "WEFT_METRICS_LISTEN", default_value = "127.0.0.1:8376", value_parser = parse_metrics_listen)]
        metrics_listen: MetricsListen,
        /// User the metrics listener asks for (basic auth; needs
        /// WEFT_METRICS_PASSWORD too).
        #[arg(long, env = "WEFT_METRICS_USERNAME")]
        metrics_username: Option<String>,
        /// Password the metrics listener asks for. Prefer the environment
        /// variable: a flag shows in `ps`.
        #[arg(long, env = "WEFT_METRICS_PASSWORD", hide_env_values = true)]
        metrics_password: Option<String>,
    },
    /// Check a config file and exit: prints every problem with its path.
    Check {
        /// The YAML config (sequin.yml layout).
        #[arg(long, short, env = "WEFT_CONFIG")]
        config: PathBuf,
    },
    /// Create and build plugins (WebAssembly functions).
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Work with config files, locally or on a running weft.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Named weft servers (URL and API token) the remote commands use.
    #[command(subcommand)]
    Context(ContextCommand),
    /// The sinks of a running weft.
    #[command(subcommand)]
    Sink(SinkCommand),
    /// Backfills of a running weft's sinks.
    #[command(subcommand)]
    Backfill(BackfillCommand),
    /// Dead letters of a running weft's sinks.
    #[command(subcommand, name = "dead-letters")]
    DeadLetters(DeadLetterCommand),
}

/// Which weft to talk to, and how to print.
#[derive(clap::Args)]
struct RemoteArgs {
    /// A saved context (default: the selected one).
    #[arg(long)]
    context: Option<String>,
    /// The API's base URL (overrides the context; default
    /// http://127.0.0.1:7376).
    #[arg(long, env = "WEFT_URL")]
    url: Option<String>,
    /// The API token (overrides the context's).
    #[arg(long, env = "WEFT_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Print the API's JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum ContextCommand {
    /// Save (or replace) a context; the first one saved is selected.
    Add {
        /// Its name.
        name: String,
        /// The API's base URL, e.g. http://127.0.0.1:7376.
        #[arg(long)]
        url: String,
        /// The API token, if the server has `api_tokens`.
        #[arg(long)]
        token: Option<String>,
    },
    /// List the contexts; `*` marks the selected one.
    Ls,
    /// Make a context the default.
    Select {
        /// Its name.
        name: String,
    },
    /// Forget a context.
    Rm {
        /// Its name.
        name: String,
    },
}

#[derive(Subcommand)]
enum SinkCommand {
    /// List the sinks: name, type, source, status.
    Ls {
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Show one sink's config entry, status and health.
    Show {
        /// The sink.
        name: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Stop a sink's deliveries (its messages keep being stored).
    Pause {
        /// The sink.
        name: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Resume a paused sink's deliveries.
    Resume {
        /// The sink.
        name: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

#[derive(Subcommand)]
enum BackfillCommand {
    /// Start a backfill of tables into a sink: full, or partial from a
    /// sort column's position and/or with a parameterised `WHERE` filter.
    Start {
        /// The sink.
        sink: String,
        #[command(flatten)]
        start: BackfillStartArgs,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// List a sink's backfills with their progress.
    Ls {
        /// The sink.
        sink: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Show one backfill: its scope, state, progress, cursor and last error.
    Show {
        /// The sink.
        sink: String,
        /// The backfill's id.
        id: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Pause an active backfill (it keeps its cursor).
    Pause {
        /// The sink.
        sink: String,
        /// The backfill's id.
        id: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Resume a paused backfill from its cursor.
    Resume {
        /// The sink.
        sink: String,
        /// The backfill's id.
        id: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Cancel a backfill.
    Cancel {
        /// The sink.
        sink: String,
        /// The backfill's id.
        id: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

/// What `backfill start` reads: which tables, and which of their rows.
#[derive(clap::Args)]
struct BackfillStartArgs {
    #[command(flatten)]
    tables: BackfillTables,
    /// Read in this column's order, from `--start-position` (a partial
    /// backfill).
    #[arg(long, requires = "start_position")]
    sort_column: Option<String>,
    /// The first `--sort-column` value to read.
    #[arg(long, requires = "sort_column")]
    start_position: Option<String>,
    /// Only rows matching this SQL condition, e.g. `status = $1`.
    #[arg(long = "where", value_name = "SQL")]
    where_sql: Option<String>,
    /// A value for `$1`, `$2`, … of `--where`, in order (Postgres casts
    /// each from text); repeat for several.
    #[arg(long = "param", value_name = "VALUE", requires = "where_sql")]
    params: Vec<String>,
}

/// Which tables `backfill start` reads: the listed ones, or all.
#[derive(clap::Args)]
#[group(required = true, multiple = false)]
struct BackfillTables {
    /// A table, `schema.table`; repeat for several.
    #[arg(long)]
    table: Vec<String>,
    /// Every table the sink receives.
    #[arg(long)]
    all: bool,
}

impl BackfillStartArgs {
    fn into_request(self) -> commands::BackfillRequest {
        commands::BackfillRequest {
            tables: if self.tables.all {
                None
            } else {
                Some(self.tables.table)
            },
            sort_column: self.sort_column,
            start_position: self.start_position,
            filter: self.where_sql.map(|sql| (sql, self.params)),
        }
    }
}

#[derive(Subcommand)]
enum DeadLetterCommand {
    /// List a sink's dead letters.
    Ls {
        /// The sink.
        sink: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Replay dead letters (the listed ids, or all) into the sink.
    Replay {
        /// The sink.
        sink: String,
        /// Dead letter ids; none replays every one.
        ids: Vec<i64>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Delete a dead letter for good.
    Discard {
        /// The sink.
        sink: String,
        /// The dead letter's id.
        id: i64,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print the config as YAML with every secret (passwords, tokens,
    /// encrypted headers, URL passwords) redacted; `${VAR}` references stay.
    /// With `--config`, the local file; without, the running weft's.
    Export {
        /// The YAML config (sequin.yml layout).
        #[arg(long, short, env = "WEFT_CONFIG")]
        config: Option<PathBuf>,
        /// Print the secrets too, with `${VAR}` references resolved (local
        /// files only: the API never shows secrets).
        #[arg(long)]
        show_secrets: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Show what applying FILE to the running weft would change.
    Plan {
        /// The proposed config.
        file: PathBuf,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Apply FILE to the running weft (it restarts its pipelines with it).
    Apply {
        /// The proposed config.
        file: PathBuf,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Scaffold a buildable plugin project in a new folder.
    New {
        /// The language: rust, js, python or c.
        #[arg(long)]
        lang: String,
        /// The function kind: filter or transform (Rust also: routing,
        /// enrichment).
        #[arg(long, default_value = "filter")]
        kind: String,
        /// The folder to create (default: ./NAME).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Rust only: the sdk-guest folder of a weft checkout (default: the
        /// checkout the project is inside, else the one weft was built from).
        #[arg(long)]
        sdk_path: Option<PathBuf>,
        /// The plugin's name: lowercase letters, digits and dashes.
        name: String,
    },
    /// Build the project in DIR to a component, DIR/<name>.wasm.
    Build {
        /// The project folder (holding weft-plugin.toml).
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Upload a component to a running weft's plugin registry.
    Push {
        /// The component (.wasm).
        file: PathBuf,
        /// The version to register it as: NAME@VERSION.
        #[arg(long = "as")]
        reference: String,
        /// The function kind it implements: transform, filter, routing or
        /// enrichment.
        #[arg(long)]
        kind: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// List a running weft's registered plugins.
    Ls {
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Delete a registered plugin version (refused while a function uses it).
    Rm {
        /// NAME@VERSION.
        reference: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

/// `weft config export`: checks the config, then prints it.
fn export_config(path: &std::path::Path, show_secrets: bool) -> ExitCode {
    use weft_sinks::config::export::{Secrets, export};
    let exported = weft_sinks::config::Config::load(path).and_then(|_| {
        let text = std::fs::read_to_string(path).map_err(|source| {
            weft_sinks::config::ConfigError::Read {
                path: path.to_owned(),
                source,
            }
        })?;
        let secrets = if show_secrets {
            Secrets::Show
        } else {
            Secrets::Redact
        };
        export(&text, secrets, &|name| std::env::var(name).ok())
    });
    match exported {
        Ok(yaml) => {
            print!("{yaml}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::from(2)
        }
    }
}

/// Runs one remote command against the weft `args` name; prints its
/// output, or its error on stderr (exit status 1; 2 for bad arguments).
fn remote_command<F, Fut>(args: &RemoteArgs, command: F) -> ExitCode
where
    F: FnOnce(commands::Remote, commands::Output) -> Fut,
    Fut: std::future::Future<Output = Result<String, String>>,
{
    let remote = match commands::Remote::resolve(
        args.url.clone(),
        args.token.clone(),
        args.context.as_deref(),
    ) {
        Ok(remote) => remote,
        Err(error) => {
            eprintln!("weft: {error}");
            return ExitCode::from(2);
        }
    };
    let output = if args.json {
        commands::Output::Json
    } else {
        commands::Output::Table
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts");
    match runtime.block_on(command(remote, output)) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("weft: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `weft config plan|apply FILE`: sends the file's text as written.
fn config_change(remote: &RemoteArgs, verb: &'static str, file: &std::path::Path) -> ExitCode {
    let yaml = match std::fs::read_to_string(file) {
        Ok(yaml) => yaml,
        Err(error) => {
            eprintln!("weft: cannot read {}: {error}", file.display());
            return ExitCode::from(2);
        }
    };
    remote_command(remote, |r, out| async move {
        commands::config_change(&r, verb, yaml, out).await
    })
}

/// `weft context ...`: edits the contexts file.
fn context(command: ContextCommand) -> ExitCode {
    use crate::cli::context::{Context, Contexts};
    let result = Contexts::load().and_then(|mut contexts| match command {
        ContextCommand::Add { name, url, token } => {
            contexts.add(&name, Context { url, token });
            contexts.save().map(|()| format!("saved context {name}\n"))
        }
        ContextCommand::Ls => {
            let rows: Vec<Vec<String>> = contexts
                .contexts
                .iter()
                .map(|(name, context)| {
                    let mark = if contexts.selected.as_deref() == Some(name) {
                        "*"
                    } else {
                        ""
                    };
                    vec![
                        mark.to_string(),
                        name.clone(),
                        context.url.clone(),
                        if context.token.is_some() { "yes" } else { "no" }.to_string(),
                    ]
                })
                .collect();
            Ok(crate::cli::table::render(
                &["", "NAME", "URL", "TOKEN"],
                &rows,
            ))
        }
        ContextCommand::Select { name } => contexts
            .select(&name)
            .and_then(|()| contexts.save())
            .map(|()| format!("selected context {name}\n")),
        ContextCommand::Rm { name } => contexts
            .remove(&name)
            .and_then(|()| contexts.save())
            .map(|()| format!("removed context {name}\n")),
    });
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("weft: {error}");
            ExitCode::from(2)
        }
    }
}

/// Where the metrics listener listens: an address, or nowhere (`off`).
#[derive(Debug, Clone, Copy)]
struct MetricsListen(Option<SocketAddr>);

fn parse_metrics_listen(text: &str) -> Result<MetricsListen, String> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(MetricsListen(None));
    }
    text.parse().map(|a| MetricsListen(Some(a))).map_err(|e| {
        format!("{e}: give an address such as 127.0.0.1:8376, or `off` for no metrics listener")
    })
}

/// mimalloc: per-thread heaps without glibc's arena lock, which cost weft
/// most of its CPU per change (BENCHMARKS.md, "mimalloc instead of glibc").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    tune_allocator();
    // Both rustls backends (ring, aws-lc-rs) end up linked through
    // dependencies; clients that use the process default (async-nats) panic
    // unless one is chosen. weft's own TLS code uses ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match cli.command {
        Command::Plugin(PluginCommand::Push {
            file,
            reference,
            kind,
            remote,
        }) => remote_command(&remote, |r, out| async move {
            commands::plugin_push(&r, &file, &reference, &kind, out).await
        }),
        Command::Plugin(PluginCommand::Ls { remote }) => {
            remote_command(&remote, |r, out| async move {
                commands::plugin_ls(&r, out).await
            })
        }
        Command::Plugin(PluginCommand::Rm { reference, remote }) => {
            remote_command(&remote, |r, out| async move {
                commands::plugin_rm(&r, &reference, out).await
            })
        }
        Command::Plugin(command) => plugin(command),
        Command::Config(ConfigCommand::Export {
            config: Some(config),
            show_secrets,
            ..
        }) => export_config(&config, show_secrets),
        Command::Config(ConfigCommand::Export {
            config: None,
            show_secrets,
            remote,
        }) => {
            if show_secrets {
                eprintln!("weft: --show-secrets needs --config FILE: the API never shows secrets");
                return ExitCode::from(2);
            }
            remote_command(
                &remote,
                |r, _| async move { commands::config_export(&r).await },
            )
        }
        Command::Config(ConfigCommand::Plan { file, remote }) => {
            config_change(&remote, "plan", &file)
        }
        Command::Config(ConfigCommand::Apply { file, remote }) => {
            config_change(&remote, "apply", &file)
        }
        Command::Context(command) => context(command),
        Command::Sink(SinkCommand::Ls { remote }) => {
            remote_command(
                &remote,
                |r, out| async move { commands::sink_ls(&r, out).await },
            )
        }
        Command::Sink(SinkCommand::Pause { name, remote }) => {
            remote_command(&remote, |r, out| async move {
                commands::sink_pause(&r, &name, true, out).await
            })
        }
        Command::Sink(SinkCommand::Resume { name, remote }) => {
            remote_command(&remote, |r, out| async move {
                commands::sink_pause(&r, &name, false, out).await
            })
        }
        Command::Sink(SinkCommand::Show { name, remote }) => {
            remote_command(&remote, |r, _| async move {
                commands::sink_show(&r, &name).await
            })
        }
        Command::Backfill(BackfillCommand::Start {
            sink,
            start,
            remote,
        }) => {
            let request = start.into_request();
            remote_command(&remote, |r, out| async move {
                commands::backfill_start(&r, &sink, &request, out).await
            })
        }
        Command::Backfill(BackfillCommand::Ls { sink, remote }) => {
            remote_command(&remote, |r, out| async move {
                commands::backfill_ls(&r, &sink, out).await
            })
        }
        Command::Backfill(BackfillCommand::Show { sink, id, remote }) => {
            remote_command(&remote, |r, _| async move {
                commands::backfill_show(&r, &sink, &id).await
            })
        }
        Command::Backfill(BackfillCommand::Pause { sink, id, remote }) => {
            remote_command(&remote, |r, out| async move {
                commands::backfill_set_state(&r, &sink, &id, "pause", out).await
            })
        }
        Command::Backfill(BackfillCommand::Resume { sink, id, remote }) => {
            remote_command(&remote, |r, out| async move {
                commands::backfill_set_state(&r, &sink, &id, "resume", out).await
            })
        }
        Command::Backfill(BackfillCommand::Cancel { sink, id, remote }) => {
            remote_command(&remote, |r, out| async move {
                commands::backfill_cancel(&r, &sink, &id, out).await
            })
        }
        Command::DeadLetters(DeadLetterCommand::Ls { sink, remote }) => {
            remote_command(&remote, |r, out| async move {
                commands::dead_letters_ls(&r, &sink, out).await
            })
        }
        Command::DeadLetters(DeadLetterCommand::Replay { sink, ids, remote }) => {
            remote_command(&remote, |r, out| async move {
                commands::dead_letters_replay(&r, &sink, &ids, out).await
            })
        }
        Command::DeadLetters(DeadLetterCommand::Discard { sink, id, remote }) => {
            remote_command(&remote, |r, out| async move {
                commands::dead_letters_discard(&r, &sink, id, out).await
            })
        }
        Command::Check { config } => match weft_sinks::config::Config::load(&config) {
            Ok(_) => {
                println!("{}: ok", config.display());
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("{error}");
                ExitCode::from(2)
            }
        },
        Command::Run {
            config: config_path,
            data_dir,
            listen,
            metrics_listen,
            metrics_username,
            metrics_password,
        } => {
            let metrics_auth = match (metrics_username, metrics_password) {
                (Some(username), Some(password)) => {
                    Some(weft_api::metrics_listener::BasicAuth { username, password })
                }
                (None, None) => None,
                _ => {
                    eprintln!(
                        "weft: basic auth for the metrics listener needs both WEFT_METRICS_USERNAME and WEFT_METRICS_PASSWORD (or --metrics-username and --metrics-password); set both, or neither for an open listener"
                    );
                    return ExitCode::from(2);
                }
            };
            let config = match weft_sinks::config::Config::load(&config_path) {
                Ok(config) => config,
                Err(error) => {
                    eprintln!("{error}");
                    return ExitCode::from(2);
                }
            };
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .thread_name("weft")
                .build()
                .expect("the tokio runtime starts");
            let mut config = config;
            loop {
                let options = crate::server::RunOptions {
                    config,
                    data_dir: data_dir.clone(),
                    listen,
                    config_text: std::fs::read_to_string(&config_path).ok(),
                    metrics_listen: metrics_listen.0,
                    metrics_auth: metrics_auth.clone(),
                    config_path: Some(config_path.clone()),
                };
                match runtime.block_on(crate::server::run(options)) {
                    Ok(crate::server::RunOutcome::Stopped) => return ExitCode::SUCCESS,
                    // The API checked the applied config, but the file or
                    // the environment may have changed since.
                    Ok(crate::server::RunOutcome::Reload) => {
                        match weft_sinks::config::Config::load(&config_path) {
                            Ok(reloaded) => config = reloaded,
                            Err(error) => {
                                tracing::error!("the applied config no longer loads: {error}");
                                eprintln!("{error}");
                                return ExitCode::from(2);
                            }
                        }
                    }
                    Err(error) => {
                        tracing::error!("{error:#}");
                        eprintln!("weft: {error:#}");
                        return ExitCode::FAILURE;
                    }
                }
            }
        }
    }
}

/// `weft plugin ...`: the path made or built on stdout, errors on stderr
/// (exit status 2).
fn plugin(command: PluginCommand) -> ExitCode {
    use crate::plugin_project as project;
    let result = match command {
        PluginCommand::New {
            lang,
            kind,
            dir,
            sdk_path,
            name,
        } => lang.parse::<project::Lang>().and_then(|lang| {
            let kind = project::Kind::parse(&kind, lang)?;
            project::scaffold(&project::NewProject {
                name,
                lang,
                kind,
                dir,
                sdk_path,
            })
        }),
        PluginCommand::Build { dir } => project::build(&dir),
        PluginCommand::Push { .. } | PluginCommand::Ls { .. } | PluginCommand::Rm { .. } => {
            unreachable!("remote plugin commands are dispatched before")
        }
    };
    match result {
        Ok(path) => {
            println!("{}", path.display());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("weft: {error}");
            ExitCode::from(2)
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_env("WEFT_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal: a log file or collector gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// mimalloc's `purge_delay`, by its position in `mi_option_t`.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// mimalloc's `arena_eager_commit`, by its position in `mi_option_t`.
const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// mimalloc's `purge_delay` (1,000 ms: freed memory goes back to the OS
/// once it stayed unused that long) and `arena_eager_commit` (0: commit
/// arena memory as it is used). Purging at once (0, weft's default until
/// 2026-12-04) kept the peak RSS flattest, but a backfill then spent a
/// third of weft's CPU faulting freed pages back in; 100 ms (until
/// 2026-12-06) still left the kernel clearing pages at up to ~7% of
/// weft's samples while a backfill was stored. 1,000 ms, mimalloc v3's
/// own default, stores a backfill ~1.03x as fast with ~5% less CPU for
/// ~15-25 MiB more peak RSS while it runs (25-45 MiB while a live stream
/// is drained; BENCHMARKS.md, "Twenty-third round"); the memory goes back
/// a second after a burst.
/// Without lazy commit mimalloc kept 2.5-3x the RSS (BENCHMARKS.md). The
/// numbers are positions in mimalloc's `mi_option_t` (the same in its v2
/// and v3). A `MIMALLOC_*` variable in the environment is read first and
/// still wins.
fn tune_allocator() {
    for (option, env, value) in [
        (PURGE_DELAY, "MIMALLOC_PURGE_DELAY", 1000),
        (ARENA_EAGER_COMMIT, "MIMALLOC_ARENA_EAGER_COMMIT", 0),
    ] {
        if std::env::var_os(env).is_none() {
            // SAFETY: setting an option only tunes the allocator's policy.
            unsafe { libmimalloc_sys::mi_option_set(option, value) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The positions weft sets are mimalloc's `purge_delay` (10 ms by
    /// default in its v2, 1000 in v3) and `arena_eager_commit` (2), and
    /// weft's values replace them. A mimalloc that numbered its
    /// options differently would fail here, not tune something else.
    #[test]
    fn the_allocator_is_tuned_to_a_one_second_purge_delay_and_lazy_commit() {
        if ["MIMALLOC_PURGE_DELAY", "MIMALLOC_ARENA_EAGER_COMMIT"]
            .iter()
            .any(|env| std::env::var_os(env).is_some())
        {
            eprintln!("skipped: a MIMALLOC_* variable overrides weft's tuning");
            return;
        }
        // SAFETY: reading an option has no effect on allocations.
        let get = |option| unsafe { libmimalloc_sys::mi_option_get(option) };
        assert!(
            [10, 1000].contains(&get(PURGE_DELAY)),
            "position {PURGE_DELAY} is not mimalloc's purge_delay: {}",
            get(PURGE_DELAY)
        );
        assert_eq!(
            get(ARENA_EAGER_COMMIT),
            2,
            "position {ARENA_EAGER_COMMIT} is not mimalloc's arena_eager_commit"
        );
        // mimalloc v3's own default is weft's value: start from another,
        // so that the check below fails unless tuning sets it.
        // SAFETY: setting an option only tunes the allocator's policy.
        unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, 10) };
        tune_allocator();
        assert_eq!(get(PURGE_DELAY), 1000);
        assert_eq!(get(ARENA_EAGER_COMMIT), 0);
    }
}
