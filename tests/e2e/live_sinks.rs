//! Sinks created, updated and deleted through the API while changes flow,
//! through the real binary: none of it restarts the pipeline (the
//! replication connection stays the same backend), the untouched sink
//! receives every row exactly once and in order, the created sink receives
//! every row from its creation on, in order, across its update (a new
//! transform, then a changed http endpoint, each with a new delivery
//! worker), and the deleted sink is gone. A database's first sink starts
//! that database's feed, and a changed database restarts its own feed
//! alone, while the other database's replication connection stays the
//! same.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::guests;
use crate::harness::postgres::PgCluster;
use crate::harness::webhook_receiver::{Mode, Receiver, SECRET, State, TOKEN};
use crate::harness::weft::{WeftProcess, http};

const ROWS: i64 = 400;
const SLOT: &str = "weft_live";

fn config(pg: &PgCluster, receiver: &Receiver) -> String {
    format!(
        "{databases}http_endpoints:\n  - name: receiver\n    url: http://{addr}\n    headers: {{ X-Test: plain }}\n    encrypted_headers: {{ Authorization: \"{TOKEN}\" }}\n    signing_secret: {SECRET}\n\
         functions:\n  - name: tagger\n    type: transform\n    file: {wasm}\n    config: {{ tag: v2 }}\n\
         sinks:\n  # steady: never touched by the API\n  - name: steady\n    database: shop\n    source: {{ include_tables: [public.items] }}\n    destination: {{ type: sequin_stream }}\n\
         \x20 - name: doomed\n    database: shop\n    source: {{ include_tables: [public.items] }}\n    destination: {{ type: sequin_stream }}\n",
        databases = pg.databases_yaml(SLOT),
        addr = receiver.addr,
        wasm = guests::wasm("weft_tag_transform").display(),
    )
}

/// The `fresh` webhook sink, with the `tagger` transform or without.
fn fresh(tagged: bool) -> Value {
    let mut sink = json!({
        "name": "fresh",
        "database": "shop",
        "source": {"include_tables": ["public.items"]},
        "destination": {
            "type": "webhook",
            "http_endpoint": "receiver",
            "http_endpoint_path": "/fresh",
            "batch": false,
            "max_in_flight": 1,
        },
    });
    if tagged {
        sink["transform"] = json!("tagger");
    }
    sink
}

