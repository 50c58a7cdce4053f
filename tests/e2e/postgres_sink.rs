//! The `postgres` sink through the real binary: a mirror of a table with a
//! column of every type from the type test stays equal to its source, column
//! by column, across a SIGKILL; a refused row is dead-lettered alone while
//! the rest land; a target that is down loses nothing; a routing function
//! picks the target table.

use std::time::Duration;

use serde_json::Value;

use crate::harness::column_types::{CASES, SCHEMA};
use crate::harness::guests;
use crate::harness::postgres::PgCluster;
use crate::harness::weft::WeftProcess;

/// A `databases:` entry `name` for database `db` of `pg`, which weft only
/// writes into (its slot and publication are never used).
fn target_database(pg: &PgCluster, name: &str, db: &str) -> String {
    format!(
        "  - name: {name}\n    hostname: 127.0.0.1\n    port: {}\n    database: {db}\n    username: postgres\n    slot: {{ name: unused_{name} }}\n    publication: {{ name: unused_{name} }}\n",
        pg.port()
    )
}

/// Values the mirror cannot keep exactly, as `docs/sinks/postgres.md`
/// lists: a float's negative zero (rendered as `0`), an array's explicit
/// lower bounds (dropped), `json` text (kept as jsonb normalises it), and a
/// JSON `null` element of a jsonb array (rendered like an SQL NULL).
fn kept_exactly(ty: &str, value: &str) -> bool {
    let negative_zero = ty.starts_with("float") && value.contains("-0") && !value.contains("-0.");
    let lower_bound = value.starts_with("'[") && value.contains("]={");
    let json_null_element = ty == "jsonb[]" && value.contains("'null'");
    !(negative_zero || lower_bound || json_null_element || ty.starts_with("json[")) && ty != "json"
}

/// The columns of the mirrored table: `(column, type, literals)`.
fn columns() -> Vec<(String, &'static str, Vec<&'static str>)> {
    CASES
        .iter()
        .enumerate()
        .filter_map(|(i, case)| {
            let values: Vec<&str> = case
                .values
                .iter()
                .copied()
                .filter(|v| kept_exactly(case.ty, v))
                .collect();
            (!values.is_empty()).then(|| (format!("c{i:03}"), case.ty, values))
        })
        .collect()
}

/// A row of `typed` with id `id`, version `version`: each column a literal
/// of its type (NULL now and then), and a long TOASTed `big`.
fn row_sql(id: i64, version: usize) -> String {
    let mut values = vec![id.to_string(), format!("repeat('big{version}-', 3000)")];
    for (i, (_, ty, literals)) in columns().iter().enumerate() {
        if (id as usize * 7 + i + version).is_multiple_of(11) {
            values.push("NULL".into());
        } else {
            let literal = literals[(id as usize + i + version) % literals.len()];
            values.push(format!("({literal})::{ty}"));
        }
    }
    format!("({})", values.join(", "))
}

