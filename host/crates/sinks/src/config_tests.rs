//! Loading whole documents: the valid case in full, and the exact message
//! for each class of mistake.

use std::path::Path;

use crate::config::*;
use crate::kafka::{Compression, SaslMechanism};
use crate::postgres::PostgresMode;
use crate::sequin_stream::SequinStreamConfig;
use crate::webhook::WebhookConfig;
use weft_core::change::Action;

/// A directory holding the component files the configs below name.
/// Every sink type of this build, as the errors list them: in the order
/// of their registration, so that a new type changes no expected message.
fn every_type() -> String {
    crate::sink_kinds()
        .iter()
        .map(|kind| kind.name)
        .collect::<Vec<_>>()
        .join(", ")
}

fn fixture_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("up.wasm"), b"\0asm").expect("write component");
    std::fs::create_dir(dir.path().join("guests")).expect("mkdir");
    dir
}

fn env(name: &str) -> Option<String> {
    match name {
        "PGHOST" => Some("127.0.0.1".into()),
        "PGPASSWORD" => Some("from-env".into()),
        _ => None,
    }
}

fn load_in(dir: &Path, text: &str) -> Result<Config, ConfigError> {
    Config::from_yaml(text, dir, &env)
}

fn load(text: &str) -> Result<Config, ConfigError> {
    let dir = fixture_dir();
    load_in(dir.path(), text)
}

/// The error's lines, which is what users see.
fn errors(text: &str) -> Vec<String> {
    match load(text) {
        Ok(config) => panic!("expected an error, got {config:#?}"),
        Err(error) => error.to_string().lines().map(str::to_owned).collect(),
    }
}

/// The single error line for `text`.
fn error(text: &str) -> String {
    let lines = errors(text);
    assert_eq!(lines.len(), 1, "expected one error, got {lines:#?}");
    lines.into_iter().next().unwrap()
}

const DATABASE: &str = "\
databases:
  - name: main
    hostname: localhost
    database: app
    slot: {name: weft_slot}
    publication: {name: weft_pub}
";

const FUNCTIONS: &str = "\
functions:
  - name: up
    type: transform
    file: up.wasm
";

/// A valid config with one sink whose body is `sink` (indented 4).
fn with_sink(sink: &str) -> String {
    format!("{DATABASE}{FUNCTIONS}sinks:\n  - name: s\n    database: main\n{sink}")
}

const FULL: &str = r#"
# Every feature at once.
databases:
  - name: main
    hostname: ${PGHOST}
    port: 5433
    database: app
    username: weft
    password: "${PGPASSWORD}"
    slot:
      name: weft_slot
      create_if_not_exists: true
    publication:
      name: weft_pub
  - name: other
    url: "postgresql://reader:p%40ss@[::1]/other?sslmode=disable"
    slot: {name: other_slot}
    publication: {name: "Other Pub", create_if_not_exists: true}

functions:
  - name: upcase
    description: Upper-cases names
    type: transform
    file: up.wasm
    config:
      field: name
      times: 3
      loud: true
      ratio: 1.5
    limits:
      memory_mb: 32
  - name: only-big
    type: filter
    file: ./up.wasm

sinks:
  - name: orders-stream
    database: main
    source:
      include_tables: [public.orders, '"odd.schema".t']
    actions: [insert, update]
    transform: upcase
    filter: only-big
    destination:
      type: sequin_stream
      ack_wait_ms: 1000
      max_deliver: 5
  - name: everything
    database: other
    destination: {type: sequin_stream}
"#;

#[test]
fn full_config_parses_with_every_value_and_default() {
    let dir = fixture_dir();
    let config = load_in(dir.path(), FULL).unwrap_or_else(|e| panic!("{e}"));

    let main = config.database("main").expect("main");
    let c = main.connection();
    assert_eq!(
        (
            c.host.as_str(),
            c.port,
            c.user.as_str(),
            c.password.as_deref(),
            c.database.as_str()
        ),
        ("127.0.0.1", 5433, "weft", Some("from-env"), "app")
    );
    assert!(c.params.is_empty());
    assert_eq!(
        main.slot,
        SlotConfig {
            name: "weft_slot".into(),
            create_if_not_exists: true,
            lag_warning_mb: 1024,
        }
    );
    assert_eq!(
        main.publication,
        PublicationConfig {
            name: "weft_pub".into(),
            create_if_not_exists: false
        }
    );

    let other = config.database("other").expect("other").connection();
    assert_eq!(
        (
            other.host.as_str(),
            other.port,
            other.user.as_str(),
            other.password.as_deref(),
            other.database.as_str()
        ),
        ("::1", 5432, "reader", Some("p@ss"), "other")
    );
    assert_eq!(other.param("sslmode"), Some("disable"));
    assert_eq!(
        config.database("other").unwrap().publication.name,
        "Other Pub"
    );

    let upcase = config.function("upcase").expect("upcase");
    assert_eq!(upcase.kind, FunctionKind::Transform);
    assert_eq!(upcase.file, dir.path().join("up.wasm"));
    assert_eq!(upcase.description.as_deref(), Some("Upper-cases names"));
    let settings: Vec<(&str, &str)> = upcase
        .config
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        settings,
        [
            ("field", "name"),
            ("loud", "true"),
            ("ratio", "1.5"),
            ("times", "3")
        ]
    );
    assert_eq!(
        upcase.limits,
        FunctionLimits {
            memory_mb: 32,
            timeout_ms: FunctionLimits::DEFAULT_TIMEOUT_MS,
            ..FunctionLimits::default()
        }
    );
    let filter = config.function("only-big").expect("filter");
    assert_eq!(filter.kind, FunctionKind::Filter);
    assert_eq!(filter.limits, FunctionLimits::default());

    let sink = config.sink("orders-stream").expect("sink");
    assert_eq!(sink.database.as_deref(), Some("main"));
    assert_eq!(sink.function(FunctionKind::Transform), Some("upcase"));
    assert_eq!(sink.function(FunctionKind::Filter), Some("only-big"));
    assert_eq!(sink.function(FunctionKind::Routing), None);
    assert!(sink.actions.contains(Action::Insert) && sink.actions.contains(Action::Update));
    assert!(!sink.actions.contains(Action::Delete) && !sink.actions.contains(Action::Read));
    assert_eq!(
        sink.actions.iter().collect::<Vec<_>>(),
        [Action::Insert, Action::Update]
    );
    assert!(sink.accepts("public", "orders", Action::Insert));
    assert!(!sink.accepts("public", "orders", Action::Delete));
    assert!(!sink.accepts("public", "customers", Action::Insert));
    assert!(sink.source.includes("public", "orders"));
    assert!(sink.source.includes("odd.schema", "t"));
    assert!(!sink.source.includes("public", "customers"));
    let DestinationConfig::SequinStream(stream) = &sink.destination else {
        panic!("expected a sequin_stream destination");
    };
    assert_eq!(stream.ack_wait_ms, 1000);
    assert_eq!(stream.max_ack_pending, 10_000);
    assert_eq!(stream.max_waiting, 20);
    assert_eq!(stream.max_deliver, Some(5));

    let everything = config.sink("everything").expect("sink");
    assert_eq!(everything.actions, ActionSet::ALL);
    assert!(everything.source.includes("any", "table"));
    assert_eq!(
        everything.destination,
        DestinationConfig::SequinStream(SequinStreamConfig::default())
    );
    assert_eq!(everything.destination.type_name(), "sequin_stream");
    assert_eq!(config.sinks_of("main").count(), 1);
}

#[test]
fn empty_document_is_an_empty_config() {
    assert_eq!(load("# nothing yet\n").unwrap(), Config::default());
    assert_eq!(load("").unwrap(), Config::default());
}

#[test]
fn unknown_top_level_key_lists_allowed_keys() {
    assert_eq!(
        error("databases: []\nusers: []\n"),
        "users: unknown field `users`, expected one of `databases`, `functions`, `http_endpoints`, `sinks`, \
         `webhook_sources`, `change_retentions`, `api_tokens`, `plugin_registry`, `accounts` (`users` is a sequin.yml section that weft does not support yet) (line 2, column 8)"
    );
    assert_eq!(
        error("sinkz: []\n"),
        "sinkz: unknown field `sinkz`, expected one of `databases`, `functions`, `http_endpoints`, `sinks`, `webhook_sources`, `change_retentions`, `api_tokens`, `plugin_registry`, `accounts` (line 1, column 8)"
    );
}

#[test]
fn unknown_keys_are_reported_with_their_path_at_every_level() {
    let db = DATABASE.replace(
        "    database: app\n",
        "    database: app\n    pool_size: 3\n",
    );
    assert_eq!(
        error(&db),
        "databases[0].pool_size: unknown field `pool_size`, expected one of `name`, `account`, `url`, `hostname`, \
         `port`, `database`, `username`, `password`, `ssl`, `sslmode`, `sslrootcert`, `slot`, `publication`, \
         `heartbeat_interval_ms` (line 5, column 16)"
    );
    let slot = DATABASE.replace("{name: weft_slot}", "{name: weft_slot, temporary: true}");
    assert_eq!(
        error(&slot),
        "databases[0].slot.temporary: unknown field `temporary`, expected one of `name`, `create_if_not_exists`, \
         `lag_warning_mb` (line 5, column 40)"
    );
    let limits = format!("{FUNCTIONS}    limits: {{fuel: 5}}\n");
    assert_eq!(
        error(&limits),
        "functions[0].limits.fuel: unknown field `fuel`, expected one of `memory_mb`, `timeout_ms`, `recycle_after_calls`, `recycle_memory_mb` (line 5, column 20)"
    );
    assert_eq!(
        error(&with_sink(
            "    batch_size: 10\n    destination: {type: sequin_stream}\n"
        )),
        "sinks[0].batch_size: unknown field `batch_size`, expected one of `name`, `account`, `database`, `source`, \
         `actions`, `transform`, `filter`, `routing`, `enrichment`, `max_retry_count`, `max_memory_mb`, \
         `max_backlog_messages`, `load_shedding_policy`, `quarantine_after_traps`, `function_instances`, `truncate`, `initial_backfill`, `destination` (line 14, column 17)"
    );
    assert_eq!(
        error(&with_sink(
            "    source: {include_table: [public.x]}\n    destination: {type: sequin_stream}\n"
        )),
        "sinks[0].source.include_table: unknown field `include_table`, expected one of `include_schemas`, \
         `exclude_schemas`, `include_tables`, `exclude_tables`, `webhook` (line 14, column 29)"
    );
    assert_eq!(
        error(&with_sink(
            "    destination:\n      type: sequin_stream\n      ack_wait: 1000\n"
        )),
        "sinks[0].destination.ack_wait: unknown field `ack_wait`, expected one of `ack_wait_ms`, \
         `max_ack_pending`, `max_waiting`, `max_deliver` (line 16, column 17)"
    );
}

