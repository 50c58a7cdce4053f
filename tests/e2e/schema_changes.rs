//! Schema changes while streaming: every row is decoded under the schema it
//! was written with, before and after each change, without a restart.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use weft_core::change::{Action, Change, SourceEvent};
use weft_core::lsn::Lsn;
use weft_source::SourceError;
use weft_source::events;

use crate::harness::postgres::PgCluster;

struct Source {
    events: events::EventReceiver,
    shutdown: CancellationToken,
    handle: JoinHandle<Result<(), SourceError>>,
    _durable: watch::Sender<Lsn>,
}

impl Source {
    fn start(pg: &PgCluster, slot: &str, publication: &str, tables: &[&str]) -> Source {
        let config =
            crate::harness::source::source_config(&pg.url("postgres"), slot, publication, tables);
        let (tx, events) = events::channel(1024, events::MAX_BYTES);
        let (durable, durable_rx) = watch::channel(Lsn::ZERO);
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(weft_source::run(config, tx, durable_rx, shutdown.clone()));
        pg.wait_for_active_slot(slot);
        Source {
            events,
            shutdown,
            handle,
            _durable: durable,
        }
    }

    /// The next `n` changes, skipping commits and idles.
    async fn changes(&mut self, n: usize) -> Vec<Change> {
        let mut out = Vec::new();
        while out.len() < n {
            let event = tokio::time::timeout(Duration::from_secs(30), self.events.recv())
                .await
                .unwrap_or_else(|_| {
                    panic!("timed out after {} of {n} changes: {out:#?}", out.len())
                })
                .expect("the source stopped");
            if let SourceEvent::Change(change) = event {
                out.push(change);
            }
        }
        out
    }

    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.handle)
            .await
            .expect("the source stops")
            .expect("no panic")
            .expect("no error");
    }
}

/// The row as JSON text: column names, their order and the values.
fn record(change: &Change) -> String {
    serde_json::to_string(&change.record()).unwrap()
}