/// Every row of `typed` in database `db`, each column as its text output.
fn table_text(pg: &PgCluster, db: &str) -> Vec<Value> {
    let casts: Vec<String> = std::iter::once("id::text".to_string())
        .chain(std::iter::once("big".into()))
        .chain(columns().iter().map(|(c, _, _)| format!("{c}::text")))
        .collect();
    let text = pg.psql_in(
        db,
        &format!(
            "SELECT coalesce(jsonb_agg(to_jsonb(ARRAY[{}]) ORDER BY id), '[]')::text FROM typed",
            casts.join(", ")
        ),
    );
    serde_json::from_str::<Value>(&text)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// The differences between source and mirror, by column type.
fn differences(source: &[Value], target: &[Value]) -> Vec<String> {
    let columns = columns();
    let mut found = Vec::new();
    if source.len() != target.len() {
        found.push(format!(
            "{} source rows, {} mirrored",
            source.len(),
            target.len()
        ));
    }
    for (s, t) in source.iter().zip(target) {
        for (i, (a, b)) in s
            .as_array()
            .unwrap()
            .iter()
            .zip(t.as_array().unwrap())
            .enumerate()
        {
            if a != b {
                let what = match i {
                    0 => "id".to_string(),
                    1 => "big".to_string(),
                    _ => columns[i - 2].1.to_string(),
                };
                found.push(format!("row {}: {what}: source {a} mirror {b}", s[0]));
            }
        }
    }
    found
}

#[test]
fn a_mirror_of_every_type_equals_its_source_after_a_mixed_workload_and_a_sigkill() {
    let pg = PgCluster::start();
    let mut ddl = String::from("CREATE TABLE typed (id bigint PRIMARY KEY, big text");
    for (column, ty, _) in columns() {
        ddl.push_str(&format!(", {column} {ty}"));
    }
    ddl.push_str("); ALTER TABLE typed ALTER COLUMN big SET STORAGE EXTERNAL;");
    pg.psql(SCHEMA);
    pg.psql(&ddl);
    pg.create_database("mirror");
    pg.psql_in("mirror", SCHEMA);
    let config = format!(
        "{databases}{target}sinks:\n  - name: mirror\n    database: shop\n    source: {{ include_tables: [public.typed] }}\n    destination: {{ type: postgres, database: copy, create_table: true, batch_size: 20, retry_backoff_base_ms: 50, retry_backoff_max_ms: 500 }}\n",
        databases = pg.databases_yaml("weft_mirror"),
        target = target_database(&pg, "copy", "mirror"),
    );
    let (_dir, mut weft) = WeftProcess::start_replicating(&pg, "weft_mirror", &config);

    const ROWS: i64 = 40;
    for chunk in (1..=ROWS).collect::<Vec<_>>().chunks(5) {
        let rows: Vec<String> = chunk.iter().map(|&id| row_sql(id, 0)).collect();
        pg.psql(&format!("INSERT INTO typed VALUES {}", rows.join(", ")));
    }
    // Kill weft once the mirror has some rows, mid-stream.
    weft.wait_until("first mirrored rows", Duration::from_secs(120), || {
        let count = pg.try_psql_in("mirror", "SELECT count(*) FROM typed");
        match count.as_deref().map(str::trim) {
            Ok("0") | Err(_) => Err(count),
            Ok(_) => Ok(()),
        }
    });
    weft.kill();
    // Updates (whole rows, and rows whose TOASTed `big` is unchanged),
    // deletes, and re-inserts, partly while weft is down.
    for id in (1..=ROWS).step_by(3) {
        let row = row_sql(id, 1);
        let set: Vec<String> = std::iter::once("big".to_string())
            .chain(columns().iter().map(|(c, _, _)| c.clone()))
            .collect();
        pg.psql(&format!(
            "UPDATE typed SET ({}) = {} WHERE id = {id}",
            set.join(", "),
            row.replacen(&format!("({id}, "), "(", 1)
        ));
    }
    weft.restart();
    pg.wait_for_active_slot("weft_mirror");
    for id in (2..=ROWS).step_by(4) {
        pg.psql(&format!(
            "UPDATE typed SET {} = NULL WHERE id = {id}",
            columns()[id as usize % columns().len()].0
        ));
    }
    pg.psql(&format!(
        "DELETE FROM typed WHERE id % 5 = 0 AND id <= {ROWS}"
    ));
    pg.psql(&format!("INSERT INTO typed VALUES {}", row_sql(5, 2)));

    let source = table_text(&pg, "postgres");
    weft.wait_until(
        "the mirror to equal its source",
        Duration::from_secs(120),
        || {
            let found = differences(&source, &table_text(&pg, "mirror"));
            if found.is_empty() { Ok(()) } else { Err(found) }
        },
    );
    let letters = weft.get_json("/api/sinks/mirror/dead_letters?limit=10");
    assert_eq!(letters["data"], serde_json::json!([]), "{letters}");
    assert_eq!(weft.terminate(), Some(0));
}

#[test]
fn a_refused_row_is_dead_lettered_alone_a_down_target_loses_nothing_and_routing_picks_the_table() {
    let pg = PgCluster::start();
    let mut target = PgCluster::start();
    // FULL: a delete carries `region`, which the routing function reads.
    pg.psql(
        "CREATE TABLE orders (id int PRIMARY KEY, qty int NOT NULL, region text);
         ALTER TABLE orders REPLICA IDENTITY FULL",
    );
    target.psql(
        "CREATE TABLE orders (id int PRIMARY KEY, qty int NOT NULL CHECK (qty < 1000), region text);
         CREATE SCHEMA eu;
         CREATE TABLE eu.orders (id int PRIMARY KEY, qty int NOT NULL, region text)",
    );
    let config = format!(
        "{databases}{target}functions:\n  - name: by_region\n    type: routing\n    file: {routing}\n    config: {{ table: \"{{record.region}}.orders\", default.record.region: public }}\n\
         sinks:\n  - name: copy\n    database: shop\n    routing: by_region\n    destination: {{ type: postgres, database: target, batch_size: 100, retry_backoff_base_ms: 50, retry_backoff_max_ms: 300 }}\n",
        databases = pg.databases_yaml("weft_pg_sink"),
        target = target_database(&target, "target", "postgres"),
        routing = guests::wasm("route_template").display(),
    );
    let (_dir, mut weft) = WeftProcess::start_replicating(&pg, "weft_pg_sink", &config);

    // One batch in which row 25 breaks the target's CHECK.
    pg.psql(
        "INSERT INTO orders SELECT g, CASE WHEN g = 25 THEN 5000 ELSE g END, \
         CASE WHEN g % 10 = 0 THEN 'eu' END FROM generate_series(1, 50) g",
    );
    let letters = weft.wait_until("a dead letter", Duration::from_secs(60), || {
        let letters = weft.get_json("/api/sinks/copy/dead_letters?limit=10");
        match letters["data"].as_array() {
            Some(data) if !data.is_empty() => Ok(data.clone()),
            _ => Err(letters),
        }
    });
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0]["message"]["record"]["id"], 25);
    let error = letters[0]["last_error"].as_str().unwrap();
    assert!(
        error.contains("check constraint") && error.contains("23514"),
        "{error}"
    );
    let count =
        |target: &PgCluster, table: &str| target.psql(&format!("SELECT count(*) FROM {table}"));
    weft.wait_until("49 rows", Duration::from_secs(30), || {
        let counts = (count(&target, "public.orders"), count(&target, "eu.orders"));
        if counts == ("44".to_string(), "5".to_string()) {
            Ok(())
        } else {
            Err(counts)
        }
    });

    // The target goes down; changes wait in weft and land once it is back.
    target.stop();
    pg.psql("UPDATE orders SET qty = qty + 1 WHERE id <> 25");
    pg.psql("DELETE FROM orders WHERE id IN (1, 10)");
    std::thread::sleep(Duration::from_secs(2));
    target.start_again();
    let expected =
        pg.psql("SELECT string_agg(id || ':' || qty, ',' ORDER BY id) FROM orders WHERE id <> 25");
    weft.wait_until("the target to catch up", Duration::from_secs(60), || {
        let got = target.psql(
            "SELECT string_agg(id || ':' || qty, ',' ORDER BY id) FROM \
             (SELECT * FROM public.orders UNION ALL SELECT * FROM eu.orders) o",
        );
        if got == expected { Ok(()) } else { Err(got) }
    });
    assert_eq!(count(&target, "eu.orders"), "4");
    assert_eq!(weft.terminate(), Some(0));
}
