use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::json;

use super::*;

pub(super) const WAIT: Duration = Duration::from_secs(30);
pub(super) const NO_LIMIT: u32 = u32::MAX;

/// Receive rules with unlimited deliveries.
pub(super) fn limits(ack_wait: Duration, max_ack_pending: u32) -> ReceiveLimits {
    ReceiveLimits {
        ack_wait,
        max_ack_pending,
        max_deliver: None,
    }
}

pub(super) fn open_temp() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("weft.db")).unwrap();
    (dir, store)
}

/// [`open_temp`] with `sinks` read in place when `in_place` (see
/// [`Store::read_in_place`]).
pub(super) fn open_temp_for(in_place: bool, sinks: &[&str]) -> (tempfile::TempDir, Store) {
    let (dir, store) = open_temp();
    if in_place {
        for sink in sinks {
            store.read_in_place(sink);
        }
    }
    (dir, store)
}

pub(super) fn msg(lsn: u64, idx: u32, group: &str) -> NewMessage {
    NewMessage {
        commit_lsn: Lsn(lsn),
        commit_idx: idx,
        group_id: group.to_string(),
        idempotency_key: weft_core::message::idempotency_key(Lsn(lsn), idx),
        payload: weft_core::payload::Payload::Json(json!({"lsn": lsn, "idx": idx, "group": group}))
            .into(),
        route: None,
    }
}

pub(super) fn batch(sink: &str, messages: Vec<NewMessage>) -> Vec<SinkBatch> {
    vec![SinkBatch::of(sink, messages)]
}

/// (lsn, idx) of each delivered message, from its payload.
pub(super) fn positions(delivered: &[Delivered]) -> Vec<(u64, u32)> {
    delivered
        .iter()
        .map(|d| {
            (
                d.json()["lsn"].as_u64().unwrap(),
                d.json()["idx"].as_u64().unwrap() as u32,
            )
        })
        .collect()
}

pub(super) fn ack_ids(delivered: &[Delivered]) -> Vec<AckId> {
    delivered.iter().map(|d| d.ack_id).collect()
}

#[test]
fn append_advances_cursor_and_never_moves_it_back() {
    let (_dir, store) = open_temp();
    assert_eq!(store.sink_cursor("s").unwrap(), None);
    store
        .append(&batch("s", vec![msg(10, 0, "a")]), Lsn(10))
        .unwrap();
    assert_eq!(store.sink_cursor("s").unwrap(), Some(Lsn(10)));
    // An empty batch still advances the cursor (transaction filtered out).
    store.append(&batch("s", vec![]), Lsn(20)).unwrap();
    assert_eq!(store.sink_cursor("s").unwrap(), Some(Lsn(20)));
    store.append(&batch("s", vec![]), Lsn(15)).unwrap();
    assert_eq!(store.sink_cursor("s").unwrap(), Some(Lsn(20)));
    assert_eq!(store.sink_cursor("other").unwrap(), None);
}

#[test]
fn remove_sink_forgets_only_that_sink() {
    let (_dir, store) = open_temp();
    let both = vec![
        SinkBatch::of("gone", vec![msg(10, 0, "a"), msg(10, 1, "b")]),
        SinkBatch::of("kept", vec![msg(10, 0, "a")]),
    ];
    store.append(&both, Lsn(10)).unwrap();
    assert_eq!(store.remove_sink("gone").unwrap(), 2);
    assert_eq!(store.sink_cursor("gone").unwrap(), None);
    assert_eq!(store.message_counts("gone").unwrap().stored, 0);
    assert_eq!(store.sink_cursor("kept").unwrap(), Some(Lsn(10)));
    assert_eq!(store.message_counts("kept").unwrap().stored, 1);
}

