//! Routing keys: which keys each sink type accepts and the rules on their
//! values, each type's defaults, and how a routing function's choices
//! override them. The pipeline stores the resolved [`Route`] with every
//! message, so a delivery worker reads one complete set of keys and never
//! needs the change again (a transform may have replaced the message).
//!
//! Which keys a type takes and what they default to come from its
//! [`Sink`](super::sink::Sink) implementation; the rules on a key's value
//! live here, once per key, whatever sink takes it. A routing function's
//! [`Route`] is checked before its message is stored; a key the sink does
//! not use is an error, not silently ignored (as in Sequin). Defaults keep
//! Sequin's public shape (see `docs/sinks/`).

use weft_core::change::Action;
use weft_core::message::Metadata;
use weft_core::route::Route;

/// Longest webhook `endpoint_path`, in characters (Sequin's limit).
pub const MAX_ENDPOINT_PATH_CHARS: usize = 2000;

/// Longest RabbitMQ `exchange`, `routing_key` or `message_id`, in bytes
/// (AMQP's short string).
pub const MAX_AMQP_SHORT_STRING: usize = 255;

/// HTTP methods a webhook route may choose.
const HTTP_METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE"];

/// The routing keys a sink of type `sink_type` (the destination's `type`)
/// accepts, as its [`Sink`](super::sink::Sink) says. `None` for a type
/// weft does not know.
pub fn allowed_keys(sink_type: &str) -> Option<&'static [&'static str]> {
    super::kind(sink_type).map(|kind| kind.routing_keys)
}

/// Whether a routing function can be used with a sink of `sink_type`.
pub fn supports_routing(sink_type: &str) -> bool {
    allowed_keys(sink_type).is_some_and(|keys| !keys.is_empty())
}

/// Why a route does not fit its sink.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The route sets keys the sink does not use.
    #[error(
        "a {sink_type} sink does not use the routing key{} {}; allowed keys: {}",
        if keys.len() == 1 { "" } else { "s" },
        keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", "),
        allowed_list(sink_type)
    )]
    UnknownKeys {
        /// The sink's type.
        sink_type: String,
        /// The keys it does not use.
        keys: Vec<&'static str>,
    },
    /// A key's value breaks the sink's rules.
    #[error("routing key `{key}`: {reason}")]
    InvalidValue {
        /// The key.
        key: &'static str,
        /// What is wrong and what is allowed.
        reason: String,
    },
}

fn allowed_list(sink_type: &str) -> String {
    match allowed_keys(sink_type) {
        Some([]) => "none (this sink type takes no routing)".into(),
        Some(keys) => keys
            .iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", "),
        None => "none (unknown sink type)".into(),
    }
}

/// Checks `route` against the keys and value rules of a `sink_type` sink.
pub fn validate(route: &Route, sink_type: &str) -> Result<(), RouteError> {
    let allowed = allowed_keys(sink_type).unwrap_or(&[]);
    let unknown: Vec<&'static str> = route
        .keys()
        .into_iter()
        .filter(|key| !allowed.contains(key))
        .collect();
    if !unknown.is_empty() {
        return Err(RouteError::UnknownKeys {
            sink_type: sink_type.to_string(),
            keys: unknown,
        });
    }
    let invalid = |key: &'static str, reason: String| Err(RouteError::InvalidValue { key, reason });
    for (key, value) in [
        ("topic", &route.topic),
        ("subject", &route.subject),
        ("key", &route.key),
        ("stream_key", &route.stream_key),
        ("exchange", &route.exchange),
    ] {
        if value.as_deref().is_some_and(str::is_empty) {
            return invalid(key, "must not be empty".into());
        }
    }
    for (key, value) in [
        ("exchange", &route.exchange),
        ("routing_key", &route.routing_key),
        ("message_id", &route.message_id),
    ] {
        if let Some(value) = value
            && value.len() > MAX_AMQP_SHORT_STRING
        {
            return invalid(
                key,
                format!(
                    "is {} bytes long; AMQP allows at most {MAX_AMQP_SHORT_STRING}",
                    value.len()
                ),
            );
        }
    }
    if let Some(subject) = &route.subject
        && subject.chars().any(char::is_whitespace)
    {
        return invalid(
            "subject",
            format!("{subject:?} must not contain whitespace"),
        );
    }
    if let Some(method) = &route.method
        && !HTTP_METHODS.contains(&method.to_ascii_uppercase().as_str())
    {
        return invalid(
            "method",
            format!("{method:?} is not one of {}", HTTP_METHODS.join(", ")),
        );
    }
    if let Some(path) = &route.endpoint_path {
        let chars = path.chars().count();
        if chars > MAX_ENDPOINT_PATH_CHARS {
            return invalid(
                "endpoint_path",
                format!("is {chars} characters long; the limit is {MAX_ENDPOINT_PATH_CHARS}"),
            );
        }
        if !path.starts_with('/') {
            return invalid("endpoint_path", format!("{path:?} must start with `/`"));
        }
    }
    if let Some(table) = &route.table
        && let Err(reason) = weft_config::model::TableRef::parse(table)
    {
        return invalid("table", reason.to_string());
    }
    if let Some(headers) = &route.headers {
        for (name, value) in headers {
            let token = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !token {
                return invalid(
                    "headers",
                    format!(
                        "{name:?} is not a valid header name (letters, digits and !#$%&'*+-.^_`|~)"
                    ),
                );
            }
            if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return invalid(
                    "headers",
                    format!("the value of {name:?} contains a line break or NUL"),
                );
            }
        }
    }
    Ok(())
}

