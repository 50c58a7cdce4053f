//! Shared test harness: real services started per test.
//!
//! * [`postgres::PgCluster`]: a throwaway Postgres cluster with logical
//!   replication enabled.
//! * [`certs::TestCa`]: throwaway certificates for TLS tests.
//! * [`rabbitmq::RabbitMqNode`]: a private RabbitMQ node a test can stop;
//!   [`rabbitmq::Amqp`]: an independent client to read queues back.

pub mod certs;
pub mod guests;
pub mod nats;
pub mod oracle;
pub mod outage;
pub mod postgres;
pub mod rabbitmq;
pub mod source;
pub mod webhook_receiver;
pub mod weft;