#[test]
fn a_sink_started_at_a_position_gets_that_cursor_even_backwards() {
    let (_dir, store) = open_temp();
    store.append(&batch("moved", vec![]), Lsn(500)).unwrap();
    store.start_sink_at("moved", Lsn(20)).unwrap();
    assert_eq!(store.sink_cursor("moved").unwrap(), Some(Lsn(20)));
    store.start_sink_at("new", Lsn(30)).unwrap();
    assert_eq!(store.sink_cursor("new").unwrap(), Some(Lsn(30)));
    store.append(&batch("moved", vec![]), Lsn(25)).unwrap();
    assert_eq!(store.sink_cursor("moved").unwrap(), Some(Lsn(25)));
}

#[test]
fn lsn_beyond_i64_is_refused_with_a_clear_error() {
    let (_dir, store) = open_temp();
    let err = store
        .append(&batch("s", vec![]), Lsn(u64::MAX))
        .unwrap_err();
    assert!(matches!(err, StoreError::LsnOutOfRange(_)), "{err}");
}

#[test]
fn receive_is_in_commit_order_with_one_message_per_group_in_flight() {
    // Rows and segments read in place keep the same rules.
    for in_place in [false, true] {
        let (_dir, store) = open_temp_for(in_place, &["s"]);
        store
            .append(
                &batch(
                    "s",
                    vec![
                        msg(10, 0, "a"),
                        msg(10, 1, "b"),
                        msg(10, 2, "a"),
                        msg(11, 0, "c"),
                    ],
                ),
                Lsn(10),
            )
            .unwrap();
        store
            .append(&batch("s", vec![msg(12, 0, "b")]), Lsn(12))
            .unwrap();

        let first = store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap();
        assert_eq!(positions(&first), vec![(10, 0), (10, 1), (11, 0)]);
        assert!(first.iter().all(|d| d.deliver_count == 1));
        // Every group has a message in flight: nothing else is receivable.
        assert!(
            store
                .receive("s", 10, limits(WAIT, NO_LIMIT))
                .unwrap()
                .is_empty()
        );

        // Acking a's head frees a's next message, and only that one.
        let outcome = store.ack("s", &[first[0].ack_id]).unwrap();
        assert_eq!(
            outcome,
            AckOutcome {
                processed: 1,
                unknown: vec![]
            }
        );
        let second = store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap();
        assert_eq!(positions(&second), vec![(10, 2)]);

        store
            .ack("s", &[first[1].ack_id, first[2].ack_id, second[0].ack_id])
            .unwrap();
        let third = store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap();
        assert_eq!(positions(&third), vec![(12, 0)]);
        store.ack("s", &ack_ids(&third)).unwrap();
        assert_eq!(store.message_counts("s").unwrap(), MessageCounts::default());
    }
}

#[test]
fn batch_size_limits_a_receive() {
    // Rows and segments read in place keep the same rules.
    for in_place in [false, true] {
        let (_dir, store) = open_temp_for(in_place, &["s"]);
        let messages = (0..5).map(|i| msg(10, i, &format!("g{i}"))).collect();
        store.append(&batch("s", messages), Lsn(10)).unwrap();
        assert_eq!(
            positions(&store.receive("s", 2, limits(WAIT, NO_LIMIT)).unwrap()),
            vec![(10, 0), (10, 1)]
        );
        assert_eq!(
            positions(&store.receive("s", 2, limits(WAIT, NO_LIMIT)).unwrap()),
            vec![(10, 2), (10, 3)]
        );
        assert_eq!(
            positions(&store.receive("s", 2, limits(WAIT, NO_LIMIT)).unwrap()),
            vec![(10, 4)]
        );
    }
}

