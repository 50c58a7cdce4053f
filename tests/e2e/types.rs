//! Every column type, streamed through `weft::source::run`, renders exactly
//! as Postgres's `to_jsonb()` renders the same row with `TimeZone = 'UTC'`
//! and `DateStyle = ISO` — on a server whose own settings are
//! `America/New_York` and `SQL, DMY`.
//!
//! Values are compared as JSON values whose numbers compare by their text
//! (serde_json's `arbitrary_precision`), so `10.50` must stay `10.50`.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use weft::change::{Action, Change, SourceEvent};
use weft::lsn::Lsn;
use weft::source::{SourceConfig, SourceError};

use crate::harness::postgres::PgCluster;

/// Types, enums, domains and composites the cases use.
const SCHEMA: &str = r#"
CREATE EXTENSION citext;
CREATE EXTENSION ltree;
CREATE EXTENSION cube;
CREATE EXTENSION hstore;
CREATE TYPE mood AS ENUM ('sad', 'happy', 'it''s "quoted"', 'ünï cödé');
CREATE DOMAIN positive AS int CHECK (VALUE > 0);
CREATE DOMAIN label AS text;
CREATE DOMAIN price AS numeric(10,2);
CREATE DOMAIN doc AS jsonb;
CREATE DOMAIN ints AS int[];
CREATE DOMAIN stamp AS timestamptz;
CREATE TYPE comp AS (a int, "B b" text, c jsonb, d timestamptz[], e mood, f numeric, g bool);
CREATE TYPE outer_comp AS (x comp, y comp[], zz numeric, "longer name" label, t timestamp);
CREATE TYPE with_drop AS (a int, gone text, b text);
ALTER TYPE with_drop DROP ATTRIBUTE gone;
CREATE DOMAIN checked_comp AS comp CHECK ((VALUE).a IS NULL OR (VALUE).a > 0);
CREATE TABLE row_type (x int, y text);
CREATE TYPE empty_comp AS ();
"#;

/// A column type and the SQL literals inserted into it (NULL is added).
struct Case {
    ty: &'static str,
    values: &'static [&'static str],
}

