//! `POST /api/config/plan` and `/api/config/apply` through the real binary:
//! a plan names exactly the resources a proposed config changes; an invalid
//! or redacted config is refused with every problem and changes nothing;
//! apply restarts the pipelines in-process with the new config (a new pull
//! sink and a change retention start receiving, the old sink loses
//! nothing); applying it again is a no-op; an exported config plans no
//! change.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::postgres::PgCluster;
use crate::harness::weft::{WeftProcess, http};

fn config(pg: &PgCluster, more: bool) -> String {
    let mut yaml = format!(
        "{}sinks:\n  - name: first\n    database: shop\n    source: {{ include_tables: [public.items] }}\n    destination: {{ type: sequin_stream }}\n",
        pg.databases_yaml("weft_apply")
    );
    if more {
        yaml.push_str(
            "  - name: second\n    database: shop\n    source: { include_tables: [public.items] }\n    destination: { type: sequin_stream }\n\
             change_retentions:\n  - name: items-log\n    source_database: shop\n    source_table_name: items\n    destination_database: shop\n    destination_table_name: items_events\n",
        );
    }
    yaml
}

/// POSTs `{"yaml": yaml}` to `/api/config/{verb}`; answers status and body.
/// Retries while weft restarts (connection refused).
fn post(weft: &WeftProcess, verb: &str, yaml: &str) -> (u16, Value) {
    weft.wait_until("the API", Duration::from_secs(60), || {
        let response = http()
            .post(weft.url(&format!("/api/config/{verb}")))
            .json(&json!({ "yaml": yaml }))
            .send()
            .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        Ok::<_, String>((status, response.json().unwrap_or(Value::Null)))
    })
}

/// The pull sink's messages' `record.id`s, receiving and acking until
/// `count` arrived.
fn ids(weft: &WeftProcess, sink: &str, count: usize) -> Vec<i64> {
    let got = weft.drain(sink, count, Duration::from_secs(60));
    got.iter()
        .map(|m| m["record"]["id"].as_i64().unwrap())
        .collect()
}

#[test]
fn plan_names_the_changes_and_apply_restarts_with_them_losing_nothing() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, v text)");
    let (dir, mut weft) = WeftProcess::start_replicating(&pg, "weft_apply", &config(&pg, false));
    pg.psql("INSERT INTO items SELECT g, 'before' FROM generate_series(1, 5) g");

    let (status, planned) = post(&weft, "plan", &config(&pg, true));
    assert_eq!(status, 200, "{planned}");
    assert_eq!(
        planned["changes"],
        json!([
            {"resource_type": "sink", "name": "second", "action": "create"},
            {"resource_type": "change_retention", "name": "items-log", "action": "create"},
        ])
    );
    // Invalid: every problem, under its path; the running config stays.
    let broken = config(&pg, true).replace(
        "source_table_name: items",
        "source_table_name: items\n    filter: nope",
    );
    let (status, refused) = post(
        &weft,
        "apply",
        &broken.replace(
            "database: shop\n    source: { include",
            "database: shoq\n    source: { include",
        ),
    );
    assert_eq!(status, 400, "{refused}");
    let errors = refused["validation_errors"].as_object().unwrap();
    assert!(errors.contains_key("sinks[1].database"), "{refused}");
    assert!(
        errors.contains_key("change_retentions[0].filter"),
        "{refused}"
    );
    let (status, refused) = post(
        &weft,
        "apply",
        &config(&pg, true).replace(
            "username: postgres",
            "username: postgres\n    password: (redacted)",
        ),
    );
    assert_eq!(status, 400, "{refused}");
    assert!(refused["summary"].as_str().unwrap().contains("(redacted)"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("weft.yml")).unwrap(),
        config(&pg, false)
    );

    // A sink added by apply receives what the slot replays from its
    // confirmed position on: wait until rows 1-5 are confirmed, so that
    // it is exactly what comes after.
    pg.wait_for_slot_to_confirm_all("weft_apply");
    let (status, applied) = post(&weft, "apply", &config(&pg, true));
    assert_eq!(
        (status, &applied["applied"]),
        (200, &json!(true)),
        "{applied}"
    );
    weft.wait_until("the new sink", Duration::from_secs(60), || {
        let sinks = http()
            .get(weft.url("/api/sinks"))
            .send()
            .map_err(|e| e.to_string())?;
        let sinks: Value = sinks.json().map_err(|e| e.to_string())?;
        if sinks.to_string().contains("\"second\"") {
            Ok(())
        } else {
            Err(sinks.to_string())
        }
    });
    pg.wait_for_active_slot("weft_apply");
    pg.psql("INSERT INTO items SELECT g, 'after' FROM generate_series(6, 10) g");
    assert_eq!(ids(&weft, "first", 10), (1..=10).collect::<Vec<_>>());
    assert_eq!(ids(&weft, "second", 5), (6..=10).collect::<Vec<_>>());
    weft.wait_until("the event rows", Duration::from_secs(60), || {
        match pg.try_psql_in(
            "postgres",
            "SELECT string_agg(record->>'id', ',' ORDER BY id) FROM items_events",
        ) {
            Ok(ids) if ids == "6,7,8,9,10" => Ok(()),
            other => Err(other),
        }
    });

    let (status, again) = post(&weft, "apply", &config(&pg, true));
    assert_eq!(status, 200);
    assert_eq!(again, json!({"changes": [], "applied": false}));
    let health = http()
        .get(weft.url("/api/health"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        health.contains("\"second\""),
        "the new sink is in the health report: {health}"
    );
    // Removing the sink and the retention again leaves no trace of them in
    // the health report.
    let (status, removed) = post(&weft, "apply", &config(&pg, false));
    assert_eq!(
        (status, &removed["applied"]),
        (200, &json!(true)),
        "{removed}"
    );
    weft.wait_until("the sink to go", Duration::from_secs(60), || {
        let health = http()
            .get(weft.url("/api/health"))
            .send()
            .map_err(|e| e.to_string())?;
        let health = health.text().map_err(|e| e.to_string())?;
        let sinks = http()
            .get(weft.url("/api/sinks"))
            .send()
            .map_err(|e| e.to_string())?;
        let sinks = sinks.text().map_err(|e| e.to_string())?;
        if !sinks.contains("\"second\"")
            && !health.contains("\"second\"")
            && !health.contains("items-log")
        {
            Ok(())
        } else {
            Err(health)
        }
    });
    let exported = weft.get_json("/api/config/export");
    let (status, round_trip) = post(&weft, "plan", exported["yaml"].as_str().unwrap());
    assert_eq!(
        (status, &round_trip["changes"]),
        (200, &json!([])),
        "{round_trip}"
    );
    assert_eq!(weft.terminate(), Some(0));
}
