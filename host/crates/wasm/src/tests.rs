//! Tests against the real wasmtime and real guest components, built from the
//! workspace's guest crates by `scripts/build-guests.sh`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;
use crate::test_support::{config, engine, guest, message};
use weft_core::change::Action;
use weft_core::message::Message;

fn hostile(limits: &Limits) -> TransformFunction {
    engine()
        .load_transform(
            "hostile",
            &guest("weft-hostile-transform"),
            &config(&[("greeting", "hi")]),
            limits,
        )
        .expect("load hostile guest")
}

fn run(
    function: &mut TransformFunction,
    what: &str,
) -> Result<Vec<Result<Payload, FunctionError>>, PluginError> {
    function.transform(&[message(Action::Insert, json!({"id": 1, "do": what}), None)])
}

fn json_payload(outcome: &Result<Payload, FunctionError>) -> &Value {
    match outcome {
        Ok(Payload::Json(value)) => value,
        other => panic!("expected a JSON payload, got {other:?}"),
    }
}

/// The upcase example transform, upper-casing the `name` column.
fn upcase_name() -> TransformFunction {
    engine()
        .load_transform(
            "upcase",
            &guest("weft-upcase-transform"),
            &config(&[("column", "name")]),
            &Limits::default(),
        )
        .expect("load upcase")
}

#[test]
fn upcase_transform_edits_the_record_and_keeps_the_sequin_shape() {
    let mut upcase = upcase_name();
    // Parsed from text: a `json!` float literal would round through f64.
    let row = serde_json::from_str(
        r#"{"id": 1, "name": "ada", "balance": 12345678901234567890.123456789012}"#,
    )
    .unwrap();
    let insert = message(Action::Insert, row, None);
    let update = message(
        Action::Update,
        json!({"id": 2, "name": "grace"}),
        Some(json!({"name": "g"})),
    );
    let bad = message(Action::Insert, json!({"id": 3, "name": 42}), None);

    let outcomes = upcase
        .transform(&[insert.clone(), update.clone(), bad])
        .expect("transform");
    assert_eq!(outcomes.len(), 3);

    let mut expected = serde_json::to_value(&insert).unwrap();
    expected["record"]["name"] = json!("ADA");
    expected["record"]["transformed_by"] = json!("weft-upcase");
    assert_eq!(json_payload(&outcomes[0]), &expected);
    // numeric values cross the boundary digit for digit.
    assert_eq!(
        json_payload(&outcomes[0])["record"]["balance"].to_string(),
        "12345678901234567890.123456789012"
    );

    let mut expected = serde_json::to_value(&update).unwrap();
    expected["record"]["name"] = json!("GRACE");
    expected["record"]["transformed_by"] = json!("weft-upcase");
    assert_eq!(json_payload(&outcomes[1]), &expected);

    match &outcomes[2] {
        Err(FunctionError::Permanent(reason)) => {
            assert!(reason.contains("`name` is not a string"), "{reason}")
        }
        other => panic!("expected a permanent error, got {other:?}"),
    }
}

#[test]
fn changes_of_several_tables_in_one_batch_keep_their_own_table_and_database() {
    let mut upcase = upcase_name();
    let on = |schema: &str, table: &str, database: &str, id: i64| {
        let mut m = message(Action::Insert, json!({"id": id, "name": "x"}), None);
        m.metadata.table_schema = schema.into();
        m.metadata.table_name = table.into();
        m.metadata.database_name = database.into();
        m
    };
    // Relations are sent once per call; each change names its own by index.
    let batch = [
        on("public", "users", "app", 1),
        on("sales", "orders", "app", 2),
        on("public", "users", "app", 3),
        on("public", "users", "archive", 4),
    ];
    let outcomes = upcase.transform(&batch).expect("transform");
    for (input, outcome) in batch.iter().zip(&outcomes) {
        let metadata = &json_payload(outcome)["metadata"];
        assert_eq!(metadata, &serde_json::to_value(&input.metadata).unwrap());
    }
}