/// The default route of a `sink_type` sink for a message with `metadata`,
/// `action` and message group `group_id`.
pub fn default_route(
    sink_type: &str,
    action: Action,
    metadata: &Metadata,
    group_id: &str,
) -> Route {
    route(sink_type, action.as_str(), metadata, group_id)
}

/// The default route of a truncate message (see `pipeline::truncate`): a
/// change's, with `truncate` as the action in subjects and routing keys.
/// Config validation keeps truncate messages away from redis_string sinks.
pub fn truncate_route(sink_type: &str, metadata: &Metadata, group_id: &str) -> Route {
    route(sink_type, "truncate", metadata, group_id)
}

fn route(sink_type: &str, action: &str, metadata: &Metadata, group_id: &str) -> Route {
    super::kind(sink_type)
        .and_then(|kind| kind.default_route)
        .map(|default| default(action, metadata, group_id))
        .unwrap_or_default()
}

/// `sequin.<database>.<schema>.<table>.<action>`: the NATS sink's default
/// subject, which the RabbitMQ sink's routing key follows too (Sequin's).
pub fn default_subject(metadata: &Metadata, action: &str) -> String {
    format!(
        "sequin.{}.{}.{}.{action}",
        metadata.database_name, metadata.table_schema, metadata.table_name,
    )
}

/// Whether a `sink_type` sink gives its messages any default routing key.
/// When it does not and no routing function chose keys, a message carries
/// no route: the pipeline then builds no empty [`Route`] to merge and drop
/// for each message (~1% of a backfill's instructions).
pub fn has_defaults(sink_type: &str) -> bool {
    super::kind(sink_type).is_some_and(|kind| kind.default_route.is_some())
}

/// `defaults` with every key `chosen` sets replaced by the chosen value.
pub fn merge(defaults: Route, chosen: Option<Route>) -> Route {
    let Some(chosen) = chosen else {
        return defaults;
    };
    Route {
        topic: chosen.topic.or(defaults.topic),
        message_key: chosen.message_key.or(defaults.message_key),
        subject: chosen.subject.or(defaults.subject),
        headers: chosen.headers.or(defaults.headers),
        key: chosen.key.or(defaults.key),
        action: chosen.action.or(defaults.action),
        expire_ms: chosen.expire_ms.or(defaults.expire_ms),
        stream_key: chosen.stream_key.or(defaults.stream_key),
        method: chosen.method.or(defaults.method),
        endpoint_path: chosen.endpoint_path.or(defaults.endpoint_path),
        exchange: chosen.exchange.or(defaults.exchange),
        routing_key: chosen.routing_key.or(defaults.routing_key),
        message_id: chosen.message_id.or(defaults.message_id),
        table: chosen.table.or(defaults.table),
    }
}

#[cfg(all(test, feature = "all-sinks"))]
mod tests {
    use super::*;
    use weft_core::route::KeyAction;