fn column_names(change: &Change) -> Vec<&str> {
    change
        .relation
        .columns
        .iter()
        .map(|c| c.name.as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn columns_added_dropped_renamed_and_retyped_mid_stream() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE t (id int PRIMARY KEY, a text, b int)");
    let mut source = Source::start(&pg, "schema_slot", "schema_pub", &["public.t"]);

    pg.psql("INSERT INTO t VALUES (1, 'one', 10)");
    pg.psql("ALTER TABLE t ADD COLUMN c numeric DEFAULT 1.50");
    pg.psql("INSERT INTO t VALUES (2, 'two', 20, 2.25)");
    pg.psql("UPDATE t SET a = 'uno' WHERE id = 1");
    pg.psql("ALTER TABLE t DROP COLUMN b");
    pg.psql("INSERT INTO t (id, a, c) VALUES (3, 'three', 3)");
    pg.psql("ALTER TABLE t RENAME a TO title");
    pg.psql("INSERT INTO t (id, title) VALUES (4, 'four')");
    pg.psql("ALTER TABLE t ALTER c TYPE text USING c::text");
    pg.psql("INSERT INTO t VALUES (5, 'five', '5.5x')");
    pg.psql("DELETE FROM t WHERE id = 2");
    // A change inside the transaction: the rows on either side of it.
    pg.psql(
        "BEGIN;
         INSERT INTO t VALUES (6, 'six', 's');
         ALTER TABLE t ADD COLUMN d bool;
         INSERT INTO t VALUES (7, 'seven', 's', true);
         UPDATE t SET title = 'SIX' WHERE id = 6;
         COMMIT;",
    );

    let changes = source.changes(10).await;
    let expected = [
        (
            Action::Insert,
            vec!["id", "a", "b"],
            r#"{"id":1,"a":"one","b":10}"#,
        ),
        (
            Action::Insert,
            vec!["id", "a", "b", "c"],
            r#"{"id":2,"a":"two","b":20,"c":2.25}"#,
        ),
        (
            Action::Update,
            vec!["id", "a", "b", "c"],
            r#"{"id":1,"a":"uno","b":10,"c":1.50}"#,
        ),
        (
            Action::Insert,
            vec!["id", "a", "c"],
            r#"{"id":3,"a":"three","c":3}"#,
        ),
        (
            Action::Insert,
            vec!["id", "title", "c"],
            r#"{"id":4,"title":"four","c":1.50}"#,
        ),
        (
            Action::Insert,
            vec!["id", "title", "c"],
            r#"{"id":5,"title":"five","c":"5.5x"}"#,
        ),
        (Action::Delete, vec!["id", "title", "c"], r#"{"id":2}"#),
        (
            Action::Insert,
            vec!["id", "title", "c"],
            r#"{"id":6,"title":"six","c":"s"}"#,
        ),
        (
            Action::Insert,
            vec!["id", "title", "c", "d"],
            r#"{"id":7,"title":"seven","c":"s","d":true}"#,
        ),
        (
            Action::Update,
            vec!["id", "title", "c", "d"],
            r#"{"id":6,"title":"SIX","c":"s","d":null}"#,
        ),
    ];
    for (i, (change, (action, columns, row))) in changes.iter().zip(&expected).enumerate() {
        assert_eq!(change.action, *action, "change {i}");
        assert_eq!(column_names(change), *columns, "change {i}");
        assert_eq!(record(change), *row, "change {i}");
        assert_eq!(change.relation.primary_key, vec!["id"], "change {i}");
    }
    // The retype really changed the column's type in the relation.
    let numeric = changes[4].relation.columns[2].type_oid;
    let text = changes[5].relation.columns[2].type_oid;
    assert_eq!((numeric, text), (1700, 25));
    source.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_join_and_leave_the_publication_and_are_recreated() {
    let pg = PgCluster::start();
    pg.psql(
        "CREATE TABLE t (id int PRIMARY KEY, a text);
         CREATE TABLE u (id int PRIMARY KEY, v text);",
    );
    let mut source = Source::start(&pg, "pub_slot", "pub_pub", &["public.t"]);

    pg.psql("INSERT INTO u VALUES (0, 'before joining')");
    pg.psql("ALTER PUBLICATION pub_pub ADD TABLE u");
    pg.psql("INSERT INTO u VALUES (1, 'member')");
    pg.psql("ALTER PUBLICATION pub_pub DROP TABLE u");
    pg.psql("INSERT INTO u VALUES (2, 'left')");
    pg.psql("INSERT INTO t VALUES (1, 'old t')");
    let old_oid: u32 = pg.psql("SELECT 't'::regclass::oid").parse().unwrap();
    pg.psql(
        "DROP TABLE t;
         CREATE TABLE t (id bigint, name text, extra jsonb, PRIMARY KEY (name, id));
         ALTER PUBLICATION pub_pub ADD TABLE t;",
    );
    let new_oid: u32 = pg.psql("SELECT 't'::regclass::oid").parse().unwrap();
    pg.psql(r#"INSERT INTO t VALUES (1, 'new t', '{"k": [1, 2]}')"#);
    pg.psql("UPDATE t SET extra = NULL WHERE id = 1");

    let changes = source.changes(4).await;
    let seen: Vec<(String, String)> = changes
        .iter()
        .map(|c| (c.relation.qualified_name(), record(c)))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("public.u".into(), r#"{"id":1,"v":"member"}"#.into()),
            ("public.t".into(), r#"{"id":1,"a":"old t"}"#.into()),
            (
                "public.t".into(),
                r#"{"id":1,"name":"new t","extra":{"k":[1,2]}}"#.into()
            ),
            (
                "public.t".into(),
                r#"{"id":1,"name":"new t","extra":null}"#.into()
            ),
        ]
    );
    assert_eq!(changes[1].relation.oid, old_oid);
    assert_eq!(changes[1].relation.primary_key, vec!["id"]);
    assert_eq!(changes[2].relation.oid, new_oid);
    assert_eq!(changes[2].relation.primary_key, vec!["name", "id"]);
    source.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primary_keys_are_those_of_each_change_even_when_read_later() {
    let pg = PgCluster::start();
    pg.psql("CREATE TABLE k (id int, code text, v text)");
    // Create the slot and publication, then stop: everything below is read
    // only after the catalog has moved on (the table is even dropped).
    let source = Source::start(&pg, "pk_slot", "pk_pub", &["public.k"]);
    source.stop().await;

    pg.psql("INSERT INTO k VALUES (1, 'a', 'no key yet')");
    pg.psql("ALTER TABLE k ADD PRIMARY KEY (id)");
    pg.psql("INSERT INTO k VALUES (2, 'b', 'keyed by id')");
    pg.psql("ALTER TABLE k DROP CONSTRAINT k_pkey, ADD PRIMARY KEY (code, id)");
    pg.psql("INSERT INTO k VALUES (3, 'c', 'keyed by code and id')");
    pg.psql(
        "DROP TABLE k;
         CREATE TABLE k (uid int PRIMARY KEY, v text);
         ALTER PUBLICATION pk_pub ADD TABLE k;
         INSERT INTO k VALUES (4, 'recreated');",
    );

    let mut source = Source::start(&pg, "pk_slot", "pk_pub", &["public.k"]);
    let changes = source.changes(4).await;
    let keys: Vec<Vec<String>> = changes
        .iter()
        .map(|c| {
            let mut key = c.relation.primary_key.clone();
            key.sort();
            key
        })
        .collect();
    assert_eq!(
        keys,
        vec![
            vec![],
            vec!["id".to_string()],
            vec!["code".to_string(), "id".to_string()],
            vec!["uid".to_string()],
        ]
    );
    assert_eq!(record(&changes[3]), r#"{"uid":4,"v":"recreated"}"#);
    source.stop().await;
}
