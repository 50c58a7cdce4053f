//! The second pass: checks that span fields or entries (connection form,
//! destinations per type, names and references), collecting every problem
//! instead of stopping at the first.

use std::collections::HashMap;
use std::path::Path;

use serde_yaml_ng::Value;

use super::change_retention::ChangeRetentionConfig;
use super::destination::{self, Destination, Entries, Reference};
use super::document::{DatabaseDoc, Document};
use super::http_endpoint::HttpEndpointConfig;
use super::model::{
    DatabaseConfig, FunctionConfig, FunctionKind, LoadSheddingPolicy, PgConnection, SinkConfig,
};
use super::path::DocPath;
use super::plugin_registry::Capability;
use super::{Config, pg_url};

/// One problem found by the second pass.
pub(crate) struct Problem {
    pub(crate) path: DocPath,
    pub(crate) message: String,
}

#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn add(&mut self, path: DocPath, message: impl Into<String>) {
        self.0.push(Problem {
            path,
            message: message.into(),
        });
    }
}

/// Turns the parsed document into a [`Config`], or returns every problem.
pub(crate) fn resolve<D: Destination>(
    document: Document,
    base_dir: &Path,
) -> Result<Config<D>, Vec<Problem>> {
    let mut problems = Problems::default();
    let root = DocPath::root();

    // Sinks are checked against every database entry, including one whose
    // connection is wrong, so that one mistake is not reported twice.
    let database_names: Vec<String> = document.databases.iter().map(|d| d.name.clone()).collect();
    let databases = resolve_databases(document.databases, &root.key("databases"), &mut problems);
    let functions = resolve_functions(
        document.functions,
        base_dir,
        &root.key("functions"),
        &mut problems,
    );
    let http_endpoints = document.http_endpoints;
    check_http_endpoints(&http_endpoints, &root.key("http_endpoints"), &mut problems);
    let webhook_sources = document.webhook_sources;
    check_unique_names(
        webhook_sources.iter().map(|w| w.name.as_str()),
        "webhook source",
        &root.key("webhook_sources"),
        &mut problems,
    );
    let webhook_names: Vec<String> = webhook_sources.iter().map(|w| w.name.clone()).collect();
    let sinks = resolve_sinks(
        document.sinks,
        &Sources {
            databases: &database_names,
            webhooks: &webhook_names,
        },
        &functions,
        &root.key("sinks"),
        &mut problems,
    );
    let change_retentions = document.change_retentions;
    check_change_retentions(
        &change_retentions,
        &sinks,
        &database_names,
        &functions,
        &root.key("change_retentions"),
        &mut problems,
    );
    check_push_settings(
        &sinks,
        &http_endpoints,
        &database_names,
        &root.key("sinks"),
        &mut problems,
    );
    let mut sinks = sinks;
    for (i, retention) in change_retentions.iter().enumerate() {
        match retention.sink() {
            Some(sink) => sinks.push(sink),
            None => problems.add(
                root.key("change_retentions").index(i),
                "a change retention writes through the postgres sink, which this build of weft leaves out; build weft with its `postgres` feature",
            ),
        }
    }
    let api_tokens = document.api_tokens;
    check_unique_names(
        api_tokens.iter().map(|t| t.name.as_str()),
        "API token",
        &root.key("api_tokens"),
        &mut problems,
    );
    for (i, token) in api_tokens.iter().enumerate() {
        if let Some((key, problem)) = token.problem() {
            problems.add(root.key("api_tokens").index(i).key(key), problem);
        }
    }

    let config = Config {
        databases,
        functions,
        sinks,
        http_endpoints,
        webhook_sources,
        change_retentions,
        api_tokens,
        plugin_registry: document.plugin_registry,
        accounts: document.accounts,
    };
    check_accounts(&config, &root, &mut problems);
    if problems.0.is_empty() {
        Ok(config)
    } else {
        Err(problems.0)
    }
}