#[test]
fn sinks_are_independent() {
    // Rows and segments read in place keep the same rules.
    for in_place in [false, true] {
        let (_dir, store) = open_temp_for(in_place, &["one", "two"]);
        let both = vec![
            SinkBatch::of("one", vec![msg(10, 0, "a")]),
            SinkBatch::of("two", vec![msg(10, 0, "a")]),
        ];
        store.append(&both, Lsn(10)).unwrap();
        assert_eq!(store.sink_cursor("two").unwrap(), Some(Lsn(10)));
        let one = store.receive("one", 10, limits(WAIT, NO_LIMIT)).unwrap();
        assert_eq!(one.len(), 1);
        // The same group in another sink is not blocked, and ack ids do not cross sinks.
        let outcome = store.ack("two", &ack_ids(&one)).unwrap();
        assert_eq!(outcome.unknown, ack_ids(&one));
        assert_eq!(
            store
                .receive("two", 10, limits(WAIT, NO_LIMIT))
                .unwrap()
                .len(),
            1
        );
    }
}

#[test]
fn expired_lease_makes_the_message_reappear_with_a_new_ack_id() {
    // Rows and segments read in place keep the same rules.
    for in_place in [false, true] {
        let (_dir, store) = open_temp_for(in_place, &["s"]);
        store
            .append(&batch("s", vec![msg(10, 0, "a"), msg(11, 0, "a")]), Lsn(11))
            .unwrap();
        let short = Duration::from_millis(60);
        let first = store.receive("s", 10, limits(short, NO_LIMIT)).unwrap();
        assert_eq!(positions(&first), vec![(10, 0)]);
        assert!(
            store
                .receive("s", 10, limits(short, NO_LIMIT))
                .unwrap()
                .is_empty()
        );
        let expiry = store
            .next_lease_expiry("s", StoreTime::now())
            .unwrap()
            .expect("a lease is out");
        assert!(expiry <= short, "{expiry:?}");

        let looked_before_expiry = StoreTime::now();
        std::thread::sleep(Duration::from_millis(120));
        assert_eq!(
            store.next_lease_expiry("s", looked_before_expiry).unwrap(),
            Some(Duration::ZERO),
            "a lease that ran out after the last look means: look again now"
        );
        assert_eq!(
            store.next_lease_expiry("s", StoreTime::now()).unwrap(),
            None
        );
        let again = store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap();
        assert_eq!(
            positions(&again),
            vec![(10, 0)],
            "the group's head comes back, not its successor"
        );
        assert_eq!(again[0].deliver_count, 2);
        assert_ne!(again[0].ack_id, first[0].ack_id);

        // The superseded ack id is reported and deletes nothing.
        let outcome = store.ack("s", &[first[0].ack_id]).unwrap();
        assert_eq!(
            outcome,
            AckOutcome {
                processed: 0,
                unknown: vec![first[0].ack_id]
            }
        );
        assert_eq!(
            store.message_counts("s").unwrap(),
            MessageCounts {
                stored: 2,
                in_flight: 1
            }
        );
        assert_eq!(store.ack("s", &ack_ids(&again)).unwrap().processed, 1);
    }
}

#[test]
fn ack_of_an_expired_but_not_redelivered_lease_still_deletes() {
    // Rows and segments read in place keep the same rules.
    for in_place in [false, true] {
        let (_dir, store) = open_temp_for(in_place, &["s"]);
        store
            .append(&batch("s", vec![msg(10, 0, "a")]), Lsn(10))
            .unwrap();
        let first = store
            .receive("s", 1, limits(Duration::from_millis(20), NO_LIMIT))
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(store.ack("s", &ack_ids(&first)).unwrap().processed, 1);
        assert_eq!(store.message_counts("s").unwrap().stored, 0);
    }
}