#[test]
fn a_component_built_against_another_wit_version_is_refused_with_both_versions() {
    // The same component, its `weft:plugin/types` import renamed to 0.1.0
    // (same length, so the binary stays valid).
    let current = format!("weft:plugin/types@{}", engine::WIT_VERSION);
    let mut bytes = std::fs::read(guest("weft-even-id-filter")).unwrap();
    let mut replaced = 0;
    for at in 0..bytes.len().saturating_sub(current.len()) {
        if bytes[at..].starts_with(current.as_bytes()) {
            bytes[at..at + current.len()].copy_from_slice(b"weft:plugin/types@0.1.0");
            replaced += 1;
        }
    }
    assert!(replaced > 0, "the component imports {current}");
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.wasm");
    std::fs::write(&old, &bytes).unwrap();

    let error = engine()
        .load_filter("old", &old, &BTreeMap::new(), &Limits::default())
        .expect_err("a 0.1.0 component is refused");
    assert!(
        matches!(&error, PluginError::WitVersion { built_for, .. } if built_for == "0.1.0"),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains("old.wasm")
            && text.contains("weft:plugin@0.1.0")
            && text.contains(&format!("weft:plugin@{}", engine::WIT_VERSION))
            && text.contains("rebuild"),
        "{text}"
    );
}

#[test]
fn init_error_names_the_missing_config_key() {
    let error = engine()
        .load_transform(
            "upcase",
            &guest("weft-upcase-transform"),
            &BTreeMap::new(),
            &Limits::default(),
        )
        .expect_err("load must fail without `column`");
    assert!(matches!(error, PluginError::Init { .. }), "{error:?}");
    let text = error.to_string();
    assert!(
        text.contains("upcase") && text.contains("missing config key `column`"),
        "{text}"
    );
}

#[test]
fn a_file_that_is_not_a_component_is_rejected_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let text_file = dir.path().join("notes.wasm");
    std::fs::write(&text_file, "hello").unwrap();
    let error = engine()
        .load_transform("notes", &text_file, &BTreeMap::new(), &Limits::default())
        .err()
        .unwrap();
    let text = error.to_string();
    assert!(
        text.contains("notes.wasm") && text.contains("not a WebAssembly file"),
        "{text}"
    );

    // The smallest valid core module: preamble only.
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let error = engine()
        .load_transform("core", &core, &BTreeMap::new(), &Limits::default())
        .err()
        .unwrap();
    let text = error.to_string();
    assert!(
        text.contains("core.wasm") && text.contains("core WebAssembly module, not a component"),
        "{text}"
    );

    let missing = dir.path().join("absent.wasm");
    let error = engine()
        .load_transform("absent", &missing, &BTreeMap::new(), &Limits::default())
        .err()
        .unwrap();
    assert!(
        matches!(error, PluginError::Read { .. }) && error.to_string().contains("absent.wasm"),
        "{error}"
    );
}

#[test]
fn a_component_of_another_world_names_the_missing_export() {
    let path = guest("weft-even-id-filter");
    let error = engine()
        .load_transform("evens", &path, &BTreeMap::new(), &Limits::default())
        .err()
        .unwrap();
    match &error {
        PluginError::WrongWorld { world, missing, .. } => {
            assert_eq!(*world, "transform");
            assert_eq!(missing, &vec!["transform".to_string()]);
        }
        other => panic!("expected WrongWorld, got {other:?}"),
    }
    let text = error.to_string();
    assert!(
        text.contains("weft_even_id_filter.wasm") && text.contains("missing export `transform`"),
        "{text}"
    );
}

#[test]
fn filter_keeps_drops_and_reports_errors_per_change() {
    let mut filter = engine()
        .load_filter(
            "evens",
            &guest("weft-even-id-filter"),
            &BTreeMap::new(),
            &Limits::default(),
        )
        .expect("load filter");
    let batch = [
        message(Action::Insert, json!({"id": 1}), None),
        message(Action::Insert, json!({"id": 2}), None),
        message(Action::Insert, json!({"name": "no id"}), None),
    ];
    let outcomes = filter.filter(&batch).expect("filter");
    assert_eq!(outcomes[0], Ok(false));
    assert_eq!(outcomes[1], Ok(true));
    assert_eq!(
        outcomes[2],
        Err(FunctionError::Permanent("row has no `id`".into()))
    );
}

