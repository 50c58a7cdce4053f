//! One weft process per measured consumer: its config (one database entry
//! on its own slot, one sink, optionally the upcase transform), its peak
//! memory, and what a run needs of the destination it drives ([`Target`]).

use std::path::Path;
use std::sync::mpsc;
use std::time::Instant;

use chrono::{DateTime, Utc};

use crate::harness::guests;
use crate::harness::postgres::PgCluster;
use crate::harness::weft::WeftProcess;
use crate::workload::{PUBLICATION, TABLE};

/// A destination weft delivers to, and how the benchmark consumes it.
pub trait Target {
    /// How the table names it, e.g. `NATS JetStream`.
    fn label(&self) -> String;
    /// A short lowercase name used in slot, database and sink names.
    fn key(&self) -> &'static str;
    /// Top-level config the destination needs (e.g. `http_endpoints`).
    fn top_level(&self) -> String {
        String::new()
    }
    /// The sink's `destination` mapping, each line indented six spaces.
    fn destination(&self, database: &str) -> String;
    /// Readies the broker for the messages of `database` before weft starts.
    fn prepare(&self, _database: &str) {}
    /// Consumes until `count` messages of `run` arrived (pull consumers also
    /// ack them) and returns when the last one did; panics with weft's log
    /// after [`DRAIN_TIMEOUT`].
    fn drain(&self, run: &Run, weft: &WeftProcess, count: usize) -> Instant;
}

/// A message as the benchmark's consumer received it: when, and its body.
pub type Arrival = (DateTime<Utc>, Vec<u8>);

/// A destination with a consumer that sees each message as it arrives.
pub trait LiveTarget: Target {
    /// Starts receiving the messages of `database`; returns once the
    /// subscription is in place. Each arrival is sent with its receipt time.
    fn subscribe(&self, database: &str) -> mpsc::Receiver<Arrival>;
}

/// What one weft run streams: names derived from the target and variant.
pub struct Run {
    /// The database entry's name (also in NATS subjects and Kafka topics).
    pub database: String,
    /// The replication slot.
    pub slot: String,
    /// The sink's name.
    pub sink: String,
    /// Whether the sink runs the upcase WASM transform.
    pub transform: bool,
    /// The sink's `function_instances` (left out of the config at 1, so
    /// that builds before the key run the same config).
    pub function_instances: u32,
}

impl Run {
    /// Names for `target` with or without the transform; `tag` keeps runs of
    /// different scenarios apart.
    /// `function_instances` applies with the transform.
    pub fn new(target: &dyn Target, transform: bool, function_instances: u32, tag: &str) -> Run {
        let base = format!(
            "{tag}_{}_{}",
            target.key(),
            if transform { "wasm" } else { "plain" }
        );
        Run {
            database: base.clone(),
            slot: base.clone(),
            sink: base,
            transform,
            function_instances,
        }
    }

    /// The weft config for this run against `pg`; the slot is created when
    /// missing (the throughput scenario creates it before writing).
    pub fn config(&self, pg: &PgCluster, target: &dyn Target) -> String {
        let (functions, transform) = if self.transform {
            (
                format!(
                    "functions:\n  - name: upcase\n    type: transform\n    file: {}\n    config: {{ column: item }}\n",
                    guests::wasm("weft_upcase_transform").display()
                ),
                match self.function_instances {
                    1 => "    transform: upcase\n".to_string(),
                    n => format!("    transform: upcase\n    function_instances: {n}\n"),
                },
            )
        } else {
            (String::new(), String::new())
        };
        format!(
            r#"databases:
  - name: {database}
    hostname: 127.0.0.1
    port: {port}
    database: postgres
    username: postgres
    slot: {{ name: {slot}, create_if_not_exists: true }}
    publication: {{ name: {PUBLICATION} }}
{top_level}{functions}sinks:
  - name: {sink}
    database: {database}
    source: {{ include_tables: [{TABLE}] }}
{transform}    destination:
{destination}
"#,
            database = self.database,
            port = pg.port(),
            slot = self.slot,
            sink = self.sink,
            top_level = target.top_level(),
            destination = target.destination(&self.database),
        )
    }

    /// Starts weft for this run in `dir`.
    pub fn start(&self, dir: &Path, pg: &PgCluster, target: &dyn Target) -> WeftProcess {
        WeftProcess::start(dir, &self.config(pg, target))
    }
}

/// Peak resident memory (`VmHWM`) of `weft` in MiB.
pub fn peak_rss_mib(weft: &WeftProcess) -> f64 {
    let pid = weft.pid().expect("weft runs");
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/<pid>/status");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status");
    kib / 1024.0
}

/// CPU time (user + system) `weft` used so far, in seconds.
pub fn cpu_seconds(weft: &WeftProcess) -> f64 {
    let pid = weft.pid().expect("weft runs");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/<pid>/stat");
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let rest = &stat[stat.rfind(')').expect("a /proc stat line") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 =
        fields[11].parse::<f64>().expect("utime") + fields[12].parse::<f64>().expect("stime");
    // SAFETY: sysconf only reads a configuration value.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks / per_second
}
