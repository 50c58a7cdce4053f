//! The webhook sink through the real binary: a receiver in this test that
//! fails, hangs and recovers; per-row order; dead letters and their replay;
//! a stuck group that neither stops other rows nor holds the slot back.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::guests;
use crate::harness::postgres::PgCluster;
use crate::harness::webhook_receiver::{Mode, Receiver, Rows, SECRET, TOKEN};
use crate::harness::weft::{WeftProcess, http};

/// A config with the receiver as the HTTP endpoint `receiver` and `sinks`.
pub(crate) fn config(pg: &PgCluster, receiver: &Receiver, sinks: &str) -> String {
    format!(
        r#"
{databases}http_endpoints:
  - name: receiver
    url: http://{addr}
    headers: {{ X-Test: plain }}
    encrypted_headers: {{ Authorization: "{TOKEN}" }}
    signing_secret: {SECRET}
sinks:
{sinks}
"#,
        databases = pg.databases_yaml("weft_hook"),
        addr = receiver.addr,
    )
}

/// Row ids 1..=rows get an insert (v = 0) and `updates` updates (v = 1..),
/// each statement its own transaction.
fn write_rows(pg: &PgCluster, rows: i64, updates: i64) {
    pg.psql(&format!(
        "INSERT INTO items SELECT g, 0 FROM generate_series(1, {rows}) g"
    ));
    for v in 1..=updates {
        pg.psql(&format!("UPDATE items SET v = {v}"));
    }
}

/// Each row's messages in arrival order are its changes in commit order.
fn assert_in_order(rows: &Rows, ids: impl Iterator<Item = i64>, updates: i64, log: &str) {
    for id in ids {
        let got = rows.get(&id).cloned().unwrap_or_default();
        let vs: Vec<i64> = got.iter().map(|(_, v, _)| *v).collect();
        assert_eq!(
            vs,
            (0..=updates).collect::<Vec<_>>(),
            "row {id}: {got:?}\nlog:\n{log}"
        );
        assert_eq!(got[0].0, "insert");
        assert!(
            got.windows(2).all(|w| w[0].2 < w[1].2),
            "row {id} out of commit order: {got:?}"
        );
    }
}

fn api_json(response: reqwest::blocking::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

#[test]
fn webhook_delivers_everything_in_order_through_failures_and_timeouts() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    let receiver = Receiver::start(Mode::Fail);
    let sinks = r#"
  - name: hook
    database: shop
    source: { include_tables: [public.items] }
    destination:
      type: webhook
      http_endpoint: receiver
      http_endpoint_path: /batch
      batch: true
      batch_size: 10
      max_in_flight: 4
      gzip: true
      request_timeout_ms: 500
      retry_backoff_base_ms: 50
      retry_backoff_max_ms: 400
"#;
    let (_dir, mut weft) =
        WeftProcess::start_replicating(&pg, "weft_hook", &config(&pg, &receiver, sinks));

    const ROWS: i64 = 30;
    const UPDATES: i64 = 3;
    write_rows(&pg, ROWS, UPDATES);
    receiver.wait_until("5 failed requests", Duration::from_secs(30), |s| {
        s.failed >= 5
    });
    receiver.set_mode(Mode::Hang);
    receiver.wait_until("3 hung requests", Duration::from_secs(30), |s| s.hung >= 3);
    receiver.set_mode(Mode::Accept);

    let total = (ROWS * (UPDATES + 1)) as usize;
    receiver.wait_until("every message", Duration::from_secs(60), |s| {
        let keys: HashSet<&str> = s
            .accepted
            .iter()
            .map(|(_, m)| m["metadata"]["idempotency_key"].as_str().unwrap())
            .collect();
        keys.len() >= total
    });
    let log = weft.log_text();
    assert_eq!(
        receiver.with(|s| s.bad_requests.clone()),
        Vec::<String>::new()
    );
    assert_in_order(&receiver.rows("/batch"), 1..=ROWS, UPDATES, &log);
    assert!(
        !log.contains("s3cret-token"),
        "a secret header value reached the log"
    );
    assert!(
        log.contains("retrying later") || log.contains("HTTP 500"),
        "log:\n{log}"
    );

    // Delivered messages are gone from the store: nothing more arrives.
    let before = receiver.with(|s| s.accepted.len());
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(receiver.with(|s| s.accepted.len()), before);
    assert_eq!(weft.terminate(), Some(0), "SIGTERM shuts weft down cleanly");
}

