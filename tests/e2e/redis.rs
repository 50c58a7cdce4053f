//! The redis_string and redis_stream sinks through the real binary against
//! the machine's Redis (127.0.0.1:6379), read back with the `redis` crate.
//! Each run uses its own key prefix and stream key.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use redis::Commands;
use serde_json::Value;

use crate::harness::postgres::PgCluster;
use crate::harness::redis::RedisServer;
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
{databases}sinks:
  - name: strings
    database: shop
    destination: {{ type: redis_string, host: 127.0.0.1, database: 11, batch_size: 5, retry_backoff_base_ms: 50, retry_backoff_max_ms: 400 }}
  - name: stream
    database: shop
    destination: {{ type: redis_stream, host: 127.0.0.1, database: 11, stream_key: {stream_key}, batch_size: 5 }}
"#,
        databases = pg.databases_yaml("weft_redis")
    );
    let (_dir, mut weft) = WeftProcess::start_replicating(&pg, "weft_redis", &config);

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
    let entries = weft.wait_until(
        &format!("{total} stream entries"),
        Duration::from_secs(60),
        || {
            let reply: redis::streams::StreamRangeReply = redis.xrange_all(&stream_key).unwrap();
            match reply.ids.len() {
                got if got >= total => Ok(reply.ids),
                got => Err(got),
            }
        },
    );
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
    weft.wait_until(
        "each string key at its last version, the deleted row's gone",
        Duration::from_secs(30),
        || {
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
                Ok(())
            } else {
                Err(format!("strings: {last:?} row 1 exists: {exists}"))
            }
        },
    );
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
{databases}functions:
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
        databases = pg.databases_yaml("weft_redis_bytes"),
        transform = crate::harness::guests::wasm("weft_hostile_transform").display(),
    );
    let (_dir, mut weft) = WeftProcess::start_replicating(&pg, "weft_redis_bytes", &config);
    pg.psql("INSERT INTO raw_items VALUES (1, 'bytes')");
    let mut redis = redis::Client::open("redis://127.0.0.1:6379/12")
        .unwrap()
        .get_connection()
        .unwrap();
    let (value, entry) = weft.wait_until(
        "the string and the stream entry",
        Duration::from_secs(60),
        || {
            let value: Option<Vec<u8>> = redis.get("sequin:raw_items:1").unwrap();
            let reply: redis::streams::StreamRangeReply = redis.xrange_all(&stream_key).unwrap();
            match (value, reply.ids.into_iter().next()) {
                (Some(value), Some(entry)) => Ok((value, entry)),
                (value, entry) => Err((value.is_some(), entry.is_some())),
            }
        },
    );
    assert_eq!(value, vec![0, 1, 2, 255]);
    let data: Vec<u8> = entry.get("data").unwrap();
    assert_eq!(data, vec![0, 1, 2, 255]);
    let content_type: String = entry.get("content_type").unwrap();
    assert_eq!(content_type, "application/octet-stream");
    assert!(entry.get::<String>("idempotency_key").is_some());
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
{databases}functions:
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
        databases = pg.databases_yaml("weft_redis_routed"),
        routing = crate::harness::guests::wasm("weft_table_routing").display(),
    );
    let (_dir, mut weft) = WeftProcess::start_replicating(&pg, "weft_redis_routed", &config);
    pg.psql(&format!("INSERT INTO {table} VALUES (1, 5)"));
    let mut redis = redis::Client::open("redis://127.0.0.1:6379/13")
        .unwrap()
        .get_connection()
        .unwrap();
    let key = format!("public.{table}:1");
    let stream = format!("public.{table}");
    weft.wait_until("the routed key and stream", Duration::from_secs(60), || {
        let value: Option<String> = redis.get(&key).unwrap();
        let len: usize = redis.xlen(&stream).unwrap();
        if value.is_some() && len == 1 {
            Ok(())
        } else {
            Err((value, len))
        }
    });
    let ttl: i64 = redis.pttl(&key).unwrap();
    assert!(ttl > 0 && ttl <= 60_000, "routed expire_ms: pttl {ttl}");
    let unused: usize = redis.xlen("unused").unwrap();
    assert_eq!(unused, 0);
    let default: bool = redis.exists(format!("sequin:{table}:1")).unwrap();
    assert!(!default, "the default key was written too");
    let _: () = redis.del(&[key, stream]).unwrap();
    assert_eq!(weft.terminate(), Some(0));
}

