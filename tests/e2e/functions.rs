//! All function kinds through the real binary: enrichment (with the granted
//! read-only source query), filter and transform on a pull sink; routing is
//! refused on a pull sink at start. Also the source-query capability itself
//! against a real Postgres: read-only, bound parameters, statement timeout,
//! row cap; and an enrichment calling an allowed HTTP API on loopback.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::guests;
use crate::harness::postgres::PgCluster;
use crate::harness::weft::{WeftProcess, run_weft_with};

fn config(pg: &PgCluster, grants: &str, sink_extra: &str) -> String {
    format!(
        r#"
{databases}functions:
  - name: names
    type: enrichment
    file: {enrichment}
    {grants}
  - name: even
    type: filter
    file: {filter}
  - name: upcase
    type: transform
    file: {transform}
    config: {{ column: item }}
  - name: topics
    type: routing
    file: {routing}
    config: {{ keys: "topic" }}
sinks:
  - name: orders
    database: shop
    source: {{ include_tables: [public.orders] }}
    enrichment: names
    filter: even
    transform: upcase
    destination: {{ type: sequin_stream, ack_wait_ms: 5000 }}
{sink_extra}"#,
        databases = pg.databases_yaml("weft_fn"),
        enrichment = guests::wasm("weft_customer_enrichment").display(),
        filter = guests::wasm("weft_even_id_filter").display(),
        transform = guests::wasm("weft_upcase_transform").display(),
        routing = guests::wasm("weft_table_routing").display(),
    )
}

#[test]
fn enrichment_filter_and_transform_run_in_order_on_the_pull_sink() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE customers (id bigint PRIMARY KEY, name text)");
    pg.psql("INSERT INTO customers VALUES (10, 'Ada'), (20, 'Grace')");
    pg.psql("CREATE TABLE orders (id int PRIMARY KEY, customer_id bigint, item text)");
    let dir = tempfile::tempdir().unwrap();
    let weft = WeftProcess::start(
        dir.path(),
        &config(&pg, "grants: { source_query: true }", ""),
    );
    pg.wait_for_active_slot("weft_fn");

    pg.psql(
        "INSERT INTO orders VALUES (1, 10, 'pen'), (2, 10, 'ink'), (3, 20, 'cap'), \
         (4, 20, 'nib'), (5, 99, 'pad'), (6, 99, 'box')",
    );
    pg.psql("INSERT INTO orders VALUES (8, NULL, 'map')");

    let got = weft.drain("orders", 4, Duration::from_secs(60));
    // Odd ids are filtered out (the filter runs on the pull path too).
    let summary: Vec<(i64, String, Value)> = got
        .iter()
        .map(|m| {
            (
                m["record"]["id"].as_i64().unwrap(),
                m["record"]["item"].as_str().unwrap().to_string(),
                m["metadata"]
                    .get("enrichment")
                    .cloned()
                    .unwrap_or(Value::Null),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (2, "INK".into(), json!({"customer_name": "Ada"})),
            (4, "NIB".into(), json!({"customer_name": "Grace"})),
            (6, "BOX".into(), json!({"customer_name": null})),
            (8, "MAP".into(), Value::Null),
        ],
        "log:\n{}",
        weft.log_text()
    );
    assert!(
        weft.receive("orders", 100, 1500).is_empty(),
        "filtered rows never show up"
    );
    // The filtered-out changes still advanced the cursor: after the last
    // message was acked, the slot confirms past all of them.
    let last_lsn = got.last().unwrap()["metadata"]["commit_lsn"]
        .as_u64()
        .unwrap();
    pg.wait_for_slot_to_confirm("weft_fn", last_lsn, Duration::from_secs(30), || {
        weft.log_text()
    });
}

#[test]
fn routing_on_a_pull_sink_and_ungranted_capabilities_are_refused_at_start() {
    let pg = PgCluster::start();
    let (code, log) = run_weft_with(&config(
        &pg,
        "grants: { source_query: true }",
        "    routing: topics\n",
    ));
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.contains("sinks[0].routing: sequin_stream sinks take no routing keys"),
        "{log}"
    );

    let (code, log) = run_weft_with(&config(&pg, "", ""));
    assert_ne!(code, Some(0), "{log}");
    assert!(
        log.contains("imports capabilities it is not granted: `weft:plugin/source-query@0.2.0`"),
        "{log}"
    );
}

