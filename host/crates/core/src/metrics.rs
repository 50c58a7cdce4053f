//! Prometheus metrics: one process-wide recorder, rendered in the text
//! exposition format at `GET /metrics`.
//!
//! Metric names follow Sequin's where the meaning is the same, so existing
//! dashboards carry over; weft's own are prefixed `weft_`.

use std::collections::BTreeSet;
use std::sync::{Mutex, OnceLock};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// WAL the slot retains, in bytes: the server's current LSN minus the
/// slot's `restart_lsn` (Sequin's name). Labels: `database`, `slot`.
pub const SLOT_SIZE: &str = "sequin_replication_slot_size";
/// How far the slot's confirmed position trails the server's current LSN,
/// in bytes. Labels: `database`, `slot`.
pub const SLOT_CONFIRMED_LAG: &str = "weft_replication_slot_confirmed_lag_bytes";

/// Changes a sink's function failed on. Labels: `sink`, `function`,
/// `kind` (enrichment, filter, transform, routing) and `reason` (`trap`:
/// a trap, timeout, out of memory or bad output isolated to the change;
/// `transient`; `permanent`).
pub const FUNCTION_FAILURES: &str = "weft_function_failures_total";
/// Unchanged TOAST values delivered as the placeholder `"unchanged_toast"`
/// because the table's replica identity is not FULL. Labels: `database`,
/// `table` (`schema.table`).
pub const UNCHANGED_TOAST_VALUES: &str = "weft_unchanged_toast_values_total";

/// Rows a backfill has read and stored so far (survives restarts).
/// Labels: `sink`, `table` (`schema.table`).
pub const BACKFILL_ROWS_PROCESSED: &str = "weft_backfill_rows_processed";
/// The planner's estimate of the rows a backfill reads. Labels: `sink`, `table`.
pub const BACKFILL_ROWS_ESTIMATED: &str = "weft_backfill_rows_estimated";
/// 1 while a backfill of the table is active, else 0. Labels: `sink`, `table`.
pub const BACKFILL_ACTIVE: &str = "weft_backfill_active";

/// Messages that entered a sink's queue: stored after its functions,
/// released from being held, replayed from the dead letters, or
/// dead-lettered by a function (Sequin's name). Label: `sink`.
pub const MESSAGES_INGESTED: &str = "sequin_messages_ingested_count";
/// Messages handed out for delivery: leased by a push sink's worker or
/// received by a pull consumer (Sequin's name). Label: `sink`.
pub const DELIVER_ATTEMPTS: &str = "sequin_message_deliver_attempt_count";
/// Messages delivered: acknowledged by the destination or acked by a pull
/// consumer (Sequin's name). Label: `sink`.
pub const DELIVER_SUCCESSES: &str = "sequin_message_deliver_success_count";
/// Messages of a push sink that left memory for the store: their delivery
/// kept failing, the sink's memory budget was full, or its worker stopped
/// (weft's own; see docs/delivery.md). Label: `sink`.
pub const MESSAGES_SPILLED: &str = "weft_messages_spilled_total";
/// Delivery attempts that failed: a push delivery to retry or dead-letter,
/// or a pull consumer's nack (Sequin's name). Label: `sink`.
pub const DELIVER_FAILURES: &str = "sequin_message_deliver_failure_count";
/// Messages moved to the dead letters. Labels: `sink`, `stage`
/// (`functions` or `delivery`). Once a sink is drained, successes plus
/// dead letters equal what was ingested.
pub const DEAD_LETTERED: &str = "weft_messages_dead_lettered_total";

/// Microseconds from a change's commit in Postgres (its commit timestamp)
/// until its message is stored for a sink (Sequin's name). Histogram.
/// Label: `sink`.
pub const INGESTION_LATENCY: &str = "sequin_ingestion_latency_us";
/// Microseconds from a message being stored until it is delivered:
/// acknowledged by the destination or acked by a pull consumer (Sequin's
/// name). Histogram. Label: `sink`.
pub const DELIVERY_LATENCY: &str = "sequin_delivery_latency_us";
/// Messages stored for a sink and not handed out: waiting for delivery, or
/// for a retry (Sequin's name). Gauge, read at each scrape. Label: `sink`.
pub const MESSAGES_BUFFERED: &str = "sequin_messages_buffered";
/// Messages handed out and not yet settled: leased by a push sink's
/// worker, or received and not acked by a pull consumer (Sequin's name).
/// Gauge, read at each scrape. Label: `sink`.
pub const MESSAGES_IN_DELIVERY: &str = "sequin_messages_in_delivery";
/// Changes held for a sink's functions (transient failures waiting for a
/// retry, or a quarantined sink's changes). Gauge. Label: `sink`.
pub const MESSAGES_HELD: &str = "weft_sink_messages_held";
/// Payload bytes a push sink's running deliveries hold in memory. Gauge.
/// Label: `sink`. Compare with [`DELIVERY_MEMORY_LIMIT`].
pub const DELIVERY_MEMORY: &str = "weft_sink_delivery_memory_bytes";
/// A push sink's `max_memory_mb`, in bytes. Gauge. Label: `sink`.
pub const DELIVERY_MEMORY_LIMIT: &str = "weft_sink_max_memory_bytes";

