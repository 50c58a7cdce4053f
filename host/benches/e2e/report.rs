//! What the results are printed with: the machine, its load, and latency
//! statistics.

/// `nproc`, the CPU model and the load average, on one line.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("machine: nproc = {cpus}, {model}; load average {}", load())
}

/// The 1, 5 and 15 minute load averages.
pub fn load() -> String {
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let fields: Vec<&str> = loadavg.split_whitespace().take(3).collect();
    fields.join(" ")
}

/// Average, median, 99th percentile and maximum of a sample.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    /// Number of values.
    pub count: usize,
    /// Mean.
    pub avg: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Largest value.
    pub max: f64,
}

impl Stats {
    /// The statistics of `values` (at least one).
    pub fn of(mut values: Vec<f64>) -> Stats {
        assert!(!values.is_empty(), "no values to summarise");
        values.sort_by(f64::total_cmp);
        let rank =
            |q: f64| values[((q * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1];
        Stats {
            count: values.len(),
            avg: values.iter().sum::<f64>() / values.len() as f64,
            p50: rank(0.50),
            p99: rank(0.99),
            max: values[values.len() - 1],
        }
    }
}
