//! End-to-end benchmarks through the real `weft` binary, real Postgres and
//! real brokers (the e2e test harness). Results and how to read them:
//! BENCHMARKS.md at the repository root.
//!
//! ```sh
//! cargo bench -p weft --bench e2e -- throughput            # scenario 1
//! cargo bench -p weft --bench e2e -- throughput --changes 50000
//! cargo bench -p weft --bench e2e -- latency               # scenario 2
//! cargo bench -p weft --bench e2e -- latency --rate 2000 --seconds 20
//! cargo bench -p weft --bench e2e -- throughput --only pull
//! cargo bench -p weft --bench e2e -- throughput --only nats --function-instances 2
//! cargo bench -p weft --bench e2e -- backfill --changes 1000000   # scenario 3 (N rows)
//! cargo bench -p weft --bench e2e -- backfill --stored-only       # its first phase alone
//! cargo bench -p weft --bench e2e -- pgsink --changes 200000      # scenario 4 (N rows)
//! cargo bench -p weft --bench e2e -- neighbour                    # scenario 5
//! ```
//!
//! * `throughput`: one slot per consumer is created before any write, then
//!   N changes are written; each consumer in turn drains that same WAL:
//!   `pg_recvlogical` (the baseline) and weft through each sink, with and
//!   without a WASM transform.
//! * `latency`: weft runs caught up while changes are written at a fixed
//!   rate; per message, receipt time at the broker's consumer minus the
//!   message's `metadata.commit_timestamp`.
//! * `backfill`: N existing rows backfilled into the pull sink, next to
//!   `COPY (SELECT * …) TO STDOUT` of the same table.
//! * `pgsink`: N existing rows backfilled into the postgres sink (mirror
//!   and append modes), next to `COPY … FROM` into the same table.
//! * `neighbour`: a plain pull sink drains 20,000 rows alone and beside a
//!   sink of the same database whose transform times out on every 200th
//!   row; the ratio of its rates.
//!
//! A new sink is one more [`weft_run::Target`] (and [`weft_run::LiveTarget`]
//! for latency) in `targets.rs`, listed in [`throughput_targets`] and
//! [`latency_targets`].
//!
//! The guests are built with `scripts/build-guests.sh` first (through the
//! harness).

#[allow(dead_code)]
#[path = "../../../tests/harness/mod.rs"]
mod harness;

mod backfill;
mod baseline;
mod latency;
mod neighbour;
mod pg_sink;
mod report;
mod targets;
mod throughput;
mod weft_run;
mod workload;

use std::time::Duration;

use targets::{KafkaTarget, NatsTarget, PullTarget, WebhookTarget};
use weft_run::{LiveTarget, Target};

/// Command-line settings; every one has a default.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Changes written for `throughput`.
    pub changes: usize,
    /// Changes per second written for `latency`.
    pub rate: usize,
    /// How long `latency` writes, in seconds.
    pub seconds: u64,
    /// Concurrent pull consumers.
    pub pull_consumers: usize,
    /// Measure only the sink whose key (`nats`, `pull`, `hook`...) this is.
    pub only: Option<String>,
    /// The sink's `function_instances` in runs with the transform.
    pub function_instances: u32,
    /// `backfill`: measure only how fast the backfill is stored, without
    /// a function (no drain, no transform row).
    pub stored_only: bool,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let settings = parse_settings(&args);
    let scenarios: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| SCENARIOS.contains(a))
        .collect();
    let scenarios = if scenarios.is_empty() {
        vec!["throughput", "latency"]
    } else {
        scenarios
    };
    println!("# weft end-to-end benchmark");
    println!("{}", report::machine());
    println!("settings: {settings:?}");
    for scenario in scenarios {
        match scenario {
            "throughput" => throughput::run(&settings, throughput_targets),
            "backfill" => backfill::run(&settings),
            "pgsink" => pg_sink::run(&settings),
            "neighbour" => neighbour::run(&settings),
            _ => latency::run(&settings, latency_targets),
        }
    }
}

/// Every sink the throughput scenario drains through.
fn throughput_targets(settings: &Settings) -> Vec<Box<dyn Target>> {
    vec![
        Box::new(NatsTarget::start()),
        Box::new(PullTarget::new(settings.pull_consumers)),
        Box::new(WebhookTarget::start()),
        Box::new(KafkaTarget::start()),
    ]
}

/// Every sink the latency scenario measures.
fn latency_targets() -> Vec<Box<dyn LiveTarget>> {
    vec![
        Box::new(NatsTarget::start()),
        Box::new(KafkaTarget::start()),
    ]
}

/// The scenarios, as named on the command line.
const SCENARIOS: [&str; 5] = ["throughput", "latency", "backfill", "pgsink", "neighbour"];

/// What `--help` prints, and an unknown argument with it.
const USAGE: &str = "usage: e2e [throughput] [latency] [backfill] [pgsink] [neighbour] \
[--changes N] [--rate N] [--seconds N] [--pull-consumers N] [--only nats|pull|hook|kafka] [--stored-only] [--function-instances N]
(no scenario: throughput and latency; WEFT_BIN=<weft binary> runs another build of weft)";

fn parse_settings(args: &[String]) -> Settings {
    let mut settings = Settings {
        changes: 200_000,
        rate: 2000,
        seconds: 20,
        pull_consumers: 4,
        only: None,
        stored_only: false,
        function_instances: 1,
    };
    let mut i = 0;
    while i < args.len() {
        let value = || -> u64 {
            args.get(i + 1)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{} needs a positive number after it", args[i]))
        };
        match args[i].as_str() {
            "--changes" => settings.changes = value() as usize,
            "--rate" => settings.rate = value() as usize,
            "--seconds" => settings.seconds = value(),
            "--pull-consumers" => settings.pull_consumers = value() as usize,
            "--function-instances" => settings.function_instances = value() as u32,
            "--stored-only" => {
                settings.stored_only = true;
                i += 1;
                continue;
            }
            "--only" => {
                settings.only = Some(
                    args.get(i + 1)
                        .expect("--only needs a sink key after it: nats, pull, hook, kafka")
                        .clone(),
                )
            }
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            // `cargo bench` passes `--bench` to every bench binary.
            word if word == "--bench" || SCENARIOS.contains(&word) => {
                i += 1;
                continue;
            }
            other => {
                eprintln!("unknown argument {other:?}\n\n{USAGE}");
                std::process::exit(2);
            }
        }
        i += 2;
    }
    assert!(
        settings.changes >= 200 && settings.rate >= 100 && settings.pull_consumers >= 1,
        "--changes must be at least 200, --rate at least 100, --pull-consumers at least 1"
    );
    settings
}

/// How long a consumer may take to drain before the run is declared stuck.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(1800);