#[test]
fn a_stuck_group_holds_back_only_its_row_and_dead_letters_replay() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    let receiver = Receiver::start(Mode::Accept);
    receiver.set_poisoned(Some(1));
    // Two sinks on the same table: `stuck` retries forever, `dlq` gives up
    // after two retries. Single-message requests.
    let sinks = r#"
  - name: stuck
    database: shop
    source: { include_tables: [public.items] }
    destination:
      type: webhook
      http_endpoint: receiver
      http_endpoint_path: /stuck
      batch: false
      max_in_flight: 4
      request_timeout_ms: 1000
      retry_backoff_base_ms: 50
      retry_backoff_max_ms: 200
  - name: dlq
    database: shop
    source: { include_tables: [public.items] }
    max_retry_count: 2
    destination:
      type: webhook
      http_endpoint: receiver
      http_endpoint_path: /dlq
      batch: false
      request_timeout_ms: 1000
      retry_backoff_base_ms: 50
      retry_backoff_max_ms: 200
"#;
    let (_dir, mut weft) =
        WeftProcess::start_replicating(&pg, "weft_hook", &config(&pg, &receiver, sinks));

    const ROWS: i64 = 10;
    const UPDATES: i64 = 2;
    write_rows(&pg, ROWS, UPDATES);

    // Every other row flows on both sinks while row 1 is refused.
    let others = ((ROWS - 1) * (UPDATES + 1)) as usize;
    for path in ["/stuck", "/dlq"] {
        receiver.wait_until(
            &format!("rows 2.. on {path}"),
            Duration::from_secs(60),
            |s| s.accepted.iter().filter(|(p, _)| p == path).count() >= others,
        );
    }
    let log = weft.log_text();
    assert_in_order(&receiver.rows("/stuck"), 2..=ROWS, UPDATES, &log);
    assert_in_order(&receiver.rows("/dlq"), 2..=ROWS, UPDATES, &log);
    assert!(!receiver.rows("/stuck").contains_key(&1));

    // The slot advances past row 1's changes although they are not
    // delivered: they share their transactions (and commit LSNs) with the
    // other rows' changes.
    let wait_slot_past = |lsn: u64| {
        pg.wait_for_slot_to_confirm("weft_hook", lsn, Duration::from_secs(30), || {
            format!(
                "the slot did not advance while row 1 was stuck; log:\n{}",
                weft.log_text()
            )
        })
    };
    let last_commit = |path: &str| {
        receiver
            .rows(path)
            .values()
            .flatten()
            .map(|(_, _, (lsn, _))| *lsn)
            .max()
            .unwrap()
    };
    wait_slot_past(last_commit("/stuck"));
    // And keeps advancing with new writes while row 1 is still stuck.
    pg.psql("INSERT INTO items VALUES (100, 0)");
    receiver.wait_until("row 100 on /stuck", Duration::from_secs(30), |s| {
        s.accepted
            .iter()
            .any(|(p, m)| p == "/stuck" && m["record"]["id"] == 100)
    });
    assert!(!receiver.rows("/stuck").contains_key(&1));
    wait_slot_past(last_commit("/stuck"));

    // dlq: row 1's three changes end as dead letters, 3 attempts each.
    let list = || {
        api_json(
            http()
                .get(weft.url("/api/sinks/dlq/dead_letters"))
                .send()
                .unwrap(),
        )
    };
    let letters = weft.wait_for_dead_letters("dlq", 3, Duration::from_secs(30));
    let vs: Vec<i64> = letters
        .iter()
        .map(|l| l["message"]["record"]["v"].as_i64().unwrap())
        .collect();
    assert_eq!(vs, vec![0, 1, 2], "{letters:?}");
    for letter in &letters {
        assert_eq!(letter["attempts"], 3, "{letter}");
        assert!(
            letter["group_id"].as_str().unwrap().ends_with(":1"),
            "{letter}"
        );
        assert!(
            letter["last_error"].as_str().unwrap().contains("500"),
            "{letter}"
        );
        assert!(
            letter["first_attempt_at"].as_str().unwrap()
                <= letter["last_attempt_at"].as_str().unwrap()
        );
    }
    let first_id = letters[0]["id"].as_i64().unwrap();
    let (status, one) = api_json(
        http()
            .get(weft.url(&format!("/api/sinks/dlq/dead_letters/{first_id}")))
            .send()
            .unwrap(),
    );
    assert_eq!((status, &one["id"]), (200, &json!(first_id)));
    let (status, body) = api_json(
        http()
            .get(weft.url("/api/sinks/nope/dead_letters"))
            .send()
            .unwrap(),
    );
    assert_eq!(status, 404);
    assert!(body["summary"].as_str().unwrap().contains("nope"), "{body}");

    // The receiver recovers; replay the first dead letter, then the rest.
    receiver.set_poisoned(None);
    let (status, body) = api_json(
        http()
            .post(weft.url(&format!("/api/sinks/dlq/dead_letters/{first_id}/replay")))
            .send()
            .unwrap(),
    );
    assert_eq!(status, 200, "{body}");
    receiver.wait_until(
        "the replayed insert of row 1",
        Duration::from_secs(30),
        |s| {
            s.accepted
                .iter()
                .any(|(p, m)| p == "/dlq" && m["record"]["id"] == 1)
        },
    );
    let (status, body) = api_json(
        http()
            .post(weft.url("/api/sinks/dlq/dead_letters/replay"))
            .send()
            .unwrap(),
    );
    assert_eq!(
        (status, body["replayed"].as_array().map(Vec::len)),
        (200, Some(2)),
        "{body}"
    );
    // The stuck sink's row 1 goes through now too, in order.
    receiver.wait_until("row 1 everywhere", Duration::from_secs(30), |s| {
        ["/stuck", "/dlq"].iter().all(|path| {
            s.accepted
                .iter()
                .filter(|(p, m)| p == path && m["record"]["id"] == 1)
                .count()
                >= (UPDATES + 1) as usize
        })
    });
    let log = weft.log_text();
    assert_in_order(&receiver.rows("/stuck"), 1..=ROWS, UPDATES, &log);
    assert_in_order(&receiver.rows("/dlq"), 1..=ROWS, UPDATES, &log);
    let (_, body) = list();
    assert_eq!(body["count"], 0, "{body}");
    let (status, _) = api_json(
        http()
            .delete(weft.url(&format!("/api/sinks/dlq/dead_letters/{first_id}")))
            .send()
            .unwrap(),
    );
    assert_eq!(status, 404, "a replayed dead letter is gone");
    assert_eq!(
        receiver.with(|s| s.bad_requests.clone()),
        Vec::<String>::new()
    );
    assert_eq!(weft.terminate(), Some(0));
}

