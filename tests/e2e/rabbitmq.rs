//! The RabbitMQ sink through the real binary, read back with lapin as an
//! independent client: default routing keys and properties, a routing
//! function's exchange/routing key/headers/message id, a transform's bytes,
//! per-row order, unroutable messages and a missing exchange retried (not
//! lost), and a broker outage on a private node.
//!
//! Tests on the machine's RabbitMQ (127.0.0.1:5672, guest/guest; started
//! by the harness when absent) use exchanges and queues with unique names,
//! deleted when the test ends.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use lapin::types::{AMQPValue, FieldTable};
use serde_json::Value;

use crate::harness::certs::TestCa;
use crate::harness::guests;
use crate::harness::postgres::PgCluster;
use crate::harness::rabbitmq::{Amqp, RabbitMqNode, Received, shared_port, unique_name};
use crate::harness::weft::WeftProcess;

const SLOT: &str = "weft_rabbit";

/// A config whose sink `items` (table `items`) publishes to `exchange` on
/// the broker at `port`, followed by `more_sinks`.
fn config(pg: &PgCluster, port: u16, exchange: &str, more_sinks: &str) -> String {
    format!(
        r#"
{databases}functions:
  - name: bytes
    type: transform
    file: {transform}
  - name: rabbit_routes
    type: routing
    file: {routing}
    config: {{ keys: "exchange,routing_key,headers,message_id", exchange: "{exchange}-routed" }}
sinks:
  - name: items
    database: shop
    source: {{ include_tables: [public.items] }}
    max_memory_mb: 1
    destination:
      type: rabbitmq
      host: 127.0.0.1
      port: {port}
      username: guest
      password: guest
      exchange: {exchange}
      batch_size: 20
      max_in_flight: 4
      request_timeout_ms: 2000
      retry_backoff_base_ms: 50
      retry_backoff_max_ms: 500
{more_sinks}"#,
        databases = pg.databases_yaml(SLOT),
        transform = guests::wasm("weft_hostile_transform").display(),
        routing = guests::wasm("weft_table_routing").display(),
    )
}