#[test]
fn missing_required_fields_are_named() {
    assert_eq!(
        error(&format!(
            "{DATABASE}sinks:\n  - name: s\n    destination: {{type: sequin_stream}}\n"
        )),
        "sinks[0]: missing `database`: name the database whose changes this sink receives, or take a webhook source's messages with `source: {webhook: NAME}` (line 8, column 5)"
    );
    assert_eq!(
        error(&with_sink("")),
        "sinks[0]: missing field `destination` (line 12, column 5)"
    );
    assert_eq!(
        error(&with_sink("    destination: {ack_wait_ms: 1000}\n")),
        format!(
            "sinks[0].destination: missing field `type`; allowed types: {} (line 14, column 18)",
            every_type()
        )
    );
    assert_eq!(
        error("databases:\n  - name: main\n    url: postgres://h/db\n    slot: {name: s}\n"),
        "databases[0]: missing field `publication` (line 2, column 5)"
    );
}

#[test]
fn bad_enum_values_list_the_allowed_values() {
    assert_eq!(
        error(&FUNCTIONS.replace("type: transform", "type: mapper")),
        "functions[0].type: unknown variant `mapper`, expected one of `transform`, `filter`, `routing`, \
         `enrichment` (line 3, column 11)"
    );
    assert_eq!(
        error(&with_sink(
            "    actions: [insert, upsert]\n    destination: {type: sequin_stream}\n"
        )),
        "sinks[0].actions[1]: unknown variant `upsert`, expected one of `insert`, `update`, `delete`, `read` \
         (line 14, column 23)"
    );
    assert_eq!(
        error(&with_sink("    destination:\n      type: kafak\n")),
        format!(
            "sinks[0].destination.type: unknown destination type `kafak`; allowed types: {} (line 15, column 13)",
            every_type()
        )
    );
    assert_eq!(
        error(&with_sink(
            "    destination:\n      type: sns\n      topic_arn: t\n"
        )),
        format!(
            "sinks[0].destination.type: destination type `sns` is not supported yet; supported types: {} (line 15, column 13)",
            every_type()
        )
    );
}

#[test]
fn table_names_must_be_schema_qualified() {
    assert_eq!(
        error(&with_sink(
            "    source:\n      include_tables: [public.orders, orders]\n    destination: {type: sequin_stream}\n"
        )),
        "sinks[0].source.include_tables[1]: \"orders\" is not a schema-qualified table name; write it as \
         \"schema.table\", e.g. \"public.orders\" (line 15, column 39)"
    );
    for bad in [
        "a.b.c",
        ".orders",
        "public.",
        "\"unterminated.x",
        "public. orders",
    ] {
        assert!(TableRef::parse(bad).is_err(), "{bad} should be rejected");
    }
    let odd = TableRef::parse("\"we\"\"ird.s\".t").unwrap();
    assert_eq!(
        (odd.schema.as_str(), odd.table.as_str()),
        ("we\"ird.s", "t")
    );
    assert_eq!(odd.to_string(), "\"we\"\"ird.s\".t");
}

#[test]
fn empty_filter_lists_are_rejected() {
    assert_eq!(
        error(&with_sink(
            "    source: {include_tables: []}\n    destination: {type: sequin_stream}\n"
        )),
        "sinks[0].source.include_tables: must not be empty; remove the key to leave this filter off \
         (line 14, column 30)"
    );
    assert_eq!(
        error(&with_sink(
            "    actions: []\n    destination: {type: sequin_stream}\n"
        )),
        "sinks[0].actions: must list at least one of insert, update, delete, read; remove the key to receive \
         all (line 14, column 14)"
    );
}

#[test]
fn source_includes_and_excludes_combine() {
    let text = with_sink(
        "    source:\n      include_schemas: [public]\n      include_tables: [audit.log]\n      \
         exclude_tables: [public.secrets]\n    destination: {type: sequin_stream}\n",
    );
    let config = load(&text).unwrap_or_else(|e| panic!("{e}"));
    let source = &config.sinks[0].source;
    assert!(source.includes("public", "orders"));
    assert!(source.includes("audit", "log"));
    assert!(!source.includes("audit", "other"));
    assert!(!source.includes("public", "secrets"));
    let exclude_only = SourceConfig {
        exclude_schemas: Some(vec!["internal".into()]),
        ..SourceConfig::default()
    };
    assert!(exclude_only.includes("public", "x") && !exclude_only.includes("internal", "x"));
}

#[test]
fn all_unresolved_references_are_reported_together() {
    let text = format!(
        "{DATABASE}{FUNCTIONS}sinks:
  - name: a
    database: main
    transform: upcase
    destination: {{type: sequin_stream}}
  - name: b
    database: mian
    filter: up
    routing: nowhere
    destination: {{type: sequin_stream}}
"
    );
    assert_eq!(
        errors(&text),
        [
            "sinks[0].transform: no function named \"upcase\"; defined functions: [\"up\"] (line 14, column 16)",
            "sinks[1].database: no database named \"mian\"; defined databases: [\"main\"] (line 17, column 15)",
            "sinks[1].filter: function \"up\" has type transform, but `filter` needs a function of type filter \
             (line 18, column 13)",
            "sinks[1].routing: no function named \"nowhere\"; defined functions: [\"up\"] (line 19, column 14)",
            "sinks[1].routing: sequin_stream sinks take no routing keys, so a routing function has nothing \
             to choose; remove `routing` (routing applies to webhook, nats, redis_string, redis_stream, kafka, \
             rabbitmq and postgres sinks) (line 19, column 14)",
        ]
    );
}

#[test]
fn duplicate_names_point_at_the_later_entry() {
    let text = format!(
        "{DATABASE}  - name: main\n    url: postgres://other/db\n    slot: {{name: s2}}\n    publication: {{name: p}}\n"
    );
    assert_eq!(
        error(&text),
        "databases[1].name: duplicate database name \"main\" (databases[0] has it too); names must be unique \
         (line 7, column 11)"
    );
}

#[test]
fn two_entries_on_one_slot_are_rejected() {
    let text = format!(
        "{DATABASE}  - name: again\n    url: postgres://u@localhost:5432/app\n    slot: {{name: weft_slot}}\n    \
         publication: {{name: p}}\n"
    );
    assert_eq!(
        error(&text),
        "databases[1].slot.name: slot \"weft_slot\" on localhost:5432/app is already used by databases[0]; a slot \
         streams to one consumer, give each database entry its own slot (line 9, column 18)"
    );
}

#[test]
fn url_and_fields_are_exclusive_and_one_is_required() {
    let both = DATABASE.replace(
        "    hostname: localhost\n",
        "    hostname: localhost\n    url: postgres://h/db\n",
    );
    assert_eq!(
        error(&both),
        "databases[0]: set either `url` or `hostname`/`port`/`database`/`username`/`password`, not both; \
         found `url` and `hostname`, `database` (line 2, column 5)"
    );
    let neither = "databases:\n  - name: main\n    username: me\n    slot: {name: s}\n    publication: {name: p}\n";
    assert_eq!(
        error(neither),
        "databases[0]: missing connection settings `hostname`, `database`: set `hostname` and `database` (and \
         optionally `port`, `username`, `password`), or a single `url` like \
         postgres://user:password@host:5432/database (line 2, column 5)"
    );
    let bad_url = "databases:\n  - name: main\n    url: mysql://u:hunter2@h/db\n    slot: {name: s}\n    publication: {name: p}\n";
    let message = error(bad_url);
    assert_eq!(
        message,
        "databases[0].url: the URL must start with postgres:// or postgresql:// (line 3, column 10)"
    );
    let fields_only = "databases:\n  - name: main\n    hostname: db\n    database: app\n    slot: {name: s}\n    publication: {name: p}\n";
    let c = load(fields_only).unwrap();
    let c = c.databases[0].connection();
    assert_eq!(
        (c.port, c.user.as_str(), c.password.as_deref()),
        (5432, "postgres", None)
    );
}

#[test]
fn heartbeat_interval_defaults_to_15s_and_0_turns_it_off() {
    let config = load(DATABASE).unwrap();
    assert_eq!(
        config.databases[0].heartbeat_interval(),
        Some(std::time::Duration::from_secs(15))
    );
    let set = |value: &str| {
        DATABASE.replace(
            "    database: app\n",
            &format!("    database: app\n    heartbeat_interval_ms: {value}\n"),
        )
    };
    let config = load(&set("1000")).unwrap();
    assert_eq!(
        config.databases[0].heartbeat_interval(),
        Some(std::time::Duration::from_secs(1))
    );
    assert_eq!(
        load(&set("0")).unwrap().databases[0].heartbeat_interval(),
        None
    );
    assert!(error(&set("-5")).starts_with("databases[0].heartbeat_interval_ms:"));
}

