//! Changes a function traps on, through the real binary: bisection finds
//! exactly those changes and dead-letters them while the rest flow in
//! order; a replay runs them through the (fixed) function again; a
//! function that keeps trapping quarantines its sink, whose changes are
//! held (the slot still advances) until the quarantine is lifted.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;

use crate::harness::guests;
use crate::harness::postgres::PgCluster;
use crate::harness::weft::{WeftProcess, http};

const SLOT: &str = "weft_poison";

/// Two pull sinks on `items`: `poisoned` runs `transform` (a function
/// named `hostile` or `upcase`), `neighbour` runs none.
fn config(pg: &PgCluster, transform: &str, quarantine_after_traps: u32) -> String {
    format!(
        r#"{databases}functions:
  - name: hostile
    type: transform
    file: {hostile}
    limits: {{ timeout_ms: 500 }}
  - name: upcase
    type: transform
    file: {upcase}
    config: {{ column: do }}
sinks:
  - name: poisoned
    database: shop
    source: {{ include_tables: [public.items] }}
    transform: {transform}
    quarantine_after_traps: {quarantine_after_traps}
    destination: {{ type: sequin_stream, ack_wait_ms: 60000 }}
  - name: neighbour
    database: shop
    source: {{ include_tables: [public.items] }}
    destination: {{ type: sequin_stream, ack_wait_ms: 60000 }}
"#,
        databases = pg.databases_yaml(SLOT),
        hostile = guests::wasm("weft_hostile_transform").display(),
        upcase = guests::wasm("weft_upcase_transform").display(),
    )
}

/// The `id` column of each payload (the hostile transform echoes the
/// record; the upcase one keeps the message shape).
fn ids(payloads: &[Value]) -> Vec<i64> {
    payloads
        .iter()
        .map(|p| {
            p.get("record")
                .map_or(&p["id"], |record| &record["id"])
                .as_i64()
                .unwrap()
        })
        .collect()
}

#[test]
fn a_batch_of_1000_with_3_poison_changes_dead_letters_exactly_those_3() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, \"do\" text)");
    let (dir, mut weft) = WeftProcess::start_replicating(&pg, SLOT, &config(&pg, "hostile", 0));

    let poison = [100, 500, 900];
    pg.psql(
        "INSERT INTO items SELECT g, CASE WHEN g IN (100, 500, 900) THEN 'panic' ELSE 'echo' END \
         FROM generate_series(1, 1000) g",
    );
    let delivered = weft.drain("poisoned", 997, Duration::from_secs(120));
    let expected: Vec<i64> = (1..=1000).filter(|id| !poison.contains(id)).collect();
    assert_eq!(ids(&delivered), expected, "log:\n{}", weft.log_text());
    assert_eq!(
        weft.drain("neighbour", 1000, Duration::from_secs(60)).len(),
        1000,
        "the neighbour gets every change"
    );

    let letters = weft.get_json("/api/sinks/poisoned/dead_letters");
    assert_eq!(letters["count"], 3, "{letters}");
    let mut dead_ids = BTreeSet::new();
    for letter in letters["data"].as_array().unwrap() {
        assert_eq!(letter["stage"], "functions");
        let error = letter["last_error"].as_str().unwrap();
        assert!(
            error.contains("transform function hostile") && error.contains("panicked on purpose"),
            "{error}"
        );
        dead_ids.insert(letter["message"]["record"]["id"].as_i64().unwrap());
    }
    assert_eq!(dead_ids, poison.into_iter().collect());
    let metrics = http()
        .get(weft.url("/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("weft_function_failures_total")
                && l.contains("sink=\"poisoned\"")
                && l.contains("reason=\"trap\"")
                && l.ends_with(" 3")),
        "{metrics}"
    );
    // Every call that trapped, the whole batch's and the bisection's, is a
    // plugin trap; at least the three calls on a lone poison change.
    let plugin = [
        ("sink", "poisoned"),
        ("function", "hostile"),
        ("reason", "trap"),
    ];
    let traps = weft.metric("weft_plugin_traps_total", &plugin).unwrap();
    assert!(traps >= 3.0, "traps: {traps}");
    let calls = weft
        .metric("weft_plugin_calls_total", &plugin[..2])
        .unwrap();
    assert!(calls > traps, "calls {calls}, traps {traps}");
    // The slot moved past the whole transaction: nothing waits on the poison.
    pg.wait_for_slot_to_confirm_all(SLOT);

    // Fix the function (here: another component) and replay: the dead
    // letters run through the functions again and arrive, transformed.
    weft.terminate();
    std::fs::write(dir.path().join("weft.yml"), config(&pg, "upcase", 0)).unwrap();
    weft.restart();
    let replay = http()
        .post(weft.url("/api/sinks/poisoned/dead_letters/replay"))
        .send()
        .unwrap();
    assert_eq!(replay.status().as_u16(), 200);
    let replayed = weft.drain("poisoned", 3, Duration::from_secs(60));
    assert_eq!(ids(&replayed), poison.to_vec(), "log:\n{}", weft.log_text());
    for payload in &replayed {
        assert_eq!(payload["record"]["do"], "PANIC", "{payload}");
    }
    assert_eq!(
        weft.get_json("/api/sinks/poisoned/dead_letters")["count"],
        0
    );
}

