//! The plugin registry and hot swaps through the real binary:
//!
//! * uploads are checked (not WebAssembly, a core module, the wrong world,
//!   a capability the registry does not allow, too large, malformed
//!   fields) and refused with a precise error; a good one is stored
//!   content-addressed, listed, and immutable per version; a function names
//!   it with `plugin: name@version`; a version in use cannot be deleted;
//! * swapping a transform's version three times under a steady workload
//!   loses, duplicates and reorders nothing, each change is processed by
//!   exactly one version, and weft records the switch points.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::guests;
use crate::harness::postgres::PgCluster;
use crate::harness::weft::{WeftProcess, http};

/// Uploads `bytes` as `name@version` of `kind`; answers status and body.
fn upload(
    weft: &WeftProcess,
    name: &str,
    version: &str,
    kind: &str,
    bytes: Vec<u8>,
) -> (u16, Value) {
    let response = http()
        .post(weft.url("/api/plugins"))
        .query(&[("name", name), ("version", version), ("kind", kind)])
        .header("content-type", "application/wasm")
        .body(bytes)
        .send()
        .expect("upload");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

fn call(weft: &WeftProcess, method: reqwest::Method, path: &str) -> (u16, Value) {
    let response = http()
        .request(method, weft.url(path))
        .send()
        .expect("request");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

fn wasm(name: &str) -> Vec<u8> {
    std::fs::read(guests::wasm(name)).expect("read the guest component")
}

/// One pull sink on `items`, through the transform `tag` when `function`
/// (a `functions:` entry body) is given.
fn config(pg: &PgCluster, slot: &str, function: Option<&str>, registry: &str) -> String {
    let mut yaml = pg.databases_yaml(slot);
    if let Some(function) = function {
        yaml.push_str(&format!(
            "functions:\n  - name: tag\n    type: transform\n{function}"
        ));
    }
    yaml.push_str(&format!(
        "sinks:\n  - name: items\n    database: shop\n    source: {{ include_tables: [public.items] }}\n{}    destination: {{ type: sequin_stream }}\n{registry}",
        if function.is_some() { "    transform: tag\n" } else { "" }
    ));
    yaml
}

/// Waits until `function` runs `running` (weft may be restarting).
fn wait_for_function(weft: &WeftProcess, function: &str, running: &str) {
    weft.wait_until("the function to run", Duration::from_secs(60), || {
        let response = http()
            .get(weft.url(&format!("/api/functions/{function}")))
            .send()
            .map_err(|e| e.to_string())?;
        let body: Value = response.json().map_err(|e| e.to_string())?;
        (body["running"] == running)
            .then_some(())
            .ok_or(body.to_string())
    });
}

fn summary(body: &Value) -> String {
    body["summary"].as_str().unwrap_or_default().to_string()
}

#[test]
fn uploads_are_checked_stored_by_content_and_guarded_while_in_use() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v text)");
    let dir = tempfile::tempdir().unwrap();
    let registry = "plugin_registry: { max_component_mb: 1 }\n";
    let weft = WeftProcess::start(dir.path(), &config(&pg, "weft_registry", None, registry));
    let tagger = wasm("weft_tag_transform");

    // Refused, each with what is wrong.
    let (status, body) = upload(&weft, "junk", "1", "transform", b"hello, world".to_vec());
    assert_eq!(status, 422, "{body}");
    assert!(summary(&body).contains("not a WebAssembly file"), "{body}");
    let core_module = b"\0asm\x01\0\0\0".to_vec();
    let (status, body) = upload(&weft, "core", "1", "transform", core_module);
    assert_eq!(status, 422, "{body}");
    assert!(summary(&body).contains("core WebAssembly module"), "{body}");
    let (status, body) = upload(&weft, "tagger", "1.0.0", "filter", tagger.clone());
    assert_eq!(status, 422, "{body}");
    assert!(
        summary(&body).contains("does not implement the weft:plugin/filter world"),
        "{body}"
    );
    let (status, body) = upload(
        &weft,
        "caller",
        "1",
        "enrichment",
        wasm("weft_http_enrichment"),
    );
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["offending_imports"],
        json!(["weft:plugin/outbound-http@0.2.0"]),
        "{body}"
    );
    assert!(summary(&body).contains("allow_capabilities"), "{body}");
    let (status, body) = upload(&weft, "big", "1", "transform", vec![0; 3 << 19]);
    assert_eq!(status, 413, "{body}");
    let (status, body) = upload(&weft, "tagger", "1 0", "transform", tagger.clone());
    assert_eq!(status, 400, "{body}");
    assert!(body["validation_errors"]["version"].is_array(), "{body}");
    let (status, body) = upload(&weft, "tagger", "1", "mapper", tagger.clone());
    assert_eq!(status, 400, "{body}");
    assert!(body["validation_errors"]["kind"].is_array(), "{body}");
    let (status, _) = call(&weft, reqwest::Method::GET, "/api/plugins");
    assert_eq!(status, 200);
    assert_eq!(
        call(&weft, reqwest::Method::GET, "/api/plugins").1["data"],
        json!([]),
        "nothing refused was registered"
    );

    // Registered, content-addressed, immutable per version.
    let (status, created) = upload(&weft, "tagger", "1.0.0", "transform", tagger.clone());
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["reference"], "tagger@1.0.0");
    assert_eq!(created["bytes"], tagger.len());
    let sha = created["sha256"].as_str().unwrap().to_string();
    let stored = dir.path().join(format!("weft-data/plugins/{sha}.wasm"));
    assert_eq!(
        std::fs::read(&stored).expect("the stored component"),
        tagger
    );
    let (status, again) = upload(&weft, "tagger", "1.0.0", "transform", tagger.clone());
    assert_eq!((status, &again["sha256"]), (200, &json!(sha)), "{again}");
    let (status, body) = upload(
        &weft,
        "tagger",
        "1.0.0",
        "transform",
        wasm("weft_probe_transform"),
    );
    assert_eq!(status, 409, "{body}");
    assert!(summary(&body).contains("immutable"), "{body}");
    let (status, listed) = call(&weft, reqwest::Method::GET, "/api/plugins/tagger");
    assert_eq!(status, 200);
    assert_eq!(listed["data"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(
        call(&weft, reqwest::Method::GET, "/api/plugins/tagger/2.0.0").0,
        404
    );

    // A function names it; an unregistered version is refused at apply.
    pg.wait_for_active_slot("weft_registry");
    let missing = config(
        &pg,
        "weft_registry",
        Some("    plugin: tagger@7.0.0\n    config: { tag: one }\n"),
        registry,
    );
    let (status, body) = weft.apply_config(&missing);
    assert_eq!(status, 400, "{body}");
    assert!(
        body["validation_errors"]["functions[0].plugin"][0]
            .as_str()
            .unwrap()
            .contains("tagger@7.0.0 is not registered"),
        "{body}"
    );
    let using = missing.replace("tagger@7.0.0", "tagger@1.0.0");
    let (status, body) = weft.apply_config(&using);
    assert_eq!(status, 200, "{body}");
    wait_for_function(&weft, "tag", "tagger@1.0.0");
    pg.psql("INSERT INTO items VALUES (1, 'a')");
    let got = weft.drain("items", 1, Duration::from_secs(60));
    assert_eq!(got, vec![json!({"id": 1, "tag": "one"})]);

    let (status, body) = call(&weft, reqwest::Method::DELETE, "/api/plugins/tagger/1.0.0");
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["used_by"], json!(["tag"]), "{body}");
    assert!(stored.exists());

    // Once no function uses it, it goes, and its file with it.
    let (status, body) = weft.apply_config(&config(&pg, "weft_registry", None, registry));
    assert_eq!(status, 200, "{body}");
    let (status, body) =
        weft.wait_until("the API after the restart", Duration::from_secs(60), || {
            let response = http()
                .delete(weft.url("/api/plugins/tagger/1.0.0"))
                .send()
                .map_err(|e| e.to_string())?;
            let status = response.status().as_u16();
            Ok::<_, String>((status, response.json::<Value>().unwrap_or(Value::Null)))
        });
    assert_eq!((status, &body["deleted"]), (200, &json!(true)), "{body}");
    assert!(!stored.exists(), "the component file is removed");
    assert_eq!(
        call(&weft, reqwest::Method::GET, "/api/plugins/tagger").0,
        404
    );
}

