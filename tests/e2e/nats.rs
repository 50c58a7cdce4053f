//! The NATS sink through the real binary against a `nats-server` this test
//! owns, read back with async-nats directly: default subjects, a routing
//! function's subject and headers, a transform's bytes, per-row order,
//! `Nats-Msg-Id`, and no duplicates in the stream after a SIGKILL mid-delivery.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use async_nats::jetstream;
use serde_json::Value;

use crate::harness::certs::TestCa;
use crate::harness::guests;
use crate::harness::nats::{NatsServer, Secured};
use crate::harness::postgres::PgCluster;
use crate::harness::weft::WeftProcess;

/// One message read back from the stream.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub(crate) subject: String,
    pub(crate) msg_id: String,
    headers: Vec<(String, String)>,
    pub(crate) payload: Vec<u8>,
    /// When the server stored it, in Unix nanoseconds.
    stored_at: i128,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Creates stream `CDC` capturing `subjects`, deduplicating for 10 minutes.
pub(crate) fn create_stream(nats: &NatsServer, subjects: &[&str]) {
    runtime().block_on(async {
        let client = nats.client().await;
        jetstream::new(client)
            .create_stream(jetstream::stream::Config {
                name: "CDC".into(),
                subjects: subjects.iter().map(|s| s.to_string()).collect(),
                duplicate_window: Duration::from_secs(600),
                ..Default::default()
            })
            .await
            .unwrap();
    });
}

/// The test's JetStream stream `CDC`.
async fn cdc_stream(nats: &NatsServer) -> jetstream::stream::Stream {
    let client = nats.client().await;
    jetstream::new(client).get_stream("CDC").await.unwrap()
}

/// Every message in stream `CDC`, in stream order.
pub(crate) fn read_stream(nats: &NatsServer) -> Vec<Stored> {
    runtime().block_on(async {
        let mut stream = cdc_stream(nats).await;
        let state = stream.info().await.unwrap().state.clone();
        let mut all = Vec::new();
        for seq in state.first_sequence..=state.last_sequence {
            if state.messages == 0 {
                break;
            }
            let m = stream.get_raw_message(seq).await.unwrap();
            let mut headers = Vec::new();
            for (name, values) in m.headers.iter() {
                for value in values {
                    headers.push((name.to_string(), value.to_string()));
                }
            }
            let msg_id = m
                .headers
                .get("Nats-Msg-Id")
                .map(|v| v.to_string())
                .unwrap_or_default();
            all.push(Stored {
                subject: m.subject.to_string(),
                msg_id,
                headers,
                payload: m.payload.to_vec(),
                stored_at: m.time.unix_timestamp_nanos(),
            });
        }
        all
    })
}

/// Waits until the stream holds at least `count` messages, reading only
/// its count every 20 ms (reading them all, one request each, is slow
/// enough for weft to finish meanwhile; so is `wait_until`'s 200 ms).
fn wait_for_stream_count(nats: &NatsServer, count: u64, weft: &WeftProcess) {
    let what = format!("{count} messages in the stream");
    weft.wait_until_every(
        &what,
        Duration::from_secs(90),
        Duration::from_millis(20),
        || {
            let stored = runtime().block_on(async {
                let mut stream = cdc_stream(nats).await;
                stream.info().await.unwrap().state.messages
            });
            if stored >= count { Ok(()) } else { Err(stored) }
        },
    );
}

/// Waits until `stream` holds at least `count` messages on subjects
/// starting with `prefix`.
fn wait_for(nats: &NatsServer, prefix: &str, count: usize, weft: &WeftProcess) -> Vec<Stored> {
    weft.wait_until(
        &format!("{count} messages on {prefix}"),
        Duration::from_secs(90),
        || {
            let all: Vec<Stored> = read_stream(nats)
                .into_iter()
                .filter(|m| m.subject.starts_with(prefix))
                .collect();
            if all.len() >= count {
                Ok(all)
            } else {
                Err(all.len())
            }
        },
    )
}

