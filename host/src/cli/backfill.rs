//! `weft backfill start|ls|show|pause|resume|cancel`: backfills of a
//! running weft's sinks.

use std::process::ExitCode;

use clap::Subcommand;
use serde_json::{Value, json};

use super::remote::table::render;
use super::remote::{Output, Remote, RemoteArgs, pretty, rows, text};

/// `weft backfill ...`.
#[derive(Subcommand)]
pub enum BackfillCommand {
    /// Start a backfill of tables into a sink: full, or partial from a
    /// sort column's position and/or with a parameterised `WHERE` filter.
    Start {
        /// The sink.
        sink: String,
        #[command(flatten)]
        start: StartArgs,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// List a sink's backfills with their progress.
    Ls {
        /// The sink.
        sink: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Show one backfill: its scope, state, progress, cursor and last error.
    Show {
        /// The sink.
        sink: String,
        /// The backfill's id.
        id: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Pause an active backfill (it keeps its cursor).
    Pause {
        /// The sink.
        sink: String,
        /// The backfill's id.
        id: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Resume a paused backfill from its cursor.
    Resume {
        /// The sink.
        sink: String,
        /// The backfill's id.
        id: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Cancel a backfill.
    Cancel {
        /// The sink.
        sink: String,
        /// The backfill's id.
        id: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

/// What `backfill start` reads: which tables, and which of their rows.
#[derive(clap::Args)]
pub struct StartArgs {
    #[command(flatten)]
    tables: Tables,
    /// Read in this column's order, from `--start-position` (a partial
    /// backfill).
    #[arg(long, requires = "start_position")]
    sort_column: Option<String>,
    /// The first `--sort-column` value to read.
    #[arg(long, requires = "sort_column")]
    start_position: Option<String>,
    /// Only rows matching this SQL condition, e.g. `status = $1`.
    #[arg(long = "where", value_name = "SQL")]
    where_sql: Option<String>,
    /// A value for `$1`, `$2`, … of `--where`, in order (Postgres casts
    /// each from text); repeat for several.
    #[arg(long = "param", value_name = "VALUE", requires = "where_sql")]
    params: Vec<String>,
}

/// Which tables `backfill start` reads: the listed ones, or all.
#[derive(clap::Args)]
#[group(required = true, multiple = false)]
struct Tables {
    /// A table, `schema.table`; repeat for several.
    #[arg(long)]
    table: Vec<String>,
    /// Every table the sink receives.
    #[arg(long)]
    all: bool,
}

impl StartArgs {
    fn into_request(self) -> BackfillRequest {
        BackfillRequest {
            tables: if self.tables.all {
                None
            } else {
                Some(self.tables.table)
            },
            sort_column: self.sort_column,
            start_position: self.start_position,
            filter: self.where_sql.map(|sql| (sql, self.params)),
        }
    }
}

impl BackfillCommand {
    /// Runs the command.
    pub fn run(self) -> ExitCode {
        match self {
            BackfillCommand::Start {
                sink,
                start,
                remote,
            } => {
                let request = start.into_request();
                remote.run(|r, out| async move { start_backfill(&r, &sink, &request, out).await })
            }
            BackfillCommand::Ls { sink, remote } => {
                remote.run(|r, out| async move { ls(&r, &sink, out).await })
            }
            BackfillCommand::Show { sink, id, remote } => {
                remote.run(|r, _| async move { show(&r, &sink, &id).await })
            }
            BackfillCommand::Pause { sink, id, remote } => {
                remote.run(|r, out| async move { set_state(&r, &sink, &id, "pause", out).await })
            }
            BackfillCommand::Resume { sink, id, remote } => {
                remote.run(|r, out| async move { set_state(&r, &sink, &id, "resume", out).await })
            }
            BackfillCommand::Cancel { sink, id, remote } => {
                remote.run(|r, out| async move { cancel(&r, &sink, &id, out).await })
            }
        }
    }
}

/// What `backfill start` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct BackfillRequest {
    /// The tables, `schema.table`; `None` for every table of the sink.
    tables: Option<Vec<String>>,
    /// The column a partial backfill reads in order.
    sort_column: Option<String>,
    /// The first `sort_column` value to read.
    start_position: Option<String>,
    /// A `WHERE` condition and the values of its `$1`, `$2`, ….
    filter: Option<(String, Vec<String>)>,
}

impl BackfillRequest {
    /// The body of `POST /api/sinks/{sink}/backfills`: `table` for one
    /// table (the answer is that backfill), else `tables`.
    fn body(&self) -> Value {
        let mut body = json!({});
        match self.tables.as_deref() {
            Some([table]) => body["table"] = json!(table),
            Some(tables) => body["tables"] = json!(tables),
            None => body["tables"] = json!("all"),
        }
        if let Some(column) = &self.sort_column {
            body["sort_column"] = json!(column);
        }
        if let Some(position) = &self.start_position {
            body["start_position"] = json!(position);
        }
        if let Some((sql, params)) = &self.filter {
            body["filter"] = json!({ "where": sql, "params": params });
        }
        body
    }
}

/// `backfill start SINK (--table T ... | --all) [partial options]`.
async fn start_backfill(
    remote: &Remote,
    sink: &str,
    request: &BackfillRequest,
    output: Output,
) -> Result<String, String> {
    let body = remote
        .post(
            &format!("/api/sinks/{sink}/backfills"),
            Some(&request.body()),
        )
        .await?;
    if output == Output::Json {
        return Ok(pretty(&body));
    }
    let started = if body["data"].is_array() {
        rows(&body).to_vec()
    } else {
        vec![body]
    };
    Ok(backfill_table(&started))
}

/// `backfill ls SINK`.
async fn ls(remote: &Remote, sink: &str, output: Output) -> Result<String, String> {
    let body = remote.get(&format!("/api/sinks/{sink}/backfills")).await?;
    if output == Output::Json {
        return Ok(pretty(&body));
    }
    Ok(backfill_table(rows(&body)))
}

/// `backfill show SINK ID`: the API's JSON (scope, cursor, last error).
async fn show(remote: &Remote, sink: &str, id: &str) -> Result<String, String> {
    Ok(pretty(
        &remote
            .get(&format!("/api/sinks/{sink}/backfills/{id}"))
            .await?,
    ))
}

/// `backfill pause|resume SINK ID` (`verb` is `pause` or `resume`).
async fn set_state(
    remote: &Remote,
    sink: &str,
    id: &str,
    verb: &str,
    output: Output,
) -> Result<String, String> {
    let body = remote
        .post(&format!("/api/sinks/{sink}/backfills/{id}/{verb}"), None)
        .await?;
    Ok(backfill_state(&body, sink, id, output))
}

/// What a state change of backfill `id` answered: its new state, or the
/// API's JSON.
fn backfill_state(body: &Value, sink: &str, id: &str, output: Output) -> String {
    match output {
        Output::Json => pretty(body),
        Output::Table => format!("backfill {id} of {sink}: {}\n", text(&body["state"])),
    }
}

fn backfill_table(backfills: &[Value]) -> String {
    let table: Vec<Vec<String>> = backfills
        .iter()
        .map(|b| {
            vec![
                text(&b["id"]),
                text(&b["table"]),
                text(&b["state"]),
                format!(
                    "{}/{}",
                    text(&b["rows_processed_count"]),
                    text(&b["rows_initial_count"])
                ),
                text(&b["rows_per_second"]),
                text(&b["eta_seconds"]),
            ]
        })
        .collect();
    render(&["ID", "TABLE", "STATE", "ROWS", "ROWS/S", "ETA_S"], &table)
}

/// `backfill cancel SINK ID`.
async fn cancel(remote: &Remote, sink: &str, id: &str, output: Output) -> Result<String, String> {
    let body = remote
        .delete(&format!("/api/sinks/{sink}/backfills/{id}"))
        .await?;
    Ok(backfill_state(&body, sink, id, output))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(tables: Option<&[&str]>) -> BackfillRequest {
        BackfillRequest {
            tables: tables.map(|t| t.iter().map(|s| s.to_string()).collect()),
            sort_column: None,
            start_position: None,
            filter: None,
        }
    }

    #[test]
    fn one_table_many_or_all_become_the_apis_table_or_tables() {
        assert_eq!(
            request(Some(&["public.a"])).body(),
            json!({"table": "public.a"})
        );
        assert_eq!(
            request(Some(&["public.a", "public.b"])).body(),
            json!({"tables": ["public.a", "public.b"]})
        );
        assert_eq!(request(None).body(), json!({"tables": "all"}));
    }

    #[test]
    fn a_partial_backfill_sends_its_position_and_a_parameterised_filter() {
        let partial = BackfillRequest {
            sort_column: Some("updated_at".into()),
            start_position: Some("2026-01-01".into()),
            filter: Some((
                "status = $1 AND total > $2".into(),
                vec!["paid".into(), "10".into()],
            )),
            ..request(None)
        };
        assert_eq!(
            partial.body(),
            json!({
                "tables": "all",
                "sort_column": "updated_at",
                "start_position": "2026-01-01",
                "filter": {"where": "status = $1 AND total > $2", "params": ["paid", "10"]},
            })
        );
    }
}
