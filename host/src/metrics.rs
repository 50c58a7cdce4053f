//! Prometheus metrics: one process-wide recorder, rendered in the text
//! exposition format at `GET /metrics`.
//!
//! Metric names follow Sequin's where the meaning is the same, so existing
//! dashboards carry over; weft's own are prefixed `weft_`.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

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
/// Delivery attempts that failed: a push delivery to retry or dead-letter,
/// or a pull consumer's nack (Sequin's name). Label: `sink`.
pub const DELIVER_FAILURES: &str = "sequin_message_deliver_failure_count";
/// Messages moved to the dead letters. Labels: `sink`, `stage`
/// (`functions` or `delivery`). Once a sink is drained, successes plus
/// dead letters equal what was ingested.
pub const DEAD_LETTERED: &str = "weft_messages_dead_lettered_total";

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

/// Registers `sink`'s counters at zero, with each of its functions
/// (`(name, kind)`), so that dashboards and `rate()` see every series from
/// the start rather than only after its first event.
pub fn register_sink(sink: &str, functions: &[(&str, &'static str)]) {
    for name in [
        MESSAGES_INGESTED,
        DELIVER_ATTEMPTS,
        DELIVER_SUCCESSES,
        DELIVER_FAILURES,
    ] {
        metrics::counter!(name, "sink" => sink.to_string()).increment(0);
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

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the recorder (once per process) and returns its handle.
pub fn install() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
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
        handle
    })
}

/// Every metric in the Prometheus text format.
pub fn render() -> String {
    install().render()
}
