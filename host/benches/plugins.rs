//! Per-message cost of WASM functions next to the same logic compiled
//! natively, in the same run; and start-up costs. Results and how to read
//! them: BENCHMARKS.md at the repository root.
//!
//! ```sh
//! cargo bench -p weft --bench plugins            # everything
//! cargo bench -p weft --bench plugins -- quick   # fewer rounds
//! cargo bench -p weft --bench plugins -- langs   # only the four-language filter
//! ```
//!
//! Guests are built with `scripts/build-guests.sh` first (the trivial
//! filter `host/tests/guests/insert-filter`, the JSON-rewriting transform
//! `examples/rust/upcase-transform`), and the four-language even-id filter
//! (`examples/*/even-filter`) with `scripts/build-examples.sh`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use weft_core::change::Action;
use weft_core::lsn::Lsn;
use weft_core::message::{ConsumerRef, Message, Metadata, idempotency_key};
use weft_wasm::{EngineSettings, Limits, PluginEngine};

const BATCH_SIZES: [usize; 4] = [1, 10, 100, 1000];

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let rounds = if quick { 3 } else { 7 };
    let round_time = Duration::from_millis(if quick { 150 } else { 400 });
    if std::env::args().any(|a| a == "langs") {
        print_header(rounds, round_time);
        languages(rounds, round_time);
        return;
    }
    let guests = build_guests();
    let filter_wasm = guests.join("weft_insert_filter.wasm");
    let transform_wasm = guests.join("weft_upcase_transform.wasm");

    let cache = tempfile::tempdir().expect("temp dir");
    let engine = PluginEngine::new(EngineSettings::new(cache.path())).expect("engine");
    let column = config(&[("column", "customer")]);
    let mut filter = engine
        .load_filter(
            "bench-filter",
            &filter_wasm,
            &config(&[]),
            &Limits::default(),
        )
        .expect("load filter");
    let mut transform = engine
        .load_transform(
            "bench-transform",
            &transform_wasm,
            &column,
            &Limits::default(),
        )
        .expect("load transform");

    print_header(rounds, round_time);
    println!();
    println!("| function | batch | WASM ns/msg | native ns/msg | ratio |");
    println!("|---|---:|---:|---:|---:|");
    for size in BATCH_SIZES {
        let batch: Vec<Message> = (0..size).map(sample).collect();
        let wasm = per_message(rounds, round_time, size, || {
            let outcomes = filter.filter(black_box(&batch)).expect("filter call");
            black_box(outcomes);
        });
        let native = per_message(rounds, round_time, size, || {
            let outcomes: Vec<Result<bool, ()>> = black_box(&batch)
                .iter()
                .map(|m| Ok(m.action == Action::Insert))
                .collect();
            black_box(outcomes);
        });
        row("trivial filter (keep inserts)", size, wasm, native);
    }
    // The same filter on a one-column row: what remains is the fixed cost
    // per change (metadata strings, outcome list), independent of row width.
    for size in [100, 1000] {
        let batch: Vec<Message> = (0..size)
            .map(|i| {
                let mut m = sample(i);
                m.record = json!({"id": i}).as_object().unwrap().clone().into();
                m
            })
            .collect();
        let wasm = per_message(rounds, round_time, size, || {
            black_box(filter.filter(black_box(&batch)).expect("filter call"));
        });
        let native = per_message(rounds, round_time, size, || {
            let outcomes: Vec<Result<bool, ()>> = black_box(&batch)
                .iter()
                .map(|m| Ok(m.action == Action::Insert))
                .collect();
            black_box(outcomes);
        });
        row("trivial filter, 1-column row", size, wasm, native);
    }
    for size in BATCH_SIZES {
        let batch: Vec<Message> = (0..size).map(sample).collect();
        let wasm = per_message(rounds, round_time, size, || {
            let outcomes = transform
                .transform(black_box(&batch))
                .expect("transform call");
            black_box(outcomes);
        });
        let native = per_message(rounds, round_time, size, || {
            let outcomes: Vec<Value> = black_box(&batch).iter().map(native_upcase).collect();
            black_box(outcomes);
        });
        row("JSON-rewriting transform (upcase)", size, wasm, native);
    }
    println!();
    println!("JSON-text share (native, no WASM): what crossing as JSON text costs per message");
    println!();
    println!("| step | ns/msg |");
    println!("|---|---:|");
    let batch: Vec<Message> = (0..100).map(sample).collect();
    let to_text = per_message(rounds, round_time, 100, || {
        let texts: Vec<String> = black_box(&batch)
            .iter()
            .map(|m| serde_json::to_string(&m.record).unwrap())
            .collect();
        black_box(texts);
    });
    println!("| host: record -> JSON text (every call, every kind) | {to_text:.0} |");
    let texts: Vec<String> = batch
        .iter()
        .map(|m| serde_json::to_string(&m.record).unwrap())
        .collect();
    let parse = per_message(rounds, round_time, 100, || {
        let rows: Vec<Map<String, Value>> = black_box(&texts)
            .iter()
            .map(|t| serde_json::from_str(t).unwrap())
            .collect();
        black_box(rows);
    });
    println!("| guest-side work done natively: parse the record text | {parse:.0} |");
    let messages: Vec<String> = batch
        .iter()
        .map(|m| serde_json::to_string(m).unwrap())
        .collect();
    let reparse = per_message(rounds, round_time, 100, || {
        let values: Vec<Value> = black_box(&messages)
            .iter()
            .map(|t| serde_json::from_str(t).unwrap())
            .collect();
        black_box(values);
    });
    println!("| host: parse a returned message JSON text | {reparse:.0} |");

    println!();
    println!("## start-up");
    println!();
    println!("| what | time |");
    println!("|---|---:|");
    let cold_dir = tempfile::tempdir().expect("temp dir");
    let cold_engine = PluginEngine::new(EngineSettings::new(cold_dir.path())).expect("engine");
    let started = Instant::now();
    let loaded = cold_engine
        .load_transform("cold", &transform_wasm, &column, &Limits::default())
        .expect("cold load");
    let cold = started.elapsed();
    drop(loaded);
    println!(
        "| cold start: compile ({} KiB component), pre-link, instantiate, init | {:.1} ms |",
        std::fs::metadata(&transform_wasm).unwrap().len() / 1024,
        cold.as_secs_f64() * 1e3
    );
    let mut cached = Vec::new();
    for _ in 0..rounds {
        // A new engine on the same cache dir, as after a restart.
        let warm_engine = PluginEngine::new(EngineSettings::new(cold_dir.path())).expect("engine");
        let started = Instant::now();
        let loaded = warm_engine
            .load_transform("cached", &transform_wasm, &column, &Limits::default())
            .expect("cached load");
        cached.push(started.elapsed());
        drop(loaded);
    }
    cached.sort();
    println!(
        "| cached start (new engine): load from the disk cache, pre-link, instantiate, init | {:.2} ms |",
        cached[cached.len() / 2].as_secs_f64() * 1e3
    );
    // Re-instantiation from the pre-linked component: a call that recycles
    // its instance afterwards, minus a plain call.
    let one = vec![sample(0)];
    let mut recycling = engine
        .load_filter(
            "bench-recycle",
            &filter_wasm,
            &config(&[]),
            &Limits {
                recycle_after_calls: Some(1),
                ..Limits::default()
            },
        )
        .expect("load filter");
    let with_new_instance = per_message(rounds, round_time, 1, || {
        black_box(recycling.filter(black_box(&one)).expect("call"));
    });
    let plain = per_message(rounds, round_time, 1, || {
        black_box(filter.filter(black_box(&one)).expect("call"));
    });
    println!(
        "| new instance from the pre-linked component (pooled), incl. `init` | {:.1} µs |",
        (with_new_instance - plain) / 1e3
    );
    println!();
    languages(rounds, round_time);
}

