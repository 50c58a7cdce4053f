//! The benchmark table and the changes written to it: batches of inserts
//! and updates in transactions of [`TX_ROWS`] rows, or a paced live stream.

use std::time::{Duration, Instant};

use crate::harness::postgres::{PgCluster, PgOptions};

/// The replicated table.
pub const TABLE: &str = "public.bench_rows";
/// The publication every consumer reads.
pub const PUBLICATION: &str = "bench_pub";
/// Rows per transaction in the throughput workload.
pub const TX_ROWS: usize = 100;

/// A cluster tuned so that checkpoints do not land in the middle of a run,
/// with the table and the publication created.
pub fn cluster() -> PgCluster {
    let pg = PgCluster::start_with(PgOptions {
        settings: vec![
            "max_wal_size = 8GB".into(),
            "checkpoint_timeout = 30min".into(),
            "shared_buffers = 128MB".into(),
        ],
        ..Default::default()
    });
    // About 200 bytes of row: ids, short texts, a numeric, a timestamp.
    pg.psql(
        "CREATE TABLE bench_rows (
            id bigint PRIMARY KEY,
            customer text NOT NULL,
            item text NOT NULL,
            qty int NOT NULL,
            price numeric(10,2) NOT NULL,
            status text NOT NULL,
            created_at timestamptz NOT NULL,
            note text NOT NULL
        )",
    );
    pg.psql(&format!(
        "CREATE PUBLICATION {PUBLICATION} FOR TABLE {TABLE}"
    ));
    pg
}

fn insert_sql(first: i64, last: i64) -> String {
    format!(
        "INSERT INTO bench_rows SELECT g, 'customer-' || g, 'item number ' || (g % 997), \
         (g % 17) + 1, ((g % 100000) / 100.0)::numeric(10,2), 'new', now(), \
         repeat('n', 60) || g FROM generate_series({first}, {last}) g"
    )
}

/// Writes `changes` changes (half inserts, half updates, interleaved) in
/// transactions of [`TX_ROWS`] rows; returns how long it took.
///
/// Transaction 2m inserts batch m; transaction 2m+1 updates the rows of
/// insert batch m/2, so a row's insert and updates are far apart in the WAL
/// and sinks that deliver one message per row at a time are not serialised
/// by the workload itself.
pub fn write_batches(rt: &tokio::runtime::Runtime, pg: &PgCluster, changes: usize) -> Duration {
    let transactions = changes / TX_ROWS;
    let started = Instant::now();
    rt.block_on(async {
        let client = pg.client("postgres").await;
        let mut script = String::new();
        for tx in 0..transactions {
            let batch = (tx / 2) as i64;
            let statement = if tx % 2 == 0 {
                let first = batch * TX_ROWS as i64 + 1;
                insert_sql(first, first + TX_ROWS as i64 - 1)
            } else {
                let first = (batch / 2) * TX_ROWS as i64 + 1;
                format!(
                    "UPDATE bench_rows SET qty = qty + 1, status = 'paid{tx}' \
                     WHERE id BETWEEN {first} AND {}",
                    first + TX_ROWS as i64 - 1
                )
            };
            script += &format!("BEGIN; {statement}; COMMIT;\n");
            if tx % 50 == 49 || tx + 1 == transactions {
                client
                    .batch_execute(&script)
                    .await
                    .expect("write the workload");
                script.clear();
            }
        }
    });
    started.elapsed()
}

/// The number of changes [`write_batches`] really writes for `changes`.
pub fn written(changes: usize) -> usize {
    changes / TX_ROWS * TX_ROWS
}

/// The server's current WAL position, as text (`0/1A2B3C4`).
pub fn current_lsn(pg: &PgCluster) -> String {
    pg.psql("SELECT pg_current_wal_lsn()").trim().to_string()
}

/// Inserts `rate` rows per second for `seconds`, in a transaction every
/// 10 ms, ids from `first_id`; returns the rows written and the time taken.
pub fn write_paced(
    rt: &tokio::runtime::Runtime,
    pg: &PgCluster,
    first_id: i64,
    rate: usize,
    seconds: u64,
) -> (usize, Duration) {
    const TICK: Duration = Duration::from_millis(10);
    let per_tick = (rate / 100).max(1) as i64;
    let ticks = seconds * 100;
    rt.block_on(async {
        let client = pg.client("postgres").await;
        let mut interval = tokio::time::interval(TICK);
        let started = Instant::now();
        let mut next = first_id;
        for _ in 0..ticks {
            interval.tick().await;
            client
                .batch_execute(&insert_sql(next, next + per_tick - 1))
                .await
                .expect("write a paced transaction");
            next += per_tick;
        }
        ((next - first_id) as usize, started.elapsed())
    })
}

/// Inserts `rows` rows from `first_id` in one transaction.
pub fn write_once(pg: &PgCluster, first_id: i64, rows: i64) {
    pg.psql(&insert_sql(first_id, first_id + rows - 1));
}