#[test]
fn nack_makes_messages_visible_at_once_and_voids_the_ack_id() {
    // Rows and segments read in place keep the same rules.
    for in_place in [false, true] {
        let (_dir, store) = open_temp_for(in_place, &["s"]);
        store
            .append(&batch("s", vec![msg(10, 0, "a"), msg(10, 1, "b")]), Lsn(10))
            .unwrap();
        let first = store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap();
        let bogus = AckId::new();
        let outcome = store.nack("s", &[first[1].ack_id, bogus]).unwrap();
        assert_eq!(
            outcome,
            AckOutcome {
                processed: 1,
                unknown: vec![bogus]
            }
        );
        let again = store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap();
        assert_eq!(positions(&again), vec![(10, 1)]);
        assert_eq!(again[0].deliver_count, 2);
        // The nacked lease can no longer ack the message.
        assert_eq!(
            store.ack("s", &[first[1].ack_id]).unwrap().unknown,
            vec![first[1].ack_id]
        );
        assert_eq!(
            store.message_counts("s").unwrap(),
            MessageCounts {
                stored: 2,
                in_flight: 2
            }
        );
    }
}

#[test]
fn duplicates_on_append_are_ignored() {
    // Rows and segments read in place keep the same rules.
    for in_place in [false, true] {
        let (_dir, store) = open_temp_for(in_place, &["s"]);
        store
            .append(&batch("s", vec![msg(10, 0, "a"), msg(10, 1, "a")]), Lsn(10))
            .unwrap();
        let first = store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap();
        // A replay after a crash: same positions, maybe a different payload.
        let mut replay = msg(10, 0, "a");
        replay.payload = weft_core::payload::Payload::Json(json!({"replayed": true})).into();
        store
            .append(
                &batch("s", vec![replay, msg(10, 1, "a"), msg(11, 0, "a")]),
                Lsn(11),
            )
            .unwrap();
        assert_eq!(
            store.message_counts("s").unwrap(),
            MessageCounts {
                stored: 3,
                in_flight: 1
            }
        );
        // The in-flight lease survived the replay.
        assert_eq!(store.ack("s", &ack_ids(&first)).unwrap().processed, 1);
        let next = store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap();
        assert_eq!(positions(&next), vec![(10, 1)]);
    }
}

#[test]
fn a_late_earlier_message_takes_over_the_head_of_its_group() {
    let (_dir, store) = open_temp();
    store
        .append(&batch("s", vec![msg(20, 0, "a")]), Lsn(20))
        .unwrap();
    store
        .append(&batch("s", vec![msg(10, 0, "a")]), Lsn(20))
        .unwrap();
    let first = store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap();
    assert_eq!(positions(&first), vec![(10, 0)]);
    store.ack("s", &ack_ids(&first)).unwrap();
    assert_eq!(
        positions(&store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap()),
        vec![(20, 0)]
    );
}

#[test]
fn max_ack_pending_caps_messages_in_flight() {
    // Rows and segments read in place keep the same rules.
    for in_place in [false, true] {
        let (_dir, store) = open_temp_for(in_place, &["s"]);
        let messages = (0..5).map(|i| msg(10, i, &format!("g{i}"))).collect();
        store.append(&batch("s", messages), Lsn(10)).unwrap();
        let first = store.receive("s", 10, limits(WAIT, 3)).unwrap();
        assert_eq!(first.len(), 3);
        assert!(store.receive("s", 10, limits(WAIT, 3)).unwrap().is_empty());
        store.ack("s", &[first[0].ack_id]).unwrap();
        assert_eq!(
            positions(&store.receive("s", 10, limits(WAIT, 3)).unwrap()),
            vec![(10, 3)]
        );
    }
}