/// Checks `accounts:` and each resource's `account`: known accounts, a
/// sink only using resources of its own account (a tenant never reads
/// another's database or runs another's function), and each account's
/// limits.
fn check_accounts<D: Destination>(config: &Config<D>, root: &DocPath, problems: &mut Problems) {
    check_unique_names(
        config.accounts.iter().map(|a| a.name.as_str()),
        "account",
        &root.key("accounts"),
        problems,
    );
    let known = |account: &Option<String>| {
        account
            .as_ref()
            .is_none_or(|name| config.accounts.iter().any(|a| &a.name == name))
    };
    let unknown = |name: &Option<String>| {
        format!(
            "no account named {:?}; add it under `accounts:` or remove `account`",
            name.as_deref().unwrap_or_default()
        )
    };
    let owners: [(&str, Vec<&Option<String>>); 6] = [
        (
            "databases",
            config.databases.iter().map(|d| &d.account).collect(),
        ),
        (
            "functions",
            config.functions.iter().map(|f| &f.account).collect(),
        ),
        (
            "http_endpoints",
            config.http_endpoints.iter().map(|e| &e.account).collect(),
        ),
        (
            "webhook_sources",
            config.webhook_sources.iter().map(|w| &w.account).collect(),
        ),
        ("sinks", config.sinks.iter().map(|s| &s.account).collect()),
        (
            "api_tokens",
            config.api_tokens.iter().map(|t| &t.account).collect(),
        ),
    ];
    for (section, accounts) in &owners {
        for (i, account) in accounts.iter().enumerate() {
            if !known(account) {
                problems.add(root.key(section).index(i).key("account"), unknown(account));
            }
        }
    }

    let shown = |account: &Option<String>| match account {
        Some(name) => format!("account {name:?}"),
        None => "no account (the operator's)".to_string(),
    };
    for (i, sink) in config.sinks.iter().enumerate() {
        if !known(&sink.account) {
            continue; // reported above
        }
        let at = root.key("sinks").index(i);
        let mut uses: Vec<(String, &Option<String>)> = Vec::new();
        if let Some(database) = sink.database.as_deref().and_then(|d| config.database(d)) {
            uses.push((format!("database {:?}", database.name), &database.account));
        }
        if let Some(source) = sink
            .source
            .webhook
            .as_deref()
            .and_then(|w| config.webhook_sources.iter().find(|s| s.name == w))
        {
            uses.push((format!("webhook source {:?}", source.name), &source.account));
        }
        for kind in FunctionKind::ALL {
            if let Some(function) = sink.function(kind).and_then(|f| config.function(f)) {
                uses.push((format!("function {:?}", function.name), &function.account));
            }
        }
        for reference in sink.destination.references() {
            match reference {
                Reference::HttpEndpoint(name) => {
                    if let Some(endpoint) = config.http_endpoint(&name) {
                        uses.push((
                            format!("http endpoint {:?}", endpoint.name),
                            &endpoint.account,
                        ));
                    }
                }
                Reference::Database(name) => {
                    if let Some(database) = config.database(&name) {
                        uses.push((format!("database {:?}", database.name), &database.account));
                    }
                }
            }
        }
        for (what, account) in uses {
            if *account != sink.account {
                problems.add(
                    at.key("account"),
                    format!(
                        "the sink belongs to {} but uses {what} of {}; a sink may only use its own account's resources",
                        shown(&sink.account),
                        shown(account)
                    ),
                );
            }
        }
    }

    for (a, account) in config.accounts.iter().enumerate() {
        let at = root.key("accounts").index(a);
        if let Some(hosts) = &account.allow_hosts {
            check_host_list(
                hosts,
                &at.key("allow_hosts"),
                "is empty: list the hosts the account's resources may connect to, e.g. `[db.acme.internal, \"kafka.acme.internal:9092\"]`, or remove `allow_hosts` to allow any host",
                problems,
            );
        }
        for (path, reason) in super::egress::refused_connections(config, account, root)
            .into_iter()
            .chain(super::egress::internal_http_targets(config, account, root))
        {
            problems.add(path, reason);
        }
        let owned = |owner: &Option<String>| owner.as_deref() == Some(account.name.as_str());
        let sinks: Vec<&SinkConfig<D>> =
            config.sinks.iter().filter(|s| owned(&s.account)).collect();
        let limits = &account.limits;
        if let Some(max) = limits.max_sinks
            && sinks.len() > max as usize
        {
            problems.add(
                at.key("limits").key("max_sinks"),
                format!("account {:?} has {} sinks, more than its max_sinks {max}; remove sinks or raise the limit", account.name, sinks.len()),
            );
        }
        let instances: usize = sinks.iter().map(|s| s.function_count()).sum();
        if let Some(max) = limits.max_plugin_instances
            && instances > max as usize
        {
            problems.add(
                at.key("limits").key("max_plugin_instances"),
                format!("account {:?}'s sinks use {instances} function instances (`function_instances` per function per sink), more than its max_plugin_instances {max}", account.name),
            );
        }
        for (i, function) in config.functions.iter().enumerate() {
            if !owned(&function.account) {
                continue;
            }
            let at = root.key("functions").index(i);
            if let Some(max) = limits.plugin_memory_mb
                && function.limits.memory_mb > max
            {
                problems.add(
                    at.key("limits").key("memory_mb"),
                    format!("{} MiB is more than account {:?} allows its functions (plugin_memory_mb {max})", function.limits.memory_mb, account.name),
                );
            }
            if let Some(max) = limits.plugin_timeout_ms
                && function.limits.timeout_ms > max
            {
                problems.add(
                    at.key("limits").key("timeout_ms"),
                    format!("{} ms is more than account {:?} allows its functions (plugin_timeout_ms {max})", function.limits.timeout_ms, account.name),
                );
            }
            let allowed = |capability| account.allow_capabilities.contains(&capability);
            if function.grants.source_query && !allowed(Capability::SourceQuery) {
                problems.add(
                    at.key("grants").key("source_query"),
                    format!("account {:?} may not grant source_query; add it to the account's allow_capabilities", account.name),
                );
            }
            if function.grants.http.is_some() && !allowed(Capability::OutboundHttp) {
                problems.add(
                    at.key("grants").key("http"),
                    format!("account {:?} may not grant outbound HTTP; add outbound_http to the account's allow_capabilities", account.name),
                );
            }
        }
    }
}