fn start_pg() -> PgCluster {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    pg.psql(r#"CREATE TABLE blobs (id int PRIMARY KEY, "do" text)"#);
    pg
}

fn write_rows(pg: &PgCluster, rows: i64, updates: std::ops::RangeInclusive<i64>) {
    if *updates.start() == 0 {
        pg.psql(&format!(
            "INSERT INTO items SELECT g, 0 FROM generate_series(1, {rows}) g"
        ));
    }
    for v in updates.filter(|v| *v > 0) {
        pg.psql(&format!("UPDATE items SET v = {v}"));
    }
}

fn body(m: &Received) -> Value {
    serde_json::from_slice(&m.body).unwrap()
}

/// Per row id, the `v` of each message, dropping repeated message ids (a
/// publish whose confirm was lost is sent again). Asserts each message id
/// is its idempotency key.
fn rows(messages: &[Received]) -> BTreeMap<i64, Vec<i64>> {
    let mut seen = HashSet::new();
    let mut rows: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for m in messages {
        let body = body(m);
        let id = m.message_id.clone().unwrap_or_default();
        assert_eq!(
            body["metadata"]["idempotency_key"].as_str(),
            Some(id.as_str()),
            "message_id is the idempotency key: {body}"
        );
        if seen.insert(id) {
            rows.entry(body["record"]["id"].as_i64().unwrap())
                .or_default()
                .push(body["record"]["v"].as_i64().unwrap());
        }
    }
    rows
}

/// Drains queue `cdc-all` into `all` until it holds `total` distinct
/// message ids (a publish whose confirm was lost comes twice).
fn drain_distinct(
    amqp: &Amqp,
    weft: &WeftProcess,
    all: &mut Vec<Received>,
    total: usize,
    timeout: Duration,
) {
    weft.wait_until(
        &format!("{total} distinct messages in cdc-all"),
        timeout,
        || {
            all.extend(amqp.drain("cdc-all"));
            let distinct: HashSet<&str> =
                all.iter().filter_map(|m| m.message_id.as_deref()).collect();
            if distinct.len() >= total {
                Ok(())
            } else {
                Err(distinct.len())
            }
        },
    )
}

fn assert_in_order(rows: &BTreeMap<i64, Vec<i64>>, count: i64, updates: i64) {
    assert_eq!(rows.len() as i64, count, "{rows:?}");
    for (id, vs) in rows {
        assert_eq!(vs, &(0..=updates).collect::<Vec<_>>(), "row {id}");
    }
}

#[test]
fn rabbitmq_routes_orders_and_sets_persistent_properties() {
    let pg = start_pg();
    let amqp = Amqp::new(shared_port());
    let exchange = unique_name("x");
    let routed_exchange = format!("{exchange}-routed");
    let (items_q, blobs_q) = (unique_name("items"), unique_name("blobs"));
    amqp.declare_exchange(&exchange);
    amqp.declare_exchange(&routed_exchange);
    amqp.bind_queue(&items_q, &exchange, "sequin.shop.public.items.*");
    // The routing function's routing key is the table name.
    amqp.bind_queue(&blobs_q, &routed_exchange, "public.blobs");
    let routed = format!(
        r#"
  - name: blobs
    database: shop
    source: {{ include_tables: [public.blobs] }}
    transform: bytes
    routing: rabbit_routes
    destination:
      type: rabbitmq
      host: 127.0.0.1
      port: {port}
      exchange: {exchange}
      request_timeout_ms: 2000
      retry_backoff_base_ms: 50
"#,
        port = shared_port()
    );
    let (_dir, weft) =
        WeftProcess::start_replicating(&pg, SLOT, &config(&pg, shared_port(), &exchange, &routed));

    const ROWS: i64 = 20;
    const UPDATES: i64 = 4;
    write_rows(&pg, ROWS, 0..=UPDATES);
    pg.psql("INSERT INTO blobs VALUES (7, 'bytes')");

    let total = (ROWS * (UPDATES + 1)) as usize;
    let mut items = Vec::new();
    amqp.wait_for(&items_q, &mut items, total, Duration::from_secs(90), || {
        weft.log_text()
    });
    let keys: HashSet<&str> = items.iter().map(|m| m.routing_key.as_str()).collect();
    assert_eq!(
        keys,
        HashSet::from([
            "sequin.shop.public.items.insert",
            "sequin.shop.public.items.update"
        ])
    );
    for m in &items {
        assert_eq!(m.exchange, exchange);
        assert_eq!(m.delivery_mode, Some(2), "persistent delivery");
        assert_eq!(m.content_type.as_deref(), Some("application/json"));
        assert!(m.headers.is_empty(), "no route headers by default");
    }
    assert_in_order(&rows(&items), ROWS, UPDATES);
    std::thread::sleep(Duration::from_millis(500));
    items.extend(amqp.drain(&items_q));
    assert_eq!(
        items.len(),
        total,
        "a healthy run publishes each change once"
    );

    // The routing function's exchange, routing key, header and message id;
    // the transform's bytes, byte-exact, with their content type.
    let mut blobs = Vec::new();
    amqp.wait_for(&blobs_q, &mut blobs, 1, Duration::from_secs(60), || {
        weft.log_text()
    });
    let blob = &blobs[0];
    assert_eq!(blob.exchange, routed_exchange);
    assert_eq!(blob.routing_key, "public.blobs");
    assert_eq!(blob.body, vec![0u8, 1, 2, 255]);
    assert_eq!(
        blob.content_type.as_deref(),
        Some("application/octet-stream")
    );
    assert_eq!(blob.delivery_mode, Some(2));
    assert_eq!(
        blob.headers,
        vec![("X-Table".to_string(), "public.blobs".to_string())]
    );
    let id = blob.message_id.as_deref().unwrap_or_default();
    assert!(
        id.starts_with("routed-") && id.len() > "routed-".len(),
        "the routing function's message id, not the default: {id:?}"
    );
}

#[test]
fn rabbitmq_missing_exchange_and_unroutable_messages_are_retried_not_lost() {
    let pg = start_pg();
    let amqp = Amqp::new(shared_port());
    let exchange = unique_name("late");
    let queue = unique_name("late");
    let (_dir, weft) =
        WeftProcess::start_replicating(&pg, SLOT, &config(&pg, shared_port(), &exchange, ""));

    const ROWS: i64 = 5;
    write_rows(&pg, ROWS, 0..=0);
    // No exchange yet: retried with advice, nothing dropped.
    weft.wait_for_log(
        &format!("exchange {exchange:?} does not exist"),
        Duration::from_secs(30),
    );
    amqp.declare_exchange(&exchange);
    // An exchange without a bound queue: the broker returns each message
    // (mandatory) and weft retries it instead of counting it delivered.
    weft.wait_for_log("no queue is bound", Duration::from_secs(30));
    let log = weft.log_text();
    assert!(log.contains("bind a queue"), "the error says what to do");
    // Returned messages are stored after their second attempt, and stay.
    weft.wait_until(
        "the returned messages stored",
        Duration::from_secs(30),
        || match weft.stored_keys("items").len() {
            stored if stored == ROWS as usize => Ok(()),
            stored => Err(stored),
        },
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        weft.stored_keys("items").len(),
        ROWS as usize,
        "returned messages stay in the store"
    );

    amqp.bind_queue(&queue, &exchange, "sequin.#");
    write_rows(&pg, ROWS, 1..=1);
    let mut all = Vec::new();
    amqp.wait_for(
        &queue,
        &mut all,
        (ROWS * 2) as usize,
        Duration::from_secs(60),
        || weft.log_text(),
    );
    assert_in_order(&rows(&all), ROWS, 1);
    weft.wait_until_delivered("items", Duration::from_secs(10));
}

#[test]
fn rabbitmq_broker_outage_loses_nothing_and_keeps_order() {
    let pg = start_pg();
    let mut node = RabbitMqNode::start();
    let amqp = Amqp::new(node.port());
    amqp.declare_exchange("cdc");
    amqp.bind_queue("cdc-all", "cdc", "sequin.#");
    let (_dir, weft) =
        WeftProcess::start_replicating(&pg, SLOT, &config(&pg, node.port(), "cdc", ""));

    const ROWS: i64 = 50;
    const UPDATES: i64 = 16;
    write_rows(&pg, ROWS, 0..=0);
    let (stop_lsn, peak_rss) = std::thread::scope(|scope| {
        // Keep writing throughout: before, during and after the crash.
        let writer = scope.spawn(|| {
            for v in 1..=UPDATES {
                write_rows(&pg, ROWS, v..=v);
                std::thread::sleep(Duration::from_millis(150));
            }
        });
        // SIGKILL the node mid-stream, with publishes in flight. Confirmed
        // messages are persistent in a durable queue: they stay there,
        // unread, across the crash.
        weft.wait_until_every(
            "the first rows in cdc-all",
            Duration::from_secs(60),
            Duration::from_millis(50),
            || match amqp.count("cdc-all") {
                queued if queued >= (ROWS * 3) as u32 => Ok(()),
                queued => Err(queued),
            },
        );
        node.stop();
        let stop_lsn = pg.current_wal_lsn();
        let mut peak_rss = 0;
        while !writer.is_finished() {
            peak_rss = peak_rss.max(weft.rss_kib());
            std::thread::sleep(Duration::from_millis(100));
        }
        writer.join().unwrap();
        (stop_lsn, peak_rss)
    });
    // The slot confirms the outage's changes only because they are stored.
    let confirmed = pg.wait_for_slot_to_confirm_all(SLOT);
    let outbox = weft.stored_keys("items");
    let mut peak_rss = peak_rss;
    for _ in 0..10 {
        peak_rss = peak_rss.max(weft.rss_kib());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(peak_rss < 300 * 1024, "weft's RSS reached {peak_rss} KiB");
    let log = weft.log_text();
    assert!(
        log.contains("cannot connect to RabbitMQ"),
        "deliveries failed retriably during the outage; log:\n{log}"
    );

    node.start_again();
    // A SIGKILLed RabbitMQ 3.10 node was seen not to recover its durable
    // bindings (the queue and its messages come back, the route from `cdc`
    // does not). weft retries the unroutable returns until a queue is bound
    // again, as an operator would do here; the declarations are idempotent.
    amqp.declare_exchange("cdc");
    amqp.bind_queue("cdc-all", "cdc", "sequin.#");
    let mut all = Vec::new();
    drain_distinct(
        &amqp,
        &weft,
        &mut all,
        (ROWS * (UPDATES + 1)) as usize,
        Duration::from_secs(120),
    );
    assert_in_order(&rows(&all), ROWS, UPDATES);
    // A change committed after the broker died cannot have been delivered
    // before the slot confirmed it: it must have been in the store.
    let mut outage_changes = 0;
    for m in &all {
        let lsn = body(m)["metadata"]["commit_lsn"].as_u64().unwrap();
        if lsn > stop_lsn {
            outage_changes += 1;
            assert!(lsn < confirmed, "the slot confirmed every outage write");
            assert!(
                outbox.contains(m.message_id.as_deref().unwrap()),
                "change {:?} was confirmed to Postgres while the broker was down but was not in the store",
                m.message_id
            );
        }
    }
    assert!(
        outage_changes >= ROWS as usize,
        "{outage_changes} changes were written during the outage"
    );
    println!(
        "rabbitmq outage: peak weft RSS {peak_rss} KiB, {outage_changes} changes written while down, {} messages in the outbox",
        outbox.len()
    );
}

#[test]
fn rabbitmq_tls_verifies_the_broker_and_connection_errors_say_what_to_fix() {
    let pg = start_pg();
    let ca = TestCa::new("weft rabbitmq test CA");
    let server = ca.issue_server("rabbit", &["DNS:localhost", "IP:127.0.0.1"]);
    let node = RabbitMqNode::start_with_tls(Some(&server));
    let amqp = Amqp::new(node.port());
    amqp.declare_exchange("cdc");
    amqp.bind_queue("cdc-all", "cdc", "sequin.#");
    let sink = |name: &str, destination: String| {
        format!(
            "  - name: {name}\n    database: shop\n    source: {{ include_tables: [public.items] }}\n    \
             destination: {{ type: rabbitmq, host: localhost, exchange: cdc, retry_backoff_base_ms: 50, retry_backoff_max_ms: 300, {destination} }}\n"
        )
    };
    let tls_port = node.tls_port().unwrap();
    let sinks = [
        sink(
            "trusted",
            format!(
                "port: {tls_port}, tls: true, tls_ca_file: {}",
                ca.cert().display()
            ),
        ),
        sink("untrusted", format!("port: {tls_port}, tls: true")),
        sink(
            "bad_password",
            format!(
                "port: {}, username: guest, password: wrong-pass-41",
                node.port()
            ),
        ),
        sink(
            "no_vhost",
            format!("port: {}, virtual_host: weft-no-such-vhost", node.port()),
        ),
    ]
    .concat();
    let yaml = format!(
        r#"
{databases}sinks:
{sinks}"#,
        databases = pg.databases_yaml(SLOT)
    );
    let (_dir, weft) = WeftProcess::start_replicating(&pg, SLOT, &yaml);
    write_rows(&pg, 3, 0..=1);

    let mut all = Vec::new();
    amqp.wait_for("cdc-all", &mut all, 6, Duration::from_secs(60), || {
        weft.log_text()
    });
    assert_in_order(&rows(&all), 3, 1);
    weft.wait_for_log("refused the credentials", Duration::from_secs(30));
    weft.wait_for_log(
        "did not allow virtual host \"weft-no-such-vhost\"",
        Duration::from_secs(30),
    );
    let log = weft.log_text();
    let untrusted_failed = log
        .lines()
        .any(|l| l.contains("untrusted") && l.contains("invalid peer certificate: UnknownIssuer"));
    assert!(
        untrusted_failed,
        "the sink without tls_ca_file rejected the broker's certificate; log:\n{log}"
    );
    std::thread::sleep(Duration::from_millis(500));
    all.extend(amqp.drain("cdc-all"));
    let consumers: HashSet<String> = all
        .iter()
        .map(|m| {
            body(m)["metadata"]["consumer"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        consumers,
        HashSet::from(["trusted".to_string()]),
        "only the sink that verified the broker's certificate delivered"
    );
    assert_eq!(all.len(), 6);
    assert!(!log.contains("wrong-pass-41"), "a password reached the log");
}

#[test]
fn rabbitmq_nacked_publishes_are_retried_until_the_queue_has_room() {
    let pg = start_pg();
    let amqp = Amqp::new(shared_port());
    let exchange = unique_name("full");
    let queue = unique_name("full");
    amqp.declare_exchange(&exchange);
    // A queue that holds two messages and nacks further publishes.
    let mut arguments = FieldTable::default();
    arguments.insert("x-max-length".into(), AMQPValue::LongInt(2));
    arguments.insert(
        "x-overflow".into(),
        AMQPValue::LongString("reject-publish".into()),
    );
    amqp.bind_queue_with(&queue, &exchange, "sequin.#", arguments);
    let (_dir, weft) =
        WeftProcess::start_replicating(&pg, SLOT, &config(&pg, shared_port(), &exchange, ""));

    const ROWS: i64 = 6;
    write_rows(&pg, ROWS, 0..=1);
    weft.wait_for_log("RabbitMQ nacked the message", Duration::from_secs(30));
    assert_eq!(amqp.count(&queue), 2, "the queue is full");
    // Consuming makes room; the nacked messages are published again.
    let mut all = Vec::new();
    amqp.wait_for(
        &queue,
        &mut all,
        (ROWS * 2) as usize,
        Duration::from_secs(60),
        || weft.log_text(),
    );
    assert_in_order(&rows(&all), ROWS, 1);
}

#[test]
fn rabbitmq_blocked_broker_times_out_and_delivers_after_the_alarm_clears() {
    let pg = start_pg();
    let node = RabbitMqNode::start();
    let amqp = Amqp::new(node.port());
    amqp.declare_exchange("cdc");
    amqp.bind_queue("cdc-all", "cdc", "sequin.#");
    let (_dir, weft) =
        WeftProcess::start_replicating(&pg, SLOT, &config(&pg, node.port(), "cdc", ""));

    const ROWS: i64 = 5;
    write_rows(&pg, ROWS, 0..=0);
    let mut all = Vec::new();
    amqp.wait_for(
        "cdc-all",
        &mut all,
        ROWS as usize,
        Duration::from_secs(60),
        || weft.log_text(),
    );
    // A memory alarm blocks publishers: confirms stop coming.
    node.rabbitmqctl(&["set_vm_memory_high_watermark", "absolute", "1"]);
    write_rows(&pg, ROWS, 1..=2);
    weft.wait_for_log(
        "did not finish within request_timeout_ms",
        Duration::from_secs(30),
    );
    weft.wait_for_log("blocked publishing", Duration::from_secs(30));
    weft.wait_until(
        "unconfirmed messages stored",
        Duration::from_secs(30),
        || match weft.stored_keys("items").len() {
            0 => Err(0),
            stored => Ok(stored),
        },
    );
    node.rabbitmqctl(&["set_vm_memory_high_watermark", "0.4"]);
    drain_distinct(
        &amqp,
        &weft,
        &mut all,
        (ROWS * 3) as usize,
        Duration::from_secs(60),
    );
    assert_in_order(&rows(&all), ROWS, 2);
}
