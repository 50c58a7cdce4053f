//! An idle database's slot keeps advancing: weft's heartbeats and TRUNCATE
//! handling through the real binary.

use std::time::Duration;

use weft_core::lsn::Lsn;

use crate::harness::postgres::PgCluster;
use crate::harness::weft::WeftProcess;

fn config(pg: &PgCluster) -> String {
    format!(
        r#"
{databases}sinks:
  - name: items
    database: quiet
    source: {{ include_tables: [public.items] }}
    destination: {{ type: sequin_stream }}
"#,
        databases = pg.database_yaml("quiet", "weft_idle", "    heartbeat_interval_ms: 1000\n"),
    )
}

#[test]
fn an_idle_database_slot_keeps_advancing_while_other_databases_write() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY)");
    pg.create_database("busy");
    pg.psql_in(
        "busy",
        "CREATE TABLE noise (id serial PRIMARY KEY, pad text)",
    );
    let (_dir, weft) = WeftProcess::start_replicating(&pg, "weft_idle", &config(&pg));

    // Only the other database writes; the replicated one stays idle. Each
    // round: note the WAL position, write elsewhere for a while, and expect
    // the slot to have been confirmed past the noted position.
    let mut positions = vec![Lsn(pg.confirmed_flush_lsn("weft_idle"))];
    for round in 0..3 {
        let wal_before = Lsn(pg.current_wal_lsn());
        let confirmed = weft.wait_until(
            &format!("round {round}: the slot confirmed past {wal_before}"),
            Duration::from_secs(15),
            || {
                pg.psql_in(
                    "busy",
                    "INSERT INTO noise (pad) SELECT repeat('x', 100) FROM generate_series(1, 200)",
                );
                let confirmed = Lsn(pg.confirmed_flush_lsn("weft_idle"));
                if confirmed > wal_before {
                    Ok(confirmed)
                } else {
                    Err(confirmed)
                }
            },
        );
        positions.push(confirmed);
    }
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "confirmed_flush_lsn advances: {positions:?}"
    );
    assert!(
        weft.log_text().contains("heartbeat round trip"),
        "heartbeats come back through the slot and their latency is logged"
    );
    // Heartbeats are not changes: the sink got nothing.
    assert!(weft.receive("items", 100, 500).is_empty());

    // TRUNCATE is skipped with a warning (documented), and the slot moves on.
    pg.psql("INSERT INTO items VALUES (1)");
    pg.psql("TRUNCATE items");
    pg.psql("INSERT INTO items VALUES (2)");
    let got = weft.receive_at_least("items", 2, Duration::from_secs(30));
    let ids: Vec<i64> = got
        .iter()
        .map(|m| m["data"]["record"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{got:?}");
    assert!(ids.contains(&1) && ids.contains(&2));
    let log = weft.log_text();
    assert!(
        log.contains("TRUNCATE skipped") && log.contains("public.items"),
        "log:\n{log}"
    );
}