/// Reports an `allow_hosts` list at `path` that is empty (with `if_empty`)
/// or holds an entry that is not `host` or `host:port`.
fn check_host_list(hosts: &[String], path: &DocPath, if_empty: &str, problems: &mut Problems) {
    if hosts.is_empty() {
        problems.add(path.clone(), if_empty);
    }
    for (j, entry) in hosts.iter().enumerate() {
        if let Err(reason) = crate::hosts::AllowedHost::parse(entry) {
            problems.add(path.index(j), reason.to_string());
        }
    }
}

/// Reports entries whose name an earlier entry already has.
fn check_unique_names<'a>(
    names: impl Iterator<Item = &'a str>,
    what: &str,
    list: &DocPath,
    problems: &mut Problems,
) {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, name) in names.enumerate() {
        if let Some(&first) = seen.get(name) {
            problems.add(
                list.index(i).key("name"),
                format!("duplicate {what} name {name:?} ({list}[{first}] has it too); names must be unique"),
            );
        } else {
            seen.insert(name, i);
        }
    }
}

fn resolve_databases(
    docs: Vec<DatabaseDoc>,
    list: &DocPath,
    problems: &mut Problems,
) -> Vec<DatabaseConfig> {
    check_unique_names(
        docs.iter().map(|d| d.name.as_str()),
        "database",
        list,
        problems,
    );
    let mut databases: Vec<DatabaseConfig> = Vec::with_capacity(docs.len());
    let mut slot_owner: HashMap<(String, u16, String, String), usize> = HashMap::new();
    for (i, doc) in docs.into_iter().enumerate() {
        let path = list.index(i);
        let Some(connection) = resolve_connection(&doc, &path, problems) else {
            continue;
        };
        let key = (
            connection.host.clone(),
            connection.port,
            connection.database.clone(),
            doc.slot.name.clone(),
        );
        if let Some(first) = slot_owner.get(&key) {
            problems.add(
                path.key("slot").key("name"),
                format!(
                    "slot {:?} on {}:{}/{} is already used by {list}[{first}]; \
                     a slot streams to one consumer, give each database entry its own slot",
                    doc.slot.name, connection.host, connection.port, connection.database
                ),
            );
        } else {
            slot_owner.insert(key, i);
        }
        databases.push(DatabaseConfig {
            name: doc.name,
            account: doc.account,
            connection,
            slot: doc.slot,
            publication: doc.publication,
            heartbeat_interval_ms: doc.heartbeat_interval_ms,
        });
    }
    databases
}