#[test]
fn everything_persists_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.db");
    let leased = {
        let store = Store::open(&path).unwrap();
        store
            .append(&batch("s", vec![msg(10, 0, "a"), msg(10, 1, "b")]), Lsn(10))
            .unwrap();
        store.receive("s", 1, limits(WAIT, NO_LIMIT)).unwrap()
    };
    let store = Store::open(&path).unwrap();
    assert_eq!(store.sink_cursor("s").unwrap(), Some(Lsn(10)));
    assert_eq!(
        store.message_counts("s").unwrap(),
        MessageCounts {
            stored: 2,
            in_flight: 1
        }
    );
    assert_eq!(
        positions(&store.receive("s", 10, limits(WAIT, NO_LIMIT)).unwrap()),
        vec![(10, 1)]
    );
    assert_eq!(store.ack("s", &ack_ids(&leased)).unwrap().processed, 1);
    let conn = store.lock();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, schema::MIGRATIONS.len() as i64);
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[test]
fn the_stored_part_of_an_open_transaction_is_remembered_until_its_commit() {
    let (_dir, store) = open_temp();
    assert_eq!(
        store.sink_stored_up_to("s").unwrap(),
        None,
        "a sink that never stored anything"
    );
    store.start_sink_at("s", Lsn(10)).unwrap();
    assert_eq!(store.sink_stored_up_to("s").unwrap().unwrap().open, None);
    // The first chunk of the transaction committing at 50.
    store
        .append_through(
            &batch("s", vec![msg(50, 0, "a")]),
            Lsn(10),
            Some((Lsn(50), 3)),
        )
        .unwrap();
    assert_eq!(
        store.sink_stored_up_to("s").unwrap().unwrap().open,
        Some((Lsn(50), 3))
    );
    // An append from elsewhere (held changes released) leaves it alone.
    store.append(&batch("s", vec![]), Lsn(10)).unwrap();
    assert_eq!(
        store.sink_stored_up_to("s").unwrap().unwrap().open,
        Some((Lsn(50), 3))
    );
    store
        .append_through(
            &batch("s", vec![msg(50, 4, "a")]),
            Lsn(10),
            Some((Lsn(50), 9)),
        )
        .unwrap();
    assert_eq!(
        store.sink_stored_up_to("s").unwrap().unwrap().open,
        Some((Lsn(50), 9))
    );
    // Its Commit: nothing is open any more.
    store
        .append_through(&batch("s", vec![]), Lsn(50), None)
        .unwrap();
    assert_eq!(store.sink_stored_up_to("s").unwrap().unwrap().open, None);
    assert_eq!(store.sink_cursor("s").unwrap(), Some(Lsn(50)));
    // A batch that commits one transaction and opens the next.
    store
        .append_through(&batch("s", vec![]), Lsn(60), Some((Lsn(70), 0)))
        .unwrap();
    assert_eq!(
        store.sink_stored_up_to("s").unwrap(),
        Some(StoredUpTo {
            cursor: Lsn(60),
            open: Some((Lsn(70), 0))
        })
    );
    // After a restart Postgres sends again transactions that committed
    // before the open one, stored already or not: the record stays.
    for replayed in [55, 65] {
        store
            .append_through(&batch("s", vec![]), Lsn(replayed), None)
            .unwrap();
        assert_eq!(
            store.sink_stored_up_to("s").unwrap(),
            Some(StoredUpTo {
                cursor: Lsn(replayed.max(60)),
                open: Some((Lsn(70), 0))
            })
        );
    }
    // A batch that ends inside the replayed, stored part of the open
    // transaction, or of one before it, moves the record back neither.
    store
        .append_through(&batch("s", vec![]), Lsn(60), Some((Lsn(70), 9)))
        .unwrap();
    for replayed in [(Lsn(70), 4), (Lsn(55), 20)] {
        store
            .append_through(&batch("s", vec![]), Lsn(60), Some(replayed))
            .unwrap();
        assert_eq!(
            store.sink_stored_up_to("s").unwrap().unwrap().open,
            Some((Lsn(70), 9)),
            "after a batch ending at {replayed:?}"
        );
    }
    // A sink started afresh has nothing open.
    store.start_sink_at("s", Lsn(100)).unwrap();
    assert_eq!(store.sink_stored_up_to("s").unwrap().unwrap().open, None);
}

#[test]
fn sqlite_keeps_no_allocation_statistics_once_a_store_is_open() {
    let (_dir, store) = open_temp();
    store
        .append(&batch("s", vec![msg(10, 0, "a"), msg(10, 1, "b")]), Lsn(10))
        .unwrap();
    // With the statistics on, SQLite counts every allocation it holds
    // (its page cache at least); off, the counter never moves from zero.
    assert_eq!(unsafe { rusqlite::ffi::sqlite3_memory_used() }, 0);
}