/// Every message in the stream, once it holds `count` distinct
/// `Nats-Msg-Id`s (a redelivery JetStream did not drop counts once).
pub(crate) fn wait_for_distinct(
    nats: &NatsServer,
    count: usize,
    when: &str,
    weft: &WeftProcess,
) -> Vec<Stored> {
    weft.wait_until(
        &format!("{count} distinct messages {when}"),
        Duration::from_secs(120),
        || {
            let all = read_stream(nats);
            let unique = all
                .iter()
                .map(|m| m.msg_id.as_str())
                .collect::<HashSet<_>>()
                .len();
            if unique >= count {
                Ok(all)
            } else {
                Err(unique)
            }
        },
    )
}

fn config(pg: &PgCluster, nats: &NatsServer, sinks: &str) -> String {
    format!(
        r#"
{databases}functions:
  - name: bytes
    type: transform
    file: {transform}
  - name: subjects
    type: routing
    file: {routing}
    config: {{ keys: "subject,headers" }}
sinks:
  - name: items
    database: shop
    source: {{ include_tables: [public.items] }}
    max_memory_mb: 1
    destination:
      type: nats
      host: 127.0.0.1
      port: {nats_port}
      batch_size: 20
      max_in_flight: 4
      request_timeout_ms: 2000
      retry_backoff_base_ms: 50
      retry_backoff_max_ms: 500
{sinks}"#,
        databases = pg.databases_yaml("weft_nats"),
        nats_port = nats.port(),
        transform = guests::wasm("weft_hostile_transform").display(),
        routing = guests::wasm("weft_table_routing").display(),
    )
}

/// Per row id, the `v` of each message after dropping repeated
/// `Nats-Msg-Id`s, in stream order. Asserts each message's id is its
/// idempotency key, so that a duplicate always repeats its original's id.
pub(crate) fn rows(messages: &[Stored]) -> BTreeMap<i64, Vec<i64>> {
    let mut seen = HashSet::new();
    let mut rows: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for m in messages {
        let body: Value = serde_json::from_slice(&m.payload).unwrap();
        assert_eq!(
            body["metadata"]["idempotency_key"].as_str(),
            Some(m.msg_id.as_str()),
            "Nats-Msg-Id is the idempotency key: {body}"
        );
        if seen.insert(m.msg_id.clone()) {
            rows.entry(body["record"]["id"].as_i64().unwrap())
                .or_default()
                .push(body["record"]["v"].as_i64().unwrap());
        }
    }
    rows
}

fn write_rows(pg: &PgCluster, rows: i64, updates: i64) {
    write_rows_from(pg, 1, rows, updates);
}

/// Inserts rows `first` to `first + rows - 1` with `v = 0`, then updates
/// every row of the table `updates` times, to `v = 1`, `2`, ...
fn write_rows_from(pg: &PgCluster, first: i64, rows: i64, updates: i64) {
    pg.psql(&format!(
        "INSERT INTO items SELECT g, 0 FROM generate_series({first}, {}) g",
        first + rows - 1
    ));
    for v in 1..=updates {
        pg.psql(&format!("UPDATE items SET v = {v}"));
    }
}

fn assert_in_order(rows: &BTreeMap<i64, Vec<i64>>, count: i64, updates: i64) {
    assert_eq!(rows.len() as i64, count, "{rows:?}");
    for (id, vs) in rows {
        assert_eq!(vs, &(0..=updates).collect::<Vec<_>>(), "row {id}");
    }
}

