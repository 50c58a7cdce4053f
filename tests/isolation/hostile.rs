//! Hostile guests through the real binary, next to a tenant that must not
//! notice them: components that loop forever, allocate without bound,
//! recurse without end, return a huge output, panic, return invalid
//! routing keys, or try to read files, the environment and the network.
//! Each failure stays with its change (a dead letter with a clear reason),
//! the host stays up, and a neighbouring tenant's throughput during the
//! attack stays within 20% of its throughput without it. The attacker and
//! the neighbour are two accounts: the attacker's functions burn CPU and
//! memory up to its account's limits (`plugin_timeout_ms`,
//! `plugin_memory_mb`), which is the noisy-neighbour case; its
//! `plugin_cpu_percent` (half a core) bounds how much CPU its guests take
//! over time, without which it kept a core busy and the neighbour once
//! read 0.74 of its quiet rate on a two-core machine. A throttled attacker
//! takes about two minutes to dead-letter its backlog.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::guests;
use crate::harness::postgres::PgCluster;
use crate::harness::weft::WeftProcess;

/// Rows the neighbour drains per measurement.
const NEIGHBOUR_ROWS: usize = 10_000;

/// Each hostile behaviour of the `hostile-transform` guest, and the words
/// its dead letter must carry.
const ATTACKS: &[(&str, &str)] = &[
    ("loop", "timed out"),
    ("alloc", "ran out of memory"),
    ("recurse", "trapped: wasm trap"),
    ("huge", "more than the 16 MiB"),
    ("panic", "panicked on purpose"),
];

fn config(pg: &PgCluster) -> String {
    format!(
        r#"accounts:
  - name: attacker
    limits: {{ plugin_timeout_ms: 1000, plugin_memory_mb: 64, max_plugin_instances: 2, plugin_cpu_percent: 50 }}
  - name: tenant
databases:
  - name: attacker
    account: attacker
    hostname: 127.0.0.1
    port: {port}
    database: attacker
    username: postgres
    slot: {{ name: attacker_slot, create_if_not_exists: true }}
    publication: {{ name: attacker_pub, create_if_not_exists: true }}
  - name: tenant
    account: tenant
    hostname: 127.0.0.1
    port: {port}
    database: tenant
    username: postgres
    slot: {{ name: tenant_slot, create_if_not_exists: true }}
    publication: {{ name: tenant_pub, create_if_not_exists: true }}
http_endpoints:
  - name: nowhere
    account: attacker
    url: http://127.0.0.1:9/
functions:
  - name: hostile
    account: attacker
    type: transform
    file: {hostile}
    limits: {{ timeout_ms: 1000, memory_mb: 64 }}
  - name: badroute
    account: attacker
    type: routing
    file: {routing}
    config: {{ keys: "topic" }}
sinks:
  - name: hostile
    account: attacker
    database: attacker
    transform: hostile
    quarantine_after_traps: 0
    destination: {{ type: sequin_stream }}
  - name: misrouted
    account: attacker
    database: attacker
    routing: badroute
    quarantine_after_traps: 0
    destination: {{ type: webhook, http_endpoint: nowhere }}
  - name: neighbour
    account: tenant
    database: tenant
    destination: {{ type: sequin_stream }}
"#,
        port = pg.port(),
        hostile = guests::wasm("weft_hostile_transform").display(),
        routing = guests::wasm("weft_table_routing").display(),
    )
}

/// Inserts `NEIGHBOUR_ROWS` rows for the neighbour and drains them;
/// returns messages per second.
fn neighbour_rate(pg: &PgCluster, weft: &WeftProcess, first_id: usize) -> f64 {
    let started = Instant::now();
    pg.psql_in(
        "tenant",
        &format!(
            "INSERT INTO events SELECT g, md5(g::text) FROM generate_series({first_id}, {}) g",
            first_id + NEIGHBOUR_ROWS - 1
        ),
    );
    let got = weft.drain("neighbour", NEIGHBOUR_ROWS, Duration::from_secs(120));
    assert_eq!(got.len(), NEIGHBOUR_ROWS, "log:\n{}", weft.log_text());
    NEIGHBOUR_ROWS as f64 / started.elapsed().as_secs_f64()
}

