//! The correctness oracle of the workload and crash tests: a trigger on
//! every replicated table writes each change (table, primary key, action,
//! row image as `to_jsonb`) into an `audit` table outside the publication,
//! in the changing transaction, so rolled-back work leaves no trace and per
//! row the audit's `seq` order is commit order. [`Drained`] collects what a
//! sink delivered and checks it as it goes: one image per idempotency key,
//! per-row commit order. Text values longer than 4 kB are compared by
//! SHA-256 on both sides.
//!
//! Schema changes ([`SchemaChange`]) need nothing special: the trigger's
//! `to_jsonb` image has the columns and types of the moment the row was
//! written, which is what weft must deliver.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::postgres::PgCluster;
use super::weft::WeftProcess;

/// Texts longer than this are compared by digest.
const DIGEST_OVER: usize = 4096;

/// The audit table, its trigger, and four replicated tables with it.
pub const SCHEMA: &str = r#"
CREATE TABLE audit (
    seq    bigserial PRIMARY KEY,
    tbl    text NOT NULL,
    pk     text NOT NULL,
    action text NOT NULL,
    image  jsonb NOT NULL
);

CREATE FUNCTION audit_digest(img jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $f$
    SELECT coalesce(jsonb_object_agg(key,
        CASE WHEN jsonb_typeof(value) = 'string' AND length(value #>> '{}') > 4096
             THEN to_jsonb('sha256:' || encode(sha256(convert_to(value #>> '{}', 'UTF8')), 'hex'))
             ELSE value END), '{}'::jsonb)
    FROM jsonb_each(img)
$f$;

CREATE FUNCTION audit_row() RETURNS trigger LANGUAGE plpgsql
    SET timezone = 'UTC' SET intervalstyle = 'postgres' AS $f$
DECLARE
    img jsonb;
    key text := '';
BEGIN
    IF TG_OP = 'DELETE' THEN img := to_jsonb(OLD); ELSE img := to_jsonb(NEW); END IF;
    FOR i IN 0 .. TG_NARGS - 1 LOOP
        IF i > 0 THEN key := key || ':'; END IF;
        key := key || (img ->> TG_ARGV[i]);
    END LOOP;
    INSERT INTO audit (tbl, pk, action, image)
        VALUES (TG_TABLE_NAME, key, lower(TG_OP), audit_digest(img));
    RETURN NULL;
END
$f$;

CREATE TABLE accounts (id int PRIMARY KEY, owner text, balance numeric(12,2),
                       updated_at timestamptz, flags jsonb);
CREATE TABLE events (id bigint PRIMARY KEY, kind text, payload jsonb, doc text, ok bool);
CREATE TABLE lines (order_id int, line int, qty int, note text, PRIMARY KEY (order_id, line));
CREATE TABLE bulk (id int PRIMARY KEY, body text);
ALTER TABLE accounts REPLICA IDENTITY FULL;
ALTER TABLE events REPLICA IDENTITY FULL;
ALTER TABLE lines REPLICA IDENTITY FULL;
ALTER TABLE events ALTER COLUMN doc SET STORAGE EXTERNAL;
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON accounts FOR EACH ROW EXECUTE FUNCTION audit_row('id');
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON events FOR EACH ROW EXECUTE FUNCTION audit_row('id');
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON lines FOR EACH ROW EXECUTE FUNCTION audit_row('order_id', 'line');
CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON bulk FOR EACH ROW EXECUTE FUNCTION audit_row('id');
"#;

/// The `databases:` section for the workload: the database `load` on
/// `pg`, streaming through the slot and publication `slot`, with a
/// heartbeat every second.
pub fn load_database_yaml(pg: &PgCluster, slot: &str) -> String {
    pg.database_yaml("load", slot, "    heartbeat_interval_ms: 1000\n")
}

/// The pull sink `all` on every table of the workload, as a `sinks:` entry.
pub const ALL_SINK_YAML: &str = "  - name: all
    database: load
    source: { include_tables: [public.accounts, public.events, public.lines, public.bulk] }
    destination: { type: sequin_stream, ack_wait_ms: 60000, max_ack_pending: 100000 }
";

/// Replaces long texts by their digest, as `audit_digest` does.
pub fn digest(record: &Value) -> Value {
    let Value::Object(map) = record else {
        return record.clone();
    };
    Value::Object(
        map.iter()
            .map(|(k, v)| {
                let v = match v {
                    Value::String(s) if s.chars().count() > DIGEST_OVER => {
                        Value::String(format!("sha256:{}", hex::encode(Sha256::digest(s))))
                    }
                    other => other.clone(),
                };
                (k.clone(), v)
            })
            .collect(),
    )
}

/// One delivered change as the comparison sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// insert, update or delete.
    pub action: String,
    /// The row image (long texts as digests).
    pub image: Value,
}

/// Everything drained from the pull API, by row, in delivery order.
#[derive(Default)]
pub struct Drained {
    pub by_row: HashMap<(String, String), Vec<Seen>>,
    /// idempotency key → (row, position in the commit order of the stream).
    pub keys: HashMap<String, Value>,
    /// (commit_lsn, commit_idx) of the last message per row.
    last_position: HashMap<(String, String), (u64, u64)>,
    /// Distinct messages taken.
    pub messages: usize,
    /// Redeliveries taken (same key, same content).
    pub duplicates: usize,
}

impl Drained {
    /// Receives (`batch` at a time) and acks until `total` distinct
    /// messages arrived.
    pub fn drain(
        &mut self,
        weft: &WeftProcess,
        sink: &str,
        batch: usize,
        total: usize,
        timeout: Duration,
    ) {
        // No pause between receives: each waits up to a second itself.
        super::wait::until(
            &format!("{total} messages from {sink}"),
            timeout,
            Duration::ZERO,
            || {
                if self.messages < total {
                    let got = weft.receive(sink, batch, 1000);
                    let ack_ids: Vec<&str> =
                        got.iter().map(|m| m["ack_id"].as_str().unwrap()).collect();
                    for message in &got {
                        self.take(&message["data"]);
                    }
                    if !ack_ids.is_empty() {
                        let (status, body) = weft.settle(sink, "ack", &ack_ids);
                        assert_eq!(status, 200, "{body}");
                    }
                }
                if self.messages < total {
                    Err(format!("only {} of them", self.messages))
                } else {
                    Ok(())
                }
            },
            || format!("log tail:\n{}", tail(&weft.log_text())),
        )
    }

    /// Takes one delivered message (the Sequin JSON), checking it.
    pub fn take(&mut self, data: &Value) {
        let metadata = &data["metadata"];
        let key = metadata["idempotency_key"].as_str().unwrap().to_string();
        let image = digest(&data["record"]);
        let action = data["action"].as_str().unwrap().to_string();
        let summary = serde_json::json!({"action": action, "image": image,
            "lsn": metadata["commit_lsn"], "idx": metadata["commit_idx"]});
        if let Some(earlier) = self.keys.get(&key) {
            assert_eq!(
                earlier, &summary,
                "a redelivery with key {key} differs from the first"
            );
            self.duplicates += 1;
            return;
        }
        self.keys.insert(key, summary);
        let table = metadata["table_name"].as_str().unwrap().to_string();
        let pk: Vec<&str> = metadata["record_pks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let row = (table, pk.join(":"));
        let position = (
            metadata["commit_lsn"].as_u64().unwrap(),
            metadata["commit_idx"].as_u64().unwrap(),
        );
        if let Some(last) = self.last_position.insert(row.clone(), position) {
            assert!(
                last < position,
                "row {row:?}: change at {position:?} delivered after {last:?}"
            );
        }
        self.by_row
            .entry(row)
            .or_default()
            .push(Seen { action, image });
        self.messages += 1;
    }
}

/// The last 40 lines of a log.
pub fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The oracle: every committed change, by row, in commit order.
pub fn oracle(pg: &PgCluster) -> (BTreeMap<(String, String), Vec<Seen>>, usize) {
    let text = pg.psql(
        "SELECT coalesce(jsonb_agg(jsonb_build_array(tbl, pk, action, image) ORDER BY seq), '[]')::text FROM audit",
    );
    let rows: Vec<Value> = serde_json::from_str(&text).expect("the audit parses");
    let count = rows.len();
    let mut by_row: BTreeMap<(String, String), Vec<Seen>> = BTreeMap::new();
    for row in rows {
        let key = (
            row[0].as_str().unwrap().to_string(),
            row[1].as_str().unwrap().to_string(),
        );
        by_row.entry(key).or_default().push(Seen {
            action: row[2].as_str().unwrap().to_string(),
            image: row[3].clone(),
        });
    }
    (by_row, count)
}

/// How many changes were committed so far.
pub fn audit_count(pg: &PgCluster) -> usize {
    pg.psql("SELECT count(*) FROM audit").parse().unwrap()
}

/// One random transaction of about `size` row changes, run from a worker
/// session. Returns false when Postgres rejected it (deadlock, restart).
fn random_transaction(pg: &PgCluster, rng: &mut StdRng, next_id: &mut i64, size: i64) -> bool {
    let mut sql = String::from("BEGIN;\n");
    let mut left = size;
    let rollback_savepoint = rng.random_bool(0.15) && size > 1;
    while left > 0 {
        let n = rng.random_range(1..=left.min(2000));
        left -= n;
        let first = *next_id;
        *next_id += n;
        let last = first + n - 1;
        let part = match rng.random_range(0..9) {
            0 => format!(
                "INSERT INTO accounts SELECT g, 'owner ' || g, (g % 1000) * 1.25, now() - g * interval '1 second', jsonb_build_object('g', g, 'tags', jsonb_build_array('a', g % 7)) FROM generate_series({first}, {last}) g;"
            ),
            1 => format!(
                "INSERT INTO events SELECT g, 'kind' || (g % 5), jsonb_build_object('n', g / 3.0), CASE WHEN g % 500 = 0 THEN repeat(md5(random()::text), 3200) ELSE 'short ' || g END, g % 2 = 0 FROM generate_series({first}, {last}) g;"
            ),
            2 => format!(
                "INSERT INTO lines SELECT g / 4, g % 4, (g % 13)::int, 'note ' || g FROM generate_series({first}, {last}) g;"
            ),
            3 => format!(
                "UPDATE accounts SET balance = balance + 0.01, updated_at = now() WHERE id IN (SELECT id FROM accounts ORDER BY random() LIMIT {n});"
            ),
            // Leaves a TOASTed doc unchanged: under FULL identity weft
            // fills it from the old row.
            4 => format!(
                "UPDATE events SET ok = NOT ok, kind = kind || '+' WHERE id IN (SELECT id FROM events ORDER BY random() LIMIT {n});"
            ),
            5 => format!(
                "UPDATE events SET doc = repeat(md5(random()::text), 3200) WHERE id IN (SELECT id FROM events ORDER BY random() LIMIT {});",
                n.min(3)
            ),
            6 => format!(
                "UPDATE lines SET qty = qty + 1, note = NULL WHERE (order_id, line) IN (SELECT order_id, line FROM lines ORDER BY random() LIMIT {n});"
            ),
            7 => format!(
                "DELETE FROM accounts WHERE id IN (SELECT id FROM accounts ORDER BY random() LIMIT {});",
                (n / 3).max(1)
            ),
            _ => format!(
                "DELETE FROM lines WHERE (order_id, line) IN (SELECT order_id, line FROM lines ORDER BY random() LIMIT {});",
                (n / 3).max(1)
            ),
        };
        if rollback_savepoint && left == 0 {
            sql += &format!("SAVEPOINT s;\n{part}\nROLLBACK TO SAVEPOINT s;\n");
        } else {
            sql += &part;
            sql.push('\n');
        }
    }
    sql += if rng.random_bool(0.05) {
        "ROLLBACK;"
    } else {
        "COMMIT;"
    };
    match pg.try_psql_in("postgres", &sql) {
        Ok(_) => true,
        Err(e) => {
            // Shown with a failing test's output: rejections should be
            // deadlocks between the two sessions (or a restarted server).
            eprintln!(
                "workload transaction rejected: {}",
                e.lines().next().unwrap_or_default()
            );
            false
        }
    }
}

/// Transaction sizes from 1 to 10,000, log-uniform, with both ends present.
fn sizes(rng: &mut StdRng, count: usize) -> Vec<i64> {
    let mut sizes: Vec<i64> = (0..count)
        .map(|_| 10f64.powf(rng.random_range(0.0..4.0)).round() as i64)
        .collect();
    sizes[0] = 10_000;
    sizes[1] = 1;
    sizes
}

/// A column change (ADD, DROP, RENAME, ALTER TYPE) made while the workload
/// runs. Each keeps the workload's SQL valid: its inserts name no columns
/// and its updates only `balance`, `updated_at`, `kind`, `ok`, `doc`, `qty`
/// and `note`.
#[derive(Debug, Clone, Copy)]
pub struct SchemaChange {
    /// The altered table.
    pub table: &'static str,
    /// What follows `ALTER TABLE <table>`.
    pub alter: &'static str,
}

/// Updates of some rows of `table`, written just before and after a
/// schema change in its transaction. Besides 20 random rows it upserts a
/// sentinel row (id -1, which the workload never inserts), so the change
/// has a row image on each side even when the random workload has not
/// written the table yet, or has deleted every row of it.
fn touch(table: &str) -> &'static str {
    match table {
        "accounts" => {
            "UPDATE accounts SET updated_at = now() WHERE id IN (SELECT id FROM accounts ORDER BY random() LIMIT 20); \
             INSERT INTO accounts (id, owner, balance) VALUES (-1, 'sentinel', 1.5) ON CONFLICT (id) DO UPDATE SET updated_at = now();"
        }
        "events" => {
            "UPDATE events SET ok = NOT ok WHERE id IN (SELECT id FROM events ORDER BY random() LIMIT 20); \
             INSERT INTO events (id, kind, ok) VALUES (-1, 'sentinel', true) ON CONFLICT (id) DO UPDATE SET ok = NOT events.ok;"
        }
        "lines" => {
            "UPDATE lines SET qty = qty + 1 WHERE (order_id, line) IN (SELECT order_id, line FROM lines ORDER BY random() LIMIT 20); \
             INSERT INTO lines (order_id, line, qty) VALUES (-1, 0, 1) ON CONFLICT (order_id, line) DO UPDATE SET qty = lines.qty + 1;"
        }
        other => panic!("no touch for table {other}"),
    }
}

/// Makes `change` in one transaction between updates of the table's rows,
/// so rows right before and after it, on both schemas, are checked. A lock
/// timeout or deadlock with the workload is retried.
fn apply_schema_change(pg: &PgCluster, change: SchemaChange) {
    let touch = touch(change.table);
    let sql = format!(
        "BEGIN; SET LOCAL lock_timeout = '2s'; {touch} ALTER TABLE {} {}; {touch} COMMIT;",
        change.table, change.alter
    );
    for _ in 0..30 {
        match pg.try_psql_in("postgres", &sql) {
            Ok(_) => return,
            Err(e) if e.contains("lock timeout") || e.contains("deadlock") => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("schema change {change:?} failed: {e}"),
        }
    }
    panic!("schema change {change:?} did not get its locks in 30 attempts");
}

/// Two concurrent sessions run `count` random transactions each, while a
/// third makes `schema_changes` in order, at random moments.
pub fn concurrent_workload(
    pg: &PgCluster,
    seed: u64,
    count: usize,
    id_base: i64,
    schema_changes: &[SchemaChange],
) -> (usize, usize) {
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut rng = StdRng::seed_from_u64(seed + 1000);
            for &change in schema_changes {
                std::thread::sleep(Duration::from_millis(rng.random_range(200..1500)));
                apply_schema_change(pg, change);
            }
        });
        let workers: Vec<_> = (0..2)
            .map(|worker| {
                scope.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed + worker);
                    let mut next_id = id_base + worker as i64 * 10_000_000;
                    let (mut ok, mut failed) = (0, 0);
                    for size in sizes(&mut rng, count) {
                        if random_transaction(pg, &mut rng, &mut next_id, size) {
                            ok += 1;
                        } else {
                            failed += 1;
                        }
                    }
                    (ok, failed)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
    })
}

/// Compares what a sink delivered with the oracle; panics with the first
/// differing rows.
pub fn assert_matches_oracle(
    drained: &Drained,
    expected: &BTreeMap<(String, String), Vec<Seen>>,
    what: &str,
) {
    let mut mismatches = Vec::new();
    for (row, changes) in expected {
        let got = drained.by_row.get(row).cloned().unwrap_or_default();
        if &got != changes {
            mismatches.push(format!(
                "{row:?}:\n  expected {changes:?}\n  got      {got:?}"
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{what}: {} of {} rows differ; first: {}",
        mismatches.len(),
        expected.len(),
        mismatches
            .iter()
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        drained.by_row.len(),
        expected.len(),
        "{what}: no extra rows"
    );
}
