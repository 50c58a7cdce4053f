//! The `weft` command-line interface.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

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
    },
    /// Check a config file and exit: prints every problem with its path.
    Check {
        /// The YAML config (sequin.yml layout).
        #[arg(long, short, env = "WEFT_CONFIG")]
        config: PathBuf,
    },
}

fn main() -> ExitCode {
    limit_malloc_arenas();
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match cli.command {
        Command::Check { config } => match weft::config::Config::load(&config) {
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
            config,
            data_dir,
            listen,
        } => {
            let config = match weft::config::Config::load(&config) {
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
            let options = weft::server::RunOptions {
                config,
                data_dir,
                listen,
            };
            match runtime.block_on(weft::server::run(options)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!("{error:#}");
                    eprintln!("weft: {error:#}");
                    ExitCode::FAILURE
                }
            }
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

/// glibc gives each thread that allocates its own malloc arena (up to eight
/// per core) and seldom returns their free memory. Big rows passing between
/// the runtime's workers and the blocking pool made that fragmentation, not
/// data, most of weft's peak memory during a big transaction (measured in
/// `tests/e2e/workload.rs`: 80 → 111 MiB from a 20 MB to a 200 MB
/// transaction with two arenas, 76 → 87 MiB with one). One arena keeps the
/// peak flat; glibc's per-thread caches (tcache) keep small allocations off
/// its lock. A `MALLOC_ARENA_MAX` set in the environment still wins.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn limit_malloc_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only tunes the allocator; it runs first thing in
        // main, before any other thread exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn limit_malloc_arenas() {}