fn print_header(rounds: usize, round_time: Duration) {
    println!("# weft plugin benchmark");
    println!("machine: {}", machine());
    println!(
        "load average at start: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    println!(
        "row: {} bytes of record JSON, {} columns; median of {rounds} rounds of >= {:?}",
        serde_json::to_string(&sample(0).record).unwrap().len(),
        sample(0).record.to_map().len(),
        round_time
    );
}

/// The even-id filter of `examples/*/even-filter` in each language: the
/// per-message cost at each batch size next to the same logic natively, and
/// each component's size and start-up costs.
fn languages(rounds: usize, round_time: Duration) {
    let examples = build_examples();
    let cache = tempfile::tempdir().expect("temp dir");
    let engine = PluginEngine::new(EngineSettings::new(cache.path())).expect("engine");
    println!("## the even-id filter in four languages");
    println!();
    println!("Native: the same logic in Rust on the host's in-memory row (no JSON text).");
    println!();
    print!("| batch | native ns/msg |");
    for (lang, _) in &examples {
        print!(" {lang} ns/msg |");
    }
    println!();
    println!("|---:|---:|{}", "---:|".repeat(examples.len()));
    // The JavaScript guest outgrows the default 64 MiB at batches of 1000
    // (see BENCHMARKS.md); every language gets the engine's maximum here.
    let limits = Limits {
        memory_bytes: 256 << 20,
        ..Limits::default()
    };
    let mut filters: Vec<_> = examples
        .iter()
        .map(|(lang, path)| {
            engine
                .load_filter(&format!("even-{lang}"), path, &config(&[]), &limits)
                .unwrap_or_else(|e| panic!("load the {lang} filter: {e}"))
        })
        .collect();
    for size in BATCH_SIZES {
        let batch: Vec<Message> = (0..size).map(sample).collect();
        let native = per_message(rounds, round_time, size, || {
            let outcomes: Vec<Result<bool, &str>> =
                black_box(&batch).iter().map(native_even).collect();
            black_box(outcomes);
        });
        print!("| {size} | {native:.0} |");
        for filter in &mut filters {
            let outcomes = filter.filter(&batch).expect("filter call");
            assert!(
                outcomes
                    .iter()
                    .enumerate()
                    .all(|(i, o)| o.as_ref().ok() == Some(&(i % 2 == 0))),
                "{}: wrong outcomes",
                filter.name()
            );
            let wasm = per_message(rounds, round_time, size, || {
                black_box(filter.filter(black_box(&batch)).expect("filter call"));
            });
            print!(" {wasm:.0} |");
        }
        println!();
    }
    // The same batch of 100 with a 1-column row `{"id": i}`: the difference
    // to the 9-column row is what parsing the record costs in each language;
    // what remains is the crossing (13 strings and a list per change).
    let narrow: Vec<Message> = (0..100)
        .map(|i| {
            let mut m = sample(i);
            m.record = json!({"id": i}).as_object().unwrap().clone().into();
            m
        })
        .collect();
    let native = per_message(rounds, round_time, 100, || {
        let outcomes: Vec<Result<bool, &str>> =
            black_box(&narrow).iter().map(native_even).collect();
        black_box(outcomes);
    });
    print!("| 100, 1-column row | {native:.0} |");
    for filter in &mut filters {
        let wasm = per_message(rounds, round_time, 100, || {
            black_box(filter.filter(black_box(&narrow)).expect("filter call"));
        });
        print!(" {wasm:.0} |");
    }
    println!();
    println!();
    println!(
        "| language | component KiB | cold start: compile, pre-link, instantiate, init (ms) | cached start, new engine (ms) | new instance from pre-linked, incl. init (µs) |"
    );
    println!("|---|---:|---:|---:|---:|");
    let one = vec![sample(0)];
    for ((lang, path), filter) in examples.iter().zip(&mut filters) {
        let cold_dir = tempfile::tempdir().expect("temp dir");
        let cold_engine = PluginEngine::new(EngineSettings::new(cold_dir.path())).expect("engine");
        let started = Instant::now();
        drop(
            cold_engine
                .load_filter("cold", path, &config(&[]), &limits)
                .expect("cold load"),
        );
        let cold = started.elapsed();
        let mut cached = Vec::new();
        for _ in 0..rounds {
            let warm_engine =
                PluginEngine::new(EngineSettings::new(cold_dir.path())).expect("engine");
            let started = Instant::now();
            drop(
                warm_engine
                    .load_filter("cached", path, &config(&[]), &limits)
                    .expect("cached load"),
            );
            cached.push(started.elapsed());
        }
        cached.sort();
        let mut recycling = engine
            .load_filter(
                "recycle",
                path,
                &config(&[]),
                &Limits {
                    recycle_after_calls: Some(1),
                    ..limits.clone()
                },
            )
            .expect("load filter");
        let with_new_instance = per_message(rounds, round_time, 1, || {
            black_box(recycling.filter(black_box(&one)).expect("call"));
        });
        let plain = per_message(rounds, round_time, 1, || {
            black_box(filter.filter(black_box(&one)).expect("call"));
        });
        println!(
            "| {lang} | {} | {:.0} | {:.2} | {:.0} |",
            std::fs::metadata(path).unwrap().len() / 1024,
            cold.as_secs_f64() * 1e3,
            cached[cached.len() / 2].as_secs_f64() * 1e3,
            (with_new_instance - plain) / 1e3
        );
    }
    println!(
        "load average at end: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
}

/// The even-id filter natively: keep an even integer `id`, drop an odd one.
fn native_even(message: &Message) -> Result<bool, &'static str> {
    message
        .record
        .to_map()
        .get("id")
        .and_then(Value::as_i64)
        .map(|id| id % 2 == 0)
        .ok_or("record has no integer id")
}