/// Until `stop`, commits one transaction a second with one attacking
/// row per behaviour and a snooping one; returns how many rows.
fn attack(pg: &PgCluster, stop: &AtomicBool) -> usize {
    let mut id = 0;
    while !stop.load(Ordering::Relaxed) {
        let rows: Vec<String> = ATTACKS
            .iter()
            .map(|(what, _)| *what)
            .chain(["snoop"])
            .map(|what| {
                id += 1;
                format!("({id}, '{what}')")
            })
            .collect();
        pg.psql_in(
            "attacker",
            &format!("INSERT INTO items VALUES {}", rows.join(", ")),
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    id
}

#[test]
fn hostile_guests_fail_alone_and_a_neighbouring_tenant_keeps_its_throughput() {
    let pg = PgCluster::start();
    pg.create_database("attacker");
    pg.create_database("tenant");
    pg.psql_in(
        "attacker",
        "CREATE TABLE items (id int PRIMARY KEY, \"do\" text)",
    );
    pg.psql_in(
        "tenant",
        "CREATE TABLE events (id int PRIMARY KEY, body text)",
    );
    let dir = tempfile::tempdir().unwrap();
    let weft = WeftProcess::start(dir.path(), &config(&pg));
    pg.wait_for_active_slot("attacker_slot");
    pg.wait_for_active_slot("tenant_slot");

    // Warm up, then measure the neighbour alone. Each side is the best of
    // three runs, so that a hiccup of a shared machine (another VM, the
    // page cache) does not pass for the attack's effect (best of two once
    // read 0.68 on the CI machine where reruns read 0.92-0.97).
    neighbour_rate(&pg, &weft, 1);
    let quiet = (1..=3)
        .map(|run| neighbour_rate(&pg, &weft, 1 + run * NEIGHBOUR_ROWS))
        .fold(0.0, f64::max);

    let stop = AtomicBool::new(false);
    let (under_attack, attack_rows) = std::thread::scope(|scope| {
        let attacking = scope.spawn(|| attack(&pg, &stop));
        // Let the attack get going before measuring.
        std::thread::sleep(Duration::from_secs(2));
        let under_attack = (4..=6)
            .map(|run| neighbour_rate(&pg, &weft, 1 + run * NEIGHBOUR_ROWS))
            .fold(0.0, f64::max);
        stop.store(true, Ordering::Relaxed);
        (under_attack, attacking.join().expect("the attack thread"))
    });
    eprintln!(
        "neighbour: {quiet:.0} msg/s alone, {under_attack:.0} msg/s under attack ({attack_rows} attacking rows)"
    );
    assert!(
        under_attack >= 0.8 * quiet,
        "the neighbour slowed from {quiet:.0} to {under_attack:.0} msg/s under attack"
    );

    // The attacker's calls waited for its CPU share.
    assert!(
        weft.metric(
            "weft_account_cpu_wait_milliseconds_total",
            &[("account", "attacker")]
        )
        .is_some_and(|waited| waited > 0.0),
        "the attacker was never throttled"
    );

    // The host is up and every attack is recorded with its reason.
    assert_eq!(weft.get_json("/health")["status"], "ok");
    let rounds = attack_rows / (ATTACKS.len() + 1);
    let waiting = Instant::now();
    let deadline = waiting + Duration::from_secs(300);
    let letters = loop {
        let listed = weft.get_json("/api/sinks/hostile/dead_letters?limit=1000");
        if listed["count"].as_u64().unwrap() as usize >= rounds * ATTACKS.len()
            || Instant::now() > deadline
        {
            break listed;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!(
        "the attacker's dead letters took {:?} after the attack",
        waiting.elapsed()
    );
    assert_eq!(
        letters["count"].as_u64().unwrap() as usize,
        rounds * ATTACKS.len(),
        "one dead letter per attacking row; log:\n{}",
        weft.log_text()
    );
    for letter in letters["data"].as_array().unwrap() {
        let what = letter["message"]["record"]["do"].as_str().unwrap();
        let (_, reason) = ATTACKS
            .iter()
            .find(|(attack, _)| *attack == what)
            .unwrap_or_else(|| panic!("a {what} row was dead-lettered: {letter}"));
        let error = letter["last_error"].as_str().unwrap();
        assert!(
            error.contains("transform function hostile") && error.contains(reason),
            "{what}: {error}"
        );
    }
    // The snooping rows went through and saw nothing.
    let snooped: Vec<Value> = weft.drain("hostile", rounds, Duration::from_secs(60));
    assert_eq!(snooped.len(), rounds);
    for seen in &snooped {
        assert!(
            seen["file"].as_str().unwrap().starts_with("error"),
            "{seen}"
        );
        assert!(seen["tcp"].as_str().unwrap().starts_with("error"), "{seen}");
        assert_eq!(
            (seen["env"].as_u64(), seen["home"].as_str()),
            (Some(0), None),
            "{seen}"
        );
    }
    // Every row got an invalid routing key on the webhook sink: dead letters,
    // nothing sent.
    let misrouted = weft.get_json("/api/sinks/misrouted/dead_letters?limit=1");
    assert_eq!(
        misrouted["count"].as_u64().unwrap() as usize,
        rounds * (ATTACKS.len() + 1)
    );
    assert!(
        misrouted["data"][0]["last_error"]
            .as_str()
            .unwrap()
            .contains("does not use the routing key `topic`"),
        "{misrouted}"
    );
}
