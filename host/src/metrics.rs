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