/// Calls into a function's guest (one per batch, bisection steps
/// included). Labels of every `weft_plugin_*` metric: `sink`, `function`
/// (its name in the config) and `kind`.
pub const PLUGIN_CALLS: &str = "weft_plugin_calls_total";
/// Changes passed to a function's guest; `rate(weft_plugin_call_seconds_sum)
/// / rate(weft_plugin_messages_total)` is the cost per change.
pub const PLUGIN_MESSAGES: &str = "weft_plugin_messages_total";
/// Seconds one call into a guest took (a whole batch). Histogram.
pub const PLUGIN_CALL_DURATION: &str = "weft_plugin_call_seconds";
/// Calls that failed in the guest, by `reason`: `timeout`, `oom`, `trap`
/// or `bad_output`.
pub const PLUGIN_TRAPS: &str = "weft_plugin_traps_total";
/// The most linear memory an instance of the function has held, in bytes.
pub const PLUGIN_MEMORY_HIGH_WATER: &str = "weft_plugin_memory_high_water_bytes";
/// Live instances of the function (0 between a failure and the next call).
pub const PLUGIN_INSTANCES: &str = "weft_plugin_instances";

/// Requests the HTTP API answered. Labels: `route` (the route's pattern,
/// e.g. `/api/sinks/{name}/backfills`, or `unmatched`), `method`, `status`.
pub const API_REQUESTS: &str = "weft_api_requests_total";
/// Seconds the HTTP API took to answer (a long-polling receive counts its
/// wait). Histogram. Labels: `route`, `method`, `status`.
pub const API_REQUEST_DURATION: &str = "weft_api_request_seconds";

/// Bucket bounds of the `_us` latency histograms: 100 µs to 5 min.
const LATENCY_US_BUCKETS: &[f64] = &[
    100.0,
    500.0,
    1_000.0,
    5_000.0,
    10_000.0,
    25_000.0,
    50_000.0,
    100_000.0,
    250_000.0,
    500_000.0,
    1_000_000.0,
    2_500_000.0,
    5_000_000.0,
    10_000_000.0,
    30_000_000.0,
    60_000_000.0,
    300_000_000.0,
];
/// Bucket bounds of the `_seconds` histograms: 10 µs to 60 s.
const SECONDS_BUCKETS: &[f64] = &[
    0.000_01, 0.000_05, 0.000_1, 0.000_5, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Milliseconds an account's function calls waited for its CPU share
/// (`plugin_cpu_percent`). Label: `account`.
pub const ACCOUNT_CPU_WAIT: &str = "weft_account_cpu_wait_milliseconds_total";
/// Restarts of a database's feed (source and pipeline) after it failed.
/// Label: `database`.
pub const FEED_RESTARTS: &str = "weft_database_feed_restarts_total";
/// Restarts of a webhook source's feed (its log's reader and pipeline)
/// after it failed. Label: `source`.
pub const WEBHOOK_FEED_RESTARTS: &str = "weft_webhook_source_feed_restarts_total";
/// Requests to webhook sources. Labels: `source`, `outcome` (`accepted`,
/// `duplicate`, `unauthorized`, `too_large`, `malformed`, `error`).
pub const WEBHOOK_REQUESTS: &str = "weft_webhook_source_requests_total";

/// Adds `n` to the counter `name` of `sink`.
pub fn count(name: &'static str, sink: &str, n: usize) {
    if n > 0 {
        metrics::counter!(name, "sink" => sink.to_string()).increment(n as u64);
    }
}

/// Adds `n` to [`DEAD_LETTERED`] of `sink` at `stage`.
pub fn count_dead_lettered(sink: &str, stage: &'static str, n: usize) {
    if n > 0 {
        metrics::counter!(DEAD_LETTERED, "sink" => sink.to_string(), "stage" => stage)
            .increment(n as u64);
    }
}

/// The sinks registered in this process, and those deleted since, whose
/// series [`render`] leaves out: the recorder cannot remove a series, and
/// a deleted sink's last queue depth would otherwise stand (and alert)
/// until the process restarts.
struct SinkSeries {
    registered: BTreeSet<String>,
    forgotten: BTreeSet<String>,
}

static SINK_SERIES: Mutex<SinkSeries> = Mutex::new(SinkSeries {
    registered: BTreeSet::new(),
    forgotten: BTreeSet::new(),
});

fn sink_series() -> std::sync::MutexGuard<'static, SinkSeries> {
    SINK_SERIES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Leaves every series of `sink` (one deleted while weft runs) out of
/// [`render`] until a sink of that name is registered again.
pub fn forget_sink(sink: &str) {
    let mut series = sink_series();
    series.registered.remove(sink);
    series.forgotten.insert(sink.to_string());
}

/// Forgets every registered sink but `current` (a run of the server
/// starting with a config that dropped some).
pub fn keep_only_sinks<'a>(current: impl IntoIterator<Item = &'a str>) {
    let current: BTreeSet<&str> = current.into_iter().collect();
    let mut series = sink_series();
    let gone: Vec<String> = series
        .registered
        .iter()
        .filter(|sink| !current.contains(sink.as_str()))
        .cloned()
        .collect();
    for sink in gone {
        series.registered.remove(&sink);
        series.forgotten.insert(sink);
    }
}

