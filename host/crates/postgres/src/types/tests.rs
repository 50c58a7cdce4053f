//! Unit tests of the text → JSON mapping. The expected values are what
//! `to_jsonb()` printed on Postgres 15 with `TimeZone=UTC`; the e2e test
//! `tests/e2e/types.rs` checks the same against a live server.

use std::sync::Arc;

use serde_json::{Value, json};

use super::*;

fn r(oid: u32, text: &str) -> Value {
    render(&builtin_kind(oid).unwrap(), text).unwrap()
}

fn composite(oid: u32, fields: &[(&str, TypeKind)]) -> TypeKind {
    TypeKind::Composite(Arc::new(CompositeType::new(
        oid,
        fields
            .iter()
            .map(|(name, kind)| CompositeField {
                name: name.to_string(),
                kind: kind.clone(),
            })
            .collect(),
    )))
}

#[test]
fn numbers_print_as_numeric() {
    assert_eq!(r(23, "-42"), json!(-42));
    assert_eq!(
        r(1700, "12345678901234567890.000100").to_string(),
        "12345678901234567890.000100"
    );
    assert_eq!(r(701, "NaN"), json!("NaN"));
    assert_eq!(r(1700, "Infinity"), json!("Infinity"));
    assert_eq!(r(701, "-Infinity"), json!("-Infinity"));
    assert_eq!(r(701, "1e+5").to_string(), "100000");
    assert_eq!(r(700, "1e-3").to_string(), "0.001");
    assert_eq!(r(701, "1.5e+3").to_string(), "1500");
    assert_eq!(r(701, "1.5e-3").to_string(), "0.0015");
    assert_eq!(r(701, "-0").to_string(), "0");
    assert_eq!(r(1700, "-0.000").to_string(), "0.000");
    assert_eq!(r(1700, "007.10").to_string(), "7.10");
}

