//! The `weft` binary: the command-line interface, and `weft run`, the
//! composition root that builds every layer (see `docs/architecture.md`).

mod cli;
mod plugin_project;
mod server;

use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use tracing_subscriber::EnvFilter;

/// Postgres change-data-capture with sandboxed WebAssembly functions.
#[derive(Parser)]
#[command(name = "weft", version, about)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "WEFT_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: cli::Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
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
    cli.command.run()
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
/// arena memory as it is used). A shorter delay keeps the peak RSS lower,
/// but a backfill then spends much of its CPU faulting freed pages back
/// in; 1,000 ms, mimalloc v3's own default, costs ~15-45 MiB more peak RSS
/// while a backfill or a live burst runs, and the memory goes back a second
/// after it (the measurements: BENCHMARKS.md, "Twenty-third round").
/// Without lazy commit mimalloc keeps 2.5-3x the RSS. The numbers are
/// positions in mimalloc's `mi_option_t` (the same in its v2 and v3). A
/// `MIMALLOC_*` variable in the environment is read first and still wins.
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