/// Whether the exposition line `line` is a sample of a forgotten sink.
fn of_forgotten_sink(line: &str, forgotten: &BTreeSet<String>) -> bool {
    let Some(labels) = line
        .split_once('{')
        .and_then(|(_, rest)| rest.rsplit_once('}'))
        .map(|(labels, _)| labels)
    else {
        return false;
    };
    // Label values of sinks are resource names, which need no escaping, so
    // a label boundary is a `,` outside any value.
    labels.split(',').any(|label| {
        label
            .strip_prefix("sink=\"")
            .and_then(|value| value.strip_suffix('"'))
            .is_some_and(|sink| forgotten.contains(sink))
    })
}

/// Registers `sink`'s counters at zero, with each of its functions
/// (`(name, kind)`), so that dashboards and `rate()` see every series from
/// the start rather than only after its first event.
pub fn register_sink(sink: &str, functions: &[(&str, &'static str)]) {
    {
        let mut series = sink_series();
        series.forgotten.remove(sink);
        series.registered.insert(sink.to_string());
    }
    for name in [
        MESSAGES_INGESTED,
        DELIVER_ATTEMPTS,
        DELIVER_SUCCESSES,
        DELIVER_FAILURES,
        MESSAGES_SPILLED,
    ] {
        metrics::counter!(name, "sink" => sink.to_string()).increment(0);
    }
    for name in [MESSAGES_BUFFERED, MESSAGES_IN_DELIVERY, MESSAGES_HELD] {
        metrics::gauge!(name, "sink" => sink.to_string()).set(0.0);
    }
    for stage in ["functions", "delivery"] {
        metrics::counter!(DEAD_LETTERED, "sink" => sink.to_string(), "stage" => stage).increment(0);
    }
    for (function, kind) in functions {
        for reason in ["trap", "transient", "permanent"] {
            metrics::counter!(
                FUNCTION_FAILURES,
                "sink" => sink.to_string(),
                "function" => function.to_string(),
                "kind" => *kind,
                "reason" => reason,
            )
            .increment(0);
        }
    }
}

/// Records one [`INGESTION_LATENCY`] sample per message of `sink`, measured
/// now: `messages` of them committed at each of `commit_timestamps`.
pub fn record_ingestion_latency(
    sink: &str,
    commit_timestamps: impl IntoIterator<Item = (chrono::DateTime<chrono::Utc>, usize)>,
) {
    let histogram = metrics::histogram!(INGESTION_LATENCY, "sink" => sink.to_string());
    let now = chrono::Utc::now();
    for (committed, messages) in commit_timestamps {
        // A clock behind the server's gives a negative span: count it as 0.
        let us = (now - committed)
            .num_microseconds()
            .unwrap_or(i64::MAX)
            .max(0);
        histogram.record_many(us as f64, messages);
    }
}

/// Records one [`DELIVERY_LATENCY`] sample per delivered message of `sink`,
/// from the times (ms since the Unix epoch) they were stored.
pub fn record_delivery_latency(sink: &str, stored_at_ms: &[i64]) {
    if stored_at_ms.is_empty() {
        return;
    }
    let histogram = metrics::histogram!(DELIVERY_LATENCY, "sink" => sink.to_string());
    let now_ms = chrono::Utc::now().timestamp_millis();
    for stored in stored_at_ms {
        histogram.record((now_ms - stored).max(0) as f64 * 1000.0);
    }
}

/// Sets `sink`'s queue gauges ([`MESSAGES_BUFFERED`],
/// [`MESSAGES_IN_DELIVERY`], [`MESSAGES_HELD`]).
pub fn set_queue_depths(sink: &str, buffered: u64, in_delivery: u64, held: u64) {
    for (name, value) in [
        (MESSAGES_BUFFERED, buffered),
        (MESSAGES_IN_DELIVERY, in_delivery),
        (MESSAGES_HELD, held),
    ] {
        metrics::gauge!(name, "sink" => sink.to_string()).set(value as f64);
    }
}

/// Something that refreshes gauges just before each scrape (e.g. queue
/// depths read from the store), so that they are never stale.
type Collector = Box<dyn Fn() + Send + Sync>;

static COLLECTORS: Mutex<Vec<Collector>> = Mutex::new(Vec::new());

/// Runs `collector` before each [`render`], in place of any collector
/// set before (a run of the server sets one; a reloaded run replaces it).
pub fn on_render(collector: impl Fn() + Send + Sync + 'static) {
    let mut collectors = COLLECTORS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    collectors.clear();
    collectors.push(Box::new(collector));
}

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// How often histogram samples are folded into their buckets. The exporter
/// keeps every sample recorded since (the store records one per message)
/// until upkeep or a scrape drains them: without upkeep, a weft that no
/// Prometheus scrapes grew by some 16 bytes per message, for ever. Every
/// second, not the exporter's 5 s: a backfill stores ~800k messages a
/// second on 2 cores, 13 MB of samples a second.
const UPKEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// The name of the thread that runs the exporter's upkeep.
const UPKEEP_THREAD: &str = "weft-metrics";

/// Installs the recorder (once per process) and returns its handle.
pub fn install() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_us".into()), LATENCY_US_BUCKETS)
            .and_then(|builder| {
                builder.set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
            })
            .expect("the bucket lists are not empty")
            .build_recorder();
        let handle = recorder.handle();
        let upkeep = handle.clone();
        let spawned = std::thread::Builder::new()
            .name(UPKEEP_THREAD.into())
            .spawn(move || {
                loop {
                    std::thread::sleep(UPKEEP_INTERVAL);
                    upkeep.run_upkeep();
                }
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "cannot start the metrics upkeep thread; histogram samples are drained only when /metrics is scraped");
        }
        // Another recorder can only be set by a test harness; then this
        // handle renders an empty registry, which is harmless.
        let _ = metrics::set_global_recorder(recorder);
        metrics::describe_gauge!(
            SLOT_SIZE,
            metrics::Unit::Bytes,
            "WAL retained by the replication slot (current LSN - restart_lsn)"
        );
        metrics::describe_gauge!(
            SLOT_CONFIRMED_LAG,
            metrics::Unit::Bytes,
            "bytes between the server's current LSN and the slot's confirmed_flush_lsn"
        );
        metrics::describe_counter!(
            FUNCTION_FAILURES,
            "changes a sink's function failed on, by sink, function, kind and reason"
        );
        metrics::describe_counter!(
            UNCHANGED_TOAST_VALUES,
            metrics::Unit::Count,
            "unchanged TOAST values delivered as \"unchanged_toast\" (replica identity not FULL)"
        );
        metrics::describe_counter!(
            MESSAGES_INGESTED,
            "messages that entered the sink's queue (stored, released, replayed, or dead-lettered by a function)"
        );
        metrics::describe_counter!(
            DELIVER_ATTEMPTS,
            "messages handed out for delivery (leased or received)"
        );
        metrics::describe_counter!(
            DELIVER_SUCCESSES,
            "messages delivered (acknowledged by the destination or acked)"
        );
        metrics::describe_counter!(
            DELIVER_FAILURES,
            "failed delivery attempts (errors to retry or dead-letter, nacks)"
        );
        metrics::describe_counter!(DEAD_LETTERED, "messages moved to the dead letters, by stage");
        metrics::describe_gauge!(
            BACKFILL_ROWS_PROCESSED,
            metrics::Unit::Count,
            "rows the latest backfill of the table into the sink has read and stored"
        );
        metrics::describe_gauge!(
            BACKFILL_ROWS_ESTIMATED,
            metrics::Unit::Count,
            "the planner's estimate of the rows that backfill reads"
        );
        metrics::describe_gauge!(
            BACKFILL_ACTIVE,
            "1 while a backfill of the table into the sink is active, else 0"
        );
        describe_weft_metrics();
        handle
    })
}

