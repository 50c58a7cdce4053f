//! The sinks a benchmark drives, each with the consumer that counts what
//! arrived: one [`Target`] per destination type, and a [`LiveTarget`] for
//! the ones the latency scenario measures (both traits are in
//! [`crate::weft_run`], beside the run that drives them).

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use chrono::Utc;
use futures::StreamExt;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde_json::Value;

use crate::DRAIN_TIMEOUT;
use crate::harness::kafka::TansuBroker;
use crate::harness::nats::NatsServer;
use crate::harness::webhook_receiver::{Mode, Receiver, SECRET, TOKEN};
use crate::harness::weft::WeftProcess;
use crate::weft_run::{Arrival, LiveTarget, Run, Target};

/// Polls `arrived` until it reaches `count` and returns when it did, or
/// panics after [`DRAIN_TIMEOUT`] with weft's log.
fn wait_until_count(
    weft: &WeftProcess,
    count: usize,
    mut arrived: impl FnMut() -> usize,
) -> Instant {
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    loop {
        let n = arrived();
        if n >= count {
            return Instant::now();
        }
        if Instant::now() > deadline {
            let log = weft.log_text();
            let tail = &log[log.len().saturating_sub(4000)..];
            panic!("{n} of {count} messages arrived; weft log tail:\n{tail}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Panics unless `message` went through the upcase transform exactly when
/// the run has one, so that a run cannot silently measure the wrong thing.
pub fn check_transformed(run: &Run, message: &Value) {
    let stamped = message["record"]["transformed_by"] == "weft-upcase";
    assert_eq!(
        stamped, run.transform,
        "message {message} of run {} (transform: {})",
        run.sink, run.transform
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// NATS with JetStream: a stream per run capturing the run's default
/// subjects `sequin.<database>.>`; weft awaits each PubAck.
pub struct NatsTarget {
    server: NatsServer,
    rt: tokio::runtime::Runtime,
}

impl NatsTarget {
    /// Starts a `nats-server -js` for the benchmark.
    pub fn start() -> NatsTarget {
        NatsTarget {
            server: NatsServer::start(),
            rt: runtime(),
        }
    }

    fn stream_name(database: &str) -> String {
        format!("BENCH_{}", database.to_uppercase())
    }
}

impl Target for NatsTarget {
    fn label(&self) -> String {
        "NATS JetStream".into()
    }

    fn key(&self) -> &'static str {
        "nats"
    }

    fn destination(&self, _database: &str) -> String {
        format!(
            "      type: nats\n      host: 127.0.0.1\n      port: {}\n",
            self.server.port()
        )
    }

    fn prepare(&self, database: &str) {
        self.rt.block_on(async {
            jetstream::new(self.server.client().await)
                .create_stream(jetstream::stream::Config {
                    name: Self::stream_name(database),
                    subjects: vec![format!("sequin.{database}.>")],
                    ..Default::default()
                })
                .await
                .expect("create the JetStream stream");
        });
    }

    fn drain(&self, run: &Run, weft: &WeftProcess, count: usize) -> Instant {
        let mut stream = self.rt.block_on(async {
            jetstream::new(self.server.client().await)
                .get_stream(Self::stream_name(&run.database))
                .await
                .expect("the run's stream")
        });
        let done = wait_until_count(weft, count, || {
            self.rt.block_on(async {
                stream.info().await.expect("stream info").state.messages as usize
            })
        });
        let last = self.rt.block_on(async {
            let last = stream
                .info()
                .await
                .expect("stream info")
                .state
                .last_sequence;
            stream
                .get_raw_message(last)
                .await
                .expect("the last message")
        });
        check_transformed(run, &serde_json::from_slice(&last.payload).expect("JSON"));
        done
    }
}

impl LiveTarget for NatsTarget {
    fn subscribe(&self, database: &str) -> mpsc::Receiver<Arrival> {
        let (sender, receiver) = mpsc::channel();
        let (client, mut subscription) = self.rt.block_on(async {
            let client = self.server.client().await;
            let subscription = client
                .subscribe(format!("sequin.{database}.>"))
                .await
                .expect("subscribe");
            client.flush().await.expect("flush the subscription");
            (client, subscription)
        });
        self.rt.spawn(async move {
            // The connection carries the subscription: keep it open.
            let _client = client;
            while let Some(message) = subscription.next().await {
                let arrival = (Utc::now(), message.payload.to_vec());
                if sender.send(arrival).is_err() {
                    break;
                }
            }
        });
        receiver
    }
}

/// The pull sink (`sequin_stream`): several consumers each receiving up to
/// 1000 messages and acking them, until every message is acked.
pub struct PullTarget {
    consumers: usize,
}

impl PullTarget {
    /// A target with `consumers` concurrent receive/ack loops.
    pub fn new(consumers: usize) -> PullTarget {
        PullTarget { consumers }
    }
}

impl Target for PullTarget {
    fn label(&self) -> String {
        format!(
            "pull (receive+ack, batch 1000, {} consumers)",
            self.consumers
        )
    }

    fn key(&self) -> &'static str {
        "pull"
    }

    fn destination(&self, _database: &str) -> String {
        "      type: sequin_stream\n".into()
    }

    fn drain(&self, run: &Run, weft: &WeftProcess, count: usize) -> Instant {
        let acked = AtomicUsize::new(0);
        let keys = Mutex::new(HashSet::new());
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        let done = Mutex::new(None);
        std::thread::scope(|scope| {
            for _ in 0..self.consumers {
                scope.spawn(|| {
                    while acked.load(Ordering::SeqCst) < count {
                        assert!(
                            Instant::now() < deadline,
                            "pull consumers acked {} of {count}",
                            acked.load(Ordering::SeqCst)
                        );
                        let batch = weft.receive(&run.sink, 1000, 500);
                        if batch.is_empty() {
                            continue;
                        }
                        let ids: Vec<&str> = batch
                            .iter()
                            .map(|m| m["ack_id"].as_str().expect("ack_id"))
                            .collect();
                        let (status, body) = weft.settle(&run.sink, "ack", &ids);
                        assert_eq!(status, 200, "ack failed: {body}");
                        let mut seen = keys.lock().unwrap();
                        for m in &batch {
                            check_transformed(run, &m["data"]);
                            let key = m["data"]["metadata"]["idempotency_key"]
                                .as_str()
                                .expect("idempotency_key");
                            seen.insert(key.to_string());
                        }
                        acked.store(seen.len(), Ordering::SeqCst);
                        if seen.len() >= count {
                            done.lock().unwrap().get_or_insert_with(Instant::now);
                        }
                    }
                });
            }
        });
        assert_eq!(
            keys.into_inner().unwrap().len(),
            count,
            "distinct messages acked"
        );
        done.into_inner().unwrap().expect("the last ack's time")
    }
}

/// The webhook sink in batch mode (1000 messages per request) to the
/// harness receiver, which checks every request's signature. Each run posts
/// to its own path.
pub struct WebhookTarget {
    receiver: Receiver,
}

impl WebhookTarget {
    /// Starts the receiver, accepting every valid request.
    pub fn start() -> WebhookTarget {
        WebhookTarget {
            receiver: Receiver::start(Mode::Accept),
        }
    }
}

impl Target for WebhookTarget {
    fn label(&self) -> String {
        "webhook (batch 1000)".into()
    }

    fn key(&self) -> &'static str {
        "hook"
    }

    fn top_level(&self) -> String {
        format!(
            "http_endpoints:\n  - name: receiver\n    url: http://{}\n    headers: {{ X-Test: plain }}\n    encrypted_headers: {{ Authorization: \"{TOKEN}\" }}\n    signing_secret: {SECRET}\n",
            self.receiver.addr
        )
    }

    fn destination(&self, database: &str) -> String {
        format!(
            "      type: webhook\n      http_endpoint: receiver\n      http_endpoint_path: /{database}\n      batch: true\n      batch_size: 1000\n"
        )
    }

    fn drain(&self, run: &Run, weft: &WeftProcess, count: usize) -> Instant {
        let path = format!("/{}", run.database);
        let on_path = |s: &crate::harness::webhook_receiver::State| {
            s.accepted.iter().filter(|(p, _)| *p == path).count()
        };
        let done = wait_until_count(weft, count, || self.receiver.with(on_path));
        self.receiver.with(|s| {
            s.accepted
                .iter()
                .filter(|(p, _)| *p == path)
                .for_each(|(_, m)| check_transformed(run, m))
        });
        let distinct = self.receiver.with(|s| {
            s.accepted
                .iter()
                .filter(|(p, _)| *p == path)
                .filter_map(|(_, m)| m["metadata"]["idempotency_key"].as_str())
                .collect::<HashSet<&str>>()
                .len()
        });
        assert_eq!(distinct, count, "distinct messages the webhook accepted");
        assert!(
            self.receiver.with(|s| s.bad_requests.is_empty()),
            "the receiver rejected requests"
        );
        done
    }
}

/// Kafka through a tansu broker from the harness: a topic per run (one
/// partition), read back by the harness's reader; live arrivals read by an
/// rdkafka consumer from the topic's start.
pub struct KafkaTarget {
    broker: TansuBroker,
}

impl KafkaTarget {
    /// Starts a tansu broker for the benchmark.
    pub fn start() -> KafkaTarget {
        KafkaTarget {
            broker: TansuBroker::start(),
        }
    }

    fn topic(database: &str) -> String {
        format!("bench.{database}")
    }

    fn consumer(&self) -> BaseConsumer {
        ClientConfig::new()
            .set("bootstrap.servers", self.broker.address())
            .set("group.id", format!("weft-bench-{}", std::process::id()))
            .set("enable.auto.commit", "false")
            // Fetch requests return as soon as a record is there; without
            // this the reader, not weft, adds up to 500 ms of latency on a
            // broker that holds fetches for the full wait.
            .set("fetch.wait.max.ms", "5")
            .set("log_level", "3")
            .create()
            .expect("kafka consumer")
    }
}

impl Target for KafkaTarget {
    fn label(&self) -> String {
        "Kafka (tansu broker)".into()
    }

    fn key(&self) -> &'static str {
        "kafka"
    }

    fn destination(&self, database: &str) -> String {
        format!(
            "      type: kafka\n      hosts: {}\n      topic: {}\n",
            self.broker.address(),
            Self::topic(database)
        )
    }

    fn prepare(&self, database: &str) {
        self.broker.create_topic(&Self::topic(database), 1);
    }

    fn drain(&self, run: &Run, weft: &WeftProcess, count: usize) -> Instant {
        // The harness's reader consumes from the topic's start as weft
        // produces, returning once `count` records arrived.
        let records = self
            .broker
            .read(&Self::topic(&run.database), count, DRAIN_TIMEOUT);
        let done = Instant::now();
        assert!(
            records.len() >= count,
            "{} of {count} records arrived; weft log:\n{}",
            records.len(),
            weft.log_text()
        );
        let last = records.last().expect("a record");
        check_transformed(run, &serde_json::from_slice(&last.payload).expect("JSON"));
        done
    }
}

impl LiveTarget for KafkaTarget {
    fn subscribe(&self, database: &str) -> mpsc::Receiver<Arrival> {
        let (sender, receiver) = mpsc::channel();
        let consumer = self.consumer();
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(&Self::topic(database), 0, Offset::Beginning)
            .expect("assign partition 0");
        consumer.assign(&assignment).expect("assign partitions");
        std::thread::spawn(move || {
            loop {
                let Some(next) = consumer.poll(Duration::from_millis(100)) else {
                    continue;
                };
                // An error ends the reader (the broker stops at the end
                // of the run); a run that still waits then fails with the
                // count it got.
                let Ok(record) = next else {
                    break;
                };
                let arrival = (Utc::now(), record.payload().unwrap_or_default().to_vec());
                if sender.send(arrival).is_err() {
                    break;
                }
            }
        });
        receiver
    }
}