#[test]
fn nats_jetstream_routes_orders_and_marks_every_message() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    pg.psql(r#"CREATE TABLE blobs (id int PRIMARY KEY, "do" text)"#);
    let nats = NatsServer::start();
    create_stream(&nats, &["sequin.>", "cdc.>"]);
    let routed = r#"
  - name: blobs
    database: shop
    source: { include_tables: [public.blobs] }
    transform: bytes
    routing: subjects
    destination:
      type: nats
      host: 127.0.0.1
      port: NATS_PORT
      request_timeout_ms: 2000
      retry_backoff_base_ms: 50
"#
    .replace("NATS_PORT", &nats.port().to_string());
    let (_dir, weft) =
        WeftProcess::start_replicating(&pg, "weft_nats", &config(&pg, &nats, &routed));

    const ROWS: i64 = 20;
    const UPDATES: i64 = 4;
    write_rows(&pg, ROWS, UPDATES);
    pg.psql(r#"INSERT INTO blobs VALUES (7, 'bytes')"#);

    let total = (ROWS * (UPDATES + 1)) as usize;
    let items = wait_for(&nats, "sequin.", total, &weft);
    let subjects: HashSet<&str> = items.iter().map(|m| m.subject.as_str()).collect();
    assert_eq!(
        subjects,
        HashSet::from([
            "sequin.shop.public.items.insert",
            "sequin.shop.public.items.update"
        ])
    );
    assert_in_order(&rows(&items), ROWS, UPDATES);
    assert_eq!(
        items.len(),
        total,
        "a healthy run publishes each change once"
    );

    // The routing function's subject and header; the transform's bytes,
    // byte-exact, with their content type.
    let blobs = wait_for(&nats, "cdc.", 1, &weft);
    assert_eq!(blobs[0].subject, "cdc.public.blobs.insert");
    assert_eq!(blobs[0].payload, vec![0u8, 1, 2, 255]);
    let header = |name: &str| {
        blobs[0]
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    assert_eq!(header("X-Table").as_deref(), Some("public.blobs"));
    assert_eq!(
        header("Content-Type").as_deref(),
        Some("application/octet-stream")
    );
    assert!(!blobs[0].msg_id.is_empty(), "Nats-Msg-Id on bytes too");
}

#[test]
fn nats_sigkill_mid_delivery_leaves_no_duplicate_in_the_stream() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    pg.psql(r#"CREATE TABLE blobs (id int PRIMARY KEY, "do" text)"#);
    let nats = NatsServer::start();
    create_stream(&nats, &["sequin.>"]);
    let (_dir, mut weft) =
        WeftProcess::start_replicating(&pg, "weft_nats", &config(&pg, &nats, ""));

    // Enough changes that weft is still delivering when it is killed.
    const ROWS: i64 = 1000;
    const UPDATES: i64 = 5;
    write_rows(&pg, ROWS, UPDATES);
    // Kill weft while deliveries are in flight: some messages published
    // (maybe acked by the stream) but not yet recorded as delivered.
    wait_for_stream_count(&nats, 100, &weft);
    weft.kill();
    let before = read_stream(&nats).len();
    let total = (ROWS * (UPDATES + 1)) as usize;
    assert!(before < total, "weft finished before the kill ({before})");
    weft.restart();
    let all = wait_for(&nats, "sequin.", total, &weft);
    std::thread::sleep(Duration::from_secs(1));
    let all_after = read_stream(&nats);
    assert_eq!(
        all_after.len(),
        total,
        "the stream holds exactly one message per change"
    );
    let ids: HashSet<&str> = all_after.iter().map(|m| m.msg_id.as_str()).collect();
    assert_eq!(ids.len(), total, "no Nats-Msg-Id repeats");
    assert_in_order(&rows(&all), ROWS, UPDATES);
    // The killed process's deliveries were in memory: the slot, not the
    // store, brought them back (nothing ever waited in the store).
    assert!(
        weft.stored_keys("items").is_empty(),
        "nothing was stored for a broker that acknowledged everything"
    );
}

/// A push sink's lane spills to the store while the broker is down, and
/// weft is killed twice in the middle of it: the changes the slot sends
/// again reach the store cut differently than the first time, and must
/// still all arrive, once each and in order per row, when the broker is
/// back. A trigger counts the changes written.
#[test]
fn nats_sigkill_while_the_lane_spills_loses_nothing() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    pg.psql(r#"CREATE TABLE blobs (id int PRIMARY KEY, "do" text)"#);
    pg.psql(
        "CREATE TABLE written (n bigserial PRIMARY KEY);
         CREATE FUNCTION count_write() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN INSERT INTO written DEFAULT VALUES; RETURN NULL; END $$;
         CREATE TRIGGER counted AFTER INSERT OR UPDATE ON items
           FOR EACH ROW EXECUTE FUNCTION count_write();",
    );
    let mut nats = NatsServer::start();
    create_stream(&nats, &["sequin.>"]);
    let (_dir, mut weft) =
        WeftProcess::start_replicating(&pg, "weft_nats", &config(&pg, &nats, ""));
    pg.psql("INSERT INTO items VALUES (0, 0)");
    wait_for(&nats, "sequin.", 1, &weft);
    nats.kill();

    let spilled = |weft: &WeftProcess| {
        weft.metric("weft_messages_spilled_total", &[("sink", "items")])
            .unwrap_or(0.0)
    };
    write_rows_from(&pg, 1, 1000, 5);
    for kill in 0..2 {
        weft.wait_until("the lane spilling", Duration::from_secs(60), || {
            let count = spilled(&weft);
            (count >= 500.0).then_some(()).ok_or(count)
        });
        weft.kill();
        weft.restart();
        if kill == 0 {
            // More changes while the first run's spills wait in the store.
            for _ in 0..3 {
                pg.psql("UPDATE items SET v = v + 100 WHERE id % 3 = 0");
            }
        }
    }
    nats.start_again();
    let written: usize = pg
        .psql("SELECT count(*) FROM written")
        .trim()
        .parse()
        .unwrap();
    let all = wait_for_distinct(&nats, written, "after the kills", &weft);
    let rows = rows(&all);
    assert_eq!(rows.len(), 1001);
    let last: BTreeMap<i64, i64> = pg
        .psql("SELECT id || ' ' || v FROM items")
        .lines()
        .map(|line| {
            let (id, v) = line.split_once(' ').unwrap();
            (id.parse().unwrap(), v.parse().unwrap())
        })
        .collect();
    for (id, vs) in &rows {
        // Every write raised v, so a row's values rise in commit order.
        assert!(
            vs.windows(2).all(|pair| pair[0] < pair[1]),
            "row {id}'s changes arrived out of order: {vs:?}"
        );
        assert_eq!(vs.last(), last.get(id), "row {id} ends as in Postgres");
    }
}

fn unix_nanos() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

#[test]
fn nats_missing_stream_and_broker_outage_lose_nothing_and_keep_order() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    pg.psql(r#"CREATE TABLE blobs (id int PRIMARY KEY, "do" text)"#);
    let mut nats = NatsServer::start();
    let (_dir, weft) = WeftProcess::start_replicating(&pg, "weft_nats", &config(&pg, &nats, ""));

    // No stream yet: publishes fail retriably with advice, then succeed
    // once the stream exists.
    const ROWS: i64 = 50;
    pg.psql(&format!(
        "INSERT INTO items SELECT g, 0 FROM generate_series(1, {ROWS}) g"
    ));
    weft.wait_for_log("no JetStream stream captures", Duration::from_secs(30));
    assert!(weft.log_text().contains("sequin.>"));
    create_stream(&nats, &["sequin.>"]);
    pg.psql("UPDATE items SET v = 1");
    wait_for(&nats, "sequin.", (ROWS * 2) as usize, &weft);

    // Outage: kill the broker, keep writing.
    nats.kill();
    let killed_at = unix_nanos();
    const UPDATES: i64 = 12;
    let mut peak_rss = 0;
    for v in 2..=UPDATES {
        pg.psql(&format!("UPDATE items SET v = {v}"));
        peak_rss = peak_rss.max(weft.rss_kib());
    }
    // Let the slot advance past the writes, then check the outbox covers
    // everything the slot confirmed that the broker did not store.
    let confirmed = pg.wait_for_slot_to_confirm_all("weft_nats");
    let outbox = weft.stored_keys("items");
    assert!(!outbox.is_empty(), "the outage's changes wait in the store");
    for _ in 0..10 {
        peak_rss = peak_rss.max(weft.rss_kib());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(peak_rss < 300 * 1024, "weft's RSS reached {peak_rss} KiB");

    nats.start_again();
    let total = (ROWS * (UPDATES + 1)) as usize;
    let all = wait_for_distinct(&nats, total, "after the outage", &weft);

    assert_in_order(&rows(&all), ROWS, UPDATES);
    for m in &all {
        let body: Value = serde_json::from_slice(&m.payload).unwrap();
        let lsn = body["metadata"]["commit_lsn"].as_u64().unwrap();
        if lsn < confirmed {
            assert!(
                m.stored_at < killed_at || outbox.contains(&m.msg_id),
                "change {} was confirmed to Postgres but neither delivered nor stored",
                m.msg_id
            );
        }
    }
    let log = weft.log_text();
    assert!(
        log.contains("not connected to NATS") || log.contains("cannot connect to NATS"),
        "deliveries failed retriably during the outage; log:\n{log}"
    );
    println!(
        "nats outage: peak weft RSS {peak_rss} KiB, {} messages in the outbox",
        outbox.len()
    );
}

#[test]
fn nats_core_mode_publishes_without_jetstream() {
    use futures::StreamExt;

    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    pg.psql(r#"CREATE TABLE blobs (id int PRIMARY KEY, "do" text)"#);
    let nats = NatsServer::start();
    // No stream: core publishes need none.
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Stored>::new()));
    let subscriber = runtime();
    let url = nats.url();
    let sink = std::sync::Arc::clone(&received);
    let mut subscription = subscriber.block_on(async {
        let client = async_nats::connect(url).await.unwrap();
        let subscription = client.subscribe("sequin.>").await.unwrap();
        client.flush().await.unwrap();
        (client, subscription)
    });
    let collector = std::thread::spawn(move || {
        subscriber.block_on(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
            while let Ok(Some(m)) = tokio::time::timeout_at(deadline, subscription.1.next()).await {
                let headers = m.headers.clone().unwrap_or_default();
                let stored = Stored {
                    subject: m.subject.to_string(),
                    msg_id: headers
                        .get("Nats-Msg-Id")
                        .map(|v| v.to_string())
                        .unwrap_or_default(),
                    headers: Vec::new(),
                    payload: m.payload.to_vec(),
                    stored_at: 0,
                };
                let body: Value = serde_json::from_slice(&stored.payload).unwrap();
                let mut all = sink.lock().unwrap();
                if body["metadata"]["consumer"]["name"] == "core" {
                    all.push(stored);
                }
                if all.len() >= 60 {
                    break;
                }
            }
        })
    });
    let core = format!(
        r#"
  - name: core
    database: shop
    source: {{ include_tables: [public.items] }}
    destination:
      type: nats
      host: 127.0.0.1
      port: {}
      jetstream: false
"#,
        nats.port()
    );
    let (_dir, weft) = WeftProcess::start_replicating(&pg, "weft_nats", &config(&pg, &nats, &core));
    write_rows(&pg, 20, 2);
    collector.join().unwrap();
    let all = received.lock().unwrap().clone();
    assert_eq!(all.len(), 60, "log:\n{}", weft.log_text());
    assert!(
        all.iter()
            .all(|m| m.subject.starts_with("sequin.shop.public.items."))
    );
    assert_in_order(&rows(&all), 20, 2);
}

#[test]
fn nats_starts_while_the_broker_is_down_and_names_bad_credentials() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    let mut nats = NatsServer::start_with_user(Some(("weft", "right-pass")));
    nats.kill();
    let sinks = format!(
        r#"
{databases}sinks:
  - name: good
    database: shop
    destination: {{ type: nats, host: 127.0.0.1, port: {port}, username: weft, password: right-pass, retry_backoff_base_ms: 50, retry_backoff_max_ms: 300 }}
  - name: bad
    database: shop
    destination: {{ type: nats, host: 127.0.0.1, port: {port}, username: weft, password: wrong-pass-41, retry_backoff_base_ms: 50, retry_backoff_max_ms: 300 }}
"#,
        databases = pg.databases_yaml("weft_nats"),
        port = nats.port()
    );
    let (_dir, weft) = WeftProcess::start_replicating(&pg, "weft_nats", &sinks);
    pg.psql("INSERT INTO items VALUES (1, 0)");
    let wait_log = |text: &str| weft.wait_for_log(text, Duration::from_secs(30));
    wait_log(&format!(
        "cannot connect to NATS at 127.0.0.1:{}",
        nats.port()
    ));

    nats.start_again();
    create_stream(&nats, &["sequin.>"]);
    let got = wait_for(&nats, "sequin.", 1, &weft);
    let body: Value = serde_json::from_slice(&got[0].payload).unwrap();
    assert_eq!(body["metadata"]["consumer"]["name"], "good");
    wait_log("refused the credentials");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        read_stream(&nats).len(),
        1,
        "the bad sink delivered nothing"
    );
    let log = weft.log_text();
    assert!(
        !log.contains("wrong-pass-41") && !log.contains("right-pass"),
        "a password reached the log"
    );
}

