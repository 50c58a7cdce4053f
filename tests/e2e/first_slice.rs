//! The first end-to-end slice: Postgres → WASM transform → pull API, with
//! ack, nack and a SIGKILL in the middle.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::harness::guests;
use crate::harness::postgres::PgCluster;
use crate::harness::weft::WeftProcess;

fn config(pg: &PgCluster) -> String {
    format!(
        r#"
{databases}functions:
  - name: upcase
    type: transform
    file: {wasm}
    config: {{ column: customer }}
sinks:
  - name: orders
    database: shop
    source: {{ include_tables: [public.orders] }}
    transform: upcase
    destination: {{ type: sequin_stream, ack_wait_ms: 2000 }}
"#,
        databases = pg.databases_yaml("weft_e2e"),
        wasm = guests::wasm("weft_upcase_transform").display(),
    )
}

fn ack_ids(messages: &[Value]) -> Vec<&str> {
    messages
        .iter()
        .map(|m| m["ack_id"].as_str().expect("ack_id is a string"))
        .collect()
}

/// (action, id, customer) of each message's payload.
fn summary(messages: &[Value]) -> Vec<(String, i64, String)> {
    messages
        .iter()
        .map(|m| {
            let data = &m["data"];
            (
                data["action"].as_str().unwrap().to_string(),
                data["record"]["id"].as_i64().unwrap(),
                data["record"]["customer"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

#[test]
fn changes_flow_through_a_transform_to_the_pull_api_and_survive_sigkill() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE orders (id int PRIMARY KEY, customer text, total numeric(10,2))");
    // FULL, so that updates carry the old row and `changes` has content.
    pg.psql("ALTER TABLE orders REPLICA IDENTITY FULL");
    pg.psql("CREATE TABLE ignored (id int PRIMARY KEY)");
    let (_dir, mut weft) = WeftProcess::start_replicating(&pg, "weft_e2e", &config(&pg));

    pg.psql(
        "INSERT INTO orders VALUES (1, 'ada', 10.50), (2, 'grace', 20.00), (3, 'linus', 30.25)",
    );
    pg.psql("INSERT INTO ignored VALUES (1)");
    pg.psql("UPDATE orders SET customer = 'ada l' WHERE id = 1");
    pg.psql("DELETE FROM orders WHERE id = 2");

    // One message per row is in flight at a time, so the first receive
    // returns the three inserts only.
    let first = weft.receive_at_least("orders", 3, Duration::from_secs(30));
    assert_eq!(
        summary(&first),
        vec![
            ("insert".into(), 1, "ADA".into()),
            ("insert".into(), 2, "GRACE".into()),
            ("insert".into(), 3, "LINUS".into()),
        ],
        "log:\n{}",
        weft.log_text()
    );
    let insert = &first[0]["data"];
    assert_eq!(
        insert["record"]["total"].to_string(),
        "10.50",
        "numeric keeps its scale, as to_jsonb does"
    );
    assert_eq!(insert["record"]["transformed_by"], "weft-upcase");
    assert_eq!(insert["changes"], Value::Null);
    let metadata = &insert["metadata"];
    assert_eq!(metadata["table_schema"], "public");
    assert_eq!(metadata["table_name"], "orders");
    assert_eq!(metadata["database_name"], "shop");
    assert_eq!(metadata["record_pks"], serde_json::json!(["1"]));
    assert_eq!(metadata["consumer"]["name"], "orders");
    assert!(metadata["commit_lsn"].as_u64().unwrap() > 0);
    assert_eq!(metadata["commit_idx"], 0);
    assert!(
        metadata["commit_timestamp"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    let key = metadata["idempotency_key"].as_str().unwrap();
    assert_eq!(
        key,
        weft_core::message::idempotency_key(
            weft_core::lsn::Lsn(metadata["commit_lsn"].as_u64().unwrap()),
            0
        )
    );

    // Ack rows 1 and 2, nack row 3: row 3's insert comes straight back, and
    // the next change of rows 1 and 2 follows.
    let ids = ack_ids(&first);
    assert_eq!(weft.settle("orders", "ack", &ids[..2]).0, 200);
    assert_eq!(weft.settle("orders", "nack", &ids[2..]).0, 200);
    let second = weft.receive_at_least("orders", 3, Duration::from_secs(30));
    let mut second_summary = summary(&second);
    second_summary.sort_by_key(|(_, id, _)| *id);
    assert_eq!(
        second_summary,
        vec![
            ("update".into(), 1, "ADA L".into()),
            ("delete".into(), 2, "GRACE".into()),
            ("insert".into(), 3, "LINUS".into())
        ]
    );
    let update = second
        .iter()
        .find(|m| m["data"]["action"] == "update")
        .unwrap();
    assert_eq!(
        update["data"]["changes"],
        serde_json::json!({"customer": "ada"}),
        "changes holds the old values of changed columns"
    );
    let delete = second
        .iter()
        .find(|m| m["data"]["action"] == "delete")
        .unwrap();
    assert_eq!(
        delete["data"]["record"]["id"], 2,
        "a delete carries the old row"
    );
    assert_eq!(
        delete["data"]["record"]["total"].to_string(),
        "20.00",
        "FULL identity: the whole old row"
    );

    // Ack the update and the delete; leave row 3's insert unacked; crash.
    let acked: Vec<&str> = second
        .iter()
        .filter(|m| m["data"]["record"]["id"] != 3)
        .map(|m| m["ack_id"].as_str().unwrap())
        .collect();
    assert_eq!(weft.settle("orders", "ack", &acked).0, 200);
    weft.kill();
    pg.psql("INSERT INTO orders VALUES (4, 'barbara', 40.00)");
    weft.restart();

    // After the restart: row 3's unacked insert (once its visibility timeout
    // ran out) and row 4's insert written while weft was down; nothing acked.
    let drained = weft.drain("orders", 2, Duration::from_secs(30));
    let after: BTreeMap<i64, String> = drained
        .iter()
        .map(|data| {
            let id = data["record"]["id"].as_i64().unwrap();
            (id, data["action"].as_str().unwrap().to_string())
        })
        .collect();
    assert_eq!(
        after.len(),
        drained.len(),
        "a row delivered twice: {drained:?}"
    );
    assert_eq!(
        after,
        BTreeMap::from([(3, "insert".to_string()), (4, "insert".to_string())]),
        "log:\n{}",
        weft.log_text()
    );
    // And nothing else is left.
    assert!(
        weft.receive("orders", 100, 3000).is_empty(),
        "acked messages reappeared"
    );
    assert_eq!(weft.terminate(), Some(0), "SIGTERM shuts weft down cleanly");
}
