//! Each remote command: one or two API calls, and what to print (a table,
//! or the API's JSON with `--json`).

use serde_json::{Value, json};

pub use super::client::Remote;
use super::table::render;

/// How to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Tables for humans.
    Table,
    /// The API's JSON, pretty-printed.
    Json,
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).expect("JSON values serialize") + "\n"
}

fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn rows(body: &Value) -> &[Value] {
    body["data"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// `sink ls`.
pub async fn sink_ls(remote: &Remote, output: Output) -> Result<String, String> {
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
pub async fn sink_pause(
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
pub async fn sink_show(remote: &Remote, name: &str) -> Result<String, String> {
    Ok(pretty(&remote.get(&format!("/api/sinks/{name}")).await?))
}

/// `config plan FILE` and `config apply FILE`.
pub async fn config_change(
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
pub async fn config_export(remote: &Remote) -> Result<String, String> {
    let body = remote.get("/api/config/export").await?;
    Ok(text(&body["yaml"]))
}

/// What `backfill start` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackfillRequest {
    /// The tables, `schema.table`; `None` for every table of the sink.
    pub tables: Option<Vec<String>>,
    /// The column a partial backfill reads in order.
    pub sort_column: Option<String>,
    /// The first `sort_column` value to read.
    pub start_position: Option<String>,
    /// A `WHERE` condition and the values of its `$1`, `$2`, ….
    pub filter: Option<(String, Vec<String>)>,
}

impl BackfillRequest {
    /// The body of `POST /api/sinks/{sink}/backfills`: `table` for one
    /// table (the answer is that backfill), else `tables`.
    pub fn body(&self) -> Value {
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
pub async fn backfill_start(
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
pub async fn backfill_ls(remote: &Remote, sink: &str, output: Output) -> Result<String, String> {
    let body = remote.get(&format!("/api/sinks/{sink}/backfills")).await?;
    if output == Output::Json {
        return Ok(pretty(&body));
    }
    Ok(backfill_table(rows(&body)))
}

/// `backfill show SINK ID`: the API's JSON (scope, cursor, last error).
pub async fn backfill_show(remote: &Remote, sink: &str, id: &str) -> Result<String, String> {
    Ok(pretty(
        &remote
            .get(&format!("/api/sinks/{sink}/backfills/{id}"))
            .await?,
    ))
}

/// `backfill pause|resume SINK ID` (`verb` is `pause` or `resume`).
pub async fn backfill_set_state(
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
pub async fn backfill_cancel(
    remote: &Remote,
    sink: &str,
    id: &str,
    output: Output,
) -> Result<String, String> {
    let body = remote
        .delete(&format!("/api/sinks/{sink}/backfills/{id}"))
        .await?;
    Ok(backfill_state(&body, sink, id, output))
}

/// `dead-letters ls SINK`.
pub async fn dead_letters_ls(
    remote: &Remote,
    sink: &str,
    output: Output,
) -> Result<String, String> {
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
pub async fn dead_letters_replay(
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
pub async fn dead_letters_discard(
    remote: &Remote,
    sink: &str,
    id: i64,
    output: Output,
) -> Result<String, String> {
    let answer = remote
        .delete(&format!("/api/sinks/{sink}/dead_letters/{id}"))
        .await?;
    if output == Output::Json {
        return Ok(pretty(&answer));
    }
    Ok(format!("discarded dead letter {id} of {sink}\n"))
}

/// `plugin push FILE --name N --version V --kind K`.
pub async fn plugin_push(
    remote: &Remote,
    file: &std::path::Path,
    reference: &str,
    kind: &str,
    output: Output,
) -> Result<String, String> {
    let (name, version) = reference.split_once('@').ok_or_else(|| {
        format!("{reference:?}: name the version to push as name@version, e.g. mask-pii@1.2.0")
    })?;
    let bytes = std::fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let query = [("name", name), ("version", version), ("kind", kind)];
    let body = remote.post_wasm("/api/plugins", &query, bytes).await?;
    if output == Output::Json {
        return Ok(pretty(&body));
    }
    Ok(format!(
        "plugin {}: {} {} bytes, sha256 {}\n",
        text(&body["reference"]),
        text(&body["kind"]),
        text(&body["bytes"]),
        text(&body["sha256"])
    ))
}

/// `plugin ls`.
pub async fn plugin_ls(remote: &Remote, output: Output) -> Result<String, String> {
    let body = remote.get("/api/plugins").await?;
    if output == Output::Json {
        return Ok(pretty(&body));
    }
    let table: Vec<Vec<String>> = rows(&body)
        .iter()
        .map(|plugin| {
            let imports = plugin["imports"]
                .as_array()
                .map(|list| list.iter().map(text).collect::<Vec<_>>().join(","))
                .filter(|list| !list.is_empty())
                .unwrap_or_else(|| "-".into());
            vec![
                text(&plugin["name"]),
                text(&plugin["version"]),
                text(&plugin["kind"]),
                text(&plugin["bytes"]),
                text(&plugin["sha256"]).chars().take(12).collect(),
                imports,
            ]
        })
        .collect();
    Ok(render(
        &["NAME", "VERSION", "KIND", "BYTES", "SHA256", "IMPORTS"],
        &table,
    ))
}

/// `plugin rm NAME@VERSION`.
pub async fn plugin_rm(remote: &Remote, reference: &str, output: Output) -> Result<String, String> {
    let (name, version) = reference
        .split_once('@')
        .ok_or_else(|| format!("{reference:?}: name the version to remove as name@version"))?;
    let body = remote
        .delete(&format!("/api/plugins/{name}/{version}"))
        .await?;
    if output == Output::Json {
        return Ok(pretty(&body));
    }
    Ok(format!("plugin {name}@{version}: deleted\n"))
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
