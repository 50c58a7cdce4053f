//! The settings of a Kafka sink: `destination:` as written
//! ([`KafkaConfig`]: produce to Kafka topics with the idempotent producer,
//! `acks=all`), and resolved into the librdkafka producer properties they
//! stand for ([`KafkaSettings`]).

use std::fmt;
use std::path::Path;

use serde::Deserialize;
use weft_config::destination::{DeliveryConfig, DeliveryDefaults, PushSettings, rules};

use crate::config::SinkConfig;
use crate::delivery::DeliveryLimits;

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

/// Where OpenSSL keeps the system's CA bundle on common distributions
/// (Debian/Ubuntu/Alpine, RHEL/Fedora, SUSE, others).
const SYSTEM_CA_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// SASL credentials. `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslCredentials {
    /// The mechanism.
    pub mechanism: SaslMechanism,
    /// The user.
    pub username: String,
    /// The password.
    pub password: String,
}

impl fmt::Debug for SaslCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SaslCredentials({}, {}, <redacted>)",
            self.mechanism.protocol_name(),
            self.username
        )
    }
}

/// Everything a Kafka sink needs to deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaSettings {
    /// The sink's name, for the client id and logs.
    pub sink: String,
    /// Bootstrap brokers, `host:port,host:port`.
    pub bootstrap_servers: String,
    /// The configured topic; `None` when routing sets it per message.
    pub topic: Option<String>,
    /// Connect over TLS and verify the brokers.
    pub tls: bool,
    /// Extra CA certificates (PEM text, read from `tls_ca_file`).
    pub tls_ca_pem: Option<String>,
    /// SASL credentials, if any.
    pub sasl: Option<SaslCredentials>,
    /// Batch compression.
    pub compression: Compression,
    /// Batch size, deliveries in flight, retries; `request_timeout` is how
    /// long a message may wait for its delivery report.
    pub limits: DeliveryLimits,
    /// Bound on the producer's queue, in KiB (the sink's `max_memory_mb`).
    pub max_queue_kbytes: u64,
}

impl KafkaSettings {
    /// The settings of the Kafka sink `sink`, whose destination is `kafka`.
    /// Config validation has checked the rules between fields; this reads
    /// `tls_ca_file`, so it fails when that file cannot be read.
    pub fn resolve(sink: &SinkConfig, kafka: &KafkaConfig) -> Result<KafkaSettings, String> {
        let tls_ca_pem = match &kafka.tls_ca_file {
            None => None,
            Some(file) => Some(read_ca_file(Path::new(file))?),
        };
        let sasl = match (&kafka.username, &kafka.password, kafka.sasl_mechanism) {
            (Some(username), Some(password), Some(mechanism)) => Some(SaslCredentials {
                mechanism,
                username: username.clone(),
                password: password.clone(),
            }),
            _ => None,
        };
        Ok(KafkaSettings {
            sink: sink.name.clone(),
            bootstrap_servers: kafka.host_list().join(","),
            topic: kafka.topic.clone(),
            tls: kafka.tls,
            tls_ca_pem,
            sasl,
            compression: kafka.compression,
            limits: DeliveryLimits::resolve(sink, &kafka.delivery),
            max_queue_kbytes: u64::from(sink.max_memory_mb) * 1024,
        })
    }

    /// `security.protocol` for these settings.
    pub fn security_protocol(&self) -> &'static str {
        match (self.tls, self.sasl.is_some()) {
            (false, false) => "plaintext",
            (true, false) => "ssl",
            (false, true) => "sasl_plaintext",
            (true, true) => "sasl_ssl",
        }
    }

    /// The librdkafka properties of the sink's producer, in the order set.
    /// Secrets are included: never log the result.
    pub fn producer_properties(&self) -> Vec<(&'static str, String)> {
        let timeout_ms = self.limits.request_timeout.as_millis() as u64;
        // Enough room for every delivery in flight, twice over (messages
        // of a delivery that timed out may still sit in the queue while
        // their retry is queued).
        let max_messages =
            (u64::from(self.limits.batch_size) * u64::from(self.limits.max_in_flight) * 2)
                .max(1_000);
        let mut properties = vec![
            ("bootstrap.servers", self.bootstrap_servers.clone()),
            ("client.id", format!("weft-{}", self.sink)),
            // Exactly one copy per produce, in order per partition even when
            // librdkafka retries a request (idempotence allows at most five
            // requests in flight per connection and keeps their order).
            ("enable.idempotence", "true".into()),
            ("acks", "all".into()),
            ("max.in.flight.requests.per.connection", "5".into()),
            // Throughput: a delivery hands over its whole batch at once;
            // a short linger lets concurrent deliveries share requests.
            ("linger.ms", "5".into()),
            ("batch.num.messages", "10000".into()),
            ("batch.size", "1000000".into()),
            ("compression.codec", self.compression.codec_name().into()),
            // Every message gets its report within the request timeout:
            // delivered, or failed (then weft retries it).
            ("message.timeout.ms", timeout_ms.to_string()),
            ("request.timeout.ms", timeout_ms.min(30_000).to_string()),
            ("socket.timeout.ms", timeout_ms.min(60_000).to_string()),
            // A missing topic is reported as such, not as a timeout.
            (
                "topic.metadata.propagation.max.ms",
                (timeout_ms / 2).min(30_000).to_string(),
            ),
            // Java's default: the same key lands on the same partition as
            // with Java producers.
            ("partitioner", "murmur2_random".into()),
            ("queue.buffering.max.messages", max_messages.to_string()),
            (
                "queue.buffering.max.kbytes",
                self.max_queue_kbytes.max(1).to_string(),
            ),
            ("reconnect.backoff.ms", "100".into()),
            ("reconnect.backoff.max.ms", "2000".into()),
            ("log.connection.close", "false".into()),
            ("security.protocol", self.security_protocol().into()),
        ];
        if self.tls {
            properties.push(("enable.ssl.certificate.verification", "true".into()));
            properties.push(("ssl.endpoint.identification.algorithm", "https".into()));
            if let Some(pem) = &self.tls_ca_pem {
                // librdkafka loads both: the system bundle from the file and
                // the extra CAs from the string. Without a file, the string
                // alone (it would otherwise skip the system's roots).
                if let Some(bundle) = SYSTEM_CA_BUNDLES.iter().find(|p| Path::new(p).is_file()) {
                    properties.push(("ssl.ca.location", bundle.to_string()));
                }
                properties.push(("ssl.ca.pem", pem.clone()));
            }
        }
        if let Some(sasl) = &self.sasl {
            properties.push(("sasl.mechanism", sasl.mechanism.protocol_name().into()));
            properties.push(("sasl.username", sasl.username.clone()));
            properties.push(("sasl.password", sasl.password.clone()));
        }
        properties
    }
}

