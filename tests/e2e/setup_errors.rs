//! Set-up problems that name their fix: a slot held by another consumer,
//! a publication missing a table, and the policy for tables without a
//! primary key.

use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use weft_core::change::SourceEvent;
use weft_core::lsn::Lsn;
use weft_source::events;
use weft_source::{SourceConfig, SourceError, slot};

use crate::harness::postgres::{PgCluster, PgOptions};

fn config(pg: &PgCluster, slot: &str, publication: &str, tables: &[&str]) -> SourceConfig {
    crate::harness::source::source_config(&pg.url("postgres"), slot, publication, tables)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_held_by_another_consumer_names_its_pid_and_the_fix() {
    // wal_sender_timeout bounds how long weft waits for a held slot.
    let pg = PgCluster::start_with(PgOptions {
        settings: vec!["wal_sender_timeout = 2s".into()],
        ..Default::default()
    });
    pg.psql("CREATE TABLE t (id int PRIMARY KEY)");
    let (tx, mut first_events) = events::channel(64, events::MAX_BYTES);
    let (_durable, durable_rx) = watch::channel(Lsn::ZERO);
    let first_shutdown = CancellationToken::new();
    let first = tokio::spawn(weft_source::run(
        config(&pg, "shared", "p", &["public.t"]),
        tx,
        durable_rx,
        first_shutdown.clone(),
    ));
    pg.wait_for_active_slot("shared");
    let pid = pg.psql("SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'shared'");

    let (tx, _events) = events::channel(64, events::MAX_BYTES);
    let (_durable2, durable_rx) = watch::channel(Lsn::ZERO);
    let started = Instant::now();
    let e = tokio::time::timeout(
        Duration::from_secs(30),
        weft_source::run(
            config(&pg, "shared", "p", &["public.t"]),
            tx,
            durable_rx,
            CancellationToken::new(),
        ),
    )
    .await
    .expect("the second consumer gives up")
    .unwrap_err();
    assert!(matches!(e, SourceError::SlotActive { .. }), "{e}");
    let text = e.to_string();
    assert!(text.contains(&format!("PID {pid}")), "{text}");
    assert!(
        text.contains(&format!("pg_terminate_backend({pid})"))
            && text.contains("pg_stat_replication")
            && text.contains("\"weft\""),
        "{text}"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "it waited wal_sender_timeout for a lingering session first"
    );

    // The first consumer was not disturbed.
    pg.psql("INSERT INTO t VALUES (1)");
    let event = loop {
        let event = tokio::time::timeout(Duration::from_secs(30), first_events.recv())
            .await
            .unwrap()
            .unwrap();
        if !matches!(event, SourceEvent::Idle { .. }) {
            break event;
        }
    };
    assert!(matches!(event, SourceEvent::Change(_)), "{event:?}");
    first_shutdown.cancel();
    first.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_slot_is_taken_over_without_error() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE t (id int PRIMARY KEY)");
    let (tx, _events) = events::channel(64, events::MAX_BYTES);
    let (_durable, durable_rx) = watch::channel(Lsn::ZERO);
    let shutdown = CancellationToken::new();
    let first = tokio::spawn(weft_source::run(
        config(&pg, "handover", "p", &["public.t"]),
        tx,
        durable_rx,
        shutdown.clone(),
    ));
    pg.wait_for_active_slot("handover");
    let (tx, mut events) = events::channel(64, events::MAX_BYTES);
    let (_durable2, durable_rx) = watch::channel(Lsn::ZERO);
    let second_shutdown = CancellationToken::new();
    let second = tokio::spawn(weft_source::run(
        config(&pg, "handover", "p", &["public.t"]),
        tx,
        durable_rx,
        second_shutdown.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    shutdown.cancel();
    first.await.unwrap().unwrap();
    pg.psql("INSERT INTO t VALUES (1)");
    let change = loop {
        let event = tokio::time::timeout(Duration::from_secs(30), events.recv())
            .await
            .expect("the waiting consumer takes over")
            .expect("and keeps running");
        if let SourceEvent::Change(change) = event {
            break change;
        }
    };
    assert_eq!(change.record()["id"], 1);
    second_shutdown.cancel();
    second.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_without_a_primary_key_are_streamed_with_an_empty_key_and_named() {
    let pg = PgCluster::start();
    pg.psql(
        "CREATE TABLE keyed (id int PRIMARY KEY);
         CREATE TABLE log (at text, msg text);
         CREATE TABLE audit (at text, msg text);
         ALTER TABLE audit REPLICA IDENTITY FULL;",
    );
    let c = config(&pg, "nopk", "nopk_pub", &[]);
    let (client, _task) = c.connection.connect_query().await.unwrap();
    pg.psql("CREATE PUBLICATION nopk_pub FOR ALL TABLES");
    let keyless = slot::keyless_tables(&client, "nopk_pub").await.unwrap();
    let described: Vec<(String, bool)> = keyless
        .iter()
        .map(|t| (t.table.display(), t.blocks_updates()))
        .collect();
    assert_eq!(
        described,
        vec![
            ("public.audit".to_string(), false),
            ("public.log".to_string(), true)
        ]
    );
    let warning = keyless[1].warning();
    assert!(
        warning.contains("public.log has no primary key")
            && warning.contains("ALTER TABLE \"public\".\"log\" ADD PRIMARY KEY")
            && warning.contains("REPLICA IDENTITY FULL")
            && warning.contains("refuses its UPDATEs and DELETEs"),
        "{warning}"
    );

    // Accepted: inserts (and, under FULL, updates) stream with no key.
    let (tx, mut events) = events::channel(64, events::MAX_BYTES);
    let (_durable, durable_rx) = watch::channel(Lsn::ZERO);
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(weft_source::run(c, tx, durable_rx, shutdown.clone()));
    pg.wait_for_active_slot("nopk");
    pg.psql("INSERT INTO log VALUES ('now', 'hello')");
    pg.psql("INSERT INTO audit VALUES ('now', 'a'); UPDATE audit SET msg = 'b'");
    let mut changes = Vec::new();
    while changes.len() < 3 {
        let event = tokio::time::timeout(Duration::from_secs(30), events.recv())
            .await
            .unwrap()
            .unwrap();
        if let SourceEvent::Change(change) = event {
            changes.push(change);
        }
    }
    for change in &changes {
        assert!(change.relation.primary_key.is_empty(), "{change:?}");
    }
    assert_eq!(changes[0].record()["msg"], "hello");
    assert_eq!(changes[2].record()["msg"], "b");
    assert_eq!(changes[2].old.as_ref().unwrap()["msg"], "a");
    shutdown.cancel();
    handle.await.unwrap().unwrap();
}
