//! The first-party plugins of `plugins/` through the real binary: each one
//! configured as a user would, on a throwaway Postgres, with what the sinks
//! deliver checked exactly; the Avro output decoded by an independent
//! implementation (Python's fastavro); and a bad config of each plugin
//! refused at start with its reason.

use std::time::Duration;

use hmac::{Hmac, Mac};
use redis::Commands;
use serde_json::{Value, json};
use sha2::Sha256;

use crate::harness::avro;
use crate::harness::guests;
use crate::harness::postgres::PgCluster;
use crate::harness::weft::{WeftProcess, run_weft_with};

const SALT: &str = "first-party-salt-0123";

/// `functions:` entries, one per `(name, component, config)`.
fn functions(entries: &[(&str, &str, &str, &str)]) -> String {
    let mut yaml = String::from("functions:\n");
    for (name, kind, component, config) in entries {
        yaml.push_str(&format!(
            "  - name: {name}\n    type: {kind}\n    file: {}\n    config: {config}\n",
            guests::wasm(component).display()
        ));
    }
    yaml
}

/// Dead letters of `sink` once there are `count`, as `(record id, error)`
/// sorted by id.
fn dead_letters(weft: &WeftProcess, sink: &str, count: usize) -> Vec<(i64, String)> {
    let mut rows: Vec<(i64, String)> = weft
        .wait_for_dead_letters(sink, count, Duration::from_secs(60))
        .iter()
        .map(|l| {
            let id = l["message"]["record"]["id"].as_i64().unwrap();
            (id, l["last_error"].as_str().unwrap_or_default().to_string())
        })
        .collect();
    rows.sort();
    rows
}

