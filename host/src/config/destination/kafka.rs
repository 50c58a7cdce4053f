//! Settings of `type: kafka`: produce messages to Kafka topics with the
//! idempotent producer (`acks=all`).

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use crate::config::bounds;

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
    /// Most messages handed to one delivery (1 to 10000). Default 200
    /// (Sequin's Kafka batch).
    #[serde(
        default = "KafkaConfig::default_batch_size",
        deserialize_with = "bounds::in_range::<_, u32, 1, 10_000>"
    )]
    pub batch_size: u32,
    /// Most deliveries in flight at once for this sink (1 to 1000). Default 10.
    #[serde(
        default = "KafkaConfig::default_max_in_flight",
        deserialize_with = "bounds::in_range::<_, u32, 1, 1000>"
    )]
    pub max_in_flight: u32,
    /// How long one delivery may wait for its messages' delivery reports
    /// before they count as failed and are retried, in milliseconds (1000
    /// to 600000). Default 30000.
    #[serde(
        default = "KafkaConfig::default_request_timeout_ms",
        deserialize_with = "bounds::in_range::<_, u64, 1000, 600_000>"
    )]
    pub request_timeout_ms: u64,
    /// Delay before the first retry of a failed message, in milliseconds
    /// (1 to 3600000); it doubles with each failure, with jitter. Default 1000.
    #[serde(
        default = "KafkaConfig::default_retry_backoff_base_ms",
        deserialize_with = "bounds::in_range::<_, u64, 1, 3_600_000>"
    )]
    pub retry_backoff_base_ms: u64,
    /// The longest delay between two attempts, in milliseconds (1 to
    /// 86400000). Default 600000 (10 minutes).
    #[serde(
        default = "KafkaConfig::default_retry_backoff_max_ms",
        deserialize_with = "bounds::in_range::<_, u64, 1, 86_400_000>"
    )]
    pub retry_backoff_max_ms: u64,
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
    /// Default `batch_size` (Sequin's).
    pub const DEFAULT_BATCH_SIZE: u32 = 200;
    /// Default `max_in_flight`.
    pub const DEFAULT_MAX_IN_FLIGHT: u32 = 10;
    /// Default `request_timeout_ms`.
    pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
    /// Default `retry_backoff_base_ms` (Sequin's 1 s).
    pub const DEFAULT_RETRY_BACKOFF_BASE_MS: u64 = 1_000;
    /// Default `retry_backoff_max_ms` (Sequin's 10 min).
    pub const DEFAULT_RETRY_BACKOFF_MAX_MS: u64 = 600_000;

    /// The request timeout as a duration.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

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
        match (&self.username, &self.password, self.sasl_mechanism) {
            (Some(_), Some(_), Some(_)) | (None, None, None) => {}
            (None, Some(_), _) => problems.push((
                "password",
                "is set without `username`; SASL needs `username`, `password` and `sasl_mechanism`"
                    .into(),
            )),
            (Some(_), None, _) => problems.push((
                "username",
                "is set without `password`; SASL needs `username`, `password` and `sasl_mechanism`"
                    .into(),
            )),
            (Some(_), Some(_), None) => problems.push((
                "sasl_mechanism",
                "is required with `username`/`password`: one of plain, scram_sha_256, scram_sha_512"
                    .into(),
            )),
            (None, None, Some(_)) => problems.push((
                "sasl_mechanism",
                "is set without credentials; set `username` and `password` too, or remove it"
                    .into(),
            )),
        }
        if self.tls_ca_file.is_some() && !self.tls {
            problems.push((
                "tls_ca_file",
                "is only used over TLS; set `tls: true` too".into(),
            ));
        }
        if self.retry_backoff_max_ms < self.retry_backoff_base_ms {
            problems.push((
                "retry_backoff_max_ms",
                format!(
                    "{} is below retry_backoff_base_ms ({}); the cap must be at least the first delay",
                    self.retry_backoff_max_ms, self.retry_backoff_base_ms
                ),
            ));
        }
        problems
    }

    fn default_batch_size() -> u32 {
        Self::DEFAULT_BATCH_SIZE
    }

    fn default_max_in_flight() -> u32 {
        Self::DEFAULT_MAX_IN_FLIGHT
    }

    fn default_request_timeout_ms() -> u64 {
        Self::DEFAULT_REQUEST_TIMEOUT_MS
    }

    fn default_retry_backoff_base_ms() -> u64 {
        Self::DEFAULT_RETRY_BACKOFF_BASE_MS
    }

    fn default_retry_backoff_max_ms() -> u64 {
        Self::DEFAULT_RETRY_BACKOFF_MAX_MS
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
            .field("batch_size", &self.batch_size)
            .field("max_in_flight", &self.max_in_flight)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("retry_backoff_base_ms", &self.retry_backoff_base_ms)
            .field("retry_backoff_max_ms", &self.retry_backoff_max_ms)
            .finish()
    }
}