fn describe_weft_metrics() {
    use metrics::Unit;
    metrics::describe_histogram!(
        INGESTION_LATENCY,
        Unit::Microseconds,
        "time from a change's commit until its message is stored for the sink"
    );
    metrics::describe_histogram!(
        DELIVERY_LATENCY,
        Unit::Microseconds,
        "time from a message being stored until it is delivered (acknowledged or acked)"
    );
    metrics::describe_gauge!(
        MESSAGES_BUFFERED,
        "messages stored for the sink and not handed out (waiting for delivery or a retry)"
    );
    metrics::describe_gauge!(
        MESSAGES_IN_DELIVERY,
        "messages handed out and not yet settled (leased or received, not acked)"
    );
    metrics::describe_gauge!(
        MESSAGES_HELD,
        "changes held for the sink's functions (waiting for a retry, or quarantined)"
    );
    metrics::describe_gauge!(
        DELIVERY_MEMORY,
        Unit::Bytes,
        "payload bytes the push sink's running deliveries hold in memory"
    );
    metrics::describe_gauge!(
        DELIVERY_MEMORY_LIMIT,
        Unit::Bytes,
        "the push sink's max_memory_mb, in bytes"
    );
    metrics::describe_counter!(
        PLUGIN_CALLS,
        "calls into the function's guest (one per batch)"
    );
    metrics::describe_counter!(PLUGIN_MESSAGES, "changes passed to the function's guest");
    metrics::describe_counter!(
        ACCOUNT_CPU_WAIT,
        "milliseconds the account's function calls waited for its CPU share"
    );
    metrics::describe_counter!(
        FEED_RESTARTS,
        "restarts of the database's feed (source and pipeline) after it failed"
    );
    metrics::describe_counter!(
        WEBHOOK_FEED_RESTARTS,
        "restarts of the webhook source's feed (log reader and pipeline) after it failed"
    );
    metrics::describe_histogram!(
        PLUGIN_CALL_DURATION,
        Unit::Seconds,
        "time one call into the function's guest took"
    );
    metrics::describe_counter!(
        PLUGIN_TRAPS,
        "calls that failed in the guest, by reason (timeout, oom, trap, bad_output)"
    );
    metrics::describe_gauge!(
        PLUGIN_MEMORY_HIGH_WATER,
        Unit::Bytes,
        "the most linear memory an instance of the function has held"
    );
    metrics::describe_gauge!(PLUGIN_INSTANCES, "live instances of the function");
    metrics::describe_counter!(API_REQUESTS, "requests the HTTP API answered");
    metrics::describe_histogram!(
        API_REQUEST_DURATION,
        Unit::Seconds,
        "time the HTTP API took to answer"
    );
}

