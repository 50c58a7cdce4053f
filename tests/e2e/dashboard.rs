//! The Grafana dashboard (`dashboards/weft.json`): every metric a panel
//! queries is exported by a running weft, scraped from its metrics
//! listener after a workload that makes each of them appear.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::guests;
use crate::harness::postgres::PgCluster;
use crate::harness::weft::{WeftProcess, http};

const SLOT: &str = "weft_dashboard";

/// The metric names (`sequin_…`, `weft_…`) in a PromQL expression.
fn metric_names(expr: &str) -> impl Iterator<Item = &str> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|token| token.starts_with("sequin_") || token.starts_with("weft_"))
}

fn dashboard_metrics() -> BTreeSet<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards/weft.json");
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read the dashboard"))
            .expect("the dashboard is JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10, "a panel per concern");
    let mut names = BTreeSet::new();
    for panel in panels {
        let targets = panel["targets"].as_array().expect("each panel queries");
        assert!(!targets.is_empty(), "{}", panel["title"]);
        for target in targets {
            let expr = target["expr"].as_str().expect("a PromQL expr");
            let found: Vec<&str> = metric_names(expr).collect();
            assert!(!found.is_empty(), "{expr} names no weft metric");
            names.extend(found.into_iter().map(str::to_string));
        }
    }
    names
}

#[test]
fn every_metric_the_dashboard_queries_is_exported() {
    let wanted = dashboard_metrics();
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE items (id int PRIMARY KEY, body text, n int)");
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}functions:\n  - name: even\n    type: filter\n    file: {}\nsinks:\n  - name: items\n    database: shop\n    source: {{ include_tables: [public.items] }}\n    filter: even\n    destination: {{ type: sequin_stream }}\n",
        pg.databases_yaml(SLOT),
        guests::wasm("weft_even_id_filter").display()
    );
    let weft = WeftProcess::start(dir.path(), &config);
    pg.wait_for_active_slot(SLOT);
    // An unchanged TOAST value (md5 chains do not compress, so the body is
    // stored out of line), and a backfill of an analysed table (its row
    // estimate is known).
    pg.psql(
        "INSERT INTO items SELECT g, (SELECT string_agg(md5(h::text), '') FROM generate_series(1, 400) h), g
         FROM generate_series(1, 4) g;
         UPDATE items SET n = n + 1 WHERE id = 2;
         ANALYZE items;",
    );
    let backfill = http()
        .post(weft.url("/api/sinks/items/backfills"))
        .json(&json!({"table": "public.items"}))
        .send()
        .unwrap();
    assert_eq!(backfill.status().as_u16(), 201);

    // Each pass drains the sink so that delivery metrics get their series.
    weft.wait_until_every(
        "every metric the dashboard queries exported",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || {
            let _ = weft.drain("items", usize::MAX, Duration::from_millis(500));
            let text = http()
                .get(weft.metrics_url("/metrics"))
                .send()
                .unwrap()
                .text()
                .unwrap();
            let exported: BTreeSet<&str> = text
                .lines()
                .filter(|line| !line.starts_with('#'))
                .filter_map(|line| line.split(['{', ' ']).next())
                .collect();
            let missing: Vec<&String> = wanted
                .iter()
                .filter(|name| !exported.contains(name.as_str()))
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "the dashboard queries metrics weft does not export: {missing:?}\n{text}"
                ))
            }
        },
    );
}