#[test]
fn the_source_query_is_read_only_bound_and_bounded() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE customers (id bigint PRIMARY KEY, name text)");
    pg.psql("INSERT INTO customers SELECT g, 'c' || g FROM generate_series(1, 1500) g");
    pg.psql("CREATE SEQUENCE weft_seq");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let options = weft_postgres::PgConnectOptions::from_url(&pg.url("postgres")).unwrap();
    let query = weft_wasm::SourceQuery::new(
        "names",
        options.query_config(),
        Duration::from_millis(300),
        runtime.handle().clone(),
    );

    let rows = query
        .query_blocking(
            "SELECT id, name FROM customers WHERE id = ANY($1::bigint[]) ORDER BY id",
            &[Some("{2,1}".into())],
        )
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&rows).unwrap(),
        json!([{"id": 1, "name": "c1"}, {"id": 2, "name": "c2"}])
    );

    // Parameters are bound, never spliced into the SQL.
    let hostile = "x'; DROP TABLE customers; --";
    let echoed = query
        .query_blocking("SELECT $1 AS v", &[Some(hostile.into())])
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&echoed).unwrap(),
        json!([{ "v": hostile }])
    );
    let null = query.query_blocking("SELECT $1 AS v", &[None]).unwrap();
    assert_eq!(null, r#"[{"v":null}]"#);

    // Writes fail: a data-modifying statement cannot stand as the subquery,
    // and whatever writes from inside a query (nextval here) meets the
    // read-only transaction.
    let error = query
        .query_blocking(
            "WITH d AS (DELETE FROM customers RETURNING id) SELECT id FROM d",
            &[],
        )
        .unwrap_err();
    assert!(error.starts_with("query rejected: "), "{error}");
    let error = query
        .query_blocking("SELECT nextval('weft_seq') AS n", &[])
        .unwrap_err();
    assert!(error.contains("read-only transaction"), "{error}");

    // The statement timeout ends slow queries.
    let error = query.query_blocking("SELECT pg_sleep(5)", &[]).unwrap_err();
    assert!(error.contains("statement timeout"), "{error}");

    // More than the row cap is an error, not a truncated answer.
    let error = query
        .query_blocking("SELECT id FROM customers", &[])
        .unwrap_err();
    assert!(error.contains("more than 1000 rows"), "{error}");

    // Nothing was written, and the connection still works after errors.
    assert_eq!(pg.psql("SELECT count(*) FROM customers").trim(), "1500");
    assert_eq!(pg.psql("SELECT last_value FROM weft_seq").trim(), "1");
    assert_eq!(pg.psql("SELECT is_called FROM weft_seq").trim(), "f");
    assert_eq!(
        query.query_blocking("SELECT 1 AS one", &[]).unwrap(),
        r#"[{"one":1}]"#
    );
}

/// A lookup API on 127.0.0.1: `GET /lookup?ids=1,2` answers
/// `{"1": {"name": "n1"}, ...}`, or 503 while `failing` is set; the ids it
/// was asked for are recorded.
struct LookupApi {
    addr: std::net::SocketAddr,
    asked: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    failing: std::sync::Arc<std::sync::atomic::AtomicBool>,
    _runtime: tokio::runtime::Runtime,
}

impl LookupApi {
    fn start() -> LookupApi {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let recorded = std::sync::Arc::clone(&asked);
        let failing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let refuse = std::sync::Arc::clone(&failing);
        let app = axum::Router::new().route(
            "/lookup",
            axum::routing::get(
                move |axum::extract::Query(query): axum::extract::Query<
                    std::collections::HashMap<String, String>,
                >| async move {
                    use axum::response::IntoResponse as _;
                    let ids = query.get("ids").cloned().unwrap_or_default();
                    recorded.lock().unwrap().push(ids.clone());
                    if refuse.load(std::sync::atomic::Ordering::SeqCst) {
                        return axum::http::StatusCode::SERVICE_UNAVAILABLE.into_response();
                    }
                    let found: serde_json::Map<String, Value> = ids
                        .split(',')
                        .map(|id| (id.to_string(), json!({"name": format!("n{id}")})))
                        .collect();
                    axum::Json(Value::Object(found)).into_response()
                },
            ),
        );
        runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
        LookupApi {
            addr,
            asked,
            failing,
            _runtime: runtime,
        }
    }