#[test]
fn a_store_from_a_newer_weft_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.db");
    drop(Store::open(&path).unwrap());
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let err = Store::open(&path).unwrap_err();
    assert!(
        matches!(err, StoreError::NewerSchema { found: 99, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("upgrade weft"), "{err}");
}

#[test]
fn concurrent_receivers_get_disjoint_messages() {
    // Rows and segments read in place keep the same rules.
    for in_place in [false, true] {
        let (_dir, store) = open_temp_for(in_place, &["s"]);
        let messages: Vec<_> = (0..400)
            .map(|i| msg(10 + i / 4, (i % 4) as u32, &format!("g{i}")))
            .collect();
        store.append(&batch("s", messages), Lsn(200)).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let store = store.clone();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    loop {
                        let d = store.receive("s", 7, limits(WAIT, NO_LIMIT)).unwrap();
                        if d.is_empty() {
                            return got;
                        }
                        got.extend(positions(&d));
                    }
                })
            })
            .collect();
        let mut all = HashSet::new();
        let mut total = 0;
        for t in threads {
            let got = t.join().unwrap();
            total += got.len();
            all.extend(got);
        }
        assert_eq!(total, 400, "every message handed out exactly once");
        assert_eq!(all.len(), 400);
    }
}

/// SQLite's plan for `query`, one step per line.
fn query_plan(conn: &Connection, query: &str) -> String {
    let plan: Vec<String> = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {query}"))
        .unwrap()
        .query_map([], |row| row.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    plan.join("\n")
}

#[test]
fn receive_uses_the_heads_index() {
    let (_dir, store) = open_temp();
    let conn = store.lock();
    let plan = query_plan(
        &conn,
        "SELECT id FROM pull_messages INDEXED BY pull_messages_heads
         WHERE sink = 's' AND head = 1 AND (not_visible_until IS NULL OR not_visible_until <= 0)
         ORDER BY commit_lsn, commit_idx LIMIT 10",
    );
    assert!(
        plan.contains("pull_messages_heads") && !plan.contains("TEMP B-TREE"),
        "{plan}"
    );
}

#[test]
fn lease_counts_use_the_partial_visibility_index() {
    let (_dir, store) = open_temp();
    let conn = store.lock();
    for query in [
        "SELECT count(*) FROM (SELECT 1 FROM pull_messages
         WHERE sink = 's' AND not_visible_until > 5 LIMIT 10)",
        "SELECT min(not_visible_until) FROM pull_messages
         WHERE sink = 's' AND not_visible_until > 5",
    ] {
        let plan = query_plan(&conn, query);
        assert!(plan.contains("pull_messages_visibility"), "{query}: {plan}");
    }
}

