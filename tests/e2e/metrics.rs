//! `/metrics` during a real workload: Sequin's delivery counters move with
//! what happens to the messages, so that once a sink is drained, what it
//! delivered plus what it dead-lettered equals what it ingested.

use std::time::Duration;

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
    weft.wait_until(
        "500 messages ingested",
        Duration::from_secs(30),
        || match counter(&weft, "sequin_messages_ingested_count", &sink) {
            ingested if ingested >= 500.0 => Ok(()),
            ingested => Err(ingested),
        },
    );
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

#[test]
fn the_metrics_listener_has_its_own_port_and_optional_basic_auth() {
    use base64::Engine as _;
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}sinks:\n  - name: items\n    database: shop\n    source: {{ include_tables: [public.items] }}\n    destination: {{ type: sequin_stream }}\n",
        pg.databases_yaml(SLOT)
    );
    let weft = WeftProcess::start_with_env(
        dir.path(),
        &config,
        &[
            ("WEFT_METRICS_USERNAME", "prom"),
            ("WEFT_METRICS_PASSWORD", "s3cret"),
        ],
    );
    pg.wait_for_active_slot(SLOT);
    pg.psql("INSERT INTO items VALUES (1, 1)");
    let client = crate::harness::weft::http();
    let refused = client.get(weft.metrics_url("/metrics")).send().unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    assert!(refused.headers().contains_key("www-authenticate"));
    let wrong = client
        .get(weft.metrics_url("/metrics"))
        .basic_auth("prom", Some("nope"))
        .send()
        .unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    weft.wait_until("the change counted", Duration::from_secs(30), || {
        let scraped = client
            .get(weft.metrics_url("/metrics"))
            .header(
                "authorization",
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode("prom:s3cret")
                ),
            )
            .send()
            .unwrap();
        assert_eq!(scraped.status().as_u16(), 200);
        let text = scraped.text().unwrap();
        if text.contains("sequin_messages_ingested_count{sink=\"items\"} 1") {
            Ok(())
        } else {
            Err(text)
        }
    });
    // The password never reaches the log.
    assert!(!weft.log_text().contains("s3cret"));
}

#[test]
fn half_the_metrics_credentials_or_a_bad_address_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("weft.yml");
    std::fs::write(&config, "databases: []\nsinks: []\n").unwrap();
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_weft"))
            .args(["run", "--listen", "127.0.0.1:0", "--config"])
            .arg(&config)
            .args(args)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(
        &["--metrics-listen", "127.0.0.1:0"],
        &[("WEFT_METRICS_USERNAME", "prom")],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("needs both"), "{stderr}");
    let (code, stderr) = run(&["--metrics-listen", "everywhere"], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("or `off`"), "{stderr}");
}

#[test]
fn readiness_waits_for_replication_and_reports_a_lost_connection() {
    let mut pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}sinks:\n  - name: items\n    database: shop\n    source: {{ include_tables: [public.items] }}\n    destination: {{ type: sequin_stream }}\n",
        pg.databases_yaml(SLOT)
    );
    let weft = WeftProcess::start(dir.path(), &config);
    let ready = || {
        let response = crate::harness::weft::http()
            .get(weft.url("/health/ready"))
            .send()
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json::<serde_json::Value>().unwrap())
    };
    let wait_for = |want: u16| {
        weft.wait_until(
            &format!("readiness {want}"),
            Duration::from_secs(60),
            || match ready() {
                (status, body) if status == want => Ok(body),
                other => Err(other),
            },
        )
    };
    assert_eq!(wait_for(200)["status"], "ready");

    // Postgres goes away: still alive, no longer ready, and the slot's
    // health says why; back when replication resumes.
    pg.stop();
    let body = wait_for(503);
    assert_eq!(body["waiting_for"][0]["slot"], SLOT, "{body}");
    assert!(
        body["waiting_for"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("replication interrupted"),
        "{body}"
    );
    assert_eq!(weft.get_json("/health")["status"], "ok", "still alive");
    pg.start_again();
    wait_for(200);
    pg.psql("INSERT INTO items VALUES (1, 1)");
    assert_eq!(weft.drain("items", 1, Duration::from_secs(30)).len(), 1);
}

/// Waits until `metric` with `labels` reads `want`.
fn wait_for_metric(weft: &WeftProcess, name: &str, labels: &[(&str, &str)], want: f64) {
    weft.wait_until(&format!("{name} = {want}"), Duration::from_secs(30), || {
        let got = counter(weft, name, labels);
        if got == want { Ok(()) } else { Err(got) }
    });
}