fn send(weft: &WeftProcess, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut request = http().request(method, weft.url(path));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().unwrap();
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

/// How many of the last rows [`write_rows`] holds back until told to go on.
const HELD_BACK_ROWS: i64 = 100;

/// Inserts rows 1..=ROWS into `items`, one transaction each, counting
/// them in `written`. The last [`HELD_BACK_ROWS`] wait until `go_on` is
/// set, so that a test sees rows committed after a step however slowly
/// the machine gets there.
fn write_rows(pg: &PgCluster, written: &AtomicI64, go_on: &AtomicBool) {
    for id in 1..=ROWS {
        if id == ROWS - HELD_BACK_ROWS + 1 {
            crate::harness::wait::until(
                "the test to let the last rows go",
                Duration::from_secs(120),
                Duration::from_millis(20),
                || go_on.load(Ordering::SeqCst).then_some(()).ok_or(id),
                String::new,
            );
        }
        pg.psql(&format!("INSERT INTO items VALUES ({id}, {id})"));
        written.store(id, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(15));
    }
}

/// The row ids the receiver got on `/fresh`, in arrival order, and
/// whether each came through the transform.
fn fresh_arrivals(state: &State) -> Vec<(i64, bool)> {
    state
        .accepted
        .iter()
        .filter(|(path, _)| path == "/fresh")
        .map(|(_, message)| match message["tag"].as_str() {
            Some(tag) => {
                assert_eq!(tag, "v2", "{message}");
                (message["id"].as_i64().unwrap(), true)
            }
            None => (message["record"]["id"].as_i64().unwrap(), false),
        })
        .collect()
}

#[test]
fn sinks_are_created_updated_and_deleted_while_the_others_keep_flowing() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int)");
    let receiver = Receiver::start(Mode::Accept);
    let (dir, mut weft) = WeftProcess::start_replicating(&pg, SLOT, &config(&pg, &receiver));
    let backend = backend_of(&pg, SLOT);

    let written = AtomicI64::new(0);
    let created_at = AtomicI64::new(0);
    // Rows must still be written after the update, or no row would show
    // the new transform (a loaded machine once had the writer done first).
    let update_applied = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| write_rows(&pg, &written, &update_applied));
        let wait_for_rows = |rows: i64| {
            weft.wait_until("the writer", Duration::from_secs(120), || {
                let at = written.load(Ordering::SeqCst);
                (at >= rows).then_some(()).ok_or(at)
            })
        };

        wait_for_rows(50);
        let (status, created) = send(&weft, Method::POST, "/api/sinks", Some(fresh(false)));
        assert_eq!(status, 201, "{created}");
        assert_eq!(created["apply"]["restarted"], false, "{created}");
        assert_eq!(
            created["apply"]["sinks"],
            json!({"created": ["fresh"], "updated": [], "deleted": []}),
            "{created}"
        );
        // Every row committed from here on must reach the new sink.
        created_at.store(written.load(Ordering::SeqCst), Ordering::SeqCst);
        receiver.wait_until("the new sink's first rows", Duration::from_secs(60), |s| {
            s.accepted.iter().filter(|(p, _)| p == "/fresh").count() >= 30
        });

        let (status, updated) = send(&weft, Method::PUT, "/api/sinks/fresh", Some(fresh(true)));
        assert_eq!(status, 200, "{updated}");
        assert_eq!(updated["apply"]["restarted"], false, "{updated}");
        assert_eq!(updated["apply"]["sinks"]["updated"], json!(["fresh"]));
        update_applied.store(true, Ordering::SeqCst);

        let ingested =
            |sink: &str| weft.metric("sequin_messages_ingested_count", &[("sink", sink)]);
        assert!(
            ingested("doomed").is_some(),
            "the sink's series is exported"
        );
        let (status, deleted) = send(&weft, Method::DELETE, "/api/sinks/doomed", None);
        assert_eq!(status, 200, "{deleted}");
        assert_eq!(deleted["apply"]["restarted"], false, "{deleted}");
        assert_eq!(deleted["apply"]["sinks"]["deleted"], json!(["doomed"]));
        assert!(
            ingested("doomed").is_none() && ingested("steady").is_some(),
            "a deleted sink's series leave /metrics"
        );
        let (status, gone) = send(
            &weft,
            Method::GET,
            "/api/http_pull_consumers/doomed/receive",
            None,
        );
        assert_eq!(status, 404, "{gone}");

        // A changed endpoint updates the webhook sink delivering to it; one
        // in use cannot go.
        let endpoint = json!({
            "name": "receiver",
            "url": format!("http://{}", receiver.addr),
            "headers": {"X-Test": "plain", "X-Extra": "two"},
            "encrypted_headers": {"Authorization": TOKEN},
            "signing_secret": SECRET,
        });
        let path = "/api/destinations/http_endpoints/receiver";
        let (status, changed) = send(&weft, Method::PUT, path, Some(endpoint));
        assert_eq!(status, 200, "{changed}");
        assert_eq!(changed["apply"]["restarted"], false, "{changed}");
        assert_eq!(changed["apply"]["sinks"]["updated"], json!(["fresh"]));
        let (status, refused) = send(&weft, Method::DELETE, path, None);
        assert_eq!(status, 400, "{refused}");
        wait_for_rows(ROWS);
    });

    assert_eq!(
        received_ids(&weft, "steady", ROWS as usize),
        (1..=ROWS).collect::<Vec<_>>(),
        "the untouched sink got every row once, in order"
    );

    receiver.wait_until(
        "the new sink's last row",
        Duration::from_secs(60),
        |state| fresh_arrivals(state).last().map(|(id, _)| *id) == Some(ROWS),
    );
    let arrivals = receiver.with(fresh_arrivals);
    let ids: Vec<i64> = arrivals.iter().map(|(id, _)| *id).collect();
    let first = ids[0];
    let created_at = created_at.into_inner();
    assert!(
        first <= created_at + 1,
        "rows committed after the create returned (from {}) all arrived, but the first was {first}",
        created_at + 1
    );
    assert_eq!(
        ids,
        (first..=ROWS).collect::<Vec<_>>(),
        "from its creation on, every row once and in order"
    );
    let switch = arrivals.iter().position(|(_, tagged)| *tagged).unwrap();
    assert!(
        arrivals[switch..].iter().all(|(_, tagged)| *tagged),
        "one switch point: before it the old version, after it the new: {arrivals:?}"
    );
    assert!(switch >= 30, "{switch}");

    assert_eq!(
        backend_of(&pg, SLOT),
        backend,
        "the replication connection was never restarted"
    );
    let log = weft.log_text();
    assert_eq!(
        log.matches("pipeline started").count(),
        1,
        "the pipeline ran once, from start to end: {log}"
    );
    let sinks = weft.get_json("/api/sinks").to_string();
    assert!(
        sinks.contains("\"fresh\"") && !sinks.contains("\"doomed\""),
        "{sinks}"
    );
    let health = weft.get_json("/api/health").to_string();
    assert!(
        health.contains("\"fresh\"") && !health.contains("\"doomed\""),
        "{health}"
    );
    let written = std::fs::read_to_string(dir.path().join("weft.yml")).unwrap();
    assert!(
        written.contains("  # steady: never touched by the API\n  - name: steady\n")
            && written.contains("- name: fresh")
            && !written.contains("- name: doomed"),
        "the API's edits keep the config file's comments: {written}"
    );
    assert!(
        receiver.with(|s| s.bad_requests.is_empty()),
        "every delivery was signed and authorised"
    );
    assert_eq!(weft.terminate(), Some(0));
}

