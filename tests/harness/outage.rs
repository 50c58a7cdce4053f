//! What an outage test watches on the weft side: its memory, its
//! replication slot, and the messages waiting in its store (the outbox).

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::harness::postgres::PgCluster;
use crate::harness::weft::WeftProcess;

/// weft's resident set size, in KiB.
pub fn rss_kib(weft: &WeftProcess) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", weft.pid().unwrap())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// The `confirmed_flush_lsn` of `slot`, as a number.
pub fn confirmed_flush_lsn(pg: &PgCluster, slot: &str) -> u64 {
    pg.psql(&format!(
        "SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots WHERE slot_name = '{slot}'"
    ))
    .trim()
    .parse()
    .unwrap()
}

/// Waits until `slot` confirmed everything written so far, and returns its
/// `confirmed_flush_lsn`.
pub fn wait_for_slot_to_catch_up(pg: &PgCluster, slot: &str) -> u64 {
    let written = pg
        .psql("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")
        .trim()
        .parse::<u64>()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let confirmed = confirmed_flush_lsn(pg, slot);
        if confirmed >= written {
            return confirmed;
        }
        assert!(
            Instant::now() < deadline,
            "slot {slot} stuck at {confirmed} < {written}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Idempotency keys of `sink`'s messages in the store of the weft whose
/// test directory is `dir`.
pub fn stored_keys(dir: &Path, sink: &str) -> HashSet<String> {
    let db = rusqlite::Connection::open_with_flags(
        dir.join("weft-data/weft.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    let mut query = db
        .prepare("SELECT idempotency_key FROM pull_messages WHERE sink = ?1")
        .unwrap();
    query
        .query_map([sink], |row| row.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}