fn hmac_hex(value: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SALT.as_bytes()).unwrap();
    mac.update(value.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// `(record.id, commit_lsn)`: the order to compare messages in.
fn by_row(messages: &mut [Value]) {
    messages.sort_by_key(|m| {
        (
            m["record"]["id"].as_i64(),
            m["metadata"]["commit_lsn"].as_u64(),
        )
    });
}

#[test]
fn select_mask_and_filter_plugins_shape_what_pull_sinks_deliver() {
    let pg = PgCluster::start();
    pg.psql(
        "CREATE TABLE people (id int PRIMARY KEY, name text, email text, phone text, \
         ssn text, region text, status text, total numeric(10,2), address jsonb); \
         ALTER TABLE people REPLICA IDENTITY FULL",
    );
    let pull = "destination: { type: sequin_stream, ack_wait_ms: 5000 }";
    let config = format!(
        "{databases}{functions}sinks:\n\
         - {{ name: selected, database: shop, transform: select, {pull} }}\n\
         - {{ name: city, database: shop, transform: city, {pull} }}\n\
         - {{ name: masked, database: shop, transform: mask, {pull} }}\n\
         - {{ name: paid, database: shop, filter: paid, {pull} }}\n\
         - {{ name: notbool, database: shop, filter: notbool, {pull} }}\n",
        databases = pg.databases_yaml("weft_fp"),
        functions = functions(&[
            (
                "select",
                "transform",
                "select_columns",
                r#"{ include: "id, name, region", rename: "name:full_name" }"#
            ),
            (
                "city",
                "transform",
                "select_columns",
                "{ path: record.address.city }"
            ),
            (
                "mask",
                "transform",
                "pii_mask",
                &format!(r#"{{ hash: email, salt: "{SALT}", redact: ssn, truncate: "phone:3" }}"#)
            ),
            (
                "paid",
                "filter",
                "filter_expression",
                r#"{ expression: 'action == "update" && record.status == "paid" && record.total > 100' }"#
            ),
            (
                "notbool",
                "filter",
                "filter_expression",
                "{ expression: record.region }"
            ),
        ]),
    );
    let (_dir, weft) = WeftProcess::start_replicating(&pg, "weft_fp", &config);

    pg.psql(
        "INSERT INTO people VALUES \
         (1, 'Ada', 'ada@example.com', '5551234', '123-45-6789', 'eu', 'new', 150.00, '{\"city\": \"Lyon\"}'), \
         (2, 'Bob', NULL, NULL, '987', 'us', 'new', 50.00, '{\"zip\": \"1\"}')",
    );
    pg.psql("INSERT INTO people VALUES (3, 'Cy', 'cy@example.com', '12', NULL, NULL, 'paid', 500, NULL)");
    pg.psql(
        "UPDATE people SET status = 'paid', email = 'ada@new.example', name = 'Ada L' WHERE id = 1",
    );
    pg.psql("UPDATE people SET status = 'paid' WHERE id = 2");

    // select-columns: only the listed columns, in the listed order, renamed,
    // in `record` and in `changes`.
    let mut selected = weft.drain("selected", 5, Duration::from_secs(60));
    by_row(&mut selected);
    let rows: Vec<(String, String, Value)> = selected
        .iter()
        .map(|m| {
            (
                m["action"].as_str().unwrap().to_string(),
                m["record"].to_string(),
                m["changes"].clone(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            (
                "insert".into(),
                r#"{"id":1,"full_name":"Ada","region":"eu"}"#.into(),
                Value::Null
            ),
            (
                "update".into(),
                r#"{"id":1,"full_name":"Ada L","region":"eu"}"#.into(),
                json!({"full_name": "Ada"})
            ),
            (
                "insert".into(),
                r#"{"id":2,"full_name":"Bob","region":"us"}"#.into(),
                Value::Null
            ),
            (
                "update".into(),
                r#"{"id":2,"full_name":"Bob","region":"us"}"#.into(),
                json!({})
            ),
            (
                "insert".into(),
                r#"{"id":3,"full_name":"Cy","region":null}"#.into(),
                Value::Null
            ),
        ],
        "log:\n{}",
        weft.log_text()
    );
    assert_eq!(selected[0]["metadata"]["table_name"], "people");

    // select-columns with `path`: just the value, null where it is absent.
    let mut cities: Vec<String> = weft
        .drain("city", 5, Duration::from_secs(60))
        .iter()
        .map(Value::to_string)
        .collect();
    cities.sort();
    assert_eq!(cities, [r#""Lyon""#, r#""Lyon""#, "null", "null", "null"]);

    // pii-mask: hashed, redacted and truncated in `record` and `changes`;
    // nulls stay null; other columns untouched.
    let mut masked = weft.drain("masked", 5, Duration::from_secs(60));
    by_row(&mut masked);
    let ada = &masked[0]["record"];
    assert_eq!(
        (&ada["email"], &ada["ssn"], &ada["phone"], &ada["name"]),
        (
            &json!(hmac_hex("ada@example.com")),
            &json!("[REDACTED]"),
            &json!("555"),
            &json!("Ada")
        )
    );
    assert_eq!(masked[1]["record"]["email"], hmac_hex("ada@new.example"));
    assert_eq!(
        masked[1]["changes"],
        json!({"email": hmac_hex("ada@example.com"), "name": "Ada", "status": "new"})
    );
    let bob = &masked[2]["record"];
    assert_eq!(
        (&bob["email"], &bob["phone"], &bob["ssn"]),
        (&Value::Null, &Value::Null, &json!("[REDACTED]"))
    );
    assert_eq!(
        (&masked[4]["record"]["phone"], &masked[4]["record"]["ssn"]),
        (&json!("12"), &Value::Null)
    );

    // filter-expression: only the update to paid with a total above 100.
    let paid = weft.drain("paid", 1, Duration::from_secs(60));
    assert_eq!(paid.len(), 1);
    assert_eq!(
        (paid[0]["action"].as_str(), paid[0]["record"]["id"].as_i64()),
        (Some("update"), Some(1))
    );
    assert!(
        weft.receive("paid", 100, 1000).is_empty(),
        "only one change passes"
    );

    // An expression that is not a boolean for a change dead-letters it
    // (every change here: `region` is a string or null).
    let letters = dead_letters(&weft, "notbool", 5);
    assert_eq!(
        letters[0].1,
        "filter function notbool: expression `record.region` gave string for this change, not a boolean: make it a condition, e.g. compare with `==`"
    );
    assert!(
        letters[4]
            .1
            .contains("expression `record.region` gave null for this change"),
        "{letters:?}"
    );
}

/// The Avro schema of the `orders` rows in the Redis test: a nullable
/// union, a decimal, logical date and time types, a jsonb column as a
/// string, and a field the table lacks that takes its default.
const ORDER_SCHEMA: &str = r#"{
  "type": "record", "name": "Order", "namespace": "weft.test",
  "fields": [
    {"name": "id", "type": "int"},
    {"name": "item", "type": "string"},
    {"name": "region", "type": ["null", "string"]},
    {"name": "total", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "qty", "type": "long"},
    {"name": "score", "type": "double"},
    {"name": "paid", "type": "boolean"},
    {"name": "extra", "type": "string"},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "source", "type": "string", "default": "weft"}
  ]
}"#;

#[test]
fn route_template_and_avro_encode_feed_redis_sinks() {
    let pg = PgCluster::start();
    let table = format!("fp_orders_{}", std::process::id());
    pg.psql(&format!(
        "CREATE TABLE {table} (id int PRIMARY KEY, item text, region text, total numeric(10,2), \
         qty bigint, score float8, paid boolean, extra jsonb, day date, at timestamptz)"
    ));
    let prefix = format!("fp{}", std::process::id());
    let schema_yaml = serde_json::to_string(ORDER_SCHEMA).unwrap();
    let config = format!(
        "{databases}{functions}sinks:\n\
         - {{ name: avro, database: shop, transform: avro, routing: streams, \
              destination: {{ type: redis_stream, host: 127.0.0.1, database: 14, stream_key: unused }} }}\n\
         - {{ name: keys, database: shop, routing: keys, \
              destination: {{ type: redis_string, host: 127.0.0.1, database: 14 }} }}\n",
        databases = pg.databases_yaml("weft_fp_redis"),
        functions = functions(&[
            (
                "avro",
                "transform",
                "avro_encode",
                &format!("{{ schema: {schema_yaml} }}")
            ),
            (
                "streams",
                "routing",
                "route_template",
                &format!(
                    r#"{{ stream_key: "{prefix}.orders.{{record.region}}", default.record.region: none }}"#
                )
            ),
            (
                "keys",
                "routing",
                "route_template",
                &format!(
                    r#"{{ key: "{prefix}:{{metadata.table_name}}:{{record.region}}:{{record.id}}", expire_ms: "600000" }}"#
                )
            ),
        ]),
    );
    let (_dir, mut weft) = WeftProcess::start_replicating(&pg, "weft_fp_redis", &config);

    pg.psql(&format!(
        "SET TimeZone = 'Asia/Tokyo'; INSERT INTO {table} VALUES \
         (1, 'pen', 'eu', 1234.5, 9000000000, 0.25, true, '{{\"gift\": true}}', '2024-03-01', '2024-03-01 09:00:01.000002+09'), \
         (2, 'ink', NULL, -0.07, 1, -1.5, false, '[1, 2]', '1969-12-31', '1970-01-01 00:00:00+00')"
    ));
    // Fails in the Avro transform: `item` is not nullable in the schema.
    pg.psql(&format!(
        "INSERT INTO {table} VALUES (3, NULL, 'eu', 1, 1, 1, true, 'null', '2024-01-01', now())"
    ));

    let mut redis = redis::Client::open("redis://127.0.0.1:6379/14")
        .unwrap()
        .get_connection()
        .unwrap();
    let eu = format!("{prefix}.orders.eu");
    let none = format!("{prefix}.orders.none");
    let entries = weft.wait_until("two stream entries", Duration::from_secs(60), || {
        let eu_entries: redis::streams::StreamRangeReply = redis.xrange_all(&eu).unwrap();
        let none_entries: redis::streams::StreamRangeReply = redis.xrange_all(&none).unwrap();
        match eu_entries.ids.len() + none_entries.ids.len() {
            got if got >= 2 => Ok([eu_entries.ids, none_entries.ids]),
            got => Err(got),
        }
    });
    // route-template: one stream per region, `none` for the null region.
    assert_eq!((entries[0].len(), entries[1].len()), (1, 1), "{entries:?}");
    let decoded: Vec<Value> = entries
        .iter()
        .map(|stream| {
            let entry = &stream[0];
            let content_type: String = entry.get("content_type").unwrap();
            assert_eq!(content_type, "avro/binary");
            let data: Vec<u8> = entry.get("data").unwrap();
            avro::decode(ORDER_SCHEMA, &data)
        })
        .collect();
    // avro-encode, read back by fastavro against the configured schema.
    assert_eq!(
        decoded,
        vec![
            json!({"id": 1, "item": "pen", "region": "eu", "total": "1234.50", "qty": 9000000000_i64,
                   "score": 0.25, "paid": true, "extra": r#"{"gift":true}"#, "day": "2024-03-01",
                   "at": "2024-03-01 00:00:01.000002+00:00", "source": "weft"}),
            json!({"id": 2, "item": "ink", "region": null, "total": "-0.07", "qty": 1,
                   "score": -1.5, "paid": false, "extra": "[1,2]", "day": "1969-12-31",
                   "at": "1970-01-01 00:00:00+00:00", "source": "weft"}),
        ]
    );
    let letters = dead_letters(&weft, "avro", 1);
    assert_eq!(letters.len(), 1);
    assert!(
        letters[0].1.contains("field `record.item`: the schema wants a string (make the field a union with \"null\" to allow nulls), the change has null"),
        "{letters:?}"
    );

    // route-template on Redis keys: rows 1 and 3 by region; row 2 has no
    // region and no default, so it is dead-lettered naming the field.
    let key = |id: i64| format!("{prefix}:{table}:eu:{id}");
    weft.wait_until_every(
        "rows 1 and 3 under the eu keys",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || {
            let written = [key(1), key(3)].map(|k| redis.exists::<_, bool>(k).unwrap());
            if written == [true, true] {
                Ok(())
            } else {
                Err(written)
            }
        },
    );
    let message: Value = serde_json::from_str(&redis.get::<_, String>(key(1)).unwrap()).unwrap();
    assert_eq!(message["record"]["item"], "pen");
    let ttl: i64 = redis.pttl(key(1)).unwrap();
    assert!(
        ttl > 500_000 && ttl <= 600_000,
        "expire_ms from config: pttl {ttl}"
    );
    let letters = dead_letters(&weft, "keys", 1);
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].0, 2);
    assert!(
        letters[0].1.contains("template field `record.region` is missing or null in this change; set `default.record.region` in the function's config to route such changes"),
        "{letters:?}"
    );

    let _: () = redis.del(&[eu, none, key(1), key(3)]).unwrap();
    assert_eq!(weft.terminate(), Some(0));
}

/// A config of one sink on an unreachable database with one function;
/// plugins are loaded (and `init`ed) before weft connects anywhere.
fn refused(kind: &str, component: &str, config: &str) -> String {
    let slot = match kind {
        "filter" => "filter: f",
        "routing" => "routing: f",
        _ => "transform: f",
    };
    let destination = if kind == "routing" {
        "{ type: redis_string, host: 127.0.0.1 }"
    } else {
        "{ type: sequin_stream }"
    };
    let yaml = format!(
        "databases:\n  - {{ name: shop, url: \"postgres://postgres@127.0.0.1:5/postgres\", slot: {{ name: s }}, publication: {{ name: p }} }}\n\
         {}sinks:\n  - {{ name: s, database: shop, {slot}, destination: {destination} }}\n",
        functions(&[("f", kind, component, config)])
    );
    let (code, log) = run_weft_with(&yaml);
    assert_ne!(code, Some(0), "{log}");
    assert!(log.contains("plugin `f` rejected its config: "), "{log}");
    log
}

#[test]
fn bad_plugin_config_is_refused_at_start_with_the_reason() {
    let cases = [
        (
            "transform",
            "select_columns",
            r#"{ include: "a", exclude: "b" }"#,
            "set `include` or `exclude`, not both",
        ),
        (
            "transform",
            "select_columns",
            "{ path: row.city }",
            "path `row.city` must start with `record`, `changes`, `action` or `metadata`",
        ),
        (
            "transform",
            "pii_mask",
            "{ hash: email, salt: short }",
            "`hash` needs a `salt` of at least 16 characters (got 5)",
        ),
        (
            "routing",
            "route_template",
            r#"{ key: "orders.{record.region" }"#,
            "`key`: placeholder `{record.region` in `orders.{record.region` is not closed",
        ),
        (
            "routing",
            "route_template",
            r#"{ topik: "x" }"#,
            "unknown config key `topik`",
        ),
        (
            "filter",
            "filter_expression",
            r#"{ expression: "record.total >" }"#,
            "`expression` is not valid CEL: ",
        ),
        (
            "transform",
            "avro_encode",
            r#"{ schema: '{"type": "record", "name": "r"}' }"#,
            "`schema` is not a valid Avro schema: ",
        ),
        (
            "transform",
            "avro_encode",
            r#"{ schema: '"string"' }"#,
            "`schema` must be an Avro record",
        ),
    ];
    for (kind, component, config, expected) in cases {
        let log = refused(kind, component, config);
        assert!(
            log.contains(expected),
            "{component} {config}: expected {expected:?} in:\n{log}"
        );
    }
}
