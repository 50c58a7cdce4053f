//! RabbitMQ for tests: a private node a test owns (so that it can stop it
//! and start it again on the same ports and data), and an independent
//! lapin client that declares a test's exchanges and queues, reads them
//! back, and deletes them when dropped.

use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};

use crate::harness::certs::CertFiles;
use crate::harness::server_process::ServerProcess;
use crate::harness::weft::free_port;

/// Where the machine's RabbitMQ listens.
const MACHINE_PORT: u16 = 5672;

/// The port of a RabbitMQ that tests share (each with its own names): the
/// machine's on 5672 if it answers, else one node started for this test
/// process and stopped when it exits.
pub fn shared_port() -> u16 {
    static SHARED: OnceLock<u16> = OnceLock::new();
    static NODE: Mutex<Option<RabbitMqNode>> = Mutex::new(None);
    extern "C" fn stop_node() {
        if let Ok(mut node) = NODE.lock() {
            node.take();
        }
    }
    *SHARED.get_or_init(|| {
        if TcpStream::connect(("127.0.0.1", MACHINE_PORT)).is_ok() {
            return MACHINE_PORT;
        }
        let node = RabbitMqNode::start();
        let port = node.port();
        *NODE.lock().unwrap() = Some(node);
        // SAFETY: registers a plain function; it runs once at process exit.
        unsafe { libc::atexit(stop_node) };
        port
    })
}

/// A `rabbitmq-server` node of its own on loopback ports, with its data
/// in a temporary directory, run as the current user (root in CI).
pub struct RabbitMqNode {
    process: ServerProcess,
    tls_port: Option<u16>,
}

/// The real server script: the packaged `/usr/sbin` wrapper re-runs itself
/// as user rabbitmq, which cannot write the test's temporary directory.
fn rabbitmq_script(name: &str) -> String {
    let real = format!("/usr/lib/rabbitmq/bin/{name}");
    if Path::new(&real).exists() {
        real
    } else {
        name.to_string()
    }
}

fn node_name(port: u16) -> String {
    format!("weft-test-{port}@localhost")
}

impl RabbitMqNode {
    /// Starts a fresh node and waits until it accepts AMQP connections.
    pub fn start() -> RabbitMqNode {
        RabbitMqNode::start_with_tls(None)
    }

    /// Like [`RabbitMqNode::start`], also listening for AMQPS on
    /// [`RabbitMqNode::tls_port`] with certificate `server` (no client
    /// certificates asked for) if given.
    pub fn start_with_tls(server: Option<&CertFiles>) -> RabbitMqNode {
        let dist_port = free_port();
        let tls_port = server.map(|_| free_port());
        let tls_conf = match (server, tls_port) {
            (Some(server), Some(port)) => format!(
                "listeners.ssl.default = 127.0.0.1:{port}\n\
                 ssl_options.certfile = {}\n\
                 ssl_options.keyfile = {}\n\
                 ssl_options.verify = verify_none\n\
                 ssl_options.fail_if_no_peer_cert = false\n",
                server.cert.display(),
                server.key.display()
            ),
            _ => String::new(),
        };
        let process = ServerProcess::start("rabbitmq-server", move |dir, port| {
            for sub in ["home", "mnesia", "log"] {
                std::fs::create_dir_all(dir.join(sub)).unwrap();
            }
            std::fs::write(dir.join("enabled_plugins"), "[].\n").unwrap();
            std::fs::write(
                dir.join("rabbitmq.conf"),
                format!("listeners.tcp.default = 127.0.0.1:{port}\n{tls_conf}"),
            )
            .unwrap();
            let mut command = Command::new(rabbitmq_script("rabbitmq-server"));
            command
                .current_dir(dir)
                .env("HOME", dir.join("home"))
                .env("RABBITMQ_NODENAME", node_name(port))
                .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
                .env("RABBITMQ_NODE_PORT", port.to_string())
                .env("RABBITMQ_DIST_PORT", dist_port.to_string())
                .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
                .env("RABBITMQ_LOG_BASE", dir.join("log"))
                .env("RABBITMQ_PID_FILE", dir.join("rabbitmq.pid"))
                .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
                .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
                .env(
                    "RABBITMQ_SERVER_START_ARGS",
                    "-kernel inet_dist_use_interface {127,0,0,1}",
                );
            command
        });
        RabbitMqNode { process, tls_port }
    }

    /// The node's AMQP port.
    pub fn port(&self) -> u16 {
        self.process.port()
    }

    /// The node's AMQPS port, if it was started with TLS.
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// Starts the node again on the same ports and data directory, so that
    /// durable queues and persistent messages survive a [`Self::stop`].
    pub fn start_again(&mut self) {
        self.process.start_again();
    }

    /// Kills the whole node with SIGKILL (no clean shutdown).
    pub fn stop(&mut self) {
        self.process.kill();
    }

