//! `weft plugin new` and `weft plugin build` through the real binary: a
//! filter scaffolded in each language is built and run through weft on the
//! same table, and must deliver exactly the same messages (every change but
//! deletes, the templates' default); the scaffolded transforms must produce
//! the same payload. Bad input is refused with a clear error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};
use weft_wasm::{EngineSettings, Grants, Limits, Payload, PluginEngine};

use crate::harness::guests::{self, EXAMPLE_LANGUAGES};
use crate::harness::postgres::PgCluster;
use crate::harness::weft::WeftProcess;

const SLOT: &str = "weft_scaffold";

/// The build cache of this test run (as in harness::guests).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// Runs `weft plugin ARGS...` with the toolchain `scripts/build-examples.sh`
/// installed, and Rust projects built in a target dir of their own (not
/// the one `cargo test` holds a lock on).
fn weft_plugin(args: &[&str]) -> Output {
    let target = target_dir();
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("plugin")
        .args(args)
        .env("CARGO_TARGET_DIR", target.join("scaffold"))
        .env(
            "WEFT_PLUGIN_TOOLCHAIN",
            target.join("examples/toolchain.env"),
        )
        .output()
        .expect("run weft")
}

/// stdout of a `weft plugin` run that must succeed.
fn ok(args: &[&str]) -> String {
    let output = weft_plugin(args);
    assert!(
        output.status.success(),
        "weft plugin {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// Scaffolds and builds a `kind` project in every language under `root`;
/// returns `(language, component)`.
fn scaffold_all(root: &Path, kind: &str) -> Vec<(&'static str, PathBuf)> {
    // Installs the pinned toolchains and writes toolchain.env.
    guests::even_filter_examples();
    EXAMPLE_LANGUAGES
        .into_iter()
        .map(|lang| {
            let dir = root.join(format!("{kind}-{lang}"));
            let name = format!("scaffolded-{lang}");
            let made = ok(&[
                "new",
                "--lang",
                lang,
                "--kind",
                kind,
                "--dir",
                dir.to_str().unwrap(),
                &name,
            ]);
            assert_eq!(made, dir.display().to_string());
            let wasm = ok(&["build", dir.to_str().unwrap()]);
            assert_eq!(PathBuf::from(&wasm), dir.join(format!("{name}.wasm")));
            (lang, PathBuf::from(wasm))
        })
        .collect()
}

#[test]
fn a_scaffolded_filter_in_each_language_builds_and_runs_through_weft() {
    let dir = tempfile::tempdir().unwrap();
    let filters = scaffold_all(dir.path(), "filter");
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (pk int PRIMARY KEY, name text)");
    let mut functions = String::new();
    let mut sinks = String::new();
    for (lang, path) in &filters {
        functions.push_str(&format!(
            "  - name: mine_{lang}\n    type: filter\n    file: {}\n",
            path.display()
        ));
        sinks.push_str(&format!(
            "  - name: items_{lang}\n    database: shop\n    source: {{ include_tables: [public.items] }}\n    filter: mine_{lang}\n    destination: {{ type: sequin_stream }}\n"
        ));
    }
    let config = format!(
        "{}functions:\n{functions}sinks:\n{sinks}",
        pg.databases_yaml(SLOT)
    );
    // Compile the components into weft's cache (<data dir>/plugin-cache, see
    // WeftProcess::start) with weft's own engine first: the JS and Python
    // ones take tens of seconds, which would count against the harness's
    // wait for weft to start.
    let engine = PluginEngine::new(EngineSettings::new(
        dir.path().join("weft-data/plugin-cache"),
    ))
    .unwrap();
    for (lang, path) in &filters {
        engine
            .load_filter(lang, path, &BTreeMap::new(), &Limits::default())
            .unwrap_or_else(|e| panic!("load the {lang} filter: {e}"));
    }
    let weft = WeftProcess::start(dir.path(), &config);
    pg.wait_for_active_slot(SLOT);

    pg.psql("INSERT INTO items VALUES (1, 'a'), (2, 'b'), (3, 'c')");
    pg.psql("UPDATE items SET name = 'B' WHERE pk = 2");
    pg.psql("DELETE FROM items WHERE pk = 1");
    pg.psql("INSERT INTO items VALUES (4, 'd')");
    // Each row's changes arrive in order; rows may interleave (weft orders
    // per row key), so both sides are compared sorted by key, stably.
    let expected = [
        ("insert", json!({"pk": 1, "name": "a"})),
        ("insert", json!({"pk": 2, "name": "b"})),
        ("update", json!({"pk": 2, "name": "B"})),
        ("insert", json!({"pk": 3, "name": "c"})),
        ("insert", json!({"pk": 4, "name": "d"})),
    ];
    for (lang, _) in &filters {
        let sink = format!("items_{lang}");
        let mut got: Vec<(String, Value)> = weft
            .drain(&sink, expected.len(), Duration::from_secs(120))
            .iter()
            .map(|m| {
                assert_eq!(m["metadata"]["table_name"], "items");
                (
                    m["action"].as_str().unwrap().to_string(),
                    m["record"].clone(),
                )
            })
            .collect();
        got.sort_by_key(|(_, record)| record["pk"].as_i64());
        let want: Vec<(String, Value)> = expected
            .iter()
            .map(|(action, record)| (action.to_string(), record.clone()))
            .collect();
        assert_eq!(got, want, "{lang}: delivered\nlog:\n{}", weft.log_text());
        assert!(
            weft.receive(&sink, 100, 500).is_empty(),
            "{lang} delivered more"
        );
    }
}

#[test]
fn a_scaffolded_transform_in_each_language_emits_action_and_record() {
    let dir = tempfile::tempdir().unwrap();
    let transforms = scaffold_all(dir.path(), "transform");
    let record = r#"{"pk": 7, "total": 12345678901234567890.50, "note": "a \"quoted\" é"}"#;
    let batch = [crate::languages::message(record)];
    let expected: Value =
        serde_json::from_str(&format!(r#"{{"action": "insert", "record": {record}}}"#)).unwrap();
    let engine = PluginEngine::new(EngineSettings::new(dir.path().join("cache"))).unwrap();
    for (lang, path) in &transforms {
        let mut transform = engine
            .load_transform(lang, path, &BTreeMap::new(), &Limits::default())
            .unwrap_or_else(|e| panic!("load the {lang} transform: {e}"));
        let outcomes = transform.transform(&batch).expect("transform call");
        match &outcomes[..] {
            [Ok(Payload::Json(payload))] => assert_eq!(payload, &expected, "{lang}"),
            other => panic!("{lang}: {other:?}"),
        }
    }
}

#[test]
fn the_rust_routing_and_enrichment_templates_build_and_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut built = BTreeMap::new();
    for kind in ["routing", "enrichment"] {
        let project = dir.path().join(kind);
        let name = format!("scaffolded-{kind}");
        let project = project.to_str().unwrap();
        ok(&[
            "new", "--lang", "rust", "--kind", kind, "--dir", project, &name,
        ]);
        built.insert(kind, PathBuf::from(ok(&["build", project])));
    }
    let batch = [crate::languages::message(r#"{"pk": 7, "name": "x"}"#)];
    let engine = PluginEngine::new(EngineSettings::new(dir.path().join("cache"))).unwrap();
    let none = BTreeMap::new();
    let limits = Limits::default();
    let mut routing = engine
        .load_routing("routing", &built["routing"], &none, &limits)
        .expect("load the routing function");
    let route = routing
        .route(&batch)
        .expect("route call")
        .remove(0)
        .unwrap();
    assert_eq!(route.subject.as_deref(), Some("items.insert"));
    assert_eq!(route.topic, None);
    // No grants: the template imports no capability it does not use.
    let mut enrichment = engine
        .load_enrichment(
            "enrichment",
            &built["enrichment"],
            &none,
            &limits,
            Grants::default(),
        )
        .expect("load the enrichment function");
    let enriched = enrichment.enrich(&batch).expect("enrich call").remove(0);
    assert_eq!(
        enriched.unwrap(),
        Some(json!({"enriched_by": "scaffolded-enrichment", "columns": 2}))
    );
}

/// stderr of a `weft plugin` run that must fail with status 2.
fn refused(args: &[&str]) -> String {
    let output = weft_plugin(args);
    assert_eq!(output.status.code(), Some(2), "weft plugin {args:?}");
    String::from_utf8_lossy(&output.stderr).trim().to_string()
}

#[test]
fn weft_plugin_new_and_build_refuse_bad_input_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| dir.path().join(name).display().to_string();
    assert_eq!(
        refused(&["new", "--lang", "rust", "--dir", &at("x"), "Bad_Name"]),
        "weft: invalid plugin name `Bad_Name`: use 1 to 64 lowercase ASCII letters, digits and single dashes, starting with a letter (e.g. `orders-filter`)"
    );
    assert_eq!(
        refused(&["new", "--lang", "cobol", "--dir", &at("x"), "ok"]),
        "weft: unknown language `cobol`: choose one of rust, js, python, c"
    );
    assert_eq!(
        refused(&["new", "--lang", "c", "--kind", "sorter", "ok"]),
        "weft: unknown or unsupported kind `sorter` for c: choose one of filter, transform"
    );
    assert_eq!(
        refused(&["new", "--lang", "js", "--kind", "routing", "ok"]),
        "weft: unknown or unsupported kind `routing` for js: choose one of filter, transform"
    );
    std::fs::create_dir(dir.path().join("full")).unwrap();
    std::fs::write(dir.path().join("full/keep.txt"), "mine").unwrap();
    assert_eq!(
        refused(&["new", "--lang", "python", "--dir", &at("full"), "ok"]),
        format!(
            "weft: {} already exists and is not empty: choose another name or --dir, or remove it first",
            at("full")
        )
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("full/keep.txt")).unwrap(),
        "mine"
    );
    assert_eq!(
        refused(&["build", &at("full")]),
        format!(
            "weft: {} has no weft-plugin.toml: is it a project made by `weft plugin new`?",
            at("full")
        )
    );
    // A project whose toolchain is not installed: the error says what to run.
    ok(&["new", "--lang", "js", "--dir", &at("js"), "ok"]);
    let output = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["plugin", "build", &at("js")])
        .env("WEFT_PLUGIN_TOOLCHAIN", dir.path().join("none.env"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with(&format!(
            "weft: the plugin toolchain not found ({}): run scripts/build-examples.sh",
            dir.path().join("none.env").display()
        )),
        "{stderr}"
    );
}