/// The `two` database entry (database `other`, slot `weft_two`).
fn second_database(pg: &PgCluster, heartbeat_ms: u64) -> Value {
    json!({
        "name": "two",
        "hostname": "127.0.0.1",
        "port": pg.port(),
        "database": "other",
        "username": "postgres",
        "heartbeat_interval_ms": heartbeat_ms,
        "slot": {"name": "weft_two", "create_if_not_exists": true},
        "publication": {"name": "weft_two", "create_if_not_exists": true},
    })
}

/// The pull sink `second` on `items` of the database entry `database`.
fn second_sink(database: &str) -> Value {
    json!({
        "name": "second",
        "database": database,
        "source": {"include_tables": ["public.items"]},
        "destination": {"type": "sequin_stream"},
    })
}

fn backend_of(pg: &PgCluster, slot: &str) -> String {
    pg.psql(&format!(
        "SELECT active_pid FROM pg_replication_slots WHERE slot_name = '{slot}'"
    ))
}

/// The ids of `sink`'s next `count` messages, received and acked.
fn received_ids(weft: &WeftProcess, sink: &str, count: usize) -> Vec<i64> {
    weft.drain(sink, count, Duration::from_secs(60))
        .iter()
        .map(|m| m["record"]["id"].as_i64().unwrap())
        .collect()
}