#[test]
fn an_instance_is_reused_across_calls() {
    let mut function = hostile(&Limits::default());
    assert_eq!(
        json_payload(&run(&mut function, "count").unwrap()[0])["handled"],
        json!(1)
    );
    assert_eq!(
        json_payload(&run(&mut function, "count").unwrap()[0])["handled"],
        json!(2)
    );
}

#[test]
fn an_infinite_loop_times_out_and_the_next_call_gets_a_fresh_instance() {
    let limits = Limits {
        call_timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let mut function = hostile(&limits);
    run(&mut function, "count").unwrap();

    let started = Instant::now();
    let error = run(&mut function, "loop").expect_err("a loop must time out");
    let elapsed = started.elapsed();
    assert!(matches!(error, PluginError::Timeout { .. }), "{error:?}");
    assert!(
        elapsed >= Duration::from_millis(200) && elapsed < Duration::from_millis(1000),
        "took {elapsed:?}"
    );
    assert!(
        error.to_string().contains("plugin `hostile` timed out"),
        "{error}"
    );

    // A fresh instance: the count restarts and init ran again with the config.
    let outcome = run(&mut function, "count").expect("call after timeout");
    assert_eq!(
        json_payload(&outcome[0]),
        &json!({"handled": 1, "greeting": "hi"})
    );
}

#[test]
fn unbounded_allocation_hits_the_memory_cap() {
    let limits = Limits {
        memory_bytes: 16 << 20,
        ..Limits::default()
    };
    let mut function = hostile(&limits);
    let error = run(&mut function, "alloc").expect_err("allocation must fail");
    match &error {
        PluginError::OutOfMemory {
            limit, requested, ..
        } => {
            assert_eq!(*limit, 16 << 20);
            assert!(*requested > 16 << 20);
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    assert!(
        error
            .to_string()
            .contains("plugin `hostile` ran out of memory"),
        "{error}"
    );
    assert_eq!(
        json_payload(&run(&mut function, "count").unwrap()[0])["handled"],
        json!(1)
    );
}

#[test]
fn a_panic_is_a_trap_carrying_the_panic_message() {
    let mut function = hostile(&Limits::default());
    let error = run(&mut function, "panic").expect_err("a panic must trap");
    match &error {
        PluginError::Trap { guest_stderr, .. } => {
            let stderr = guest_stderr.as_deref().unwrap_or_default();
            assert!(
                stderr.contains("hostile guest panicked on purpose"),
                "{stderr}"
            );
        }
        other => panic!("expected Trap, got {other:?}"),
    }
    assert!(
        error
            .to_string()
            .contains("hostile guest panicked on purpose"),
        "{error}"
    );
    assert_eq!(
        json_payload(&run(&mut function, "count").unwrap()[0])["handled"],
        json!(1)
    );
}

#[test]
fn instantiating_a_guest_again_after_a_trap_counts_against_the_accounts_cpu_share() {
    // 1% of a core pays off almost nothing during the test, so the debt
    // is the CPU the guest used.
    let share = CpuShare::new("crash-looping", 0.01);
    let mut function = engine()
        .load_transform(
            "hostile",
            &guest("weft-hostile-transform"),
            &config(&[("init_spin", "20")]),
            &Limits {
                cpu_share: Some(share.clone()),
                call_timeout: Duration::from_secs(30),
                ..Limits::default()
            },
        )
        .expect("load hostile guest");
    let after_load = share.owed();
    assert!(
        after_load >= Duration::from_millis(2),
        "the first instance's init is charged: {after_load:?}"
    );
    run(&mut function, "panic").expect_err("a panic traps");
    let after_trap = share.owed();
    // The next call waits for the debt (it is over the burst only if the
    // machine is slow), instantiates afresh, and pays for that init too.
    run(&mut function, "count").expect("a fresh instance after the trap");
    let after_restart = share.owed();
    assert!(
        after_restart >= after_trap + after_load / 4,
        "the second init is charged: {after_load:?} at load, {after_trap:?} after the trap, {after_restart:?} after the restart"
    );
}

#[test]
fn the_sandbox_grants_no_files_env_args_or_network() {
    let mut function = hostile(&Limits::default());
    let seen = json_payload(&run(&mut function, "snoop").unwrap()[0]).clone();
    assert!(
        seen["file"].as_str().unwrap().starts_with("error"),
        "{seen}"
    );
    assert!(seen["dir"].as_str().unwrap().starts_with("error"), "{seen}");
    assert!(seen["tcp"].as_str().unwrap().starts_with("error"), "{seen}");
    assert_eq!(seen["env"], json!(0), "{seen}");
    assert_eq!(seen["home"], Value::Null, "{seen}");
    assert_eq!(seen["args"], json!(0), "{seen}");
    assert_eq!(seen["now_ok"], json!(true), "clocks are granted: {seen}");
}

#[test]
fn deep_recursion_is_a_trap_and_the_host_stack_is_untouched() {
    let mut function = hostile(&Limits::default());
    let error = run(&mut function, "recurse").expect_err("the guest's stack runs out");
    // A Rust guest's shadow stack lives in linear memory: running out of it
    // is an out-of-bounds access; wasm's own call stack would be
    // "call stack exhausted". Either way a trap, and the host goes on.
    assert!(matches!(error, PluginError::Trap { .. }), "{error:?}");
    assert!(error.to_string().contains("trapped: wasm trap"), "{error}");
    run(&mut function, "count").expect("a fresh instance after the trap");
}

#[test]
fn an_output_over_the_cap_fails_only_that_change() {
    // Building 16 MiB takes a while on a loaded machine; this test is about
    // the output cap, not the CPU deadline.
    let mut function = hostile(&Limits {
        call_timeout: Duration::from_secs(10),
        ..Limits::default()
    });
    let outcomes = function
        .transform(&[
            message(Action::Insert, json!({"id": 1, "do": "huge"}), None),
            message(Action::Insert, json!({"id": 2, "do": "echo"}), None),
        ])
        .expect("the call itself succeeds");
    match &outcomes[0] {
        Err(FunctionError::Permanent(reason)) => {
            assert!(reason.contains("more than the 16 MiB"), "{reason}")
        }
        other => panic!("expected a permanent error, got {other:?}"),
    }
    assert!(outcomes[1].is_ok());
}

#[test]
fn bytes_payloads_and_guest_errors_map_to_host_types() {
    let mut function = hostile(&Limits::default());
    let batch = [
        message(Action::Insert, json!({"do": "bytes"}), None),
        message(Action::Insert, json!({"do": "fail"}), None),
        message(Action::Insert, json!({"do": "retry"}), None),
        message(Action::Insert, json!({"do": "print"}), None),
    ];
    let outcomes = function.transform(&batch).unwrap();
    assert_eq!(
        outcomes[0],
        Ok(Payload::Bytes {
            content_type: "application/octet-stream".into(),
            data: vec![0, 1, 2, 255]
        })
    );
    assert_eq!(outcomes[1], Err(FunctionError::Permanent("bad row".into())));
    assert_eq!(
        outcomes[2],
        Err(FunctionError::Transient("try later".into()))
    );
    assert_eq!(outcomes[3], Ok(Payload::Json(json!("printed"))));
}

#[test]
fn limits_above_the_engine_bounds_are_rejected() {
    let limits = Limits {
        memory_bytes: usize::MAX,
        ..Limits::default()
    };
    let error = engine()
        .load_transform(
            "greedy",
            &guest("weft-hostile-transform"),
            &BTreeMap::new(),
            &limits,
        )
        .err()
        .unwrap();
    assert!(
        matches!(error, PluginError::Settings(_)) && error.to_string().contains("greedy"),
        "{error}"
    );
}

#[test]
fn compiled_components_are_cached_on_disk_and_bad_entries_are_replaced() {
    let cache = tempfile::tempdir().unwrap();
    let settings = || {
        let mut settings = EngineSettings::new(cache.path());
        settings.max_instances = 4;
        settings
    };
    let path = guest("weft-upcase-transform");
    let cfg = config(&[("column", "name")]);
    let batch = [message(Action::Insert, json!({"name": "x"}), None)];

    let first = PluginEngine::new(settings()).unwrap();
    first
        .load_transform("upcase", &path, &cfg, &Limits::default())
        .unwrap();
    let entries: Vec<PathBuf> = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].extension().unwrap(), "cwasm");
    let modified = std::fs::metadata(&entries[0]).unwrap().modified().unwrap();

    // A second engine with the same settings loads the entry as is.
    let second = PluginEngine::new(settings()).unwrap();
    let mut upcase = second
        .load_transform("upcase", &path, &cfg, &Limits::default())
        .unwrap();
    assert_eq!(
        json_payload(&upcase.transform(&batch).unwrap()[0])["record"]["name"],
        json!("X")
    );
    assert_eq!(
        std::fs::metadata(&entries[0]).unwrap().modified().unwrap(),
        modified
    );

    // A corrupt entry is recompiled and replaced. (Written aside and renamed
    // over: the live entry is memory-mapped by `upcase`, and truncating a
    // mapped file in place would crash this process with SIGBUS.)
    let garbage = cache.path().join("garbage");
    std::fs::write(&garbage, b"garbage").unwrap();
    std::fs::rename(&garbage, &entries[0]).unwrap();
    let third = PluginEngine::new(settings()).unwrap();
    let mut upcase = third
        .load_transform("upcase", &path, &cfg, &Limits::default())
        .unwrap();
    assert_eq!(
        json_payload(&upcase.transform(&batch).unwrap()[0])["record"]["name"],
        json!("X")
    );
    assert!(std::fs::metadata(&entries[0]).unwrap().len() > 1000);
}

#[test]
fn engines_and_functions_can_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<PluginEngine>();
    send::<TransformFunction>();
    send::<FilterFunction>();
    let engine = engine().clone();
    let path = guest("weft-upcase-transform");
    let mut upcase = std::thread::spawn(move || {
        engine
            .load_transform(
                "upcase",
                &path,
                &config(&[("column", "name")]),
                &Limits::default(),
            )
            .unwrap()
    })
    .join()
    .unwrap();
    let outcome = upcase
        .transform(&[message(Action::Insert, json!({"name": "x"}), None)])
        .unwrap();
    assert_eq!(json_payload(&outcome[0])["record"]["name"], json!("X"));
}

