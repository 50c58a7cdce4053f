//! The Postgres replication source against a real throwaway server.

use std::time::Duration;

use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use weft_core::change::{Action, Change, SourceEvent};
use weft_core::lsn::Lsn;
use weft_postgres::{PgConnectOptions, PgError};
use weft_source::events;
use weft_source::{SourceConfig, SourceError};

use crate::harness::postgres::{PgCluster, PgOptions};

#[test]
fn harness_starts_a_logical_cluster_with_odd_settings() {
    let mut pg = PgCluster::start();
    assert_eq!(pg.psql("SHOW wal_level"), "logical");
    assert_eq!(pg.psql("SHOW TimeZone"), "America/New_York");
    assert_eq!(pg.psql("SHOW DateStyle"), "SQL, DMY");
    pg.psql("CREATE TABLE t (id int primary key)");
    pg.restart();
    assert_eq!(pg.psql("SELECT count(*) FROM t"), "0");
    let data = pg.data_dir();
    drop(pg);
    assert!(!data.exists(), "the cluster directory is removed on drop");
}

fn config(url: &str, slot: &str, publication: &str, tables: &[&str]) -> SourceConfig {
    crate::harness::source::source_config(url, slot, publication, tables)
}

/// A committed transaction as the source emitted it.
#[derive(Debug)]
struct Txn {
    changes: Vec<Change>,
    commit_lsn: Lsn,
    end_lsn: Lsn,
}

struct Running {
    events: events::EventReceiver,
    durable: watch::Sender<Lsn>,
    shutdown: CancellationToken,
    handle: JoinHandle<Result<(), SourceError>>,
}

impl Running {
    fn start(config: SourceConfig) -> Running {
        Self::start_with_capacity(config, 1024)
    }

    fn start_with_capacity(config: SourceConfig, capacity: usize) -> Running {
        let (tx, events) = events::channel(capacity, events::MAX_BYTES);
        let (durable, durable_rx) = watch::channel(Lsn::ZERO);
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(weft_source::run(config, tx, durable_rx, shutdown.clone()));
        Running {
            events,
            durable,
            shutdown,
            handle,
        }
    }

    /// The next `n` committed transactions, skipping Idle events.
    async fn transactions(&mut self, n: usize) -> Vec<Txn> {
        let mut out = Vec::new();
        let mut changes = Vec::new();
        while out.len() < n {
            let event = tokio::time::timeout(Duration::from_secs(30), self.events.recv())
                .await
                .unwrap_or_else(|_| panic!("timed out after {} of {n} transactions", out.len()))
                .expect("the source stopped");
            match event {
                SourceEvent::Change(change) => changes.push(change),
                SourceEvent::Commit {
                    commit_lsn,
                    end_lsn,
                } => out.push(Txn {
                    changes: std::mem::take(&mut changes),
                    commit_lsn,
                    end_lsn,
                }),
                SourceEvent::Idle { .. } | SourceEvent::Truncate(_) | SourceEvent::Watermark(_) => {
                }
            }
        }
        assert!(changes.is_empty(), "changes without a commit: {changes:?}");
        out
    }

    /// Waits for the next Idle event; any other event fails the test.
    async fn next_idle(&mut self, wait: Duration) -> Lsn {
        let event = tokio::time::timeout(wait, self.events.recv())
            .await
            .expect("an Idle event in time")
            .expect("the source stopped");
        match event {
            SourceEvent::Idle { wal_end } => wal_end,
            other => panic!("unexpected event {other:?}"),
        }
    }

    async fn stop(self) -> Result<(), SourceError> {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.handle)
            .await
            .expect("the source stops within 30 s of shutdown")
            .expect("the source task does not panic")
    }
}

async fn wait_until(pg: &PgCluster, sql: &str, expected: &str) {
    for _ in 0..300 {
        if pg.try_psql_in("postgres", sql).as_deref() == Ok(expected) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{sql} never returned {expected:?}; last: {:?}",
        pg.try_psql_in("postgres", sql)
    );
}

