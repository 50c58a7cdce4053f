//! The Kafka sink through the real binary against a tansu broker this test
//! owns, read back with the rdkafka crate's own consumer: default routing
//! (configured topic, key = message group), a routing function's topic and
//! key, a transform's bytes byte-exact, per-key order, the `idempotency-key`
//! header, a message without a topic dead-lettered, a broker outage, TLS
//! with certificate verification, and SASL.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use serde_json::Value;

use crate::harness::certs::TestCa;
use crate::harness::guests;
use crate::harness::kafka::{Record, TansuBroker, TansuOptions};
use crate::harness::postgres::PgCluster;
use crate::harness::weft::WeftProcess;

const SLOT: &str = "weft_kafka";

fn database(pg: &PgCluster) -> String {
    format!("\n{}", pg.databases_yaml(SLOT))
}

fn functions() -> String {
    format!(
        r#"
functions:
  - name: bytes
    type: transform
    file: {transform}
  - name: by_table
    type: routing
    file: {routing}
    config: {{ keys: "topic,message_key" }}
  - name: key_only
    type: routing
    file: {routing}
    config: {{ keys: "message_key" }}
"#,
        transform = guests::wasm("weft_hostile_transform").display(),
        routing = guests::wasm("weft_table_routing").display(),
    )
}

/// Sink `items` on `public.items` to topic `cdc` of `broker`, with `extra`
/// destination keys (already indented).
fn items_sink(broker: &TansuBroker, extra: &str) -> String {
    format!(
        r#"
  - name: items
    database: shop
    source: {{ include_tables: [public.items] }}
    max_memory_mb: 1
    destination:
      type: kafka
      hosts: {hosts}
      topic: cdc
      batch_size: 20
      max_in_flight: 4
      request_timeout_ms: 2000
      retry_backoff_base_ms: 50
      retry_backoff_max_ms: 500
{extra}"#,
        hosts = broker.address(),
    )
}