    #[test]
    fn each_sink_type_accepts_exactly_its_keys() {
        let every = Route {
            topic: Some("t".into()),
            message_key: Some("k".into()),
            subject: Some("s".into()),
            headers: Some(vec![("X-A".into(), "1".into())]),
            key: Some("k".into()),
            action: Some(KeyAction::Del),
            expire_ms: Some(5),
            stream_key: Some("s".into()),
            method: Some("PUT".into()),
            endpoint_path: Some("/p".into()),
            exchange: Some("e".into()),
            routing_key: Some("r".into()),
            message_id: Some("m".into()),
            table: Some("public.t".into()),
        };
        for sink_type in [
            "postgres",
            "kafka",
            "nats",
            "redis_string",
            "redis_stream",
            "webhook",
            "rabbitmq",
            "sequin_stream",
        ] {
            let allowed = allowed_keys(sink_type).unwrap();
            match validate(&every, sink_type) {
                Err(RouteError::UnknownKeys { keys, .. }) => {
                    let mut expected: Vec<&str> = every
                        .keys()
                        .into_iter()
                        .filter(|k| !allowed.contains(k))
                        .collect();
                    expected.sort();
                    let mut keys = keys;
                    keys.sort();
                    assert_eq!(keys, expected, "{sink_type}");
                }
                other => panic!("{sink_type}: expected unknown keys, got {other:?}"),
            }
            // A route with only the allowed keys passes.
            let mut route = Route::default();
            for key in allowed {
                match *key {
                    "topic" => route.topic = every.topic.clone(),
                    "message_key" => route.message_key = every.message_key.clone(),
                    "subject" => route.subject = every.subject.clone(),
                    "headers" => route.headers = every.headers.clone(),
                    "key" => route.key = every.key.clone(),
                    "action" => route.action = every.action,
                    "expire_ms" => route.expire_ms = every.expire_ms,
                    "stream_key" => route.stream_key = every.stream_key.clone(),
                    "method" => route.method = every.method.clone(),
                    "endpoint_path" => route.endpoint_path = every.endpoint_path.clone(),
                    "exchange" => route.exchange = every.exchange.clone(),
                    "routing_key" => route.routing_key = every.routing_key.clone(),
                    "message_id" => route.message_id = every.message_id.clone(),
                    "table" => route.table = every.table.clone(),
                    other => panic!("untested key {other}"),
                }
            }
            assert_eq!(route.keys().len(), allowed.len(), "{sink_type}");
            assert_eq!(validate(&route, sink_type), Ok(()), "{sink_type}");
        }
        assert!(allowed_keys("carrier_pigeon").is_none());
        assert!(!supports_routing("sequin_stream"));
        assert!(supports_routing("kafka"));
    }

    #[test]
    fn unknown_keys_error_names_them_and_the_allowed_ones() {
        let route = Route {
            topic: Some("orders".into()),
            ..Route::default()
        };
        let error = validate(&route, "nats").unwrap_err().to_string();
        assert_eq!(
            error,
            "a nats sink does not use the routing key `topic`; allowed keys: `subject`, `headers`"
        );
        let error = validate(&route, "sequin_stream").unwrap_err().to_string();
        assert!(
            error.ends_with("allowed keys: none (this sink type takes no routing)"),
            "{error}"
        );
        assert_eq!(validate(&Route::default(), "sequin_stream"), Ok(()));
    }