/// Rough numbers for the report, not a benchmark:
/// `cargo test -p weft-wasm --release --lib tests::measure -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure() {
    let path = guest("weft-upcase-transform");
    let cache = tempfile::tempdir().unwrap();
    let cfg = config(&[("column", "name")]);
    let settings = || {
        let mut settings = EngineSettings::new(cache.path());
        settings.max_instances = 4;
        settings
    };
    let cold_engine = PluginEngine::new(settings()).unwrap();
    let started = Instant::now();
    cold_engine
        .load_transform("upcase", &path, &cfg, &Limits::default())
        .unwrap();
    let cold = started.elapsed();
    let warm_engine = PluginEngine::new(settings()).unwrap();
    let started = Instant::now();
    let mut upcase = warm_engine
        .load_transform("upcase", &path, &cfg, &Limits::default())
        .unwrap();
    let cached = started.elapsed();
    println!("load: cold compile {cold:?}, cached {cached:?}");

    let batch: Vec<Message> = (0..100)
        .map(|i| {
            message(
                Action::Insert,
                json!({"id": i, "name": format!("user {i}"), "email": format!("u{i}@example.com"),
                       "balance": "1234.5600", "created_at": "2024-05-01T12:00:00Z", "active": true}),
                None,
            )
        })
        .collect();
    for _ in 0..20 {
        upcase.transform(&batch).unwrap();
    }
    let rounds = 200;
    let started = Instant::now();
    for _ in 0..rounds {
        upcase.transform(&batch).unwrap();
    }
    let per_message = started.elapsed() / (rounds * batch.len() as u32);
    println!("upcase at batch 100: {per_message:?} per message");
    let started = Instant::now();
    for _ in 0..rounds {
        for message in &batch {
            serde_json::to_value(message).unwrap();
        }
    }
    println!(
        "host-only baseline (message to JSON value): {:?} per message",
        started.elapsed() / (rounds * batch.len() as u32)
    );

    // Where the time goes: the hostile guest's `count` parses the record and
    // returns a tiny JSON; its echo also serializes the record back.
    let mut hostile = warm_engine
        .load_transform(
            "hostile",
            &guest("weft-hostile-transform"),
            &BTreeMap::new(),
            &Limits::default(),
        )
        .unwrap();
    for what in ["count", "echo"] {
        let batch: Vec<Message> = batch
            .iter()
            .map(|m| {
                let mut m = m.clone();
                m.record.to_mut().insert("do".into(), json!(what));
                m
            })
            .collect();
        hostile.transform(&batch).unwrap();
        let started = Instant::now();
        for _ in 0..rounds {
            hostile.transform(&batch).unwrap();
        }
        println!(
            "hostile `{what}` at batch 100: {:?} per message",
            started.elapsed() / (rounds * batch.len() as u32)
        );
    }
}

