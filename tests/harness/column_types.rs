//! The column types of the type test (`tests/e2e/types.rs`), shared with
//! the Postgres sink's mirror test: each type with SQL literals of it, and
//! the extensions, enums, domains and composites they need.

/// Types, enums, domains and composites the cases use.
pub const SCHEMA: &str = r#"
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
pub struct Case {
    /// The column type.
    pub ty: &'static str,
    /// SQL literals of that type.
    pub values: &'static [&'static str],
}

const fn case(ty: &'static str, values: &'static [&'static str]) -> Case {
    Case { ty, values }
}

/// Every type weft renders, each with the values it is tested with.
pub const CASES: &[Case] = &[
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

/// A connection that renders like weft promises: UTC, ISO dates.
pub async fn reference_client(pg: &super::postgres::PgCluster) -> tokio_postgres::Client {
    let client = pg.client("postgres").await;
    client
        .batch_execute("SET TimeZone = 'UTC'; SET DateStyle = 'ISO'")
        .await
        .unwrap();
    client
}

/// `to_jsonb()` of every row of `table`, by `id`.
pub async fn snapshot(
    client: &tokio_postgres::Client,
    table: &str,
) -> std::collections::HashMap<i64, serde_json::Value> {
    client
        .query(
            &format!("SELECT id::int8, to_jsonb(r) FROM {table} r ORDER BY id"),
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("to_jsonb of {table}: {e}"))
        .iter()
        .map(|row| (row.get::<_, i64>(0), row.get::<_, serde_json::Value>(1)))
        .collect()
}