    #[test]
    fn webhook_endpoint_path_must_start_with_slash_and_fit_the_limit() {
        let path = |p: String| Route {
            endpoint_path: Some(p),
            ..Route::default()
        };
        assert_eq!(validate(&path("/orders/1".into()), "webhook"), Ok(()));
        let at_limit = format!("/{}", "a".repeat(MAX_ENDPOINT_PATH_CHARS - 1));
        assert_eq!(validate(&path(at_limit), "webhook"), Ok(()));
        let too_long = format!("/{}", "a".repeat(MAX_ENDPOINT_PATH_CHARS));
        let error = validate(&path(too_long), "webhook")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("2001 characters long; the limit is 2000"),
            "{error}"
        );
        let error = validate(&path("orders".into()), "webhook")
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "routing key `endpoint_path`: \"orders\" must start with `/`"
        );
    }

    #[test]
    fn values_are_checked() {
        let unqualified = Route {
            table: Some("orders".into()),
            ..Route::default()
        };
        assert!(matches!(
            validate(&unqualified, "postgres"),
            Err(RouteError::InvalidValue { key: "table", .. })
        ));
        let qualified = Route {
            table: Some("archive.orders".into()),
            ..Route::default()
        };
        assert_eq!(validate(&qualified, "postgres"), Ok(()));
        let method = Route {
            method: Some("BREW".into()),
            ..Route::default()
        };
        assert!(matches!(
            validate(&method, "webhook"),
            Err(RouteError::InvalidValue { key: "method", .. })
        ));
        let lower = Route {
            method: Some("post".into()),
            ..Route::default()
        };
        assert_eq!(validate(&lower, "webhook"), Ok(()));
        let header = Route {
            headers: Some(vec![("Bad Name".into(), "v".into())]),
            ..Route::default()
        };
        assert!(matches!(
            validate(&header, "nats"),
            Err(RouteError::InvalidValue { key: "headers", .. })
        ));
        let injected = Route {
            headers: Some(vec![("X-A".into(), "v\r\nX-B: w".into())]),
            ..Route::default()
        };
        assert!(validate(&injected, "rabbitmq").is_err());
        let empty_topic = Route {
            topic: Some(String::new()),
            ..Route::default()
        };
        assert!(validate(&empty_topic, "kafka").is_err());
        let spaced = Route {
            subject: Some("a b".into()),
            ..Route::default()
        };
        assert!(validate(&spaced, "nats").is_err());
    }

    #[test]
    fn rabbitmq_names_must_fit_an_amqp_short_string() {
        let key = |k: String| Route {
            routing_key: Some(k),
            ..Route::default()
        };
        assert_eq!(validate(&key("k".repeat(255)), "rabbitmq"), Ok(()));
        let error = validate(&key("k".repeat(256)), "rabbitmq")
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "routing key `routing_key`: is 256 bytes long; AMQP allows at most 255"
        );
        let empty_exchange = Route {
            exchange: Some(String::new()),
            ..Route::default()
        };
        assert!(matches!(
            validate(&empty_exchange, "rabbitmq"),
            Err(RouteError::InvalidValue {
                key: "exchange",
                ..
            })
        ));
    }
    use weft_core::lsn::Lsn;
    use weft_core::message::ConsumerRef;

    fn metadata() -> Metadata {
        Metadata {
            table_schema: "public".into(),
            table_name: "orders".into(),
            commit_timestamp: "2026-01-01T00:00:00Z".into(),
            commit_lsn: Lsn(0x10),
            commit_idx: 2,
            idempotency_key: "key-1".into(),
            record_pks: vec!["7".into(), "eu".into()],
            database_name: "shop".into(),
            transaction_annotations: None,
            enrichment: None,
            webhook_source: None,
            consumer: ConsumerRef::for_sink("s"),
        }
    }

    #[test]
    fn defaults_follow_sequins_names() {
        let m = metadata();
        let nats = default_route("nats", Action::Update, &m, "g");
        assert_eq!(
            nats.subject.as_deref(),
            Some("sequin.shop.public.orders.update")
        );
        let redis = default_route("redis_string", Action::Delete, &m, "g");
        assert_eq!(redis.key.as_deref(), Some("sequin:orders:7-eu"));
        assert_eq!(redis.action, Some(KeyAction::Del));
        let redis = default_route("redis_string", Action::Read, &m, "g");
        assert_eq!(redis.action, Some(KeyAction::Set));
        let kafka = default_route("kafka", Action::Insert, &m, "public.orders:7:eu");
        assert_eq!(kafka.message_key.as_deref(), Some("public.orders:7:eu"));
        assert_eq!(kafka.topic, None);
        let rabbit = default_route("rabbitmq", Action::Insert, &m, "g");
        assert_eq!(
            rabbit.routing_key.as_deref(),
            Some("sequin.shop.public.orders.insert")
        );
        assert_eq!(rabbit.message_id.as_deref(), Some("key-1"));
        assert!(
            default_route("sequin_stream", Action::Insert, &m, "g")
                .keys()
                .is_empty()
        );
    }

    #[test]
    fn only_sink_types_with_default_keys_say_they_have_them() {
        let m = metadata();
        for sink_type in crate::sink_kinds().iter().map(|kind| kind.name) {
            for action in [Action::Insert, Action::Delete, Action::Read] {
                let route = default_route(sink_type, action, &m, "g");
                assert_eq!(has_defaults(sink_type), !route.is_empty(), "{sink_type}");
            }
        }
    }

    #[test]
    fn a_routing_function_overrides_only_the_keys_it_sets() {
        let m = metadata();
        let merged = merge(
            default_route("redis_string", Action::Insert, &m, "g"),
            Some(Route {
                expire_ms: Some(500),
                key: Some("custom".into()),
                ..Route::default()
            }),
        );
        assert_eq!(merged.key.as_deref(), Some("custom"));
        assert_eq!(merged.action, Some(KeyAction::Set));
        assert_eq!(merged.expire_ms, Some(500));
    }
}