#[test]
fn swapping_a_transform_three_times_under_load_loses_and_reorders_nothing() {
    let pg = Arc::new(PgCluster::start());
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v text)");
    let dir = tempfile::tempdir().unwrap();
    let version = |v: u32| {
        config(
            &pg,
            "weft_swap",
            Some(&format!(
                "    plugin: tagger@{v}.0.0\n    config: {{ tag: \"v{v}\" }}\n"
            )),
            "",
        )
    };
    // Registered before the function may name it: start without it.
    let mut weft = WeftProcess::start(dir.path(), &config(&pg, "weft_swap", None, ""));
    for v in 1..=4 {
        let (status, body) = upload(
            &weft,
            "tagger",
            &format!("{v}.0.0"),
            "transform",
            wasm("weft_tag_transform"),
        );
        assert_eq!(status, 201, "{body}");
    }
    pg.wait_for_active_slot("weft_swap");
    let (status, body) = weft.apply_config(&version(1));
    assert_eq!(
        (status, &body["restarted"], &body["sinks"]["updated"]),
        (200, &json!(false), &json!(["items"])),
        "the sink takes its new transform in place: {body}"
    );
    wait_for_function(&weft, "tag", "tagger@1.0.0");

    // A steady workload: one row per transaction until stopped.
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicI64::new(0));
    let writer = {
        let (pg, stop, written) = (Arc::clone(&pg), Arc::clone(&stop), Arc::clone(&written));
        std::thread::spawn(move || {
            let mut id = 0;
            while !stop.load(Ordering::SeqCst) {
                id += 1;
                pg.psql(&format!("INSERT INTO items VALUES ({id}, 'x')"));
                written.store(id, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let mut got = Vec::new();
    let mut drain_for = |weft: &WeftProcess, until: i64| {
        got.extend(weft.drain(
            "items",
            (until as usize).saturating_sub(got.len()),
            Duration::from_secs(60),
        ));
    };
    for v in 2..=4 {
        weft.wait_until("rows to flow", Duration::from_secs(30), || {
            (written.load(Ordering::SeqCst) >= 60 * (v as i64 - 1))
                .then_some(())
                .ok_or("too few rows")
        });
        drain_for(&weft, written.load(Ordering::SeqCst) / 2);
        let (status, body) = weft.apply_config(&version(v));
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["restarted"], json!(false), "a hot swap: {body}");
        assert_eq!(body["hot_swapped"]["sinks"], json!(["items"]), "{body}");
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    let total = written.load(Ordering::SeqCst);
    drain_for(&weft, total);
    assert!(
        weft.drain("items", 1, Duration::from_secs(2)).is_empty(),
        "no duplicates after the last row"
    );

    let ids: Vec<i64> = got.iter().map(|m| m["id"].as_i64().unwrap()).collect();
    assert_eq!(
        ids,
        (1..=total).collect::<Vec<_>>(),
        "every row once, in order"
    );
    let tags: Vec<&str> = got.iter().map(|m| m["tag"].as_str().unwrap()).collect();
    let mut firsts = Vec::new();
    for (i, tag) in tags.iter().enumerate() {
        if i == 0 || tags[i - 1] != *tag {
            firsts.push((*tag, ids[i]));
        }
    }
    assert_eq!(
        firsts.iter().map(|(tag, _)| *tag).collect::<Vec<_>>(),
        ["v1", "v2", "v3", "v4"],
        "each version processed one contiguous run of changes, in version order: {firsts:?}"
    );

    // weft's switch points are those first changes.
    let (_, function) = call(&weft, reqwest::Method::GET, "/api/functions/tag");
    assert_eq!(function["running"], "tagger@4.0.0", "{function}");
    let switches = function["switches"]["items"].as_array().unwrap().clone();
    let recorded: Vec<(String, String)> = switches
        .iter()
        .map(|s| {
            (
                s["to"].as_str().unwrap().to_string(),
                s["first_change"]["record_pks"][0]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = firsts[1..]
        .iter()
        .enumerate()
        .map(|(i, (_, id))| (format!("tagger@{}.0.0", i + 2), id.to_string()))
        .collect();
    assert_eq!(recorded, expected, "{function}");
    weft.terminate();
}

#[test]
fn a_canary_reports_exactly_the_messages_it_changes_and_promotion_and_rollback_lose_nothing() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v text)");
    let dir = tempfile::tempdir().unwrap();
    let mut weft = WeftProcess::start(dir.path(), &config(&pg, "weft_canary", None, ""));
    for v in ["1.0.0", "2.0.0"] {
        let (status, body) = upload(&weft, "tagger", v, "transform", wasm("weft_tag_transform"));
        assert_eq!(status, 201, "{body}");
    }
    pg.wait_for_active_slot("weft_canary");
    let live = config(
        &pg,
        "weft_canary",
        Some("    plugin: tagger@1.0.0\n    config: { tag: v1 }\n"),
        "",
    );
    let (status, body) = weft.apply_config(&live);
    assert_eq!(status, 200, "{body}");
    wait_for_function(&weft, "tag", "tagger@1.0.0");

    let shadow = |body: Value| {
        let response = http()
            .post(weft.url("/api/functions/tag/shadow"))
            .json(&body)
            .send()
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json::<Value>().unwrap_or(Value::Null))
    };
    let (status, body) = shadow(json!({"plugin": "tagger@9.0.0"}));
    assert_eq!(status, 422, "an unregistered candidate: {body}");
    assert!(
        summary(&body).contains("tagger@9.0.0 is not registered"),
        "{body}"
    );
    // The candidate changes one message in ten.
    let (status, body) = shadow(json!({
        "plugin": "tagger@2.0.0",
        "config": {"tag": "v1", "alter_every": "10"},
    }));
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["sinks"], json!(["items"]));

    pg.psql("INSERT INTO items SELECT g, 'x' FROM generate_series(1, 100) g");
    let mut got = weft.drain("items", 100, Duration::from_secs(60));
    assert!(
        got.iter().all(|m| m["tag"] == "v1"),
        "the sink gets the live version's output only"
    );
    let (status, report) = call(&weft, reqwest::Method::GET, "/api/functions/tag/shadow");
    assert_eq!(status, 200, "{report}");
    let items = &report["sinks"]["items"];
    assert_eq!(items["candidate"], "tagger@2.0.0");
    assert_eq!(items["compared"], 100, "{report}");
    assert_eq!(items["differing"], 10, "{report}");
    assert_eq!(items["failed"], 0, "{report}");
    let differing: Vec<String> = items["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["record_pks"][0].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        differing,
        (1..=10).map(|i| (i * 10).to_string()).collect::<Vec<_>>()
    );
    assert_eq!(items["samples"][0]["live"], json!({"id": 10, "tag": "v1"}));
    assert_eq!(
        items["samples"][0]["shadow"],
        json!({"id": 10, "tag": "v1-altered"})
    );

    // Updating the sink rebuilds its chain; the candidate keeps running
    // in shadow on it.
    let updated = live.replace(
        "destination: { type: sequin_stream }",
        "destination: { type: sequin_stream, max_deliver: 7 }",
    );
    let (status, body) = weft.apply_config(&updated);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["restarted"], false, "{body}");
    pg.psql("INSERT INTO items SELECT g, 'x' FROM generate_series(101, 110) g");
    got.extend(weft.drain("items", 10, Duration::from_secs(60)));
    let (_, report) = call(&weft, reqwest::Method::GET, "/api/functions/tag/shadow");
    let items = &report["sinks"]["items"];
    assert_eq!(items["candidate"], "tagger@2.0.0", "{report}");
    assert_eq!(
        (&items["compared"], &items["differing"]),
        (&json!(10), &json!(1)),
        "the updated sink's chain runs the candidate: {report}"
    );

    // Promote: a hot swap; then roll back, another one.
    let (status, promoted) = call(&weft, reqwest::Method::POST, "/api/functions/tag/promote");
    assert_eq!(status, 200, "{promoted}");
    assert_eq!(promoted["apply"]["restarted"], false, "{promoted}");
    assert_eq!(
        call(&weft, reqwest::Method::GET, "/api/functions/tag/shadow").0,
        404,
        "the shadow run ends with the promotion"
    );
    assert_eq!(
        call(&weft, reqwest::Method::GET, "/api/functions/tag").1["running"],
        "tagger@2.0.0"
    );
    let written = std::fs::read_to_string(dir.path().join("weft.yml")).unwrap();
    assert!(
        written.contains("tagger@2.0.0"),
        "the config file names the promoted version:\n{written}"
    );
    pg.psql("INSERT INTO items SELECT g, 'x' FROM generate_series(111, 150) g");
    got.extend(weft.drain("items", 40, Duration::from_secs(60)));
    let (status, rolled) = call(&weft, reqwest::Method::POST, "/api/functions/tag/rollback");
    assert_eq!(status, 200, "{rolled}");
    assert_eq!(rolled["apply"]["restarted"], false, "{rolled}");
    assert_eq!(
        call(&weft, reqwest::Method::POST, "/api/functions/tag/rollback").0,
        409,
        "one rollback per promotion"
    );
    pg.psql("INSERT INTO items SELECT g, 'x' FROM generate_series(151, 200) g");
    got.extend(weft.drain("items", 50, Duration::from_secs(60)));
    assert!(weft.drain("items", 1, Duration::from_secs(2)).is_empty());

    let ids: Vec<i64> = got.iter().map(|m| m["id"].as_i64().unwrap()).collect();
    assert_eq!(
        ids,
        (1..=200).collect::<Vec<_>>(),
        "every row once, in order"
    );
    for message in &got {
        let id = message["id"].as_i64().unwrap();
        let expected = if (111..=150).contains(&id) && id % 10 == 0 {
            "v1-altered"
        } else {
            "v1"
        };
        assert_eq!(message["tag"], expected, "{message}");
    }
    assert_eq!(
        call(&weft, reqwest::Method::GET, "/api/functions/tag").1["running"],
        "tagger@1.0.0"
    );
    weft.terminate();
}
