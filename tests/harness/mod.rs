//! Shared test harness: real services started per test.
//!
//! * [`postgres::PgCluster`]: a throwaway Postgres cluster with logical
//!   replication enabled.
//! * [`certs::TestCa`]: throwaway certificates for TLS tests.
//! * [`server_process::ServerProcess`]: a broker or cache the test owns, to
//!   kill and restart (wrapped by [`nats::NatsServer`],
//!   [`redis::RedisServer`] and [`rabbitmq::RabbitMqNode`]).
//! * [`kafka::TansuBroker`]: a tansu (Kafka-protocol) broker per test.
//! * [`moto::MotoServer`]: moto, the AWS emulator, per test (SQS).
//! * [`rabbitmq::Amqp`]: an independent AMQP client to read queues back.
//! * [`wait::until`]: polling with a deadline, for every wait.

pub mod avro;
pub mod certs;
pub mod column_types;
pub mod guests;
pub mod kafka;
pub mod moto;
pub mod nats;
pub mod oracle;
pub mod postgres;
pub mod python_tools;
pub mod rabbitmq;
pub mod redis;
pub mod server_process;
pub mod source;
pub mod tls_proxy;
pub mod wait;
pub mod webhook_receiver;
pub mod weft;