#[test]
fn a_routing_function_sets_method_path_and_headers_per_message() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    let receiver = Receiver::start(Mode::Accept);
    let sinks = format!(
        r#"
  - name: hook
    database: shop
    source: {{ include_tables: [public.items] }}
    routing: paths
    destination:
      type: webhook
      http_endpoint: receiver
      http_endpoint_path: /default
      batch: true
      batch_size: 10
functions:
  - name: paths
    type: routing
    file: {routing}
    config: {{ keys: "method,endpoint_path,headers" }}
"#,
        routing = guests::wasm("weft_table_routing").display()
    );
    let (_dir, weft) =
        WeftProcess::start_replicating(&pg, "weft_hook", &config(&pg, &receiver, &sinks));
    write_rows(&pg, 3, 1);
    receiver.wait_until("6 messages", Duration::from_secs(30), |s| {
        s.accepted.len() >= 6
    });
    let log = weft.log_text();
    let requests = receiver.with(|s| s.requests.clone());
    assert_eq!(
        receiver.with(|s| s.bad_requests.clone()),
        Vec::<String>::new()
    );
    // Each row has its own path, so even in batch mode each request holds
    // messages of one row only; nothing went to the sink's own path.
    for (method, path, table, messages) in &requests {
        assert_eq!(method, "PUT", "{requests:?}\n{log}");
        assert_eq!(table, "public.items", "{requests:?}");
        assert!(
            ["/items/1", "/items/2", "/items/3"].contains(&path.as_str()),
            "{requests:?}"
        );
        assert_eq!(
            *messages, 1,
            "one message per group in flight: {requests:?}"
        );
    }
    let rows = receiver.rows("/items/2");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[&2].iter().map(|r| r.1).collect::<Vec<_>>(), vec![0, 1]);
}