#[test]
fn numbers_out_of_range_say_the_range() {
    assert_eq!(
        error(&with_sink(
            "    destination:\n      type: sequin_stream\n      ack_wait_ms: 100\n"
        )),
        "sinks[0].destination.ack_wait_ms: must be at least 500, got 100 (line 16, column 20)"
    );
    assert_eq!(
        error(&DATABASE.replace(
            "    database: app\n",
            "    database: app\n    port: 70000\n"
        )),
        "databases[0].port: invalid port \"70000\": a port is a number from 1 to 65535 (line 5, column 11)"
    );
    let quoted = DATABASE.replace(
        "    database: app\n",
        "    database: app\n    port: \"${NOPE:-6543}\"\n",
    );
    assert_eq!(load(&quoted).unwrap().databases[0].connection().port, 6543);
    assert_eq!(
        error(&format!("{FUNCTIONS}    limits: {{memory_mb: 0}}\n")),
        "functions[0].limits.memory_mb: must be between 1 and 4096, got 0 (line 5, column 25)"
    );
}

#[test]
fn bad_names_are_rejected() {
    assert_eq!(
        error(&DATABASE.replace("slot: {name: weft_slot}", "slot: {name: Weft-Slot}")),
        "databases[0].slot.name: invalid slot name \"Weft-Slot\": Postgres accepts 1 to 63 lowercase letters, \
         digits or `_` (line 5, column 18)"
    );
    assert_eq!(
        error(&FUNCTIONS.replace("name: up", "name: \"up case\"")),
        "functions[0].name: invalid name \"up case\": use 1 to 128 letters, digits, `_` or `-` (line 2, column 11)"
    );
}

#[test]
fn function_config_values_must_be_scalars() {
    assert_eq!(
        error(&format!("{FUNCTIONS}    config:\n      list: [1, 2]\n")),
        "functions[0].config.list: invalid type: sequence, expected a string, number or boolean (line 6, column 13)"
    );
}

#[test]
fn missing_component_file_says_where_it_looked() {
    let dir = fixture_dir();
    let text = FUNCTIONS.replace("up.wasm", "nope.wasm")
        + "  - name: dir\n    type: filter\n    file: guests\n";
    let lines: Vec<String> = load_in(dir.path(), &text)
        .unwrap_err()
        .to_string()
        .lines()
        .map(str::to_owned)
        .collect();
    let base = dir.path().display();
    assert_eq!(
        lines,
        [
            format!(
                "functions[0].file: component file {base}/nope.wasm does not exist (relative paths are resolved \
                 against the config file's directory, {base}) (line 4, column 11)"
            ),
            format!(
                "functions[1].file: component file {base}/guests is a directory; name the component's .wasm file \
                 (relative paths are resolved against the config file's directory, {base}) (line 7, column 11)"
            ),
        ]
    );
}

#[test]
fn unset_variable_without_default_is_an_error_with_its_line() {
    let text = DATABASE.replace("hostname: localhost", "hostname: ${DB_HOST}");
    assert_eq!(
        error(&text),
        "environment variable `DB_HOST` is not set and `${DB_HOST}` has no default; set DB_HOST or write \
         `${DB_HOST:-default}` (line 3, column 15)"
    );
}

#[test]
fn defaults_and_dollar_escapes_reach_the_values() {
    let text = DATABASE
        .replace("hostname: localhost", "hostname: ${DB_HOST:-db.local}")
        .replace(
            "database: app",
            "database: app\n    password: \"pa$$word${PGPASSWORD}\"",
        );
    let config = load(&text).unwrap_or_else(|e| panic!("{e}"));
    let c = config.databases[0].connection();
    assert_eq!(c.host, "db.local");
    assert_eq!(c.password.as_deref(), Some("pa$wordfrom-env"));
}

#[test]
fn yaml_syntax_errors_carry_the_parser_position() {
    let message = error("databases:\n  - name: [unclosed\n");
    assert!(
        message.contains("line 3") || message.contains("line 2"),
        "{message}"
    );
    assert!(!message.starts_with(':'), "{message}");
}

#[test]
fn load_reads_the_file_resolves_paths_and_names_the_file_in_errors() {
    let dir = fixture_dir();
    let config_dir = dir.path().join("conf");
    std::fs::create_dir(&config_dir).unwrap();
    let file = config_dir.join("weft.yml");
    let text = FUNCTIONS.replace("up.wasm", "../up.wasm");
    std::fs::write(&file, &text).unwrap();
    let config = Config::load(&file).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.functions[0].file, config_dir.join("../up.wasm"));
    assert!(config.functions[0].file.is_file());

    std::fs::write(&file, "sinks: 3\n").unwrap();
    assert_eq!(
        Config::load(&file).unwrap_err().to_string(),
        format!(
            "{}: sinks: invalid type: integer `3`, expected a sequence (line 1, column 8)",
            file.display()
        )
    );

    let missing = dir.path().join("absent.yml");
    let message = Config::load(&missing).unwrap_err().to_string();
    assert!(
        message.starts_with(&format!("cannot read config file {}: ", missing.display())),
        "{message}"
    );
}

#[test]
fn connection_debug_hides_the_password() {
    let config = load(FULL).unwrap_or_else(|e| panic!("{e}"));
    let debug = format!("{:?}", config.databases[0]);
    assert!(
        !debug.contains("from-env") && debug.contains("<redacted>"),
        "{debug}"
    );
    assert_eq!(
        config.databases[0].connection().to_string(),
        "weft@127.0.0.1:5433/app"
    );
    assert_eq!(
        config.databases[1].connection().to_string(),
        "reader@[::1]:5432/other"
    );
}

