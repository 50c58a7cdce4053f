//! The even-id filter written in Rust, JavaScript, Python and C
//! (`examples/*/even-filter`, built by `scripts/build-examples.sh`) through
//! the real binary: one pull sink per language on the same table must
//! deliver the same changes in the same order and dead-letter the same
//! changes with the same reason. The edge cases of reading an integer `id`
//! from JSON text are checked through the host's plugin engine, where the
//! JavaScript filter differs only where docs/plugins.md says it does.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Map, Value};
use weft_core::change::Action;
use weft_core::lsn::Lsn;
use weft_core::message::{ConsumerRef, Message, Metadata, idempotency_key};
use weft_wasm::{EngineSettings, FunctionError, Limits, PluginEngine};

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
        r#"{databases}functions:
{functions}sinks:
{sinks}"#,
        databases = pg.databases_yaml(SLOT),
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
    let mut rows: Vec<(i64, String, String)> = weft
        .wait_for_dead_letters(sink, count, Duration::from_secs(60))
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
    rows
}

/// A compiled-component cache holding the four examples, compiled once per
/// test run by the engine weft itself uses (same settings, so the same
/// cache keys). The JS and Python components take seconds each to compile;
/// done here, that time does not count against the harness's wait for weft.
fn warm_cache() -> &'static Path {
    static CACHE: OnceLock<tempfile::TempDir> = OnceLock::new();
    CACHE
        .get_or_init(|| {
            let cache = tempfile::tempdir().unwrap();
            let engine = PluginEngine::new(EngineSettings::new(cache.path())).expect("engine");
            for (lang, path) in guests::even_filter_examples() {
                engine
                    .load_filter(lang, path, &BTreeMap::new(), &Limits::default())
                    .unwrap_or_else(|e| panic!("load the {lang} filter: {e}"));
            }
            cache
        })
        .path()
}

#[test]
fn the_even_filter_in_rust_js_python_and_c_agrees_through_the_binary() {
    let pg = PgCluster::start();
    // `id` is jsonb so that a row can carry an id of every JSON type.
    pg.psql("CREATE TABLE items (pk int PRIMARY KEY, id jsonb)");
    let dir = tempfile::tempdir().unwrap();
    // weft's cache lives in <data dir>/plugin-cache (see WeftProcess::start).
    let plugin_cache = dir.path().join("weft-data/plugin-cache");
    std::fs::create_dir_all(&plugin_cache).unwrap();
    for entry in std::fs::read_dir(warm_cache()).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), plugin_cache.join(entry.file_name())).unwrap();
    }
    let weft = WeftProcess::start(dir.path(), &config(&pg));
    pg.wait_for_active_slot(SLOT);
    assert!(
        !weft.log_text().contains("cached=false"),
        "weft compiled a component the test had cached:\n{}",
        weft.log_text()
    );

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

/// A message whose record is the JSON object `record` (kept as written:
/// numbers keep their text, e.g. `4.0`).
pub(crate) fn message(record: &str) -> Message {
    let record: Map<String, Value> = serde_json::from_str(record).expect("a JSON object");
    Message {
        record: record.into(),
        changes: None,
        action: Action::Insert,
        metadata: Metadata {
            table_schema: "public".into(),
            table_name: "items".into(),
            commit_timestamp: "2024-05-01T12:00:00.123456Z".into(),
            commit_lsn: Lsn(77),
            commit_idx: 0,
            idempotency_key: idempotency_key(Lsn(77), 0),
            record_pks: vec!["1".into()],
            database_name: "shop".into(),
            transaction_annotations: None,
            enrichment: None,
            webhook_source: None,
            consumer: ConsumerRef::for_sink("items"),
        },
    }
}

/// A filter's outcome for one change: keep or drop, or the error's reason.
type Outcome = Result<bool, &'static str>;

#[test]
fn the_four_filters_read_the_id_alike_and_js_differs_only_where_documented() {
    const NO_ID: &str = "record has no integer id";
    // (record, outcome in Rust/Python/C, outcome in JS when it differs)
    let cases: [(&str, Outcome, Option<Outcome>); 14] = [
        (r#"{}"#, Err(NO_ID), None),
        (r#"{"x": 2}"#, Err(NO_ID), None),
        (r#"{"id": "2"}"#, Err(NO_ID), None),
        (r#"{"id": [2]}"#, Err(NO_ID), None),
        (r#"{"note": "},\"id\": 2", "id": 3}"#, Ok(false), None),
        (
            r#"{"nested": {"id": 2}, "list": [1, {"id": 3}], "id": 5}"#,
            Ok(false),
            None,
        ),
        (r#"{"\u00efd": 1, "id": 8}"#, Ok(true), None),
        (r#"{"id": -0}"#, Ok(true), None),
        (r#"{"id": -7}"#, Ok(false), None),
        // 2^63 - 1 and -2^63: exact in 64 bits, not in a JS double.
        (
            r#"{"id": 9223372036854775807}"#,
            Ok(false),
            Some(Err(NO_ID)),
        ),
        (
            r#"{"id": -9223372036854775808}"#,
            Ok(true),
            Some(Err(NO_ID)),
        ),
        (r#"{"id": 9223372036854775808}"#, Err(NO_ID), None),
        // Integral values written as fractions or exponents: JSON.parse
        // cannot tell them from integers.
        (r#"{"id": 4.0}"#, Err(NO_ID), Some(Ok(true))),
        (r#"{"id": 1e2}"#, Err(NO_ID), Some(Ok(true))),
    ];
    let batch: Vec<Message> = cases.iter().map(|(record, _, _)| message(record)).collect();
    let engine = PluginEngine::new(EngineSettings::new(warm_cache())).expect("engine");
    for (lang, path) in guests::even_filter_examples() {
        let mut filter = engine
            .load_filter(lang, path, &BTreeMap::new(), &Limits::default())
            .unwrap_or_else(|e| panic!("load the {lang} filter: {e}"));
        let outcomes = filter.filter(&batch).expect("filter call");
        for ((record, expected, js), got) in cases.iter().zip(outcomes) {
            let expected = match js {
                Some(js) if *lang == "js" => js,
                _ => expected,
            };
            let got = got.map_err(|e| match e {
                FunctionError::Permanent(reason) => reason,
                FunctionError::Transient(reason) => format!("transient: {reason}"),
            });
            assert_eq!(
                got.as_ref().map_err(String::as_str),
                expected.as_ref().map_err(|e| *e),
                "{lang} on {record}"
            );
        }
    }
}
