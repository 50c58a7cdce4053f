//! A throwaway tansu broker (a Kafka-protocol broker) owned by one test, so
//! that the test can kill it and start it again on the same port, and an
//! independent reader built on the rdkafka crate's own consumer.
//!
//! tansu stores in memory here (`memory://`; the build `scripts/test.sh`
//! installs has no disk-backed engine): a restart loses every topic, record
//! and producer id. Outage tests read what arrived before the kill, then
//! recreate the topic after the restart.
//!
//! The binary is `$WEFT_TANSU`, else `~/.cargo/bin/tansu`, else `tansu` on
//! `PATH` (`scripts/test.sh` installs it). For debugging, `WEFT_TANSU_LOG`
//! sets the broker's `RUST_LOG` (default `warn`) and `WEFT_KAFKA_DEBUG` the
//! readers' librdkafka `debug` contexts.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::{Offset, TopicPartitionList};

use crate::harness::certs::CertFiles;
use crate::harness::server_process::ServerProcess;
use crate::harness::tls_proxy::TlsProxy;
use crate::harness::weft::free_port;

/// The tansu binary the tests run, or a panic saying how to get one.
pub fn tansu_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("WEFT_TANSU") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "WEFT_TANSU={} is not a file; point it at a tansu binary or unset it",
            path.display()
        );
        return path;
    }
    if let Some(home) = std::env::var_os("HOME") {
        let cargo = Path::new(&home).join(".cargo/bin/tansu");
        if cargo.is_file() {
            return cargo;
        }
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("tansu"))
            .find(|p| p.is_file())
    });
    on_path.unwrap_or_else(|| {
        panic!(
            "the Kafka tests need the tansu broker and found none: run scripts/test.sh (it installs it), \
             or `cargo install tansu --features dynostore`, or set WEFT_TANSU to a tansu binary"
        )
    })
}

/// One record read back from the broker.
#[derive(Debug, Clone)]
pub struct Record {
    /// Its partition.
    pub partition: i32,
    /// Its offset in the partition.
    pub offset: i64,
    /// Its key.
    pub key: Option<Vec<u8>>,
    /// Its headers, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Its value.
    pub payload: Vec<u8>,
}

impl Record {
    /// The first header called `name`, as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }

    /// The key as text.
    pub fn key_text(&self) -> Option<String> {
        self.key
            .as_ref()
            .map(|k| String::from_utf8_lossy(k).into_owned())
    }
}

/// How a [`TansuBroker`] is started.
#[derive(Debug, Clone, Default)]
pub struct TansuOptions {
    /// Serve TLS with this certificate and key. tansu 0.6 accepts `--cert`
    /// and `--key` but serves plaintext anyway, so a [`TlsProxy`] with this
    /// certificate listens on the advertised port in front of it.
    pub tls: Option<CertFiles>,
    /// The CA the readers verify the TLS broker with.
    pub ca: Option<PathBuf>,
    /// Require SASL authentication from clients. tansu offers only SCRAM
    /// (and OAUTHBEARER) and registers users only from authenticated
    /// clients, so with memory storage no client can ever authenticate:
    /// such a broker can show only that a client attempts SCRAM. The
    /// readers cannot read from it.
    pub authentication: bool,
}

/// A `tansu broker` child process on a loopback port.
pub struct TansuBroker {
    server: ServerProcess,
    /// The port clients use (and tansu advertises): tansu's own, or the TLS
    /// proxy's in front of it.
    port: u16,
    options: TansuOptions,
    _proxy: Option<TlsProxy>,
}

impl TansuBroker {
    /// Starts a plaintext broker without authentication.
    pub fn start() -> TansuBroker {
        TansuBroker::start_with(TansuOptions::default())
    }

