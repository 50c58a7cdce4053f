//! `weft check`: check a config file and exit, printing every problem
//! with its path.

use std::path::PathBuf;
use std::process::ExitCode;

use weft_sinks::config::Config;

/// `weft check`.
#[derive(clap::Args)]
pub struct CheckArgs {
    /// The YAML config (sequin.yml layout).
    #[arg(long, short, env = "WEFT_CONFIG")]
    config: PathBuf,
}

impl CheckArgs {
    /// Runs the command.
    pub fn run(self) -> ExitCode {
        match Config::load(&self.config) {
            Ok(_) => {
                println!("{}: ok", self.config.display());
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("{error}");
                ExitCode::from(2)
            }
        }
    }
}
