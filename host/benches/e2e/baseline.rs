//! The native baseline: `pg_recvlogical` draining a slot with pgoutput up to
//! a given LSN, writing to /dev/null.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::postgres::PgCluster;
use crate::workload::PUBLICATION;

/// Drains `slot` up to `end_lsn`; returns the wall time from start to exit.
pub fn pg_recvlogical(pg: &PgCluster, slot: &str, end_lsn: &str) -> Duration {
    let started = Instant::now();
    let output = Command::new(pg.bin("pg_recvlogical"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &pg.port().to_string(),
            "-U",
            "postgres",
        ])
        .args([
            "-d",
            "postgres",
            "--slot",
            slot,
            "--start",
            "--plugin=pgoutput",
        ])
        .args(["-o", "proto_version=2", "-o"])
        .arg(format!("publication_names={PUBLICATION}"))
        .arg(format!("--endpos={end_lsn}"))
        .args(["--no-loop", "-f", "/dev/null"])
        .output()
        .expect("run pg_recvlogical (from the same Postgres installation as the server)");
    let elapsed = started.elapsed();
    assert!(
        output.status.success(),
        "pg_recvlogical failed with {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let confirmed = pg.psql(&format!(
        "SELECT confirmed_flush_lsn >= '{end_lsn}' FROM pg_replication_slots WHERE slot_name = '{slot}'"
    ));
    assert_eq!(
        confirmed.trim(),
        "t",
        "pg_recvlogical exited before confirming {end_lsn} on {slot}"
    );
    elapsed
}