    /// Starts a broker with `options`.
    pub fn start_with(options: TansuOptions) -> TansuBroker {
        let binary = tansu_binary();
        let proxy_port = options.tls.as_ref().map(|_| free_port());
        let authentication = options.authentication;
        let server = ServerProcess::start("tansu", move |_dir, port| {
            let advertised = proxy_port.unwrap_or(port);
            let mut command = Command::new(&binary);
            command
                .arg("broker")
                .args(["--listener-url", &format!("tcp://127.0.0.1:{port}")])
                .args([
                    "--advertised-listener-url",
                    &format!("tcp://127.0.0.1:{advertised}"),
                ])
                .args(["--storage-engine", "memory://tansu/"])
                .env(
                    "RUST_LOG",
                    std::env::var("WEFT_TANSU_LOG").unwrap_or_else(|_| "warn".into()),
                );
            if authentication {
                command.arg("--authentication");
            }
            command
        });
        let proxy = options
            .tls
            .as_ref()
            .map(|cert| TlsProxy::start(proxy_port.unwrap(), server.port(), cert));
        TansuBroker {
            port: proxy_port.unwrap_or(server.port()),
            server,
            options,
            _proxy: proxy,
        }
    }

    /// `127.0.0.1:<port>`, for `hosts:` and the readers.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The broker's own log.
    pub fn log_text(&self) -> String {
        self.server.log_text()
    }

    /// Kills the broker with SIGKILL (no clean shutdown). Its memory
    /// storage, and with it every topic, record and producer id, is gone.
    pub fn kill(&mut self) {
        self.server.kill();
    }

    /// Starts the broker again on the same port.
    pub fn start_again(&mut self) {
        self.server.start_again();
    }

    /// Client settings of a reader or admin of this broker.
    fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", self.address())
            .set("log_level", "3");
        if let Ok(debug) = std::env::var("WEFT_KAFKA_DEBUG") {
            config.set("debug", debug).set("log_level", "7");
        }
        if self.options.tls.is_some() {
            // The readers check the CA only, so that a test can serve a
            // certificate naming another host to the sink under test.
            config
                .set("security.protocol", "ssl")
                .set("ssl.endpoint.identification.algorithm", "none");
        }
        if let Some(ca) = &self.options.ca {
            config.set("ssl.ca.location", ca.display().to_string());
        }
        config
    }

    /// Creates `topic` with `partitions` partitions.
    pub fn create_topic(&self, topic: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> =
            self.client_config().create().expect("kafka admin client");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let results = runtime
            .block_on(admin.create_topics(
                &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            ))
            .unwrap_or_else(|e| panic!("create_topics: {e}; broker log:\n{}", self.log_text()));
        for result in results {
            result.unwrap_or_else(|(name, code)| panic!("creating topic {name}: {code}"));
        }
    }

    /// Every record of `topic`, waiting up to `timeout` until there are at
    /// least `count`; per partition in offset order. A fresh consumer reads
    /// and is dropped before returning, so that no reader is connected
    /// when the test kills the broker.
    pub fn read(&self, topic: &str, count: usize, timeout: Duration) -> Vec<Record> {
        let consumer: BaseConsumer = self
            .client_config()
            .set(
                "group.id",
                format!("weft-test-reader-{}", std::process::id()),
            )
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false")
            .create()
            .expect("kafka consumer");
        let metadata = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .expect("topic metadata");
        let mut assignment = TopicPartitionList::new();
        for t in metadata.topics() {
            for p in t.partitions() {
                assignment
                    .add_partition_offset(topic, p.id(), Offset::Beginning)
                    .unwrap();
            }
        }
        assert!(
            assignment.count() > 0,
            "topic {topic} has no partitions; broker log:\n{}",
            self.log_text()
        );
        consumer.assign(&assignment).expect("assign partitions");
        let deadline = Instant::now() + timeout;
        let mut records = Vec::new();
        while records.len() < count && Instant::now() < deadline {
            let Some(next) = consumer.poll(Duration::from_millis(200)) else {
                continue;
            };
            let m = next.unwrap_or_else(|e| panic!("reading {topic}: {e}"));
            let mut headers = Vec::new();
            if let Some(h) = m.headers() {
                for header in h.iter() {
                    headers.push((
                        header.key.to_string(),
                        header.value.map(<[u8]>::to_vec).unwrap_or_default(),
                    ));
                }
            }
            records.push(Record {
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().map(<[u8]>::to_vec),
                headers,
                payload: m.payload().map(<[u8]>::to_vec).unwrap_or_default(),
            });
        }
        records.sort_by_key(|r| (r.partition, r.offset));
        records
    }
}
