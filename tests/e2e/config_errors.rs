//! A bad config is refused at start with an error that names the exact
//! path, what was wrong, and the allowed values.

use crate::harness::weft::run_weft_with;

const DATABASE: &str = r#"
databases:
  - name: shop
    url: postgres://postgres@127.0.0.1:5/postgres
    slot: { name: s }
    publication: { name: p }
"#;

fn assert_refused(config: &str, expected: &[&str]) {
    let (code, stderr) = run_weft_with(config);
    assert_eq!(
        code,
        Some(2),
        "weft must refuse the config; stderr:\n{stderr}"
    );
    for fragment in expected {
        assert!(
            stderr.contains(fragment),
            "expected {fragment:?} in:\n{stderr}"
        );
    }
}

#[test]
fn unknown_destination_type_names_the_path_and_allowed_values() {
    let config = format!(
        "{DATABASE}sinks:\n  - name: s\n    database: shop\n    destination: {{ type: kafak }}\n"
    );
    assert_refused(
        &config,
        &["sinks[0].destination.type", "kafak", "sequin_stream"],
    );
}

#[test]
fn unknown_key_names_its_path() {
    let config = format!(
        "{DATABASE}sinks:\n  - name: s\n    database: shop\n    destnation: {{ type: sequin_stream }}\n"
    );
    assert_refused(&config, &["sinks[0]", "destnation"]);
}

#[test]
fn missing_field_names_its_path() {
    let config =
        format!("{DATABASE}sinks:\n  - name: s\n    destination: {{ type: sequin_stream }}\n");
    assert_refused(&config, &["sinks[0]", "missing `database`"]);
}

#[test]
fn table_without_schema_is_refused() {
    let config = format!(
        "{DATABASE}sinks:\n  - name: s\n    database: shop\n    source: {{ include_tables: [orders] }}\n    destination: {{ type: sequin_stream }}\n"
    );
    assert_refused(&config, &["sinks[0].source.include_tables[0]"]);
}

#[test]
fn unresolved_references_are_all_reported() {
    let config = format!(
        "{DATABASE}sinks:\n  - name: s\n    database: nope\n    transform: up\n    destination: {{ type: sequin_stream }}\n"
    );
    assert_refused(
        &config,
        &[
            "sinks[0].database",
            "\"nope\"",
            "sinks[0].transform",
            "\"up\"",
        ],
    );
}

#[test]
fn unset_variable_without_default_is_named() {
    let config = "databases:\n  - name: shop\n    url: ${WEFT_TEST_SURELY_UNSET_VAR}\n    slot: { name: s }\n    publication: { name: p }\n";
    assert_refused(config, &["WEFT_TEST_SURELY_UNSET_VAR"]);
}
