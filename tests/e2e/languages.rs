//! The even-id filter written in Rust, JavaScript, Python and C
//! (`examples/*/even-filter`, built by `scripts/build-examples.sh`) through
//! the real binary: one pull sink per language on the same table must
//! deliver the same changes in the same order and dead-letter the same
//! changes with the same reason.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::guests;
use crate::harness::postgres::PgCluster;
use crate::harness::weft::WeftProcess;

const SLOT: &str = "weft_langs";

fn config(pg: &PgCluster) -> String {
    let mut functions = String::new();
    let mut sinks = String::new();
    for (lang, path) in guests::even_filter_examples() {
        functions.push_str(&format!(
            "  - name: even_{lang}\n    type: filter\n    file: {}\n",
            path.display()
        ));
        sinks.push_str(&format!(
            "  - name: items_{lang}\n    database: shop\n    source: {{ include_tables: [public.items] }}\n    filter: even_{lang}\n    destination: {{ type: sequin_stream, ack_wait_ms: 5000 }}\n"
        ));
    }
    format!(
        r#"
databases:
  - name: shop
    hostname: 127.0.0.1
    port: {port}
    database: postgres
    username: postgres
    slot: {{ name: {SLOT}, create_if_not_exists: true }}
    publication: {{ name: {SLOT}, create_if_not_exists: true }}
functions:
{functions}sinks:
{sinks}"#,
        port = pg.port(),
    )
}

/// `(pk, id)` of each delivered message, in delivery order.
fn delivered(messages: &[Value]) -> Vec<(i64, Value)> {
    messages
        .iter()
        .map(|m| {
            (
                m["record"]["pk"].as_i64().unwrap(),
                m["record"]["id"].clone(),
            )
        })
        .collect()
}

/// `(pk, stage, error)` of each dead letter of `sink`, sorted by pk, once
/// `count` are there; the function's name in the error is replaced by `F`.
fn dead_letters(
    weft: &WeftProcess,
    sink: &str,
    function: &str,
    count: usize,
) -> Vec<(i64, String, String)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let letters = weft.get_json(&format!("/api/sinks/{sink}/dead_letters?limit=1000"));
        let data = letters["data"].as_array().cloned().unwrap_or_default();
        if data.len() >= count || Instant::now() > deadline {
            let mut rows: Vec<(i64, String, String)> = data
                .iter()
                .map(|letter| {
                    (
                        letter["message"]["record"]["pk"].as_i64().unwrap(),
                        letter["stage"].as_str().unwrap_or_default().to_string(),
                        letter["last_error"]
                            .as_str()
                            .unwrap_or_default()
                            .replace(function, "F"),
                    )
                })
                .collect();
            rows.sort();
            return rows;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_even_filter_in_rust_js_python_and_c_agrees_through_the_binary() {
    let pg = PgCluster::start();
    // `id` is jsonb so that a row can carry an id of every JSON type.
    pg.psql("CREATE TABLE items (pk int PRIMARY KEY, id jsonb)");
    let dir = tempfile::tempdir().unwrap();
    let weft = WeftProcess::start(dir.path(), &config(&pg));
    pg.wait_for_active_slot(SLOT);

    pg.psql(
        "INSERT INTO items VALUES (1, '1'), (2, '2'), (3, '-4'), (4, '-3'), (5, NULL), \
         (6, '\"8\"'), (7, '2.5'), (8, 'true'), (9, '9007199254740990'), \
         (10, '{\"id\": 4}'), (11, '10'), (12, '0')",
    );
    // A larger transaction, so that the functions see batches of many.
    pg.psql("INSERT INTO items SELECT g, to_jsonb(g) FROM generate_series(100, 300) g");
    pg.psql("UPDATE items SET id = '6' WHERE pk = 1");

    let mut expected_pks = vec![2, 3, 9, 11, 12];
    expected_pks.extend((100..=300).filter(|pk| pk % 2 == 0));
    expected_pks.push(1);
    let expected_dead: Vec<(i64, String, String)> = [5, 6, 7, 8, 10]
        .into_iter()
        .map(|pk| {
            (
                pk,
                "functions".to_string(),
                "filter function F: record has no integer id".to_string(),
            )
        })
        .collect();

    let mut results = Vec::new();
    for (lang, _) in guests::even_filter_examples() {
        let sink = format!("items_{lang}");
        let got = delivered(&weft.drain(&sink, expected_pks.len(), Duration::from_secs(120)));
        let dead = dead_letters(&weft, &sink, &format!("even_{lang}"), expected_dead.len());
        let pks: Vec<i64> = got.iter().map(|(pk, _)| *pk).collect();
        assert_eq!(
            pks,
            expected_pks,
            "{lang}: delivered\nlog:\n{}",
            weft.log_text()
        );
        assert_eq!(dead, expected_dead, "{lang}: dead letters");
        results.push((lang, got, dead));
    }
    // Nothing more arrives on any sink.
    for (lang, _) in guests::even_filter_examples() {
        assert!(
            weft.receive(&format!("items_{lang}"), 100, 500).is_empty(),
            "{lang} delivered more"
        );
    }
    let (first, got, dead) = &results[0];
    for (lang, other_got, other_dead) in &results[1..] {
        assert_eq!(other_got, got, "{lang} and {first} delivered differently");
        assert_eq!(
            other_dead, dead,
            "{lang} and {first} dead-lettered differently"
        );
    }
}
