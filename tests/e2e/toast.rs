//! Unchanged TOAST values through the real binary: filled in from the old
//! row under REPLICA IDENTITY FULL; otherwise the `"unchanged_toast"`
//! placeholder, counted in `/metrics` and warned about at `/api/health`
//! until the table is made FULL.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::postgres::PgCluster;
use crate::harness::weft::WeftProcess;

const METRIC: &str = "weft_unchanged_toast_values_total";

fn config(pg: &PgCluster) -> String {
    format!(
        "{}sinks:
  - name: docs
    database: shop
    source: {{ include_tables: [public.docs, public.docs_full] }}
    destination: {{ type: sequin_stream }}
",
        pg.databases_yaml("weft_toast")
    )
}

/// Receives exactly `count` messages (acking them), in delivery order.
fn take(weft: &WeftProcess, count: usize) -> Vec<Value> {
    let got = weft.receive_at_least("docs", count, Duration::from_secs(30));
    assert_eq!(got.len(), count, "log:\n{}", weft.log_text());
    let ack_ids: Vec<&str> = got.iter().map(|m| m["ack_id"].as_str().unwrap()).collect();
    assert_eq!(weft.settle("docs", "ack", &ack_ids).0, 200);
    got.into_iter().map(|m| m["data"].clone()).collect()
}

/// The checks of database `shop` at `/api/health`.
fn database_checks(weft: &WeftProcess) -> Vec<Value> {
    weft.health_entity("database", "shop")
        .map(|e| e["checks"].as_array().unwrap().clone())
        .unwrap_or_default()
}

#[test]
fn unchanged_toast_is_filled_under_full_identity_and_otherwise_counted_and_warned() {
    let pg = PgCluster::start();
    pg.psql(
        "CREATE TABLE docs (id int PRIMARY KEY, body text, n int);
         CREATE TABLE docs_full (id int PRIMARY KEY, body text, n int);
         ALTER TABLE docs_full REPLICA IDENTITY FULL;",
    );
    let (_dir, weft) = WeftProcess::start_replicating(&pg, "weft_toast", &config(&pg));
    // md5 chains do not compress, so the value is stored out of line.
    let big = "(SELECT string_agg(md5(g::text), '') FROM generate_series(1, 400) g)";
    pg.psql(&format!(
        "INSERT INTO docs VALUES (1, {big}, 0); INSERT INTO docs_full VALUES (1, {big}, 0);"
    ));
    let body = pg.psql("SELECT body FROM docs");
    assert_eq!(body.len(), 400 * 32);
    pg.psql("UPDATE docs SET n = 1; UPDATE docs_full SET n = 1;");

    // One message per row is out at a time: the inserts, then the updates.
    let mut messages = take(&weft, 2);
    messages.extend(take(&weft, 2));
    let [docs_insert, full_insert, docs_update, full_update] = &messages[..] else {
        unreachable!()
    };
    for insert in [docs_insert, full_insert] {
        assert_eq!(insert["action"], "insert");
        assert_eq!(insert["record"]["body"], json!(body));
    }
    assert_eq!(docs_update["metadata"]["table_name"], "docs");
    assert_eq!(docs_update["record"]["body"], json!("unchanged_toast"));
    assert_eq!(docs_update["record"]["n"], json!(1));
    assert_eq!(full_update["metadata"]["table_name"], "docs_full");
    assert_eq!(full_update["record"]["body"], json!(body));
    assert_eq!(
        full_update["changes"],
        json!({"n": 0}),
        "only the changed column's old value"
    );

    let docs_labels = [("database", "shop"), ("table", "public.docs")];
    assert_eq!(weft.metric(METRIC, &docs_labels), Some(1.0));
    assert_eq!(
        weft.metric(METRIC, &[("table", "public.docs_full")]),
        None,
        "no placeholder under FULL"
    );
    let checks = database_checks(&weft);
    assert_eq!(checks.len(), 1, "{checks:#?}");
    assert_eq!(checks[0]["id"], "unchanged_toast:public.docs");
    assert_eq!(checks[0]["status"], "warning");
    let message = checks[0]["message"].as_str().unwrap();
    assert!(
        message.contains("\"unchanged_toast\"")
            && message.contains("column body")
            && message.contains("ALTER TABLE public.docs REPLICA IDENTITY FULL"),
        "{message}"
    );

    // The fix works without a restart: the table's next change comes with
    // its new identity, the value is filled in and the warning goes.
    pg.psql("ALTER TABLE docs REPLICA IDENTITY FULL");
    pg.psql("UPDATE docs SET n = 2");
    let fixed = take(&weft, 1);
    assert_eq!(fixed[0]["record"]["body"], json!(body));
    assert_eq!(fixed[0]["record"]["n"], json!(2));
    assert!(database_checks(&weft).is_empty(), "the warning cleared");
    assert_eq!(weft.metric(METRIC, &docs_labels), Some(1.0));
}
