//! TRUNCATE through the real binary: a sink with `truncate: deliver` gets a
//! truncate message per table it takes, in commit order among the table's
//! changes; a sink with the default gets nothing and weft warns.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::postgres::PgCluster;
use crate::harness::weft::WeftProcess;

fn config(pg: &PgCluster) -> String {
    format!(
        "{}sinks:
  - name: skipper
    database: shop
    source: {{ include_tables: [public.items, public.other] }}
    destination: {{ type: sequin_stream }}
  - name: deliverer
    database: shop
    truncate: deliver
    source: {{ include_tables: [public.items] }}
    destination: {{ type: sequin_stream }}
",
        pg.databases_yaml("weft_truncate")
    )
}

/// Receives and acks until `count` messages of `sink` arrived, and checks
/// that no more follow; they come in delivery order.
fn drain(weft: &WeftProcess, sink: &str, count: usize) -> Vec<Value> {
    let all = weft.drain(sink, count, Duration::from_secs(30));
    assert_eq!(
        all.len(),
        count,
        "{sink}: {} of {count} messages: {all:#?}\nlog:\n{}",
        all.len(),
        weft.log_text()
    );
    assert!(
        weft.receive(sink, 1000, 1000).is_empty(),
        "{sink}: more than {count} messages"
    );
    all
}

/// `action id` of each message (`truncate` without an id).
fn summary(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| match m["record"]["id"].as_i64() {
            Some(id) => format!("{} {id}", m["action"].as_str().unwrap()),
            None => m["action"].as_str().unwrap().to_string(),
        })
        .collect()
}

fn position(message: &Value) -> (u64, u64) {
    let metadata = &message["metadata"];
    (
        metadata["commit_lsn"].as_u64().unwrap(),
        metadata["commit_idx"].as_u64().unwrap(),
    )
}

#[test]
fn truncate_is_delivered_in_commit_order_or_skipped_by_default() {
    let pg = PgCluster::start();
    pg.psql(
        "CREATE TABLE items (id int PRIMARY KEY, v text);
         CREATE TABLE other (id int PRIMARY KEY);",
    );
    let (_dir, weft) = WeftProcess::start_replicating(&pg, "weft_truncate", &config(&pg));
    pg.psql("INSERT INTO items VALUES (1, 'a'), (2, 'b')");
    // `other` is truncated with `items`: it takes a position in the
    // transaction, but the deliverer does not take the table.
    pg.psql(
        "INSERT INTO items VALUES (3, 'c');
         TRUNCATE items, other;
         INSERT INTO items VALUES (4, 'd');",
    );
    pg.psql("INSERT INTO items VALUES (5, 'e')");
    pg.psql("TRUNCATE items RESTART IDENTITY CASCADE");

    let delivered = drain(&weft, "deliverer", 7);
    assert_eq!(
        summary(&delivered),
        [
            "insert 1", "insert 2", "insert 3", "truncate", "insert 4", "insert 5", "truncate"
        ]
    );
    let positions: Vec<(u64, u64)> = delivered.iter().map(position).collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "commit order: {positions:?}"
    );
    let (lsn, insert_idx) = positions[2];
    assert_eq!(positions[3], (lsn, insert_idx + 1));
    assert_eq!(
        positions[4],
        (lsn, insert_idx + 3),
        "`other` took a position between"
    );

    let first = &delivered[3];
    assert_eq!(first["record"], json!({}));
    assert_eq!(first["changes"], Value::Null);
    let metadata = &first["metadata"];
    assert_eq!(metadata["table_schema"], "public");
    assert_eq!(metadata["table_name"], "items");
    assert_eq!(metadata["database_name"], "shop");
    assert_eq!(metadata["record_pks"], json!([]));
    assert_eq!(metadata["consumer"]["name"], "deliverer");
    assert_eq!(
        metadata["truncate"],
        json!({"cascade": false, "restart_identity": false})
    );
    assert_eq!(
        metadata["idempotency_key"],
        weft_core::message::idempotency_key(weft_core::lsn::Lsn(lsn), insert_idx as u32 + 1)
    );
    assert_eq!(
        delivered[6]["metadata"]["truncate"],
        json!({"cascade": true, "restart_identity": true})
    );

    // The default: the same changes, no truncate message, a warning that
    // names the sink that skipped it.
    let skipped = drain(&weft, "skipper", 5);
    assert_eq!(
        summary(&skipped),
        ["insert 1", "insert 2", "insert 3", "insert 4", "insert 5"]
    );
    let log = weft.log_text();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("TRUNCATE skipped"))
        .collect();
    assert_eq!(warnings.len(), 2, "{log}");
    assert!(
        warnings[0].contains("public.items, public.other")
            && warnings[0].contains("skipper")
            && !warnings[0].contains("deliverer"),
        "{}",
        warnings[0]
    );
}