async fn wait_for_slot(pg: &PgCluster, slot: &str) {
    wait_until(
        pg,
        &format!("SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{slot}' AND active"),
        "1",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_committed_changes_in_commit_order() {
    let pg = PgCluster::start();
    pg.psql(
        "CREATE TABLE accounts (id int PRIMARY KEY, name text, note text);
         CREATE TABLE ledger (id bigint PRIMARY KEY, amount numeric(12,2), memo text);
         ALTER TABLE ledger REPLICA IDENTITY FULL;
         CREATE TABLE ignored (id int PRIMARY KEY);",
    );
    let mut source = Running::start(config(
        &pg.url("postgres"),
        "weft_slot",
        "weft_pub",
        &["public.accounts", "public.ledger"],
    ));
    wait_for_slot(&pg, "weft_slot").await;
    let before = chrono::Utc::now() - chrono::Duration::seconds(5);
    pg.psql(
        "BEGIN;
         INSERT INTO accounts VALUES (1, 'ada', 'x');
         INSERT INTO ledger VALUES (10, 12.50, 'open');
         INSERT INTO ignored VALUES (1);
         COMMIT;",
    );
    pg.psql(
        "BEGIN;
         UPDATE accounts SET name = 'ada l' WHERE id = 1;
         UPDATE ledger SET amount = 99.99 WHERE id = 10;
         COMMIT;",
    );
    pg.psql("INSERT INTO ignored VALUES (2)");
    pg.psql(
        "BEGIN;
         DELETE FROM accounts WHERE id = 1;
         DELETE FROM ledger WHERE id = 10;
         COMMIT;",
    );
    let txns = source.transactions(3).await;

    for txn in &txns {
        assert!(txn.commit_lsn < txn.end_lsn);
        assert_eq!(txn.changes.len(), 2, "{txn:?}");
        for (idx, change) in txn.changes.iter().enumerate() {
            assert_eq!(change.commit_lsn, txn.commit_lsn);
            assert_eq!(change.commit_idx, idx as u32);
            assert_eq!(change.xid, txn.changes[0].xid);
            assert!(change.commit_timestamp > before);
            assert_eq!(change.relation.primary_key, vec!["id".to_string()]);
        }
    }
    assert!(txns[0].end_lsn <= txns[1].commit_lsn && txns[1].end_lsn <= txns[2].commit_lsn);

    let [insert_a, insert_l] = &txns[0].changes[..] else {
        unreachable!()
    };
    assert_eq!(insert_a.action, Action::Insert);
    assert_eq!(insert_a.relation.qualified_name(), "public.accounts");
    assert_eq!(
        serde_json::Value::Object(insert_a.new.clone().unwrap()),
        json!({"id": 1, "name": "ada", "note": "x"})
    );
    assert!(insert_a.old.is_none());
    assert_eq!(insert_l.relation.qualified_name(), "public.ledger");
    assert_eq!(
        insert_l.new.as_ref().unwrap()["amount"].to_string(),
        "12.50",
        "numeric keeps its scale"
    );

    let [update_a, update_l] = &txns[1].changes[..] else {
        unreachable!()
    };
    assert_eq!(update_a.action, Action::Update);
    assert_eq!(update_a.new.as_ref().unwrap()["name"], json!("ada l"));
    assert!(
        update_a.old.is_none(),
        "REPLICA IDENTITY DEFAULT sends no old row when the key is unchanged"
    );
    assert_eq!(update_a.changes(), Some(Default::default()));
    let old_l = serde_json::Value::Object(update_l.old.clone().unwrap());
    assert_eq!(old_l["memo"], json!("open"), "FULL sends the whole old row");
    assert_eq!(old_l["amount"].to_string(), "12.50");
    let changes = update_l.changes().unwrap();
    assert_eq!(changes.keys().collect::<Vec<_>>(), vec!["amount"]);

    let [delete_a, delete_l] = &txns[2].changes[..] else {
        unreachable!()
    };
    assert_eq!(delete_a.action, Action::Delete);
    assert!(delete_a.new.is_none());
    assert_eq!(
        serde_json::Value::Object(delete_a.old.clone().unwrap()),
        json!({"id": 1}),
        "DEFAULT identity: only the key on delete"
    );
    assert_eq!(
        serde_json::Value::Object(delete_l.record().into_owned())["memo"],
        json!("open")
    );
    assert_eq!(delete_l.primary_key_values(), vec!["10".to_string()]);

    // Nothing was durable, so nothing was confirmed.
    let created_at = Lsn(pg.confirmed_flush_lsn("weft_slot"));
    assert!(created_at <= txns[0].commit_lsn);
    source.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirms_only_durable_positions_and_redelivers_the_rest() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v text)");
    let cfg = config(&pg.url("postgres"), "slot_r", "pub_r", &["public.items"]);
    let mut source = Running::start(cfg.clone());
    wait_for_slot(&pg, "slot_r").await;
    for i in 1..=3 {
        pg.psql(&format!("INSERT INTO items VALUES ({i}, 'v{i}')"));
    }
    let txns = source.transactions(3).await;
    source.durable.send(txns[0].end_lsn).unwrap();
    wait_until(
        &pg,
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'slot_r'",
        &txns[0].end_lsn.to_string(),
    )
    .await;
    source.stop().await.unwrap();
    assert_eq!(
        Lsn(pg.confirmed_flush_lsn("slot_r")),
        txns[0].end_lsn,
        "never confirms more than durable"
    );

    let mut again = Running::start(cfg);
    let redelivered = again.transactions(2).await;
    let ids: Vec<_> = redelivered
        .iter()
        .map(|t| t.changes[0].new.as_ref().unwrap()["id"].clone())
        .collect();
    assert_eq!(ids, vec![json!(2), json!(3)]);
    assert_eq!(redelivered[0].commit_lsn, txns[1].commit_lsn);
    assert_eq!(redelivered[1].changes[0].commit_idx, 0);
    again.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_after_the_walsender_dies_without_duplicates() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY)");
    let mut source = Running::start(config(&pg.url("postgres"), "slot_k", "pub_k", &[]));
    wait_for_slot(&pg, "slot_k").await;
    pg.psql("INSERT INTO items VALUES (1)");
    let first = source.transactions(1).await;
    pg.psql("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'slot_k'");
    pg.psql("INSERT INTO items VALUES (2)");
    let next = source.transactions(1).await;
    assert_eq!(next[0].changes[0].new.as_ref().unwrap()["id"], json!(2));
    assert!(next[0].commit_lsn > first[0].commit_lsn);
    // No duplicates, and once idle the source says so with a position at or
    // past the last commit (the periodic status update asks for a keepalive).
    let idle = source.next_idle(Duration::from_secs(30)).await;
    assert!(
        idle >= next[0].end_lsn,
        "idle at {idle}, last commit ended at {}",
        next[0].end_lsn
    );
    source.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_large_transactions_wait_for_commit_and_honour_rollbacks() {
    let pg = PgCluster::start_with(PgOptions {
        settings: vec!["logical_decoding_work_mem = 64kB".into()],
        ..Default::default()
    });
    pg.psql("CREATE TABLE big (id int PRIMARY KEY, pad text)");
    let mut source = Running::start(config(&pg.url("postgres"), "slot_s", "pub_s", &["big"]));
    wait_for_slot(&pg, "slot_s").await;
    // Aborted big transaction: streamed, then dropped.
    pg.psql(
        "BEGIN; INSERT INTO big SELECT g, repeat('x', 200) FROM generate_series(100000, 103000) g; ROLLBACK;",
    );
    pg.psql(
        "BEGIN;
         INSERT INTO big SELECT g, repeat('a', 200) FROM generate_series(1, 2000) g;
         SAVEPOINT s1;
         INSERT INTO big SELECT g, repeat('b', 200) FROM generate_series(2001, 4000) g;
         ROLLBACK TO SAVEPOINT s1;
         INSERT INTO big SELECT g, repeat('c', 200) FROM generate_series(5001, 6000) g;
         COMMIT;",
    );
    let txns = source.transactions(1).await;
    let ids: Vec<i64> = txns[0]
        .changes
        .iter()
        .map(|c| c.new.as_ref().unwrap()["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 3000, "the rolled-back savepoint's rows are gone");
    assert!(
        ids.iter()
            .all(|&id| id <= 2000 || (5001..=6000).contains(&id))
    );
    assert!(
        txns[0]
            .changes
            .iter()
            .enumerate()
            .all(|(i, c)| c.commit_idx == i as u32)
    );
    // Both big transactions went through the streaming path (statistics
    // are flushed asynchronously, hence the wait).
    wait_until(
        &pg,
        "SELECT stream_txns >= 2 FROM pg_stat_replication_slots WHERE slot_name = 'slot_s'",
        "t",
    )
    .await;
    source.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_render_exactly_like_to_jsonb_in_utc() {
    let pg = PgCluster::start();
    pg.psql(
        "CREATE DOMAIN positive AS int CHECK (VALUE > 0);
         CREATE TYPE mood AS ENUM ('sad', 'happy');
         CREATE TABLE typed (
            id int PRIMARY KEY, b bool, i2 int2, i8 int8, o oid, f4 float4, f8 float8,
            n numeric, t text, vc varchar(10), bp char(5), nm name, ch \"char\", u uuid,
            j json, jb jsonb, d date, ts timestamp, tstz timestamptz, tm time, tmtz timetz,
            iv interval, by bytea, ai int[], at text[], a2 int[][], atz timestamptz[],
            ajb jsonb[], dom positive, adom positive[], en mood, ip inet, rng int4range)",
    );
    let mut source = Running::start(config(&pg.url("postgres"), "slot_t", "pub_t", &["typed"]));
    wait_for_slot(&pg, "slot_t").await;
    pg.psql(
        r#"INSERT INTO typed VALUES
        (1, true, -32768, 9223372036854775807, 4294967295, 1.5, 0.1,
         123456789012345678901234567890.123456789, 'héllo "q"', 'short', 'ab', 'nm', 'c',
         'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
         '{"b": 1, "a": [1, 2.50], "a": "dup", "ccc": null}', '{"zz": 1, "y": {"k": 1.0}}',
         '2024-02-29', '2024-01-02 03:04:05.123456', '2024-07-01 23:30:00.5+02', '13:14:15.5',
         '10:00:00+05:30', '1 year 2 mons 3 days 04:05:06.7', '\xdeadbeef',
         '{1,NULL,3}', '{"a b","c,d",NULL,"NULL","q\"x"}', '{{1,2},{3,4}}',
         '{"2024-01-01 00:00:00+00","2024-06-01 12:00:00-07"}', ARRAY['{"b":2,"a":1}'::jsonb],
         7, '{1,2}', 'happy', '192.168.0.1/24', '[1,5)'),
        (2, false, 0, 0, 0, 'NaN', '-Infinity', 'NaN', '', NULL, NULL, NULL, NULL, NULL,
         '[]', '"s"', 'infinity', '-infinity', 'infinity', '00:00:00', '00:00:00-02',
         '-1 days', '\x', '{}', '{}', '{}', '{}', '{}', NULL, NULL, NULL, NULL, 'empty'),
        (3, NULL, NULL, NULL, NULL, '1e-30', '1e+300', '-0.000', NULL, NULL, NULL, NULL, NULL,
         NULL, NULL, NULL, '0001-01-01', '1999-12-31 23:59:59', '1970-01-01 00:00:00+00', NULL,
         NULL, '0', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"#,
    );
    let txns = source.transactions(1).await;
    let client = pg.client("postgres").await;
    client.batch_execute("SET TimeZone = 'UTC'").await.unwrap();
    assert_eq!(txns[0].changes.len(), 3);
    let mut mismatches = Vec::new();
    for change in &txns[0].changes {
        let new = change.new.as_ref().unwrap();
        let id = new["id"].as_i64().unwrap() as i32;
        let expected: serde_json::Value = client
            .query_one("SELECT to_jsonb(r) FROM typed r WHERE id = $1", &[&id])
            .await
            .unwrap()
            .get(0);
        let expected = expected
            .as_object()
            .unwrap_or_else(|| panic!("to_jsonb gave {expected:?}"));
        assert_eq!(expected.len(), new.len());
        for (column, want) in expected {
            // Compare the JSON text: numbers must match digit for digit and
            // object keys in jsonb order.
            let got = new[column].to_string();
            let want = want.to_string();
            if got != want {
                mismatches.push(format!(
                    "row {id} column {column}: got {got}, to_jsonb {want}"
                ));
            }
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    source.stop().await.unwrap();
}

/// Measures decode-to-channel throughput (debug build) and checks order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_many_changes_in_order() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE events (id int PRIMARY KEY, payload text, at timestamptz)");
    let mut source = Running::start(config(&pg.url("postgres"), "slot_m", "pub_m", &["events"]));
    wait_for_slot(&pg, "slot_m").await;
    const BATCHES: usize = 20;
    const PER_BATCH: usize = 5_000;
    pg.psql(&format!(
        "SELECT 1; {}",
        (0..BATCHES)
            .map(|b| format!(
                "INSERT INTO events SELECT g, 'payload ' || g, now() FROM generate_series({}, {}) g;",
                b * PER_BATCH + 1,
                (b + 1) * PER_BATCH
            ))
            .collect::<String>()
    ));
    let started = std::time::Instant::now();
    let txns = source.transactions(1).await;
    let elapsed = started.elapsed();
    let ids: Vec<i64> = txns
        .iter()
        .flat_map(|t| &t.changes)
        .map(|c| c.new.as_ref().unwrap()["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), BATCHES * PER_BATCH);
    assert!(ids.windows(2).all(|w| w[0] + 1 == w[1]));
    eprintln!(
        "source throughput: {} changes in {:?} = {:.0} changes/s",
        ids.len(),
        elapsed,
        ids.len() as f64 / elapsed.as_secs_f64()
    );
    source.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_a_server_restart() {
    let mut pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY)");
    let mut source = Running::start(config(&pg.url("postgres"), "slot_x", "pub_x", &[]));
    wait_for_slot(&pg, "slot_x").await;
    pg.psql("INSERT INTO items VALUES (1)");
    let first = source.transactions(1).await;
    pg.restart();
    pg.psql("INSERT INTO items VALUES (2)");
    // Transaction 1 is resent by the server (never confirmed) but skipped.
    let next = source.transactions(1).await;
    assert_eq!(next[0].changes[0].new.as_ref().unwrap()["id"], json!(2));
    assert!(next[0].commit_lsn > first[0].end_lsn);
    source.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_interrupts_a_slot_creation_that_waits() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY)");
    // An open transaction with a write makes CREATE_REPLICATION_SLOT wait.
    let blocker = pg.client("postgres").await;
    blocker
        .batch_execute("BEGIN; INSERT INTO items VALUES (1);")
        .await
        .unwrap();
    let source = Running::start(config(&pg.url("postgres"), "slot_w", "pub_w", &[]));
    wait_until(
        &pg,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'weft' AND backend_type = 'walsender'",
        "1",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !source.handle.is_finished(),
        "slot creation waits for the open transaction"
    );
    let started = std::time::Instant::now();
    source.stop().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    blocker.batch_execute("ROLLBACK").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeps_confirming_and_stops_promptly_under_backpressure() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY)");
    let mut source =
        Running::start_with_capacity(config(&pg.url("postgres"), "slot_b", "pub_b", &[]), 1);
    wait_for_slot(&pg, "slot_b").await;
    pg.psql("INSERT INTO items VALUES (1)");
    pg.psql("INSERT INTO items SELECT generate_series(2, 50)");
    let first = source.transactions(1).await;
    // The pipeline now stalls (nobody reads) while the source holds the
    // second transaction; durable progress must still reach the server.
    source.durable.send(first[0].end_lsn).unwrap();
    wait_until(
        &pg,
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'slot_b'",
        &first[0].end_lsn.to_string(),
    )
    .await;
    let started = std::time::Instant::now();
    source.stop().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(Lsn(pg.confirmed_flush_lsn("slot_b")), first[0].end_lsn);
}

async fn run_once(config: SourceConfig) -> SourceError {
    let (tx, _rx) = events::channel(16, events::MAX_BYTES);
    let (_durable, durable_rx) = watch::channel(Lsn::ZERO);
    let shutdown = CancellationToken::new();
    tokio::time::timeout(
        Duration::from_secs(30),
        weft_source::run(config, tx, durable_rx, shutdown),
    )
    .await
    .expect("a setup error ends run quickly")
    .expect_err("run fails")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_up_errors_name_the_object_and_the_fix() {
    let pg = PgCluster::start();
    pg.psql(
        "CREATE TABLE a (id int PRIMARY KEY); CREATE TABLE b (id int PRIMARY KEY);
         CREATE ROLE plain LOGIN;
         CREATE PUBLICATION only_a FOR TABLE a;",
    );
    pg.psql("SELECT pg_create_logical_replication_slot('wrong_plugin', 'test_decoding')");
    let url = pg.url("postgres");

    let mut c = config(&url, "s1", "p1", &["public.a"]);
    c.create_slot_if_not_exists = false;
    let e = run_once(c).await;
    assert!(matches!(e, SourceError::SlotMissing { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("pg_create_logical_replication_slot('s1', 'pgoutput')"),
        "{e}"
    );

    let mut c = config(&url, "s1", "p_missing", &["public.a"]);
    c.create_publication_if_not_exists = false;
    let e = run_once(c).await;
    assert!(
        e.to_string()
            .contains("CREATE PUBLICATION \"p_missing\" FOR TABLE \"public\".\"a\""),
        "{e}"
    );

    let e = run_once(config(&url, "s1", "only_a", &["public.a", "public.b"])).await;
    assert!(matches!(e, SourceError::PublicationMismatch { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("ALTER PUBLICATION \"only_a\" ADD TABLE \"public\".\"b\""),
        "{e}"
    );

    let e = run_once(config(&url, "wrong_plugin", "only_a", &["public.a"])).await;
    assert!(matches!(e, SourceError::SlotMismatch { .. }), "{e}");
    assert!(e.to_string().contains("test_decoding"), "{e}");

    let e = run_once(config(&url, "s1", "only_a", &["public.nope"])).await;
    assert!(matches!(e, SourceError::TableMissing { .. }), "{e}");

    let e = run_once(config(
        &pg.url_as("plain", None, "postgres"),
        "s1",
        "only_a",
        &["a"],
    ))
    .await;
    assert!(
        matches!(
            e,
            SourceError::Postgres(PgError::NoReplicationPrivilege { .. })
        ),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("ALTER ROLE \"plain\" WITH REPLICATION"),
        "{e}"
    );
    assert_eq!(
        pg.psql("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 's1'"),
        "0",
        "no slot is created when the set-up fails"
    );

    let replica = PgCluster::start_with(PgOptions {
        settings: vec!["wal_level = replica".into()],
        ..Default::default()
    });
    let e = run_once(config(&replica.url("postgres"), "s", "p", &[])).await;
    assert!(
        matches!(e, SourceError::Postgres(PgError::WalLevel { .. })),
        "{e}"
    );
    assert!(e.to_string().contains("wal_level = logical"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authenticates_with_scram_and_md5() {
    let pg = PgCluster::start_with(PgOptions {
        hba_rules: vec![
            "host all alice 127.0.0.1/32 scram-sha-256".into(),
            "host all bob 127.0.0.1/32 md5".into(),
        ],
        ..Default::default()
    });
    pg.psql(
        "SET password_encryption = 'scram-sha-256'; CREATE ROLE alice LOGIN REPLICATION PASSWORD 's3cret';
         SET password_encryption = 'md5'; CREATE ROLE bob LOGIN REPLICATION PASSWORD 'hunter2';",
    );
    for (user, password) in [("alice", "s3cret"), ("bob", "hunter2")] {
        let options =
            PgConnectOptions::from_url(&pg.url_as(user, Some(password), "postgres")).unwrap();
        let mut conn = weft_postgres::protocol::ReplicationConnection::connect(&options)
            .await
            .unwrap_or_else(|e| panic!("{user}: {e}"));
        let identity = conn.identify_system().await.unwrap();
        assert_eq!(identity.database, "postgres");
        let wrong = PgConnectOptions {
            password: Some("wrong".into()),
            ..options
        };
        let e = weft_postgres::protocol::ReplicationConnection::connect(&wrong)
            .await
            .err()
            .unwrap_or_else(|| panic!("{user} with a wrong password connected"));
        assert!(
            e.to_string().contains("password authentication failed"),
            "{e}"
        );
    }
}
