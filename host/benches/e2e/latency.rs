//! Scenario 2: weft runs caught up while rows are inserted at a fixed rate;
//! per message, receipt at the broker's consumer minus the message's
//! `metadata.commit_timestamp`.

use std::sync::mpsc;
use std::time::Duration;

use chrono::DateTime;
use serde_json::Value;

use crate::report::{self, Stats};
use crate::targets::check_transformed;
use crate::weft_run::{Arrival, LiveTarget, Run, peak_rss_mib};
use crate::{Settings, workload};

/// Rows written (and awaited) before measuring, so that weft is caught up
/// and its connections are warm.
const WARM_UP_ROWS: i64 = 200;

/// Receives `count` arrivals, panicking if one takes longer than `timeout`.
fn collect(arrivals: &mpsc::Receiver<Arrival>, count: usize, timeout: Duration) -> Vec<Arrival> {
    (0..count)
        .map(|i| {
            arrivals
                .recv_timeout(timeout)
                .unwrap_or_else(|_| panic!("only {i} of {count} messages arrived"))
        })
        .collect()
}

/// Milliseconds from each message's `commit_timestamp` to its receipt.
fn latencies_ms(run: &Run, arrivals: &[Arrival]) -> Vec<f64> {
    arrivals
        .iter()
        .map(|(received, body)| {
            let message: Value = serde_json::from_slice(body).expect("a JSON message");
            check_transformed(run, &message);
            let committed = message["metadata"]["commit_timestamp"]
                .as_str()
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                .expect("metadata.commit_timestamp in RFC 3339");
            let micros = (*received - committed.to_utc())
                .num_microseconds()
                .expect("a latency that fits in microseconds");
            micros as f64 / 1000.0
        })
        .collect()
}

/// Runs the scenario against the targets `targets` builds, printing a
/// markdown table.
pub fn run(settings: &Settings, targets: fn() -> Vec<Box<dyn LiveTarget>>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let pg = workload::cluster();
    println!(
        "\n## latency: {} rows/s for {} s, one transaction every 10 ms",
        settings.rate, settings.seconds
    );
    println!();
    println!(
        "| sink | WASM transform | messages | written/s | avg (ms) | p50 (ms) | p99 (ms) | max (ms) | weft peak RSS (MiB) | load average after |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---|");
    let mut next_id = 1;
    let targets = targets()
        .into_iter()
        .filter(|t| settings.only.as_deref().is_none_or(|only| only == t.key()));
    for target in targets {
        for transform in [false, true] {
            let run = Run::new(
                target.as_ref(),
                transform,
                settings.function_instances,
                "live",
            );
            target.prepare(&run.database);
            let dir = tempfile::tempdir().expect("temp dir");
            let mut weft = run.start(dir.path(), &pg, target.as_ref());
            pg.wait_for_active_slot(&run.slot);
            let arrivals = target.subscribe(&run.database);

            workload::write_once(&pg, next_id, WARM_UP_ROWS);
            next_id += WARM_UP_ROWS;
            collect(&arrivals, WARM_UP_ROWS as usize, Duration::from_secs(120));

            let (rows, took) =
                workload::write_paced(&rt, &pg, next_id, settings.rate, settings.seconds);
            next_id += rows as i64;
            let measured = collect(&arrivals, rows, Duration::from_secs(120));
            let rss = peak_rss_mib(&weft);
            weft.terminate();
            let stats = Stats::of(latencies_ms(&run, &measured));
            println!(
                "| {} | {} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {rss:.0} | {} |",
                target.label(),
                if transform { "upcase" } else { "none" },
                stats.count,
                rows as f64 / took.as_secs_f64(),
                stats.avg,
                stats.p50,
                stats.p99,
                stats.max,
                report::load()
            );
        }
    }
}
