//! `weft config export|plan|apply`: work with config files, locally or on a
//! running weft.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::json;

use super::remote::table::render;
use super::remote::{Output, Remote, RemoteArgs, pretty, text};

#[derive(Subcommand)]
/// `weft config ...`.
pub enum ConfigCommand {
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

impl ConfigCommand {
    /// Runs the command.
    pub fn run(self) -> ExitCode {
        match self {
            ConfigCommand::Export {
                config: Some(config),
                show_secrets,
                ..
            } => export_local(&config, show_secrets),
            ConfigCommand::Export {
                config: None,
                show_secrets,
                remote,
            } => {
                if show_secrets {
                    eprintln!(
                        "weft: --show-secrets needs --config FILE: the API never shows secrets"
                    );
                    return ExitCode::from(2);
                }
                remote.run(|r, _| async move { export_remote(&r).await })
            }
            ConfigCommand::Plan { file, remote } => send(&remote, "plan", &file),
            ConfigCommand::Apply { file, remote } => send(&remote, "apply", &file),
        }
    }
}

/// `weft config export`: checks the config, then prints it.
fn export_local(path: &Path, show_secrets: bool) -> ExitCode {
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

/// `weft config plan|apply FILE`: sends the file's text as written.
fn send(remote: &RemoteArgs, verb: &'static str, file: &Path) -> ExitCode {
    let yaml = match std::fs::read_to_string(file) {
        Ok(yaml) => yaml,
        Err(error) => {
            eprintln!("weft: cannot read {}: {error}", file.display());
            return ExitCode::from(2);
        }
    };
    remote.run(|r, out| async move { change(&r, verb, yaml, out).await })
}

/// `config plan FILE` and `config apply FILE`.
async fn change(
    remote: &Remote,
    verb: &str,
    yaml: String,
    output: Output,
) -> Result<String, String> {
    let body = remote
        .post(
            &format!("/api/config/{verb}"),
            Some(&json!({ "yaml": yaml })),
        )
        .await?;
    if output == Output::Json {
        return Ok(pretty(&body));
    }
    let changes = body["changes"].as_array().cloned().unwrap_or_default();
    let table: Vec<Vec<String>> = changes
        .iter()
        .map(|c| {
            vec![
                text(&c["action"]),
                text(&c["resource_type"]),
                text(&c["name"]),
            ]
        })
        .collect();
    let head = match (verb, changes.len(), body["applied"].as_bool()) {
        (_, 0, _) => return Ok("no changes: the config matches the running one\n".into()),
        ("apply", n, Some(true)) if body["restarted"] == false => {
            format!("applied {n} change(s) in place; every other sink kept flowing\n")
        }
        ("apply", n, Some(true)) => {
            format!("applied {n} change(s); weft restarted its pipelines with them\n")
        }
        (_, n, _) => format!("{n} change(s) to apply:\n"),
    };
    Ok(head + &render(&["ACTION", "RESOURCE", "NAME"], &table))
}

/// `config export` from the server (secrets redacted).
async fn export_remote(remote: &Remote) -> Result<String, String> {
    let body = remote.get("/api/config/export").await?;
    Ok(text(&body["yaml"]))
}