/// Receive stays fast with 100k stored messages, including when most of
/// them sit behind heads that are in flight. Run with `--ignored --nocapture`
/// (release mode) to see the rates.
#[test]
#[ignore = "benchmark; run explicitly"]
fn receive_and_ack_rate_with_100k_messages() {
    let (_dir, store) = open_temp();
    let total: u32 = 100_000;
    let started = Instant::now();
    for chunk in 0..(total / 1000) {
        let messages = (0..1000)
            .map(|i| {
                let n = chunk * 1000 + i;
                let mut m = msg(u64::from(n / 10) + 1, n % 10, &format!("g{}", n % 1000));
                m.payload = weft_core::payload::Payload::Json(
                    json!({"lsn": n / 10 + 1, "idx": n % 10, "record": {"id": n, "name": "x".repeat(200)}}),
                ).into();
                m
            })
            .collect();
        store
            .append(&batch("s", messages), Lsn(u64::from(chunk)))
            .unwrap();
    }
    println!(
        "append: {:.0} msg/s (batches of 1000)",
        f64::from(total) / started.elapsed().as_secs_f64()
    );

    for batch_size in [1u32, 10, 100, 1000] {
        let started = Instant::now();
        let mut n = 0u32;
        // At most a fifth of the messages each, so that some wait at the end.
        while started.elapsed() < Duration::from_secs(3) && n < total / 5 {
            let d = store
                .receive("s", batch_size, limits(WAIT, NO_LIMIT))
                .unwrap();
            assert_eq!(d.len(), batch_size as usize);
            store.ack("s", &ack_ids(&d)).unwrap();
            n += d.len() as u32;
        }
        println!(
            "receive+ack batch {batch_size}: {:.0} msg/s, {:.0} round trips/s",
            f64::from(n) / started.elapsed().as_secs_f64(),
            f64::from(n / batch_size) / started.elapsed().as_secs_f64()
        );
    }

    // All 1000 groups' heads in flight: receive must not scan the messages
    // still waiting.
    let leased = store.receive("s", 1000, limits(WAIT, NO_LIMIT)).unwrap();
    assert_eq!(leased.len(), 1000);
    let started = Instant::now();
    for _ in 0..100 {
        assert!(
            store
                .receive("s", 100, limits(WAIT, NO_LIMIT))
                .unwrap()
                .is_empty()
        );
    }
    println!(
        "empty receive with every group blocked: {:?} each",
        started.elapsed() / 100
    );
}

#[test]
fn max_deliver_dead_letters_a_message_handed_out_that_often_and_frees_its_group() {
    // Rows and segments read in place keep the same rules.
    for in_place in [false, true] {
        let (_dir, store) = open_temp_for(in_place, &["s"]);
        store
            .append(
                &batch("s", vec![msg(10, 0, "a"), msg(20, 0, "a"), msg(20, 1, "b")]),
                Lsn(20),
            )
            .unwrap();
        // A zero visibility timeout: every lease has ended by the next receive.
        let rules = ReceiveLimits {
            ack_wait: Duration::ZERO,
            max_ack_pending: NO_LIMIT,
            max_deliver: Some(2),
        };
        for attempt in 1..=2 {
            let got = store.receive("s", 10, rules).unwrap();
            assert_eq!(positions(&got), vec![(10, 0), (20, 1)], "attempt {attempt}");
            assert!(got.iter().all(|d| d.deliver_count == attempt));
        }
        // Both heads were handed out twice: the third receive dead-letters them
        // and hands out what follows in group a; group b has nothing more.
        let third = store.receive("s", 10, rules).unwrap();
        assert_eq!(positions(&third), vec![(20, 0)]);
        assert_eq!(third[0].deliver_count, 1);
        let dead = store.dead_letters("s", 0, 10).unwrap();
        assert_eq!(
            dead.iter()
                .map(|d| (d.commit_lsn.0, d.commit_idx))
                .collect::<Vec<_>>(),
            vec![(10, 0), (20, 1)]
        );
        assert!(dead.iter().all(|d| d.attempts == 2));
        assert!(
            dead[0].last_error.contains("max_deliver = 2"),
            "{}",
            dead[0].last_error
        );
        // Without max_deliver the same message is handed out again and again.
        let unlimited = ReceiveLimits {
            max_deliver: None,
            ..rules
        };
        for _ in 0..3 {
            assert_eq!(
                positions(&store.receive("s", 10, unlimited).unwrap()),
                vec![(20, 0)]
            );
        }
    }
}

