//! The remote `weft` CLI against a running weft with an API token: a saved
//! context (file readable by its owner only) supplies URL and token;
//! `sink ls`, `config plan|apply|export`, `backfill
//! start|ls|show|pause|resume|cancel` and `dead-letters ls|replay|discard`
//! print tables, or the API's JSON with `--json`; a wrong token fails with
//! the API's reason.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::harness::postgres::PgCluster;
use crate::harness::weft::WeftProcess;

const TOKEN: &str = "cli-token-0123456789abcdef";

/// Runs `weft ARGS` with contexts kept in `home`; answers (success,
/// stdout, stderr).
fn weft_cli(home: &Path, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(args)
        .env("WEFT_HOME", home)
        .env_remove("WEFT_URL")
        .env_remove("WEFT_TOKEN")
        .env_remove("WEFT_CONFIG")
        .output()
        .expect("run the weft CLI");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn ok(home: &Path, args: &[&str]) -> String {
    let (success, stdout, stderr) = weft_cli(home, args);
    assert!(success, "weft {args:?} failed: {stderr}");
    stdout
}

fn config(pg: &PgCluster, extra_sink: bool) -> String {
    let mut yaml = format!(
        "{}api_tokens:\n  - {{ name: cli, token: {TOKEN} }}\nsinks:\n  - name: items\n    database: shop\n    source: {{ include_tables: [public.items] }}\n    destination: {{ type: sequin_stream, max_deliver: 1, ack_wait_ms: 500 }}\n",
        pg.databases_yaml("weft_cli")
    );
    if extra_sink {
        yaml.push_str("  - name: more\n    database: shop\n    source: { include_tables: [public.items] }\n    destination: { type: sequin_stream }\n");
    }
    yaml
}

#[test]
fn the_cli_manages_a_running_weft_through_a_saved_context() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v text); INSERT INTO items VALUES (1, 'a'), (2, 'b')");
    let (_dir, mut weft) = WeftProcess::start_replicating(&pg, "weft_cli", &config(&pg, false));
    let home = tempfile::tempdir().unwrap();
    let home = home.path();

    ok(
        home,
        &[
            "context",
            "add",
            "local",
            "--url",
            &weft.url(""),
            "--token",
            TOKEN,
        ],
    );
    let file = home.join("contexts.json");
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(ok(home, &["context", "ls"]).contains("*  local"));

    let sinks = ok(home, &["sink", "ls"]);
    assert_eq!(
        sinks,
        "NAME   TYPE           SOURCE  STATUS\nitems  sequin_stream  shop    active\n"
    );
    let json: Value = serde_json::from_str(&ok(home, &["sink", "ls", "--json"])).unwrap();
    assert_eq!(json["data"][0]["name"], "items");
    let (success, _, stderr) =
        weft_cli(home, &["sink", "ls", "--token", "not-the-token-0123456789"]);
    assert!(!success);
    assert!(
        stderr.contains("401") && stderr.contains("unknown API token"),
        "{stderr}"
    );

    // Config: plan names the change, apply makes it, export shows it.
    let proposed = home.join("proposed.yml");
    std::fs::write(&proposed, config(&pg, true)).unwrap();
    let planned = ok(home, &["config", "plan", proposed.to_str().unwrap()]);
    assert!(planned.contains("create  sink      more"), "{planned}");
    let applied = ok(home, &["config", "apply", proposed.to_str().unwrap()]);
    assert!(applied.starts_with("applied 1 change(s)"), "{applied}");
    let listed = weft.wait_until("the new sink", Duration::from_secs(60), || {
        let (_, stdout, stderr) = weft_cli(home, &["sink", "ls"]);
        if stdout.contains("more") {
            Ok(stdout)
        } else {
            Err(stderr)
        }
    });
    assert!(listed.contains("items"));
    assert!(ok(home, &["config", "export"]).contains("token: (redacted)"));
    assert!(ok(home, &["config", "plan", proposed.to_str().unwrap()]).starts_with("no changes"));

    // A backfill, then dead letters: one delivery allowed, never acked.
    pg.wait_for_active_slot("weft_cli");
    let started = ok(
        home,
        &["backfill", "start", "items", "--table", "public.items"],
    );
    assert!(started.contains("public.items"), "{started}");
    weft.wait_until("the backfill", Duration::from_secs(60), || {
        let listed = ok(home, &["backfill", "ls", "items"]);
        if listed.contains("completed") {
            Ok(())
        } else {
            Err(listed)
        }
    });
    // A receive hands messages out, and moves those handed out
    // `max_deliver` times whose lease ran out to the dead letters.
    let receive = || -> Vec<Value> {
        let got: Value = crate::harness::weft::http()
            .get(weft.url("/api/http_pull_consumers/items/receive?batch_size=10&wait_for=1000"))
            .bearer_auth(TOKEN)
            .send()
            .unwrap()
            .json()
            .unwrap();
        got["data"].as_array().unwrap().clone()
    };
    let received = receive();
    assert!(!received.is_empty());
    let letters = weft.wait_until("dead letters", Duration::from_secs(60), || {
        receive();
        let json: Value =
            serde_json::from_str(&ok(home, &["dead-letters", "ls", "items", "--json"])).unwrap();
        match json["data"].as_array() {
            Some(data) if data.len() == received.len() => Ok(data.clone()),
            _ => Err(json),
        }
    });
    let table = ok(home, &["dead-letters", "ls", "items"]);
    assert!(table.starts_with("ID  IDEMPOTENCY_KEY"), "{table}");
    let first = letters[0]["id"].as_i64().unwrap().to_string();
    assert_eq!(
        ok(home, &["dead-letters", "discard", "items", &first]),
        format!("discarded dead letter {first} of items\n")
    );
    let replayed = ok(home, &["dead-letters", "replay", "items"]);
    let rest: Vec<String> = letters[1..].iter().map(|l| l["id"].to_string()).collect();
    assert_eq!(
        replayed,
        format!(
            "replayed {} dead letter(s) of items: {}\n",
            rest.len(),
            rest.join(", ")
        )
    );
    let left: Value =
        serde_json::from_str(&ok(home, &["dead-letters", "ls", "items", "--json"])).unwrap();
    assert_eq!(left["data"], serde_json::json!([]), "{left}");
    assert_eq!(
        ok(home, &["sink", "pause", "items"]),
        "sink items: paused\n"
    );
    assert!(ok(home, &["sink", "ls"]).contains("items  sequin_stream  shop    paused"));
    assert_eq!(
        ok(home, &["sink", "resume", "items"]),
        "sink items: active\n"
    );

    // Plugins: push, list, refuse a bad one, remove.
    let component = crate::harness::guests::wasm("weft_tag_transform");
    let component = component.to_str().unwrap();
    let pushed = ok(
        home,
        &[
            "plugin",
            "push",
            component,
            "--as",
            "tagger@1.0.0",
            "--kind",
            "transform",
        ],
    );
    assert!(
        pushed.starts_with("plugin tagger@1.0.0: transform "),
        "{pushed}"
    );
    let (success, _, stderr) = weft_cli(
        home,
        &[
            "plugin",
            "push",
            component,
            "--as",
            "tagger@2.0.0",
            "--kind",
            "filter",
        ],
    );
    assert!(!success);
    assert!(
        stderr.contains("weft answered 422") && stderr.contains("weft:plugin/filter world"),
        "{stderr}"
    );
    let listed = ok(home, &["plugin", "ls"]);
    assert!(listed.starts_with("NAME    VERSION  KIND"), "{listed}");
    assert!(listed.contains("tagger  1.0.0    transform"), "{listed}");
    assert_eq!(
        ok(home, &["plugin", "rm", "tagger@1.0.0"]),
        "plugin tagger@1.0.0: deleted\n"
    );
    assert!(!ok(home, &["plugin", "ls"]).contains("tagger"));
    assert_eq!(weft.terminate(), Some(0));
}