fn resolve_connection(
    doc: &DatabaseDoc,
    path: &DocPath,
    problems: &mut Problems,
) -> Option<PgConnection> {
    let mut connection = base_connection(doc, path, problems)?;
    apply_tls_fields(doc, path, problems, &mut connection).then_some(connection)
}

/// The libpq `sslmode` values.
const SSL_MODES: [&str; 6] = [
    "disable",
    "allow",
    "prefer",
    "require",
    "verify-ca",
    "verify-full",
];

/// Folds `ssl`, `sslmode` and `sslrootcert` into the connection's
/// parameters, where a `url`'s own `?sslmode=` would be. `ssl: true` is
/// `sslmode=require` (encrypted, certificate not checked, as Sequin's
/// `ssl: true`); `ssl: false` is `sslmode=disable`.
fn apply_tls_fields(
    doc: &DatabaseDoc,
    path: &DocPath,
    problems: &mut Problems,
    connection: &mut PgConnection,
) -> bool {
    let mode = match (doc.ssl, &doc.sslmode) {
        (Some(_), Some(_)) => {
            problems.add(
                path.clone(),
                "set either `ssl` or `sslmode`, not both: `ssl: true` means `sslmode: require`",
            );
            return false;
        }
        (Some(true), None) => Some("require".to_string()),
        (Some(false), None) => Some("disable".to_string()),
        (None, Some(mode)) => {
            if !SSL_MODES.contains(&mode.as_str()) {
                problems.add(
                    path.key("sslmode"),
                    format!(
                        "unknown sslmode {mode:?}, expected one of {}",
                        SSL_MODES.join(", ")
                    ),
                );
                return false;
            }
            Some(mode.clone())
        }
        (None, None) => None,
    };
    let fields = [
        ("sslmode", mode, "`ssl`/`sslmode`"),
        ("sslrootcert", doc.sslrootcert.clone(), "`sslrootcert`"),
    ];
    let mut ok = true;
    for (param, value, field) in fields {
        let Some(value) = value else { continue };
        if connection.param(param).is_some() {
            problems.add(
                path.clone(),
                format!(
                    "{field} is set twice: as a field and as `?{param}=` in the `url`; keep one"
                ),
            );
            ok = false;
            continue;
        }
        connection.params.push((param.to_string(), value));
    }
    ok
}

