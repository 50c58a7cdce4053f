//! Every column type, streamed through `weft_source::run`, renders exactly
//! as Postgres's `to_jsonb()` renders the same row with `TimeZone = 'UTC'`
//! and `DateStyle = ISO` — on a server whose own settings are
//! `America/New_York` and `SQL, DMY`.
//!
//! Values are compared as JSON values whose numbers compare by their text
//! (serde_json's `arbitrary_precision`), so `10.50` must stay `10.50`.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use weft_core::change::{Action, Change, SourceEvent};
use weft_core::lsn::Lsn;
use weft_source::events;
use weft_source::{SourceConfig, SourceError};

use crate::harness::column_types::{CASES, SCHEMA, reference_client, snapshot};
use crate::harness::postgres::PgCluster;

fn table_name(index: usize) -> String {
    format!("t{index:03}")
}

fn config(url: &str, slot: &str, publication: &str) -> SourceConfig {
    crate::harness::source::source_config(url, slot, publication, &[])
}

/// A running source and the test's ends of its channels.
struct Running {
    events: events::EventReceiver,
    _durable: watch::Sender<Lsn>,
    shutdown: CancellationToken,
    handle: JoinHandle<Result<(), SourceError>>,
}

impl Running {
    fn start(config: SourceConfig) -> Running {
        let (tx, events) = events::channel(4096, events::MAX_BYTES);
        let (durable, durable_rx) = watch::channel(Lsn::ZERO);
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(weft_source::run(config, tx, durable_rx, shutdown.clone()));
        Running {
            events,
            _durable: durable,
            shutdown,
            handle,
        }
    }

    /// The changes of the next `n` committed transactions.
    async fn changes(&mut self, n: usize) -> Vec<Change> {
        let mut commits = 0;
        let mut changes = Vec::new();
        while commits < n {
            let event = tokio::time::timeout(Duration::from_secs(60), self.events.recv())
                .await
                .unwrap_or_else(|_| panic!("timed out after {commits} of {n} transactions"))
                .expect("the source stopped");
            match event {
                SourceEvent::Change(change) => changes.push(change),
                SourceEvent::Commit { .. } => commits += 1,
                SourceEvent::Idle { .. } | SourceEvent::Truncate(_) | SourceEvent::Watermark(_) => {
                }
            }
        }
        changes
    }

    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.handle)
            .await
            .expect("the source stops within 30 s")
            .expect("the source task does not panic")
            .expect("the source ends cleanly");
    }
}

fn row_value(row: Option<&weft_core::change::Row>) -> Value {
    Value::Object(row.cloned().expect("the change carries this row"))
}