#[test]
fn a_function_that_keeps_trapping_quarantines_its_sink_until_lifted() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, \"do\" text)");
    let (_dir, weft) = WeftProcess::start_replicating(&pg, SLOT, &config(&pg, "hostile", 2));

    pg.psql("INSERT INTO items VALUES (1, 'echo')");
    pg.psql("INSERT INTO items VALUES (2, 'panic')");
    pg.psql("INSERT INTO items VALUES (3, 'panic')");
    assert_eq!(
        ids(&weft.drain("poisoned", 1, Duration::from_secs(60))),
        [1]
    );
    let quarantine = weft.wait_until("the sink quarantined", Duration::from_secs(60), || {
        let quarantine = weft.get_json("/api/sinks/poisoned/quarantine");
        if quarantine["quarantined"] == true {
            Ok(quarantine)
        } else {
            Err(quarantine)
        }
    });
    assert_eq!(
        quarantine["quarantine"]["function"], "hostile",
        "{quarantine}"
    );
    let sink = weft
        .health_entity("sink", "poisoned")
        .unwrap_or_else(|| panic!("{}", weft.health()));
    assert_eq!(sink["status"], "error");
    assert!(
        sink["checks"][0]["message"]
            .as_str()
            .unwrap()
            .contains("quarantined"),
        "{sink}"
    );

    // While quarantined, changes are held, not delivered; the neighbour
    // and the slot go on.
    pg.psql("INSERT INTO items SELECT g, 'echo' FROM generate_series(4, 8) g");
    pg.psql("UPDATE items SET \"do\" = 'echo again' WHERE id = 4");
    assert_eq!(weft.drain("neighbour", 9, Duration::from_secs(60)).len(), 9);
    pg.wait_for_slot_to_confirm_all(SLOT);
    assert!(
        weft.receive("poisoned", 100, 1500).is_empty(),
        "a quarantined sink delivers nothing"
    );

    let lifted = http()
        .delete(weft.url("/api/sinks/poisoned/quarantine"))
        .send()
        .unwrap();
    assert_eq!(lifted.status().as_u16(), 200);
    // Held changes go through in order; the id 4 update follows its insert.
    let after = weft.drain("poisoned", 6, Duration::from_secs(60));
    assert_eq!(ids(&after), [4, 5, 6, 7, 8, 4], "log:\n{}", weft.log_text());
    assert_eq!(after[5]["do"], "echo again");
    assert_eq!(
        weft.get_json("/api/sinks/poisoned/quarantine")["quarantined"],
        false
    );
    // The two changes it trapped on are dead letters.
    assert_eq!(
        weft.get_json("/api/sinks/poisoned/dead_letters")["count"],
        2
    );
}