#[test]
fn sigterm_lets_a_delivery_in_flight_finish_and_records_it() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    let receiver = Receiver::start(Mode::SlowAccept);
    let sinks = r#"
  - name: hook
    database: shop
    destination:
      type: webhook
      http_endpoint: receiver
      http_endpoint_path: /slow
      request_timeout_ms: 10000
"#;
    let (_dir, mut weft) =
        WeftProcess::start_replicating(&pg, "weft_hook", &config(&pg, &receiver, sinks));
    pg.psql("INSERT INTO items VALUES (1, 0)");
    receiver.wait_until("the request to start", Duration::from_secs(30), |s| {
        s.started >= 1
    });
    // The receiver answers after a second; weft waits for it before exiting.
    assert_eq!(weft.terminate(), Some(0), "log:\n{}", weft.log_text());
    assert_eq!(receiver.with(|s| s.accepted.len()), 1);

    // Its outcome was recorded: a restarted weft does not send it again.
    receiver.set_mode(Mode::Accept);
    weft.restart();
    pg.psql("INSERT INTO items VALUES (2, 0)");
    receiver.wait_until("row 2", Duration::from_secs(30), |s| {
        s.accepted.iter().any(|(_, m)| m["record"]["id"] == 2)
    });
    std::thread::sleep(Duration::from_millis(500));
    let ids: Vec<i64> = receiver.with(|s| {
        s.accepted
            .iter()
            .map(|(_, m)| m["record"]["id"].as_i64().unwrap())
            .collect()
    });
    assert_eq!(ids, vec![1, 2], "log:\n{}", weft.log_text());
    assert_eq!(weft.terminate(), Some(0));
}

/// Messages per second from one committed transaction to the receiver, in
/// batches of 100 with 4 requests in flight. Run it explicitly, ideally with
/// `--release`: `cargo test --test e2e webhook_delivery_rate -- --ignored --nocapture`.
#[test]
#[ignore = "benchmark; run explicitly"]
fn webhook_delivery_rate() {
    const ROWS: usize = 20_000;
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    let receiver = Receiver::start(Mode::Accept);
    let sinks = r#"
  - name: hook
    database: shop
    destination:
      type: webhook
      http_endpoint: receiver
      http_endpoint_path: /rate
      batch_size: 100
      max_in_flight: 4
"#;
    let (_dir, mut weft) =
        WeftProcess::start_replicating(&pg, "weft_hook", &config(&pg, &receiver, sinks));
    let started = Instant::now();
    pg.psql(&format!(
        "INSERT INTO items SELECT g, 0 FROM generate_series(1, {ROWS}) g"
    ));
    receiver.wait_until("every message", Duration::from_secs(600), |s| {
        s.accepted.len() >= ROWS
    });
    let elapsed = started.elapsed();
    println!(
        "webhook: {ROWS} messages in {elapsed:?} = {:.0} messages/s (commit to receiver, batch 100, 4 in flight)",
        ROWS as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(
        receiver.with(|s| s.accepted.len()),
        ROWS,
        "no duplicates on a healthy receiver"
    );
    assert_eq!(weft.terminate(), Some(0));
}

/// The checks of sink `name` at `/api/health`.
fn sink_checks(weft: &WeftProcess, name: &str) -> Vec<Value> {
    weft.health_entity("sink", name)
        .map(|e| e["checks"].as_array().unwrap().clone())
        .unwrap_or_default()
}

#[test]
fn a_failing_receiver_shows_in_health_and_slot_lag_grows_while_the_backlog_is_full() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    let receiver = Receiver::start(Mode::Fail);
    let sinks = r#"
  - name: hook
    database: shop
    source: { include_tables: [public.items] }
    max_backlog_messages: 20
    destination:
      type: webhook
      http_endpoint: receiver
      http_endpoint_path: /batch
      batch: true
      batch_size: 10
      retry_backoff_base_ms: 50
      retry_backoff_max_ms: 200
"#;
    let (_dir, weft) =
        WeftProcess::start_replicating(&pg, "weft_hook", &config(&pg, &receiver, sinks));
    pg.psql("INSERT INTO items SELECT g, 0 FROM generate_series(1, 50) g");

    // The sink reports the destination's error.
    let check = weft.wait_until("a delivery check", Duration::from_secs(30), || {
        sink_checks(&weft, "hook")
            .into_iter()
            .find(|c| c["id"] == "delivery")
            .ok_or("none")
    });
    assert_eq!(check["status"], "error");
    assert!(
        check["message"].as_str().unwrap().contains("500"),
        "{check}"
    );

    // The backlog is full, so the slot stops confirming: its lag grows with
    // every write (the gauge is read every 5 s).
    let lag = || {
        weft.metric(
            "weft_replication_slot_confirmed_lag_bytes",
            &[("database", "shop"), ("slot", "weft_hook")],
        )
        .unwrap_or(0.0)
    };
    let wait_for_lag_above = |floor: f64| {
        weft.wait_until_every(
            &format!("slot lag above {floor}"),
            Duration::from_secs(30),
            Duration::from_millis(500),
            || match lag() {
                now if now > floor => Ok(now),
                stuck => Err(stuck),
            },
        )
    };
    pg.psql("INSERT INTO items SELECT g, 0 FROM generate_series(51, 100) g");
    let first = wait_for_lag_above(0.0);
    pg.psql("INSERT INTO items SELECT g, 0 FROM generate_series(101, 150) g");
    wait_for_lag_above(first);

    // The receiver recovers: everything arrives and the check clears.
    receiver.set_mode(Mode::Accept);
    receiver.wait_until("every row", Duration::from_secs(60), |s| {
        let ids: HashSet<i64> = s
            .accepted
            .iter()
            .map(|(_, m)| m["record"]["id"].as_i64().unwrap())
            .collect();
        ids.len() >= 150
    });
    weft.wait_until(
        "the delivery check cleared",
        Duration::from_secs(30),
        || {
            let checks = sink_checks(&weft, "hook");
            if checks.iter().any(|c| c["id"] == "delivery") {
                Err(checks)
            } else {
                Ok(())
            }
        },
    );
}