/// Compares what weft delivered with `to_jsonb()`; returns a line per
/// difference, naming the column and both texts.
fn differences(what: &str, got: &Value, want: &Value) -> Vec<String> {
    if got == want {
        return Vec::new();
    }
    let (Some(got), Some(want)) = (got.as_object(), want.as_object()) else {
        return vec![format!("{what}: got {got}, to_jsonb {want}")];
    };
    let mut out = Vec::new();
    for (column, want) in want {
        let got = got.get(column).cloned().unwrap_or(Value::Null);
        if &got != want {
            out.push(format!(
                "{what} column {column}: got {got}, to_jsonb {want}"
            ));
        }
    }
    for column in got.keys().filter(|c| !want.contains_key(*c)) {
        out.push(format!("{what}: extra column {column}"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_type_renders_like_to_jsonb_in_insert_update_and_delete() {
    let pg = PgCluster::start();
    let mut ddl = String::from(SCHEMA);
    for (i, case) in CASES.iter().enumerate() {
        let table = table_name(i);
        ddl += &format!(
            "CREATE TABLE {table} (id int PRIMARY KEY, v {});
             ALTER TABLE {table} REPLICA IDENTITY FULL;\n",
            case.ty
        );
    }
    // Key-only old tuples (REPLICA IDENTITY DEFAULT) with awkward key types.
    ddl += "CREATE TABLE keyed (k_text text, k_num numeric, k_ts timestamptz, k_uuid uuid,
                k_enum mood, k_pair row_type, v int,
                PRIMARY KEY (k_text, k_num, k_ts, k_uuid, k_enum, k_pair));";
    pg.psql(&ddl);

    let mut source = Running::start(config(&pg.url("postgres"), "slot_types", "pub_types"));
    pg.wait_for_active_slot("slot_types");
    let client = reference_client(&pg).await;

    let mut inserts = String::new();
    let mut counts = Vec::new();
    for (i, case) in CASES.iter().enumerate() {
        let rows: Vec<String> = case
            .values
            .iter()
            .chain(std::iter::once(&"NULL"))
            .enumerate()
            .map(|(n, value)| format!("({}, {value})", n + 1))
            .collect();
        counts.push(rows.len());
        inserts += &format!(
            "INSERT INTO {} VALUES {};\n",
            table_name(i),
            rows.join(", ")
        );
    }
    inserts += r#"INSERT INTO keyed VALUES
        ('k "1" é', 10.50, '2024-01-02 03:04:05+02', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
         'it''s "quoted"', ROW(1, 'a b'), 1);"#;
    pg.psql(&inserts);
    let mut inserted = Vec::new();
    for i in 0..CASES.len() {
        inserted.push(snapshot(&client, &table_name(i)).await);
    }
    let keyed_before = snapshot_keyed(&client).await;

    // Rotate the values, so that old and new rows differ.
    let mut updates = String::new();
    for (i, count) in counts.iter().enumerate() {
        let table = table_name(i);
        updates += &format!(
            "UPDATE {table} t SET v = (SELECT v FROM {table} s WHERE s.id = t.id % {count} + 1);\n"
        );
    }
    updates += "UPDATE keyed SET k_num = k_num * 2, v = 2;";
    pg.psql(&updates);
    let mut updated = Vec::new();
    for i in 0..CASES.len() {
        updated.push(snapshot(&client, &table_name(i)).await);
    }
    let keyed_after = snapshot_keyed(&client).await;

    let mut deletes: String = (0..CASES.len())
        .map(|i| format!("DELETE FROM {};\n", table_name(i)))
        .collect();
    deletes += "DELETE FROM keyed;";
    pg.psql(&deletes);

    let changes = source.changes(3).await;
    let total: usize = counts.iter().sum();
    assert_eq!(
        changes.len(),
        3 * (total + 1),
        "every row's insert, update and delete"
    );

    let by_table: HashMap<String, usize> = (0..CASES.len()).map(|i| (table_name(i), i)).collect();
    let mut seen = vec![[0usize; 3]; CASES.len()];
    let mut mismatches = Vec::new();
    for change in &changes {
        if change.relation.name == "keyed" {
            mismatches.extend(check_keyed(change, &keyed_before, &keyed_after));
            continue;
        }
        let i = by_table[&change.relation.name];
        let record = change.record();
        let id = record["id"].as_i64().unwrap();
        let what = |action: &str| format!("{} ({}) row {id} {action}", CASES[i].ty, table_name(i));
        match change.action {
            Action::Insert => {
                seen[i][0] += 1;
                mismatches.extend(differences(
                    &what("insert"),
                    &row_value(change.new.as_ref()),
                    &inserted[i][&id],
                ));
            }
            Action::Update => {
                seen[i][1] += 1;
                mismatches.extend(differences(
                    &what("update old"),
                    &row_value(change.old.as_ref()),
                    &inserted[i][&id],
                ));
                mismatches.extend(differences(
                    &what("update new"),
                    &row_value(change.new.as_ref()),
                    &updated[i][&id],
                ));
            }
            Action::Delete => {
                seen[i][2] += 1;
                mismatches.extend(differences(
                    &what("delete old"),
                    &row_value(change.old.as_ref()),
                    &updated[i][&id],
                ));
            }
            Action::Read => panic!("the source never emits reads"),
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} differences from to_jsonb():\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    for (i, count) in counts.iter().enumerate() {
        assert_eq!(seen[i], [*count; 3], "changes of {}", CASES[i].ty);
    }
    source.stop().await;
}

async fn snapshot_keyed(client: &tokio_postgres::Client) -> Value {
    client
        .query_one("SELECT to_jsonb(k) FROM keyed k", &[])
        .await
        .unwrap()
        .get(0)
}

/// Under REPLICA IDENTITY DEFAULT the old row of an update that changes the
/// key, and of a delete, holds just the key columns.
fn check_keyed(change: &Change, before: &Value, after: &Value) -> Vec<String> {
    let key_of = |row: &Value| -> Value {
        Value::Object(
            row.as_object()
                .unwrap()
                .iter()
                .filter(|(column, _)| column.starts_with("k_"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )
    };
    match change.action {
        Action::Insert => differences("keyed insert", &row_value(change.new.as_ref()), before),
        Action::Update => {
            let mut out = differences(
                "keyed update old key",
                &row_value(change.old.as_ref()),
                &key_of(before),
            );
            out.extend(differences(
                "keyed update new",
                &row_value(change.new.as_ref()),
                after,
            ));
            out
        }
        Action::Delete => differences(
            "keyed delete old key",
            &row_value(change.old.as_ref()),
            &key_of(after),
        ),
        Action::Read => vec!["keyed: unexpected read".into()],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_column_decodes_with_its_new_type_after_alter_type() {
    let pg = PgCluster::start();
    pg.psql(
        "CREATE TYPE mood AS ENUM ('sad', 'happy');
         CREATE TYPE shape AS (a int, b text);
         CREATE TABLE evolving (id int PRIMARY KEY, v int);
         CREATE TABLE shaped (id int PRIMARY KEY, s shape, arr shape[]);",
    );
    let mut source = Running::start(config(&pg.url("postgres"), "slot_alter", "pub_alter"));
    pg.wait_for_active_slot("slot_alter");
    let client = reference_client(&pg).await;

    // Column type changes: every step commits before the source reads it,
    // so rows written under an old type are decoded after the catalog has
    // moved on; the Relation messages in the stream carry the right type.
    let steps = [
        "INSERT INTO evolving VALUES (1, 42)",
        "ALTER TABLE evolving ALTER COLUMN v TYPE numeric(10,2); INSERT INTO evolving VALUES (2, 3.5)",
        "ALTER TABLE evolving ALTER COLUMN v TYPE text; INSERT INTO evolving VALUES (3, 'x y')",
        "UPDATE evolving SET v = 'happy'; ALTER TABLE evolving ALTER COLUMN v TYPE mood USING v::mood;
         INSERT INTO evolving VALUES (4, 'sad')",
        "ALTER TABLE evolving ALTER COLUMN v TYPE jsonb USING to_jsonb(v);
         INSERT INTO evolving VALUES (5, '{\"b\": 1.50, \"a\": null}')",
        "ALTER TABLE evolving ALTER COLUMN v TYPE timestamptz USING '2024-01-02 03:04:05+02';
         INSERT INTO evolving VALUES (6, '2024-06-01 12:00:00-07')",
    ];
    let mut expected = Vec::new();
    for step in steps {
        pg.psql(step);
        // The row just inserted, as to_jsonb renders it now.
        let rows = snapshot(&client, "evolving").await;
        let last = rows.keys().max().copied().unwrap();
        expected.push(rows[&last].clone());
    }
    let changes: Vec<Change> = source
        .changes(steps.len())
        .await
        .into_iter()
        .filter(|c| c.action == Action::Insert)
        .collect();
    let got: Vec<Value> = changes.iter().map(|c| row_value(c.new.as_ref())).collect();
    assert_eq!(got, expected);
    let type_oids: Vec<u32> = changes
        .iter()
        .map(|c| c.relation.columns[1].type_oid)
        .collect();
    assert_eq!(
        &type_oids[..3],
        &[23, 1700, 25],
        "each change keeps its schema"
    );

    // A composite type altered in place: pgoutput sends no new Relation
    // message, the field count tells weft to re-read the definition.
    let composite_steps = [
        "INSERT INTO shaped VALUES (1, ROW(1, 'x'), ARRAY[ROW(1, 'x')::shape])",
        "ALTER TYPE shape ADD ATTRIBUTE z numeric;
         INSERT INTO shaped VALUES (2, ROW(2, 'y', 1.50), ARRAY[ROW(2, 'y', 2.50)::shape])",
        "ALTER TYPE shape DROP ATTRIBUTE b;
         INSERT INTO shaped VALUES (3, ROW(3, 0.5), NULL)",
    ];
    for step in composite_steps {
        pg.psql(step);
        let rows = snapshot(&client, "shaped").await;
        let last = rows.keys().max().copied().unwrap();
        let changes = source.changes(1).await;
        assert_eq!(changes.len(), 1, "{step}");
        assert_eq!(row_value(changes[0].new.as_ref()), rows[&last], "{step}");
    }
    source.stop().await;
}