    /// The `functions:` section with the enrichment `lookup`, the HTTP
    /// enrichment guest asking this API, granted to reach it.
    fn enrichment_yaml(&self) -> String {
        format!(
            r#"functions:
  - name: lookup
    type: enrichment
    file: {enrichment}
    config: {{ url: "http://{addr}/lookup" }}
    grants: {{ http: {{ allow_hosts: ["{addr}"] }} }}
"#,
            addr = self.addr,
            enrichment = guests::wasm("weft_http_enrichment").display(),
        )
    }
}

#[test]
fn an_enrichment_calls_an_allowed_http_api_on_the_pull_sink() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE orders (id int PRIMARY KEY, item text)");
    let api = LookupApi::start();
    let config = format!(
        r#"{databases}{functions}sinks:
  - name: orders
    database: shop
    source: {{ include_tables: [public.orders] }}
    enrichment: lookup
    destination: {{ type: sequin_stream, ack_wait_ms: 5000 }}
"#,
        databases = pg.databases_yaml("weft_http"),
        functions = api.enrichment_yaml(),
    );
    let (_dir, weft) = WeftProcess::start_replicating(&pg, "weft_http", &config);

    pg.psql("INSERT INTO orders VALUES (1, 'pen'), (2, 'ink'), (3, 'cap')");
    let got = weft.receive_at_least("orders", 3, Duration::from_secs(60));
    let mut enriched: Vec<(i64, Value)> = got
        .iter()
        .map(|m| {
            (
                m["data"]["record"]["id"].as_i64().unwrap(),
                m["data"]["metadata"]["enrichment"].clone(),
            )
        })
        .collect();
    enriched.sort_by_key(|(id, _)| *id);
    assert_eq!(
        enriched,
        vec![
            (1, json!({"http": {"name": "n1"}})),
            (2, json!({"http": {"name": "n2"}})),
            (3, json!({"http": {"name": "n3"}})),
        ],
        "log:\n{}",
        weft.log_text()
    );
    let asked = api.asked.lock().unwrap().clone();
    let mut ids: Vec<&str> = asked.iter().flat_map(|ids| ids.split(',')).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids, ["1", "2", "3"], "requests: {asked:?}");
}

/// A change an enrichment failed on transiently waits in the store for its
/// retry. Once it is released, the row's later changes, which reach a push
/// sink through memory, must not overtake it on the way to the broker.
#[test]
fn a_change_held_for_a_retry_reaches_a_push_sink_before_its_rows_later_changes() {
    use crate::harness::nats::NatsServer;
    use crate::nats::{create_stream, rows, wait_for_distinct};

    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    let api = LookupApi::start();
    let nats = NatsServer::start();
    create_stream(&nats, &["sequin.>"]);
    let config = format!(
        r#"{databases}{functions}sinks:
  - name: items
    database: shop
    source: {{ include_tables: [public.items] }}
    enrichment: lookup
    destination:
      type: nats
      host: 127.0.0.1
      port: {nats_port}
      request_timeout_ms: 2000
      retry_backoff_base_ms: 100
      retry_backoff_max_ms: 200
"#,
        databases = pg.databases_yaml("weft_held"),
        functions = api.enrichment_yaml(),
        nats_port = nats.port(),
    );
    let (_dir, weft) = WeftProcess::start_replicating(&pg, "weft_held", &config);

    // The row's first changes fail and are held, the later ones behind them.
    api.failing.store(true, std::sync::atomic::Ordering::SeqCst);
    pg.psql("INSERT INTO items VALUES (1, 0)");
    for v in 1..=5 {
        pg.psql(&format!("UPDATE items SET v = {v}"));
    }
    weft.wait_until("six held changes", Duration::from_secs(60), || {
        let held = weft.store_query("SELECT count(*) || '' FROM held_changes");
        if held == ["6"] { Ok(()) } else { Err(held) }
    });
    // The API recovers while the row keeps changing, one transaction every
    // 10 ms: the held changes are released among the later ones.
    api.failing
        .store(false, std::sync::atomic::Ordering::SeqCst);
    const LAST: i64 = 300;
    pg.psql(&format!(
        "DO $$ BEGIN FOR i IN 6..{LAST} LOOP \
           UPDATE items SET v = i; COMMIT; PERFORM pg_sleep(0.01); \
         END LOOP; END $$"
    ));
    let stream = wait_for_distinct(&nats, LAST as usize + 1, "of row 1", &weft);
    let rows = rows(&stream);
    assert_eq!(
        rows[&1],
        (0..=LAST).collect::<Vec<_>>(),
        "row 1's changes in stream order; log:\n{}",
        weft.log_text()
    );
}