#[test]
fn a_database_feed_starts_and_restarts_alone_while_the_others_keep_flowing() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int)");
    pg.create_database("other");
    pg.psql_in("other", "CREATE TABLE items (id int PRIMARY KEY, v int)");
    let config = format!(
        "{}sinks:\n  - name: steady\n    database: shop\n    source: {{ include_tables: [public.items] }}\n    destination: {{ type: sequin_stream }}\n",
        pg.databases_yaml(SLOT)
    );
    let (_dir, mut weft) = WeftProcess::start_replicating(&pg, SLOT, &config);
    let backend = backend_of(&pg, SLOT);

    let written = AtomicI64::new(0);
    std::thread::scope(|scope| {
        scope.spawn(|| write_rows(&pg, &written, &AtomicBool::new(true)));

        let (status, created) = send(
            &weft,
            Method::POST,
            "/api/postgres_databases",
            Some(second_database(&pg, 15000)),
        );
        assert_eq!(status, 201, "{created}");
        assert_eq!(created["apply"]["restarted"], false, "{created}");
        assert_eq!(
            created["apply"]["databases"],
            json!({"stopped": [], "started": []}),
            "no sink reads it yet"
        );
        let (status, sink) = send(&weft, Method::POST, "/api/sinks", Some(second_sink("two")));
        assert_eq!(status, 201, "{sink}");
        assert_eq!(sink["apply"]["restarted"], false, "{sink}");
        assert_eq!(sink["apply"]["databases"]["started"], json!(["two"]));
        pg.wait_for_active_slot("weft_two");
        pg.psql_in(
            "other",
            "INSERT INTO items SELECT g, g FROM generate_series(1, 5) g",
        );
        assert_eq!(received_ids(&weft, "second", 5), vec![1, 2, 3, 4, 5]);
        let two_backend = backend_of(&pg, "weft_two");

        let (status, changed) = send(
            &weft,
            Method::PUT,
            "/api/postgres_databases/two",
            Some(second_database(&pg, 5000)),
        );
        assert_eq!(status, 200, "{changed}");
        assert_eq!(changed["apply"]["restarted"], false, "{changed}");
        assert_eq!(
            changed["apply"]["databases"],
            json!({"stopped": ["two"], "started": ["two"]})
        );
        // The old walsender can outlive weft's closed connection for a
        // moment: the feed restarted once another backend holds the slot.
        crate::harness::wait::until(
            "the changed database's feed restarted",
            Duration::from_secs(30),
            Duration::from_millis(50),
            || match backend_of(&pg, "weft_two") {
                holder if !holder.is_empty() && holder != two_backend => Ok(()),
                holder => Err(holder),
            },
            || weft.log_text(),
        );
        pg.psql_in(
            "other",
            "INSERT INTO items SELECT g, g FROM generate_series(6, 10) g",
        );
        assert_eq!(received_ids(&weft, "second", 5), vec![6, 7, 8, 9, 10]);

        let (status, refused) = send(
            &weft,
            Method::PUT,
            "/api/postgres_databases/two",
            Some(json!({
                "name": "two", "hostname": "127.0.0.1", "port": 9, "database": "other", "username": "postgres",
                "slot": {"name": "weft_two"}, "publication": {"name": "weft_two"},
            })),
        );
        assert_eq!(status, 400, "an unreachable database is refused: {refused}");
        assert!(
            refused.to_string().contains("nothing was applied"),
            "{refused}"
        );
        weft.wait_until("the writer", Duration::from_secs(120), || {
            let at = written.load(Ordering::SeqCst);
            (at >= ROWS).then_some(()).ok_or(at)
        });
    });

    assert_eq!(
        received_ids(&weft, "steady", ROWS as usize),
        (1..=ROWS).collect::<Vec<_>>(),
        "the other database's sink got every row once, in order"
    );
    assert_eq!(
        backend_of(&pg, SLOT),
        backend,
        "shop's replication connection was never restarted"
    );
    // A new WAL segment: `second`'s cursor ends far past where a new
    // cluster's positions start.
    pg.psql("SELECT pg_switch_wal()");
    pg.psql_in("other", "INSERT INTO items VALUES (11, 11)");
    assert_eq!(
        received_ids(&weft, "second", 1),
        vec![11],
        "the refused change left the running feed alone"
    );

    // Moved to a database of another cluster, whose feed starts for it,
    // the sink starts afresh there: the old cluster's cursor skips nothing.
    let pg2 = PgCluster::start();
    pg2.psql("CREATE TABLE items (id int PRIMARY KEY, v int)");
    let mut third = second_database(&pg2, 15000);
    third["name"] = json!("three");
    third["database"] = json!("postgres");
    third["slot"] = json!({"name": "weft_three", "create_if_not_exists": true});
    third["publication"] = json!({"name": "weft_three", "create_if_not_exists": true});
    let (status, body) = send(&weft, Method::POST, "/api/postgres_databases", Some(third));
    assert_eq!(status, 201, "{body}");
    let (status, moved) = send(
        &weft,
        Method::PUT,
        "/api/sinks/second",
        Some(second_sink("three")),
    );
    assert_eq!(status, 200, "{moved}");
    assert_eq!(moved["apply"]["restarted"], false, "{moved}");
    assert_eq!(moved["apply"]["databases"]["started"], json!(["three"]));
    assert_eq!(moved["apply"]["sinks"]["updated"], json!(["second"]));
    pg2.wait_for_active_slot("weft_three");
    pg2.psql("INSERT INTO items SELECT g, g FROM generate_series(1, 3) g");
    assert_eq!(received_ids(&weft, "second", 3), vec![1, 2, 3]);

    // Its last sink moved away, two's feed kept streaming; the database
    // gone, the feed stops and leaves nothing in the health report.
    assert!(
        weft.get_json("/api/health")
            .to_string()
            .contains("weft_two")
    );
    let (status, removed) = send(&weft, Method::DELETE, "/api/postgres_databases/two", None);
    assert_eq!(status, 200, "{removed}");
    assert_eq!(
        removed["apply"]["databases"],
        json!({"stopped": ["two"], "started": []})
    );
    let health = weft.get_json("/api/health").to_string();
    assert!(!health.contains("weft_two"), "{health}");
    weft.wait_until("the slot's release", Duration::from_secs(30), || {
        let holder = backend_of(&pg, "weft_two");
        holder.is_empty().then_some(()).ok_or(holder)
    });
    assert_eq!(backend_of(&pg, SLOT), backend);
    assert_eq!(weft.terminate(), Some(0));
}
