//! Several databases in one weft process, each with its own slot and sink,
//! one of them over TLS configured with the `sslmode`/`sslrootcert` fields.

use std::time::Duration;

use serde_json::Value;

use crate::harness::certs::TestCa;
use crate::harness::postgres::{PgCluster, PgOptions, ServerTls};
use crate::harness::weft::WeftProcess;

fn config(pg: &PgCluster, ca: &TestCa) -> String {
    format!(
        r#"
databases:
  - name: shop
    hostname: 127.0.0.1
    port: {port}
    database: shop
    ssl: false
    slot: {{ name: shop_slot, create_if_not_exists: true }}
    publication: {{ name: shop_pub, create_if_not_exists: true }}
  - name: crm
    hostname: localhost
    port: {port}
    database: crm
    sslmode: verify-full
    sslrootcert: {root}
    slot: {{ name: crm_slot, create_if_not_exists: true }}
    publication: {{ name: crm_pub, create_if_not_exists: true }}
sinks:
  - name: shop_items
    database: shop
    source: {{ include_tables: [public.items] }}
    destination: {{ type: sequin_stream }}
  - name: crm_items
    database: crm
    source: {{ include_tables: [public.items] }}
    destination: {{ type: sequin_stream }}
"#,
        port = pg.port(),
        root = ca.cert().display(),
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
    let dir = tempfile::tempdir().unwrap();
    let weft = WeftProcess::start(dir.path(), &config(&pg, &ca));
    pg.wait_for_active_slot("shop_slot");
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
