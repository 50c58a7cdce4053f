//! Several databases in one weft process, each with its own slot and sink,
//! one of them over TLS configured with the `sslmode`/`sslrootcert` fields.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::certs::TestCa;
use crate::harness::postgres::{PgCluster, PgOptions, ServerTls};
use crate::harness::weft::WeftProcess;

/// Both configs' sinks: one pull sink per database.
const SINKS: &str = r#"sinks:
  - name: shop_items
    database: shop
    source: { include_tables: [public.items] }
    destination: { type: sequin_stream }
  - name: crm_items
    database: crm
    source: { include_tables: [public.items] }
    destination: { type: sequin_stream }
"#;

/// A `databases` entry for the database `name` on `pg`, its slot and
/// publication named after it, with `extra` (indented lines) added.
fn database(pg: &PgCluster, name: &str, host: &str, extra: &str) -> String {
    format!(
        "  - name: {name}\n    hostname: {host}\n    port: {port}\n    database: {name}\n{extra}    slot: {{ name: {name}_slot, create_if_not_exists: true }}\n    publication: {{ name: {name}_pub, create_if_not_exists: true }}\n",
        port = pg.port()
    )
}

fn config(pg: &PgCluster, ca: &TestCa) -> String {
    let crm_tls = format!(
        "    sslmode: verify-full\n    sslrootcert: {}\n",
        ca.cert().display()
    );
    format!(
        "databases:\n{}{}{SINKS}",
        database(pg, "shop", "127.0.0.1", "    ssl: false\n"),
        database(pg, "crm", "localhost", &crm_tls),
    )
}

