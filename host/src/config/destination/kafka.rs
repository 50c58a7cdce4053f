//! Settings of `type: kafka`: produce messages to Kafka topics with the
//! idempotent producer (`acks=all`).

use std::fmt;

use serde::Deserialize;

use super::delivery::{DeliveryConfig, DeliveryDefaults, PushSettings};
use super::rules;

/// How a Kafka sink connects and delivers. Names follow Sequin's where it
/// has one. `Debug` hides `password`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, expecting = "kafka settings")]
pub struct KafkaConfig {
    /// Bootstrap brokers, comma-separated `host:port` pairs
    /// (`kafka1:9092,kafka2:9092`). Required.
    pub hosts: String,
    /// The topic messages go to. Required unless the sink has a routing
    /// function, which then must set `topic` for every message (a message
    /// left without one is dead-lettered).
    #[serde(default)]
    pub topic: Option<String>,
    /// Connect over TLS and verify the brokers' certificates and host names
    /// against the system's roots (plus `tls_ca_file`). Default false.
    #[serde(default)]
    pub tls: bool,
    /// A PEM file of CA certificates to trust in addition to the system's,
    /// for brokers with a private CA. Needs `tls: true`. Default none.
    #[serde(default)]
    pub tls_ca_file: Option<String>,
    /// SASL user name. Needs `password` and `sasl_mechanism`. Default none.
    #[serde(default)]
    pub username: Option<String>,
    /// SASL password. Default none; never logged.
    #[serde(default)]
    pub password: Option<String>,
    /// SASL mechanism for `username`/`password`. Default none (no SASL).
    #[serde(default)]
    pub sasl_mechanism: Option<SaslMechanism>,
    /// Compression of produced batches. Default `none`.
    #[serde(default)]
    pub compression: Compression,
    /// The shared delivery fields; Kafka defaults: `batch_size` 200
    /// (Sequin's), `max_in_flight` 10, `request_timeout_ms` 30000 (how long
    /// a message may wait for its delivery report).
    #[serde(skip)]
    pub delivery: DeliveryConfig,
}

/// `sasl_mechanism`: how `username`/`password` are presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SaslMechanism {
    /// SASL/PLAIN: the password is sent as is (use it with `tls: true`).
    Plain,
    /// SASL/SCRAM-SHA-256.
    #[serde(rename = "scram_sha_256")]
    ScramSha256,
    /// SASL/SCRAM-SHA-512.
    #[serde(rename = "scram_sha_512")]
    ScramSha512,
}

impl SaslMechanism {
    /// The mechanism's name in the Kafka protocol (librdkafka's `sasl.mechanism`).
    pub fn protocol_name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// `compression`: the codec of produced record batches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// Uncompressed.
    #[default]
    None,
    /// gzip.
    Gzip,
    /// Snappy.
    Snappy,
    /// LZ4.
    Lz4,
    /// Zstandard (needs Kafka 2.1 or later on the broker).
    Zstd,
}

impl Compression {
    /// The codec's name in librdkafka's `compression.codec`.
    pub fn codec_name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// Longest Kafka topic name.
const MAX_TOPIC_CHARS: usize = 249;

/// Why `topic` is not a valid Kafka topic name, if it is not. Kafka allows
/// ASCII letters, digits, `.`, `_` and `-`, up to 249 characters, and not
/// `.` or `..` alone.
pub fn topic_name_problem(topic: &str) -> Option<String> {
    if topic.is_empty() {
        return Some("a topic name must not be empty".into());
    }
    if topic == "." || topic == ".." {
        return Some(format!("{topic:?} is not allowed as a topic name"));
    }
    if topic.len() > MAX_TOPIC_CHARS {
        return Some(format!(
            "topic name is {} characters long; Kafka allows at most {MAX_TOPIC_CHARS}",
            topic.len()
        ));
    }
    if let Some(bad) = topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Some(format!(
            "topic {topic:?} contains {bad:?}; Kafka topic names use only ASCII letters, digits, `.`, `_` and `-`"
        ));
    }
    None
}

impl KafkaConfig {
    /// The bootstrap brokers, trimmed, in the order given.
    pub fn host_list(&self) -> Vec<&str> {
        self.hosts
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .collect()
    }

    /// Rules between fields: (field, what is wrong and what to do).
    /// `routed` says whether the sink has a routing function.
    pub fn problems(&self, routed: bool) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        let hosts = self.host_list();
        if hosts.is_empty() {
            problems.push((
                "hosts",
                "must list at least one broker, e.g. `hosts: kafka1:9092,kafka2:9092`".into(),
            ));
        }
        for host in hosts {
            let port = host
                .rsplit_once(':')
                .filter(|(name, _)| !name.is_empty())
                .and_then(|(_, port)| port.parse::<u16>().ok())
                .filter(|port| *port > 0);
            if port.is_none() {
                problems.push((
                    "hosts",
                    format!(
                        "{host:?} is not `host:port`; list brokers as comma-separated host:port pairs, e.g. `kafka1:9092,kafka2:9092`"
                    ),
                ));
            }
        }
        match &self.topic {
            None if !routed => problems.push((
                "topic",
                "is required: set `topic`, or give the sink a `routing` function that sets `topic` for every message".into(),
            )),
            None => {}
            Some(topic) => {
                if let Some(problem) = topic_name_problem(topic) {
                    problems.push(("topic", problem));
                }
            }
        }
        let (username, password) = (self.username.is_some(), self.password.is_some());
        rules::credentials_together(
            username,
            password,
            "SASL needs `username`, `password` and `sasl_mechanism`",
            &mut problems,
        );
        match (username, password, self.sasl_mechanism) {
            (true, true, None) => problems.push((
                "sasl_mechanism",
                "is required with `username`/`password`: one of plain, scram_sha_256, scram_sha_512"
                    .into(),
            )),
            (false, false, Some(_)) => problems.push((
                "sasl_mechanism",
                "is set without credentials; set `username` and `password` too, or remove it"
                    .into(),
            )),
            _ => {}
        }
        rules::ca_file_needs_tls(self.tls, self.tls_ca_file.is_some(), &mut problems);
        problems
    }
}

impl PushSettings for KafkaConfig {
    const DELIVERY_DEFAULTS: DeliveryDefaults = DeliveryDefaults {
        batch_size: 200,
        max_in_flight: 10,
        request_timeout_ms: 30_000,
    };

    fn delivery_mut(&mut self) -> &mut DeliveryConfig {
        &mut self.delivery
    }
}

impl fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaConfig")
            .field("hosts", &self.hosts)
            .field("topic", &self.topic)
            .field("tls", &self.tls)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("sasl_mechanism", &self.sasl_mechanism)
            .field("compression", &self.compression)
            .field("delivery", &self.delivery)
            .finish()
    }
}