#[test]
fn an_account_denying_internal_http_sends_nothing_to_loopback_and_loses_nothing() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    let receiver = Receiver::start(Mode::Accept);
    // The endpoint is a name (`localhost`), as a tenant's would be: the
    // config cannot tell where it points; the resolver at each connection can.
    let yaml = |deny: bool| {
        let plain = config(&pg, &receiver, "").replace(
            &format!("url: http://{}", receiver.addr),
            &format!(
                "url: http://localhost:{}\n    account: acme",
                receiver.addr.port()
            ),
        );
        format!(
            "accounts:\n  - {{ name: acme, deny_internal_http: {deny} }}\n{}",
            plain.replace("  - name: shop\n", "  - name: shop\n    account: acme\n")
        ) + r#"  - name: hook
    account: acme
    database: shop
    source: { include_tables: [public.items] }
    destination:
      type: webhook
      http_endpoint: receiver
      retry_backoff_base_ms: 50
      retry_backoff_max_ms: 200
"#
    };
    let (_dir, weft) = WeftProcess::start_replicating(&pg, "weft_hook", &yaml(true));
    write_rows(&pg, 5, 0);

    let refused = weft.wait_for_failed_check("sink", "hook", "delivery");
    assert!(
        refused.contains("`localhost` (resolves only to")
            && refused.contains("is an internal address")
            && refused.contains("account \"acme\" sets `deny_internal_http: true`"),
        "{refused}"
    );
    assert_eq!(
        receiver.with(|s| s.started),
        0,
        "no request reached the loopback receiver"
    );

    // Lifting the setting through `config apply` reconnects the sink
    // without a restart, and the held messages go out, in order.
    let (status, body) = weft.apply_config(&yaml(false));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["restarted"], false, "{body}");
    receiver.wait_until("every row", Duration::from_secs(60), |s| {
        s.accepted.len() >= 5
    });
    assert_in_order(&receiver.rows("/"), 1..=5, 0, &weft.log_text());
    assert!(receiver.with(|s| s.bad_requests.is_empty()));
}
