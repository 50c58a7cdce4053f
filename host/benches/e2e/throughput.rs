//! Scenario 1: one slot per consumer, created before any write; N changes
//! written; then each consumer in turn drains that same WAL, the
//! `pg_recvlogical` baseline first.

use std::time::Instant;

use crate::harness::postgres::PgCluster;
use crate::weft_run::{Run, Target, cpu_seconds, peak_rss_mib};
use crate::{Settings, baseline, report, workload};

/// The slot `pg_recvlogical` drains.
const BASELINE_SLOT: &str = "tp_recvlogical";

fn create_slot(pg: &PgCluster, slot: &str) {
    pg.psql(&format!(
        "SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')"
    ));
}

/// Runs the scenario against the targets `targets` builds, printing a
/// markdown table.
pub fn run(settings: &Settings, targets: fn(&Settings) -> Vec<Box<dyn Target>>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let pg = workload::cluster();
    let targets: Vec<_> = targets(settings)
        .into_iter()
        .filter(|t| settings.only.as_deref().is_none_or(|only| only == t.key()))
        .collect();
    let mut runs = Vec::new();
    create_slot(&pg, BASELINE_SLOT);
    for target in &targets {
        for transform in [false, true] {
            let run = Run::new(
                target.as_ref(),
                transform,
                settings.function_instances,
                "tp",
            );
            create_slot(&pg, &run.slot);
            target.prepare(&run.database);
            runs.push((target.as_ref(), run));
        }
    }

    let changes = workload::written(settings.changes);
    let write_time = workload::write_batches(&rt, &pg, settings.changes);
    let end_lsn = workload::current_lsn(&pg);
    println!(
        "\n## throughput: {changes} changes ({} per transaction, half inserts, half updates) \
         written in {:.1} s ({:.0}/s), WAL end {end_lsn}; load average {}",
        workload::TX_ROWS,
        write_time.as_secs_f64(),
        changes as f64 / write_time.as_secs_f64(),
        report::load()
    );

    let baseline = baseline::pg_recvlogical(&pg, BASELINE_SLOT, &end_lsn);
    let baseline_rate = changes as f64 / baseline.as_secs_f64();
    println!();
    println!(
        "| consumer | WASM transform | drain time (s) | changes/s | ratio to pg_recvlogical | weft start-up (s) | weft CPU (s) | weft peak RSS (MiB) | load average after |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---|");
    println!(
        "| pg_recvlogical (pgoutput, to /dev/null) | - | {:.2} | {baseline_rate:.0} | 1 | - | - | - | {} |",
        baseline.as_secs_f64(),
        report::load()
    );

    for (target, run) in &runs {
        let dir = tempfile::tempdir().expect("temp dir");
        let started = Instant::now();
        let mut weft = run.start(dir.path(), &pg, *target);
        let start_up = started.elapsed();
        let elapsed = target.drain(run, &weft, changes) - started;
        let rss = peak_rss_mib(&weft);
        let cpu = cpu_seconds(&weft);
        weft.terminate();
        let rate = changes as f64 / elapsed.as_secs_f64();
        println!(
            "| weft → {} | {} | {:.2} | {rate:.0} | {:.3} | {:.2} | {cpu:.1} | {rss:.0} | {} |",
            target.label(),
            if run.transform { "upcase" } else { "none" },
            elapsed.as_secs_f64(),
            rate / baseline_rate,
            start_up.as_secs_f64(),
            report::load()
        );
    }
}
