//! A throwaway moto server (`moto_server`, from PyPI's `moto[server]` in the
//! tests' venv), the AWS emulator, owned by one test so that the test can
//! kill it and start it again on the same port (an outage). It keeps
//! everything in memory: after a restart it has no queues.
// Only the conformance suite uses it so far; the e2e binary shares the
// harness.
#![allow(dead_code)]

use std::process::Command;
use std::time::Duration;

use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::config::timeout::TimeoutConfig;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};

use crate::harness::python_tools;
use crate::harness::server_process::ServerProcess;

/// The account moto serves by default: queue URLs name it.
pub const ACCOUNT: &str = "123456789012";

/// The region the tests use.
pub const REGION: &str = "us-east-1";

/// A `moto_server` child process on a loopback port.
pub struct MotoServer {
    process: ServerProcess,
}

impl MotoServer {
    /// Starts a server.
    pub fn start() -> MotoServer {
        let moto = python_tools::command("moto_server");
        let process = ServerProcess::start("moto_server", move |_dir, port| {
            let mut command = Command::new(&moto);
            command
                .args(["-H", "127.0.0.1", "-p"])
                .arg(port.to_string());
            command
        });
        MotoServer { process }
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.process.port()
    }

    /// The URL clients send requests to (a sink's `emulator_base_url`).
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port())
    }

    /// An SQS client of this server, independent of the sink's: plain
    /// HTTP, moto's test credentials, no retries and short timeouts, so
    /// that a read while the server is down fails at once.
    pub fn sqs(&self) -> aws_sdk_sqs::Client {
        let config = aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(REGION))
            .endpoint_url(self.base_url())
            .credentials_provider(Credentials::new("testing", "testing", None, None, "moto"))
            .http_client(aws_smithy_http_client::Builder::new().build_http())
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(1))
                    .operation_timeout(Duration::from_secs(10))
                    .build(),
            )
            .build();
        aws_sdk_sqs::Client::from_conf(config)
    }

    /// Kills the server with SIGKILL.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts it again on the same port, empty.
    pub fn start_again(&mut self) {
        self.process.start_again();
    }
}
