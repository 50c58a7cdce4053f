//! Scenario 4: N existing rows (~200 bytes each) backfilled into the
//! `postgres` sink, in mirror mode (into a copy of the table) and in append
//! mode (into an event table), both in another database of the same
//! cluster; next to a plain `COPY … FROM` of the same rows into the same
//! (emptied) mirror table in the same run: the rate at which Postgres
//! takes the rows at all.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::postgres::PgCluster;
use crate::harness::weft::{WeftProcess, http};
use crate::weft_run::{cpu_seconds, peak_rss_mib};
use crate::workload::{PUBLICATION, TABLE};
use crate::{Settings, report, workload};

/// The target database.
const TARGET_DB: &str = "bench_target";

/// The mirror table's definition: the source's.
const MIRROR_DDL: &str = "CREATE TABLE bench_rows (
    id bigint PRIMARY KEY, customer text NOT NULL, item text NOT NULL, qty int NOT NULL,
    price numeric(10,2) NOT NULL, status text NOT NULL, created_at timestamptz NOT NULL,
    note text NOT NULL)";

fn config(pg: &PgCluster, mode: &str) -> String {
    format!(
        r#"databases:
  - name: source
    hostname: 127.0.0.1
    port: {port}
    database: postgres
    username: postgres
    slot: {{ name: pgsink_{mode}, create_if_not_exists: true }}
    publication: {{ name: {PUBLICATION} }}
  - name: target
    hostname: 127.0.0.1
    port: {port}
    database: {TARGET_DB}
    username: postgres
    slot: {{ name: unused }}
    publication: {{ name: unused }}
sinks:
  - name: pg_{mode}
    database: source
    source: {{ include_tables: [{TABLE}] }}
    destination: {{ type: postgres, database: target, mode: {mode}, create_table: true }}
"#,
        port = pg.port()
    )
}

/// `COPY bench_rows FROM` a file holding the rows, into the emptied mirror
/// table; best of two.
fn copy_in(pg: &PgCluster, file: &str) -> Duration {
    let mut best = Duration::MAX;
    for _ in 0..2 {
        pg.psql_in(TARGET_DB, "TRUNCATE bench_rows; CHECKPOINT");
        let started = Instant::now();
        pg.psql_in(TARGET_DB, &format!("COPY bench_rows FROM '{file}'"));
        best = best.min(started.elapsed());
    }
    best
}

/// Runs the scenario with `settings.changes` rows, printing a markdown table.
pub fn run(settings: &Settings) {
    let rows = settings.changes;
    let pg = workload::cluster();
    workload::write_once(&pg, 1, rows as i64);
    pg.psql(&format!("VACUUM ANALYZE {TABLE}"));
    pg.create_database(TARGET_DB);
    pg.psql_in(TARGET_DB, MIRROR_DDL);
    let dump = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(
        dump.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .expect("chmod");
    let file = dump.path().join("rows.copy").display().to_string();
    pg.psql(&format!("COPY {TABLE} TO '{file}'"));
    println!(
        "\n## postgres sink: {rows} rows of {TABLE} backfilled; load average {}",
        report::load()
    );
    println!();
    println!(
        "| writer | seconds | rows/s | ratio to COPY | weft CPU (s) | weft peak RSS (MiB) | load average after |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|");
    let copy = copy_in(&pg, &file);
    let copy_rate = rows as f64 / copy.as_secs_f64();
    println!(
        "| `COPY bench_rows FROM` file (same target table, best of 2) | {:.2} | {copy_rate:.0} | 1 | - | - | {} |",
        copy.as_secs_f64(),
        report::load()
    );
    pg.psql_in(TARGET_DB, "TRUNCATE bench_rows; CHECKPOINT");
    for (mode, table) in [("mirror", "bench_rows"), ("append", "weft_events")] {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut weft = WeftProcess::start(dir.path(), &config(&pg, mode));
        pg.wait_for_active_slot(&format!("pgsink_{mode}"));
        let began = Instant::now();
        let response = http()
            .post(weft.url(&format!("/api/sinks/pg_{mode}/backfills")))
            .json(&json!({ "table": TABLE }))
            .send()
            .expect("POST backfill");
        assert_eq!(response.status().as_u16(), 201);
        let count = format!("SELECT count(*) FROM {table}");
        let took = loop {
            let done = pg
                .try_psql_in(TARGET_DB, &count)
                .is_ok_and(|n| n.trim().parse::<usize>().unwrap_or(0) >= rows);
            if done {
                break began.elapsed();
            }
            assert!(
                began.elapsed() < crate::DRAIN_TIMEOUT,
                "the {mode} sink did not finish"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let (rss, cpu) = (peak_rss_mib(&weft), cpu_seconds(&weft));
        weft.terminate();
        let rate = rows as f64 / took.as_secs_f64();
        println!(
            "| weft backfill → postgres sink, {mode} mode | {:.2} | {rate:.0} | {:.3} | {cpu:.1} | {rss:.0} | {} |",
            took.as_secs_f64(),
            rate / copy_rate,
            report::load()
        );
    }
}