/// `weft ARGS --url URL` against `weft`, without a saved context.
fn at(weft: &WeftProcess, home: &Path, args: &[&str]) -> (bool, String, String) {
    let url = weft.url("");
    let mut args = args.to_vec();
    args.extend(["--url", url.as_str()]);
    weft_cli(home, &args)
}

#[test]
fn the_cli_runs_a_backfills_whole_lifecycle_and_starts_partial_ones() {
    let pg = PgCluster::start();
    pg.psql(
        "CREATE TABLE bulk (id int PRIMARY KEY, v text NOT NULL);
         INSERT INTO bulk SELECT g, CASE WHEN g % 2 = 0 THEN 'even' ELSE 'odd' END
         FROM generate_series(1, 5000) g",
    );
    // Nothing receives, so the backlog bound holds the full backfill
    // active long enough to pause it.
    let config = format!(
        "{}sinks:\n  - name: bulk\n    database: shop\n    source: {{ include_tables: [public.bulk] }}\n    destination: {{ type: sequin_stream }}\n    max_backlog_messages: 500\n",
        pg.databases_yaml("weft_cli_backfill")
    );
    let (_dir, mut weft) = WeftProcess::start_replicating(&pg, "weft_cli_backfill", &config);
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let ok_at = |args: &[&str]| {
        let (success, stdout, stderr) = at(&weft, home, args);
        assert!(success, "weft {args:?} failed: {stderr}");
        stdout
    };

    // What to read is checked before any request.
    for (args, problem) in [
        (vec!["backfill", "start", "bulk"], "--table <TABLE>|--all"),
        (
            vec![
                "backfill",
                "start",
                "bulk",
                "--all",
                "--table",
                "public.bulk",
            ],
            "cannot be used with",
        ),
        (
            vec!["backfill", "start", "bulk", "--all", "--param", "x"],
            "--where <SQL>",
        ),
        (
            vec![
                "backfill",
                "start",
                "bulk",
                "--all",
                "--start-position",
                "3",
            ],
            "--sort-column <SORT_COLUMN>",
        ),
    ] {
        let (success, _, stderr) = at(&weft, home, &args);
        assert!(!success && stderr.contains(problem), "{args:?}: {stderr}");
    }

    let started = ok_at(&["backfill", "start", "bulk", "--all"]);
    assert!(started.starts_with("ID "), "{started}");
    assert!(started.contains("public.bulk"), "{started}");
    let listed: Value =
        serde_json::from_str(&ok_at(&["backfill", "ls", "bulk", "--json"])).unwrap();
    let id = listed["data"][0]["id"].as_str().unwrap().to_string();
    weft.wait_until("backfill progress", Duration::from_secs(60), || {
        let shown: Value =
            serde_json::from_str(&ok_at(&["backfill", "show", "bulk", &id])).unwrap();
        match shown["rows_processed_count"].as_u64() {
            Some(n) if n > 0 => Ok(()),
            _ => Err(shown),
        }
    });
    assert_eq!(
        ok_at(&["backfill", "pause", "bulk", &id]),
        format!("backfill {id} of bulk: paused\n")
    );
    let (success, _, stderr) = at(&weft, home, &["backfill", "pause", "bulk", &id]);
    assert!(!success);
    assert!(
        stderr.contains("409") && stderr.contains("is paused; this needs it active"),
        "{stderr}"
    );
    assert_eq!(
        ok_at(&["backfill", "resume", "bulk", &id]),
        format!("backfill {id} of bulk: active\n")
    );
    assert_eq!(
        ok_at(&["backfill", "cancel", "bulk", &id]),
        format!("backfill {id} of bulk: cancelled\n")
    );

    // A partial backfill: from a sort column's position, with a filter
    // whose value is bound as a parameter.
    let partial: Value = serde_json::from_str(&ok_at(&[
        "backfill",
        "start",
        "bulk",
        "--table",
        "public.bulk",
        "--sort-column",
        "id",
        "--start-position",
        "4001",
        "--where",
        "v = $1",
        "--param",
        "even",
        "--json",
    ]))
    .unwrap();
    let partial_id = partial["id"].as_str().unwrap();
    let shown: Value =
        serde_json::from_str(&ok_at(&["backfill", "show", "bulk", partial_id])).unwrap();
    assert_eq!(
        (
            &shown["kind"],
            &shown["sort_column"],
            &shown["start_position"],
            &shown["filter"]["params"],
        ),
        (
            &Value::from("partial"),
            &Value::from("id"),
            &Value::from("4001"),
            &serde_json::json!(["even"]),
        ),
        "{shown}"
    );
    assert!(shown["rows_initial_count"].is_u64(), "an estimate: {shown}");
    let table = ok_at(&["backfill", "ls", "bulk"]);
    assert!(
        table.starts_with("ID  ") && table.contains("ROWS/S") && table.contains("cancelled"),
        "{table}"
    );
    assert_eq!(weft.terminate(), Some(0));
}