#[test]
fn an_exhausted_instance_pool_is_reported_as_such() {
    let cache = tempfile::tempdir().unwrap();
    let mut settings = EngineSettings::new(cache.path());
    settings.max_instances = 1;
    let engine = PluginEngine::new(settings).unwrap();
    assert_eq!(engine.allocation(), Allocation::Pooled);
    let path = guest("weft-upcase-transform");
    let cfg = config(&[("column", "name")]);
    let _first = engine
        .load_transform("first", &path, &cfg, &Limits::default())
        .unwrap();
    let error = engine
        .load_transform("second", &path, &cfg, &Limits::default())
        .unwrap_err();
    assert!(
        matches!(error, PluginError::Instantiate { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("max_instances"), "{error}");
}

fn raw(mode: &str, limits: &Limits) -> Result<TransformFunction, PluginError> {
    engine().load_transform(
        "raw",
        &guest("weft-raw-transform"),
        &config(&[("mode", mode)]),
        limits,
    )
}

#[test]
fn a_wrong_number_of_outcomes_fails_the_call() {
    let mut function = raw("short", &Limits::default()).unwrap();
    let batch = [
        message(Action::Insert, json!({"id": 1}), None),
        message(Action::Insert, json!({"id": 2}), None),
    ];
    let error = function.transform(&batch).unwrap_err();
    assert!(
        matches!(
            error,
            PluginError::OutcomeCount {
                expected: 2,
                got: 1,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("returned 1 outcomes for a batch of 2"),
        "{error}"
    );
}

#[test]
fn invalid_json_from_the_guest_fails_the_call() {
    let mut function = raw("bad-json", &Limits::default()).unwrap();
    let error = function
        .transform(&[message(Action::Insert, json!({"id": 1}), None)])
        .unwrap_err();
    assert!(
        matches!(error, PluginError::InvalidJson { index: 0, .. }),
        "{error:?}"
    );
}

#[test]
fn a_looping_init_times_out_at_load() {
    let limits = Limits {
        call_timeout: Duration::from_millis(100),
        ..Limits::default()
    };
    let error = raw("init-loop", &limits).unwrap_err();
    assert!(matches!(error, PluginError::Timeout { .. }), "{error:?}");
}

/// The pipeline calls from `spawn_blocking`; WASI's blocking output enters
/// the ambient tokio runtime, which works there (not on a worker thread).
#[test]
fn calls_work_from_spawn_blocking_and_guest_output_does_not_block() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut function = hostile(&Limits::default());
    let outcomes = runtime
        .block_on(
            async move { tokio::task::spawn_blocking(move || run(&mut function, "print")).await },
        )
        .expect("join")
        .expect("transform");
    assert_eq!(outcomes[0], Ok(Payload::Json(json!("printed"))));
}