const fn case(ty: &'static str, values: &'static [&'static str]) -> Case {
    Case { ty, values }
}

const CASES: &[Case] = &[
    // Numbers.
    case("int2", &["0", "-32768", "32767"]),
    case("int4", &["-2147483648", "2147483647", "0"]),
    case("int8", &["-9223372036854775808", "9223372036854775807"]),
    case(
        "numeric",
        &[
            "0",
            "10.50",
            "-0.000",
            "123456789012345678901234567890.123456789",
            "0.00000000000000000001",
            "1e100",
            "'NaN'",
            "'Infinity'",
            "'-Infinity'",
        ],
    ),
    case("numeric(10,2)", &["3.5", "-99999999.99", "0"]),
    case(
        "float4",
        &[
            "1.5",
            "'-0'",
            "0.1",
            "3.4e38",
            "1e-45",
            "'NaN'",
            "'Infinity'",
            "'-Infinity'",
        ],
    ),
    case(
        "float8",
        &[
            "0.1",
            "1e300",
            "-1e-300",
            "'-0'",
            "2.2250738585072014e-308",
            "1.7976931348623157e308",
            "123456789.125",
            "'NaN'",
            "'Infinity'",
            "'-Infinity'",
        ],
    ),
    case(
        "money",
        &[
            "1234.56",
            "-0.01",
            "0",
            "92233720368547758.07",
            "-92233720368547758.08",
        ],
    ),
    // Text.
    case(
        "text",
        &[
            "''",
            r#"'héllo "q" \ back'"#,
            "'😀 ünï'",
            "'NULL'",
            r"E'tab\there\nnewline'",
            "'{}'",
            "'()'",
            "' padded '",
        ],
    ),
    case("varchar(10)", &["'short'", "''", "'ten chars!'"]),
    case("varchar", &["'unbounded'"]),
    case("char(5)", &["'ab'", "''", "'abcde'"]),
    case("char", &["'x'"]),
    case("name", &["'nm'", "'a b'"]),
    case(r#""char""#, &["'c'", "''"]),
    case("citext", &["'MiXeD'"]),
    // Binary, boolean, identifiers.
    case("bytea", &[r"'\xdeadbeef'", r"'\x'", "'abc'::bytea"]),
    case("bool", &["true", "false"]),
    case("uuid", &["'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'"]),
    // JSON.
    case(
        "json",
        &[
            r#"'{"b": 1, "a": [1, 2.50], "a": "dup", "ccc": null}'"#,
            "'[]'",
            r#"'"s"'"#,
            "'1e2'",
            r#"'{"k": {"z": -0, "y": 1.0E+2, "x": 1.50e-3}}'"#,
            "'null'",
            r#"'"\u00e9 😀 \"q\" \\"'"#,
        ],
    ),
    case(
        "jsonb",
        &[
            r#"'{"zz": 1, "y": {"k": 1.0}, "a": [true, false, null]}'"#,
            "'{}'",
            "'12345678901234567890.000001'",
            r#"'"tab\tand \\ \"q\""'"#,
        ],
    ),
    // Date and time.
    case(
        "date",
        &[
            "'2024-02-29'",
            "'infinity'",
            "'-infinity'",
            "'0044-03-15 BC'",
            "'5874897-12-31'",
            "'4713-01-01 BC'",
        ],
    ),
    case(
        "time",
        &["'13:14:15.5'", "'00:00'", "'24:00:00'", "'23:59:59.999999'"],
    ),
    case("time(2)", &["'13:14:15.456'"]),
    case(
        "timetz",
        &[
            "'10:00:00+05:30'",
            "'00:00:00-02'",
            "'23:59:59.999999+14'",
            "'12:00:00+00:01:02'",
        ],
    ),
    case(
        "timestamp",
        &[
            "'2024-01-02 03:04:05.123456'",
            "'infinity'",
            "'-infinity'",
            "'0044-03-15 10:00 BC'",
            "'294276-12-31 23:59:59.999999'",
            "'1999-12-31 23:59:59'",
        ],
    ),
    case(
        "timestamptz",
        &[
            "'2024-07-01 23:30:00.5+02'",
            "'infinity'",
            "'-infinity'",
            "'0044-03-15 10:00:00+00 BC'",
            "'1970-01-01 00:00:00+00'",
            "'1900-01-01 00:00:00 Europe/Amsterdam'",
            "'2024-11-03 01:30:00 America/New_York'",
        ],
    ),
    case("timestamptz(0)", &["'2024-07-01 23:30:00.7+02'"]),
    case(
        "interval",
        &[
            "'1 year 2 mons 3 days 04:05:06.7'",
            "'-1 days'",
            "'0'",
            "'-178000000 years'",
            "'1 day -00:00:01'",
            "'00:00:00.000001'",
        ],
    ),
    // Network, bit strings.
    case(
        "inet",
        &[
            "'192.168.0.1/24'",
            "'::1'",
            "'2001:db8::1/64'",
            "'10.0.0.1'",
        ],
    ),
    case("cidr", &["'10.0.0.0/8'", "'2001:db8::/32'"]),
    case("macaddr", &["'08:00:2b:01:02:03'"]),
    case("macaddr8", &["'08:00:2b:01:02:03:04:05'"]),
    case("bit(3)", &["B'101'"]),
    case("varbit", &["B''", "B'1010101'"]),
    // Geometry.
    case("point", &["'(1,2)'", "'(-0.5,1e300)'"]),
    case("line", &["'{1,2,3}'"]),
    case("lseg", &["'[(1,2),(3,4)]'"]),
    case("box", &["'(3,4),(1,2)'"]),
    case("path", &["'((1,2),(3,4))'", "'[(1,2),(3,4.5)]'"]),
    case("polygon", &["'((0,0),(1,1),(1,0))'"]),
    case("circle", &["'<(1,2),3>'"]),
    // Text search, xml, lsn, OID-ish.
    case("tsvector", &[r#"'fat:1A cat:2 "it''s"'"#, "''"]),
    case("tsquery", &["'a & !b'", "'fat:* <-> cat'"]),
    case("xml", &[r#"'<a x="1">x &amp; y</a>'"#, "''"]),
    case("pg_lsn", &["'0/16B3748'", "'FFFFFFFF/FFFFFFFF'"]),
    case("oid", &["4294967295", "0"]),
    case("regclass", &["'pg_class'"]),
    case("regtype", &["'integer'"]),
    case("regproc", &["'now'"]),
    case("xid", &["'5'"]),
    case("xid8", &["'123'"]),
    case("cid", &["'7'"]),
    case("tid", &["'(0,1)'"]),
    case("int2vector", &["'1 2'", "''"]),
    case("oidvector", &["'26 1700'"]),
    // Ranges and multiranges.
    case("int4range", &["'[1,5)'", "'empty'", "'(,)'", "'[,3]'"]),
    case("int8range", &["'[1,9223372036854775806]'"]),
    case("numrange", &["'[1.50,2.5]'"]),
    case("tsrange", &["'[2024-01-01 10:00,2024-02-01)'"]),
    case("tstzrange", &["'[2024-01-01 10:00+02,infinity)'"]),
    case("daterange", &["'[2024-01-01,2024-02-01]'"]),
    case("int4multirange", &["'{[1,5),[7,9)}'", "'{}'"]),
    case("int8multirange", &["'{[1,2)}'"]),
    case("nummultirange", &["'{[1.5,2.5)}'"]),
    case("tsmultirange", &["'{[2024-01-01,2024-01-02)}'"]),
    case("tstzmultirange", &["'{[2024-01-01 00:00+05,2024-01-02)}'"]),
    case("datemultirange", &["'{[2024-01-01,2024-01-05)}'"]),
    // Enums, domains, user-defined base types.
    case("mood", &["'happy'", r#"'it''s "quoted"'"#, "'ünï cödé'"]),
    case("positive", &["7"]),
    case("label", &["'a label'"]),
    case("price", &["12.5"]),
    case("doc", &[r#"'{"b": 2, "a": 1}'"#]),
    case("ints", &["'{1,2}'", "'{}'"]),
    case("stamp", &["'2024-01-02 03:04:05+00'"]),
    case("ltree", &["'a.b.c'"]),
    case("cube", &["'(1,2),(3,4)'"]),
    case(
        "hstore",
        &[
            r#"'a=>1, "b c"=>NULL, "q\"x\\y"=>"", e=>"é", "=>"=>","'"#,
            "''",
        ],
    ),
    // Arrays.
    case(
        "int[]",
        &[
            "'{1,NULL,3}'",
            "'{}'",
            "'{{1,2},{3,4}}'",
            "'[0:1]={1,2}'",
            "'[0:1][2:3]={{1,2},{3,4}}'",
            "'{{{1},{2}},{{3},{NULL}}}'",
        ],
    ),
    case(
        "text[]",
        &[
            r#"'{"a b","c,d",NULL,"NULL","q\"x","back\\slash","","{}","é",nul}'"#,
            r#"ARRAY[E'tab\there', ' lead', 'trail ', '(x)']"#,
        ],
    ),
    case("numeric[]", &["'{1.50,NaN,-0,Infinity}'"]),
    case("float8[]", &["'{NaN,-Infinity,1e300,-0,0.1}'"]),
    case("float4[]", &["'{1.5,NaN}'"]),
    case("int8[]", &["'{9223372036854775807}'"]),
    case("int2[]", &["'{1,-1}'"]),
    case("bool[]", &["'{t,f,NULL}'"]),
    case(
        "json[]",
        &[r#"ARRAY['{"b": 1, "a": 2}'::json, '[1.0e1]', NULL]"#],
    ),
    case("jsonb[]", &[r#"ARRAY['{"b": 1, "a": 2}'::jsonb, 'null']"#]),
    case(
        "timestamptz[]",
        &[r#"'{"2024-01-01 00:00:00+00","2024-06-01 12:00:00-07",infinity,NULL}'"#],
    ),
    case(
        "timestamp[]",
        &[r#"'{"2024-01-01 00:00:00","0044-03-15 10:00 BC"}'"#],
    ),
    case("date[]", &["'{2024-01-01,infinity}'"]),
    case("time[]", &["'{10:00,23:59:59.5}'"]),
    case("timetz[]", &["'{10:00+02}'"]),
    case("interval[]", &[r#"'{"1 day","-00:00:01"}'"#]),
    case("bytea[]", &[r#"'{"\\xdead",NULL,"\\x"}'"#]),
    case("uuid[]", &["'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}'"]),
    case("inet[]", &["'{10.0.0.1,::1/128}'"]),
    case("box[]", &["'{(1,1),(0,0);(2,2),(1,1)}'"]),
    case("point[]", &[r#"'{"(1,2)","(3,4)"}'"#]),
    case("money[]", &["'{1.5,-2}'"]),
    case("char(3)[]", &["'{a,bcd}'"]),
    case("varchar[]", &[r#"'{"x y"}'"#]),
    case("bit(2)[]", &["'{01,10}'"]),
    case("xml[]", &[r#"ARRAY['<a/>'::xml]"#]),
    case("tsvector[]", &[r#"ARRAY['a b'::tsvector]"#]),
    case("int4range[]", &[r#"'{"[1,2)",empty}'"#]),
    case("int4multirange[]", &[r#"'{"{[1,2)}"}'"#]),
    case("oid[]", &["'{1,2}'"]),
    case("int2vector[]", &[r#"ARRAY['1 2'::int2vector, '']"#]),
    case("mood[]", &[r#"'{sad,happy,"it''s \"quoted\""}'"#]),
    case("positive[]", &["'{1,2,NULL}'"]),
    case("price[]", &["'{1.5,2}'"]),
    case("ints[]", &[r#"'{"{1,2}","{3}",NULL}'"#]),
    case("citext[]", &["'{A,b}'"]),
    case("hstore[]", &[r#"ARRAY['a=>1'::hstore, NULL, '']"#]),
    // Composites.
    case(
        "comp",
        &[
            r#"ROW(1, 'q"x\y (,)', '{"b": 1, "a": 2.50}', '{2024-01-01,NULL}', 'happy', 10.50, true)"#,
            "ROW(NULL, '', NULL, '{}', NULL, NULL, NULL)",
            "ROW(NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
            r#"ROW(-1, E'multi\nline ''quote'' é', '[]', NULL, 'it''s "quoted"', 'NaN', false)"#,
        ],
    ),
    case(
        "outer_comp",
        &[
            r#"ROW(ROW(1, '', NULL, NULL, 'sad', 1e-3, NULL)::comp,
                   ARRAY[ROW(2, 'a b', '{"k": [1]}', '{"2024-01-01 00:00:00+00"}', NULL, 0, true)::comp, NULL],
                   10.50, 'lbl "x"', '0044-03-15 10:00 BC')"#,
            "ROW(NULL, '{}', NULL, NULL, NULL)",
        ],
    ),
    case(
        "comp[]",
        &[
            r#"ARRAY[ROW(1, 'a,b', NULL, NULL, NULL, 2.0, NULL)::comp, NULL, ROW(NULL, NULL, NULL, NULL, NULL, NULL, NULL)::comp]"#,
            r#"ARRAY[ARRAY[ROW(1, '"', NULL, NULL, NULL, NULL, NULL)::comp], ARRAY[ROW(2, '\', NULL, NULL, NULL, NULL, NULL)::comp]]"#,
        ],
    ),
    case("with_drop", &["ROW(1, 'b')"]),
    case("checked_comp", &["ROW(3, 'x', NULL, NULL, 'sad', 1, true)"]),
    case("row_type", &["ROW(1, 'y z')"]),
    case("empty_comp", &["ROW()"]),
];

fn table_name(index: usize) -> String {
    format!("t{index:03}")
}

fn config(url: &str, slot: &str, publication: &str) -> SourceConfig {
    crate::harness::source::source_config(url, slot, publication, &[])
}

/// A running source and the test's ends of its channels.
struct Running {
    events: mpsc::Receiver<SourceEvent>,
    _durable: watch::Sender<Lsn>,
    shutdown: CancellationToken,
    handle: JoinHandle<Result<(), SourceError>>,
}

impl Running {
    fn start(config: SourceConfig) -> Running {
        let (tx, events) = mpsc::channel(4096);
        let (durable, durable_rx) = watch::channel(Lsn::ZERO);
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(weft::source::run(config, tx, durable_rx, shutdown.clone()));
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

/// A connection that renders like weft promises: UTC, ISO dates.
async fn reference_client(pg: &PgCluster) -> tokio_postgres::Client {
    let client = pg.client("postgres").await;
    client
        .batch_execute("SET TimeZone = 'UTC'; SET DateStyle = 'ISO'")
        .await
        .unwrap();
    client
}

/// `to_jsonb()` of every row of `table`, by `id`.
async fn snapshot(client: &tokio_postgres::Client, table: &str) -> HashMap<i64, Value> {
    client
        .query(
            &format!("SELECT id::int8, to_jsonb(r) FROM {table} r ORDER BY id"),
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("to_jsonb of {table}: {e}"))
        .iter()
        .map(|row| (row.get::<_, i64>(0), row.get::<_, Value>(1)))
        .collect()
}

fn row_value(row: Option<&weft::change::Row>) -> Value {
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
