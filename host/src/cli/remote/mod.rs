//! What the commands that talk to a running weft share: which weft to
//! call and how to print ([`RemoteArgs`]), the HTTP client ([`client`]),
//! the saved contexts ([`contexts`]) and tables ([`table`]). Human tables
//! by default, the API's JSON with `--json` (Sequin's CLI shape).

pub mod client;
pub mod contexts;
pub mod table;

use std::process::ExitCode;

use serde_json::Value;

pub use client::Remote;

/// Which weft to talk to, and how to print.
#[derive(clap::Args)]
pub struct RemoteArgs {
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

/// How to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Tables for humans.
    Table,
    /// The API's JSON, pretty-printed.
    Json,
}

impl RemoteArgs {
    /// Runs one remote command against the weft these flags name; prints
    /// its output, or its error on stderr (exit status 1; 2 for bad
    /// arguments).
    pub fn run<F, Fut>(&self, command: F) -> ExitCode
    where
        F: FnOnce(Remote, Output) -> Fut,
        Fut: Future<Output = Result<String, String>>,
    {
        let remote = match Remote::resolve(
            self.url.clone(),
            self.token.clone(),
            self.context.as_deref(),
        ) {
            Ok(remote) => remote,
            Err(error) => {
                eprintln!("weft: {error}");
                return ExitCode::from(2);
            }
        };
        let output = if self.json {
            Output::Json
        } else {
            Output::Table
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
}

/// `value` as the API's JSON, pretty-printed.
pub fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).expect("JSON values serialize") + "\n"
}

/// `value` as a table cell: strings bare, `-` for null.
pub fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The entries of a list answer (`{"data": [...]}`).
pub fn rows(body: &Value) -> &[Value] {
    body["data"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}