#[test]
fn latency_queue_plugin_and_api_metrics_follow_the_messages() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}functions:\n  - name: even\n    type: filter\n    file: {}\nsinks:\n  - name: items\n    database: shop\n    source: {{ include_tables: [public.items] }}\n    filter: even\n    destination: {{ type: sequin_stream, ack_wait_ms: 60000 }}\n",
        pg.databases_yaml(SLOT),
        crate::harness::guests::wasm("weft_even_id_filter").display()
    );
    let weft = WeftProcess::start(dir.path(), &config);
    pg.wait_for_active_slot(SLOT);
    pg.psql("INSERT INTO items SELECT g, g FROM generate_series(1, 100) g");
    let sink = [("sink", "items")];
    wait_for_metric(&weft, "sequin_messages_ingested_count", &sink, 50.0);

    // Every stored message has its ingestion latency; all 50 wait.
    assert_eq!(
        counter(&weft, "sequin_ingestion_latency_us_count", &sink),
        50.0
    );
    assert_eq!(counter(&weft, "sequin_messages_buffered", &sink), 50.0);
    assert_eq!(counter(&weft, "sequin_messages_in_delivery", &sink), 0.0);

    // 10 handed out and not acked are in delivery; acking them delivers them.
    let received = weft.receive("items", 10, 1000);
    assert_eq!(received.len(), 10);
    assert_eq!(counter(&weft, "sequin_messages_buffered", &sink), 40.0);
    assert_eq!(counter(&weft, "sequin_messages_in_delivery", &sink), 10.0);
    assert_eq!(
        counter(&weft, "sequin_delivery_latency_us_count", &sink),
        0.0
    );
    let ack_ids: Vec<&str> = received
        .iter()
        .map(|m| m["ack_id"].as_str().unwrap())
        .collect();
    assert_eq!(weft.settle("items", "ack", &ack_ids).0, 200);
    assert_eq!(
        counter(&weft, "sequin_delivery_latency_us_count", &sink),
        10.0
    );
    assert_eq!(counter(&weft, "sequin_messages_in_delivery", &sink), 0.0);
    assert_eq!(counter(&weft, "sequin_messages_buffered", &sink), 40.0);

    // The filter saw every change; its one instance is alive and used memory.
    let plugin = [("sink", "items"), ("function", "even"), ("kind", "filter")];
    assert_eq!(counter(&weft, "weft_plugin_messages_total", &plugin), 100.0);
    let calls = counter(&weft, "weft_plugin_calls_total", &plugin);
    assert!(calls >= 1.0, "calls: {calls}");
    assert_eq!(
        counter(&weft, "weft_plugin_call_seconds_count", &plugin),
        calls
    );
    assert_eq!(counter(&weft, "weft_plugin_instances", &plugin), 1.0);
    assert!(counter(&weft, "weft_plugin_memory_high_water_bytes", &plugin) > 0.0);
    let trapped = [("sink", "items"), ("function", "even"), ("reason", "trap")];
    assert_eq!(weft.metric("weft_plugin_traps_total", &trapped), Some(0.0));

    // API requests by route pattern (never the raw path) and status.
    crate::harness::weft::http()
        .get(weft.url("/api/no/such/route"))
        .send()
        .unwrap();
    let receive = [
        ("route", "/api/http_pull_consumers/{name}/receive"),
        ("method", "GET"),
        ("status", "200"),
    ];
    assert!(counter(&weft, "weft_api_requests_total", &receive) >= 1.0);
    assert!(counter(&weft, "weft_api_request_seconds_count", &receive) >= 1.0);
    assert_eq!(
        counter(
            &weft,
            "weft_api_requests_total",
            &[("route", "unmatched"), ("status", "404")]
        ),
        1.0
    );
}

#[test]
fn a_stalled_stream_raises_heartbeat_and_slot_lag_warnings_until_it_drains() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, pad text NOT NULL)");
    let dir = tempfile::tempdir().unwrap();
    // A backlog of 10 that pauses the stream when full, heartbeats every
    // 300 ms, and a 1 MiB lag bound.
    let databases = pg
        .databases_yaml(SLOT)
        .replace(
            "create_if_not_exists: true }\n    publication",
            "create_if_not_exists: true, lag_warning_mb: 1 }\n    publication",
        )
        .replace(
            "    username: postgres\n",
            "    username: postgres\n    heartbeat_interval_ms: 300\n",
        );
    let config = format!(
        "{databases}sinks:\n  - name: items\n    database: shop\n    source: {{ include_tables: [public.items] }}\n    max_backlog_messages: 10\n    destination: {{ type: sequin_stream }}\n"
    );
    let weft = WeftProcess::start(dir.path(), &config);
    pg.wait_for_active_slot(SLOT);
    let checks = |weft: &WeftProcess| -> Vec<String> {
        let health = weft.health();
        health["entities"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "slot" && e["name"] == SLOT)
            .flat_map(|e| e["checks"].as_array().unwrap().clone())
            .map(|c| format!("{}: {}", c["id"].as_str().unwrap(), c["message"]))
            .collect()
    };
    let wait_for_checks = |weft: &WeftProcess, want: &dyn Fn(&[String]) -> bool| {
        weft.wait_until("slot checks", Duration::from_secs(60), || {
            let now = checks(weft);
            if want(&now) { Ok(now) } else { Err(now) }
        })
    };
    // Flowing: heartbeats come back, no warning.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(checks(&weft), Vec::<String>::new());

    // Nobody receives: the backlog fills, the stream pauses, heartbeats stop
    // coming back and the slot retains more than 1 MiB.
    for batch in 0..40 {
        pg.psql(&format!(
            "INSERT INTO items SELECT g, repeat('x', 200) FROM generate_series({}, {}) g",
            batch * 500 + 1,
            batch * 500 + 500
        ));
    }
    let raised = wait_for_checks(&weft, &|c| {
        c.iter().any(|c| c.starts_with("heartbeat:"))
            && c.iter().any(|c| c.starts_with("slot_lag:"))
    });
    assert!(
        raised.iter().any(|c| c.contains("stream is stalled")),
        "{raised:?}"
    );
    assert!(
        raised.iter().any(|c| c.contains("lag_warning_mb")),
        "{raised:?}"
    );
    assert!(counter(&weft, "sequin_replication_slot_size", &[("slot", SLOT)]) > (1 << 20) as f64);

    // Draining the sink lets the stream go: both warnings clear.
    weft.drain("items", 20_000, Duration::from_secs(120));
    wait_for_checks(&weft, &|c| c.is_empty());
}
