//! Change retention through the real binary: a mixed concurrent workload
//! with a SIGKILL in the middle ends with each event table holding exactly
//! one row per committed change it keeps (actions and column filters
//! applied), per row in commit order; a backfill of the event table into a
//! pull sink replays them in order.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::oracle::{SCHEMA, Seen, concurrent_workload, digest, oracle};
use crate::harness::postgres::PgCluster;
use crate::harness::weft::{WeftProcess, http};

/// The change retentions, and with `replay` a pull sink on the accounts
/// event table (which must exist by then: weft checks a sink's tables).
fn config(pg: &PgCluster, replay: bool) -> String {
    let replay = if replay {
        "sinks:\n  - name: replay\n    database: load\n    source: { include_tables: [public.accounts_events] }\n    destination: { type: sequin_stream, ack_wait_ms: 60000 }\n"
    } else {
        ""
    };
    format!(
        r#"
databases:
  - name: load
    hostname: 127.0.0.1
    port: {port}
    database: postgres
    username: postgres
    slot: {{ name: weft_retention, create_if_not_exists: true }}
    publication: {{ name: weft_retention }}
change_retentions:
  - name: accounts-log
    source_database: load
    source_table_name: accounts
    destination_database: load
    destination_table_name: accounts_events
  - name: lines-log
    source_database: load
    source_table_schema: public
    source_table_name: lines
    destination_database: load
    destination_table_schema: history
    destination_table_name: lines_events
    actions: [insert, delete]
    filters:
      - {{ column_name: qty, operator: ">=", comparison_value: 6 }}
    retain_for: 7d
{replay}"#,
        port = pg.port()
    )
}

/// The event table's rows by source row, in id order, as the oracle reads
/// changes; and how many rows it has.
fn events(pg: &PgCluster, table: &str) -> (BTreeMap<(String, String), Vec<Seen>>, usize) {
    let text = pg.psql(&format!(
        "SELECT coalesce(jsonb_agg(jsonb_build_array(source_table, record_pks, action, record) ORDER BY id), '[]')::text FROM {table}"
    ));
    let rows: Vec<Value> = serde_json::from_str(&text).unwrap();
    let mut by_row: BTreeMap<(String, String), Vec<Seen>> = BTreeMap::new();
    for row in &rows {
        let pks: Vec<&str> = row[1]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        by_row
            .entry((row[0].as_str().unwrap().to_string(), pks.join(":")))
            .or_default()
            .push(Seen {
                action: row[2].as_str().unwrap().to_string(),
                image: digest(&row[3]),
            });
    }
    (by_row, rows.len())
}

/// The oracle's changes of `table` that `keep` keeps.
fn expected(
    all: &BTreeMap<(String, String), Vec<Seen>>,
    table: &str,
    keep: impl Fn(&Seen) -> bool,
) -> (BTreeMap<(String, String), Vec<Seen>>, usize) {
    let mut kept = BTreeMap::new();
    let mut count = 0;
    for ((tbl, pk), changes) in all {
        if tbl != table {
            continue;
        }
        let changes: Vec<Seen> = changes.iter().filter(|c| keep(c)).cloned().collect();
        count += changes.len();
        if !changes.is_empty() {
            kept.insert((tbl.clone(), pk.clone()), changes);
        }
    }
    (kept, count)
}

