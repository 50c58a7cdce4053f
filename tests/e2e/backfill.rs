//! Backfills through the real binary: every existing row arrives as a
//! `read` while live changes keep flowing, and replaying the messages per
//! row in delivery order gives the table's final state (a stale read after
//! a newer change would not); a backfill SIGKILLed mid-way resumes from its
//! cursor; bad requests get clear errors.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use rand::Rng;
use serde_json::{Value, json};

use crate::harness::postgres::PgCluster;
use crate::harness::weft::{WeftProcess, http};

const SLOT: &str = "weft_backfill";

/// A pull sink `items` on `public.items`, with `extra` sink YAML.
fn config(pg: &PgCluster, extra: &str) -> String {
    format!(
        "{}sinks:\n  - name: items\n    database: shop\n    source: {{ include_tables: [public.items] }}\n{extra}    destination: {{ type: sequin_stream, ack_wait_ms: 60000 }}\n",
        pg.databases_yaml(SLOT)
    )
}

fn start_backfill(weft: &WeftProcess, table: &str) -> (u16, Value) {
    let response = http()
        .post(weft.url("/api/sinks/items/backfills"))
        .json(&json!({ "table": table }))
        .send()
        .expect("POST backfills");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

fn wait_for_state(weft: &WeftProcess, id: &str, state: &str, timeout: Duration) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let backfill = weft.get_json(&format!("/api/sinks/items/backfills/{id}"));
        if backfill["state"] == state {
            return backfill;
        }
        assert!(
            Instant::now() < deadline,
            "backfill not {state}: {backfill}\nlog:\n{}",
            weft.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Receives and acks until nothing more arrives for two seconds.
fn drain_until_quiet(weft: &WeftProcess) -> Vec<Value> {
    let mut all = Vec::new();
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < Duration::from_secs(2) {
        let got = weft.drain("items", usize::MAX, Duration::from_millis(1500));
        if !got.is_empty() {
            quiet_since = Instant::now();
        }
        all.extend(got);
    }
    all
}

/// Creates `items` with `rows` rows, `v` set to `v` (an SQL expression of `g`, the id).
fn items_table(pg: &PgCluster, rows: i64, v: &str) {
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    pg.psql(&format!(
        "INSERT INTO items SELECT g, {v} FROM generate_series(1, {rows}) g"
    ));
}

/// Waits until the backfill `id` has stored some rows; returns its state.
fn wait_for_progress(weft: &WeftProcess, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let progress = weft.get_json(&format!("/api/sinks/items/backfills/{id}"));
        if progress["rows_processed_count"].as_u64().unwrap() > 0 {
            return progress;
        }
        assert!(Instant::now() < deadline, "no progress: {progress}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Drains into `delivered` until the backfill `id` completes, then until quiet.
fn drain_until_completed(weft: &WeftProcess, id: &str, delivered: &mut Vec<Value>) -> Value {
    let deadline = Instant::now() + Duration::from_secs(180);
    let done = loop {
        delivered.extend(weft.drain("items", 5000, Duration::from_secs(1)));
        let progress = weft.get_json(&format!("/api/sinks/items/backfills/{id}"));
        if progress["state"] == "completed" {
            break progress;
        }
        assert!(
            Instant::now() < deadline,
            "not completed: {progress}\n{}",
            weft.log_text()
        );
    };
    delivered.extend(drain_until_quiet(weft));
    done
}

/// Applies `messages` in delivery order: the state each row ends in.
fn replay(messages: &[Value]) -> BTreeMap<i64, i64> {
    let mut state = BTreeMap::new();
    for message in messages {
        let id = message["record"]["id"].as_i64().unwrap();
        match message["action"].as_str().unwrap() {
            "delete" => {
                state.remove(&id);
            }
            _ => {
                state.insert(id, message["record"]["v"].as_i64().unwrap());
            }
        }
    }
    state
}

fn table_state(pg: &PgCluster) -> BTreeMap<i64, i64> {
    pg.psql("SELECT id || ',' || v FROM items ORDER BY id")
        .lines()
        .map(|line| {
            let (id, v) = line.split_once(',').unwrap();
            (id.parse().unwrap(), v.parse().unwrap())
        })
        .collect()
}

/// Until `stop`: small transactions that update, insert and delete random rows.
fn churn(pg: &PgCluster, rows: i64, stop: &AtomicBool) -> usize {
    let mut rng = rand::rng();
    let mut transactions = 0;
    let mut next_new = rows + 1;
    while !stop.load(Ordering::Relaxed) {
        let ids: Vec<String> = (0..20)
            .map(|_| rng.random_range(1..=rows).to_string())
            .collect();
        pg.psql(&format!(
            "BEGIN; UPDATE items SET v = v + 1 WHERE id IN ({ids}); \
             DELETE FROM items WHERE id = {gone}; \
             INSERT INTO items VALUES ({next_new}, 1000); COMMIT;",
            ids = ids.join(", "),
            gone = rng.random_range(1..=rows),
        ));
        next_new += 1;
        transactions += 1;
    }
    transactions
}

#[test]
fn a_backfill_reads_every_row_while_changes_flow_and_never_delivers_a_stale_row() {
    let pg = PgCluster::start();
    let rows = 20_000;
    items_table(&pg, rows, "0");
    let dir = tempfile::tempdir().unwrap();
    let weft = WeftProcess::start(dir.path(), &config(&pg, ""));
    pg.wait_for_active_slot(SLOT);

    let stop = AtomicBool::new(false);
    let (backfill, transactions) = std::thread::scope(|scope| {
        let churning = scope.spawn(|| churn(&pg, rows, &stop));
        let (status, created) = start_backfill(&weft, "public.items");
        assert_eq!(status, 201, "{created}");
        assert_eq!(created["state"], "active");
        assert_eq!(created["table"], "public.items");
        let id = created["id"].as_str().unwrap().to_string();
        let done = wait_for_state(&weft, &id, "completed", Duration::from_secs(180));
        stop.store(true, Ordering::Relaxed);
        (done, churning.join().unwrap())
    });
    assert!(transactions > 0, "changes flowed during the backfill");
    let messages = drain_until_quiet(&weft);

    let reads: Vec<&Value> = messages.iter().filter(|m| m["action"] == "read").collect();
    let id = backfill["id"].as_str().unwrap();
    let read_ids: BTreeSet<i64> = reads
        .iter()
        .map(|m| m["record"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(read_ids.len(), reads.len(), "each row is read once");
    // A row never touched by the churn is read; the others may have been
    // dropped from their chunk because their change carries them.
    let changed: BTreeSet<i64> = messages
        .iter()
        .filter(|m| m["action"] != "read")
        .map(|m| m["record"]["id"].as_i64().unwrap())
        .collect();
    for row in 1..=rows {
        assert!(
            read_ids.contains(&row) || changed.contains(&row),
            "row {row} neither read nor changed"
        );
    }
    let first = reads[0];
    let key =
        base64::engine::general_purpose::STANDARD.encode(format!("{id}:{}", first["record"]["id"]));
    assert_eq!(first["metadata"]["idempotency_key"], key.as_str());
    assert!(backfill["rows_processed_count"].as_u64().unwrap() >= read_ids.len() as u64);
    // Replaying what arrived, in order, per row, gives the table as it is:
    // no read overwrote a newer change.
    assert_eq!(replay(&messages), table_state(&pg));
}

#[test]
fn a_backfill_killed_mid_way_resumes_from_its_cursor() {
    let pg = PgCluster::start();
    let rows = 60_000;
    items_table(&pg, rows, "g");
    let dir = tempfile::tempdir().unwrap();
    // The backlog bound pauses the stream, and with it the backfill, until
    // the consumer drains: the kill lands mid-way for sure.
    let mut weft = WeftProcess::start(dir.path(), &config(&pg, "    max_backlog_messages: 5000\n"));
    pg.wait_for_active_slot(SLOT);
    let (status, created) = start_backfill(&weft, "public.items");
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_string();

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let progress = weft.get_json(&format!("/api/sinks/items/backfills/{id}"));
        if progress["rows_processed_count"].as_u64().unwrap() > 0 {
            assert_eq!(
                progress["state"], "active",
                "paused by the backlog: {progress}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "no progress: {progress}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Some of it is delivered before the crash.
    let mut delivered = weft.drain("items", 1000, Duration::from_secs(10));
    weft.kill();
    weft.restart();
    let done = drain_until_completed(&weft, &id, &mut delivered);
    let read_ids: BTreeSet<i64> = delivered
        .iter()
        .map(|m| m["record"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(read_ids, (1..=rows).collect(), "every row arrived");
    // Resumed, not restarted: at most a chunk in flight was read twice.
    assert!(
        delivered.len() < rows as usize + 20_000,
        "{} messages for {rows} rows",
        delivered.len()
    );
    assert!(done["rows_processed_count"].as_u64().unwrap() >= rows as u64);
}

#[test]
fn bad_backfill_requests_get_clear_errors_and_a_backfill_can_be_cancelled() {
    let pg = PgCluster::start();
    items_table(&pg, 10, "g");
    pg.psql("CREATE TABLE loose (v int)");
    let dir = tempfile::tempdir().unwrap();
    let weft = WeftProcess::start(
        dir.path(),
        &config(&pg, "").replace(
            "include_tables: [public.items]",
            "include_schemas: [public]",
        ),
    );
    pg.wait_for_active_slot(SLOT);

    let (status, body) = start_backfill(&weft, "public.missing");
    assert_eq!(status, 422);
    assert!(
        body["summary"].as_str().unwrap().contains("does not exist"),
        "{body}"
    );
    let (status, body) = start_backfill(&weft, "public.loose");
    assert_eq!(status, 422);
    assert!(
        body["summary"].as_str().unwrap().contains("no primary key"),
        "{body}"
    );
    let (status, body) = start_backfill(&weft, "other.items");
    assert_eq!(status, 422);
    assert!(
        body["summary"]
            .as_str()
            .unwrap()
            .contains("does not receive"),
        "{body}"
    );
    let (status, body) = start_backfill(&weft, "items");
    assert_eq!(status, 422);
    assert!(
        body["summary"]
            .as_str()
            .unwrap()
            .contains("schema-qualified"),
        "{body}"
    );
    let unknown = http()
        .post(weft.url("/api/sinks/nope/backfills"))
        .json(&json!({"table": "public.items"}))
        .send()
        .unwrap();
    assert_eq!(unknown.status().as_u16(), 404);

    let (status, created) = start_backfill(&weft, "public.items");
    assert_eq!(status, 201);
    let id = created["id"].as_str().unwrap();
    let cancelled = http()
        .delete(weft.url(&format!("/api/sinks/items/backfills/{id}")))
        .send()
        .unwrap();
    assert_eq!(cancelled.status().as_u16(), 200);
    let state = weft.get_json(&format!("/api/sinks/items/backfills/{id}"))["state"].clone();
    // A 10-row backfill may finish before the cancel lands.
    assert!(state == "cancelled" || state == "completed", "{state}");
    let listed = weft.get_json("/api/sinks/items/backfills");
    assert_eq!(listed["data"].as_array().unwrap().len(), 1);
}

#[test]
fn initial_backfill_runs_once_when_the_sink_is_created() {
    let pg = PgCluster::start();
    items_table(&pg, 500, "g");
    let dir = tempfile::tempdir().unwrap();
    let mut weft = WeftProcess::start(dir.path(), &config(&pg, "    initial_backfill: true\n"));
    let reads = weft.drain("items", 500, Duration::from_secs(60));
    let ids: BTreeSet<i64> = reads
        .iter()
        .filter(|m| m["action"] == "read")
        .map(|m| m["record"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, (1..=500).collect(), "log:\n{}", weft.log_text());
    let listed = weft.get_json("/api/sinks/items/backfills");
    let id = listed["data"][0]["id"].as_str().unwrap().to_string();
    wait_for_state(&weft, &id, "completed", Duration::from_secs(60));

    // Not on later starts: the sink exists now.
    weft.restart();
    pg.psql("INSERT INTO items VALUES (501, 501)");
    let after = weft.drain("items", 1, Duration::from_secs(30));
    assert_eq!(after.len(), 1);
    assert_eq!(after[0]["action"], "insert");
    assert!(weft.receive("items", 100, 1000).is_empty());
    assert_eq!(
        weft.get_json("/api/sinks/items/backfills")["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

fn act(weft: &WeftProcess, id: &str, action: &str) -> (u16, Value) {
    let response = http()
        .post(weft.url(&format!("/api/sinks/items/backfills/{id}/{action}")))
        .send()
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

#[test]
fn a_paused_backfill_reads_nothing_until_resumed() {
    let pg = PgCluster::start();
    let rows = 30_000;
    items_table(&pg, rows, "g");
    let dir = tempfile::tempdir().unwrap();
    let weft = WeftProcess::start(dir.path(), &config(&pg, "    max_backlog_messages: 2000\n"));
    pg.wait_for_active_slot(SLOT);
    let (_, created) = start_backfill(&weft, "public.items");
    let id = created["id"].as_str().unwrap().to_string();
    let path = format!("/api/sinks/items/backfills/{id}");
    wait_for_progress(&weft, &id);
    let (status, paused) = act(&weft, &id, "pause");
    assert_eq!(
        (status, paused["state"].as_str()),
        (200, Some("paused")),
        "{paused}"
    );
    // Drain what was stored before the pause; then nothing more is read.
    let mut delivered = drain_until_quiet(&weft);
    let before = weft.get_json(&path)["rows_processed_count"].clone();
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        weft.receive("items", 100, 1000).is_empty(),
        "paused reads nothing"
    );
    assert_eq!(weft.get_json(&path)["rows_processed_count"], before);
    assert_eq!(
        act(&weft, &id, "pause").0,
        409,
        "only an active backfill pauses"
    );

    let (status, resumed) = act(&weft, &id, "resume");
    assert_eq!(
        (status, resumed["state"].as_str()),
        (200, Some("active")),
        "{resumed}"
    );
    drain_until_completed(&weft, &id, &mut delivered);
    let ids: BTreeSet<i64> = delivered
        .iter()
        .map(|m| m["record"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, (1..=rows).collect());
}