fn base_connection(
    doc: &DatabaseDoc,
    path: &DocPath,
    problems: &mut Problems,
) -> Option<PgConnection> {
    let fields: Vec<&str> = [
        ("hostname", doc.hostname.is_some()),
        ("port", doc.port.is_some()),
        ("database", doc.database.is_some()),
        ("username", doc.username.is_some()),
        ("password", doc.password.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect();

    if let Some(url) = &doc.url {
        if !fields.is_empty() {
            problems.add(
                path.clone(),
                format!(
                    "set either `url` or `hostname`/`port`/`database`/`username`/`password`, \
                     not both; found `url` and {}",
                    backticked(&fields)
                ),
            );
            return None;
        }
        return match pg_url::parse(url) {
            Ok(connection) => Some(connection),
            Err(message) => {
                problems.add(path.key("url"), format!("the URL {message}"));
                None
            }
        };
    }

    let missing: Vec<&str> = [
        ("hostname", doc.hostname.is_none()),
        ("database", doc.database.is_none()),
    ]
    .into_iter()
    .filter_map(|(name, missing)| missing.then_some(name))
    .collect();
    if !missing.is_empty() {
        problems.add(
            path.clone(),
            format!(
                "missing connection settings {}: set `hostname` and `database` \
                 (and optionally `port`, `username`, `password`), or a single `url` \
                 like postgres://user:password@host:5432/database",
                backticked(&missing)
            ),
        );
        return None;
    }
    Some(PgConnection {
        host: doc.hostname.clone().unwrap_or_default(),
        port: doc.port.unwrap_or(pg_url::DEFAULT_PORT),
        user: doc
            .username
            .clone()
            .unwrap_or_else(|| pg_url::DEFAULT_USER.to_owned()),
        password: doc.password.clone(),
        database: doc.database.clone().unwrap_or_default(),
        params: Vec::new(),
    })
}

fn backticked(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks that `function` names either a component `file` or a registered
/// `plugin`; answers whether it names a file (to be checked next).
fn check_component_source(
    function: &FunctionConfig,
    at: &DocPath,
    problems: &mut Problems,
) -> bool {
    let has_file = !function.file.as_os_str().is_empty();
    match (&function.plugin, has_file) {
        (Some(_), true) => {
            problems.add(
                at.key("plugin"),
                "give either `file` (a component file) or `plugin` (a registered name@version), not both",
            );
            false
        }
        (Some(_), false) => false,
        (None, true) => true,
        (None, false) => {
            problems.add(
                at.key("file"),
                "is missing: name the component's .wasm `file`, or a `plugin: name@version` registered through POST /api/plugins",
            );
            false
        }
    }
}

fn resolve_functions(
    mut functions: Vec<FunctionConfig>,
    base_dir: &Path,
    list: &DocPath,
    problems: &mut Problems,
) -> Vec<FunctionConfig> {
    check_unique_names(
        functions.iter().map(|f| f.name.as_str()),
        "function",
        list,
        problems,
    );
    for (i, function) in functions.iter_mut().enumerate() {
        if check_component_source(function, &list.index(i), problems) {
            let relative = function.file.is_relative();
            let file = base_dir.join(&function.file);
            let problem = if file.is_file() {
                None
            } else if file.is_dir() {
                Some("is a directory; name the component's .wasm file")
            } else {
                Some("does not exist")
            };
            if let Some(problem) = problem {
                let hint = if relative {
                    format!(
                        " (relative paths are resolved against the config file's directory, {})",
                        base_dir.display()
                    )
                } else {
                    String::new()
                };
                problems.add(
                    list.index(i).key("file"),
                    format!("component file {} {problem}{hint}", file.display()),
                );
            }
            function.file = file;
        }
        if let Some(http) = &function.grants.http {
            check_host_list(
                &http.allow_hosts,
                &list.index(i).key("grants").key("http").key("allow_hosts"),
                "is empty: list the hosts the function may call, e.g. `[api.example.com]`, \
                 or remove `http` to grant no HTTP at all",
                problems,
            );
        }
        if function.grants.any() && function.kind != FunctionKind::Enrichment {
            problems.add(
                list.index(i).key("grants"),
                format!(
                    "only enrichment functions may be granted capabilities, and this is a {} function; remove `grants`",
                    function.kind
                ),
            );
        }
        if let (Some(recycle), memory) =
            (function.limits.recycle_memory_mb, function.limits.memory_mb)
            && recycle >= memory
        {
            problems.add(
                list.index(i).key("limits").key("recycle_memory_mb"),
                format!(
                    "{recycle} MiB is not below memory_mb ({memory} MiB): the instance would hit its memory cap first; lower it"
                ),
            );
        }
    }
    functions
}

/// The names of what sinks can take changes or messages from.
struct Sources<'a> {
    databases: &'a [String],
    webhooks: &'a [String],
}

fn resolve_sinks<D: Destination>(
    raw: Vec<SinkConfig<Value>>,
    sources: &Sources<'_>,
    functions: &[FunctionConfig],
    list: &DocPath,
    problems: &mut Problems,
) -> Vec<SinkConfig<D>> {
    check_unique_names(raw.iter().map(|s| s.name.as_str()), "sink", list, problems);
    let mut sinks = Vec::with_capacity(raw.len());
    for (i, sink) in raw.into_iter().enumerate() {
        let path = list.index(i);
        check_sink_source(&sink, sources, functions, &path, problems);
        for kind in FunctionKind::ALL {
            if let Some(name) = sink.function(kind) {
                check_function_ref(functions, name, kind, &path, problems);
            }
        }
        let destination_path = path.key("destination");
        let mut sink = sink;
        let raw_destination = std::mem::take(&mut sink.destination);
        match destination::read::<D>(raw_destination) {
            Ok(destination) => {
                let sink_type = destination.type_name();
                if sink.routing.is_some() && destination.routing_keys().is_empty() {
                    problems.add(
                        path.key("routing"),
                        format!(
                            "{sink_type} sinks take no routing keys, so a routing function has nothing to choose; \
                             remove `routing` (routing applies to {} sinks)",
                            listed(&D::types_with_routing())
                        ),
                    );
                }
                sinks.push(sink.with_destination(destination))
            }
            Err(problem) => problems.add(destination_path.join(&problem.path), problem.message),
        }
    }
    sinks
}

/// The `kind` key at `entry` names a function that exists and is of that kind.
fn check_function_ref(
    functions: &[FunctionConfig],
    name: &str,
    kind: FunctionKind,
    entry: &DocPath,
    problems: &mut Problems,
) {
    match functions.iter().find(|f| f.name == name) {
        None => {
            let defined: Vec<&str> = functions.iter().map(|f| f.name.as_str()).collect();
            problems.add(
                entry.key(kind.as_str()),
                format!("no function named {name:?}; defined functions: {defined:?}"),
            )
        }
        Some(function) if function.kind != kind => problems.add(
            entry.key(kind.as_str()),
            format!(
                "function {name:?} has type {}, but `{kind}` needs a function of type {kind}",
                function.kind
            ),
        ),
        Some(_) => {}
    }
}

/// A sink takes either a database (that exists) or a webhook source (that
/// exists), and only the settings that fit what it takes.
fn check_sink_source(
    sink: &SinkConfig<Value>,
    sources: &Sources<'_>,
    functions: &[FunctionConfig],
    path: &DocPath,
    problems: &mut Problems,
) {
    let Some(webhook) = &sink.source.webhook else {
        match &sink.database {
            None => problems.add(
                path.clone(),
                "missing `database`: name the database whose changes this sink receives, or take a webhook source's messages with `source: {webhook: NAME}`",
            ),
            Some(database) if !sources.databases.contains(database) => problems.add(
                path.key("database"),
                format!(
                    "no database named {database:?}; defined databases: {:?}",
                    sources.databases
                ),
            ),
            Some(_) => {}
        }
        return;
    };
    let source = path.key("source");
    if !sources.webhooks.contains(webhook) {
        problems.add(
            source.key("webhook"),
            format!(
                "no webhook source named {webhook:?}; defined webhook_sources: {:?}",
                sources.webhooks
            ),
        );
    }
    if sink.database.is_some() {
        problems.add(
            path.key("database"),
            "a sink takes a database's changes or a webhook source's messages, not both; remove `database` (or `source.webhook`)",
        );
    }
    let lists = [
        ("include_schemas", sink.source.include_schemas.is_some()),
        ("exclude_schemas", sink.source.exclude_schemas.is_some()),
        ("include_tables", sink.source.include_tables.is_some()),
        ("exclude_tables", sink.source.exclude_tables.is_some()),
    ];
    for (key, set) in lists {
        if set {
            problems.add(
                source.key(key),
                "selects tables, but this sink takes a webhook source, which has none; remove it",
            );
        }
    }
    if !sink.actions.contains(weft_core::change::Action::Insert) {
        problems.add(
            path.key("actions"),
            "webhook messages are all inserts, so this sink would receive nothing; remove `actions`",
        );
    }
    if sink.initial_backfill.is_some() {
        problems.add(
            path.key("initial_backfill"),
            "a webhook source has no tables to backfill; remove it",
        );
    }
    if let Some(name) = &sink.enrichment
        && functions
            .iter()
            .any(|f| &f.name == name && f.grants.source_query)
    {
        problems.add(
            path.key("enrichment"),
            format!(
                "function {name:?} is granted `source_query`, which queries the sink's database, and this sink takes a webhook source; use an enrichment without that grant"
            ),
        );
    }
}

/// Unique names, and headers that HTTP can carry. Secret header values are
/// never quoted in a problem.
fn check_http_endpoints(endpoints: &[HttpEndpointConfig], list: &DocPath, problems: &mut Problems) {
    check_unique_names(
        endpoints.iter().map(|e| e.name.as_str()),
        "http endpoint",
        list,
        problems,
    );
    for (i, endpoint) in endpoints.iter().enumerate() {
        for (key, headers, secret) in [
            ("headers", &endpoint.headers, false),
            ("encrypted_headers", &endpoint.encrypted_headers, true),
        ] {
            for (name, value) in headers {
                let path = list.index(i).key(key).key(name);
                if http::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                    problems.add(
                        path.clone(),
                        format!("{name:?} is not a valid HTTP header name (letters, digits and -)"),
                    );
                }
                if http::header::HeaderValue::from_str(value).is_err() {
                    let shown = if secret {
                        "the value".to_string()
                    } else {
                        format!("{value:?}")
                    };
                    problems.add(
                        path,
                        format!("{shown} is not a valid HTTP header value (no line breaks or control characters)"),
                    );
                }
            }
        }
        if endpoint.signing_secret.as_deref() == Some("") {
            problems.add(
                list.index(i).key("signing_secret"),
                "must not be empty; remove it to send no signature",
            );
        }
    }
}

/// Names that refer to a sink's, database's or function's entry exist (and
/// the function is a filter); filters are well formed.
fn check_change_retentions<D>(
    retentions: &[ChangeRetentionConfig],
    sinks: &[SinkConfig<D>],
    databases: &[String],
    functions: &[FunctionConfig],
    list: &DocPath,
    problems: &mut Problems,
) {
    check_unique_names(
        retentions.iter().map(|r| r.name.as_str()),
        "change retention",
        list,
        problems,
    );
    for (i, retention) in retentions.iter().enumerate() {
        let path = list.index(i);
        if sinks.iter().any(|s| s.name == retention.name) {
            problems.add(
                path.key("name"),
                format!(
                    "a sink is named {:?} too; a change retention runs as a sink of its own name, so pick another",
                    retention.name
                ),
            );
        }
        for (key, database) in [
            ("source_database", &retention.source_database),
            ("destination_database", &retention.destination_database),
        ] {
            if !databases.contains(database) {
                problems.add(
                    path.key(key),
                    format!("no database named {database:?}; defined databases: {databases:?}"),
                );
            }
        }
        for (j, filter) in retention.filters.iter().enumerate() {
            if let Some(problem) = filter.problem() {
                problems.add(path.key("filters").index(j), problem);
            }
        }
        if let Some(name) = &retention.filter {
            check_function_ref(functions, name, FunctionKind::Filter, &path, problems);
        }
        if retention.source_database == retention.destination_database
            && retention.source_table() == retention.destination_table()
        {
            problems.add(
                path.key("destination_table_name"),
                "is the source table itself; every event would become a new change of it; name another table",
            );
        }
    }
}

/// A sink's own rules: its backlog policy, its destination's shared
/// delivery fields and its destination type's own rules (see
/// [`Destination::problems`]).
fn check_push_settings<D: Destination>(
    sinks: &[SinkConfig<D>],
    endpoints: &[HttpEndpointConfig],
    databases: &[String],
    list: &DocPath,
    problems: &mut Problems,
) {
    let names: Vec<&str> = endpoints.iter().map(|e| e.name.as_str()).collect();
    for (i, sink) in sinks.iter().enumerate() {
        let path = list.index(i);
        if sink.load_shedding_policy == LoadSheddingPolicy::DiscardOnFull
            && sink.max_backlog_messages.is_none()
        {
            problems.add(
                path.key("load_shedding_policy"),
                "discard_on_full needs `max_backlog_messages`, the backlog at which new messages are discarded; set it, or drop the policy to keep every message",
            );
        }
        for (key, problem) in sink
            .destination
            .delivery()
            .map(|d| d.problems())
            .unwrap_or_default()
        {
            problems.add(path.key("destination").key(key), problem);
        }
        let entries = Entries {
            databases,
            http_endpoints: &names,
        };
        for (at, problem) in sink.destination.problems(sink, &entries) {
            problems.add(path.join(&at), problem);
        }
    }
}

/// `names` as a sentence lists them: `a, b and c`.
fn listed(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [only] => (*only).to_string(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}