#[test]
fn nats_tls_verifies_the_server_and_an_nkey_authenticates() {
    let ca = TestCa::new("weft-nats-ca");
    let user = nkeys::KeyPair::new_user();
    let stranger = nkeys::KeyPair::new_user();
    let seed = user.seed().unwrap();
    let nats = NatsServer::start_secured(Secured {
        server: ca.issue_server("nats", &["IP:127.0.0.1", "DNS:localhost"]),
        ca: ca.cert(),
        seed: seed.clone(),
    });
    create_stream(&nats, &["sequin.>"]);
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)");
    let sink = |name: &str, extra: &str| {
        format!(
            "  - name: {name}\n    database: shop\n    destination: {{ type: nats, host: 127.0.0.1, port: {}, tls: true, request_timeout_ms: 2000, retry_backoff_base_ms: 100, retry_backoff_max_ms: 500, {extra} }}\n",
            nats.port()
        )
    };
    let ca_file = ca.cert().display().to_string();
    let config = format!(
        "{}sinks:\n{}{}{}",
        pg.databases_yaml("weft_nats_tls"),
        sink(
            "good",
            &format!("tls_ca_file: {ca_file}, nkey_seed: {seed}")
        ),
        sink("untrusting", &format!("nkey_seed: {seed}")),
        sink(
            "stranger",
            &format!(
                "tls_ca_file: {ca_file}, nkey_seed: {}",
                stranger.seed().unwrap()
            )
        ),
    );
    let (_dir, mut weft) = WeftProcess::start_replicating(&pg, "weft_nats_tls", &config);
    pg.psql("INSERT INTO items VALUES (1, 0)");

    let got = wait_for(&nats, "sequin.", 1, &weft);
    let body: Value = serde_json::from_slice(&got[0].payload).unwrap();
    assert_eq!(body["metadata"]["consumer"]["name"], "good");
    let port = nats.port();
    weft.wait_until(
        "a certificate refusal (without tls_ca_file) and a credentials refusal (unknown NKey)",
        Duration::from_secs(60),
        || {
            let log = weft.log_text();
            let untrusted = log.contains(&format!("TLS with NATS at 127.0.0.1:{port} failed"));
            let refused = log.contains("refused the credentials");
            if untrusted && refused {
                Ok(())
            } else {
                Err(format!("untrusted: {untrusted}, refused: {refused}"))
            }
        },
    );
    assert_eq!(read_stream(&nats).len(), 1, "only the good sink delivered");
    let log = weft.log_text();
    assert!(!log.contains(&seed), "an NKey seed reached the log");
    assert_eq!(weft.terminate(), Some(0));
}