/// Unique entries of a stream as `(idempotency key, row id, v, commit_lsn)`,
/// in stream order.
fn stream_rows(redis: &mut redis::Connection, key: &str) -> Vec<(String, i64, i64, u64)> {
    let reply: redis::streams::StreamRangeReply = redis.xrange_all(key).unwrap();
    let mut seen = HashSet::new();
    let mut rows = Vec::new();
    for entry in &reply.ids {
        let id_key: String = entry.get("idempotency_key").unwrap();
        if !seen.insert(id_key.clone()) {
            continue;
        }
        let record: Value = serde_json::from_str(&entry.get::<String>("record").unwrap()).unwrap();
        let metadata: Value =
            serde_json::from_str(&entry.get::<String>("metadata").unwrap()).unwrap();
        rows.push((
            id_key,
            record["id"].as_i64().unwrap(),
            record["v"].as_i64().unwrap(),
            metadata["commit_lsn"].as_u64().unwrap(),
        ));
    }
    rows
}

#[test]
fn a_redis_outage_loses_nothing_keeps_order_and_bounds_memory() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    let mut server = RedisServer::start();
    let config = format!(
        r#"
{databases}sinks:
  - name: stream
    database: shop
    destination: {{ type: redis_stream, host: 127.0.0.1, port: {redis_port}, stream_key: items, batch_size: 20, request_timeout_ms: 1000, retry_backoff_base_ms: 50, retry_backoff_max_ms: 500 }}
"#,
        databases = pg.databases_yaml("weft_redis_outage"),
        redis_port = server.port(),
    );
    let (_dir, mut weft) = WeftProcess::start_replicating(&pg, "weft_redis_outage", &config);

    const ROWS: i64 = 40;
    const UPDATES: i64 = 10;
    pg.psql(&format!(
        "INSERT INTO items SELECT g, 0 FROM generate_series(1, {ROWS}) g"
    ));
    pg.psql("UPDATE items SET v = 1");
    let wait_for = |redis: &mut redis::Connection, count: usize, weft: &WeftProcess| {
        weft.wait_until_every(
            &format!("{count} entries in stream items"),
            Duration::from_secs(90),
            Duration::from_millis(100),
            || {
                let rows = stream_rows(redis, "items");
                if rows.len() >= count {
                    Ok(rows)
                } else {
                    Err(format!("{} of them", rows.len()))
                }
            },
        )
    };
    // The server keeps nothing on disk: what arrived before the outage is
    // read now, what arrives after it from the restarted, empty server.
    let before = wait_for(&mut server.connection(0), (ROWS * 2) as usize, &weft);

    server.kill();
    let mut peak_rss = 0;
    for v in 2..=UPDATES {
        pg.psql(&format!("UPDATE items SET v = {v}"));
        peak_rss = peak_rss.max(weft.rss_kib());
    }
    // The slot confirms the outage's changes only because they are durably
    // in weft's store: each one is there, none was delivered.
    let confirmed = pg.wait_for_slot_to_confirm_all("weft_redis_outage");
    let outbox = weft.stored_keys("stream");
    assert_eq!(
        outbox.len(),
        (ROWS * (UPDATES - 1)) as usize,
        "every change of the outage waits in the store"
    );
    for _ in 0..10 {
        peak_rss = peak_rss.max(weft.rss_kib());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(peak_rss < 300 * 1024, "weft's RSS reached {peak_rss} KiB");

    server.start_again();
    let after = wait_for(
        &mut server.connection(0),
        (ROWS * (UPDATES - 1)) as usize,
        &weft,
    );
    let delivered_before: HashSet<&str> = before.iter().map(|r| r.0.as_str()).collect();
    let mut rows: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    // An entry of `after` that was also in `before` is a redelivery.
    let new_after = after
        .iter()
        .filter(|r| !delivered_before.contains(r.0.as_str()));
    for (key, id, v, lsn) in before.iter().chain(new_after) {
        assert!(
            *lsn >= confirmed || delivered_before.contains(key.as_str()) || outbox.contains(key),
            "change {key} was confirmed to Postgres but neither delivered nor stored"
        );
        rows.entry(*id).or_default().push(*v);
    }
    for id in 1..=ROWS {
        assert_eq!(rows[&id], (0..=UPDATES).collect::<Vec<_>>(), "row {id}");
    }
    let log = weft.log_text();
    assert!(
        log.contains("cannot reach Redis at") || log.contains("did not answer within"),
        "deliveries failed retriably during the outage; log:\n{log}"
    );
    println!(
        "redis outage: peak weft RSS {peak_rss} KiB, {} messages in the outbox",
        outbox.len()
    );
    assert_eq!(weft.terminate(), Some(0));
}
