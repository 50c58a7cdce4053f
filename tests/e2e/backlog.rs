//! `max_backlog_messages` and `load_shedding_policy`: at the bound, a
//! `pause_on_full` sink holds replication until it drains and loses
//! nothing; a `discard_on_full` sink sheds its new messages, says so, and
//! lets the slot advance. `/metrics` shows the WAL a paused slot holds.

use std::time::Duration;

use crate::harness::postgres::PgCluster;
use crate::harness::weft::WeftProcess;

fn start(policy: &str, slot: &str) -> (PgCluster, tempfile::TempDir, WeftProcess) {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    let config = format!(
        "{}sinks:\n  - name: pull\n    database: shop\n    max_backlog_messages: 10\n    load_shedding_policy: {policy}\n    destination: {{ type: sequin_stream }}\n",
        pg.databases_yaml(slot)
    );
    let (dir, weft) = WeftProcess::start_replicating(&pg, slot, &config);
    (pg, dir, weft)
}

/// Inserts rows `ids`, one transaction each.
fn insert_each(pg: &PgCluster, ids: std::ops::RangeInclusive<i64>) {
    pg.psql(&format!(
        "DO $$ BEGIN FOR i IN {}..{} LOOP INSERT INTO items VALUES (i, 0); COMMIT; END LOOP; END $$",
        ids.start(),
        ids.end()
    ));
}

/// Waits until gauge `name` of `slot` satisfies `ok`, and returns it.
fn wait_for_gauge(weft: &WeftProcess, name: &str, slot: &str, ok: impl Fn(f64) -> bool) -> f64 {
    weft.wait_until(
        &format!("{name} of {slot}"),
        Duration::from_secs(30),
        || {
            let value = weft.metric(name, &[("slot", slot)]);
            value.filter(|v| ok(*v)).ok_or(value)
        },
    )
}

fn wait_for_stored(weft: &WeftProcess, count: usize) {
    weft.wait_until(
        &format!("{count} messages stored"),
        Duration::from_secs(60),
        || match weft.stored_count("pull") {
            stored if stored >= count => Ok(()),
            stored => Err(stored),
        },
    )
}

#[test]
fn pause_on_full_holds_the_slot_until_the_sink_drains_and_loses_nothing() {
    let (pg, _dir, mut weft) = start("pause_on_full", "weft_pause");
    insert_each(&pg, 1..=10);
    wait_for_stored(&weft, 10);
    insert_each(&pg, 11..=40);
    let written = pg.current_wal_lsn();
    weft.wait_for_log("replication paused", Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        weft.stored_count("pull"),
        10,
        "nothing past the bound is stored"
    );
    let confirmed = pg.confirmed_flush_lsn("weft_pause");
    assert!(
        confirmed < written,
        "the slot must not confirm changes that are neither stored nor delivered: {confirmed} >= {written}"
    );
    // The metrics show the slot holding WAL back while the sink is full.
    let held = (written - confirmed) as f64;
    let lag = wait_for_gauge(
        &weft,
        "weft_replication_slot_confirmed_lag_bytes",
        "weft_pause",
        |v| v >= held,
    );
    wait_for_gauge(&weft, "sequin_replication_slot_size", "weft_pause", |v| {
        v >= lag
    });

    // Draining the sink resumes replication; every row arrives, in order.
    let ids: Vec<i64> = weft
        .drain("pull", 40, Duration::from_secs(90))
        .iter()
        .map(|data| data["record"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(
        ids,
        (1..=40).collect::<Vec<_>>(),
        "log:\n{}",
        weft.log_text()
    );
    assert!(
        weft.log_text()
            .contains("backlog drained: replication resumed")
    );
    pg.wait_for_slot_to_confirm_all("weft_pause");
    assert_eq!(weft.terminate(), Some(0));
}

#[test]
fn discard_on_full_sheds_new_messages_loudly_and_the_slot_advances() {
    let (pg, _dir, mut weft) = start("discard_on_full", "weft_discard");
    insert_each(&pg, 1..=10);
    wait_for_stored(&weft, 10);
    insert_each(&pg, 11..=15);
    pg.wait_for_slot_to_confirm_all("weft_discard");
    weft.wait_for_log("discarded_total=5", Duration::from_secs(60));
    let log = weft.log_text();
    assert!(
        log.contains("load_shedding_policy: discard_on_full"),
        "{log}"
    );
    let got = weft.receive("pull", 100, 1000);
    let ids: Vec<i64> = got
        .iter()
        .map(|m| m["data"]["record"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, (1..=10).collect::<Vec<_>>(), "the first 10 were kept");
    assert_eq!(weft.terminate(), Some(0));
}
