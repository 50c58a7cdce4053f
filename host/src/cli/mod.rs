//! The `weft` commands, one file each: its arguments (clap) and its `run`.
//! `run` and `check` work on a config file; `plugin new|build` on a plugin
//! project; the rest talk to a running weft's HTTP API through
//! [`remote`] (Sequin's CLI shape: contexts holding a server URL and
//! token, human tables by default, the API's JSON with `--json`).

pub mod backfill;
pub mod check;
pub mod config;
pub mod context;
pub mod dead_letters;
pub mod plugin;
pub mod remote;
pub mod run;
pub mod sink;

use std::process::ExitCode;

use clap::Subcommand;

/// Every `weft` command.
#[derive(Subcommand)]
pub enum Command {
    /// Start weft with a config file.
    Run(run::RunArgs),
    /// Check a config file and exit: prints every problem with its path.
    Check(check::CheckArgs),
    /// Create and build plugins (WebAssembly functions).
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Work with config files, locally or on a running weft.
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Named weft servers (URL and API token) the remote commands use.
    #[command(subcommand)]
    Context(context::ContextCommand),
    /// The sinks of a running weft.
    #[command(subcommand)]
    Sink(sink::SinkCommand),
    /// Backfills of a running weft's sinks.
    #[command(subcommand)]
    Backfill(backfill::BackfillCommand),
    /// Dead letters of a running weft's sinks.
    #[command(subcommand, name = "dead-letters")]
    DeadLetters(dead_letters::DeadLetterCommand),
}

impl Command {
    /// Runs the command; its exit status.
    pub fn run(self) -> ExitCode {
        match self {
            Command::Run(args) => args.run(),
            Command::Check(args) => args.run(),
            Command::Plugin(command) => command.run(),
            Command::Config(command) => command.run(),
            Command::Context(command) => command.run(),
            Command::Sink(command) => command.run(),
            Command::Backfill(command) => command.run(),
            Command::DeadLetters(command) => command.run(),
        }
    }
}
