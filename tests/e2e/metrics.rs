//! `/metrics` during a real workload: Sequin's delivery counters move with
//! what happens to the messages, so that once a sink is drained, what it
//! delivered plus what it dead-lettered equals what it ingested.

use std::time::{Duration, Instant};

use crate::harness::postgres::PgCluster;
use crate::harness::weft::WeftProcess;

const SLOT: &str = "weft_metrics";

fn counter(weft: &WeftProcess, name: &str, labels: &[(&str, &str)]) -> f64 {
    weft.metric(name, labels).unwrap_or(0.0)
}

#[test]
fn delivery_counters_account_for_every_change_written() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}sinks:\n  - name: items\n    database: shop\n    source: {{ include_tables: [public.items] }}\n    destination: {{ type: sequin_stream, ack_wait_ms: 60000, max_deliver: 1 }}\n",
        pg.databases_yaml(SLOT)
    );
    let weft = WeftProcess::start(dir.path(), &config);
    pg.wait_for_active_slot(SLOT);
    for batch in 0..5 {
        pg.psql(&format!(
            "INSERT INTO items SELECT g, g FROM generate_series({}, {}) g",
            batch * 100 + 1,
            batch * 100 + 100
        ));
    }
    let sink = [("sink", "items")];
    let deadline = Instant::now() + Duration::from_secs(30);
    while counter(&weft, "sequin_messages_ingested_count", &sink) < 500.0 {
        assert!(
            Instant::now() < deadline,
            "not ingested:\n{}",
            weft.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        counter(&weft, "sequin_messages_ingested_count", &sink),
        500.0,
        "ingested equals the changes written"
    );

    // One message is nacked: with max_deliver 1 it is dead-lettered at the
    // next receive; the other 499 are acked.
    let first = weft.receive("items", 1, 1000);
    let ack_id = first[0]["ack_id"].as_str().unwrap();
    assert_eq!(weft.settle("items", "nack", &[ack_id]).0, 200);
    let drained = weft.drain("items", 499, Duration::from_secs(30));
    assert_eq!(drained.len(), 499);
    assert!(weft.receive("items", 100, 500).is_empty());

    let delivered = counter(&weft, "sequin_message_deliver_success_count", &sink);
    let dead = counter(
        &weft,
        "weft_messages_dead_lettered_total",
        &[("sink", "items"), ("stage", "delivery")],
    );
    assert_eq!(delivered, 499.0);
    assert_eq!(dead, 1.0);
    assert_eq!(
        delivered + dead,
        500.0,
        "delivered + dead-lettered = ingested"
    );
    assert_eq!(
        counter(&weft, "sequin_message_deliver_failure_count", &sink),
        1.0,
        "the nack"
    );
    assert_eq!(
        counter(&weft, "sequin_message_deliver_attempt_count", &sink),
        500.0,
        "one hand-out per message: the nacked one was dead-lettered, not handed out again"
    );
}