/// Every metric in the Prometheus text format, after running the
/// [`on_render`] collectors. Blocks on them (they may read the store).
pub fn render() -> String {
    let handle = install();
    for collect in COLLECTORS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .iter()
    {
        collect();
    }
    let rendered = handle.render();
    let forgotten = &sink_series().forgotten;
    if forgotten.is_empty() {
        return rendered;
    }
    let mut kept = String::with_capacity(rendered.len());
    for line in rendered.lines() {
        if !of_forgotten_sink(line, forgotten) {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_drained_without_a_scrape() {
        install();
        let names = || -> Vec<String> {
            let threads = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
            threads
                .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
                .map(|name| name.trim().to_string())
                .collect()
        };
        // A new thread names itself once it runs.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !names().iter().any(|name| name == UPKEEP_THREAD) {
            assert!(std::time::Instant::now() < deadline, "{:?}", names());
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn a_forgotten_sinks_samples_are_recognised_by_their_sink_label_only() {
        let forgotten = BTreeSet::from(["doomed".to_string()]);
        for line in [
            r#"sequin_messages_ingested_count{sink="doomed"} 4"#,
            r#"weft_function_failures_total{function="f",sink="doomed",kind="transform"} 0"#,
            r#"weft_delivery_latency_us_bucket{sink="doomed",le="100"} 2"#,
        ] {
            assert!(of_forgotten_sink(line, &forgotten), "{line}");
        }
        for line in [
            r#"sequin_messages_ingested_count{sink="doomed2"} 4"#,
            r#"sequin_messages_ingested_count{sink="steady"} 4"#,
            r#"weft_x{function="doomed"} 1"#,
            r#"weft_x{other_sink="doomed"} 1"#,
            "# TYPE sequin_messages_ingested_count counter",
            "weft_unlabelled 1",
        ] {
            assert!(!of_forgotten_sink(line, &forgotten), "{line}");
        }
    }
}
