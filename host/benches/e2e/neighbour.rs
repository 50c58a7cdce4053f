//! Scenario 5: a neighbour beside a hostile sink. One database, two pull
//! sinks on the same table: `neighbour` runs no function; `hostile` runs a
//! transform that spins until its 200 ms timeout on every 200th row. The
//! figure is how fast the neighbour drains 20,000 rows beside it, as a
//! ratio to the same drain with the neighbour alone, in alternated runs of
//! fresh weft processes on fresh slots of the same cluster.

use std::time::{Duration, Instant};

use crate::harness::guests;
use crate::harness::postgres::PgCluster;
use crate::harness::weft::WeftProcess;
use crate::weft_run::{cpu_seconds, peak_rss_mib};
use crate::{Settings, report, workload};

/// Rows per run; every [`POISON_EVERY`]th row makes the transform spin.
const ROWS: usize = 20_000;
/// One row in this many is poison.
const POISON_EVERY: usize = 200;
/// Alternated runs of each variant.
const RUNS: usize = 3;
const TABLE: &str = "public.neighbour_items";
const PUBLICATION: &str = "neighbour_pub";

/// The config of run `n`: the neighbour, and the hostile sink `beside` it.
fn config(pg: &PgCluster, n: usize, beside: bool) -> String {
    let hostile = if beside {
        format!(
            "  - name: hostile\n    database: nb{n}\n    source: {{ include_tables: [{TABLE}] }}\n    transform: spin\n    destination: {{ type: sequin_stream }}\n"
        )
    } else {
        String::new()
    };
    format!(
        r#"databases:
  - name: nb{n}
    hostname: 127.0.0.1
    port: {port}
    database: postgres
    username: postgres
    slot: {{ name: nb{n}, create_if_not_exists: true }}
    publication: {{ name: {PUBLICATION} }}
functions:
  - name: spin
    type: transform
    file: {file}
    limits: {{ timeout_ms: 200 }}
sinks:
  - name: neighbour
    database: nb{n}
    source: {{ include_tables: [{TABLE}] }}
    destination: {{ type: sequin_stream }}
{hostile}"#,
        port = pg.port(),
        file = guests::wasm("weft_hostile_transform").display(),
    )
}

/// One run: a fresh weft on a fresh slot, `ROWS` rows written, the
/// neighbour drained; returns its rows/s, weft's CPU seconds and peak RSS.
fn measure(pg: &PgCluster, n: usize, beside: bool) -> (f64, f64, f64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut weft = WeftProcess::start(dir.path(), &config(pg, n, beside));
    pg.wait_for_active_slot(&format!("nb{n}"));
    let first = n * ROWS + 1;
    let started = Instant::now();
    pg.psql(&format!(
        "INSERT INTO {TABLE} SELECT g, CASE WHEN g % {POISON_EVERY} = 0 THEN 'loop' ELSE 'echo' END, \
         repeat('x', 150) FROM generate_series({first}, {}) g",
        first + ROWS - 1
    ));
    let got = weft.drain("neighbour", ROWS, Duration::from_secs(1800));
    assert_eq!(got.len(), ROWS, "the neighbour drained {} rows", got.len());
    let rate = ROWS as f64 / started.elapsed().as_secs_f64();
    let (cpu, rss) = (cpu_seconds(&weft), peak_rss_mib(&weft));
    weft.terminate();
    pg.psql(&format!("SELECT pg_drop_replication_slot('nb{n}')"));
    (rate, cpu, rss)
}

/// Runs the scenario, printing a markdown table.
pub fn run(_settings: &Settings) {
    let pg = workload::cluster();
    pg.psql(&format!(
        "CREATE TABLE {TABLE} (id int PRIMARY KEY, \"do\" text NOT NULL, pad text NOT NULL)"
    ));
    pg.psql(&format!(
        "CREATE PUBLICATION {PUBLICATION} FOR TABLE {TABLE}"
    ));
    println!(
        "\n## neighbour: a plain pull sink drains {ROWS} rows alone and beside a sink whose transform spins to its 200 ms timeout on every {POISON_EVERY}th row; load average {}",
        report::load()
    );
    println!();
    println!(
        "| run | neighbour | rows/s | weft CPU (s) | weft peak RSS (MiB) | load average after |"
    );
    println!("|---:|---|---:|---:|---:|---|");
    let mut ratios = Vec::new();
    for round in 0..RUNS {
        let mut rates = [0.0; 2];
        for (i, beside) in [false, true].into_iter().enumerate() {
            let (rate, cpu, rss) = measure(&pg, round * 2 + i, beside);
            rates[i] = rate;
            println!(
                "| {} | {} | {rate:.0} | {cpu:.1} | {rss:.0} | {} |",
                round + 1,
                if beside {
                    "beside the hostile sink"
                } else {
                    "alone"
                },
                report::load()
            );
        }
        ratios.push(rates[1] / rates[0]);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "\nneighbour's rate beside the hostile sink / alone, per round: {}; median {:.2}",
        ratios
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(", "),
        ratios[ratios.len() / 2]
    );
}