#[test]
fn registered_plugin_versions_are_immutable_and_their_files_shared() {
    use crate::{RegisteredPlugin, Registration};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("weft.db")).unwrap();
    let version = |version: &str, sha256: &str| RegisteredPlugin {
        account: "acme".into(),
        name: "mask".into(),
        version: version.into(),
        kind: "transform".into(),
        sha256: sha256.into(),
        bytes: 10,
        imports: vec!["weft:plugin/source-query@0.2.0".into()],
        registered_at: 0,
    };
    let Registration::Created(created) = store.register_plugin(&version("1", "aa")).unwrap() else {
        panic!("a new version is created");
    };
    assert!(created.registered_at > 0);
    assert_eq!(
        store.register_plugin(&version("1", "aa")).unwrap(),
        Registration::Unchanged(created.clone())
    );
    assert!(matches!(
        store.register_plugin(&version("1", "bb")).unwrap(),
        Registration::Conflict(existing) if existing.sha256 == "aa"
    ));
    assert!(matches!(
        store.register_plugin(&version("2", "aa")).unwrap(),
        Registration::Created(_)
    ));
    assert_eq!(
        store
            .registered_plugin("acme", "mask", "1")
            .unwrap()
            .unwrap()
            .imports,
        created.imports
    );
    assert!(
        store.registered_plugin("", "mask", "1").unwrap().is_none(),
        "another account's name space"
    );
    assert!(store.registered_plugins(Some("other")).unwrap().is_empty());
    assert_eq!(store.registered_plugins(None).unwrap().len(), 2);
    assert!(
        store.unregister_plugin("acme", "mask", "1").unwrap(),
        "version 2 still has the bytes"
    );
    assert!(
        !store.unregister_plugin("acme", "mask", "2").unwrap(),
        "the last one"
    );
    assert!(store.registered_plugins(None).unwrap().is_empty());
}

#[test]
fn held_changes_are_read_while_a_transaction_holds_the_writer() {
    let (_dir, store) = open_temp();
    let writer = store.lock();
    let reader = store.clone();
    let (answered, answer) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let held = reader.has_held("s").and_then(|any| {
            let groups = reader.held_groups("s", ["g"])?;
            Ok((any, groups.is_empty()))
        });
        let _ = answered.send(held.unwrap());
    });
    // The pipeline checks its next batch while the last one commits.
    let got = answer.recv_timeout(WAIT);
    drop(writer);
    assert_eq!(
        got.expect("held changes read without the writer"),
        (false, true)
    );
}

/// How often SQLite re-prepared each of `statements` on the store's
/// connection (a cached statement keeps its count). Each must still be in
/// the statement cache, having run: a fresh one would count nothing.
fn reprepares(store: &Store, statements: &[&str]) -> Vec<i32> {
    let conn = store.lock();
    statements
        .iter()
        .map(|sql| {
            let statement = conn.prepare_cached(sql).unwrap();
            assert!(
                statement.get_status(rusqlite::StatementStatus::Run) > 0,
                "not in the statement cache any more: {sql}"
            );
            statement.get_status(rusqlite::StatementStatus::RePrepare)
        })
        .collect()
}

#[test]
fn storing_and_acking_re_prepare_no_statement() {
    let (_dir, store) = open_temp();
    // Batches too small for segments: `pull_messages` rows, whose acks
    // promote their group's next row.
    for round in 0..3 {
        let messages = (0..100)
            .map(|g| msg(10 + round, g, &format!("g{g}")))
            .collect();
        store.append(&batch("s", messages), Lsn(20)).unwrap();
    }
    for lsn in 21..30 {
        store
            .append(&batch("s", vec![msg(lsn, 0, "late")]), Lsn(lsn))
            .unwrap();
    }
    let mut acked = 0;
    loop {
        let got = store
            .receive("s", 100, limits(Duration::from_secs(60), NO_LIMIT))
            .unwrap();
        if got.is_empty() {
            break;
        }
        acked += store.ack("s", &ack_ids(&got)).unwrap().processed;
    }
    assert_eq!(
        acked, 309,
        "each ack made its group's next message the head"
    );
    assert_eq!(
        reprepares(&store, &[heads::PROMOTE_NEXT_HEAD, LAST_STORED]),
        vec![0, 0],
        "statements with a parameter in an equality are planned once"
    );
}