/// Loads `text` with every component file it names created under a
/// scratch directory two levels deep (so `../..` paths stay inside it).
fn load_with_components(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Config {
    let root = tempfile::tempdir().expect("temp dir");
    let base = root.path().join("examples").join("config");
    std::fs::create_dir_all(&base).unwrap();
    for line in text.lines() {
        if let Some(file) = line.trim().strip_prefix("file:") {
            let path = base.join(file.trim());
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, b"\0asm").unwrap();
        }
    }
    Config::from_yaml(text, &base, env).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn demo_config_loads() {
    let text = include_str!("../../../../examples/config/demo.yml");
    let config = load_with_components(text, &|_| None);
    let demo = config.database("demo").expect("demo database");
    assert_eq!(demo.connection().host, "127.0.0.1");
    assert_eq!(demo.connection().port, 5432);
    let sink = config.sink("orders").expect("orders sink");
    assert!(sink.source.includes("public", "orders"));
    assert_eq!(sink.transform.as_deref(), Some("upcase"));
    assert_eq!(
        config.function("upcase").unwrap().kind,
        FunctionKind::Transform
    );
}

#[test]
fn reference_example_in_docs_loads() {
    let doc = include_str!("../../../../docs/config.md");
    let start = doc.find("```yaml\n").expect("a yaml block") + "```yaml\n".len();
    let text = &doc[start..start + doc[start..].find("```").expect("closed block")];
    let config = load_with_components(text, &|name| (name == "PGPASSWORD").then(|| "pw".into()));
    assert_eq!(config.sinks.len(), 1);
    assert_eq!(config.functions[0].limits.timeout_ms, 500);
}

#[test]
fn a_broken_database_is_reported_once_not_again_by_its_sinks() {
    let text = "databases:
  - name: main
    url: postgres://u@h
    slot: {name: s}
    publication: {name: p}
sinks:
  - name: s
    database: main
    destination: {type: sequin_stream}
";
    assert_eq!(
        errors(text),
        [
            "databases[0].url: the URL has no database name; add it after the host, as in \
          postgres://host:5432/mydb (line 3, column 10)"
        ]
    );
}

#[test]
fn wrong_shapes_are_described_in_config_terms() {
    assert_eq!(
        error("- databases\n"),
        "invalid type: sequence, expected a mapping with keys `databases`, `functions`, `http_endpoints`, `sinks`, `webhook_sources`, `change_retentions`, `api_tokens`, `plugin_registry`, `accounts` (line 1, column 1)"
    );
    assert_eq!(
        error(&DATABASE.replace("slot: {name: weft_slot}", "slot: weft_slot")),
        "databases[0].slot: invalid type: string \"weft_slot\", expected a slot mapping like {name: weft_slot} \
         (line 5, column 11)"
    );
}

#[test]
fn ssl_fields_become_connection_parameters() {
    let with = |extra: &str| {
        DATABASE.replace(
            "    database: app\n",
            &format!("    database: app\n{extra}"),
        )
    };
    let mode = |extra: &str| {
        load(&with(extra)).unwrap().databases[0]
            .connection()
            .param("sslmode")
            .map(str::to_owned)
    };
    assert_eq!(mode("    ssl: true\n").as_deref(), Some("require"));
    assert_eq!(mode("    ssl: false\n").as_deref(), Some("disable"));
    assert_eq!(mode(""), None);
    let c = load(&with(
        "    sslmode: verify-full\n    sslrootcert: /etc/ca.pem\n",
    ))
    .unwrap();
    let c = c.databases[0].connection();
    assert_eq!(c.param("sslmode"), Some("verify-full"));
    assert_eq!(c.param("sslrootcert"), Some("/etc/ca.pem"));
    let source = weft_postgres::PgConnectOptions::try_from(c).unwrap();
    assert_eq!(source.tls.mode, weft_postgres::tls::SslMode::VerifyFull);

    assert_eq!(
        error(&with("    ssl: true\n    sslmode: require\n")),
        "databases[0]: set either `ssl` or `sslmode`, not both: `ssl: true` means `sslmode: require` \
         (line 2, column 5)"
    );
    assert_eq!(
        error(&with("    sslmode: on\n")),
        "databases[0].sslmode: unknown sslmode \"on\", expected one of disable, allow, prefer, require, \
         verify-ca, verify-full (line 5, column 14)"
    );
    let url = "databases:\n  - name: main\n    url: postgres://h/db?sslmode=disable\n    ssl: true\n    slot: {name: s}\n    publication: {name: p}\n";
    assert_eq!(
        error(url),
        "databases[0]: `ssl`/`sslmode` is set twice: as a field and as `?sslmode=` in the `url`; keep one \
         (line 2, column 5)"
    );
    let url = "databases:\n  - name: main\n    url: postgres://h/db\n    ssl: true\n    slot: {name: s}\n    publication: {name: p}\n";
    assert_eq!(
        load(url).unwrap().databases[0]
            .connection()
            .param("sslmode"),
        Some("require")
    );
}

#[test]
fn http_grants_are_read_and_their_allow_lists_checked() {
    let with = |grants: &str| {
        format!(
            "{DATABASE}functions:
  - name: lookup
    type: enrichment
    file: up.wasm
    grants: {grants}
sinks:
  - name: a
    database: main
    enrichment: lookup
    destination: {{type: sequin_stream}}
"
        )
    };
    let config = load(&with(
        r#"{http: {allow_hosts: [api.example.com, "127.0.0.1:8080", "[::1]:9000"]}}"#,
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let grants = &config.function("lookup").unwrap().grants;
    assert!(!grants.source_query);
    assert_eq!(
        grants.http.as_ref().unwrap().allow_hosts,
        ["api.example.com", "127.0.0.1:8080", "[::1]:9000"]
    );

    assert!(
        error(&with("{http: {allow_hosts: []}}"))
            .starts_with("functions[0].grants.http.allow_hosts: is empty"),
        "{}",
        error(&with("{http: {allow_hosts: []}}"))
    );
    let bad = errors(&with(
        r#"{http: {allow_hosts: [ok.example.com, "https://api.example.com/v1", "h:99999"]}}"#,
    ))
    .join("\n");
    assert!(
        bad.contains("functions[0].grants.http.allow_hosts[1]: `https://api.example.com/v1` is not a host")
            && bad.contains("functions[0].grants.http.allow_hosts[2]: `h:99999`: the port must be a number from 1 to 65535")
            && !bad.contains("allow_hosts[0]"),
        "{bad}"
    );
    assert!(
        error(&with("{http: {hosts: [a]}}")).contains(
            "functions[0].grants.http.hosts: unknown field `hosts`, expected `allow_hosts`"
        ),
        "{}",
        error(&with("{http: {hosts: [a]}}"))
    );
    let on_filter = format!(
        "{DATABASE}functions:
  - name: f
    type: filter
    file: up.wasm
    grants: {{http: {{allow_hosts: [a.example]}}}}
"
    );
    assert!(
        error(&on_filter).starts_with(
            "functions[0].grants: only enrichment functions may be granted capabilities, and this is a filter function"
        ),
        "{}",
        error(&on_filter)
    );
}

#[test]
fn grants_recycling_and_deterministic_mode_are_read_and_checked() {
    let enrichment = format!(
        "{DATABASE}functions:
  - name: names
    type: enrichment
    file: up.wasm
    grants: {{source_query: true}}
    deterministic: true
    limits: {{memory_mb: 32, recycle_after_calls: 1000, recycle_memory_mb: 16}}
sinks:
  - name: a
    database: main
    enrichment: names
    destination: {{type: sequin_stream}}
"
    );
    let config = load(&enrichment).unwrap_or_else(|e| panic!("{e}"));
    let function = config.function("names").unwrap();
    assert!(function.grants.source_query);
    assert!(function.deterministic);
    assert_eq!(function.limits.recycle_after_calls, Some(1000));
    assert_eq!(function.limits.recycle_memory_mb, Some(16));

    let on_transform = format!("{FUNCTIONS}    grants: {{source_query: true}}\n");
    assert_eq!(
        error(&on_transform),
        "functions[0].grants: only enrichment functions may be granted capabilities, and this is a \
         transform function; remove `grants` (line 5, column 13)"
    );
    let unknown = enrichment.replace("source_query: true", "files: true");
    assert!(
        error(&unknown).contains(
            "functions[0].grants.files: unknown field `files`, expected `source_query` or `http`"
        ),
        "{}",
        error(&unknown)
    );
    let too_high = enrichment.replace("recycle_memory_mb: 16", "recycle_memory_mb: 32");
    assert!(
        error(&too_high).starts_with(
            "functions[0].limits.recycle_memory_mb: 32 MiB is not below memory_mb (32 MiB)"
        ),
        "{}",
        error(&too_high)
    );
    let zero = enrichment.replace("recycle_after_calls: 1000", "recycle_after_calls: 0");
    assert!(error(&zero).starts_with("functions[0].limits.recycle_after_calls:"));
}

const ENDPOINT: &str = "\
http_endpoints:
  - name: hooks
    url: https://hooks.example.com/weft/
    headers: {X-Source: weft}
    encrypted_headers: {Authorization: Bearer hunter2}
    signing_secret: sssh
";

#[test]
fn webhook_sink_resolves_with_its_endpoint_and_defaults() {
    let text = format!(
        "{ENDPOINT}{}",
        with_sink(
            "    max_retry_count: 4\n    destination: {type: webhook, http_endpoint: hooks, http_endpoint_path: /orders, gzip: true}\n"
        )
    );
    let config = load(&text).unwrap();
    let endpoint = config.http_endpoint("hooks").unwrap();
    assert_eq!(endpoint.url, "https://hooks.example.com/weft");
    assert_eq!(
        endpoint.encrypted_headers["Authorization"],
        "Bearer hunter2"
    );
    let debug = format!("{endpoint:?}");
    assert!(
        !debug.contains("hunter2") && !debug.contains("sssh"),
        "{debug}"
    );
    let sink = config.sink("s").unwrap();
    assert_eq!(sink.max_retry_count, Some(4));
    let DestinationConfig::Webhook(webhook) = &sink.destination else {
        panic!("expected a webhook destination");
    };
    assert_eq!(
        webhook,
        &WebhookConfig {
            http_endpoint: "hooks".into(),
            http_endpoint_path: "/orders".into(),
            batch: true,
            gzip: true,
            delivery: DeliveryConfig {
                batch_size: 1,
                max_in_flight: 10,
                request_timeout_ms: 30_000,
                retry_backoff_base_ms: 1_000,
                retry_backoff_max_ms: 600_000,
            },
        }
    );
}

#[test]
fn webhook_mistakes_are_all_reported_without_secrets() {
    let text = format!(
        "{}{}",
        ENDPOINT.replace("Bearer hunter2", "\"Bearer\\nhunter2\""),
        with_sink(
            "    destination: {type: webhook, http_endpoint: hookz, retry_backoff_base_ms: 500, retry_backoff_max_ms: 100}\n  - name: pull\n    database: main\n    max_retry_count: 3\n    destination: {type: sequin_stream}\n"
        )
    );
    let lines = errors(&text);
    let all = lines.join("\n");
    assert!(!all.contains("hunter2"), "{all}");
    assert_eq!(lines.len(), 4, "{all}");
    assert!(all.contains("http_endpoints[0].encrypted_headers.Authorization: the value is not a valid HTTP header value"), "{all}");
    assert!(
        all.contains("sinks[0].destination.http_endpoint: no http endpoint named \"hookz\""),
        "{all}"
    );
    assert!(
        all.contains(
            "sinks[0].destination.retry_backoff_max_ms: 100 is below retry_backoff_base_ms"
        ),
        "{all}"
    );
    assert!(
        all.contains("sinks[1].max_retry_count: applies to push sinks"),
        "{all}"
    );
    assert_eq!(
        error(&with_sink(
            "    destination: {type: webhook, http_endpoint: hooks, http_endpoint_path: orders}\n"
        )),
        "sinks[0].destination.http_endpoint_path: \"orders\" must start with `/`, e.g. \"/orders\" (line 14, column 76)"
    );
    assert!(
        error("http_endpoints:\n  - {name: h, url: 'ftp://x'}\n").contains("use http or https"),
    );
    let with_password = error("http_endpoints:\n  - {name: h, url: 'https://u:pw1@x'}\n");
    assert!(
        with_password.contains("encrypted_headers") && !with_password.contains("pw1"),
        "{with_password}"
    );
}

#[test]
fn max_memory_mb_defaults_to_128_and_is_bounded() {
    let config = load(&with_sink("    destination: {type: sequin_stream}\n")).unwrap();
    assert_eq!(config.sinks[0].max_memory_mb, 128);
    assert_eq!(
        error(&with_sink(
            "    max_memory_mb: 0\n    destination: {type: sequin_stream}\n"
        )),
        "sinks[0].max_memory_mb: must be between 1 and 65536, got 0 (line 14, column 20)"
    );
}

#[test]
fn initial_backfill_is_true_or_a_list_of_tables() {
    use crate::config::InitialBackfill;
    let none = load(&with_sink("    destination: {type: sequin_stream}\n")).unwrap();
    assert_eq!(none.sinks[0].initial_backfill, None);
    let all = load(&with_sink(
        "    initial_backfill: true\n    destination: {type: sequin_stream}\n",
    ))
    .unwrap();
    assert_eq!(
        all.sinks[0].initial_backfill,
        Some(InitialBackfill::All(true))
    );
    let listed = load(&with_sink(
        "    initial_backfill: [public.orders]\n    destination: {type: sequin_stream}\n",
    ))
    .unwrap();
    assert_eq!(
        listed.sinks[0].initial_backfill,
        Some(InitialBackfill::Tables(vec![
            TableRef::parse("public.orders").unwrap()
        ]))
    );
    let bad = error(&with_sink(
        "    initial_backfill: yes please\n    destination: {type: sequin_stream}\n",
    ));
    assert!(
        bad.contains("true, false, or a list of schema.table names"),
        "{bad}"
    );
}

#[test]
fn quarantine_after_traps_defaults_to_10_and_is_bounded() {
    let config = load(&with_sink("    destination: {type: sequin_stream}\n")).unwrap();
    assert_eq!(config.sinks[0].quarantine_after_traps, 10);
    let off = load(&with_sink(
        "    quarantine_after_traps: 0\n    destination: {type: sequin_stream}\n",
    ))
    .unwrap();
    assert_eq!(off.sinks[0].quarantine_after_traps, 0);
    assert_eq!(
        error(&with_sink(
            "    quarantine_after_traps: 2000000\n    destination: {type: sequin_stream}\n"
        )),
        "sinks[0].quarantine_after_traps: must be between 0 and 1000000, got 2000000 (line 14, column 29)"
    );
}

#[test]
fn function_instances_defaults_to_1_is_bounded_and_counts_against_the_account() {
    let config = load(&with_sink("    destination: {type: sequin_stream}\n")).unwrap();
    assert_eq!(config.sinks[0].function_instances, 1);
    let two = load(&with_sink(
        "    function_instances: 2\n    destination: {type: sequin_stream}\n",
    ))
    .unwrap();
    assert_eq!(two.sinks[0].function_instances, 2);
    assert_eq!(
        error(&with_sink(
            "    function_instances: 9\n    destination: {type: sequin_stream}\n"
        )),
        "sinks[0].function_instances: must be between 1 and 8, got 9 (line 14, column 25)"
    );
    // Each instance counts against the account's max_plugin_instances.
    let owned = format!(
        "accounts:\n  - {{name: a, limits: {{max_plugin_instances: 2}}}}\n{}",
        with_sink(
            "    account: a\n    transform: up\n    function_instances: 3\n    destination: {type: sequin_stream}\n"
        )
    );
    let lines = errors(&owned);
    assert!(
        lines.iter().any(|line| line.contains(
            "sinks use 3 function instances (`function_instances` per function per sink), more than its max_plugin_instances 2"
        )),
        "{lines:#?}"
    );
}

#[test]
fn rabbitmq_sink_defaults_and_hidden_password() {
    let config = load(&with_sink(
        "    destination: {type: rabbitmq, host: mq.internal, exchange: cdc, username: u, password: hunter2}\n",
    ))
    .unwrap();
    let DestinationConfig::RabbitMq(rabbitmq) = &config.sink("s").unwrap().destination else {
        panic!("expected a rabbitmq destination");
    };
    assert_eq!(rabbitmq.port(), 5672);
    assert_eq!(rabbitmq.virtual_host, "/");
    assert!(!rabbitmq.tls);
    assert_eq!(
        (
            rabbitmq.delivery.batch_size,
            rabbitmq.delivery.max_in_flight,
            rabbitmq.delivery.request_timeout_ms
        ),
        (100, 10, 5_000)
    );
    assert!(!format!("{rabbitmq:?}").contains("hunter2"));
}

#[test]
fn rabbitmq_mistakes_are_reported_with_their_fix() {
    assert_eq!(
        error(&with_sink("    destination: {type: rabbitmq, host: h}\n")),
        "sinks[0].destination: missing field `exchange` (line 14, column 18)"
    );
    assert_eq!(
        error(&with_sink(
            "    destination: {type: rabbitmq, host: h, exchange: x, port: 0}\n"
        )),
        "sinks[0].destination.port: invalid port \"0\": a port is a number from 1 to 65535 (line 14, column 63)"
    );
    let lines = errors(&with_sink(
        "    destination: {type: rabbitmq, host: h, exchange: '', password: hunter2, tls_ca_file: ca.pem}\n",
    ));
    let all = lines.join("\n");
    assert!(!all.contains("hunter2"), "{all}");
    assert!(
        error(&with_sink(
            "    destination: {type: rabbitmq, host: h, exchange: x, retry_backoff_base_ms: 500, retry_backoff_max_ms: 100}\n"
        ))
        .starts_with("sinks[0].destination.retry_backoff_max_ms: 100 is below retry_backoff_base_ms (500)")
    );
    for expected in [
        "sinks[0].destination.exchange: must not be empty",
        "sinks[0].destination.password: is set without `username`",
        "sinks[0].destination.tls_ca_file: is only used over TLS; set `tls: true` too",
    ] {
        assert!(all.contains(expected), "{expected} in {all}");
    }
}

#[test]
fn nats_sink_defaults_and_hidden_secrets() {
    let config = load(&with_sink(
        "    destination: {type: nats, host: nats.internal, username: u, password: hunter2}\n",
    ))
    .unwrap();
    let DestinationConfig::Nats(nats) = &config.sink("s").unwrap().destination else {
        panic!("expected a nats destination");
    };
    assert_eq!(nats.port(), 4222);
    assert!(nats.jetstream);
    assert_eq!(
        (
            nats.delivery.batch_size,
            nats.delivery.max_in_flight,
            nats.delivery.request_timeout_ms
        ),
        (100, 10, 5_000)
    );
    assert!(!format!("{nats:?}").contains("hunter2"));
}

#[test]
fn nats_mistakes_are_reported_with_their_fix() {
    assert_eq!(
        error(&with_sink(
            "    destination: {type: nats, host: h, request_timeout_ms: 5}\n"
        )),
        "sinks[0].destination.request_timeout_ms: must be between 100 and 600000, got 5 (line 14, column 60)"
    );
    let lines = errors(&with_sink(
        "    destination: {type: nats, host: h, password: hunter2, jwt: j, tls_ca_file: ca.pem}\n",
    ));
    let all = lines.join("\n");
    assert!(!all.contains("hunter2"), "{all}");
    assert!(
        all.contains("sinks[0].destination.password: is set without `username`"),
        "{all}"
    );
    assert!(
        all.contains("sinks[0].destination.jwt: needs `nkey_seed`"),
        "{all}"
    );
    assert!(
        all.contains(
            "sinks[0].destination.tls_ca_file: is only used over TLS; set `tls: true` too"
        ),
        "{all}"
    );
}

#[test]
fn kafka_sink_defaults_and_hidden_secrets() {
    let config = load(&with_sink(
        "    destination: {type: kafka, hosts: 'k1:9092, k2:9093', topic: cdc.orders, username: u, password: hunter2, sasl_mechanism: scram_sha_512, compression: lz4}\n",
    ))
    .unwrap();
    let DestinationConfig::Kafka(kafka) = &config.sink("s").unwrap().destination else {
        panic!("expected a kafka destination");
    };
    assert_eq!(kafka.host_list(), vec!["k1:9092", "k2:9093"]);
    assert_eq!(kafka.topic.as_deref(), Some("cdc.orders"));
    assert_eq!(kafka.sasl_mechanism, Some(SaslMechanism::ScramSha512));
    assert_eq!(kafka.compression, Compression::Lz4);
    assert!(!kafka.tls);
    assert_eq!(
        (
            kafka.delivery.batch_size,
            kafka.delivery.max_in_flight,
            kafka.delivery.request_timeout_ms
        ),
        (200, 10, 30_000)
    );
    assert!(!format!("{kafka:?}").contains("hunter2"));
}

#[test]
fn kafka_mistakes_are_reported_with_their_path_and_fix() {
    let all = errors(&with_sink(
        "    destination: {type: kafka, hosts: 'k1:9092,k2', password: hunter2, tls_ca_file: ca.pem}\n",
    ))
    .join("\n");
    assert!(!all.contains("hunter2"), "{all}");
    for expected in [
        "sinks[0].destination.hosts: \"k2\" is not `host:port`",
        "sinks[0].destination.topic: is required: set `topic`, or give the sink a `routing` function",
        "sinks[0].destination.password: is set without `username`",
        "sinks[0].destination.tls_ca_file: is only used over TLS; set `tls: true` too",
    ] {
        assert!(all.contains(expected), "{expected:?} missing in:\n{all}");
    }
    let all = errors(&with_sink(
        "    destination: {type: kafka, hosts: 'k:9092', topic: 'orders/eu', sasl_mechanism: plain}\n",
    ))
    .join("\n");
    assert!(
        all.contains("sinks[0].destination.topic: topic \"orders/eu\" contains '/'"),
        "{all}"
    );
    assert!(
        all.contains("sinks[0].destination.sasl_mechanism: is set without credentials"),
        "{all}"
    );
    let all = errors(&with_sink(
        "    destination: {type: kafka, hosts: 'k:9092', topic: t, username: u, password: p}\n",
    ))
    .join("\n");
    assert!(
        all.contains("sinks[0].destination.sasl_mechanism: is required with `username`/`password`"),
        "{all}"
    );
    assert!(
        error(&with_sink(
            "    destination: {type: kafka, hosts: 'k:9092', topic: t, compression: brotli}\n"
        ))
        .starts_with("sinks[0].destination.compression: unknown variant `brotli`, expected one of `none`, `gzip`, `snappy`, `lz4`, `zstd`"),
    );
    assert!(
        error(&with_sink(
            "    destination: {type: kafka, hosts: 'k:9092', topic: t, sasl_mechanism: scram}\n"
        ))
        .starts_with("sinks[0].destination.sasl_mechanism: unknown variant `scram`"),
    );
}

#[test]
fn redis_sinks_read_shared_and_own_fields_and_report_mistakes() {
    let config = load(&with_sink(
        "    destination: {type: redis_stream, host: localhost, stream_key: events, password: pw9}\n",
    ))
    .unwrap();
    let DestinationConfig::RedisStream(stream) = &config.sinks[0].destination else {
        panic!("{:?}", config.sinks[0].destination);
    };
    assert_eq!(stream.stream_key, "events");
    assert_eq!(stream.connection.port, 6379);
    assert_eq!(stream.connection.database, 0);
    assert!(!format!("{stream:?}").contains("pw9"));
    assert_eq!(
        error(&with_sink(
            "    destination: {type: redis_string, host: localhost, port: 0}\n"
        )),
        "sinks[0].destination.port: must be between 1 and 65535, got 0 (line 14, column 62)"
    );
    assert!(
        error(&with_sink(
            "    destination: {type: redis_string, host: localhost, stream_key: x}\n"
        ))
        .contains("sinks[0].destination.stream_key: unknown field `stream_key`"),
    );
    assert!(
        error(&with_sink(
            "    destination: {type: redis_stream, host: localhost}\n"
        ))
        .contains("missing field `stream_key`"),
    );
}

#[test]
fn push_sinks_share_delivery_fields_with_their_own_defaults_and_rules() {
    let defaults = |destination: &str| {
        let config = load(&format!(
            "{ENDPOINT}{}",
            with_sink(&format!("    destination: {destination}\n"))
        ))
        .unwrap();
        *config.sinks[0].destination.delivery().unwrap()
    };
    let webhook = defaults("{type: webhook, http_endpoint: hooks}");
    let nats = defaults("{type: nats, host: h}");
    let redis = defaults("{type: redis_string, host: h}");
    assert_eq!(
        [webhook, nats, redis].map(|d| (d.batch_size, d.max_in_flight, d.request_timeout_ms)),
        [(1, 10, 30_000), (100, 10, 5_000), (10, 10, 15_000)]
    );
    assert!(
        [webhook, nats, redis]
            .iter()
            .all(|d| (d.retry_backoff_base_ms, d.retry_backoff_max_ms) == (1_000, 600_000))
    );
    let set = defaults(
        "{type: redis_stream, host: h, stream_key: s, batch_size: 7, max_in_flight: 2, request_timeout_ms: 900, retry_backoff_base_ms: 5, retry_backoff_max_ms: 50}",
    );
    assert_eq!(
        set,
        DeliveryConfig {
            batch_size: 7,
            max_in_flight: 2,
            request_timeout_ms: 900,
            retry_backoff_base_ms: 5,
            retry_backoff_max_ms: 50,
        }
    );
    assert!(
        load(&with_sink("    destination: {type: sequin_stream}\n"))
            .unwrap()
            .sinks[0]
            .destination
            .delivery()
            .is_none()
    );
    // The cap rule and the bounds hold for every push kind alike.
    assert!(
        error(&with_sink(
            "    destination: {type: redis_string, host: h, retry_backoff_base_ms: 500, retry_backoff_max_ms: 100}\n"
        ))
        .starts_with("sinks[0].destination.retry_backoff_max_ms: 100 is below retry_backoff_base_ms (500)")
    );
    assert!(
        error(&with_sink(
            "    destination: {type: nats, host: h, max_in_flight: 0}\n"
        ))
        .starts_with("sinks[0].destination.max_in_flight: must be between 1 and 1000, got 0")
    );
    // A typo names the kind's own fields and the shared ones.
    let typo = error(&with_sink(
        "    destination: {type: nats, host: h, batch_sise: 5}\n",
    ));
    assert!(
        typo.contains("unknown field `batch_sise`")
            && typo.contains("or a delivery field: `batch_size`, `max_in_flight`"),
        "{typo}"
    );
}

#[test]
fn load_shedding_defaults_to_pause_and_discarding_needs_a_bound() {
    let config = load(&with_sink("    destination: {type: sequin_stream}\n")).unwrap();
    assert_eq!(config.sinks[0].max_backlog_messages, None);
    assert_eq!(
        config.sinks[0].load_shedding_policy,
        LoadSheddingPolicy::PauseOnFull
    );
    let bounded = load(&with_sink(
        "    max_backlog_messages: 500\n    load_shedding_policy: discard_on_full\n    destination: {type: sequin_stream}\n",
    ))
    .unwrap();
    assert_eq!(bounded.sinks[0].max_backlog_messages, Some(500));
    assert_eq!(
        bounded.sinks[0].load_shedding_policy,
        LoadSheddingPolicy::DiscardOnFull
    );
    assert!(
        error(&with_sink(
            "    load_shedding_policy: discard_on_full\n    destination: {type: sequin_stream}\n"
        ))
        .starts_with("sinks[0].load_shedding_policy: discard_on_full needs `max_backlog_messages`"),
    );
    assert!(
        error(&with_sink(
            "    load_shedding_policy: drop\n    destination: {type: sequin_stream}\n"
        ))
        .contains("unknown variant `drop`"),
    );
}

#[test]
fn truncate_defaults_to_skip_and_names_its_values() {
    let config = load(&with_sink("    destination: {type: sequin_stream}\n")).unwrap();
    assert_eq!(config.sinks[0].truncate, TruncatePolicy::Skip);
    let deliver = load(&with_sink(
        "    truncate: deliver\n    destination: {type: sequin_stream}\n",
    ))
    .unwrap();
    assert_eq!(deliver.sinks[0].truncate, TruncatePolicy::Deliver);
    assert_eq!(
        error(&with_sink(
            "    truncate: cascade\n    destination: {type: sequin_stream}\n"
        )),
        "sinks[0].truncate: unknown variant `cascade`, expected `skip` or `deliver` (line 14, column 15)"
    );
    let redis = error(&with_sink(
        "    truncate: deliver\n    destination: {type: redis_string, host: localhost}\n",
    ));
    assert!(
        redis.starts_with("sinks[0].truncate: deliver is not possible on a redis_string sink"),
        "{redis}"
    );
    assert!(
        load(&with_sink(
            "    truncate: deliver\n    destination: {type: redis_stream, host: localhost, stream_key: k}\n",
        ))
        .is_ok()
    );
}

const WEBHOOK_SOURCES: &str = "\
webhook_sources:
  - name: orders_in
    auth: {bearer_token: \"${HOOK_TOKEN:-dev-token}\"}
  - name: signed
    auth: {hmac_secret: sekrit-1}
    max_body_bytes: 2048
    idempotency_key_retention_ms: 60000
";

#[test]
fn webhook_sources_resolve_and_sinks_take_them_instead_of_a_database() {
    let text = format!(
        "{WEBHOOK_SOURCES}{FUNCTIONS}sinks:\n  - name: hooked\n    source: {{webhook: orders_in}}\n    transform: up\n    destination: {{type: sequin_stream}}\n"
    );
    let dir = fixture_dir();
    let config = Config::from_yaml(&text, dir.path(), &|name| {
        (name == "HOOK_TOKEN").then(|| "t0k3n".into())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let orders = config.webhook_source("orders_in").expect("orders_in");
    assert_eq!(orders.auth, WebhookAuth::BearerToken("t0k3n".into()));
    assert_eq!(orders.max_body_bytes, DEFAULT_MAX_BODY_BYTES);
    assert_eq!(
        orders.idempotency_key_retention_ms,
        DEFAULT_IDEMPOTENCY_KEY_RETENTION_MS
    );
    let signed = config.webhook_source("signed").expect("signed");
    assert_eq!(signed.auth, WebhookAuth::HmacSecret("sekrit-1".into()));
    assert_eq!(signed.max_body_bytes, 2048);
    let debug = format!("{config:?}");
    assert!(
        !debug.contains("t0k3n") && !debug.contains("sekrit-1"),
        "{debug}"
    );
    let sink = config.sink("hooked").expect("hooked");
    assert_eq!(sink.database, None);
    assert_eq!(
        sink.database_name(),
        weft_core::message::WEBHOOK_DATABASE_NAME
    );
    assert_eq!(config.sinks_of_webhook("orders_in").count(), 1);
    assert_eq!(config.sinks_of_webhook("signed").count(), 0);
    assert!(!sink.source.includes("webhook", "orders_in"));
}

#[test]
fn webhook_source_mistakes_are_all_reported_without_secrets() {
    let auth = |auth: &str| {
        error(&format!(
            "webhook_sources:\n  - name: w\n    auth: {auth}\n"
        ))
    };
    let both = auth("{bearer_token: t0k3n, hmac_secret: sekrit}");
    assert!(
        both.starts_with(
            "webhook_sources[0].auth: set either `bearer_token` or `hmac_secret`, not both"
        ),
        "{both}"
    );
    assert!(
        !both.contains("t0k3n") && !both.contains("sekrit"),
        "{both}"
    );
    assert!(auth("{}").contains("set `bearer_token`"));
    assert!(auth("{bearer_token: \"\"}").contains("must not be empty"));
    assert!(auth("{token: x}").contains("unknown field `token`"));
    let text = format!("{DATABASE}{WEBHOOK_SOURCES}webhook_sources_typo: 1\n");
    assert!(errors(&text)[0].contains("unknown field `webhook_sources_typo`"));
    let text = format!(
        "{DATABASE}{WEBHOOK_SOURCES}  - name: signed\n    auth: {{hmac_secret: x}}\n    max_body_bytes: 0\n"
    );
    assert!(
        error(&text)
            .contains("webhook_sources[2].max_body_bytes: must be between 1 and 67108864, got 0"),
        "{}",
        error(&text)
    );
    let sinks = "sinks:
  - name: both
    database: main
    source: {webhook: orders_in, include_tables: [public.orders]}
    actions: [update]
    initial_backfill: true
    destination: {type: sequin_stream}
  - name: nowhere
    source: {webhook: nope}
    destination: {type: sequin_stream}
";
    let text = format!("{DATABASE}{WEBHOOK_SOURCES}{sinks}");
    let lines = Config::from_yaml(&text, fixture_dir().path(), &|_| Some("t".into()))
        .unwrap_err()
        .to_string();
    for expected in [
        "sinks[0].database: a sink takes a database's changes or a webhook source's messages, not both",
        "sinks[0].source.include_tables: selects tables, but this sink takes a webhook source",
        "sinks[0].actions: webhook messages are all inserts",
        "sinks[0].initial_backfill: a webhook source has no tables to backfill",
        "sinks[1].source.webhook: no webhook source named \"nope\"; defined webhook_sources: [\"orders_in\", \"signed\"]",
    ] {
        assert!(lines.contains(expected), "no {expected:?} in:\n{lines}");
    }
    assert_eq!(lines.lines().count(), 5, "{lines}");
    let text = format!("{WEBHOOK_SOURCES}  - name: signed\n    auth: {{hmac_secret: y}}\n");
    assert!(
        Config::from_yaml(&text, fixture_dir().path(), &|_| Some("t".into()))
            .unwrap_err()
            .to_string()
            .contains("duplicate webhook source name \"signed\"")
    );
}

#[test]
fn an_enrichment_that_queries_the_database_cannot_serve_a_webhook_sink() {
    let text = format!(
        "{WEBHOOK_SOURCES}functions:\n  - name: names\n    type: enrichment\n    file: up.wasm\n    grants: {{source_query: true}}\nsinks:\n  - name: hooked\n    source: {{webhook: orders_in}}\n    enrichment: names\n    destination: {{type: sequin_stream}}\n"
    );
    let message = Config::from_yaml(&text, fixture_dir().path(), &|_| Some("t".into()))
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("sinks[0].enrichment: function \"names\" is granted `source_query`"),
        "{message}"
    );
}

#[test]
fn postgres_sinks_take_a_databases_entry_and_their_defaults() {
    let config = load(&with_sink(
        "    source: {include_tables: [public.orders]}\n    destination: {type: postgres, database: main, mode: append}\n",
    ))
    .unwrap();
    let DestinationConfig::Postgres(postgres) = &config.sink("s").unwrap().destination else {
        panic!("a postgres destination");
    };
    assert_eq!(postgres.mode, PostgresMode::Append);
    assert_eq!(postgres.table, None);
    assert!(!postgres.create_table);
    assert_eq!(
        (
            postgres.delivery.batch_size,
            postgres.delivery.max_in_flight
        ),
        (1000, 1)
    );
    let missing = error(&with_sink(
        "    source: {include_tables: [public.orders]}\n    destination: {type: postgres, database: warehouse, table: public.copy}\n",
    ));
    assert!(
        missing.contains("sinks[0].destination.database: no database named \"warehouse\""),
        "{missing}"
    );
    let bad_table = error(&with_sink(
        "    source: {include_tables: [public.orders]}\n    destination: {type: postgres, database: main, table: copy}\n",
    ));
    assert!(bad_table.contains("schema-qualified"), "{bad_table}");
}

const RETENTION: &str = "\
change_retentions:
  - name: orders-log
    source_database: main
    source_table_name: orders
    destination_database: main
    actions: [insert, delete]
    filters: [{column_name: status, operator: \"=\", comparison_value: paid}]
    retain_for: 7d
";

#[test]
fn a_change_retention_runs_as_an_append_sink_of_its_name() {
    let config = load(&format!("{DATABASE}{RETENTION}")).unwrap();
    assert_eq!(config.change_retentions.len(), 1);
    let sink = config.sink("orders-log").expect("the retention's sink");
    assert_eq!(sink.database.as_deref(), Some("main"));
    assert!(sink.accepts("public", "orders", Action::Insert));
    assert!(!sink.accepts("public", "orders", Action::Update));
    assert!(!sink.accepts("public", "other", Action::Insert));
    assert_eq!(sink.column_filters.len(), 1);
    let DestinationConfig::Postgres(postgres) = &sink.destination else {
        panic!("a postgres destination");
    };
    assert_eq!(postgres.mode, PostgresMode::Append);
    assert_eq!(
        postgres.table.as_ref().unwrap().to_string(),
        "public.weft_events"
    );
    assert!(postgres.create_table);
}

#[test]
fn change_retention_mistakes_are_named() {
    let clash = format!(
        "{DATABASE}{FUNCTIONS}{}sinks:\n  - name: orders-log\n    database: main\n    destination: {{type: sequin_stream}}\n",
        RETENTION.replace("filters: [", "filter: up\n    filters: [")
    );
    let lines = errors(&clash);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("change_retentions[0].name: a sink is named \"orders-log\" too")),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("change_retentions[0].filter: function \"up\" has type transform")),
        "{lines:#?}"
    );
    let unknown = error(&format!(
        "{DATABASE}{}",
        RETENTION.replace(
            "destination_database: main",
            "destination_database: archive"
        )
    ));
    assert!(
        unknown
            .contains("change_retentions[0].destination_database: no database named \"archive\""),
        "{unknown}"
    );
    let itself = error(&format!(
        "{DATABASE}{}",
        RETENTION.replace(
            "destination_database: main",
            "destination_database: main\n    destination_table_name: orders"
        )
    ));
    assert!(itself.contains("is the source table itself"), "{itself}");
}

#[test]
fn a_postgres_sink_may_not_write_into_a_table_it_reads() {
    let mirror = error(&with_sink(
        "    destination: {type: postgres, database: main}\n",
    ));
    assert!(mirror.contains("needs `table`"), "{mirror}");
    let append = error(&with_sink(
        "    destination: {type: postgres, database: main, mode: append}\n",
    ));
    assert!(
        append.contains("public.weft_events is one of the tables this sink reads"),
        "{append}"
    );
    load(&with_sink(
        "    source: {include_tables: [public.orders]}\n    destination: {type: postgres, database: main, mode: append}\n",
    ))
    .expect("an event table the sink does not read");
}

#[test]
fn api_tokens_are_named_and_long_enough() {
    let config = load("api_tokens:\n  - {name: ci, token: 0123456789abcdef0123}\n").unwrap();
    assert_eq!(config.api_tokens[0].name, "ci");
    assert!(!format!("{:?}", config.api_tokens).contains("0123456789"));
    let short = error("api_tokens:\n  - {name: ci, token: secret}\n");
    assert!(
        short.starts_with("api_tokens[0].token: is 6 characters long, too short"),
        "{short}"
    );
    let twice = error(
        "api_tokens:\n  - {name: ci, token: 0123456789abcdef0123}\n  - {name: ci, token: 0123456789abcdef0124}\n",
    );
    assert!(twice.contains("duplicate API token name \"ci\""), "{twice}");
}

#[test]
fn an_api_token_may_be_kept_as_its_sha256_only() {
    // printf %s 0123456789abcdef0123 | sha256sum
    let hash = "1bd8fd47297046f993e608e398d5905b00a33e163c6b1172dd38887fed05ed6a";
    let stored = api_token::ApiTokenConfig::sha256_hex("0123456789abcdef0123");
    assert_eq!(stored, hash);
    let upper = hash.to_ascii_uppercase();
    let config = load(&format!(
        "api_tokens:\n  - {{name: ci, token_sha256: {upper}}}\n"
    ))
    .unwrap();
    assert!(config.api_tokens[0].matches("0123456789abcdef0123"));
    assert!(!config.api_tokens[0].matches("0123456789abcdef0124"));
    assert!(
        !config.api_tokens[0].matches(&stored),
        "the hash is not the token"
    );

    let both = error(&format!(
        "api_tokens:\n  - {{name: ci, token: 0123456789abcdef0123, token_sha256: {hash}}}\n"
    ));
    assert!(
        both.starts_with("api_tokens[0].token: give `token` or `token_sha256`, not both"),
        "{both}"
    );
    let neither = error("api_tokens:\n  - {name: ci}\n");
    assert!(
        neither.starts_with("api_tokens[0].token: is missing; give the secret as `token`"),
        "{neither}"
    );
    let bad = error("api_tokens:\n  - {name: ci, token_sha256: abc}\n");
    assert!(
        bad.starts_with("api_tokens[0].token_sha256: must be 64 hex digits"),
        "{bad}"
    );
}

#[test]
fn a_function_names_a_file_or_a_registered_plugin_but_not_both() {
    let registered = load(&FUNCTIONS.replace("file: up.wasm", "plugin: up@1.2.0")).unwrap();
    let function = &registered.functions[0];
    assert_eq!(function.plugin.as_ref().unwrap().to_string(), "up@1.2.0");
    assert!(
        function.file.as_os_str().is_empty(),
        "resolved by the server"
    );
    assert!(
        error(&FUNCTIONS.replace("file: up.wasm", "file: up.wasm\n    plugin: up@1"))
            .starts_with("functions[0].plugin: give either `file`"),
    );
    assert!(
        error(&FUNCTIONS.replace("    file: up.wasm\n", ""))
            .starts_with("functions[0].file: is missing"),
    );
    assert!(error(&FUNCTIONS.replace("file: up.wasm", "plugin: up")).contains("name@version"));
    let policy =
        load("plugin_registry: {allow_capabilities: [source_query], max_component_mb: 8}\n")
            .unwrap()
            .plugin_registry;
    assert_eq!(policy.allowed_imports(), ["weft:plugin/source-query@0.2.0"]);
    assert_eq!(policy.max_component_bytes(), 8 << 20);
    assert!(error("plugin_registry: {allow_capabilities: [sockets]}\n").contains("source_query"));
}

#[test]
fn an_accounts_cpu_share_is_a_percent_of_one_core() {
    let config = load("accounts:\n  - {name: a, limits: {plugin_cpu_percent: 50}}\n").unwrap();
    assert_eq!(config.accounts[0].limits.plugin_cpu_percent, Some(50));
    assert!(
        error("accounts:\n  - {name: a, limits: {plugin_cpu_percent: 0}}\n")
            .starts_with("accounts[0].limits.plugin_cpu_percent:")
    );
}

#[test]
fn deny_internal_http_refuses_http_targets_written_as_internal_addresses() {
    let config = |deny: &str, endpoint: &str, grant: &str| {
        format!(
            "accounts:\n  - {{name: a, allow_capabilities: [outbound_http]{deny}}}\n\
             databases:\n  - {{name: db-a, account: a, url: postgres://10.0.0.9/x, slot: {{name: sa}}, publication: {{name: pa}}}}\n\
             http_endpoints:\n  - {{name: hook, account: a, url: \"{endpoint}\"}}\n\
             functions:\n  - {{name: look, account: a, type: enrichment, file: up.wasm, grants: {{http: {{allow_hosts: [{grant}]}}}}}}\n\
             sinks:\n  - {{name: s, account: a, database: db-a, destination: {{type: webhook, http_endpoint: hook}}}}\n"
        )
    };
    let deny = ", deny_internal_http: true";
    // Names and public addresses pass (names are checked when resolved);
    // so does a database at a private address: the setting is about HTTP.
    let fine = load(&config(
        deny,
        "https://hooks.acme/in",
        "api.acme, \"8.8.8.8:443\"",
    ))
    .unwrap();
    assert!(fine.accounts[0].deny_internal_http);
    // Without the setting, internal addresses are allowed.
    let open = load(&config("", "http://169.254.169.254/", "\"[::1]:80\"")).unwrap();
    assert!(!open.accounts[0].deny_internal_http);

    let refused = errors(&config(
        deny,
        "http://169.254.169.254/latest",
        "api.acme, \"[::1]:80\", 10.1.2.3",
    ));
    let has = |prefix: &str| refused.iter().any(|e| e.starts_with(prefix));
    assert!(
        has(
            "http_endpoints[0].url: `169.254.169.254` is an internal address, and account \"a\" sets `deny_internal_http: true`"
        ),
        "{refused:#?}"
    );
    assert!(
        has("functions[0].grants.http.allow_hosts[1]: `::1` is an internal address"),
        "{refused:#?}"
    );
    assert!(
        has("functions[0].grants.http.allow_hosts[2]: `10.1.2.3` is an internal address"),
        "{refused:#?}"
    );
    assert_eq!(refused.len(), 3, "{refused:#?}");
}

#[test]
fn an_accounts_allow_hosts_bounds_every_connection_of_its_resources() {
    let config = |allow: &str, database: &str, endpoint: &str, destination: &str, grant: &str| {
        format!(
            "accounts:\n  - {{name: a{allow}}}\n\
             databases:\n  - {{name: db-a, account: a, {database}, slot: {{name: sa}}, publication: {{name: pa}}}}\n\
             http_endpoints:\n  - {{name: hook, account: a, url: \"{endpoint}\"}}\n\
             functions:\n  - {{name: look, account: a, type: enrichment, file: up.wasm{grant}}}\n\
             sinks:\n  - {{name: s, account: a, database: db-a, destination: {destination}}}\n"
        )
    };
    let allow = ", allow_capabilities: [outbound_http], allow_hosts: [db.acme, \"Hooks.Acme:8443\", \"kafka.acme:9092\", api.acme]";
    let fine = load(&config(
        allow,
        "hostname: DB.acme, port: 6543, database: x",
        "https://hooks.acme:8443/in",
        "{type: kafka, hosts: \"kafka.acme:9092\", topic: t}",
        ", grants: {http: {allow_hosts: [\"api.acme:443\"]}}",
    ))
    .unwrap();
    assert_eq!(fine.accounts[0].allow_hosts.as_ref().unwrap().len(), 4);
    // Without allow_hosts, any host.
    load(&config(
        ", allow_capabilities: [outbound_http]",
        "url: postgres://10.0.0.9/x",
        "http://169.254.169.254/",
        "{type: redis_string, host: 10.0.0.7}",
        ", grants: {http: {allow_hosts: [anywhere.example]}}",
    ))
    .unwrap();

    let refused = errors(&config(
        allow,
        "url: postgres://10.0.0.9/x",
        "https://hooks.acme/in",
        "{type: kafka, hosts: \"kafka.acme:9092,kafka.other:9092\", topic: t}",
        ", grants: {http: {allow_hosts: [anywhere.example, api.acme]}}",
    ));
    let has = |prefix: &str| refused.iter().any(|e| e.starts_with(prefix));
    assert!(
        has("databases[0]: `10.0.0.9:5432` is not in account \"a\"'s allow_hosts"),
        "{refused:#?}"
    );
    assert!(
        has("http_endpoints[0].url: `hooks.acme:443` is not in account \"a\"'s allow_hosts"),
        "{refused:#?}"
    );
    assert!(
        has("sinks[0].destination.hosts: `kafka.other:9092` is not in"),
        "{refused:#?}"
    );
    assert!(
        has("functions[0].grants.http.allow_hosts[0]: `anywhere.example` is not in"),
        "{refused:#?}"
    );
    assert_eq!(refused.len(), 4, "{refused:#?}");

    for (destination, shown) in [
        (
            "{type: nats, host: nats.other}",
            "sinks[0].destination.host: `nats.other:4222`",
        ),
        (
            "{type: redis_stream, host: \"::1\", stream_key: k}",
            "sinks[0].destination.host: `[::1]:6379`",
        ),
        (
            "{type: rabbitmq, host: mq.other, exchange: x}",
            "sinks[0].destination.host: `mq.other:5672`",
        ),
    ] {
        let refused = errors(&config(
            allow,
            "hostname: db.acme, database: x",
            "https://hooks.acme:8443/",
            destination,
            "",
        ));
        assert!(refused.iter().any(|e| e.starts_with(shown)), "{refused:#?}");
    }
    let socket = errors(&config(
        allow,
        "hostname: /var/run/postgresql, database: x",
        "https://hooks.acme:8443/",
        "{type: sequin_stream}",
        "",
    ));
    assert!(
        socket
            .iter()
            .any(|e| e.starts_with("databases[0]: cannot be checked") && e.contains("Unix socket")),
        "{socket:#?}"
    );
    let bad = errors(&config(
        ", allow_hosts: [\"https://x/\"]",
        "hostname: db.acme, database: x",
        "https://hooks.acme/",
        "{type: sequin_stream}",
        "",
    ));
    assert!(
        bad.iter()
            .any(|e| e.starts_with("accounts[0].allow_hosts[0]: `https://x/` is not a host")),
        "{bad:#?}"
    );
    assert!(
        error("accounts:\n  - {name: a, allow_hosts: []}\n")
            .starts_with("accounts[0].allow_hosts: is empty")
    );
}

#[test]
fn accounts_keep_their_resources_apart_and_within_their_limits() {
    let base = "accounts:\n  - {name: a, limits: {max_sinks: 1, plugin_memory_mb: 64, plugin_timeout_ms: 1000}}\n  - {name: b}\n\
                databases:\n  - {name: db-a, account: a, url: postgres://h/x, slot: {name: sa}, publication: {name: pa}}\n\
                functions:\n  - {name: up, account: a, type: transform, file: up.wasm}\n";
    let sink = |name: &str, account: &str| {
        format!(
            "  - {{name: {name}, account: {account}, database: db-a, transform: up, destination: {{type: sequin_stream}}}}\n"
        )
    };
    let ok = load(&format!("{base}sinks:\n{}", sink("s", "a"))).unwrap();
    assert_eq!(ok.sinks[0].account.as_deref(), Some("a"));

    let crossed = errors(&format!("{base}sinks:\n{}", sink("s", "b")));
    assert!(
        crossed.iter().any(|e| e.starts_with("sinks[0].account: the sink belongs to account \"b\" but uses database \"db-a\" of account \"a\"")),
        "{crossed:#?}"
    );
    assert!(
        crossed
            .iter()
            .any(|e| e.contains("uses function \"up\" of account \"a\"")),
        "{crossed:#?}"
    );
    assert!(
        error(&format!("{base}sinks:\n{}", sink("s", "c")))
            .starts_with("sinks[0].account: no account named \"c\""),
    );
    let over = errors(&format!(
        "{base}sinks:\n{}{}",
        sink("s", "a"),
        sink("t", "a")
    ));
    assert!(
        over.iter()
            .any(|e| e.starts_with("accounts[0].limits.max_sinks: account \"a\" has 2 sinks")),
        "{over:#?}"
    );
    let greedy = errors(&base.replace("type: transform", "type: enrichment").replace(
        "file: up.wasm}",
        "file: up.wasm, limits: {memory_mb: 128, timeout_ms: 5000}, grants: {source_query: true}}",
    ));
    assert!(
        greedy.iter().any(|e| e.starts_with(
            "functions[0].limits.memory_mb: 128 MiB is more than account \"a\" allows"
        )),
        "{greedy:#?}"
    );
    assert!(
        greedy
            .iter()
            .any(|e| e.starts_with("functions[0].limits.timeout_ms: 5000 ms")),
        "{greedy:#?}"
    );
    assert!(
        greedy.iter().any(|e| e.starts_with(
            "functions[0].grants.source_query: account \"a\" may not grant source_query"
        )),
        "{greedy:#?}"
    );
    assert!(
        error("api_tokens:\n  - {name: t, token: 0123456789abcdefgh, account: zz}\n")
            .starts_with("api_tokens[0].account: no account named \"zz\"")
    );
}
