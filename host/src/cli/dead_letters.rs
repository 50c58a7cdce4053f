//! `weft dead-letters ls|replay|discard`: dead letters of a running
//! weft's sinks.

use std::process::ExitCode;

use clap::Subcommand;
use serde_json::json;

use super::remote::table::render;
use super::remote::{Output, Remote, RemoteArgs, pretty, rows, text};

/// `weft dead-letters ...`.
#[derive(Subcommand)]
pub enum DeadLetterCommand {
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

impl DeadLetterCommand {
    /// Runs the command.
    pub fn run(self) -> ExitCode {
        match self {
            DeadLetterCommand::Ls { sink, remote } => {
                remote.run(|r, out| async move { ls(&r, &sink, out).await })
            }
            DeadLetterCommand::Replay { sink, ids, remote } => {
                remote.run(|r, out| async move { replay(&r, &sink, &ids, out).await })
            }
            DeadLetterCommand::Discard { sink, id, remote } => {
                remote.run(|r, out| async move { discard(&r, &sink, id, out).await })
            }
        }
    }
}

/// `dead-letters ls SINK`.
async fn ls(remote: &Remote, sink: &str, output: Output) -> Result<String, String> {
    let body = remote
        .get(&format!("/api/sinks/{sink}/dead_letters?limit=1000"))
        .await?;
    if output == Output::Json {
        return Ok(pretty(&body));
    }
    let table: Vec<Vec<String>> = rows(&body)
        .iter()
        .map(|letter| {
            let error: String = text(&letter["last_error"]).chars().take(80).collect();
            vec![
                text(&letter["id"]),
                text(&letter["idempotency_key"]),
                text(&letter["attempts"]),
                error,
            ]
        })
        .collect();
    Ok(render(
        &["ID", "IDEMPOTENCY_KEY", "ATTEMPTS", "LAST_ERROR"],
        &table,
    ))
}

/// `dead-letters replay SINK [ID...]`: the listed ones, or all.
async fn replay(
    remote: &Remote,
    sink: &str,
    ids: &[i64],
    output: Output,
) -> Result<String, String> {
    let body = if ids.is_empty() {
        None
    } else {
        Some(json!({ "ids": ids }))
    };
    let answer = remote
        .post(
            &format!("/api/sinks/{sink}/dead_letters/replay"),
            body.as_ref(),
        )
        .await?;
    if output == Output::Json {
        return Ok(pretty(&answer));
    }
    let replayed: Vec<String> = answer["replayed"]
        .as_array()
        .map(|ids| ids.iter().map(text).collect())
        .unwrap_or_default();
    Ok(format!(
        "replayed {} dead letter(s) of {sink}: {}\n",
        replayed.len(),
        replayed.join(", ")
    ))
}

/// `dead-letters discard SINK ID`.
async fn discard(remote: &Remote, sink: &str, id: i64, output: Output) -> Result<String, String> {
    let answer = remote
        .delete(&format!("/api/sinks/{sink}/dead_letters/{id}"))
        .await?;
    if output == Output::Json {
        return Ok(pretty(&answer));
    }
    Ok(format!("discarded dead letter {id} of {sink}\n"))
}