/// A held change released while an older change of its row is still being
/// delivered from memory: the worker delivers the memory lane and the store
/// side by side, so the release must wait until the lane is settled.
#[test]
fn a_released_change_waits_for_its_rows_older_change_still_in_memory() {
    use crate::harness::webhook_receiver::{Mode, Receiver};

    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    let api = LookupApi::start();
    let receiver = Receiver::start(Mode::Accept);
    // The insert of row 1 takes 4 s to be accepted: it is in flight from
    // memory while its update fails, is held and is released.
    receiver.set_stalled(1, 0, Duration::from_secs(4));
    let sinks = r#"  - name: items
    database: shop
    source: { include_tables: [public.items] }
    enrichment: lookup
    destination:
      type: webhook
      http_endpoint: receiver
      http_endpoint_path: /items
      batch: false
      max_in_flight: 4
      request_timeout_ms: 10000
      retry_backoff_base_ms: 50
      retry_backoff_max_ms: 100
"#;
    let config = format!(
        "{}{}",
        api.enrichment_yaml(),
        crate::webhook::config(&pg, &receiver, sinks)
    );
    let (_dir, weft) = WeftProcess::start_replicating(&pg, "weft_hook", &config);

    pg.psql("INSERT INTO items VALUES (1, 0)");
    receiver.wait_until("the insert is in flight", Duration::from_secs(60), |s| {
        s.started >= 1
    });
    api.failing.store(true, std::sync::atomic::Ordering::SeqCst);
    pg.psql("UPDATE items SET v = 1");
    weft.wait_until("the update is held", Duration::from_secs(30), || {
        let held = weft.store_query("SELECT count(*) || '' FROM held_changes");
        if held == ["1"] { Ok(()) } else { Err(held) }
    });
    api.failing
        .store(false, std::sync::atomic::Ordering::SeqCst);
    for v in 2..=5 {
        pg.psql(&format!("UPDATE items SET v = {v}"));
    }
    receiver.wait_until("six changes of row 1", Duration::from_secs(60), |s| {
        s.accepted.len() >= 6
    });
    let vs: Vec<i64> = receiver.rows("/items")[&1]
        .iter()
        .map(|(_, v, _)| *v)
        .collect();
    assert_eq!(
        vs,
        (0..=5).collect::<Vec<_>>(),
        "row 1 in commit order; log:\n{}",
        weft.log_text()
    );
}

#[test]
fn the_store_records_the_config_and_each_plugin_weft_ran_with() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE customers (id bigint PRIMARY KEY, name text)");
    pg.psql("CREATE TABLE orders (id int PRIMARY KEY, customer_id bigint, item text)");
    let dir = tempfile::tempdir().unwrap();
    let yaml = config(&pg, "grants: { source_query: true }", "");
    let mut weft = WeftProcess::start(dir.path(), &yaml);
    pg.wait_for_active_slot("weft_fn");
    assert_eq!(
        weft.store_query("SELECT yaml FROM configs"),
        vec![yaml.clone()]
    );
    let plugins = weft.store_query(
        "SELECT function || ' ' || kind || ' ' || sha256 FROM plugins ORDER BY function",
    );
    let sha = |name: &str| {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(
            std::fs::read(guests::wasm(name)).unwrap(),
        ))
    };
    assert_eq!(
        plugins,
        vec![
            format!("even filter {}", sha("weft_even_id_filter")),
            format!("names enrichment {}", sha("weft_customer_enrichment")),
            format!("topics routing {}", sha("weft_table_routing")),
            format!("upcase transform {}", sha("weft_upcase_transform")),
        ]
    );
    // The same config again is not recorded twice.
    weft.restart();
    pg.wait_for_active_slot("weft_fn");
    assert_eq!(
        weft.store_query("SELECT count(*) || '' FROM configs"),
        vec!["1"]
    );
}

