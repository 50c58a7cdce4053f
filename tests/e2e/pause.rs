//! Pausing sinks through the API: a paused pull sink receives nothing and a
//! paused webhook sink sends nothing while their messages keep being stored
//! (the slot advances); the pause survives a SIGKILL; on resume every
//! message arrives once (the pull sink's in commit order). A push sink's
//! worker that fails restarts alone while the other sinks flow.

use std::time::Duration;

use serde_json::Value;

use crate::harness::postgres::PgCluster;
use crate::harness::webhook_receiver::{Mode, Receiver, SECRET, TOKEN};
use crate::harness::weft::{WeftProcess, http};

fn config(pg: &PgCluster, receiver: &Receiver) -> String {
    format!(
        "{databases}http_endpoints:\n  - name: receiver\n    url: http://{addr}\n    headers: {{ X-Test: plain }}\n    encrypted_headers: {{ Authorization: \"{TOKEN}\" }}\n    signing_secret: {SECRET}\n\
         sinks:\n  - name: pull\n    database: shop\n    destination: {{ type: sequin_stream }}\n\
         \x20 - name: hook\n    database: shop\n    destination: {{ type: webhook, http_endpoint: receiver, retry_backoff_base_ms: 50 }}\n",
        databases = pg.databases_yaml("weft_pause"),
        addr = receiver.addr,
    )
}

fn set(weft: &WeftProcess, sink: &str, verb: &str) -> Value {
    let response = http()
        .post(weft.url(&format!("/api/sinks/{sink}/{verb}")))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    response.json().unwrap()
}

fn statuses(weft: &WeftProcess) -> Vec<String> {
    weft.get_json("/api/sinks")["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["status"].as_str().unwrap().to_string())
        .collect()
}

fn hook_ids(receiver: &Receiver) -> Vec<i64> {
    receiver.with(|s| {
        s.accepted
            .iter()
            .map(|(_, m)| m["record"]["id"].as_i64().unwrap())
            .collect()
    })
}

/// A cluster with the `items` table, a receiver and weft streaming to
/// both sinks (the pull sink and the `hook` webhook).
fn start() -> (PgCluster, Receiver, tempfile::TempDir, WeftProcess) {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v text)");
    let receiver = Receiver::start(Mode::Accept);
    let (dir, weft) = WeftProcess::start_replicating(&pg, "weft_pause", &config(&pg, &receiver));
    (pg, receiver, dir, weft)
}

#[test]
fn a_paused_sink_delivers_nothing_stays_paused_across_a_kill_and_resumes_in_order() {
    let (pg, receiver, _dir, mut weft) = start();

    assert_eq!(set(&weft, "pull", "pause")["status"], "paused");
    assert_eq!(set(&weft, "hook", "pause")["status"], "paused");
    assert_eq!(
        set(&weft, "hook", "pause")["status"],
        "paused",
        "idempotent"
    );
    for id in 1..=5 {
        pg.psql(&format!("INSERT INTO items VALUES ({id}, 'v')"));
    }
    // Stored (and confirmed to Postgres) while nothing is delivered.
    pg.wait_for_slot_to_confirm_all("weft_pause");
    assert!(weft.receive("pull", 10, 1500).is_empty());
    assert_eq!(hook_ids(&receiver), Vec::<i64>::new());
    assert_eq!(statuses(&weft), ["paused", "paused"]);

    weft.kill();
    weft.restart();
    pg.wait_for_active_slot("weft_pause");
    assert_eq!(statuses(&weft), ["paused", "paused"]);
    assert!(weft.receive("pull", 10, 1000).is_empty());
    pg.psql("INSERT INTO items VALUES (6, 'v')");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(hook_ids(&receiver), Vec::<i64>::new());

    assert_eq!(set(&weft, "pull", "resume")["status"], "active");
    assert_eq!(set(&weft, "hook", "resume")["status"], "active");
    let pulled: Vec<i64> = weft
        .drain("pull", 6, Duration::from_secs(30))
        .iter()
        .map(|m| m["record"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(pulled, (1..=6).collect::<Vec<_>>());
    weft.wait_until("the webhook deliveries", Duration::from_secs(30), || {
        let ids = hook_ids(&receiver);
        if ids.len() >= 6 { Ok(ids) } else { Err(ids) }
    });
    // Each row once; rows are separate groups, delivered in parallel.
    let mut delivered = hook_ids(&receiver);
    delivered.sort_unstable();
    assert_eq!(delivered, (1..=6).collect::<Vec<_>>());
    assert_eq!(statuses(&weft), ["active", "active"]);
    let unknown = http()
        .post(weft.url("/api/sinks/nope/pause"))
        .send()
        .unwrap();
    assert_eq!(unknown.status().as_u16(), 404);
    assert_eq!(weft.terminate(), Some(0));
}

/// The `worker` check of the sink `sink` at `/api/health`, if it has one.
fn worker_check(weft: &WeftProcess, sink: &str) -> Option<Value> {
    weft.health_check("sink", sink, "worker")
}

#[test]
fn a_failed_delivery_worker_restarts_alone_while_the_other_sinks_flow() {
    let (pg, receiver, _dir, mut weft) = start();
    set(&weft, "hook", "pause");
    for id in 1..=3 {
        pg.psql(&format!("INSERT INTO items VALUES ({id}, 'v')"));
    }
    pg.wait_for_slot_to_confirm_all("weft_pause");

    // weft dies while the hook's messages are leased, and the store then
    // refuses the write that releases them (as a full or failing disk
    // would, for this one sink): the worker fails as it starts, which
    // used to end the whole process.
    weft.kill();
    weft.store_execute(
        "UPDATE pull_messages SET ack_id = 'lease-' || id, not_visible_until = 9999999999999 WHERE sink = 'hook'",
    );
    weft.store_execute(
        "CREATE TRIGGER refuse_release BEFORE UPDATE OF ack_id ON pull_messages
         WHEN old.sink = 'hook' BEGIN SELECT RAISE(ABORT, 'the disk refused the write'); END",
    );
    weft.restart();
    let message = weft.wait_for_failed_check("sink", "hook", "worker");
    assert!(
        message.contains("the disk refused the write") && message.contains("restarts in"),
        "{message}"
    );

    // The pull sink keeps flowing, and the database feed keeps storing.
    pg.psql("INSERT INTO items VALUES (4, 'v')");
    let pulled: Vec<i64> = weft
        .drain("pull", 4, Duration::from_secs(30))
        .iter()
        .map(|m| m["record"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(pulled, [1, 2, 3, 4]);
    set(&weft, "hook", "resume");
    assert!(hook_ids(&receiver).is_empty(), "{:?}", hook_ids(&receiver));

    // Once the store takes writes again, the next restart delivers all.
    weft.store_execute("DROP TRIGGER refuse_release");
    weft.wait_until("the webhook deliveries", Duration::from_secs(60), || {
        let ids = hook_ids(&receiver);
        if ids.len() >= 4 { Ok(ids) } else { Err(ids) }
    });
    let mut delivered = hook_ids(&receiver);
    delivered.sort_unstable();
    assert_eq!(delivered, [1, 2, 3, 4]);
    let restarted = worker_check(&weft, "hook").expect("the check says the worker restarted");
    assert_eq!(restarted["status"], "warning", "{restarted}");
}
