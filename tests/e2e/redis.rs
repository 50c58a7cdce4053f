//! The redis_string and redis_stream sinks through the real binary against
//! the machine's Redis (127.0.0.1:6379), read back with the `redis` crate.
//! Each run uses its own key prefix and stream key.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use redis::Commands;
use serde_json::Value;

use crate::harness::postgres::PgCluster;
use crate::harness::weft::WeftProcess;

#[test]
fn redis_sinks_deliver_default_routing_in_per_key_order_with_idempotency_keys() {
    let pg = PgCluster::start();
    let table = format!("redis_items_{}", std::process::id());
    pg.psql(&format!(
        "CREATE TABLE {table} (id int PRIMARY KEY, v int NOT NULL)"
    ));
    let stream_key = format!("weft-test-stream-{}", std::process::id());
    let config = format!(
        r#"
databases:
  - name: shop
    hostname: 127.0.0.1
    port: {port}
    database: postgres
    username: postgres
    slot: {{ name: weft_redis, create_if_not_exists: true }}
    publication: {{ name: weft_redis, create_if_not_exists: true }}
sinks:
  - name: strings
    database: shop
    destination: {{ type: redis_string, host: 127.0.0.1, database: 11, batch_size: 5, retry_backoff_base_ms: 50, retry_backoff_max_ms: 400 }}
  - name: stream
    database: shop
    destination: {{ type: redis_stream, host: 127.0.0.1, database: 11, stream_key: {stream_key}, batch_size: 5 }}
"#,
        port = pg.port()
    );
    let dir = tempfile::tempdir().unwrap();
    let mut weft = WeftProcess::start(dir.path(), &config);
    pg.wait_for_active_slot("weft_redis");

    const ROWS: i64 = 5;
    const UPDATES: i64 = 4;
    pg.psql(&format!(
        "INSERT INTO {table} SELECT g, 0 FROM generate_series(1, {ROWS}) g"
    ));
    for v in 1..=UPDATES {
        pg.psql(&format!("UPDATE {table} SET v = {v}"));
    }
    pg.psql(&format!("DELETE FROM {table} WHERE id = 1"));

    let mut redis = redis::Client::open("redis://127.0.0.1:6379/11")
        .unwrap()
        .get_connection()
        .unwrap();
    let total = (ROWS * (UPDATES + 1) + 1) as usize;
    let deadline = Instant::now() + Duration::from_secs(60);
    let entries = loop {
        let reply: redis::streams::StreamRangeReply = redis.xrange_all(&stream_key).unwrap();
        if reply.ids.len() >= total {
            break reply.ids;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {total} stream entries; log:\n{}",
            reply.ids.len(),
            weft.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // Stream: every entry has an idempotency key; per row, versions in order.
    let mut seen = HashSet::new();
    let mut rows: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for entry in &entries {
        let field = |name: &str| -> String {
            entry
                .get(name)
                .unwrap_or_else(|| panic!("{name} in {entry:?}"))
        };
        let key = field("idempotency_key");
        if !seen.insert(key) {
            continue;
        }
        let record: Value = serde_json::from_str(&field("record")).unwrap();
        let metadata: Value = serde_json::from_str(&field("metadata")).unwrap();
        assert_eq!(
            metadata["idempotency_key"].as_str(),
            Some(field("idempotency_key").as_str())
        );
        if field("action") != "delete" {
            rows.entry(record["id"].as_i64().unwrap())
                .or_default()
                .push(record["v"].as_i64().unwrap());
        }
    }
    for id in 1..=ROWS {
        assert_eq!(rows[&id], (0..=UPDATES).collect::<Vec<_>>(), "row {id}");
    }
    // Strings: each key holds its last version; the deleted row is gone.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let exists: bool = redis.exists(format!("sequin:{table}:1")).unwrap();
        let last: Vec<Option<String>> = (2..=ROWS)
            .map(|id| redis.get(format!("sequin:{table}:{id}")).unwrap())
            .collect();
        let done = !exists
            && last.iter().all(|v| {
                v.as_deref()
                    .and_then(|t| serde_json::from_str::<Value>(t).ok())
                    .is_some_and(|m| m["record"]["v"] == UPDATES)
            });
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "strings: {last:?} row 1 exists: {exists}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let _: () = redis.del(&stream_key).unwrap();
    for id in 1..=ROWS {
        let _: () = redis.del(format!("sequin:{table}:{id}")).unwrap();
    }
    assert_eq!(weft.terminate(), Some(0));
}

#[test]
fn redis_sinks_deliver_a_transforms_bytes_byte_exact() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE raw_items (id int PRIMARY KEY, \"do\" text)");
    let stream_key = format!("weft-test-bytes-{}", std::process::id());
    let config = format!(
        r#"
databases:
  - name: shop
    hostname: 127.0.0.1
    port: {port}
    database: postgres
    username: postgres
    slot: {{ name: weft_redis_bytes, create_if_not_exists: true }}
    publication: {{ name: weft_redis_bytes, create_if_not_exists: true }}
functions:
  - name: bytes
    type: transform
    file: {transform}
sinks:
  - name: strings
    database: shop
    transform: bytes
    destination: {{ type: redis_string, host: 127.0.0.1, database: 12 }}
  - name: stream
    database: shop
    transform: bytes
    destination: {{ type: redis_stream, host: 127.0.0.1, database: 12, stream_key: {stream_key} }}
"#,
        port = pg.port(),
        transform = crate::harness::guests::wasm("weft_hostile_transform").display(),
    );
    let dir = tempfile::tempdir().unwrap();
    let mut weft = WeftProcess::start(dir.path(), &config);
    pg.wait_for_active_slot("weft_redis_bytes");
    pg.psql("INSERT INTO raw_items VALUES (1, 'bytes')");
    let mut redis = redis::Client::open("redis://127.0.0.1:6379/12")
        .unwrap()
        .get_connection()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let value: Option<Vec<u8>> = redis.get("sequin:raw_items:1").unwrap();
        let reply: redis::streams::StreamRangeReply = redis.xrange_all(&stream_key).unwrap();
        if let (Some(value), Some(entry)) = (value, reply.ids.first()) {
            assert_eq!(value, vec![0, 1, 2, 255]);
            let data: Vec<u8> = entry.get("data").unwrap();
            assert_eq!(data, vec![0, 1, 2, 255]);
            let content_type: String = entry.get("content_type").unwrap();
            assert_eq!(content_type, "application/octet-stream");
            assert!(entry.get::<String>("idempotency_key").is_some());
            break;
        }
        assert!(Instant::now() < deadline, "log:\n{}", weft.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    let _: () = redis.del(&stream_key).unwrap();
    let _: () = redis.del("sequin:raw_items:1").unwrap();
    assert_eq!(weft.terminate(), Some(0));
}

#[test]
fn a_routing_function_overrides_the_redis_key_expiry_and_stream_key() {
    let pg = PgCluster::start();
    let table = format!("routed_{}", std::process::id());
    pg.psql(&format!("CREATE TABLE {table} (id int PRIMARY KEY, v int)"));
    let config = format!(
        r#"
databases:
  - name: shop
    hostname: 127.0.0.1
    port: {port}
    database: postgres
    username: postgres
    slot: {{ name: weft_redis_routed, create_if_not_exists: true }}
    publication: {{ name: weft_redis_routed, create_if_not_exists: true }}
functions:
  - name: keys
    type: routing
    file: {routing}
    config: {{ keys: "key,expire_ms" }}
  - name: streams
    type: routing
    file: {routing}
    config: {{ keys: "stream_key" }}
sinks:
  - name: strings
    database: shop
    routing: keys
    destination: {{ type: redis_string, host: 127.0.0.1, database: 13 }}
  - name: stream
    database: shop
    routing: streams
    destination: {{ type: redis_stream, host: 127.0.0.1, database: 13, stream_key: unused }}
"#,
        port = pg.port(),
        routing = crate::harness::guests::wasm("weft_table_routing").display(),
    );
    let dir = tempfile::tempdir().unwrap();
    let mut weft = WeftProcess::start(dir.path(), &config);
    pg.wait_for_active_slot("weft_redis_routed");
    pg.psql(&format!("INSERT INTO {table} VALUES (1, 5)"));
    let mut redis = redis::Client::open("redis://127.0.0.1:6379/13")
        .unwrap()
        .get_connection()
        .unwrap();
    let key = format!("public.{table}:1");
    let stream = format!("public.{table}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let value: Option<String> = redis.get(&key).unwrap();
        let len: usize = redis.xlen(&stream).unwrap();
        if value.is_some() && len == 1 {
            let ttl: i64 = redis.pttl(&key).unwrap();
            assert!(ttl > 0 && ttl <= 60_000, "routed expire_ms: pttl {ttl}");
            let unused: usize = redis.xlen("unused").unwrap();
            assert_eq!(unused, 0);
            let default: bool = redis.exists(format!("sequin:{table}:1")).unwrap();
            assert!(!default, "the default key was written too");
            break;
        }
        assert!(Instant::now() < deadline, "log:\n{}", weft.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    let _: () = redis.del(&[key, stream]).unwrap();
    assert_eq!(weft.terminate(), Some(0));
}