    /// Runs `rabbitmqctl` against this node and returns its output.
    pub fn rabbitmqctl(&self, args: &[&str]) -> String {
        let output = Command::new(rabbitmq_script("rabbitmqctl"))
            .env("HOME", self.process.dir().join("home"))
            .arg("-n")
            .arg(node_name(self.port()))
            .args(args)
            .output()
            .expect("run rabbitmqctl");
        assert!(
            output.status.success(),
            "rabbitmqctl {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

/// One message read back from a queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    /// The exchange it was published to.
    pub exchange: String,
    /// Its routing key.
    pub routing_key: String,
    /// Its `message_id` property.
    pub message_id: Option<String>,
    /// Its `content_type` property.
    pub content_type: Option<String>,
    /// Its `delivery_mode` property (2 = persistent).
    pub delivery_mode: Option<u8>,
    /// Its headers whose values are strings.
    pub headers: Vec<(String, String)>,
    /// The body, as published.
    pub body: Vec<u8>,
}

/// An independent AMQP client on a broker, as user guest on vhost `/`.
/// Deletes the exchanges and queues it declared when dropped.
pub struct Amqp {
    runtime: tokio::runtime::Runtime,
    port: u16,
    client: Mutex<Option<(Connection, Channel)>>,
    declared: Mutex<(Vec<String>, Vec<String>)>,
}

impl Amqp {
    /// A client of the broker on `port` (connecting on first use, and again
    /// after the broker restarted).
    pub fn new(port: u16) -> Amqp {
        Amqp {
            runtime: tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap(),
            port,
            client: Mutex::new(None),
            declared: Mutex::new((Vec::new(), Vec::new())),
        }
    }

    /// Runs `f` with an open channel, reconnecting if the last one died.
    fn with<T>(&self, f: impl AsyncFnOnce(&Channel) -> lapin::Result<T>) -> lapin::Result<T> {
        let mut client = self.client.lock().unwrap();
        self.runtime.block_on(async {
            let alive = client
                .as_ref()
                .is_some_and(|(c, ch)| c.status().connected() && ch.status().connected());
            if !alive {
                let uri = format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port);
                let connection = Connection::connect(&uri, ConnectionProperties::default()).await?;
                let channel = connection.create_channel().await?;
                *client = Some((connection, channel));
            }
            f(&client.as_ref().unwrap().1).await
        })
    }

    /// Declares a durable topic exchange `name`.
    pub fn declare_exchange(&self, name: &str) {
        self.with(async |ch| {
            ch.exchange_declare(
                name.into(),
                ExchangeKind::Topic,
                ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
        })
        .expect("declare exchange");
        remember(&mut self.declared.lock().unwrap().0, name);
    }

    /// Declares durable queue `queue` bound to `exchange` with `pattern`.
    pub fn bind_queue(&self, queue: &str, exchange: &str, pattern: &str) {
        self.bind_queue_with(queue, exchange, pattern, FieldTable::default());
    }

    /// Like [`Amqp::bind_queue`], declaring the queue with `arguments`
    /// (e.g. `x-max-length`).
    pub fn bind_queue_with(
        &self,
        queue: &str,
        exchange: &str,
        pattern: &str,
        arguments: FieldTable,
    ) {
        self.with(async |ch| {
            ch.queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                arguments,
            )
            .await?;
            ch.queue_bind(
                queue.into(),
                exchange.into(),
                pattern.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
        })
        .expect("declare and bind queue");
        remember(&mut self.declared.lock().unwrap().1, queue);
    }

    /// How many messages `queue` holds, without taking any.
    pub fn count(&self, queue: &str) -> u32 {
        self.with(async |ch| {
            ch.queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
        })
        .expect("passive queue declare")
        .message_count()
    }

    /// Takes every message now in `queue` (auto-acked), in queue order.
    pub fn drain(&self, queue: &str) -> Vec<Received> {
        self.try_drain(queue).expect("read queue")
    }

    /// [`Amqp::drain`], or the error while the broker is away.
    pub fn try_drain(&self, queue: &str) -> lapin::Result<Vec<Received>> {
        self.with(async |ch| {
            let mut all = Vec::new();
            while let Some(m) = ch
                .basic_get(queue.into(), BasicGetOptions { no_ack: true })
                .await?
            {
                let p = &m.delivery.properties;
                let headers = p
                    .headers()
                    .as_ref()
                    .map(|h| {
                        h.inner()
                            .iter()
                            .filter_map(|(k, v)| match v {
                                AMQPValue::LongString(s) => Some((k.to_string(), s.to_string())),
                                _ => None,
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                all.push(Received {
                    exchange: m.delivery.exchange.to_string(),
                    routing_key: m.delivery.routing_key.to_string(),
                    message_id: p.message_id().as_ref().map(|s| s.to_string()),
                    content_type: p.content_type().as_ref().map(|s| s.to_string()),
                    delivery_mode: *p.delivery_mode(),
                    headers,
                    body: m.delivery.data.clone(),
                });
            }
            Ok(all)
        })
    }

    /// Drains `queue` into `into` until it holds `count` messages, failing
    /// after `timeout` with `context()` (e.g. weft's log).
    pub fn wait_for(
        &self,
        queue: &str,
        into: &mut Vec<Received>,
        count: usize,
        timeout: Duration,
        context: impl Fn() -> String,
    ) {
        super::wait::until(
            &format!("{count} messages in {queue}"),
            timeout,
            Duration::from_millis(200),
            || {
                into.extend(self.drain(queue));
                if into.len() >= count {
                    Ok(())
                } else {
                    Err(format!("{} of them", into.len()))
                }
            },
            context,
        )
    }
}

impl Drop for Amqp {
    fn drop(&mut self) {
        let (exchanges, queues) = std::mem::take(&mut *self.declared.lock().unwrap());
        // Best effort: the broker may be gone (a stopped private node).
        let _ = self.with(async |ch| {
            for queue in &queues {
                ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                    .await?;
            }
            for exchange in &exchanges {
                ch.exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
                    .await?;
            }
            Ok(())
        });
    }
}

/// Adds `name` to the names to delete on drop, once (deleting a name twice
/// would fail and skip the rest).
fn remember(names: &mut Vec<String>, name: &str) {
    if !names.iter().any(|n| n == name) {
        names.push(name.to_string());
    }
}

/// A name no other test run uses, for exchanges and queues on the shared broker.
pub fn unique_name(prefix: &str) -> String {
    format!("weft-test-{prefix}-{}", uuid::Uuid::new_v4().simple())
}
