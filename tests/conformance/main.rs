//! The sink conformance suite: every sink type runs the same checks (see
//! [`suite`]) against its real service, started by the test.
//!
//! A sink type joins with a fixture in `fixtures/` (how to start its
//! service, what its `destination:` is, how to read back what it
//! delivered) and one line in the list below, which gives it every check.

// This binary uses only part of the shared harness.
#[allow(dead_code)]
#[path = "../harness/mod.rs"]
mod harness;

mod fixtures;
mod suite;

/// One module per sink type, with one test per check of [`suite`].
macro_rules! conformance {
    ($($sink:ident => $fixture:ty),+ $(,)?) => {
        $(
            mod $sink {
                #[test]
                fn order_per_group() {
                    crate::suite::order_per_group::<$fixture>();
                }

                #[test]
                fn route_override() {
                    crate::suite::route_override::<$fixture>();
                }

                #[test]
                fn bytes_exact() {
                    crate::suite::bytes_exact::<$fixture>();
                }

                #[test]
                fn retriable_and_permanent() {
                    crate::suite::retriable_and_permanent::<$fixture>();
                }

                #[test]
                fn outage_loses_nothing() {
                    crate::suite::outage_loses_nothing::<$fixture>();
                }
            }
        )+

        /// Every sink type weft has is in the list above.
        #[test]
        fn every_sink_type_runs_the_suite() {
            use crate::suite::Fixture;
            let listed = [$(<$fixture as Fixture>::TYPE),+];
            for kind in weft_sinks::sink_kinds() {
                assert!(
                    listed.contains(&kind.name),
                    "sink type {} has no conformance fixture: add one in tests/conformance/fixtures/ and a line in tests/conformance/main.rs",
                    kind.name
                );
            }
        }
    };
}

conformance! {
    sequin_stream => crate::fixtures::sequin_stream::SequinStream,
    webhook => crate::fixtures::webhook::Webhook,
    nats => crate::fixtures::nats::Nats,
    redis_string => crate::fixtures::redis::RedisString,
    redis_stream => crate::fixtures::redis::RedisStream,
    kafka => crate::fixtures::kafka::Kafka,
    rabbitmq => crate::fixtures::rabbitmq::RabbitMq,
    postgres => crate::fixtures::postgres::Postgres,
    sqs => crate::fixtures::sqs::Sqs,
}
