//! `weft context add|ls|select|rm`: named weft servers (URL and API token)
//! the remote commands use.

use std::process::ExitCode;

use clap::Subcommand;

use super::remote::contexts::{Context, Contexts};
use super::remote::table::render;

#[derive(Subcommand)]
/// `weft context ...`.
pub enum ContextCommand {
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

/// `weft context ...`: edits the contexts file.
impl ContextCommand {
    /// Runs the command: edits the contexts file.
    pub fn run(self) -> ExitCode {
        let result = Contexts::load().and_then(|mut contexts| match self {
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
                Ok(render(&["", "NAME", "URL", "TOKEN"], &rows))
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
}