/// (database_name, id, label) of each message.
fn summary(messages: &[Value]) -> Vec<(String, i64, String)> {
    let mut out: Vec<(String, i64, String)> = messages
        .iter()
        .map(|m| {
            let data = &m["data"];
            (
                data["metadata"]["database_name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                data["record"]["id"].as_i64().unwrap(),
                data["record"]["label"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn each_database_streams_through_its_own_slot_to_its_own_sinks() {
    let ca = TestCa::new("weft test CA");
    let pg = PgCluster::start_with(PgOptions {
        tls: Some(ServerTls {
            files: ca.issue_server("server", &["DNS:localhost"]),
            tls_only: false,
            client_ca: None,
        }),
        ..Default::default()
    });
    for db in ["shop", "crm"] {
        pg.create_database(db);
        pg.psql_in(db, "CREATE TABLE items (id int PRIMARY KEY, label text)");
    }
    let (_dir, weft) = WeftProcess::start_replicating(&pg, "shop_slot", &config(&pg, &ca));
    pg.wait_for_active_slot("crm_slot");

    pg.psql_in(
        "shop",
        "INSERT INTO items VALUES (1, 'shop one'), (2, 'shop two')",
    );
    pg.psql_in("crm", "INSERT INTO items VALUES (1, 'crm one')");
    pg.psql_in("shop", "UPDATE items SET label = 'shop 2' WHERE id = 2");

    let shop = weft.receive_at_least("shop_items", 2, Duration::from_secs(30));
    let crm = weft.receive_at_least("crm_items", 1, Duration::from_secs(30));
    assert_eq!(
        summary(&shop),
        vec![
            ("shop".into(), 1, "shop one".into()),
            ("shop".into(), 2, "shop two".into()),
        ],
        "log:\n{}",
        weft.log_text()
    );
    assert_eq!(summary(&crm), vec![("crm".into(), 1, "crm one".into())]);
    let ids: Vec<&str> = shop.iter().map(|m| m["ack_id"].as_str().unwrap()).collect();
    assert_eq!(weft.settle("shop_items", "ack", &ids).0, 200);
    let shop_update = weft.receive_at_least("shop_items", 1, Duration::from_secs(30));
    assert_eq!(
        summary(&shop_update),
        vec![("shop".into(), 2, "shop 2".into())]
    );
    assert!(
        weft.receive("crm_items", 10, 1000).is_empty(),
        "the crm sink gets nothing of shop's changes (its own message is unacked but not yet due)"
    );

    // Each slot lives in its own database; only crm's connections use TLS.
    assert_eq!(
        pg.psql(
            "SELECT string_agg(slot_name || '@' || database, ',' ORDER BY slot_name) \
             FROM pg_replication_slots"
        ),
        "crm_slot@crm,shop_slot@shop"
    );
    assert_eq!(
        pg.psql(
            "SELECT string_agg(DISTINCT a.datname || '=' || s.ssl, ',' ORDER BY a.datname || '=' || s.ssl) \
             FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = 'weft'"
        ),
        "crm=true,shop=false"
    );
}

/// The `feed` check of database `name` at `/api/health`, if it has one.
fn feed_check(weft: &WeftProcess, name: &str) -> Option<Value> {
    weft.health_check("database", name, "feed")
}

#[test]
fn a_failed_database_feed_restarts_alone_while_the_others_keep_flowing() {
    let pg = PgCluster::start();
    for db in ["shop", "crm"] {
        pg.create_database(db);
        pg.psql_in(db, "CREATE TABLE items (id int PRIMARY KEY, label text)");
    }
    // shop's feed connects as its own role, whose REPLICATION the test
    // revokes; crm's as the superuser.
    pg.psql("CREATE ROLE shop_feeder LOGIN REPLICATION");
    pg.psql_in(
        "shop",
        "GRANT SELECT ON items TO shop_feeder; CREATE PUBLICATION shop_pub FOR TABLE items",
    );
    let config = format!(
        "databases:\n{}{}{SINKS}",
        database(&pg, "shop", "127.0.0.1", "    username: shop_feeder\n"),
        database(&pg, "crm", "127.0.0.1", ""),
    );
    let (_dir, weft) = WeftProcess::start_replicating(&pg, "shop_slot", &config);
    pg.wait_for_active_slot("crm_slot");
    pg.psql_in("shop", "INSERT INTO items VALUES (1, 'shop one')");
    pg.psql_in("crm", "INSERT INTO items VALUES (1, 'crm one')");
    let take = |sink: &str, count: usize| {
        let messages = weft.receive_at_least(sink, count, Duration::from_secs(30));
        let ids: Vec<&str> = messages
            .iter()
            .map(|m| m["ack_id"].as_str().unwrap())
            .collect();
        assert_eq!(weft.settle(sink, "ack", &ids).0, 200);
        summary(&messages)
    };
    assert_eq!(
        take("shop_items", 1),
        [("shop".into(), 1, "shop one".into())]
    );
    assert_eq!(take("crm_items", 1), [("crm".into(), 1, "crm one".into())]);

    // shop's source reconnects and finds it may no longer replicate: a
    // set-up error, which used to end the whole process.
    pg.psql("ALTER ROLE shop_feeder NOREPLICATION");
    pg.psql(
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'shop_slot'",
    );
    let message = weft.wait_for_failed_check("database", "shop", "feed");
    assert!(
        message.contains("REPLICATION") && message.contains("restarts in"),
        "{message}"
    );
    assert!(
        feed_check(&weft, "crm").is_none(),
        "crm's feed did not fail"
    );

    // crm keeps flowing; shop's changes wait in its slot.
    pg.psql_in("shop", "INSERT INTO items VALUES (2, 'shop two')");
    pg.psql_in(
        "shop",
        "UPDATE items SET label = 'shop 1 again' WHERE id = 1",
    );
    pg.psql_in("crm", "INSERT INTO items VALUES (2, 'crm two')");
    assert_eq!(take("crm_items", 1), [("crm".into(), 2, "crm two".into())]);
    assert!(weft.receive("shop_items", 10, 500).is_empty());

    // A sink created on shop meanwhile applies in place: the feed's
    // restart brings it, instead of a restart of every pipeline.
    let with_audit = format!(
        "{config}  - name: shop_audit\n    database: shop\n    source: {{ include_tables: [public.items] }}\n    destination: {{ type: sequin_stream }}\n"
    );
    let (status, applied) = weft.apply_config(&with_audit);
    assert_eq!(status, 200, "{applied}");
    assert_eq!(applied["restarted"], false, "{applied}");
    assert_eq!(
        applied["sinks"]["created"],
        json!(["shop_audit"]),
        "{applied}"
    );

    // Granted again, the feed's next restart resumes from its slot: every
    // change made while it was down arrives, once, in order.
    pg.psql("ALTER ROLE shop_feeder REPLICATION");
    let resumed = weft.receive_at_least("shop_items", 2, Duration::from_secs(90));
    let changes: Vec<(i64, String)> = resumed
        .iter()
        .map(|m| {
            let data = &m["data"];
            (
                data["record"]["id"].as_i64().unwrap(),
                data["record"]["label"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        changes,
        [(2, "shop two".into()), (1, "shop 1 again".into())],
        "log:\n{}",
        weft.log_text()
    );
    pg.psql_in("shop", "INSERT INTO items VALUES (3, 'shop three')");
    let audited = weft.drain("shop_audit", 3, Duration::from_secs(60));
    assert_eq!(
        audited.last().map(|m| m["record"]["label"].clone()),
        Some(json!("shop three")),
        "the sink created while the feed was down receives its changes: {audited:?}"
    );
    let restarted = feed_check(&weft, "shop").expect("the check says the feed restarted");
    assert_eq!(restarted["status"], "warning", "{restarted}");
    assert!(
        weft.metric("weft_database_feed_restarts_total", &[("database", "shop")])
            .is_some_and(|n| n >= 1.0)
    );
}