#[test]
fn functions_run_when_the_address_space_is_too_small_for_the_instance_pool() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE customers (id bigint PRIMARY KEY, name text)");
    pg.psql("INSERT INTO customers VALUES (10, 'Ada')");
    pg.psql("CREATE TABLE orders (id int PRIMARY KEY, customer_id bigint, item text)");
    let dir = tempfile::tempdir().unwrap();
    // The pool at its defaults reserves terabytes; 16 GiB is plenty for
    // everything else, the way `ulimit -v` or valgrind leaves a process.
    let weft = WeftProcess::start_with_address_limit(
        dir.path(),
        &config(&pg, "grants: { source_query: true }", ""),
        16 << 30,
    );
    pg.wait_for_active_slot("weft_fn");
    assert!(
        weft.log_text()
            .contains("functions are instantiated on demand instead"),
        "weft says why it runs without the pool; log:\n{}",
        weft.log_text()
    );
    pg.psql("INSERT INTO orders VALUES (1, 10, 'pen'), (2, 10, 'ink')");
    let got = weft.drain("orders", 1, Duration::from_secs(60));
    assert_eq!(got.len(), 1, "log:\n{}", weft.log_text());
    assert_eq!(got[0]["record"]["item"], "INK");
    assert_eq!(
        got[0]["metadata"]["enrichment"],
        json!({"customer_name": "Ada"})
    );
}

#[test]
fn two_instances_of_each_function_keep_every_rows_changes_in_order() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE customers (id bigint PRIMARY KEY, name text)");
    pg.psql("INSERT INTO customers VALUES (10, 'Ada')");
    pg.psql("CREATE TABLE orders (id int PRIMARY KEY, customer_id bigint, item text)");
    let dir = tempfile::tempdir().unwrap();
    let yaml = config(&pg, "grants: { source_query: true }", "").replace(
        "    transform: upcase\n",
        "    transform: upcase\n    function_instances: 2\n",
    );
    let weft = WeftProcess::start(dir.path(), &yaml);
    pg.wait_for_active_slot("weft_fn");
    // Batches of 200 changes: each is split between the two instances.
    pg.psql("INSERT INTO orders SELECT id, 10, 'i' || id FROM generate_series(1, 200) id");
    pg.psql("UPDATE orders SET item = item || 'x'");
    pg.psql("UPDATE orders SET item = item || 'y'");

    let got = weft.drain("orders", 300, Duration::from_secs(60));
    assert_eq!(got.len(), 300, "log:\n{}", weft.log_text());
    let mut per_row: std::collections::BTreeMap<i64, Vec<String>> = Default::default();
    for message in &got {
        assert_eq!(
            message["metadata"]["enrichment"],
            json!({"customer_name": "Ada"})
        );
        per_row
            .entry(message["record"]["id"].as_i64().unwrap())
            .or_default()
            .push(message["record"]["item"].as_str().unwrap().to_string());
    }
    let expected: std::collections::BTreeMap<i64, Vec<String>> = (1..=100)
        .map(|n| {
            let id = n * 2;
            (
                id,
                vec![format!("I{id}"), format!("I{id}X"), format!("I{id}XY")],
            )
        })
        .collect();
    assert_eq!(
        per_row, expected,
        "only even ids, each row's changes in order"
    );
    for (function, kind) in [
        ("names", "enrichment"),
        ("even", "filter"),
        ("upcase", "transform"),
    ] {
        let labels = [("sink", "orders"), ("function", function), ("kind", kind)];
        assert_eq!(
            weft.metric("weft_plugin_instances", &labels),
            Some(2.0),
            "{function}: two live instances"
        );
    }
}