#[test]
fn event_tables_hold_each_kept_change_once_through_a_sigkill_and_replay_in_order() {
    let pg = PgCluster::start();
    pg.psql(SCHEMA);
    // Every table, so that the event tables weft creates are published too.
    pg.psql("CREATE PUBLICATION weft_retention FOR ALL TABLES");
    let (dir, mut weft) =
        WeftProcess::start_replicating(&pg, "weft_retention", &config(&pg, false));

    // SIGKILL once the first event rows are in, while the rest stream.
    let at_kill = std::thread::scope(|scope| {
        let workload = scope.spawn(|| concurrent_workload(&pg, 7, 12, 1, &[]));
        let at_kill = weft.wait_until(
            "the first event rows",
            Duration::from_secs(120),
            || match pg.try_psql_in("postgres", "SELECT count(*) FROM accounts_events") {
                Ok(n) if n.trim() != "0" => Ok(n.trim().parse::<usize>().unwrap()),
                other => Err(other),
            },
        );
        weft.kill();
        weft.restart();
        let (committed, _) = workload.join().unwrap();
        assert!(committed > 0);
        at_kill
    });

    let (all, _) = oracle(&pg);
    let (accounts, accounts_count) = expected(&all, "accounts", |_| true);
    let (lines, lines_count) = expected(&all, "lines", |c| {
        matches!(c.action.as_str(), "insert" | "delete") && c.image["qty"].as_i64().unwrap() >= 6
    });
    assert!(
        accounts_count > 100 && lines_count > 100,
        "{accounts_count} {lines_count}"
    );
    assert!(
        at_kill < accounts_count,
        "killed mid-stream: {at_kill} of {accounts_count} rows were in"
    );
    for (table, want, count) in [
        ("accounts_events", &accounts, accounts_count),
        ("history.lines_events", &lines, lines_count),
    ] {
        let got = weft.wait_until(
            &format!("{count} rows in {table}"),
            Duration::from_secs(180),
            || {
                let (by_row, rows) = events(&pg, table);
                if rows >= count { Ok(by_row) } else { Err(rows) }
            },
        );
        let (_, rows) = events(&pg, table);
        assert_eq!(
            rows, count,
            "{table}: one row per kept change, no duplicates"
        );
        for (row, changes) in want {
            assert_eq!(got.get(row), Some(changes), "{table}: changes of {row:?}");
        }
    }

    // A backfill of the event table replays it, in id order, through a
    // sink added once the table exists.
    assert_eq!(weft.terminate(), Some(0));
    let mut weft = WeftProcess::start(dir.path(), &config(&pg, true));
    pg.wait_for_active_slot("weft_retention");
    let response = http()
        .post(weft.url("/api/sinks/replay/backfills"))
        .json(&json!({ "table": "public.accounts_events" }))
        .send()
        .unwrap();
    assert!(response.status().is_success(), "{:?}", response.text());
    let mut reads = Vec::new();
    weft.wait_until("the replay", Duration::from_secs(120), || {
        for message in weft.drain("replay", usize::MAX, Duration::from_secs(1)) {
            if message["action"] == "read" {
                reads.push(message["record"].clone());
            }
        }
        if reads.len() >= accounts_count {
            Ok(())
        } else {
            Err(reads.len())
        }
    });
    assert_eq!(reads.len(), accounts_count);
    let ids: Vec<i64> = reads.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "replayed in id order");
    let mut replayed: BTreeMap<(String, String), Vec<Seen>> = BTreeMap::new();
    for record in &reads {
        let pks: Vec<&str> = record["record_pks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        replayed
            .entry(("accounts".to_string(), pks.join(":")))
            .or_default()
            .push(Seen {
                action: record["action"].as_str().unwrap().to_string(),
                image: digest(&record["record"]),
            });
    }
    assert_eq!(
        replayed, accounts,
        "the replay holds every change, per row in commit order"
    );
    assert_eq!(weft.terminate(), Some(0));
}

#[test]
fn retain_for_deletes_event_rows_once_they_are_older() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE notes (id int PRIMARY KEY, body text)");
    let config = format!(
        "{}change_retentions:\n  - name: notes-log\n    source_database: shop\n    source_table_name: notes\n    destination_database: shop\n    destination_table_name: notes_events\n    retain_for: 3s\n",
        pg.databases_yaml("weft_retain")
    );
    let (_dir, weft) = WeftProcess::start_replicating(&pg, "weft_retain", &config);
    pg.psql("INSERT INTO notes SELECT g, 'n' || g FROM generate_series(1, 50) g");
    let count = || pg.try_psql_in("postgres", "SELECT count(*) FROM notes_events");
    weft.wait_until("50 event rows", Duration::from_secs(60), || match count() {
        Ok(n) if n == "50" => Ok(()),
        other => Err(other),
    });
    // Rows younger than 3 s stay; then they go, and are counted.
    weft.wait_until(
        "the rows to age out",
        Duration::from_secs(60),
        || match count() {
            Ok(n) if n == "0" => Ok(()),
            other => Err(other),
        },
    );
    let listed = weft.get_json("/api/change_retentions");
    assert_eq!(listed["data"][0]["name"], "notes-log", "{listed}");
    assert_eq!(listed["data"][0]["destination_table_name"], "notes_events");
    assert_eq!(listed["data"][0]["retain_for_seconds"], 3);
    assert_eq!(
        listed["data"][0]["actions"],
        serde_json::json!(["insert", "update", "delete"])
    );
    let one = weft.get_json("/api/change_retentions/notes-log");
    assert_eq!(one["source_table_name"], "notes", "{one}");
    let missing = http()
        .get(weft.url("/api/change_retentions/nope"))
        .send()
        .unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    let deleted = weft.metric(
        "weft_change_retention_deleted_total",
        &[("retention", "notes-log")],
    );
    assert_eq!(deleted, Some(50.0));
    pg.psql("INSERT INTO notes VALUES (51, 'late')");
    weft.wait_until("the new row", Duration::from_secs(60), || match count() {
        Ok(n) if n == "1" => Ok(()),
        other => Err(other),
    });
}
