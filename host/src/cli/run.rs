//! `weft run`: start weft with a config file, and run it until a shutdown
//! signal; a config applied through the API that needs a restart runs
//! again in the same process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use weft_sinks::config::Config;

use crate::server::{RunOptions, RunOutcome};

/// `weft run`.
#[derive(clap::Args)]
pub struct RunArgs {
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
}

impl RunArgs {
    /// Runs weft until it stops.
    pub fn run(self) -> ExitCode {
        let RunArgs {
            config: config_path,
            data_dir,
            listen,
            metrics_listen,
            metrics_username,
            metrics_password,
        } = self;
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
        let config = match Config::load(&config_path) {
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
            let options = RunOptions {
                config,
                data_dir: data_dir.clone(),
                listen,
                config_text: std::fs::read_to_string(&config_path).ok(),
                metrics_listen: metrics_listen.0,
                metrics_auth: metrics_auth.clone(),
                config_path: Some(config_path.clone()),
            };
            match runtime.block_on(crate::server::run(options)) {
                Ok(RunOutcome::Stopped) => return ExitCode::SUCCESS,
                // The API checked the applied config, but the file or
                // the environment may have changed since.
                Ok(RunOutcome::Reload) => match Config::load(&config_path) {
                    Ok(reloaded) => config = reloaded,
                    Err(error) => {
                        tracing::error!("the applied config no longer loads: {error}");
                        eprintln!("{error}");
                        return ExitCode::from(2);
                    }
                },
                Err(error) => {
                    tracing::error!("{error:#}");
                    eprintln!("weft: {error:#}");
                    return ExitCode::FAILURE;
                }
            }
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
