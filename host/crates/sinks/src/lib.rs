//! Sink adapters, one folder per sink type, the registry of those types,
//! and the delivery worker that drives push sinks from the store.
//!
//! Every sink type implements [`sink::Sink`] in its own folder, with the
//! same files in each: `mod.rs` (the implementation: routing keys, default
//! route, checks, build), `config.rs` (its `destination:` settings, as
//! written and resolved), `destination.rs` (its delivery) and `errors.rs`
//! (which of its failures a retry can fix). `sink_types!` below is the
//! one list of them: adding a sink type is adding a folder and a line
//! there. See `docs/architecture.md`.
//!
//! This layer sits on `weft-core`, `weft-config`, `weft-store`,
//! `weft-postgres` (the Postgres sink's connection) and `weft-wasm` (HTTP
//! egress rules); it may not import the source, the pipeline, the API or
//! the server.

pub mod config;
pub mod delivery;
pub mod lane;
pub mod pause;
pub mod pull;
pub mod route;
pub mod sink;

// Not a sink type: the connection the two Redis types share.
#[cfg(feature = "redis")]
pub mod redis;

#[cfg(all(test, feature = "all-sinks"))]
mod config_tests;

use weft_config::model::TableRef;

use sink::{SinkKind, sink_types};

sink_types! {
    SequinStream => sequin_stream::SequinStreamSink,
    #[cfg(feature = "webhook")]
    Webhook => webhook::WebhookSink,
    #[cfg(feature = "nats")]
    Nats => nats::NatsSink,
    #[cfg(feature = "redis")]
    RedisString => redis_string::RedisStringSink,
    #[cfg(feature = "redis")]
    RedisStream => redis_stream::RedisStreamSink,
    #[cfg(feature = "kafka")]
    Kafka => kafka::KafkaSink,
    #[cfg(feature = "rabbitmq")]
    RabbitMq => rabbitmq::RabbitMqSink,
    #[cfg(feature = "postgres")]
    Postgres => postgres::PostgresSink,
    #[cfg(feature = "sqs")]
    Sqs => sqs::SqsSink,
}

/// Sequin's other destination types, which weft does not have (yet); named
/// in the error so that users know it is not a typo.
const PLANNED: &[&str] = &[
    "sns",
    "kinesis",
    "gcp_pubsub",
    "azure_event_hub",
    "elasticsearch",
    "typesense",
    "meilisearch",
    "s2",
];

/// The destination a change retention writes through: the postgres sink's
/// event log (see `docs/change_retention.md`); `None` in a build without
/// the postgres sink.
fn event_log(database: &str, table: TableRef, create_table: bool) -> Option<DestinationConfig> {
    #[cfg(feature = "postgres")]
    return Some(DestinationConfig::Postgres(
        postgres::PostgresConfig::event_log(database, table, create_table),
    ));
    #[cfg(not(feature = "postgres"))]
    {
        let _ = (database, table, create_table);
        None
    }
}

/// The sink type named `name` (a `destination.type`).
pub fn kind(name: &str) -> Option<&'static SinkKind> {
    sink_kinds().iter().find(|kind| kind.name == name)
}

/// A build without a sink type's feature names the type as left out, not
/// as unknown (`scripts/test.sh` runs this in a build with `nats` alone).
#[cfg(all(test, feature = "nats", not(feature = "kafka")))]
mod left_out_tests {
    use crate::config::Config;

    #[test]
    fn a_type_whose_feature_is_off_is_named_as_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let config = |kind: &str| {
            format!(
                "databases:\n  - {{ name: db, hostname: 127.0.0.1, database: db, slot: {{ name: s }}, publication: {{ name: p }} }}\nsinks:\n  - name: out\n    database: db\n    destination: {{ type: {kind}, hosts: \"127.0.0.1:9092\", topic: t }}\n"
            )
        };
        let error = Config::from_yaml(&config("kafka"), dir.path(), &|_| None)
            .expect_err("kafka is left out")
            .to_string();
        assert!(
            error.contains("destination type `kafka` is left out of this build of weft"),
            "{error}"
        );
        assert!(error.contains("nats"), "names the types it has: {error}");
        let error = Config::from_yaml(&config("kinesis"), dir.path(), &|_| None)
            .expect_err("kinesis is planned")
            .to_string();
        assert!(error.contains("is not supported yet"), "{error}");
    }
}