fn setup_tables(pg: &PgCluster) {
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    pg.psql(r#"CREATE TABLE blobs (id int PRIMARY KEY, "do" text)"#);
}

fn write_rows(pg: &PgCluster, rows: i64, updates: i64) {
    pg.psql(&format!(
        "INSERT INTO items SELECT g, 0 FROM generate_series(1, {rows}) g"
    ));
    for v in 1..=updates {
        pg.psql(&format!("UPDATE items SET v = {v}"));
    }
}

fn body(record: &Record) -> Value {
    serde_json::from_slice(&record.payload)
        .unwrap_or_else(|e| panic!("record {record:?} is not JSON: {e}"))
}

/// Per row id, the `v` of each record in partition order after dropping
/// repeated idempotency keys. Asserts every record carries its message's
/// idempotency key in the `idempotency-key` header, its key is the row's
/// message group, and each row stays on one partition.
fn rows(records: &[Record]) -> BTreeMap<i64, Vec<i64>> {
    let mut seen = HashSet::new();
    let mut partitions: BTreeMap<i64, i32> = BTreeMap::new();
    let mut rows: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for r in records {
        let body = body(r);
        let key = body["metadata"]["idempotency_key"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            r.header("idempotency-key").as_deref(),
            Some(key.as_str()),
            "the idempotency-key header: {r:?}"
        );
        let id = body["record"]["id"].as_i64().unwrap();
        assert_eq!(
            r.key_text(),
            Some(format!("public.items:{id}")),
            "the key is the message group"
        );
        let partition = *partitions.entry(id).or_insert(r.partition);
        assert_eq!(partition, r.partition, "row {id} moved partitions");
        if seen.insert(key) {
            rows.entry(id)
                .or_default()
                .push(body["record"]["v"].as_i64().unwrap());
        }
    }
    rows
}

fn assert_in_order(rows: &BTreeMap<i64, Vec<i64>>, count: i64, updates: i64) {
    assert_eq!(rows.len() as i64, count, "{rows:?}");
    for (id, vs) in rows {
        assert_eq!(vs, &(0..=updates).collect::<Vec<_>>(), "row {id}");
    }
}

/// Reads at least `count` records of `topic`, failing with weft's log.
fn read_at_least(
    broker: &TansuBroker,
    topic: &str,
    count: usize,
    weft: &WeftProcess,
) -> Vec<Record> {
    let records = broker.read(topic, count, Duration::from_secs(90));
    assert!(
        records.len() >= count,
        "{} of {count} records in {topic}; weft log:\n{}\nbroker log:\n{}",
        records.len(),
        weft.log_text(),
        broker.log_text()
    );
    records
}

#[test]
fn kafka_routes_orders_and_marks_every_message() {
    let pg = PgCluster::start();
    setup_tables(&pg);
    let broker = TansuBroker::start();
    broker.create_topic("cdc", 3);
    broker.create_topic("public.blobs", 1);
    let sinks = format!(
        r#"{items}
  - name: blobs
    database: shop
    source: {{ include_tables: [public.blobs] }}
    transform: bytes
    routing: by_table
    destination: {{ type: kafka, hosts: "{hosts}", request_timeout_ms: 2000, retry_backoff_base_ms: 50 }}
  - name: keyed
    database: shop
    source: {{ include_tables: [public.blobs] }}
    routing: key_only
    max_retry_count: 0
    destination: {{ type: kafka, hosts: "{hosts}", request_timeout_ms: 2000, retry_backoff_base_ms: 50 }}
"#,
        items = items_sink(&broker, "      compression: zstd\n"),
        hosts = broker.address(),
    );
    let dir = tempfile::tempdir().unwrap();
    let config = format!("{}{}sinks:{sinks}", database(&pg), functions());
    let weft = WeftProcess::start(dir.path(), &config);
    pg.wait_for_active_slot(SLOT);

    const ROWS: i64 = 20;
    const UPDATES: i64 = 4;
    write_rows(&pg, ROWS, UPDATES);
    pg.psql(r#"INSERT INTO blobs VALUES (7, 'bytes')"#);

    // Default routing: the configured topic, key = the message group,
    // the idempotency key as a header, each row in commit order.
    let total = (ROWS * (UPDATES + 1)) as usize;
    let items = read_at_least(&broker, "cdc", total, &weft);
    assert_in_order(&rows(&items), ROWS, UPDATES);
    let again = broker.read("cdc", total + 1, Duration::from_secs(2));
    assert_eq!(
        again.len(),
        total,
        "a healthy run produces each change once"
    );
    let partitions: HashSet<i32> = items.iter().map(|r| r.partition).collect();
    assert!(
        partitions.len() > 1,
        "keys spread over partitions: {partitions:?}"
    );

    // The routing function's topic and key; the transform's bytes,
    // byte-exact, with their content type.
    let blobs = read_at_least(&broker, "public.blobs", 1, &weft);
    assert_eq!(blobs.len(), 1);
    assert_eq!(blobs[0].payload, vec![0u8, 1, 2, 255]);
    assert_eq!(blobs[0].key_text().as_deref(), Some("7"));
    assert_eq!(
        blobs[0].header("content-type").as_deref(),
        Some("application/octet-stream")
    );
    assert!(
        blobs[0]
            .header("idempotency-key")
            .is_some_and(|k| !k.is_empty()),
        "{:?}",
        blobs[0]
    );

    // A routing function that sets no topic, on a sink without one: the
    // message is dead-lettered with the reason.
    let letter = weft.wait_until("one dead letter", Duration::from_secs(30), || {
        let body = weft.get_json("/api/sinks/keyed/dead_letters");
        if body["count"] == 1 {
            Ok(body["data"][0].clone())
        } else {
            Err(body)
        }
    });
    assert!(
        letter["last_error"]
            .as_str()
            .unwrap()
            .contains("the message has no topic"),
        "{letter}"
    );
}

#[test]
fn kafka_broker_outage_loses_nothing_and_keeps_order() {
    let pg = PgCluster::start();
    setup_tables(&pg);
    let mut broker = TansuBroker::start();
    broker.create_topic("cdc", 2);
    let dir = tempfile::tempdir().unwrap();
    let config = format!("{}sinks:{}", database(&pg), items_sink(&broker, ""));
    let weft = WeftProcess::start(dir.path(), &config);
    pg.wait_for_active_slot(SLOT);

    const ROWS: i64 = 50;
    write_rows(&pg, ROWS, 1);
    let before = read_at_least(&broker, "cdc", (ROWS * 2) as usize, &weft);
    // Everything written so far is delivered and settled: the broker's
    // memory storage dies with it, so nothing may be in flight at the kill.
    weft.wait_until_delivered("items", Duration::from_secs(30));

    // Outage: kill the broker, keep writing.
    broker.kill();
    const UPDATES: i64 = 12;
    let mut peak_rss = 0;
    for v in 2..=UPDATES {
        pg.psql(&format!("UPDATE items SET v = {v}"));
        peak_rss = peak_rss.max(weft.rss_kib());
    }
    // The slot advances past the writes only because the outbox holds
    // every change the broker has not acknowledged.
    let confirmed = pg.wait_for_slot_to_confirm_all(SLOT);
    let outbox = weft.stored_keys("items");
    assert_eq!(
        outbox.len() as i64,
        ROWS * (UPDATES - 1),
        "the outage's changes wait in the store"
    );
    weft.wait_for_log("within request_timeout_ms", Duration::from_secs(60));
    for _ in 0..10 {
        peak_rss = peak_rss.max(weft.rss_kib());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(peak_rss < 300 * 1024, "weft's RSS reached {peak_rss} KiB");

    // The restarted broker lost its memory storage (topics, records and
    // producer ids): recreate the topic.
    broker.start_again();
    broker.create_topic("cdc", 2);
    let after_count = (ROWS * (UPDATES - 1)) as usize;
    let after = read_at_least(&broker, "cdc", after_count, &weft);
    let mut all = before.clone();
    all.extend(after.iter().cloned());
    assert_in_order(&rows(&all), ROWS, UPDATES);
    let before_keys: HashSet<String> = before
        .iter()
        .map(|r| r.header("idempotency-key").unwrap())
        .collect();
    for r in &after {
        let body = body(r);
        let key = r.header("idempotency-key").unwrap();
        let lsn = body["metadata"]["commit_lsn"].as_u64().unwrap();
        assert!(!before_keys.contains(&key), "{key} was delivered twice");
        if lsn < confirmed {
            assert!(
                outbox.contains(&key),
                "change {key} was confirmed to Postgres but neither delivered nor stored"
            );
        }
    }
    // tansu kept no producer state across the restart: weft's producer
    // was wedged on an unknown producer id and had to be replaced.
    let log = weft.log_text();
    assert!(
        log.contains(
            "replaced the Kafka producer: its messages keep timing out although the brokers answer"
        ),
        "log:\n{log}"
    );
    println!(
        "kafka outage: peak weft RSS {peak_rss} KiB, {} messages in the outbox",
        outbox.len()
    );
}

#[test]
fn kafka_tls_verifies_the_broker_certificate() {
    let pg = PgCluster::start();
    setup_tables(&pg);
    let ca = TestCa::new("weft-kafka-ca");
    let server = ca.issue_server("tansu", &["IP:127.0.0.1"]);
    let broker = TansuBroker::start_with(TansuOptions {
        tls: Some(server),
        ca: Some(ca.cert()),
        authentication: false,
    });
    broker.create_topic("cdc", 1);
    let untrusted = format!(
        r#"
  - name: untrusted
    database: shop
    source: {{ include_tables: [public.items] }}
    destination: {{ type: kafka, hosts: "{hosts}", topic: cdc, tls: true, request_timeout_ms: 2000, retry_backoff_base_ms: 50, retry_backoff_max_ms: 300 }}
"#,
        hosts = broker.address()
    );
    let trusted = format!(
        "      tls: true\n      tls_ca_file: {}\n",
        ca.cert().display()
    );
    // A broker whose certificate (from the trusted CA) names another host:
    // the host name check must refuse it.
    let misnamed_broker = TansuBroker::start_with(TansuOptions {
        tls: Some(ca.issue_server("elsewhere", &["DNS:elsewhere.example"])),
        ca: Some(ca.cert()),
        authentication: false,
    });
    misnamed_broker.create_topic("cdc", 1);
    let misnamed = format!(
        r#"
  - name: misnamed
    database: shop
    source: {{ include_tables: [public.items] }}
    destination: {{ type: kafka, hosts: "{hosts}", topic: cdc, tls: true, tls_ca_file: "{ca}", request_timeout_ms: 2000, retry_backoff_base_ms: 50, retry_backoff_max_ms: 300 }}
"#,
        hosts = misnamed_broker.address(),
        ca = ca.cert().display()
    );
    let config = format!(
        "{}sinks:{}{untrusted}{misnamed}",
        database(&pg),
        items_sink(&broker, &trusted)
    );
    let (_dir, weft) = WeftProcess::start_replicating(&pg, SLOT, &config);
    write_rows(&pg, 10, 1);

    let records = read_at_least(&broker, "cdc", 20, &weft);
    std::thread::sleep(Duration::from_secs(2));
    let records = broker.read("cdc", records.len() + 1, Duration::from_secs(1));
    let consumers: HashSet<String> = records
        .iter()
        .map(|r| {
            body(r)["metadata"]["consumer"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        consumers,
        HashSet::from(["items".to_string()]),
        "only the sink that trusts the CA delivered"
    );
    assert_in_order(&rows(&records), 10, 1);
    weft.wait_for_log("certificate verify failed", Duration::from_secs(60));
    assert!(
        misnamed_broker
            .read("cdc", 1, Duration::from_secs(1))
            .is_empty(),
        "the sink accepted a certificate for another host name"
    );
    weft.wait_for_log(
        &format!(
            "{}/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed",
            misnamed_broker.address()
        ),
        Duration::from_secs(60),
    );
}

/// tansu supports SCRAM but cannot register a user on a memory-only broker
/// that requires authentication (registering needs an authenticated
/// client), so this shows the SCRAM exchange from the refusing side: the
/// sink authenticates with SCRAM-SHA-512, is refused, delivers nothing,
/// says why in its delivery errors and never logs the password.
#[test]
fn kafka_scram_credentials_are_presented_and_a_refusal_is_explained() {
    let pg = PgCluster::start();
    setup_tables(&pg);
    let broker = TansuBroker::start_with(TansuOptions {
        authentication: true,
        ..TansuOptions::default()
    });
    let credentials = "      username: weft\n      password: secret-pass-77\n      sasl_mechanism: scram_sha_512\n";
    let config = format!(
        "{}sinks:{}",
        database(&pg),
        items_sink(&broker, credentials)
    );
    let (_dir, weft) = WeftProcess::start_replicating(&pg, SLOT, &config);
    write_rows(&pg, 3, 0);

    weft.wait_for_log(
        "SASL SCRAM authentication failed: broker responded with unknown-user",
        Duration::from_secs(60),
    );
    weft.wait_for_log(
        "last client error: Authentication (Local: Authentication failure)",
        Duration::from_secs(60),
    );
    let log = weft.log_text();
    assert!(
        !log.contains("secret-pass-77"),
        "the password reached the log"
    );
    // Nothing was delivered: after its second attempt each message waits
    // in the store.
    weft.wait_until(
        "the three messages stored",
        Duration::from_secs(30),
        || match weft.stored_keys("items").len() {
            3 => Ok(()),
            stored => Err(stored),
        },
    );
}

#[test]
fn kafka_missing_topic_is_named_and_delivery_resumes_once_created() {
    let pg = PgCluster::start();
    setup_tables(&pg);
    let broker = TansuBroker::start();
    let config = format!("{}sinks:{}", database(&pg), items_sink(&broker, ""));
    let (_dir, weft) = WeftProcess::start_replicating(&pg, SLOT, &config);
    write_rows(&pg, 5, 1);

    weft.wait_for_log(
        "Kafka topic \"cdc\" does not exist; create it (e.g. `kafka-topics.sh --create --topic cdc`)",
        Duration::from_secs(60),
    );
    broker.create_topic("cdc", 1);
    let records = read_at_least(&broker, "cdc", 10, &weft);
    assert_in_order(&rows(&records), 5, 1);
}