/// Builds the four language examples with `scripts/build-examples.sh`;
/// returns `(language, component)` pairs.
fn build_examples() -> Vec<(&'static str, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let output = std::process::Command::new("bash")
        .arg(root.join("scripts/build-examples.sh"))
        .output()
        .expect("run scripts/build-examples.sh");
    assert!(
        output.status.success(),
        "scripts/build-examples.sh failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    ["rust", "js", "python", "c"]
        .into_iter()
        .zip(
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .map(PathBuf::from),
        )
        .collect()
}

fn row(name: &str, size: usize, wasm: f64, native: f64) {
    println!(
        "| {name} | {size} | {wasm:.0} | {native:.0} | {:.0}x |",
        wasm / native.max(0.001)
    );
}

/// Median over `rounds` of the per-message time of `run` (which handles
/// `size` messages), each round running it for at least `round_time`.
fn per_message(rounds: usize, round_time: Duration, size: usize, mut run: impl FnMut()) -> f64 {
    for _ in 0..3 {
        run();
    }
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        let mut calls = 0u64;
        while started.elapsed() < round_time {
            run();
            calls += 1;
        }
        samples.push(started.elapsed().as_nanos() as f64 / (calls as f64 * size as f64));
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// The upcase transform's logic, natively: upper-case `customer`, stamp the
/// record, build the message JSON.
fn native_upcase(message: &Message) -> Value {
    let mut edited = message.clone();
    if let Some(Value::String(text)) = edited.record.to_mut().get_mut("customer") {
        *text = text.to_uppercase();
    }
    edited
        .record
        .to_mut()
        .insert("transformed_by".into(), "weft-upcase".into());
    serde_json::to_value(&edited).expect("a message serialises")
}

/// A typical order row: 9 columns, numeric and jsonb included.
fn sample(i: usize) -> Message {
    let record = json!({
        "id": i,
        "customer": "ada lovelace",
        "email": "ada@example.com",
        "status": "paid",
        "total": serde_json::from_str::<Value>("1234.50").unwrap(),
        "currency": "EUR",
        "created_at": "2024-05-01T12:00:00.123456Z",
        "express": false,
        "address": {"street": "1 Analytical Way", "city": "London", "zip": "N1 9GU"},
    });
    let commit_lsn = Lsn(0x1_6B37_4D48 + i as u64);
    Message {
        record: record.as_object().unwrap().clone().into(),
        changes: None,
        action: Action::Insert,
        metadata: Metadata {
            table_schema: "public".into(),
            table_name: "orders".into(),
            commit_timestamp: "2024-05-01T12:00:00.123456Z".into(),
            commit_lsn,
            commit_idx: 0,
            idempotency_key: idempotency_key(commit_lsn, 0),
            record_pks: vec![i.to_string()],
            database_name: "shop".into(),
            transaction_annotations: None,
            enrichment: None,
            webhook_source: None,
            consumer: ConsumerRef::for_sink("orders"),
        },
    }
}

fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Builds the guests and returns the directory of their components.
fn build_guests() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let output = std::process::Command::new("bash")
        .arg(root.join("scripts/build-guests.sh"))
        .args(["weft-insert-filter", "weft-upcase-transform"])
        .output()
        .expect("run scripts/build-guests.sh");
    assert!(
        output.status.success(),
        "scripts/build-guests.sh failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let first = String::from_utf8_lossy(&output.stdout)
        .lines()
        .next()
        .expect("a component path")
        .to_string();
    PathBuf::from(first).parent().unwrap().to_path_buf()
}

/// `nproc` and the CPU model.
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cpus} CPUs, {model}")
}