#[test]
fn booleans_json_and_timestamps() {
    assert_eq!(r(16, "t"), json!(true));
    assert_eq!(r(16, "f"), json!(false));
    assert_eq!(
        r(1184, "2024-01-02 03:04:05.123456+00"),
        json!("2024-01-02T03:04:05.123456+00:00")
    );
    assert_eq!(
        r(1184, "0044-03-15 10:00:00+00 BC"),
        json!("0044-03-15T10:00:00+00:00 BC")
    );
    assert_eq!(r(1184, "infinity"), json!("infinity"));
    assert_eq!(r(1114, "2024-01-02 03:04:05"), json!("2024-01-02T03:04:05"));
    assert_eq!(
        r(1114, "0044-03-15 10:00:00 BC"),
        json!("0044-03-15T10:00:00 BC")
    );
    assert_eq!(r(1266, "03:04:05-02"), json!("03:04:05-02"));
    assert_eq!(r(1082, "0044-03-15 BC"), json!("0044-03-15 BC"));
    assert_eq!(
        r(3802, r#"[1.0e2, 2.50, -1E-2]"#).to_string(),
        "[100,2.50,-0.01]"
    );
    assert_eq!(
        r(3802, r#"{"bb": 1, "a": {"zz": 2, "c": 3}}"#).to_string(),
        r#"{"a":{"c":3,"zz":2},"bb":1}"#
    );
    assert_eq!(r(114, r#"{"k": 1, "k": 2}"#), json!({"k": 2}));
}

#[test]
fn arrays_parse_quotes_nulls_dimensions_and_delimiters() {
    assert_eq!(r(1007, "{1,2,NULL}"), json!([1, 2, null]));
    assert_eq!(
        r(1009, r#"{"a b","x\"y",NULL,"NULL",plain,"back\\slash"}"#),
        json!(["a b", "x\"y", null, "NULL", "plain", "back\\slash"])
    );
    assert_eq!(r(1009, r#"{"","{}",é}"#), json!(["", "{}", "é"]));
    assert_eq!(r(1007, "{{1,2},{3,4}}"), json!([[1, 2], [3, 4]]));
    assert_eq!(r(1007, "[0:1]={5,6}"), json!([5, 6]));
    assert_eq!(r(1007, "[0:1][2:3]={{1,2},{3,4}}"), json!([[1, 2], [3, 4]]));
    assert_eq!(r(1009, "{}"), json!([]));
    assert_eq!(
        r(1020, "{(1,1),(0,0);(2,2),(1,1)}"),
        json!(["(1,1),(0,0)", "(2,2),(1,1)"])
    );
    assert_eq!(
        r(3807, r#"{"{\"b\": 1, \"a\": 2}"}"#).to_string(),
        r#"[{"a":2,"b":1}]"#
    );
    assert_eq!(
        r(1185, r#"{"2024-01-01 00:00:00+00",NULL}"#),
        json!(["2024-01-01T00:00:00+00:00", null])
    );
    // Not an array literal: the text.
    assert_eq!(r(1007, "{1,2"), json!("{1,2"));
}

#[test]
fn vectors_are_arrays_of_their_elements() {
    assert_eq!(r(22, "1 2"), json!([1, 2]));
    assert_eq!(r(22, ""), json!([]));
    assert_eq!(r(30, "26 1700"), json!(["26", "1700"]));
    assert_eq!(r(1006, r#"{"1 2",""}"#), json!([[1, 2], []]));
}

#[test]
fn composites_render_as_objects_in_jsonb_key_order() {
    let inner = composite(
        90001,
        &[
            ("a", TypeKind::Number),
            ("B b", TypeKind::Text),
            ("c", TypeKind::Json),
            ("d", builtin_kind(1185).unwrap()),
        ],
    );
    let text = r#"(1,"q""x\\y (,)","{""b"": 1, ""a"": 2}","{""2024-01-01 00:00:00+00"",NULL}")"#;
    assert_eq!(
        render(&inner, text).unwrap().to_string(),
        r#"{"a":1,"c":{"a":2,"b":1},"d":["2024-01-01T00:00:00+00:00",null],"B b":"q\"x\\y (,)"}"#
    );
    assert_eq!(
        render(&inner, r#"(,"",,)"#).unwrap(),
        json!({"a": null, "B b": "", "c": null, "d": null})
    );
    let outer = composite(
        90002,
        &[
            ("x", inner.clone()),
            ("y", TypeKind::array_of(inner.clone())),
            ("zz", TypeKind::Number),
        ],
    );
    let text = r#"("(1,"""",,)","{""(2,\\""a b\\"",,)"",NULL}",10.50)"#;
    assert_eq!(
        render(&outer, text).unwrap().to_string(),
        r#"{"x":{"a":1,"c":null,"d":null,"B b":""},"y":[{"a":2,"c":null,"d":null,"B b":"a b"},null],"zz":10.50}"#
    );
}

#[test]
fn empty_and_single_field_composites() {
    assert_eq!(render(&composite(1, &[]), "()").unwrap(), json!({}));
    let one = composite(2, &[("v", TypeKind::Text)]);
    assert_eq!(render(&one, "()").unwrap(), json!({"v": null}));
    assert_eq!(render(&one, r#"("")"#).unwrap(), json!({"v": ""}));
    assert_eq!(render(&one, "(x)").unwrap(), json!({"v": "x"}));
}

#[test]
fn a_composite_with_the_wrong_field_count_is_stale() {
    let two = composite(7, &[("a", TypeKind::Number), ("b", TypeKind::Text)]);
    assert_eq!(
        render(&two, "(1,x,3)"),
        Err(StaleComposite {
            oid: 7,
            found: 3,
            known: 2
        })
    );
    // Also when nested in an array.
    assert_eq!(
        render(&TypeKind::array_of(two), r#"{"(1)"}"#)
            .unwrap_err()
            .found,
        1
    );
}

#[test]
fn malformed_composites_fall_back_to_text() {
    let two = composite(7, &[("a", TypeKind::Number), ("b", TypeKind::Text)]);
    for text in ["(1,x", "1,x)", r#"(1,"x)"#, "(1,x)y", "(1,x\\"] {
        assert_eq!(render(&two, text).unwrap(), json!(text), "{text}");
    }
}

#[test]
fn domains_over_arrays_nest() {
    // An array of a domain over int[] (`{"{1,2}","{3}"}`).
    let kind = TypeKind::array_of(builtin_kind(1007).unwrap());
    assert_eq!(
        render(&kind, r#"{"{1,2}","{3}"}"#).unwrap(),
        json!([[1, 2], [3]])
    );
}

#[test]
fn hstore_renders_as_its_jsonb_cast() {
    let text = r#""a"=>"1", "e"=>"é", "b c"=>NULL, "q\"x\\y"=>"""#;
    assert_eq!(
        render(&TypeKind::Hstore, text).unwrap().to_string(),
        r#"{"a":"1","e":"é","b c":null,"q\"x\\y":""}"#
    );
    assert_eq!(render(&TypeKind::Hstore, "").unwrap(), json!({}));
    assert_eq!(
        render(&TypeKind::Hstore, r#""a"=>"#).unwrap(),
        json!(r#""a"=>"#)
    );
}

/// Malformed and truncated text never panics: every kind renders every
/// prefix of real output and a few thousand random strings built from the
/// syntax's special characters.
#[test]
fn malformed_text_never_panics() {
    let inner = composite(
        1,
        &[
            ("a", TypeKind::Number),
            ("b", TypeKind::array_of(TypeKind::Timestamptz)),
        ],
    );
    let kinds = [
        TypeKind::Bool,
        TypeKind::Number,
        TypeKind::Json,
        TypeKind::Timestamp,
        TypeKind::Timestamptz,
        TypeKind::Hstore,
        builtin_kind(22).unwrap(),
        builtin_kind(1020).unwrap(),
        TypeKind::array_of(inner.clone()),
        composite(2, &[("x", inner.clone()), ("y", TypeKind::Hstore)]),
        inner,
    ];
    let samples = [
        r#"("(1,""{\""2024-01-01 00:00:00+00\""}"")","""a""=>NULL")"#,
        r#"{"(1,\"{}\")",NULL,"(,)"}"#,
        r#"[0:1]={{1,2},{3,4}}"#,
        r#""a"=>"x\"y", "b"=>NULL"#,
        "{(1,1),(0,0);(2,2),(1,1)}",
        "0044-03-15 10:00:00+00 BC",
        "-1.5e+300",
    ];
    let alphabet: Vec<char> = "{}()[]\",;=> \\NUL0123456789.eE+-:aé".chars().collect();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut inputs: Vec<String> = Vec::new();
    for sample in samples {
        for (end, _) in sample.char_indices() {
            inputs.push(sample[..end].to_string());
        }
    }
    for _ in 0..3000 {
        let len = (next() % 24) as usize;
        inputs.push(
            (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect(),
        );
    }
    for kind in &kinds {
        for input in &inputs {
            match render(kind, input) {
                Ok(_) => {}
                Err(stale) => assert!(stale.oid == 1 || stale.oid == 2, "{stale} for {input:?}"),
            }
        }
    }
}

#[test]
fn values_and_keys_written_directly_are_the_rendered_values_written() {
    let cases: &[(u32, &[&str])] = &[
        // text, varchar, uuid: escaped as strings
        (
            25,
            &[
                "",
                "plain",
                "quote \" and \\",
                "tab\tnewline\n",
                "ünï ✓",
                "\u{1}",
            ],
        ),
        (1043, &["x"]),
        (2950, &["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]),
        // numbers as printed, and the ones rewritten or given as strings
        (
            20,
            &["0", "-42", "9223372036854775807", "-9223372036854775808"],
        ),
        (
            1700,
            &[
                "12.50",
                "-0.000",
                "007.10",
                "1e+5",
                "NaN",
                "Infinity",
                "-Infinity",
                "123456789012345678901234567890.5",
                "-0",
                "1.",
            ],
        ),
        (701, &["1.5e-3", "-1.25", "0.1"]),
        (16, &["t", "f", "maybe"]),
        // timestamps, with whole-hour and minute offsets and eras
        (
            1184,
            &[
                "2024-01-02 03:04:05.123456+00",
                "2024-01-02 03:04:05+05:30",
                "0044-03-15 10:00:00+00 BC",
                "infinity",
                "-infinity",
            ],
        ),
        (1114, &["2024-01-02 03:04:05"]),
        (3802, &[r#"{"b": 1, "a": [1, 2]}"#]),
        (1007, &["{1,2,NULL}"]),
    ];
    for (oid, texts) in cases {
        let kind = builtin_kind(*oid).unwrap();
        for text in *texts {
            let mut written = String::new();
            write_json_lenient(&kind, text, ("public.t", "c"), &mut written);
            let rendered = render_lenient(&kind, text, "public.t", "c");
            let expected = serde_json::to_string(&rendered);
            assert_eq!(written, expected.unwrap(), "type {oid}, text {text:?}");
            assert_eq!(
                key_text_lenient(&kind, text, ("public.t", "c")),
                weft_core::change::json_key_text(&rendered),
                "key of type {oid}, text {text:?}"
            );
        }
    }
}
