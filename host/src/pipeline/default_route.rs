//! Each sink type's default routing keys, and how a routing function's
//! choices override them. The pipeline stores the resolved [`Route`] with
//! every message, so a delivery worker reads one complete set of keys and
//! never needs the change again (a transform may have replaced the message).
//!
//! Defaults keep Sequin's public shape (see `docs/sinks.md`):
//! - kafka: `message_key` is the message group (per-key order holds per
//!   partition); the topic comes from the sink's config;
//! - nats: `subject` is `sequin.<database>.<schema>.<table>.<action>`;
//! - redis_string: `key` is `sequin:<table>:<pk values joined by "-">`,
//!   `action` is `del` for deletes and `set` otherwise;
//! - rabbitmq: `routing_key` is the NATS subject above, `message_id` the
//!   idempotency key; the exchange comes from the sink's config;
//! - redis_stream, webhook, sequin_stream: nothing beyond their config;
//! - postgres: no `table`, so the sink's `table` (or the source table's
//!   name) applies unless a routing function chooses one.

use crate::change::Action;
use crate::message::Metadata;
use crate::plugins::{KeyAction, Route};

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
    let subject = || {
        format!(
            "sequin.{}.{}.{}.{action}",
            metadata.database_name, metadata.table_schema, metadata.table_name,
        )
    };
    match sink_type {
        "kafka" => Route {
            message_key: Some(group_id.to_string()),
            ..Route::default()
        },
        "nats" => Route {
            subject: Some(subject()),
            ..Route::default()
        },
        "redis_string" => Route {
            key: Some(format!(
                "sequin:{}:{}",
                metadata.table_name,
                metadata.record_pks.join("-")
            )),
            action: Some(if action == Action::Delete.as_str() {
                KeyAction::Del
            } else {
                KeyAction::Set
            }),
            ..Route::default()
        },
        "rabbitmq" => Route {
            routing_key: Some(subject()),
            message_id: Some(metadata.idempotency_key.clone()),
            ..Route::default()
        },
        _ => Route::default(),
    }
}

/// Whether a `sink_type` sink gives its messages any default routing key.
/// When it does not and no routing function chose keys, a message carries
/// no route: the pipeline then builds no empty [`Route`] to merge and drop
/// for each message (~1% of a backfill's instructions).
pub fn has_defaults(sink_type: &str) -> bool {
    matches!(sink_type, "kafka" | "nats" | "redis_string" | "rabbitmq")
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lsn::Lsn;
    use crate::message::ConsumerRef;

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
        for &sink_type in crate::config::destination::SUPPORTED {
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
