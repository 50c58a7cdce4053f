//! `weft sink ls|show|pause|resume`: the sinks of a running weft.

use std::process::ExitCode;

use clap::Subcommand;
use serde_json::Value;

use super::remote::table::render;
use super::remote::{Output, Remote, RemoteArgs, pretty, rows, text};

/// `weft sink ...`.
#[derive(Subcommand)]
pub enum SinkCommand {
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

impl SinkCommand {
    /// Runs the command.
    pub fn run(self) -> ExitCode {
        match self {
            SinkCommand::Ls { remote } => remote.run(|r, out| async move { ls(&r, out).await }),
            SinkCommand::Show { name, remote } => {
                remote.run(|r, _| async move { show(&r, &name).await })
            }
            SinkCommand::Pause { name, remote } => {
                remote.run(|r, out| async move { pause(&r, &name, true, out).await })
            }
            SinkCommand::Resume { name, remote } => {
                remote.run(|r, out| async move { pause(&r, &name, false, out).await })
            }
        }
    }
}

/// `sink ls`.
async fn ls(remote: &Remote, output: Output) -> Result<String, String> {
    let body = remote.get("/api/sinks").await?;
    if output == Output::Json {
        return Ok(pretty(&body));
    }
    let table: Vec<Vec<String>> = rows(&body)
        .iter()
        .map(|sink| {
            let source = match (&sink["database"], &sink["source"]["webhook"]) {
                (Value::String(db), _) => db.clone(),
                (_, Value::String(hook)) => format!("webhook:{hook}"),
                _ => "-".into(),
            };
            vec![
                text(&sink["name"]),
                text(&sink["destination"]["type"]),
                source,
                text(&sink["status"]),
            ]
        })
        .collect();
    Ok(render(&["NAME", "TYPE", "SOURCE", "STATUS"], &table))
}

/// `sink pause NAME` (`paused`) and `sink resume NAME`.
async fn pause(
    remote: &Remote,
    name: &str,
    paused: bool,
    output: Output,
) -> Result<String, String> {
    let verb = if paused { "pause" } else { "resume" };
    let body = remote
        .post(&format!("/api/sinks/{name}/{verb}"), None)
        .await?;
    if output == Output::Json {
        return Ok(pretty(&body));
    }
    Ok(format!("sink {name}: {}\n", text(&body["status"])))
}

/// `sink show NAME`: the sink's entry (always JSON: it is nested).
async fn show(remote: &Remote, name: &str) -> Result<String, String> {
    Ok(pretty(&remote.get(&format!("/api/sinks/{name}")).await?))
}