/// The PEM text of `tls_ca_file`, or why it cannot be used.
fn read_ca_file(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cannot read the kafka sink's tls_ca_file {}: {e}",
            path.display()
        )
    })?;
    if !text.contains("-----BEGIN CERTIFICATE-----") {
        return Err(format!(
            "the kafka sink's tls_ca_file {} holds no PEM certificate (\"-----BEGIN CERTIFICATE-----\")",
            path.display()
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::delivery::RetryPolicy;

    fn settings() -> KafkaSettings {
        KafkaSettings {
            sink: "orders".into(),
            bootstrap_servers: "k1:9092,k2:9092".into(),
            topic: Some("cdc".into()),
            tls: false,
            tls_ca_pem: None,
            sasl: None,
            compression: Compression::None,
            limits: DeliveryLimits {
                batch_size: 200,
                max_in_flight: 10,
                request_timeout: Duration::from_secs(30),
                retry: RetryPolicy::default(),
            },
            max_queue_kbytes: 128 * 1024,
        }
    }

    fn property(settings: &KafkaSettings, name: &str) -> Option<String> {
        settings
            .producer_properties()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }

    #[test]
    fn the_producer_is_idempotent_and_waits_for_all_replicas() {
        let s = settings();
        assert_eq!(property(&s, "enable.idempotence").as_deref(), Some("true"));
        assert_eq!(property(&s, "acks").as_deref(), Some("all"));
        assert_eq!(
            property(&s, "max.in.flight.requests.per.connection").as_deref(),
            Some("5")
        );
        assert_eq!(property(&s, "message.timeout.ms").as_deref(), Some("30000"));
        assert_eq!(
            property(&s, "queue.buffering.max.kbytes").as_deref(),
            Some("131072")
        );
        assert_eq!(
            property(&s, "security.protocol").as_deref(),
            Some("plaintext")
        );
        assert_eq!(property(&s, "client.id").as_deref(), Some("weft-orders"));
    }

    #[test]
    fn tls_verifies_the_broker_and_adds_the_extra_ca() {
        let mut s = settings();
        s.tls = true;
        s.tls_ca_pem = Some("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n".into());
        assert_eq!(property(&s, "security.protocol").as_deref(), Some("ssl"));
        assert_eq!(
            property(&s, "enable.ssl.certificate.verification").as_deref(),
            Some("true")
        );
        assert_eq!(
            property(&s, "ssl.endpoint.identification.algorithm").as_deref(),
            Some("https")
        );
        assert!(
            property(&s, "ssl.ca.pem")
                .unwrap()
                .contains("BEGIN CERTIFICATE")
        );
    }

    #[test]
    fn sasl_mechanisms_map_to_librdkafka_names() {
        for (mechanism, name, tls, protocol) in [
            (SaslMechanism::Plain, "PLAIN", false, "sasl_plaintext"),
            (
                SaslMechanism::ScramSha256,
                "SCRAM-SHA-256",
                true,
                "sasl_ssl",
            ),
            (
                SaslMechanism::ScramSha512,
                "SCRAM-SHA-512",
                false,
                "sasl_plaintext",
            ),
        ] {
            let mut s = settings();
            s.tls = tls;
            s.sasl = Some(SaslCredentials {
                mechanism,
                username: "weft".into(),
                password: "hunter2".into(),
            });
            assert_eq!(property(&s, "sasl.mechanism").as_deref(), Some(name));
            assert_eq!(property(&s, "security.protocol").as_deref(), Some(protocol));
            assert_eq!(property(&s, "sasl.username").as_deref(), Some("weft"));
            assert_eq!(property(&s, "sasl.password").as_deref(), Some("hunter2"));
            assert!(!format!("{s:?}").contains("hunter2"));
        }
    }

    #[test]
    fn an_unreadable_or_non_pem_ca_file_is_named() {
        let error = read_ca_file(Path::new("/nonexistent/ca.pem")).unwrap_err();
        assert!(error.contains("cannot read the kafka sink's tls_ca_file /nonexistent/ca.pem"));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ca.pem");
        std::fs::write(&file, "not a certificate").unwrap();
        assert!(
            read_ca_file(&file)
                .unwrap_err()
                .contains("holds no PEM certificate")
        );
    }
}
