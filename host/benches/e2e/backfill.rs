//! Scenario 3: a backfill of N existing rows (~200 bytes each) into the
//! pull sink with nothing consuming (until the backfill completes), then
//! drained by the pull consumers; next to `COPY (SELECT * FROM …) TO STDOUT` of the same table
//! in the same run (psql writing to /dev/null), the rate at which Postgres
//! can hand the rows out at all.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::postgres::PgCluster;
use crate::harness::weft::http;
use crate::targets::PullTarget;
use crate::weft_run::{Run, Target, cpu_seconds, peak_rss_mib};
use crate::workload::TABLE;
use crate::{Settings, report, workload};

/// `COPY (SELECT * FROM table) TO STDOUT` through psql into /dev/null.
fn copy_out(pg: &PgCluster) -> Duration {
    let started = Instant::now();
    let status = Command::new(pg.bin("psql"))
        .args(["-h", "127.0.0.1", "-p", &pg.port().to_string()])
        .args(["-U", "postgres", "-d", "postgres", "-X", "-q", "-c"])
        .arg(format!("COPY (SELECT * FROM {TABLE}) TO STDOUT"))
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run psql");
    assert!(status.success(), "COPY failed: {status}");
    started.elapsed()
}

/// Runs the scenario with `settings.changes` rows, printing a markdown table.
pub fn run(settings: &Settings) {
    let rows = settings.changes;
    let pg = workload::cluster();
    let started = Instant::now();
    workload::write_once(&pg, 1, rows as i64);
    pg.psql(&format!("VACUUM ANALYZE {TABLE}"));
    println!(
        "\n## backfill: {rows} rows of {TABLE} ({} MB of table) written in {:.1} s; load average {}",
        pg.psql(&format!("SELECT pg_table_size('{TABLE}') / 1000000"))
            .trim(),
        started.elapsed().as_secs_f64(),
        report::load()
    );
    println!();
    println!(
        "| reader | backfill stored (s) | rows/s stored | ratio to COPY | weft CPU while storing (s) | then drained by consumers (s) | rows/s drained | ratio to COPY | weft CPU in all (s) | weft peak RSS (MiB) | load average after |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    // Warm the cache, then measure.
    copy_out(&pg);
    let copy = copy_out(&pg).min(copy_out(&pg));
    let copy_rate = rows as f64 / copy.as_secs_f64();
    println!(
        "| `COPY (SELECT * …) TO STDOUT` (psql → /dev/null, best of 2) | {:.2} | {copy_rate:.0} | 1 | - | - | - | - | - | - | {} |",
        copy.as_secs_f64(),
        report::load()
    );

    let target = PullTarget::new(settings.pull_consumers);
    let transforms: &[bool] = if settings.stored_only {
        &[false]
    } else {
        &[false, true]
    };
    for &transform in transforms {
        let run = Run::new(&target, transform, settings.function_instances, "bf");
        let dir = tempfile::tempdir().expect("temp dir");
        let weft = run.start(dir.path(), &pg, &target);
        pg.wait_for_active_slot(&run.slot);
        let began = Instant::now();
        let response = http()
            .post(weft.url(&format!("/api/sinks/{}/backfills", run.sink)))
            .json(&json!({ "table": TABLE }))
            .send()
            .expect("POST backfill");
        assert_eq!(response.status().as_u16(), 201);
        let backfill: serde_json::Value = response.json().expect("a backfill");
        let id = backfill["id"].as_str().expect("an id").to_string();
        // Stored: the backfill completes once its last chunk is in the
        // sink's store. Nothing consumes meanwhile, so the figure is the
        // backfill's own; then the consumers drain what it stored.
        let stored = loop {
            let now = weft.get_json(&format!("/api/sinks/{}/backfills/{id}", run.sink));
            match now["state"].as_str() {
                Some("completed") => break began.elapsed(),
                Some("active") => {}
                other => panic!("backfill ended {other:?}: {now}"),
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let cpu_stored = cpu_seconds(&weft);
        let stored_rate = rows as f64 / stored.as_secs_f64();
        if settings.stored_only {
            let (rss, mut weft) = (peak_rss_mib(&weft), weft);
            weft.terminate();
            println!(
                "| weft backfill → pull, no function (stored only) | {:.2} | {stored_rate:.0} | {:.3} | {cpu_stored:.1} | - | - | - | - | {rss:.0} | {} |",
                stored.as_secs_f64(),
                stored_rate / copy_rate,
                report::load()
            );
            continue;
        }
        let drain_began = Instant::now();
        let drained = target.drain(&run, &weft, rows) - drain_began;
        let (rss, cpu) = (peak_rss_mib(&weft), cpu_seconds(&weft));
        let mut weft = weft;
        weft.terminate();
        let drained_rate = rows as f64 / drained.as_secs_f64();
        println!(
            "| weft backfill → pull, {} (then {} consumers drain) | {:.2} | {stored_rate:.0} | {:.3} | {cpu_stored:.1} | {:.2} | {drained_rate:.0} | {:.3} | {cpu:.1} | {rss:.0} | {} |",
            if transform {
                "upcase transform"
            } else {
                "no function"
            },
            settings.pull_consumers,
            stored.as_secs_f64(),
            stored_rate / copy_rate,
            drained.as_secs_f64(),
            drained_rate / copy_rate,
            report::load()
        );
    }
}
